"""The Monte Carlo driver: E[X] of a drafter's tree at each budget P, with confidence intervals.

Tree ``n`` (0-based) of a run with seed ``S`` has key
``fold_in(fold_in(key(S), TREES), n)``; its sampled-continuation check uses
stream ``CHECK`` (:mod:`brwsim._keys`). A run's numbers therefore depend on
the seed and the number of trees only, never on the batch size: batches are
padded to a fixed size (so a run compiles once) and the padding is dropped.

Memory does not grow with the number of trees: :func:`simulate` keeps running
sums per requested P (:class:`brwsim._stats.RunningStat`), and checks before
it starts that one batch of trees fits in the memory available; a run that
cannot fit stops with a one-line error naming the largest P or batch that
would. Interrupted (Ctrl-C), it returns what the finished trees give.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterable

import jax
import numpy as np
from tqdm import tqdm

from . import _interrupts as interrupts
from . import _processes as processes
from ._checkpoint import Checkpoint, code_version, content_digest
from ._devices import available_memory, default_devices, resolve_devices
from ._keys import Stream, tree_keys
from ._lowering import with_unrolled_threefry
from ._stats import CONVENTION, RunningStat, Stat
from .drafters import Oracle, draft_stats, drafter_batches, parse_draft_law, parse_drafter
from .errors import BrwsimError, check_P_list, check_positive_int
from .laws import Law, parse_law
from .oracle import clear_caches, default_batch, kernel_choice, oracle_batch, oracle_memory
from .spine import law_curves
from .theory import KINDS, Bounds, bounds_from_curves, moments
from .tree import prefix_values, sample_accepted_batch

SPINE_WALKS = 8192  # spine walks behind the splitting and dual bounds (half for Markov laws)
MAX_TREES = 2**32 - 1  # tree indices are uint32 words folded into the key
MAX_SEED = 2**32 - 1  # a run key holds 32 bits of the seed
# per node and tree, beside the kernel's own buffers: its output tree (28 bytes), the
# node records moved to tree order (32), prefix values on the device (4) and in float64 (8)
HOST_BYTES_PER_NODE = 72
MEMORY_FRACTION = 0.8  # of the memory available, what one batch may use
SPINE_DRAWS_MAX = 2**30  # tokens the spine walks of an O(V)-step law may draw per step (walks x V): minutes at most


def _progress(total: int, desc: str, enabled: bool | None):
    disable = (not sys.stderr.isatty()) if enabled is None else (not enabled)
    return tqdm(total=total, desc=desc, unit="tree", disable=disable, file=sys.stderr, leave=False)


def tree_bytes(law: Law, P: int) -> int:
    """Approximate peak bytes one tree of the oracle at budget P needs, kernel and host arrays together."""
    return oracle_memory(law, P) + HOST_BYTES_PER_NODE * (P + 1)


def _largest_P(law: Law, budget: float) -> int:
    lo, hi = 1, 2**40
    while lo < hi:  # tree_bytes grows with P
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if tree_bytes(law, mid) <= budget else (lo, mid - 1)
    return lo


def plan_batch(law: Law, P_max: int, trees: int, batch: int | None, devs) -> int:
    """Trees per oracle call (a multiple of the device count), checked against the memory available.

    A default batch shrinks to what fits; a P or an explicit batch that cannot
    fit is a one-line error naming the largest P or batch that would.
    """
    n_dev = len(devs) if devs else 1
    B = min(batch or default_batch(law, P_max) * n_dev, trees)
    B = -(-B // n_dev) * n_dev  # equal shares; padding trees are dropped
    avail = available_memory(devs)
    if avail is None:
        return B
    budget, per_tree = MEMORY_FRACTION * avail, tree_bytes(law, P_max)
    least = n_dev * (1 if law.indexed else 2)  # the oracle runs at least two trees a device on a drawn law
    if per_tree * least > budget:
        raise BrwsimError(
            f"P={P_max} needs about {per_tree * least / 1e9:.3g} GB for the oracle ({law.spec()}, {least} trees "
            f"at once), more than the {budget / 1e9:.3g} GB a run may use here ({MEMORY_FRACTION:.0%} of the memory "
            f"available): the largest P that fits is about {_largest_P(law, budget / least)}; beyond it, "
            "`brwsim laws` gives the spine's bounds with no tree"
        )
    fit = int(budget // (per_tree * n_dev)) * n_dev
    if B > fit:
        if batch is not None:
            raise BrwsimError(
                f"--batch {batch} at P={P_max} needs about {B * per_tree / 1e9:.3g} GB, more than the "
                f"{budget / 1e9:.3g} GB a run may use here: the largest batch that fits is {fit}"
            )
        B = fit
    return B


def _largest_V(law: Law, per_token: float, budget: float) -> str:
    """``"the largest V that fits is about N"`` for a law whose cost grows as ``per_token * V``."""
    return f"the largest V that fits is about {max(1, int(budget // per_token))}"


def check_tables(law: Law) -> None:
    """Before anything is built: a one-line error if the law's exact moments and spine tables (O(V) for a
    deterministic law given by a formula) cannot fit in the memory available, naming the largest V that would."""
    need, avail = law.table_bytes(), available_memory()
    if avail is None or need <= MEMORY_FRACTION * avail:
        return
    budget = MEMORY_FRACTION * avail
    raise BrwsimError(
        f"{law.spec()} needs about {need / 1e9:.3g} GB for its exact moments and spine tables (V={law.vocab}), more "
        f"than the {budget / 1e9:.3g} GB a run may use here: {_largest_V(law, need / law.vocab, budget)}"
    )


def check_spine(law: Law, walks: int, what: str = "the bounds") -> None:
    """Before any tree: a one-line error if the spine walks behind the bounds must draw more whole distributions
    than :data:`SPINE_DRAWS_MAX` tokens a step (a law whose spine step reads all V entries: ``walks * V`` a step,
    some minutes at the limit), naming the largest V and number of walks that would fit."""
    costly = [sub for sub in law.sub_laws() if sub.costly_spine_step(law.spine_needs_rank)]
    V = max((sub.vocab for sub in costly), default=0)
    if walks * V <= SPINE_DRAWS_MAX:
        return
    raise BrwsimError(
        f"{what} of {law.spec()} take {walks} spine walks, each step drawing a whole distribution of V={V} tokens "
        f"({walks * V:.3g} draws a step, more than the {SPINE_DRAWS_MAX:.3g} allowed, hours of work): "
        f"{_largest_V(law, walks, SPINE_DRAWS_MAX)} at {walks} walks; `brwsim laws --walks "
        f"{SPINE_DRAWS_MAX // V}` gives bounds from fewer walks"
    )


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
    avail = available_memory()
    if avail is not None and 8 * trees * (P_max + 1) > MEMORY_FRACTION * avail:
        raise BrwsimError(
            f"keeping every tree's values needs {8 * trees * P_max / 1e9:.3g} GB ({trees} trees x P={P_max}) but "
            f"{avail / 1e9:.3g} GB are available here; use brwsim.simulate, which keeps running sums"
        )
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


class _Sums:
    """Running statistics of every requested P (and of the check), optionally with every tree's values."""

    def __init__(self, P_list: list[int], keep: bool):
        self.P_list = P_list
        self.cols = [RunningStat() for _ in P_list]
        self.check = RunningStat()
        self.kept: list[np.ndarray] | None = [] if keep else None

    def add(self, cols: list[int], values: np.ndarray, accepted=None) -> None:
        for j, c in enumerate(cols):
            self.cols[c].add(values[:, j])
        if accepted is not None:
            self.check.add(accepted)
        if self.kept is not None:
            self.kept.append((cols, values))

    def states(self) -> list[dict]:
        """Every statistic's exact state (columns, then the check): what a checkpoint keeps."""
        return [s.state() for s in [*self.cols, self.check]]

    def restore(self, states: list[dict]) -> None:
        """The statistics of :meth:`states`, bit for bit."""
        *cols, check = [RunningStat.restore(s) for s in states]
        self.cols, self.check = cols, check

    def values(self, trees: int) -> np.ndarray | None:
        if self.kept is None:
            return None
        out = np.full((trees, len(self.P_list)), np.nan)
        filled = [0] * len(self.P_list)
        for cols, v in self.kept:
            for j, c in enumerate(cols):
                out[filled[c] : filled[c] + v.shape[0], c] = v[:, j]
                filled[c] += v.shape[0]
        return out


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
class _Run:
    """What fixes a run's numbers, and where its finished rounds are kept."""

    key: object
    law: Law
    d: object
    dlaw: object
    P_list: list[int]
    trees: int
    batch: int | None
    check: bool
    devices: object
    ckpt: Checkpoint | None = None
    round_trees: int = 2**16  # trees per process and round (at most one block of the running sums)

    def values(self, lo: int, hi: int, seg: int):
        return _tree_values(
            self.key, self.law, self.d, self.dlaw, self.P_list, lo, hi, self.batch, self.check, self.devices, seg
        )


def _finished(sums: _Sums, run: _Run) -> str:
    done = min(s.n for s in sums.cols)
    if done == 0:
        return f"no round of {run.round_trees} trees a process was finished yet"
    if run.ckpt is None:
        return f"{done} of {run.trees} trees were finished (run with --checkpoint DIR to keep finished rounds)"
    return f"{done} of {run.trees} trees are kept in {run.ckpt.path}: rerun the same command to resume"


def _resume(sums: _Sums, run: _Run) -> int:
    """Trees already finished by an earlier run of the same arguments (its statistics restored into ``sums``)."""
    if run.ckpt is None:
        return 0
    saved = None
    if processes.is_main():
        try:
            saved = run.ckpt.load()
        except BrwsimError as e:  # every process stops with process 0's one line
            saved = str(e)
    saved = processes.gather(saved)[0]  # process 0's file (or why it is refused), everywhere
    if saved is None:
        return 0
    if isinstance(saved, str):
        raise BrwsimError(saved)
    done, states = saved
    counts = [
        s["n"] + s["buf"].size if s["buf"].ndim == 1 and s["buf"].size <= RunningStat.BLOCK else -1 for s in states
    ]
    if counts != [done] * len(run.P_list) + [done if run.check else 0]:
        raise run.ckpt.refuse(f"holds statistics of {counts} trees, not of its {done} finished")
    sums.restore(states)
    return done


def _save(sums: _Sums, run: _Run, done: int) -> None:
    if run.ckpt is not None and processes.is_main():
        run.ckpt.save(done, sums.states())
    processes.note_finished(_finished(sums, run))


def _collect(sums: _Sums, run: _Run, progress) -> None:
    """Every tree's values into ``sums``, in rounds of one segment per process (several processes split each
    round; every process adds every segment in tree order, so the running sums are those of one process, bit
    for bit). After each round the sums go to the checkpoint, if any; a rerun resumes after the last one."""
    n, r, trees = processes.count(), processes.index(), run.trees
    with interrupts.deferred(n > 1):  # several processes: a signal stops them all after the same round
        first = _resume(sums, run)
        processes.note_finished(_finished(sums, run))
        seg = min(RunningStat.BLOCK, run.round_trees, max(1, -(-trees // n)))
        total = trees * (1 if run.d.nested else len(run.P_list))
        with _progress(total, f"{run.d.text} P={run.P_list[-1]}", progress) as bar:
            bar.update(first * (1 if run.d.nested else len(run.P_list)))
            for start in range(first, trees, seg * n):
                lo = min(trees, start + r * seg)
                hi = min(trees, lo + seg)
                stop = None
                if n == 1:  # add batch by batch: an interrupt keeps the finished batches
                    for cols, v, acc in run.values(lo, hi, seg):
                        sums.add(cols, v, acc)
                        bar.update(v.shape[0] if cols else 0)
                else:
                    stop = _shared_round(sums, run, lo, hi, seg, bar)
                _save(sums, run, min(trees, start + seg * n))
                if stop is not None:
                    interrupts.agree(*stop)
                    raise KeyboardInterrupt


def _shared_round(sums: _Sums, run: _Run, lo: int, hi: int, seg: int, bar):
    """This process's segment (trees lo .. hi - 1), exchanged with the others' and every segment added in
    process order; ``(process, signal)`` of the first process that got an interrupting signal, else None."""
    mine = list(run.values(lo, hi, seg)) if hi > lo else []
    if interrupts.received() is not None:  # told with the segment: every process stops after this round
        mine.append((None, (processes.index(), interrupts.received()), None))
    stop = None
    for part in processes.gather(mine):
        for cols, v, acc in part:
            if cols is None:
                stop = stop or v
                continue
            sums.add(cols, v, acc)
            bar.update(v.shape[0] if cols else 0)
    return stop


def _draft_info(key, d, law, dlaw) -> dict:
    info = {"drafter": d.text, "draft_law": dlaw.spec()}
    for name, s in draft_stats(key, law, dlaw)._asdict().items():
        info[name], info[name + "_se"] = s.mean, s.se
    return info


@dataclasses.dataclass
class PResult:
    """E[X] at one budget P (and the check's estimate with ``--check``), with the bounds at that P."""

    P: int
    stat: Stat
    check: Stat | None = None
    bounds: Bounds | None = None

    def to_dict(self) -> dict:
        d = {"P": self.P, "mean": self.stat.mean, "ci95": self.stat.ci95, "se": self.stat.se}
        if self.check is not None:
            d["check_mean"] = self.check.mean
            d["check_ci95"] = self.check.ci95
        if self.bounds is not None:
            d |= self.bounds.to_dict()
        return d


@dataclasses.dataclass
class SimulationResult:
    """What :func:`simulate` returns; ``to_dict()`` is the command's JSON object.

    ``trees`` counts the trees behind the estimates: fewer than asked when the
    run was interrupted (``interrupted``; then no bounds are computed).
    ``values`` holds every tree's value at each P (``[trees, len(results)]``)
    only when ``simulate(..., keep_values=True)`` asked for it.
    """

    law: str
    iid: bool
    mu: float
    mu2: float
    mu_se: float
    mu2_se: float
    trees: int
    seed: int
    results: list[PResult]
    drafter: str = "oracle"
    seconds: float = 0.0
    draft: dict | None = None  # non-oracle drafters: draft law and its divergences
    interrupted: bool = False
    trees_requested: int = 0
    values: np.ndarray | None = None
    checkpoint: str | None = None  # the file that keeps the finished rounds (simulate(..., checkpoint=DIR))

    def to_dict(self) -> dict:
        d = {
            "law": self.law,
            "convention": CONVENTION,
            "iid": self.iid,
            "drafter": self.drafter,
            "mu": self.mu,
            "mu2": self.mu2,
            "mu_se": self.mu_se,
            "mu2_se": self.mu2_se,
            "trees": self.trees,
            "seed": self.seed,
            "results": [r.to_dict() for r in self.results],
        }
        if self.interrupted:
            d |= {"interrupted": True, "trees_requested": self.trees_requested}
        if any(r.bounds is not None for r in self.results):
            d["kinds"] = KINDS
        return d | ({"draft": self.draft} if self.draft is not None else {})

    def __getitem__(self, P: int) -> PResult:
        for r in self.results:
            if r.P == P:
                return r
        raise KeyError(P)


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


def _checkpoint(directory, run: _Run, seed: int, keep_values: bool) -> Checkpoint | None:
    """The run's checkpoint file in ``directory`` (None: no checkpoint), checked to be writable."""
    if directory is None:
        return None
    if keep_values:
        raise BrwsimError("keep_values and checkpoint do not go together: a resumed run has no earlier values")
    meta = {
        "law": run.law.spec(),
        "P": run.P_list,
        "trees": run.trees,
        "seed": seed,
        "drafter": run.d.text,
        "draft_law": None if run.dlaw is None else run.dlaw.spec(),
        "check": bool(run.check),
        # what the law, drafter and draft law resolved to (file contents too) and the code: another one is
        # another run, even under the same path or spec
        "content": [content_digest(x) for x in (run.law, run.d, run.dlaw)],
        "code": code_version(),
        "x64": bool(jax.config.jax_enable_x64),
    }
    ckpt = Checkpoint(directory, meta)
    if processes.is_main():
        ckpt.check_writable()
    return ckpt


def _bounds(key, law: Law, P_list, mom) -> list[Bounds]:
    walks = SPINE_WALKS if law.is_iid else SPINE_WALKS // 2
    curves = law_curves(key, law, P_list[-1], walks=walks, mu_hint=mom.mu)
    return bounds_from_curves(curves, P_list, mom.mu, mom.mu2, law.is_iid)


@with_unrolled_threefry
def _per_P(sums, key, law, P_list, mom, with_bounds):
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
    law_obj, P_list, trees, seed, batch, d = _check_inputs(law, P, trees, seed, batch, drafter, draft_law, bounds)
    t0 = time.perf_counter()
    key = jax.random.key(seed)
    sums, draft, dlaw, interrupted = _Sums(P_list, keep_values), None, None, False
    if not isinstance(d, Oracle):
        dlaw = parse_draft_law(draft_law)
        dlaw.check(law_obj)
    run = _Run(key, law_obj, d, dlaw, P_list, trees, batch, check, devices)
    run.ckpt = _checkpoint(checkpoint, run, seed, keep_values)
    if round_trees is not None:
        run.round_trees = min(RunningStat.BLOCK, check_positive_int("round-trees", round_trees))
    if dlaw is not None:
        draft = _draft_info(key, d, law_obj, dlaw)
    try:
        with kernel_choice(kernel):
            _collect(sums, run, progress)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        processes.note_finished(None)
    return _result(law, sums, run, seed, draft, interrupted, bounds, keep_values, t0)


def _result(law, sums: _Sums, run: _Run, seed: int, draft, interrupted: bool, bounds: bool, keep_values, t0):
    """The :class:`SimulationResult` of the finished trees (bounds only for a run that was not interrupted)."""
    done = min(s.n for s in sums.cols)
    if done == 0:
        raise KeyboardInterrupt
    law_obj = run.law
    mom = moments(run.key, law_obj)
    results = _per_P(sums, run.key, law_obj, run.P_list, mom, bounds and not interrupted)
    return SimulationResult(
        law=law if isinstance(law, str) else law_obj.spec(),
        iid=law_obj.is_iid,
        mu=mom.mu,
        mu2=mom.mu2,
        mu_se=mom.mu_se,
        mu2_se=mom.mu2_se,
        trees=done,
        seed=seed,
        results=results,
        seconds=time.perf_counter() - t0,
        drafter=run.d.text,
        draft=draft,
        interrupted=interrupted,
        trees_requested=run.trees,
        values=sums.values(done) if keep_values else None,
        checkpoint=None if run.ckpt is None else str(run.ckpt.path),
    )


__all__ = ["PResult", "SimulationResult", "oracle_values", "plan_batch", "simulate", "tree_bytes"]
