"""A drafter's q as a context: its rows at temperature T and the top-K children its tree builders read."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..sources import Context, NodeAnswer, NodeQuery, answer_rows, temper
from ..sources._query import temper_tensor


class DraftView(Context):
    """A draft context seen as a :class:`Context` at temperature T (rows cached as top-K lists for the builders)."""

    def __init__(self, dctx, T: float = 1.0, K: int = 128):
        self.dctx, self.T, self.K = dctx, float(T), K
        self._root: np.ndarray | None = None
        self._tops: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    @property
    def root(self) -> np.ndarray:
        """The drafter's row of the prompt at temperature T, on the host (asked once, when first read)."""
        if self._root is None:
            self._root = self.logprobs([()])[0]
        return self._root

    def logprobs(self, prefixes):
        return temper(self.dctx.logprobs([tuple(p) for p in prefixes]), self.T)

    def device_rows(self, prefixes):
        """The tempered rows on the drafter's device (None where its rows are on the host)."""
        rows = self.dctx.device_rows([tuple(p) for p in prefixes])
        return None if rows is None else temper_tensor(rows, self.T)

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
            a = self.dctx.query(need, NodeQuery(K=self.K, T=self.T))
            for j, p in enumerate(need):
                self._tops[p] = (a.ids[j], a.logp[j].astype(np.float64))
            self.dctx.forget(need)
        return [self._tops[tuple(p)] for p in prefixes]

    def query(self, prefixes, q: NodeQuery) -> NodeAnswer:
        """A query for the top-K children at the view's own K is answered from :meth:`tops` (the same lists);
        any other by the draft context at the view's temperature."""
        if q == NodeQuery(K=self.K):
            got = self.tops(prefixes)
            ids = np.stack([i for i, _ in got]) if got else np.zeros((0, self.K), np.int64)
            vals = np.stack([v for _, v in got]).astype(np.float32) if got else np.zeros((0, self.K), np.float32)
            return NodeAnswer(ids=ids, logp=vals)
        if q.T != 1.0:
            return answer_rows(self.logprobs(prefixes), q)
        return self.dctx.query([tuple(p) for p in prefixes], dataclasses.replace(q, T=self.T))
