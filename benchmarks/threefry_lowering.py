"""The oracle compiled with JAX's rolled (CPU default) vs unrolled threefry lowering.

    python benchmarks/threefry_lowering.py [--law SPEC] [--P 64] [--batch 256]

Compiles ``tree._oracle_kernel`` twice in one process, once with JAX's CPU
lowering and once inside ``brwsim.unrolled_threefry`` (two fresh
jitted functions: JAX caches lowerings per traced function), checks the trees
are identical, then times them interleaved (11 rounds, one device) and prints
trees/s of each, compile times and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference_heapq import table_law  # noqa: E402

from brwsim import oracle as O  # noqa: E402
from brwsim import tree_keys, unrolled_threefry  # noqa: E402
from brwsim.laws import parse_law  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--law", default="dirichlet:V=1000,alpha=0.1", help="a SPEC, or 'table' (the benchmark law)")
    ap.add_argument("--P", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args(argv)
    law = table_law(64) if args.law == "table" else parse_law(args.law)
    P, B = args.P, args.batch
    K, shape, keys = min(law.vocab, P), O.frontier_shape(P + 1), tree_keys(jax.random.key(0), 0, B)

    def make():
        return jax.jit(lambda k: O.oracle_kernel(law, k, None, P=P, K=K, Kc=K, shape=shape)[0])

    t0 = time.perf_counter()
    rolled = make()
    a = jax.block_until_ready(rolled(keys))
    c_rolled = time.perf_counter() - t0
    with unrolled_threefry():
        t0 = time.perf_counter()
        unrolled = make()
        b = jax.block_until_ready(unrolled(keys))
        c_unrolled = time.perf_counter() - t0
    if not all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b, strict=True)):
        raise SystemExit("the two lowerings gave different trees")
    ra, rb = [], []
    for _ in range(11):
        for f, rates in ((rolled, ra), (unrolled, rb)):
            t0 = time.perf_counter()
            jax.block_until_ready(f(keys))
            rates.append(B / (time.perf_counter() - t0))
    print(
        f"{args.law} P={P} batch={B}: rolled {np.median(ra):.0f} trees/s (first call {c_rolled:.2f} s), "
        f"unrolled {np.median(rb):.0f} trees/s (first call {c_unrolled:.2f} s), "
        f"ratio {np.median(np.array(rb) / np.array(ra)):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
