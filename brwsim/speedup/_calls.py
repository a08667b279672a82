"""A drafter's cost per target call, measured where it is spent: in real speculative decoding.

One pass timed alone is not what a tree builder costs. The fixed builder
(top-P-by-Q, four rows a search step) takes several passes per call, each
scoring several rows, plus its host work (the full-vocabulary rows it reads,
the search) and the catch-up pass for the tokens the target accepted. So the
draft cost the planner charges is measured per call: on a few calibration
prompts, for every budget P, ``new_tokens`` tokens by real speculative
decoding (:func:`brwsim.llm.specdec.speculative_generate`), interleaved with
plain decoding of the same target; per prompt and P, the drafting seconds per
call over the mean plain step of the plain runs around it. The cost of a
budget is the mean of that fraction over the prompts (Student t interval),
times the step t_verify(0) of the table it enters. The passes per call and the
rows per pass are kept too: a roofline panel charges those passes at its own
pass time (:meth:`brwsim.speedup.RooflineCost.pass_time`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .._stats import mean_ci95
from ..llm import specdec
from ._costs import DraftCost, TableCost


@dataclasses.dataclass(frozen=True)
class DraftCalls:
    """Per budget ``P[i]``: ``fraction[i]`` (mean over prompts of the drafting seconds per call over the plain step
    around it; ``fraction_ci95[i]`` its Student t 95% half-width, None for one prompt), ``seconds[i]`` (mean
    drafting seconds per call), ``passes[i]`` (mean drafter passes per call, the prompt's prefill apart) and
    ``rows[i]`` (mean rows per pass; 0 where the draft context does not count them). ``t_step``: the mean plain
    step; ``prompts``, ``new_tokens``: the calibration run's size. ``verify[i]`` and ``verify_ci95[i]``: the
    verifying seconds per call in the same loop over the plain step (the target's pass on the drafted nodes and
    the tree's verification on the host) and its half-width; ``drafted[i]``: mean nodes drafted per call (None
    in a record made before they were kept)."""

    name: str
    P: tuple[int, ...]
    fraction: tuple[float, ...]
    fraction_ci95: tuple[float | None, ...]
    seconds: tuple[float, ...]
    passes: tuple[float, ...]
    rows: tuple[float, ...]
    t_step: float
    prompts: int
    new_tokens: int
    verify: tuple[float, ...] | None = None
    verify_ci95: tuple[float | None, ...] | None = None
    drafted: tuple[float, ...] | None = None

    def verify_cost(self, t0: float, label: str = ""):
        """t_verify(P) as the loop spends it for this drafter, in a table whose plain step is ``t0``: a
        :class:`~brwsim.speedup.TableCost` of t0 at P = 0 and ``verify[i] x t0`` at each budget (None in a record
        without it)."""
        if self.verify is None:
            return None
        pts = {0: t0} | {P: f * t0 for P, f in zip(self.P, self.verify, strict=True)}
        return TableCost(pts, "measured", label or f"{self.name}: verifying per call in speculative decoding here")

    def cost(self, t0: float) -> DraftCost:
        """The per-call :class:`DraftCost` in a table whose plain step is ``t0`` seconds (fraction x t0)."""
        lo, hi = min(self.fraction), max(self.fraction)
        label = (
            f"{self.name}: {lo:.3g} .. {hi:.3g} of the target's step per call at P = {self.P[0]} .. {self.P[-1]}, "
            f"measured in speculative decoding here ({self.prompts} prompts, {self.new_tokens} tokens each, "
            "interleaved with plain decoding)"
        )
        return DraftCost(
            kind="measured",
            label=label,
            passes=tuple(zip(self.P, self.passes, strict=True)),
            t_step=self.t_step,
            repeats=self.prompts,
            per_call=tuple((P, f * t0) for P, f in zip(self.P, self.fraction, strict=True)),
            per_call_ci95=tuple(
                (P, None if c is None else c * t0) for P, c in zip(self.P, self.fraction_ci95, strict=True)
            ),
        )

    def roofline_cost(self, roofline, footprint) -> DraftCost:
        """The passes per call measured here, each at ``roofline``'s pass time for ``footprint`` at its measured
        rows per pass (:meth:`brwsim.speedup.RooflineCost.pass_time`; host work is not on a roofline)."""
        return self.pass_cost(lambda rows: roofline.pass_time(footprint, rows), "on the roofline")

    def pass_cost(self, pass_time, where: str) -> DraftCost:
        """The passes per call measured here, each at ``pass_time(rows)`` seconds for its measured rows per pass."""
        per_call = [(P, n * pass_time(max(r, 1.0))) for P, n, r in zip(self.P, self.passes, self.rows, strict=True)]
        t1 = pass_time(1.0)
        label = f"{self.name}: its measured passes per call, {1e3 * t1:.3g} ms a one-row pass {where}"
        passes = tuple(zip(self.P, self.passes, strict=True))
        return DraftCost(t1, passes, label, "derived", per_call=tuple(per_call))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> DraftCalls:
        tup = ("P", "fraction", "fraction_ci95", "seconds", "passes", "rows", "verify", "verify_ci95", "drafted")
        return cls(**{k: tuple(v) if k in tup and v is not None else v for k, v in d.items()})


def measure_draft_calls(
    drafter,
    target,
    prompts: Sequence[Sequence[int]],
    P_list: Sequence[int],
    new_tokens: int = 24,
    T: float = 1.0,
    seed: int = 0,
    name: str | None = None,
) -> DraftCalls:
    """Time ``drafter``'s drafting per call in real speculative decoding on ``target`` (an HF source) for every
    budget of ``P_list``, on each prompt (token ids): plain, P_1, P_2, plain, P_3, P_4, plain, ... (a plain run of
    the same target after every second budget and after the last); each budget's fraction is over the mean step
    of the two plain runs around it."""
    Ps = [int(P) for P in P_list]
    if not Ps or min(Ps) < 1:
        raise ValueError("measure_draft_calls: budgets must be >= 1")
    got: dict[int, list[tuple[float, ...]]] = {P: [] for P in Ps}
    steps: list[float] = []
    for i, ids in enumerate(prompts):
        ids = [int(t) for t in ids]

        def plain(ids=ids, i=i):
            g = specdec.plain_generate(target, ids, new_tokens, T, np.random.default_rng([seed, i, 0]))
            steps.append(g.seconds / len(g.tokens))
            return steps[-1]

        specdec.plain_generate(target, ids, 2, T, np.random.default_rng([seed, i, 0]))  # warm-up: caches, allocations
        before, pending = plain(), []
        for j, P in enumerate(Ps):
            rng = np.random.default_rng([seed, i, j + 1])
            g = specdec.speculative_generate(target, drafter, ids, new_tokens, P, T, rng)
            per_pass = g.draft_rows / g.draft_passes if g.draft_passes else 0.0
            v, nodes = g.verify_seconds / g.calls, float(np.mean(g.drafted))
            pending.append((P, g.draft_seconds / g.calls, g.draft_passes / g.calls, per_pass, v, nodes))
            if j % 2 == 1 or j == len(Ps) - 1:
                after = plain()
                step = 0.5 * (before + after)
                for P_, s, n, r, v, nodes in pending:
                    got[P_].append((s / step, s, n, r, v / step, nodes))
                before, pending = after, []
    fr = [mean_ci95([x[0] for x in got[P]]) for P in Ps]
    vf = [mean_ci95([x[4] for x in got[P]]) for P in Ps]
    return DraftCalls(
        name=name or drafter.name,
        P=tuple(Ps),
        fraction=tuple(m for m, _ in fr),
        fraction_ci95=tuple(c if len(prompts) > 1 else None for _, c in fr),
        seconds=tuple(float(np.mean([x[1] for x in got[P]])) for P in Ps),
        passes=tuple(float(np.mean([x[2] for x in got[P]])) for P in Ps),
        rows=tuple(float(np.mean([x[3] for x in got[P]])) for P in Ps),
        t_step=float(np.mean(steps)),
        prompts=len(prompts),
        new_tokens=int(new_tokens),
        verify=tuple(m for m, _ in vf),
        verify_ci95=tuple(c if len(prompts) > 1 else None for _, c in vf),
        drafted=tuple(float(np.mean([x[5] for x in got[P]])) for P in Ps),
    )
