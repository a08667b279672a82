"""Benchmark: the brwsim oracle (JAX and native kernels) against a compiled (C) best-first search and heapq.

    python benchmarks/oracle.py [--P 16,64,256,1024,4096] [--V 64] [--repeats 5] [--json]
    python benchmarks/oracle.py --law SPEC [--law SPEC ...] [--P ...]   # ns per node of any law

For each P it builds the oracle trees of the same batch of tree keys with
``brwsim.oracle.oracle_batch`` (default batch size, after compilation; the
JAX kernel, and the native CPU kernel ``kernel="native"``, which must give the
JAX kernel's trees bit for bit), with
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
  thread; nanoseconds per node of each, by the wall clock and by the
  process's CPU time (the time the side actually held its core: robust to
  other processes' load);
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
from brwsim._lowering import unrolled_threefry
from brwsim.laws import parse_law
from brwsim.oracle import _native
from brwsim.testing import reference_batch, root_rows, stored_rows, table_law, table_rows
from brwsim.tree import tree_value

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_c import oracle_c  # noqa: E402  (the compiled reference, beside this script)

# Like the brwsim command: one XLA CPU device per core, each batch split over
# them (--devices N for fewer); set before jax's backend starts.
one_cpu_device_per_core()


FLOOR_NS = 9.0  # benchmarks/floor.py: data and arithmetic of one node on this core (ns)


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


def _timed_both(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, every thread) of one call."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


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
        self.name, self.run, self.n, self.rates, self.cpu_rates = name, run, n, [], []

    def round(self) -> None:
        wall, cpu = _timed_both(self.run)
        self.rates.append(self.n / wall)
        self.cpu_rates.append(self.n / max(cpu, 1e-9))

    @property
    def median(self) -> float:
        return float(np.median(self.rates))

    @property
    def cpu_median(self) -> float:
        """Trees per CPU-second: on a pinned side, the time it actually held its core (robust to load)."""
        return float(np.median(self.cpu_rates))


def _brwsim_side(name, law, P, K, devices, batch, kernel="jax"):
    devs = resolve_devices(devices)
    n_dev = len(devs) if devs else 1
    B = batch or O.default_batch(law, P) * n_dev
    B = -(-B // n_dev) * n_dev
    keys = tree_keys(jax.random.key(0), 0, B)

    def run():
        return jax.block_until_ready(O.oracle_batch(law, keys, P, K, devices=devs, kernel=kernel))

    t_first = _timed(run)
    side = _Side(name, run, B)
    side.first_s, side.devices, side.keys, side.tree = t_first, n_dev, keys, run()
    return side


def _c_side(name, table, roots, P, K, threads, seconds):
    rate = 16 / _timed(lambda: oracle_c(table, roots[:16], P, K, threads=1))
    n = int(min(len(roots), max(16 * threads, seconds * rate * threads)))
    return _Side(name, lambda: oracle_c(table, roots[:n], P, K, threads=threads), n)


def _check_all(P, K, rows, table, roots, both, nat) -> dict:
    """Exactness of every side against the references (a SystemExit if any differ), and the float32 error."""
    n_check = int(min(both.n, max(4, 20000 // P)))
    t0 = time.perf_counter()
    ref = reference_batch(rows, roots[:n_check], P, K)
    heap_rate0 = n_check / (time.perf_counter() - t0)
    _check_exact(P, both.tree, ref, "heapq")
    _check_exact(P, both.tree, oracle_c(table, roots, P, K, threads=2), "compiled")
    if nat is not None:  # the native kernel: the JAX kernel's trees, every field, bit for bit
        same = all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(nat.tree, both.tree, strict=True))
        if not same:
            raise SystemExit(f"P={P}: the native and JAX kernels disagree")
    lp64, _, _ = reference_batch(rows, roots[:n_check], P, K, dtype="float64")
    v32, v64 = np.exp(ref[0]).sum(1), np.exp(lp64).sum(1)
    v_jax = np.asarray(tree_value(both.tree)[:n_check], np.float64)  # float32 sum in JAX
    return {
        "exact_trees_checked": n_check,
        "heap_rate0": heap_rate0,
        "float32_vs_float64_value_rel_err": float(np.max(np.abs(v32 - v64) / v64)),
        "jax_float32_sum_rel_err": float(np.max(np.abs(v_jax - v64) / v64)),
    }


def _rounds(repeats: int, all_cores: list, one_core: list, unpinned: list) -> None:
    """Interleaved rounds: load from other processes hits every side alike; one-core sides pinned to one CPU."""
    all_cpus = os.sched_getaffinity(0)
    for _ in range(repeats):
        for side in all_cores:
            side.round()
        pin({min(all_cpus)})
        try:
            for side in one_core:
                side.round()
        finally:
            pin(all_cpus)
        for side in unpinned:
            side.round()


def _native_fields(P: int, cores: int, nat, nat1, c2, c1_pinned) -> dict:
    if nat is None:
        return {}
    ns1 = 1e9 / (nat1.median * P)
    return {
        "native_trees_per_s": nat.median,
        "native_one_core_trees_per_s": nat1.median,
        "native_ratio_compiled": nat.median / c2.median,
        "native_ratio_compiled_one_core": nat1.median / c1_pinned.median,
        "native_ns_per_node_per_core": 1e9 * cores / (nat.median * P),
        "native_one_core_ns_per_node": ns1,
        "native_one_core_over_floor": ns1 / FLOOR_NS,
        "native_one_core_cpu_ns_per_node": 1e9 / (nat1.cpu_median * P),
        "native_ratio_compiled_one_core_cpu": nat1.cpu_median / c1_pinned.cpu_median,
        "native_compile_s": max(0.0, nat.first_s - nat.n / nat.median),
    }


def bench_P(law, rows, P: int, repeats: int, ref_seconds: float, batch, log, devices=None, native=True) -> dict:
    K = min(law.vocab, P)
    table = np.asarray(law.logp, np.float32)
    both = _brwsim_side("brwsim", law, P, K, devices, batch)
    nat = _brwsim_side("native", law, P, K, devices, batch, kernel="native") if native else None
    roots = root_rows(law, both.keys)
    checks = _check_all(P, K, rows, table, roots, both, nat)
    cores = len(os.sched_getaffinity(0))
    one = _brwsim_side("brwsim 1 core", law, P, K, 1, None)
    nat1 = _brwsim_side("native 1 core", law, P, K, 1, None, kernel="native") if native else None
    c1, c2 = (_c_side(f"C x{t}", table, roots, P, K, t, ref_seconds) for t in (1, cores))
    c1_pinned = _c_side("C 1 core", table, roots, P, K, 1, ref_seconds)
    n_heap = int(min(both.n, max(2, ref_seconds * checks.pop("heap_rate0"))))
    heap = _Side("heapq", lambda: reference_batch(rows, roots[:n_heap], P, K), n_heap)
    _rounds(repeats, [x for x in (both, nat, c2, heap) if x], [x for x in (one, nat1, c1_pinned) if x], [c1])
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
        "brwsim_one_core_cpu_ns_per_node": 1e9 / (one.cpu_median * P),
        "compiled_one_core_cpu_ns_per_node": 1e9 / (c1_pinned.cpu_median * P),
        **_native_fields(P, cores, nat, nat1, c2, c1_pinned),
        "reference_trees_per_s": heap.median,
        "ratio": both.median / heap.median,
        "ratio_min": float(np.min(np.array(both.rates) / np.array(heap.rates))),
        "ratio_max": float(np.max(np.array(both.rates) / np.array(heap.rates))),
        "compile_s": max(0.0, both.first_s - both.n / both.median),
        **checks,
        "oracle_bytes_per_tree": O.oracle_memory(law, P, K),
        "peak_rss_mb": _peak_rss_mb(),
        "devices": both.devices,
    }
    log(_row(res))
    return res


def _row(r: dict) -> str:
    """One line of the table (native columns blank without the native kernel)."""
    nat = (
        f"{r['native_trees_per_s']:>11.0f} {r['native_ratio_compiled']:>6.2f} "
        f"{r['native_one_core_trees_per_s']:>11.0f} {r['native_ratio_compiled_one_core']:>6.2f} "
        f"{r['native_one_core_ns_per_node']:>7.1f}"
        if "native_trees_per_s" in r
        else " " * 46
    )
    return (
        f"{r['P']:>6} {r['batch']:>6} {r['brwsim_trees_per_s']:>11.0f} {r['compiled_trees_per_s']:>11.0f} "
        f"{r['ratio_compiled']:>6.2f} {r['brwsim_one_core_trees_per_s']:>11.0f} "
        f"{r['compiled_one_core_trees_per_s']:>11.0f} {r['ratio_compiled_one_core']:>6.2f} "
        f"{r['brwsim_one_core_ns_per_node']:>7.1f} {r['compiled_one_core_ns_per_node']:>7.1f} {nat} "
        f"{r['reference_trees_per_s']:>9.0f} {r['ratio']:>6.1f}"
    )


def bench_law(spec: str, P: int, repeats: int, log) -> dict:
    """ns per node of one law on one core (pinned): the JAX kernel and, where it serves, the native one."""
    law = parse_law(spec)
    K = min(law.vocab, P)
    served = _native.program(law) is not None and _native.available()
    sides = [_brwsim_side("jax", law, P, K, 1, None)]
    if served:
        sides.append(_brwsim_side("native", law, P, K, 1, None, kernel="native"))
        if not all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(*(t.tree for t in sides), strict=True)):
            raise SystemExit(f"{spec} P={P}: the native and JAX kernels disagree")
    draws = None if law.indexed else _draw_side(law, P, K)
    _rounds(repeats, [], sides + ([draws] if draws else []), [])
    res = {"law": spec, "P": P, "batch": sides[0].n, "jax_one_core_ns_per_node": 1e9 / (sides[0].median * P)}
    res["jax_one_core_cpu_ns_per_node"] = 1e9 / (sides[0].cpu_median * P)
    if served:
        res["native_one_core_ns_per_node"] = 1e9 / (sides[1].median * P)
        res["native_one_core_cpu_ns_per_node"] = 1e9 / (sides[1].cpu_median * P)
    if draws:  # where a drawn law's time goes: its node draws alone
        res["draw_one_core_ns_per_node"] = 1e9 / draws.median
        res["draw_one_core_cpu_ns_per_node"] = 1e9 / draws.cpu_median
    nat = f"{res['native_one_core_ns_per_node']:>9.1f}" if served else f"{'(JAX)':>9}"
    drw = f"{res['draw_one_core_ns_per_node']:>9.1f}" if draws else ""
    log(f"{spec[-40:]:>40} {P:>6} {res['batch']:>6} {res['jax_one_core_ns_per_node']:>9.1f} {nat} {drw}")
    return res


def _draw_side(law, P: int, K: int):
    """The node draws of a drawn law alone (its K sorted entries from a node key), batched as in the kernel."""
    Kc = O.keep_entries(P, K)
    n = min(O.default_batch(law, P), 4096)
    keys = tree_keys(jax.random.key(1), 0, n)
    draw = jax.jit(jax.vmap(lambda k: law.node_logp(k, 0, Kc)))
    with unrolled_threefry():  # compiled as the kernel's own draws are
        jax.block_until_ready(draw(keys))
    return _Side("draws", lambda: jax.block_until_ready(draw(keys)), n)


def _parser() -> argparse.ArgumentParser:
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
    ap.add_argument(
        "--law",
        action="append",
        default=None,
        help="instead: ns per node of this law SPEC on one core, JAX and native kernels (repeatable)",
    )
    ap.add_argument("--json", action="store_true")
    return ap


def _header(log) -> None:
    log(
        f"{'':>13} {'all cores (trees/s)':^30} {'one core (trees/s, pinned)':^31} {'ns/node, 1 core':^15} "
        f"{'native: all cores, one core, ns/node':^46} {'heapq':^16}\n"
        f"{'P':>6} {'batch':>6} {'brwsim':>11} {'C':>11} {'ratio':>6} {'brwsim':>11} {'C':>11} "
        f"{'ratio':>6} {'brwsim':>7} {'C':>7} {'native':>11} {'/C':>6} {'native':>11} {'/C':>6} {'ns':>7} "
        f"{'trees/s':>9} {'ratio':>6}"
    )


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    P_list = [int(x) for x in args.P.split(",") if x.strip()]
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    t_start = time.perf_counter()
    if args.law:
        log(f"{'law':>40} {'P':>6} {'batch':>6} {'JAX ns':>9} {'native ns':>9} {'draw ns':>9} (one core, pinned)")
        results = [bench_law(spec, P, args.repeats, log) for spec in args.law for P in P_list]
        law_name, path = ",".join(args.law), "as the law serves"
    else:
        law = table_law(args.V, n_rows=args.rows)
        rows = table_rows(law)
        if args.stored_rows:
            law = stored_rows(law)
        native = not args.stored_rows and _native.available()
        path = "stored rows" if args.stored_rows else "row indices"
        log(
            f"table law V={args.V}, {args.rows} rows (Dirichlet 0.1), oracle path: {path}; "
            f"{len(resolve_devices(args.devices))} devices; {os.cpu_count()} cpus; jax {jax.__version__}"
        )
        _header(log)
        results = [
            bench_P(law, rows, P, args.repeats, args.ref_seconds, args.batch, log, args.devices, native) for P in P_list
        ]
        law_name = f"table:V={args.V},rows={args.rows}"
    total = time.perf_counter() - t_start
    log(f"total {total:.0f} s")
    if args.json:
        out = {
            "results": results,
            "law": law_name,
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
