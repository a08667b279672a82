"""A drafter's q as a context: its rows at temperature T and the top-K children its tree builders read."""

from __future__ import annotations

import numpy as np

from ..measure import row_stats
from ..sources import Context, temper


class DraftView(Context):
    """A draft context seen as a :class:`Context` at temperature T (rows cached as top-K lists for the builders)."""

    def __init__(self, dctx, T: float = 1.0, K: int = 128):
        self.dctx, self.T, self.K = dctx, float(T), K
        self.root = temper(dctx.logprobs([()])[0], self.T)
        self._tops: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def logprobs(self, prefixes):
        return temper(self.dctx.logprobs([tuple(p) for p in prefixes]), self.T)

    def known(self, prefix: tuple[int, ...]) -> bool | None:
        """Whether the prefix's row is already computed (free to ask); None: the draft context cannot tell."""
        known = self.dctx.known(prefix)
        return None if known is None else prefix in self._tops or known

    def tops(self, prefixes) -> list[tuple[np.ndarray, np.ndarray]]:
        """(token ids, log q) of each prefix's K most likely children, by decreasing q. The draft context may
        then drop those prefixes' whole rows (the builders need only these): a prompt in flight keeps
        kilobytes per drafted node instead of a row of the vocabulary."""
        need = [p for p in dict.fromkeys(tuple(p) for p in prefixes) if p not in self._tops]
        if need:
            ids, vals, _, _ = row_stats(self.logprobs(need), self.K)
            for j, p in enumerate(need):
                self._tops[p] = (ids[j], vals[j].astype(np.float64))
            self.dctx.forget(need)
        return [self._tops[tuple(p)] for p in prefixes]
