"""Spine walks per second: ``python benchmarks/spine.py``.

Times ``brwsim.spine.sample_walks`` (65536 walks x 64 steps, after one warm-up
run) for laws whose steps are O(1) or O(log V) and for one whose steps need the
whole distribution (logit-normal, O(V)). Prints steps/s per law.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from brwsim import laws, spine

LAWS = ["fixed:probs=0.6/0.3/0.1", "dirichlet:V=1000,alpha=0.1", "zipf:V=32000,s=1.1", "logitnormal:V=1000,sigma=3"]


def main(walks: int = 65536, depth: int = 64) -> None:
    for spec in LAWS:
        law = laws.parse_law(spec)
        for rep in range(2):  # the first run compiles
            t = time.perf_counter()
            w = spine.sample_walks(jax.random.key(rep), law, walks, depth=depth)
            dt = time.perf_counter() - t
        steps = int(np.isfinite(w.xi).sum())
        print(f"{spec:<32} {steps / dt:>10.3g} steps/s  ({steps} steps in {dt:.2f} s)")


if __name__ == "__main__":
    main()
