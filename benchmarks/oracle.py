"""Benchmark: the brwsim oracle against a plain heapq best-first reference.

    python benchmarks/oracle.py [--P 16,64,256,1024,4096] [--V 64] [--repeats 5] [--json]

For each P it builds the oracle trees of the same batch of tree keys with
``brwsim.oracle.oracle_batch`` (default batch size, after compilation) and with
``brwsim.testing.oracle_heapq`` (pure Python, one tree at a time), checks that
the two agree exactly (float32 log P, parent, rank of every node), then times
them interleaved in one process (brwsim, reference, brwsim, ...), so that
load from other processes hits both alike. Both read the same precomputed node
distributions (``brwsim.testing.TableLaw``), so the selection is timed, not
the law. It also reports the float32 error: the value sum_v P(v) of each
reference tree built in float32 against one built in float64 (same table).

Output: a table, or with ``--json`` one object
``{"results": [{"P", "brwsim_trees_per_s", "reference_trees_per_s", "ratio", "compile_s", ...}], ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import jax
import numpy as np

from brwsim import one_cpu_device_per_core, resolve_devices, tree_keys
from brwsim import oracle as O
from brwsim.testing import reference_batch, root_rows, stored_rows, table_law, table_rows
from brwsim.tree import tree_value

# Like the brwsim command: one XLA CPU device per core, each batch split over
# them (--devices N for fewer); set before jax's backend starts.
one_cpu_device_per_core()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_P(law, rows, P: int, repeats: int, ref_seconds: float, batch: int | None, log, devices=None) -> dict:
    K = min(law.vocab, P)
    devs = resolve_devices(devices)
    n_dev = len(devs) if devs else 1
    B = batch or O.default_batch(law, P) * n_dev
    B = -(-B // n_dev) * n_dev
    keys = tree_keys(jax.random.key(0), 0, B)
    roots = root_rows(law, keys)

    t0 = time.perf_counter()
    tree = jax.block_until_ready(O.oracle_batch(law, keys, P, K, devices=devs))
    first = time.perf_counter() - t0
    # exactness on a sample of trees (all of them when cheap)
    n_check = int(min(B, max(4, 20000 // P)))
    t0 = time.perf_counter()
    lp, par, rank = reference_batch(rows, roots[:n_check], P, K)
    ref_rate0 = n_check / (time.perf_counter() - t0)
    got_lp = np.asarray(tree.logP[:n_check], np.float64)
    exact = (
        np.array_equal(got_lp, lp)
        and np.array_equal(np.asarray(tree.parent[:n_check]), par)
        and np.array_equal(np.asarray(tree.rank[:n_check]), rank)
    )
    if not exact:
        raise SystemExit(f"P={P}: brwsim and the heapq reference disagree")
    lp64, _, _ = reference_batch(rows, roots[:n_check], P, K, dtype="float64")
    v32, v64 = np.exp(lp).sum(1), np.exp(lp64).sum(1)
    v_jax = np.asarray(tree_value(tree)[:n_check], np.float64)  # float32 sum in JAX
    f32_err = float(np.max(np.abs(v32 - v64) / v64))
    sum_err = float(np.max(np.abs(v_jax - v64) / v64))

    n_ref = int(min(B, max(2, ref_seconds * ref_rate0)))
    b_rates, r_rates = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(O.oracle_batch(law, keys, P, K, devices=devs))
        b_rates.append(B / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        reference_batch(rows, roots[:n_ref], P, K)
        r_rates.append(n_ref / (time.perf_counter() - t0))
    b_med, r_med = float(np.median(b_rates)), float(np.median(r_rates))
    ratios = np.array(b_rates) / np.array(r_rates)
    compile_s = max(0.0, first - B / b_med)
    res = {
        "P": P,
        "brwsim_trees_per_s": b_med,
        "reference_trees_per_s": r_med,
        "ratio": b_med / r_med,
        "ratio_min": float(ratios.min()),
        "ratio_max": float(ratios.max()),
        "compile_s": compile_s,
        "batch": B,
        "K": K,
        "exact_trees_checked": n_check,
        "float32_vs_float64_value_rel_err": f32_err,
        "jax_float32_sum_rel_err": sum_err,
        "oracle_bytes_per_tree": O.oracle_memory(law, P, K),
        "peak_rss_mb": _peak_rss_mb(),
        "devices": n_dev,
    }
    log(
        f"{P:>6} {B:>6} {b_med:>12.0f} {r_med:>12.1f} {res['ratio']:>7.1f} "
        f"[{res['ratio_min']:>5.1f},{res['ratio_max']:>5.1f}] {compile_s:>8.2f} {res['peak_rss_mb']:>8.0f}"
    )
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", default="16,64,256,1024,4096")
    ap.add_argument("--V", type=int, default=64, help="vocabulary of the table law (default 64)")
    ap.add_argument("--rows", type=int, default=1024, help="rows in the table law (default 1024)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds per P (default 5)")
    ap.add_argument("--ref-seconds", type=float, default=0.4, help="reference time per round (default 0.4 s)")
    ap.add_argument("--batch", type=int, default=None, help="trees per oracle call (default: brwsim's default)")
    ap.add_argument(
        "--devices", default="all", help="split each batch over 'all' XLA CPU devices (one per core, default) or N"
    )
    ap.add_argument(
        "--stored-rows",
        action="store_true",
        help="time the oracle's path for drawn laws (each node's sorted entries stored) instead of row indices",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    P_list = [int(x) for x in args.P.split(",") if x.strip()]
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    law = table_law(args.V, n_rows=args.rows)
    rows = table_rows(law)
    if args.stored_rows:
        law = stored_rows(law)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=os.path.dirname(__file__)
        ).stdout.strip()
    except OSError:  # pragma: no cover
        commit = ""
    t_start = time.perf_counter()
    path = "stored rows" if args.stored_rows else "row indices"
    log(
        f"table law V={args.V}, {args.rows} rows (Dirichlet 0.1), oracle path: {path}; "
        f"{len(resolve_devices(args.devices))} devices; {os.cpu_count()} cpus; jax {jax.__version__}"
    )
    log(
        f"{'P':>6} {'batch':>6} {'brwsim t/s':>12} {'heapq t/s':>12} {'ratio':>7} {'[min, max]':>13} "
        f"{'compile':>8} {'rss MB':>8}"
    )
    results = [bench_P(law, rows, P, args.repeats, args.ref_seconds, args.batch, log, args.devices) for P in P_list]
    total = time.perf_counter() - t_start
    log(f"total {total:.0f} s")
    if args.json:
        out = {
            "results": results,
            "law": f"table:V={args.V},rows={args.rows}",
            "oracle_path": path,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
            "jax": jax.__version__,
            "commit": commit,
            "total_s": total,
            "peak_rss_mb": _peak_rss_mb(),
        }
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
