"""Exact oracle values at large P: ``python benchmarks/large_p.py [--P 65536] [--trees 16]``.

Runs ``brwsim.oracle_values`` twice per law (the first run compiles)
with brwsim's defaults (batch size, one XLA CPU device per core) and prints
the second run's time, trees/s, E[X] at P with its standard error, and the
process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import jax
import numpy as np

from brwsim import one_cpu_device_per_core, oracle_values
from brwsim.laws import parse_law
from brwsim.testing import table_law

one_cpu_device_per_core()  # as the brwsim command: one XLA CPU device per core

LAWS = ["table:V=64", "zipf:V=1000,s=1.1,s_sd=0.3"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, default=65536)
    ap.add_argument("--trees", type=int, default=16)
    ap.add_argument("--laws", default=";".join(LAWS), help="';'-separated SPECs; 'table:V=64' is the benchmark law")
    args = ap.parse_args(argv)
    specs = [s.strip() for s in args.laws.split(";") if s.strip()]
    for spec in specs:
        law = table_law(int(spec.split("=")[1])) if spec.startswith("table:") else parse_law(spec)
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            values, _ = oracle_values(jax.random.key(0), law, args.P, args.trees, progress=False)
            times.append(time.perf_counter() - t0)
        v = values[:, -1]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(
            f"{spec:<30} P={args.P} trees={args.trees}: {times[1]:.1f} s ({args.trees / times[1]:.2f} trees/s; "
            f"first run {times[0]:.1f} s), E[X] = {v.mean():.3f} +- {v.std(ddof=1) / np.sqrt(len(v)):.3f} (se), "
            f"peak RSS {rss:.1f} GB",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
