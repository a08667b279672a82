"""Typed results of a real-model run: what ``brwsim llm`` measures and ``brwsim plan`` reads.

:class:`RunResult` (a whole run) holds one :class:`TaskResult` per task (the
oracle, the i.i.d. surrogate and the bounds at each P, :class:`OracleRow`)
and, per task, one :class:`DrafterResult` per real drafter (its trees' E[X]
at each P, :class:`DrafterRow`; its statistics; its :class:`CheckResult`).
Every class has ``to_dict()``: the JSON of ``brwsim llm --json``
(docs/llm.md, "Layout"); :func:`run_from_dict` reads that JSON back.
X = accepted draft tokens per verifier call (tokens per call = X + 1).
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import BrwsimError


@dataclasses.dataclass(frozen=True)
class OracleRow:
    """One budget P of a task: the real oracle's E[X] (mean over prompts, 95% CI), the surrogate, the bounds."""

    P: int
    mean: float
    ci95: float
    surrogate: float | None = None
    surrogate_ci95: float | None = None
    bounds: dict = dataclasses.field(default_factory=dict)  # brwsim.theory.Bounds.to_dict() of the task's walks

    def to_dict(self) -> dict:
        d = {"P": self.P, "mean": self.mean, "ci95": self.ci95}
        if self.surrogate is not None:
            d["surrogate"], d["surrogate_ci95"] = self.surrogate, self.surrogate_ci95
        return d | self.bounds

    @classmethod
    def from_dict(cls, d: dict) -> OracleRow:
        core = {"P", "mean", "ci95", "surrogate", "surrogate_ci95"}
        rest = {k: v for k, v in d.items() if k not in core}
        return cls(int(d["P"]), d["mean"], d["ci95"], d.get("surrogate"), d.get("surrogate_ci95"), rest)


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The direct check pooled over prompts: real speculative decoding's accepted tokens vs the tree's value.

    The checked tree is each prompt's builder with the largest value at ``P`` on that prompt (``builders``: those
    used), not always the fixed builder the fractions score; ``fixed_value`` is the fixed builder's mean value at
    the same P (with its Student-t half-width over prompts), for comparison."""

    P: int
    builders: list
    calls: int
    accepted_per_call: float
    accepted_per_call_ci95: float
    path_probability_value: float
    z: float
    per_prompt_max_abs_z: float
    fixed_builder: str | None = None
    fixed_value: float | None = None
    fixed_value_ci95: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DrafterRow:
    """One budget P of one drafter: each builder's E[X] (mean, 95% CI), the best one, the imperfect-knowledge
    columns (``ik``: docs/theory.md, "Imperfect knowledge")."""

    P: int
    values: dict  # builder -> (mean, ci95)
    best_builder: str | None = None
    fraction_of_oracle: float | None = None
    fraction_of_oracle_ci95: float | None = None
    ik: dict = dataclasses.field(default_factory=dict)

    @property
    def best(self) -> tuple[float, float] | None:
        return self.values[self.best_builder] if self.best_builder else None

    def to_dict(self) -> dict:
        d: dict = {"P": self.P}
        for b, (m, c) in self.values.items():
            d[b], d[b + "_ci95"] = m, c
        if self.best_builder:
            d["best"], d["best_builder"], d["best_ci95"] = self.best[0], self.best_builder, self.best[1]
            d["fraction_of_oracle"], d["fraction_of_oracle_ci95"] = (
                self.fraction_of_oracle,
                self.fraction_of_oracle_ci95,
            )
        return d | self.ik

    @classmethod
    def from_dict(cls, d: dict, builders) -> DrafterRow:
        values = {b: (d[b], d[b + "_ci95"]) for b in builders if b in d}
        ik = {k: v for k, v in d.items() if k.startswith("ik_") or k == "s_P"}
        fr = (d.get("fraction_of_oracle"), d.get("fraction_of_oracle_ci95"))
        return cls(int(d["P"]), values, d.get("best_builder"), *fr, ik)


@dataclasses.dataclass(frozen=True)
class DrafterResult:
    """One real drafter on one task."""

    name: str
    prompts: int
    info: dict  # what the drafter says about itself (layers kept, bits, ...), and its held-out statistics
    builders: list
    stats: dict  # cross-entropy, KL, TV, top-1 agreement along the target's walks (means, 95% CIs); mu_q, mu2_q
    rows: list[DrafterRow]
    check: CheckResult | None
    drafter_passes: int
    draft_fraction: float | None = None  # cost of one drafter pass / one target decoding step (None: no passes)
    # PassFootprint.to_dict() of one drafter pass and of the target's decoding step: a planner re-derives the pass
    # on its own cost model from these (the fraction above is at the dtype and context of the run)
    footprint: dict | None = None
    target_footprint: dict | None = None

    def ex(self, builder: str | None = None) -> list[tuple[int, float, float]]:
        """``(P, mean, ci95)`` of one builder's trees (default: the best builder at each P)."""
        out = []
        for r in self.rows:
            v = r.best if builder is None else r.values.get(builder)
            if v is not None and math.isfinite(v[0]):
                out.append((r.P, v[0], v[1]))
        return out

    def to_dict(self) -> dict:
        d = {"name": self.name, "prompts": self.prompts, "info": self.info, "builders": list(self.builders)}
        d |= {"stats": self.stats, "results": [r.to_dict() for r in self.rows]}
        d |= {"check": self.check.to_dict() if self.check else {}, "drafter_passes": self.drafter_passes}
        d |= {"draft_fraction": self.draft_fraction}
        if self.footprint is not None:
            d |= {"footprint": self.footprint, "target_footprint": self.target_footprint}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DrafterResult:
        rows = [DrafterRow.from_dict(r, d["builders"]) for r in d["results"]]
        check = CheckResult(**d["check"]) if d.get("check") else None
        return cls(d["name"], d["prompts"], d.get("info", {}), list(d["builders"]), d.get("stats", {}), rows,
                   check, d.get("drafter_passes", 0), d.get("draft_fraction"), d.get("footprint"),
                   d.get("target_footprint"))  # fmt: skip


def footprint_fields(drafter) -> dict:
    """``footprint`` and ``target_footprint`` of a :class:`DrafterResult` for an opened drafter: the
    :class:`~brwsim.llm.drafters._base.PassFootprint` dicts of its pass and of the target's step (empty when it
    declares none)."""
    fp, tf = drafter.footprint(), drafter.target_footprint
    if fp is None or (tf is None and not fp.empty):
        return {}
    return {"footprint": fp.to_dict(), "target_footprint": tf.to_dict() if tf is not None else None}


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """One task (a set of prompts): mu, mu_2 along the walks, the oracle/surrogate/bounds rows, the drafters."""

    task: str
    prompts: int
    rows: list[OracleRow]
    oracle_evaluated_nodes: int = 0
    oracle_passes: int = 0
    walks: dict = dataclasses.field(default_factory=dict)  # mu, mu2 (+ CIs), spine_nodes, walks (when walked)
    pool: str | None = None
    drafters: list[DrafterResult] = dataclasses.field(default_factory=list)

    def ex(self) -> list[tuple[int, float, float]]:
        """The oracle's ``(P, mean, ci95)``."""
        return [(r.P, r.mean, r.ci95) for r in self.rows]

    @property
    def mu(self) -> float | None:
        """Mean entropy (nats) of the visited nodes along the walks (None: not walked)."""
        return self.walks.get("mu")

    @property
    def mu2(self) -> float | None:
        """Mean second log-moment of the visited nodes along the walks (None: not walked)."""
        return self.walks.get("mu2")

    def to_dict(self) -> dict:
        d = {"task": self.task, "prompts": self.prompts} | self.walks
        if self.pool is not None:
            d["pool"] = self.pool
        d |= {"results": [r.to_dict() for r in self.rows], "oracle_evaluated_nodes": self.oracle_evaluated_nodes}
        d["oracle_passes"] = self.oracle_passes
        if self.drafters:
            d["drafters"] = [x.to_dict() for x in self.drafters]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TaskResult:
        walk_keys = ("mu", "mu2", "mu_ci95", "mu2_ci95", "spine_nodes", "walks")
        return cls(d["task"], d.get("prompts", 0), [OracleRow.from_dict(r) for r in d["results"]],
                   d.get("oracle_evaluated_nodes", 0), d.get("oracle_passes", 0),
                   {k: d[k] for k in walk_keys if k in d}, d.get("pool"),
                   [DrafterResult.from_dict(x) for x in d.get("drafters", [])])  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Timing:
    load_seconds: float
    model_phase_seconds: float
    forward_seconds: float
    forward_fraction: float | None
    total_seconds: float
    host_bytes_per_node: float | None = None  # bytes from the target's device to the host per node answered

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """A whole real-model run (``brwsim llm``)."""

    model: str
    vocab_size: int
    settings: dict  # the run's options as given (prompts, n, walks, depth, seed, ..., temperature)
    tasks: list[TaskResult]
    timing: Timing | None = None

    def task(self, name: str | None = None) -> list[TaskResult]:
        """The tasks (all, or the one named); one-line error naming the known ones."""
        out = [t for t in self.tasks if name is None or t.task == name]
        if not out:
            known = ", ".join(t.task for t in self.tasks) or "none"
            raise BrwsimError(f"the real-model result has no task {name!r} (tasks: {known})")
        return out

    def to_dict(self) -> dict:
        d = {"model": self.model, "vocab_size": self.vocab_size} | self.settings
        d["tasks"] = [t.to_dict() for t in self.tasks]
        return d | ({"timing": self.timing.to_dict()} if self.timing else {})


def run_from_dict(d: dict) -> RunResult:
    """A :class:`RunResult` from the JSON of ``brwsim llm --json`` (``KeyError``/``TypeError`` if it is not one)."""
    settings = {k: v for k, v in d.items() if k not in ("model", "vocab_size", "tasks", "timing")}
    timing = Timing(**d["timing"]) if d.get("timing") else None
    return RunResult(d.get("model", "model"), d.get("vocab_size", 0), settings,
                     [TaskResult.from_dict(t) for t in d["tasks"]], timing)  # fmt: skip


__all__ = ["CheckResult", "DrafterResult", "DrafterRow", "OracleRow", "RunResult", "TaskResult", "Timing",
           "footprint_fields", "run_from_dict"]  # fmt: skip
