"""speedup(P) = (E[X](P) + 1) t_verify(0) / (t_verify(P) + t_draft(P)), its CI, and the best budget.

E[X](P) comes from a Monte Carlo run (:class:`brwsim.SimulationResult`) or a
real-model run (the dict of :func:`brwsim.llm.run.run_llm`); the 95% CI of the
speedup is E[X]'s CI times the same time ratio (the times are taken as exact:
their measured spread is reported beside, not folded in).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from .._stats import CONVENTION
from ..errors import BrwsimError
from ..estimate import SimulationResult
from ._costs import ORACLE, DraftCost, VerifyCost

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
    pts = sorted((int(P), float(m), float(c)) for P, m, c in ex)
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


def from_llm(d: dict, cost: VerifyCost, task: str | None = None) -> list[SpeedupTable]:
    """Speedup tables of a real-model run (:func:`brwsim.llm.run.run_llm`'s dict): the oracle of each task and, when
    the run had a drafter, its top-P-by-Q and chain trees at each exit layer k (draft cost from
    :func:`drafter_pass_cost`)."""
    tasks = [t for t in d.get("tasks", []) if task is None or t["task"] == task]
    if not tasks:
        known = ", ".join(t["task"] for t in d.get("tasks", [])) or "none"
        raise BrwsimError(f"the real-model result has no task {task!r} (tasks: {known})")
    out = []
    for t in tasks:
        src = f"{d.get('model', 'model')}/{t['task']} ({t.get('prompts', '?')} prompts)"
        out.append(speedup_table([(r["P"], r["mean"], r["ci95"]) for r in t["results"]], cost, source=src))
        dr = t.get("drafter") or {}
        for e in dr.get("per_k", []):
            draft = drafter_pass_cost(cost, e["k"], dr["layers"])
            for kind in ("topq", "chain"):
                ex = [(r["P"], r[kind], r[kind + "_ci95"]) for r in e["results"]]
                out.append(speedup_table(ex, cost, draft, drafter=f"{kind} k={e['k']}", source=src))
    return out
