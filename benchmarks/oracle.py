"""Benchmark: the brwsim oracle against a compiled (C) best-first search and a plain heapq one.

    python benchmarks/oracle.py [--P 16,64,256,1024,4096] [--V 64] [--repeats 5] [--json]

For each P it builds the oracle trees of the same batch of tree keys with
``brwsim.oracle.oracle_batch`` (default batch size, after compilation), with
the compiled reference ``reference_oracle.c`` (a binary heap, one tree at a
time; built once with the system C compiler, see ``reference_c.py``) and with
``brwsim.testing.oracle_heapq`` (pure Python); checks that all three agree
exactly (float32 log P, parent, rank of every node), then times them
interleaved in one process, round after round, so that load from other
processes hits every side alike:

- all cores: brwsim on one XLA device per core, against the compiled
  reference on one thread per core (the trees split in contiguous chunks);
- one core: the whole process pinned to one CPU (every thread, XLA's
  included), brwsim on one device against the compiled reference on one
  thread; nanoseconds per node of each;
- the heapq reference (as before, for continuity).

All read the same precomputed node distributions (``brwsim.testing.TableLaw``),
so the selection is timed, not the law. It also reports the float32 error: the
value sum_v P(v) of each reference tree built in float32 against one built in
float64 (same table).

Output: a table, or with ``--json`` one object
``{"results": [{"P", "brwsim_trees_per_s", "compiled_trees_per_s", "ratio_compiled", ...}], ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

import jax
import numpy as np

from brwsim import one_cpu_device_per_core, resolve_devices, tree_keys
from brwsim import oracle as O
from brwsim.testing import reference_batch, root_rows, stored_rows, table_law, table_rows
from brwsim.tree import tree_value

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_c import oracle_c  # noqa: E402  (the compiled reference, beside this script)

# Like the brwsim command: one XLA CPU device per core, each batch split over
# them (--devices N for fewer); set before jax's backend starts.
one_cpu_device_per_core()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def pin(cpus) -> None:
    """Run every thread of this process (XLA's included) on these CPUs only; new threads inherit it."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that just ended
            pass


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _check_exact(P, tree, ref, what) -> None:
    lp, par, rank = ref
    n = lp.shape[0]
    ok = (
        np.array_equal(np.asarray(tree.logP[:n], np.float64), np.asarray(lp, np.float64))
        and np.array_equal(np.asarray(tree.parent[:n]), par)
        and np.array_equal(np.asarray(tree.rank[:n]), rank)
    )
    if not ok:
        raise SystemExit(f"P={P}: brwsim and the {what} reference disagree")


class _Side:
    """One contender: a callable that builds ``n`` trees, and its rates over the interleaved rounds."""

    def __init__(self, name, run, n):
        self.name, self.run, self.n, self.rates = name, run, n, []

    def round(self) -> None:
        self.rates.append(self.n / _timed(self.run))

    @property
    def median(self) -> float:
        return float(np.median(self.rates))


def _brwsim_side(name, law, P, K, devices, batch):
    devs = resolve_devices(devices)
    n_dev = len(devs) if devs else 1
    B = batch or O.default_batch(law, P) * n_dev
    B = -(-B // n_dev) * n_dev
    keys = tree_keys(jax.random.key(0), 0, B)
    t_first = _timed(lambda: jax.block_until_ready(O.oracle_batch(law, keys, P, K, devices=devs)))
    side = _Side(name, lambda: jax.block_until_ready(O.oracle_batch(law, keys, P, K, devices=devs)), B)
    side.first_s, side.devices, side.keys = t_first, n_dev, keys
    return side


def _c_side(name, table, roots, P, K, threads, seconds):
    rate = 16 / _timed(lambda: oracle_c(table, roots[:16], P, K, threads=1))
    n = int(min(len(roots), max(16 * threads, seconds * rate * threads)))
    return _Side(name, lambda: oracle_c(table, roots[:n], P, K, threads=threads), n)


def bench_P(law, rows, P: int, repeats: int, ref_seconds: float, batch: int | None, log, devices=None) -> dict:
    K = min(law.vocab, P)
    table = np.asarray(law.logp, np.float32)
    both = _brwsim_side("brwsim", law, P, K, devices, batch)
    roots = root_rows(law, both.keys)
    tree = O.oracle_batch(law, both.keys, P, K, devices=resolve_devices(devices))
    n_check = int(min(both.n, max(4, 20000 // P)))  # exactness against both references
    t0 = time.perf_counter()
    ref = reference_batch(rows, roots[:n_check], P, K)
    heap_rate0 = n_check / (time.perf_counter() - t0)
    _check_exact(P, tree, ref, "heapq")
    _check_exact(P, tree, oracle_c(table, roots, P, K, threads=2), "compiled")
    lp64, _, _ = reference_batch(rows, roots[:n_check], P, K, dtype="float64")
    v32, v64 = np.exp(ref[0]).sum(1), np.exp(lp64).sum(1)
    v_jax = np.asarray(tree_value(tree)[:n_check], np.float64)  # float32 sum in JAX
    cores = len(os.sched_getaffinity(0))
    one = _brwsim_side("brwsim 1 core", law, P, K, 1, None)
    c1, c2 = (_c_side(f"C x{t}", table, roots, P, K, t, ref_seconds) for t in (1, cores))
    c1_pinned = _c_side("C 1 core", table, roots, P, K, 1, ref_seconds)
    n_heap = int(min(both.n, max(2, ref_seconds * heap_rate0)))
    heap = _Side("heapq", lambda: reference_batch(rows, roots[:n_heap], P, K), n_heap)
    all_cpus = os.sched_getaffinity(0)
    for _ in range(repeats):  # interleaved: load from other processes hits every side alike
        for side in (both, c2, heap):
            side.round()
        pin({min(all_cpus)})
        try:
            for side in (one, c1_pinned):
                side.round()
        finally:
            pin(all_cpus)
        c1.round()
    res = {
        "P": P,
        "batch": both.n,
        "K": K,
        "cores": cores,
        "brwsim_trees_per_s": both.median,
        "compiled_trees_per_s": c2.median,
        "ratio_compiled": both.median / c2.median,
        "brwsim_one_core_trees_per_s": one.median,
        "compiled_one_core_trees_per_s": c1_pinned.median,
        "ratio_compiled_one_core": one.median / c1_pinned.median,
        "compiled_one_thread_unpinned_trees_per_s": c1.median,
        "brwsim_ns_per_node_per_core": 1e9 * cores / (both.median * P),
        "brwsim_one_core_ns_per_node": 1e9 / (one.median * P),
        "compiled_one_core_ns_per_node": 1e9 / (c1_pinned.median * P),
        "reference_trees_per_s": heap.median,
        "ratio": both.median / heap.median,
        "ratio_min": float(np.min(np.array(both.rates) / np.array(heap.rates))),
        "ratio_max": float(np.max(np.array(both.rates) / np.array(heap.rates))),
        "compile_s": max(0.0, both.first_s - both.n / both.median),
        "exact_trees_checked": n_check,
        "float32_vs_float64_value_rel_err": float(np.max(np.abs(v32 - v64) / v64)),
        "jax_float32_sum_rel_err": float(np.max(np.abs(v_jax - v64) / v64)),
        "oracle_bytes_per_tree": O.oracle_memory(law, P, K),
        "peak_rss_mb": _peak_rss_mb(),
        "devices": both.devices,
    }
    log(
        f"{P:>6} {both.n:>6} {both.median:>11.0f} {c2.median:>11.0f} {res['ratio_compiled']:>6.2f} "
        f"{one.median:>11.0f} {c1_pinned.median:>11.0f} {res['ratio_compiled_one_core']:>6.2f} "
        f"{res['brwsim_one_core_ns_per_node']:>7.1f} {res['compiled_one_core_ns_per_node']:>7.1f} "
        f"{heap.median:>9.0f} {res['ratio']:>6.1f}"
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
    t_start = time.perf_counter()
    path = "stored rows" if args.stored_rows else "row indices"
    log(
        f"table law V={args.V}, {args.rows} rows (Dirichlet 0.1), oracle path: {path}; "
        f"{len(resolve_devices(args.devices))} devices; {os.cpu_count()} cpus; jax {jax.__version__}"
    )
    log(
        f"{'':>13} {'all cores (trees/s)':^30} {'one core (trees/s, pinned)':^31} {'ns/node, 1 core':^15} "
        f"{'heapq':^16}\n{'P':>6} {'batch':>6} {'brwsim':>11} {'C':>11} {'ratio':>6} {'brwsim':>11} {'C':>11} "
        f"{'ratio':>6} {'brwsim':>7} {'C':>7} {'trees/s':>9} {'ratio':>6}"
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
            "date": time.strftime("%Y-%m-%d"),
            "total_s": total,
            "peak_rss_mb": _peak_rss_mb(),
        }
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
