"""The running sums of a run: one running statistic per requested P and one for the check, exact and restorable.

Values are added in tree order (by every process alike, :mod:`brwsim._gather`),
so the sums are those of one process adding every tree, bit for bit; their
exact state is what a checkpoint keeps (:mod:`brwsim._resume`).
"""

from __future__ import annotations

import numpy as np

from ._stats import RunningStat


class Sums:
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

    def done(self) -> int:
        """Trees whose values every column holds."""
        return min(s.n for s in self.cols)

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


__all__ = ["Sums"]
