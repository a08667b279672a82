"""Sweep the oracle's frontier shape: ``python benchmarks/frontier_shapes.py [--P 16,64,256,1024,4096]``.

For each P, times ``tree._oracle_kernel`` (one device, the benchmark's table
law, brwsim's default batch) at several ``(A, G1, G0)`` shapes of the
three-level frontier (groups x blocks x slots, see ``tree._frontier_shape``)
and prints ns per node, best of 3 after compilation; ``*`` marks the shape
brwsim picks. This is how the default was chosen (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

from brwsim import oracle as O
from brwsim import tree_keys, unrolled_threefry
from brwsim.testing import table_law

BLOCKS = [(1, 2), (1, 8), (2, 4), (2, 8), (4, 4), (4, 8), (8, 8), (16, 4), (16, 8), (32, 8), (16, 16), (32, 32)]


def ns_per_node(law, P: int, B: int, shape) -> float:
    keys = tree_keys(jax.random.key(0), 0, B)
    K = min(law.vocab, P)
    scratch = O.scratch_arrays(P + 1, B, 8, None)
    with unrolled_threefry():
        _, _, scratch = O.oracle_kernel(law, keys, scratch, P=P, K=K, Kc=K, shape=shape)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        out = O.oracle_kernel(law, keys, scratch, P=P, K=K, Kc=K, shape=shape)
        jax.block_until_ready(out)
        scratch = out[2]
        best = min(best, time.perf_counter() - t0)
    return best / (B * P) * 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", default="16,64,256,1024,4096")
    args = ap.parse_args(argv)
    law = table_law(64)
    for P in [int(x) for x in args.P.split(",")]:
        S, B = P + 1, O.default_batch(law, P)
        picked = O.frontier_shape(S)
        shapes = {picked}
        for g1, g0 in BLOCKS:
            A = -(-S // (g1 * g0))
            if 2 <= A <= 160 or (g1 == 1 and A >= 1):
                shapes.add((A, g1, g0))
        res = sorted((ns_per_node(law, P, B, sh), sh) for sh in shapes)
        cells = ", ".join(f"{'*' if sh == picked else ''}{sh}: {t:.0f}" for t, sh in res)
        print(f"P={P} batch={B}: {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
