"""What :func:`brwsim.simulate` returns: E[X] per budget P with its confidence interval and bounds.

:class:`SimulationResult` holds the law's entropy moments and one
:class:`PResult` per budget; ``to_dict()`` is the JSON object of
``brwsim simulate --json``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._stats import CONVENTION, Stat
from .theory import KINDS, Bounds


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


__all__ = ["PResult", "SimulationResult"]
