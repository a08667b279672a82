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
from ..llm.drafters._report import fixed_builder
from ..llm.results import DrafterResult, RunResult
from ._costs import ORACLE, DraftCost, VerifyCost, isotonic_fit

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

    @property
    def best(self) -> SpeedupRow:
        """The row with the largest estimated speedup (the smallest P among ties)."""
        return max(self.rows, key=lambda r: (r.speedup, -r.P))

    def near_best(self) -> list[int]:
        """Budgets whose speedup's 95% CI reaches the best one's: the data do not tell them apart from the best."""
        b = self.best
        return [r.P for r in self.rows if r.speedup + r.speedup_ci95 >= b.speedup - b.speedup_ci95]

    def at_edge(self) -> bool:
        """True when the best is the largest budget tried: a larger P may do better still."""
        return self.best.P == max(r.P for r in self.rows) and self.best.P > 0

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
            "best": {"P": b.P, "speedup": b.speedup, "speedup_ci95": b.speedup_ci95, "at_edge": self.at_edge()},
            "near_best_P": self.near_best(),
        }


def speedup_table(
    ex: Iterable[tuple[int, float, float]],
    cost: VerifyCost,
    draft: DraftCost = ORACLE,
    drafter: str = "oracle",
    source: str = "",
) -> SpeedupTable:
    """The table for E[X] given as ``(P, mean, ci95)`` triples (P >= 1; the P = 0 row is added: E[X] = 0)."""
    # a half-width read back from strict JSON is null (None) where it is undefined (one prompt)
    pts = sorted((int(P), float(m), math.nan if c is None else float(c)) for P, m, c in ex)
    if not pts:
        raise BrwsimError("no E[X] values to turn into a speedup: give at least one budget P")
    if any(P < 1 for P, _, _ in pts):
        raise BrwsimError("E[X] budgets must be >= 1 (P = 0, plain decoding, is added by itself)")
    t0 = cost.t_verify(0)
    rows = [SpeedupRow(0, 0.0, 0.0, t0, 0.0, 1.0, 0.0, cost.spread(0))]
    for P, m, c in pts:
        tv, td = cost.t_verify(P), draft.t_draft(P)
        ratio = t0 / (tv + td)
        c = 0.0 if math.isnan(c) else c
        rows.append(SpeedupRow(P, m, c, tv, td, (m + 1.0) * ratio, c * ratio, cost.spread(P)))
    return SpeedupTable(rows, cost, draft, drafter, source)


def from_simulation(res: SimulationResult, cost: VerifyCost, draft: DraftCost = ORACLE) -> SpeedupTable:
    """The speedup table of a :func:`brwsim.simulate` result (its drafter's E[X] at each of its budgets)."""
    ex = [(r.P, r.stat.mean, r.stat.ci95) for r in res.results]
    return speedup_table(ex, cost, draft, drafter=res.drafter, source=f"simulate {res.law} ({res.trees} trees)")


def drafter_pass_cost(cost: VerifyCost, k: int, layers: int) -> DraftCost:
    """An early-exit drafter's cost modelled from its size: one pass of its ``k`` of ``layers`` layers costs
    ``k / layers`` of a plain decoding step, and it runs one pass per drafted token."""
    return DraftCost(cost.t_verify(0) * k / layers, "P", f"early exit k={k} of {layers} layers", "modelled")


def modelled_draft_cost(cost: VerifyCost, d: DrafterResult) -> DraftCost:
    """A real drafter's cost modelled from its size: one pass costs ``d.draft_fraction`` of a plain decoding step
    (layers kept / layers, bits / 32, ...; zero for a proposer), one pass per drafted token."""
    if d.draft_fraction is None:
        return DraftCost(0.0, "P", f"{d.name}: unknown (not counted)", "none")
    if d.draft_fraction == 0:
        return DraftCost(0.0, "P", f"{d.name}: no model pass (proposals from the context)", "none")
    label = f"{d.name}: {d.draft_fraction:.3g} of a decoding step per pass, one pass per drafted token"
    return DraftCost(cost.t_verify(0) * d.draft_fraction, "P", label, "modelled")


def from_llm(run: RunResult, cost: VerifyCost, task: str | None = None, draft_costs=None) -> list[SpeedupTable]:
    """Speedup tables of a real-model run (a :class:`brwsim.llm.results.RunResult`): per task, the oracle (the speed
    of light) and every real drafter's tree of the builder fixed in advance (top-P-by-Q, or the lookup tree;
    :func:`brwsim.llm.drafters._report.fixed_builder`) at each P, with its draft cost: ``draft_costs[name]`` when given
    (measured here), else :func:`modelled_draft_cost`."""
    out = []
    for t in run.task(task):
        src = f"{run.model}/{t.task} ({t.prompts} prompts)"
        out.append(speedup_table(t.ex(), cost, source=src))
        for d in t.drafters:
            draft = (draft_costs or {}).get(d.name) or modelled_draft_cost(cost, d)
            fixed = fixed_builder(d.builders)  # fixed in advance: no choice made on the scored prompts
            ex = d.ex(fixed)
            if ex:
                out.append(speedup_table(ex, cost, draft, drafter=f"{d.name} ({fixed})", source=src))
    return out


@dataclasses.dataclass(frozen=True)
class BestP:
    """The budgets whose speedup the data do not tell apart from the best (see :func:`best_P_set`)."""

    P_hat: int  # the largest speedup of the point estimates
    near_best: list[int]  # every P whose paired bootstrap difference to P_hat reaches 0
    smallest: int  # the smallest of them: the budget to name
    speedup: dict  # P -> point speedup
    replicates: int
    argmax_share: dict  # P -> share of bootstrap replicates in which P is the best

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
    return BestP(Ps[i_hat], near, min(near), {P: float(s) for P, s in zip(Ps, S, strict=True)}, replicates, share)
