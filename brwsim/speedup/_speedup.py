"""speedup(P) = (E[X](P) + 1) t_verify(0) / (t_verify(P) + t_draft(P)), its CI, and the best budget.

E[X](P) comes from a Monte Carlo run (:class:`brwsim.SimulationResult`) or a
real-model run (a :class:`brwsim.llm.results.RunResult`); the 95% CI of the
speedup is E[X]'s CI times the same time ratio (the times are taken as exact:
their measured spread is reported beside, not folded in).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from .._stats import CONVENTION
from ..errors import BrwsimError
from ..estimate import SimulationResult
from ..llm.drafters._base import PassFootprint
from ..llm.drafters._report import fixed_builder
from ..llm.results import DrafterResult, RunResult
from ._costs import ORACLE, AchievedRooflineCost, DraftCost, RooflineCost, VerifyCost, isotonic_fit

MEANING = (
    "speedup = tokens per second with speculation / without it = (E[X]+1) t_verify(0) / (t_verify(P) + t_draft(P)); "
    "for the oracle (t_draft = 0) it is the speed of light: no deterministic drafter at that verifier cost does better"
)


@dataclasses.dataclass(frozen=True)
class SpeedupRow:
    P: int
    ex: float
    ex_ci95: float
    t_verify: float
    t_draft: float
    speedup: float
    speedup_ci95: float
    spread: tuple[float, float] | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["spread"] = list(self.spread) if self.spread else None
        return d


@dataclasses.dataclass(frozen=True)
class SpeedupTable:
    """Speedup at each budget (P = 0, plain decoding, first) and the best budget."""

    rows: list[SpeedupRow]
    cost: VerifyCost
    draft: DraftCost
    drafter: str = "oracle"
    source: str = ""
    limit: str = ""  # why no larger budget was tried (said when the best is the largest P tried)

    @property
    def best(self) -> SpeedupRow:
        """The row with the largest estimated speedup (the smallest P among ties)."""
        return max(self.rows, key=lambda r: (r.speedup, -r.P))

    def near_best(self) -> list[int]:
        """Budgets whose speedup's 95% CI reaches the best one's: the data do not tell them apart from the best."""
        b = self.best
        return [r.P for r in self.rows if r.speedup + r.speedup_ci95 >= b.speedup - b.speedup_ci95]

    def recommended(self) -> int:
        """The budget to run: the smallest P whose estimated speedup lies within the best one's 95% interval, the
        cheapest budget the data do not tell apart from the best. P = 0, do not speculate, whenever plain decoding's
        speedup (1, exact) lies within it: a point-estimate best of 1.01 +- 0.26 is no evidence that speculating
        pays. The point estimate, not its interval, is held against the best's interval, so a budget estimated below
        1 is never recommended over plain decoding (its interval may still reach the best's: :meth:`near_best`)."""
        b = self.best
        return min(r.P for r in self.rows if r.speedup >= b.speedup - b.speedup_ci95)

    def recommended_text(self) -> str:
        """``recommended P = 4 (why)``, as ``brwsim plan`` prints it."""
        rec = self.recommended()
        why = "plain decoding is within the best's 95% CI: do not speculate" if rec == 0 else (
            "the smallest budget whose estimate is within the best's 95% CI")  # fmt: skip
        return f"recommended P = {rec} ({why})"

    def at_edge(self) -> bool:
        """True when the best is the largest budget tried: a larger P may do better still."""
        return self.best.P == max(r.P for r in self.rows) and self.best.P > 0

    def best_text(self) -> str:
        """``P = 8`` for an interior best; ``at least P = 64, still rising (why)`` when the best is the largest P
        tried: the speedup was still rising there and the best budget is not known."""
        b = self.best
        if not self.at_edge():
            return f"P = {b.P}"
        return f"at least P = {b.P}, still rising" + (f" ({self.limit})" if self.limit else "")

    def to_dict(self) -> dict:
        b = self.best
        return {
            "drafter": self.drafter,
            "source": self.source,
            "convention": CONVENTION,
            "meaning": MEANING,
            "ci95_covers": "the Monte Carlo error of E[X] only (times taken as exact; measured spread beside)",
            "cost": self.cost.to_dict(),
            "draft_cost": self.draft.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "best": {
                "P": b.P,
                "speedup": b.speedup,
                "speedup_ci95": b.speedup_ci95,
                "at_edge": self.at_edge(),
                "text": self.best_text(),
                "limit": self.limit,
            },  # fmt: skip
            "near_best_P": self.near_best(),
            "recommended_P": self.recommended(),
        }


def speedup_table(
    ex: Iterable[tuple[int, float, float]],
    cost: VerifyCost,
    draft: DraftCost = ORACLE,
    drafter: str = "oracle",
    source: str = "",
    drafted: Mapping[int, Sequence[tuple[int, float]]] | None = None,
) -> SpeedupTable:
    """The table for E[X] given as ``(P, mean, ci95)`` triples (P >= 1; the P = 0 row is added: E[X] = 0).

    ``drafted[P]``: the nodes a drafter drafts per call at budget P, as ``(nodes, weight)`` pairs whose weights
    sum to 1 (a proposer's tree can be smaller than P); the verifier is then charged the weighted mean of
    t_verify(nodes) instead of t_verify(P). A budget missing from it is charged t_verify(P)."""
    # a half-width read back from strict JSON is null (None) where it is undefined (one prompt)
    pts = sorted((int(P), float(m), math.nan if c is None else float(c)) for P, m, c in ex)
    if not pts:
        raise BrwsimError("no E[X] values to turn into a speedup: give at least one budget P")
    if any(P < 1 for P, _, _ in pts):
        raise BrwsimError("E[X] budgets must be >= 1 (P = 0, plain decoding, is added by itself)")
    t0 = cost.t_verify(0)
    if not (math.isfinite(t0) and t0 > 0):
        raise BrwsimError(f"the cost model ({cost.label}) gives t_verify(0) = {t0!r} s; it must be positive and finite")
    rows = [SpeedupRow(0, 0.0, 0.0, t0, 0.0, 1.0, 0.0, cost.spread(0))]
    for P, m, c in pts:
        tv, td = _verify_time(cost, P, (drafted or {}).get(P)), draft.t_draft(P)
        ratio = t0 / (tv + td)
        c = 0.0 if math.isnan(c) else c
        rows.append(SpeedupRow(P, m, c, tv, td, (m + 1.0) * ratio, c * ratio, cost.spread(P)))
    return SpeedupTable(rows, cost, draft, drafter, source)


def _verify_time(cost: VerifyCost, P: int, nodes: Sequence[tuple[int, float]] | None) -> float:
    """t_verify(P), or the weighted mean of t_verify(n) over the nodes drafted per call at P."""
    if not nodes:
        return cost.t_verify(P)
    total = sum(w for _, w in nodes)
    if not (total > 0 and all(0 <= n <= P and w >= 0 for n, w in nodes)):
        raise BrwsimError(f"nodes drafted at P = {P} must be counts in 0..{P} with non-negative weights, got {nodes}")
    return sum(w * cost.t_verify(int(n)) for n, w in nodes) / total


def from_simulation(res: SimulationResult, cost: VerifyCost, draft: DraftCost = ORACLE) -> SpeedupTable:
    """The speedup table of a :func:`brwsim.simulate` result (its drafter's E[X] at each of its budgets)."""
    ex = [(r.P, r.stat.mean, r.stat.ci95) for r in res.results]
    return speedup_table(ex, cost, draft, drafter=res.drafter, source=f"simulate {res.law} ({res.trees} trees)")


def footprint_cost(
    cost: VerifyCost,
    name: str,
    fp: PassFootprint,
    tf: PassFootprint | None,
    bytes_per_param: float = 2.0,
    context: int = 512,
    where: str = "",
) -> DraftCost:
    """One pass of footprint ``fp`` beside the target's step ``tf``, one pass per drafted token. On a roofline both
    go through it (:meth:`RooflineCost.pass_time`: weights at their own bits, the target's and the KV caches at its
    bytes per parameter, its context): a pass costs pass_time(fp) / pass_time(tf) of t_verify(0), which is
    pass_time(fp) itself when the roofline is that target's. On any other cost (a table, a measured or achieved
    cost) the fraction of bytes read, the target's weights and every KV cache at the cost's own bytes per parameter
    and context where it has them, else at ``bytes_per_param`` (``--bytes-per-param``) and ``context``."""
    if fp.empty:
        return DraftCost(0.0, "P", f"{name}: no model pass (proposals from the context){where}", "none")
    t0 = cost.t_verify(0)
    if isinstance(cost, RooflineCost):
        tp = cost.pass_time(fp)
        frac = tp / (cost.pass_time(tf) if tf is not None else t0)
        kvb = cost.bytes_per_param if cost.kv_bytes is None else cost.kv_bytes
        mb = fp.nbytes(cost.bytes_per_param, kvb, cost.context) / 1e6
        tb = tf.nbytes(cost.bytes_per_param, kvb, cost.context) if tf is not None else cost.breakdown(0)["bytes"]
        tmb = tb / 1e6
        label = f"{name}: {1e3 * frac * t0:.4g} ms per pass on the roofline, {frac:.3g} of a decoding step"
        label += f" ({mb:.4g} MB read against its target's {tmb:.4g} MB: {fp.what}){where}"
        return DraftCost(frac * t0, "P", label, "derived", fraction=frac)
    if tf is None:
        return DraftCost(0.0, "P", f"{name}: unknown (no target footprint; not counted)", "none")
    own = isinstance(cost, RooflineCost | AchievedRooflineCost)  # a cost model with its own dtype and context
    b = float(cost.bytes_per_param if own else bytes_per_param)
    L = int(cost.context if own else context)
    frac = fp.nbytes(b, b, L) / tf.nbytes(b, b, L)
    whose = "the cost model's" if own else "--bytes-per-param"
    label = (f"{name}: {frac:.3g} of a decoding step per pass (bytes read, from its footprint; the target's weights "
             f"and KV caches at {b:g} B per value ({whose}), L = {L}){where}")  # fmt: skip
    return DraftCost(t0 * frac, "P", label, "derived", fraction=frac)


def modelled_draft_cost(
    cost: VerifyCost, d: DrafterResult, bytes_per_param: float = 2.0, context: int = 512
) -> DraftCost:
    """A real drafter's cost from a saved run: re-derived on this cost model from the footprints the run saved
    (:func:`footprint_cost`; one pass per drafted token). A run saved without footprints gives only its
    ``draft_fraction``, derived at the dtype the run loaded the target in and L = 256: used as it is, and the label
    says so. Zero for a proposer."""
    if d.footprint is not None:
        fp = PassFootprint.from_dict(d.footprint)
        tf = PassFootprint.from_dict(d.target_footprint) if d.target_footprint is not None else None
        return footprint_cost(cost, d.name, fp, tf, bytes_per_param, context, " (from the run's saved footprints)")
    if d.draft_fraction is None:
        return DraftCost(0.0, "P", f"{d.name}: unknown (not counted)", "none")
    if d.draft_fraction == 0:
        return DraftCost(0.0, "P", f"{d.name}: no model pass (proposals from the context)", "none")
    label = f"{d.name}: {d.draft_fraction:.3g} of a decoding step per pass (the run's saved fraction, at the dtype "
    label += "that run loaded the target in and L = 256: the run saved no footprints to re-derive it here)"
    return DraftCost(cost.t_verify(0) * d.draft_fraction, "P", label, "derived", fraction=d.draft_fraction)


def derived_draft_cost(cost: VerifyCost, drafter, bytes_per_param: float = 2.0, context: int = 512) -> DraftCost:
    """An opened real drafter's cost derived from what one pass reads and computes (its
    :meth:`~brwsim.llm.drafters.Drafter.footprint`, beside its ``target_footprint``): :func:`footprint_cost`, one
    pass per drafted token; unknown (not counted) for a drafter that declares no footprint."""
    fp = drafter.footprint()
    if fp is None:
        return DraftCost(0.0, "P", f"{drafter.name}: unknown (not counted)", "none")
    tf = drafter.target_footprint
    return footprint_cost(cost, drafter.name, fp, tf, bytes_per_param, context)


def from_llm(
    run: RunResult,
    cost: VerifyCost,
    task: str | None = None,
    draft_costs=None,
    bytes_per_param: float = 2.0,
    context: int = 512,
) -> list[SpeedupTable]:
    """Speedup tables of a real-model run (a :class:`brwsim.llm.results.RunResult`): per task, the oracle (the speed
    of light) and every real drafter's tree of the builder fixed in advance (top-P-by-Q, or the lookup tree;
    :func:`brwsim.llm.drafters._report.fixed_builder`) at each P, with its draft cost: ``draft_costs[name]`` when given
    (measured here), else :func:`modelled_draft_cost` (``bytes_per_param`` and ``context``: the target's weight
    and KV width and the context for a cost model that has none of its own, a table)."""
    out = []
    for t in run.task(task):
        src = f"{run.model}/{t.task} ({t.prompts} prompts)"
        out.append(speedup_table(t.ex(), cost, source=src))
        for d in t.drafters:
            draft = (draft_costs or {}).get(d.name) or modelled_draft_cost(cost, d, bytes_per_param, context)
            fixed = fixed_builder(d.builders)  # fixed in advance: no choice made on the scored prompts
            ex = d.ex(fixed)
            if ex:
                out.append(speedup_table(ex, cost, draft, drafter=f"{d.name} ({fixed})", source=src))
    return out


P_CAP = 4096  # the largest budget the planner's grid grows to


def covers(cost: VerifyCost, P: int) -> bool:
    """Whether the cost model gives a time at ``P`` (a table does not extrapolate past its rows)."""
    try:
        cost.t_verify(P)
    except BrwsimError:
        return False
    return True


def grown_table(
    make: Callable[[list[int]], SpeedupTable], P: Sequence[int], cost: VerifyCost, P_cap: int = P_CAP
) -> SpeedupTable:
    """``make(P_list)``'s table, its grid grown until the best budget is interior: while the best is the largest P
    tried, the largest P is doubled (or raised to ``P_cap`` where doubling would pass it) and the table made again,
    up to ``P_cap`` and as far as the cost model covers. Where it stops at the edge, the table's ``limit`` says why:
    its answer is "at least P, still rising". Budgets given past ``P_cap`` are kept, and the grid is not grown."""
    Ps = sorted({int(p) for p in P})
    while True:
        t = make(Ps)
        if not t.at_edge():
            return t
        if Ps[-1] > P_cap:
            return dataclasses.replace(t, limit=f"the budgets given pass P_max = {P_cap}: the grid was not grown")
        if Ps[-1] == P_cap:
            return dataclasses.replace(t, limit=f"the grid stops at P_max = {P_cap}")
        nxt = min(2 * Ps[-1], P_cap)
        if not covers(cost, nxt):
            return dataclasses.replace(t, limit=f"the cost model gives no time past P = {Ps[-1]}")
        Ps.append(nxt)


def fixed_grid(tables: Iterable[SpeedupTable], why: str) -> list[SpeedupTable]:
    """Tables whose E[X] cannot be extended (measured or saved at fixed budgets): each one whose best is its largest
    P says so (``limit``: ``why``, e.g. E[X] measured up to P = 64)."""
    return [dataclasses.replace(t, limit=why.format(P=t.best.P)) if t.at_edge() else t for t in tables]


@dataclasses.dataclass(frozen=True)
class BestP:
    """The budgets whose speedup the data do not tell apart from the best (see :func:`best_P_set`)."""

    P_hat: int  # the largest speedup of the point estimates
    near_best: list[int]  # every P whose paired bootstrap difference to P_hat reaches 0
    smallest: int  # the smallest of them: the budget to name
    speedup: dict  # P -> point speedup
    replicates: int
    argmax_share: dict  # P -> share of bootstrap replicates in which P is the best
    at_edge: bool = False  # the point-estimate best is the largest budget given: at least that P, still rising

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _speedups(ex: np.ndarray, t: np.ndarray, Ps: Sequence[int], t_draft: Callable[[int], float]) -> np.ndarray:
    """(E[X](P) + 1) t(0) / (t(P) + t_draft(P)) for each P of ``Ps`` (``t[i]`` is P = ``Ps[i]``'s; ``Ps[0]`` = 0)."""
    return np.array([(ex[i] + 1.0) * t[0] / (t[i] + t_draft(P)) for i, P in enumerate(Ps)])


def best_P_set(
    ex: Mapping[int, Sequence[float]],
    times: Mapping[int, Sequence[float]],
    t_draft: Callable[[int], float] = lambda P: 0.0,
    replicates: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> BestP:
    """The best budget as a set: per-prompt E[X | prompt] at each P (``ex[P]``, the same prompts in the same order
    at every P) and timing repeats of t_verify (``times[P]``, P = 0 included). Each bootstrap replicate resamples
    the prompts (jointly over P) and each budget's repeats, takes the medians, fits them non-decreasing in P
    (:func:`isotonic_fit`) and computes the speedup at every P. A budget is in the set when the two-sided ``level``
    bootstrap interval of its speedup minus that of the point-estimate best reaches 0. P = 0, plain decoding
    (speedup 1), is a candidate too: where no budget pays for its pass, the set is ``[0]``. ``t_draft(P)``:
    seconds of drafting per tree (0: the oracle, the speed of light)."""
    Ps = sorted({0, *(int(P) for P in ex)})
    if any(P not in times for P in Ps):
        raise BrwsimError("best_P_set needs timing repeats at P = 0 and at every budget of ex")
    n = len(next(iter(ex.values()))) if ex else 1
    X = np.array([np.asarray(ex[P], float) if P in ex else np.zeros(n) for P in Ps])  # [budgets, prompts]
    T = [np.asarray(times[P], float) for P in Ps]
    w = [len(x) for x in T]

    def fit(Tl):
        return np.array(isotonic_fit([float(np.median(x)) for x in Tl], w))

    S = _speedups(X.mean(1), fit(T), Ps, t_draft)
    i_hat = int(np.argmax(S))  # the smallest P among exact ties
    rng = np.random.default_rng(seed)
    D, wins = np.empty((replicates, len(Ps))), np.zeros(len(Ps))
    for b in range(replicates):
        Xb = X[:, rng.integers(0, X.shape[1], X.shape[1])].mean(1)
        Sb = _speedups(Xb, fit([x[rng.integers(0, len(x), len(x))] for x in T]), Ps, t_draft)
        D[b] = Sb - Sb[i_hat]
        wins[int(np.argmax(Sb))] += 1
    hi = np.quantile(D, 0.5 + level / 2, axis=0)
    near = [P for P, h in zip(Ps, hi, strict=True) if h >= -1e-12]
    share = {P: float(c / replicates) for P, c in zip(Ps, wins, strict=True)}
    S_map = {P: float(s) for P, s in zip(Ps, S, strict=True)}
    return BestP(Ps[i_hat], near, min(near), S_map, replicates, share, Ps[i_hat] == Ps[-1] and Ps[-1] > 0)
