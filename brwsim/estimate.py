"""The Monte Carlo driver: E[X] of a drafter's tree at each budget P, with confidence intervals.

Tree ``n`` (0-based) of a run with seed ``S`` has key
``fold_in(fold_in(key(S), TREES), n)``; its sampled-continuation check uses
stream ``CHECK`` (:mod:`brwsim._keys`). A run's numbers therefore depend on
the seed and the number of trees only, never on the batch size: batches are
padded to a fixed size (so a run compiles once) and the padding is dropped.

Memory does not grow with the number of trees: :func:`simulate` keeps running
sums per requested P (:mod:`brwsim._sums`), and checks before it starts that
one batch of trees fits in the memory available (:mod:`brwsim._memory`, the
planner, given the memory the devices report); a run that cannot fit stops
with a one-line error naming the largest P or batch that would. Interrupted
(Ctrl-C), it returns what the finished trees give.

This module is the driver only: the run's options are one
:class:`brwsim._options.SimulateOptions`, checked into a :class:`Run`; the
rounds it runs are shared between processes by :mod:`brwsim._gather`, kept
and resumed by :mod:`brwsim._resume`, and reported as the types of
:mod:`brwsim.results`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Iterable

import jax
import numpy as np
from tqdm import tqdm

from . import _gather as gather
from . import _interrupts as interrupts
from . import _memory as memory
from . import _processes as processes
from . import _resume as resume
from ._checkpoint import Checkpoint
from ._devices import available_memory, default_devices, resolve_devices
from ._keys import Stream, tree_keys
from ._lowering import with_unrolled_threefry
from ._memory import HOST_BYTES_PER_NODE, MEMORY_FRACTION, SPINE_DRAWS_MAX, check_spine, tree_bytes
from ._options import SimulateOptions
from ._stats import RunningStat
from ._sums import Sums as _Sums
from .drafters import Oracle, draft_stats, drafter_batches, parse_draft_law, parse_drafter
from .errors import BrwsimError, check_P_list, check_positive_int
from .laws import Law, NativeDrawn, NativeMarkov, parse_law
from .oracle import clear_caches, default_batch, keep_entries, kernel_choice, oracle_batch  # noqa: F401 - default_batch: see plan_batch
from .oracle._native import available as native_available
from .oracle._native import built as native_built
from .results import PResult, SimulationResult
from .spine import law_curves
from .theory import Bounds, bounds_from_curves, moments
from .tree import prefix_values, sample_accepted_batch

SPINE_WALKS = 8192  # spine walks behind the splitting and dual bounds (half for Markov laws)
MAX_TREES = 2**32 - 1  # tree indices are uint32 words folded into the key
MAX_SEED = 2**32 - 1  # a run key holds 32 bits of the seed


def _progress(total: int, desc: str, enabled: bool | None, initial: int = 0):
    """A bar on a terminal; without one (``enabled`` None), :class:`_SlowLines`; nothing when ``enabled`` is False,
    and nothing by default on a process other than 0 of a multi-process run (process 0 reports the run).
    ``initial``: trees already done (a resumed run's)."""
    if enabled is None and not processes.is_main():
        enabled = False
    if enabled is None and not sys.stderr.isatty():
        return _SlowLines(total, desc, initial)
    bar = tqdm(total=total, desc=desc, unit="tree", disable=enabled is False, file=sys.stderr, leave=False)
    bar.update(initial)
    return bar


class _SlowLines:
    """Progress where stderr is not a terminal (a log, a pipe, a batch job): nothing for a run that ends within
    :attr:`FIRST` seconds; after that one line every :attr:`EVERY` seconds, ``brwsim: progress: ...``, with the
    trees done and the time left at the rate since the first finished batch (an estimate: that batch holds the
    compilation, and a resumed run's trees were done before)."""

    FIRST, EVERY = 30.0, 60.0

    def __init__(self, total: int, desc: str, initial: int = 0):
        self.total, self.desc, self.n = total, desc, int(initial)
        self.t0 = time.monotonic()
        self.next, self.first = self.t0 + self.FIRST, None  # (time, trees) at the first finished batch

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, k: int) -> None:
        self.n += int(k)
        now = time.monotonic()
        if self.first is None:
            self.first = (now, self.n)
            return
        if now < self.next or self.n >= self.total:
            return
        self.next = now + self.EVERY
        (t1, n1), left = self.first, ""
        if self.n > n1 and now > t1:
            left = f"; about {_duration((self.total - self.n) * (now - t1) / (self.n - n1))} left (estimate)"
        print(f"brwsim: progress: {self.desc}: {self.n:,} of {self.total:,} trees after "
              f"{_duration(now - self.t0)}{left}", file=sys.stderr, flush=True)  # fmt: skip


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _largest_P(law: Law, budget: float) -> int:
    return memory.largest_P(law, budget, tree_bytes)


def plan_batch(law: Law, P_max: int, trees: int, batch: int | None, devs) -> int:
    """Trees per oracle call on the devices ``devs`` (a multiple of their count; the oracle's
    ``default_batch`` per device unless ``batch``), planned by :func:`brwsim._memory.plan_batch` for the
    oracle's trees (:func:`brwsim._memory.tree_bytes`) against the memory those devices report."""
    n_dev = len(devs) if devs else 1
    return memory.plan_batch(law, P_max, trees, batch, n_dev, available_memory(devs), tree_bytes, _largest_P)


def check_tables(law: Law) -> None:
    """:func:`brwsim._memory.check_tables` against the memory available here."""
    memory.check_tables(law, available_memory())


def _oracle_batches(key, law: Law, P_max: int, lo: int, hi: int, B: int, devs, check: bool):
    """Yields ``(values [n, P_max] float64, accepted [n] or None)`` for consecutive batches of trees lo .. hi - 1."""
    K = min(law.vocab, P_max)
    for start in range(lo, hi, B):
        n = min(B, hi - start)
        keys = tree_keys(key, start, B)
        t = oracle_batch(law, keys, P=P_max, K=K, devices=devs)
        acc = None
        if check:
            acc = np.asarray(sample_accepted_batch(law, keys, t, tree_keys(key, start, B, Stream.CHECK), K=K))[:n]
        yield np.asarray(prefix_values(t), np.float64)[:n], acc


def oracle_values(
    key,
    law: Law,
    P_max: int,
    trees: int,
    batch: int | None = None,
    check: bool = False,
    progress: bool | None = None,
    devices=None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Every tree's values of the oracle trees T*_1 .. T*_Pmax of the run with key ``key``.

    Returns ``values`` (float64 [trees, P_max]; column ``P - 1`` is
    E[L(T*_P) | U] of each tree) and, with ``check``, the accepted lengths
    of one sampled continuation per tree through T*_Pmax (int [trees]).
    Holds all of them: for means and errors, :func:`simulate` needs no such
    array. ``devices`` (``"all"``, a count or a list) shards each batch over
    several devices (same values).
    """
    devs = resolve_devices(default_devices() if devices is None else devices)
    B = plan_batch(law, P_max, trees, batch, devs)
    memory.check_kept_values(trees, P_max, available_memory())
    values = np.empty((trees, P_max), np.float64)
    accepted = np.empty((trees,), np.int64) if check else None
    start = 0
    with _progress(trees, f"oracle P={P_max}", progress) as bar:
        for v, acc in _oracle_batches(key, law, P_max, 0, trees, B, devs, check):
            values[start : start + v.shape[0]] = v
            if check:
                accepted[start : start + v.shape[0]] = acc
            start += v.shape[0]
            bar.update(v.shape[0])
    clear_caches()
    return values, accepted


def _tree_values(key, law: Law, d, dlaw, P_list, lo: int, hi: int, batch, check: bool, devices, seg: int):
    """Yields ``(columns, values [n, len(columns)], accepted [n] or None)`` for trees lo .. hi - 1, each column's
    trees in order: what :class:`_Sums` adds, for the oracle or another drafter. ``seg``: the most trees one
    call gets (the oracle's batch is planned for it, so every call of a run has the same shape)."""
    if isinstance(d, Oracle):
        devs = resolve_devices(default_devices() if devices is None else devices)
        B = plan_batch(law, P_list[-1], seg, batch, devs)
        cols = list(range(len(P_list)))
        try:
            for v, acc in _oracle_batches(key, law, P_list[-1], lo, hi, B, devs, check):
                yield cols, v[:, [p - 1 for p in P_list]], acc
        finally:
            clear_caches()
        return
    for cols, _, v in drafter_batches(key, d, law, dlaw, P_list, hi, batch, lo=lo):
        yield cols, v, None
    if check:  # the target's sampled continuation through the largest tree
        B = min(batch or d.batch_size(law, P_list[-1]), hi - lo)
        for start in range(lo, hi, B):
            n = min(B, hi - start)
            keys = tree_keys(key, start, B)
            t = d.trees(key, law, dlaw, keys, P_list[-1])
            acc = sample_accepted_batch(law, keys, t, tree_keys(key, start, B, Stream.CHECK), K=law.vocab)
            yield [], np.zeros((n, 0)), np.asarray(acc)[:n]


@dataclasses.dataclass
class Run:
    """A checked run: its :class:`SimulateOptions`, what they resolve to, and where its rounds are kept."""

    options: SimulateOptions
    key: object
    law: Law
    d: object
    dlaw: object
    P_list: list[int]
    trees: int
    seed: int
    batch: int | None
    ckpt: Checkpoint | None = None
    round_trees: int = 2**16  # trees per process and round (at most one block of the running sums)

    @property
    def check(self) -> bool:
        return self.options.check

    def values(self, lo: int, hi: int, seg: int):
        return _tree_values(
            self.key,
            self.law,
            self.d,
            self.dlaw,
            self.P_list,
            lo,
            hi,
            self.batch,
            self.check,
            self.options.devices,
            seg,
        )


_Run = Run


def _collect(sums: _Sums, run: Run) -> None:
    """Every tree's values into ``sums``, in rounds of one segment per process (several processes split each
    round; every process adds every segment in tree order, so the running sums are those of one process, bit
    for bit). After each round the sums go to the checkpoint, if any; a rerun resumes after the last one."""
    n, r, trees = processes.count(), processes.index(), run.trees
    with interrupts.deferred(n > 1):  # several processes: a signal stops them all after the same round
        first = resume.resume(sums, run)
        processes.note_finished(resume.finished_text(sums, run))
        seg = min(RunningStat.BLOCK, run.round_trees, max(1, -(-trees // n)))
        total = trees * (1 if run.d.nested else len(run.P_list))
        done = first * (1 if run.d.nested else len(run.P_list))
        with _progress(total, f"{run.d.text} P={run.P_list[-1]}", run.options.progress, done) as bar:
            for start in range(first, trees, seg * n):
                lo = min(trees, start + r * seg)
                hi = min(trees, lo + seg)
                stop = None
                if n == 1:  # add batch by batch: an interrupt keeps the finished batches
                    for cols, v, acc in run.values(lo, hi, seg):
                        sums.add(cols, v, acc)
                        bar.update(v.shape[0] if cols else 0)
                else:
                    stop = gather.shared_round(sums, run, lo, hi, seg, bar)
                resume.save(sums, run, min(trees, start + seg * n))
                if stop is not None:
                    interrupts.agree(*stop)
                    raise KeyboardInterrupt


def _draft_info(key, d, law, dlaw) -> dict:
    info = {"drafter": d.text, "draft_law": dlaw.spec()}
    for name, s in draft_stats(key, law, dlaw)._asdict().items():
        info[name], info[name + "_se"] = s.mean, s.se
    return info


def _check_inputs(law, P, trees, seed, batch, drafter, draft_law, bounds: bool = True):
    """Every argument checked, and every size it implies planned, before any slow work."""
    law_obj = parse_law(law)
    check_tables(law_obj)
    P_list = check_P_list(P)
    trees = check_positive_int("trees", trees)
    if trees > MAX_TREES:
        raise BrwsimError(
            f"trees must be at most {MAX_TREES} (tree indices are 32-bit), got {trees}; "
            "run several seeds for more, each seed's trees are independent of the others'"
        )
    seed = check_positive_int("seed", seed, minimum=0)
    if seed > MAX_SEED:  # jax.random.key(seed) keeps the low 32 bits: larger seeds would repeat smaller ones
        raise BrwsimError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed}")
    batch = None if batch is None else check_positive_int("batch", batch)
    law_obj.check_budget(max(P_list))
    d = parse_drafter(drafter)
    if isinstance(d, Oracle) and draft_law is not None:
        raise BrwsimError("--draft-law applies to a drafter other than the oracle; add e.g. --drafter topq")
    if not isinstance(d, Oracle):
        d.check_budget(law_obj, max(P_list))
    if bounds:
        check_spine(law_obj, SPINE_WALKS if law_obj.is_iid else SPINE_WALKS // 2)
    return law_obj, P_list, trees, seed, batch, d


def _prepare(opts: SimulateOptions) -> Run:
    """``opts`` checked (every size planned) and resolved into a :class:`Run`, before any slow work."""
    law_obj, P_list, trees, seed, batch, d = _check_inputs(
        opts.law, opts.P, opts.trees, opts.seed, opts.batch, opts.drafter, opts.draft_law, opts.bounds
    )
    dlaw = None
    if not isinstance(d, Oracle):
        dlaw = parse_draft_law(opts.draft_law)
        dlaw.check(law_obj)
    if opts.check and _draws_natively(opts, law_obj):
        # the check redraws each node with the JAX kernel's law stream; the native sampler's rows are another stream
        raise BrwsimError("--check re-samples the JAX kernel's node draws, which --kernel native does not make for "
                          f"{opts.law}: use --kernel jax or auto with --check")  # fmt: skip
    run = Run(opts, jax.random.key(seed), law_obj, d, dlaw, P_list, trees, seed, batch)
    run.ckpt = resume.open_checkpoint(run, opts.checkpoint, opts.keep_values)
    if opts.round_trees is not None:
        run.round_trees = min(RunningStat.BLOCK, check_positive_int("round-trees", opts.round_trees))
    return run


def _bounds(key, law: Law, P_list, mom) -> list[Bounds]:
    walks = SPINE_WALKS if law.is_iid else SPINE_WALKS // 2
    curves = law_curves(key, law, P_list[-1], walks=walks, mu_hint=mom.mu)
    return bounds_from_curves(curves, P_list, mom.mu, mom.mu2, law.is_iid)


@with_unrolled_threefry
def _per_P(sums: _Sums, key, law, P_list, mom, with_bounds):
    """One :class:`PResult` per budget from the running sums (the check rides on the largest P)."""
    results = [PResult(P=p, stat=s.stat()) for p, s in zip(P_list, sums.cols, strict=True)]
    if sums.check.n:  # the check walks the largest tree only
        results[-1].check = sums.check.stat()
    if with_bounds:
        for r, b in zip(results, _bounds(key, law, P_list, mom), strict=True):
            r.bounds = b
    return results


def simulate(
    law: str | Law,
    P: int | Iterable[int] = (1, 4, 16, 64),
    trees: int = 1000,
    seed: int = 0,
    batch: int | None = None,
    check: bool = False,
    bounds: bool = True,
    progress: bool | None = None,
    drafter: str | None = None,
    draft_law: str | None = None,
    devices=None,
    keep_values: bool = False,
    checkpoint=None,
    round_trees: int | None = None,
    kernel: str = "auto",
) -> SimulationResult:
    """E[X] of the oracle tree (or another drafter's) at each budget P, with 95% confidence intervals.

    ``law``: a SPEC string (:func:`brwsim.laws.parse_law`) or a law object; ``drafter``
    (``NAME[:key=value,...]``, default ``oracle``) and ``draft_law`` (its q, default ``exact``) select
    another drafter (:mod:`brwsim.drafters`); ``devices`` (``"all"`` or a count) shards the oracle's trees
    (same results). X counts accepted draft tokens per verifier call (tokens per call: X + 1). ``check``:
    the largest P also carries the mean accepted length of one simulated target continuation per tree,
    an independent estimator. ``bounds``: every P carries its :class:`brwsim.theory.Bounds`.
    ``keep_values``: every tree's value too. A KeyboardInterrupt returns the finished trees' estimates.
    ``checkpoint`` (a directory): the running sums are kept there after every finished round, and a call
    with the same arguments resumes after the last one, with the same numbers as an uninterrupted run.
    ``round_trees`` (default and at most 65,536): trees per process in a round (same numbers, whatever it is).
    ``kernel`` (auto|jax|native): the oracle's kernel on CPU (same numbers).
    """
    return simulate_with(
        SimulateOptions(
            law=law,
            P=P,
            trees=trees,
            seed=seed,
            batch=batch,
            check=check,
            bounds=bounds,
            progress=progress,
            drafter=drafter,
            draft_law=draft_law,
            devices=devices,
            keep_values=keep_values,
            checkpoint=checkpoint,
            round_trees=round_trees,
            kernel=kernel,
        )
    )


def _draws_natively(opts: SimulateOptions, law: Law) -> bool:
    """Whether the run draws a drawn (or Markov) law's nodes with the native sampler (its own stream): asked by name
    only."""
    return str(opts.kernel).strip().lower() == "native" and isinstance(
        law.native_program(), (NativeDrawn, NativeMarkov)
    )


HEAVY_VARIATES = 10**10  # a drawn-law run with more node variates than this says first how long it will take
TIMED_NODES = 8  # the nodes of the tree timed for that (one call's fixed cost spread over nine rows)


def _node_seconds(law: Law, K: int, kernel: str) -> float | None:
    """Seconds a node of ``law`` costs the oracle of ``kernel``: one tree of :data:`TIMED_NODES` nodes (their rows,
    the root's and the search; for a Markov law, the states the tree's fixed key draws) compiled first, then timed,
    over its rows; None if that fails (the run itself reports what goes wrong)."""
    keys = tree_keys(jax.random.key(0), 0, 1)
    try:
        call = jax.jit(lambda k: oracle_batch(law, k, TIMED_NODES, K, kernel=kernel).logP).lower(keys).compile()
        t = time.perf_counter()
        jax.block_until_ready(call(keys))
        return (time.perf_counter() - t) / (TIMED_NODES + 1)
    except Exception:  # noqa: BLE001 - only a notice
        return None


def _announce_heavy(run: Run) -> None:
    """Before a drawn law's heavy run (about trees x (P + 1) node rows of V variates, more than
    :data:`HEAVY_VARIATES`): one progress line with how long the run will take, from one node's cost timed here
    (:func:`_node_seconds`) times the run's nodes, on process 0 where progress is not turned off; when the run uses
    the JAX kernel and the native one can draw the law, that kernel's node is timed too and its run offered. An
    estimate: it leaves out the search's growth with P (small beside a heavy row) and counts a resumed run's
    finished trees. A run whose first batch of trees outlasts any progress line is thus not silent."""
    opts, law = run.options, run.law
    if opts.progress is False or not processes.is_main() or law.indexed or run.dlaw is not None:
        return
    P, V = run.P_list[-1], int(law.vocab)
    rows = run.trees * (P + 1)
    if rows * V <= HEAVY_VARIATES:
        return
    devs = resolve_devices(default_devices() if opts.devices is None else opts.devices)
    plan_batch(law, P, min(run.trees, run.round_trees), run.batch, devs)  # a run too large is refused first
    native = _draws_natively(opts, law)
    t = _node_seconds(law, keep_entries(P, min(V, P)), "native" if native else "jax")
    if t is None:
        return
    n = len(devs) if devs else 1
    cpu = all(d.platform == "cpu" for d in devs or jax.local_devices()[:1])
    if cpu and hasattr(os, "sched_getaffinity"):
        n = min(n, len(os.sched_getaffinity(0)))  # CPU devices beyond the cores this process may use run in turn
    n *= processes.count()  # every process's trees are counted, each process runs its share
    where = "one device" if n == 1 else f"{n} devices"
    line = (
        f"brwsim: progress: {run.d.text} P={P}: about {rows:,} nodes of {V:,} variates; one node took {t:.2g} s "
        f"here: the run about {_duration(rows * t / n)} on {where} (estimate)"
    )
    if (
        not native
        and "native" in law.kernels
        and cpu
        and native_built()  # a hint: never a build (or its notice) for it
        and native_available()
    ):
        tn = _node_seconds(law, keep_entries(P, min(V, P)), "native")
        if tn is not None and tn < t:
            faster = _duration(rows * tn / n)
            line += f"; --kernel native (a stream of its own, the same law): {tn:.2g} s a node, about {faster}"
    print(line, file=sys.stderr, flush=True)


def simulate_with(opts: SimulateOptions) -> SimulationResult:
    """:func:`simulate` of the options ``opts``."""
    run = _prepare(opts)
    _announce_heavy(run)
    t0 = time.perf_counter()
    sums, interrupted = _Sums(run.P_list, opts.keep_values), False
    draft = None if run.dlaw is None else _draft_info(run.key, run.d, run.law, run.dlaw)
    try:
        with kernel_choice(opts.kernel):
            _collect(sums, run)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        processes.note_finished(None)
    return _result(run, sums, draft, interrupted, t0)


def _result(run: Run, sums: _Sums, draft, interrupted: bool, t0: float) -> SimulationResult:
    """The :class:`SimulationResult` of the finished trees (bounds only for a run that was not interrupted)."""
    done = sums.done()
    if done == 0:
        raise KeyboardInterrupt
    opts, law_obj = run.options, run.law
    mom = moments(run.key, law_obj)
    results = _per_P(sums, run.key, law_obj, run.P_list, mom, opts.bounds and not interrupted)
    return SimulationResult(
        law=opts.law if isinstance(opts.law, str) else law_obj.spec(),
        iid=law_obj.is_iid,
        mu=mom.mu,
        mu2=mom.mu2,
        mu_se=mom.mu_se,
        mu2_se=mom.mu2_se,
        trees=done,
        seed=run.seed,
        results=results,
        seconds=time.perf_counter() - t0,
        drafter=run.d.text,
        draft=draft,
        interrupted=interrupted,
        trees_requested=run.trees,
        values=sums.values(done) if opts.keep_values else None,
        checkpoint=None if run.ckpt is None else str(run.ckpt.path),
    )


__all__ = [
    "HOST_BYTES_PER_NODE",
    "MEMORY_FRACTION",
    "SPINE_DRAWS_MAX",
    "PResult",
    "Run",
    "SimulateOptions",
    "SimulationResult",
    "check_spine",
    "check_tables",
    "oracle_values",
    "plan_batch",
    "simulate",
    "simulate_with",
    "tree_bytes",
]
