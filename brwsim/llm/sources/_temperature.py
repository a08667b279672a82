"""Sampling temperature on log-probability rows: ``log_softmax(logp / T)`` (docs/llm.md, "Temperature").

:func:`temper` transforms rows (any shape, the vocabulary last);
:class:`TempSource` wraps a logits source so that its root, tree rows and
walks are all at temperature ``T`` (T = 1 returns the rows unchanged).
"""

from __future__ import annotations

import dataclasses
import math

from ...errors import BrwsimError
from ._base import Context, LogitsSource, Walker, WrappedWalker, Wrapper
from ._query import NodeAnswer, NodeQuery, temper, temper_tensor


def check_temperature(T) -> float:
    """T as a float > 0 (one-line error otherwise)."""
    try:
        t = float(T)
    except (TypeError, ValueError):
        raise BrwsimError(f"--temperature must be a number > 0, got {T!r}") from None
    if not (math.isfinite(t) and t > 0):
        raise BrwsimError(
            f"--temperature must be a finite number > 0, got {T!r} (T -> 0 is greedy decoding; use e.g. 0.05)"
        )
    return t


class TempSource(Wrapper):
    """A logits source at temperature ``T`` (every row through :func:`temper`)."""

    def __init__(self, inner: LogitsSource, T: float):
        super().__init__(inner)
        self.T = float(T)

    def open(self, prompt_ids) -> TempContext:
        return TempContext(self.inner.open(prompt_ids), self.T)


class TempContext(Context):
    def __init__(self, inner: Context, T: float):
        self.inner, self.T = inner, T
        self._root = None

    @property
    def root(self):
        """The prompt's row at temperature T, on the host (copied when first read)."""
        if self._root is None:
            self._root = temper(self.inner.root, self.T)
        return self._root

    def logprobs(self, prefixes):
        return temper(self.inner.logprobs(prefixes), self.T)

    def query(self, prefixes, q: NodeQuery) -> NodeAnswer:
        """Asked of the inner context at this temperature (on the model's device where it runs one)."""
        if q.T != 1.0:
            return super().query(prefixes, q)
        return self.inner.query(prefixes, dataclasses.replace(q, T=self.T))

    def walker(self, n: int) -> Walker:
        return _TempWalker(self, self.inner.walker(n))

    def transfer(self):
        return self.inner.transfer()

    def device_rows(self, prefixes):
        rows = self.inner.device_rows(prefixes)
        return None if rows is None else temper_tensor(rows, self.T)


class _TempWalker(WrappedWalker):
    def rows(self, rows):
        return temper(rows, self.ctx.T)

    def query(self, tokens, q: NodeQuery) -> NodeAnswer:
        if q.T != 1.0:
            return super().query(tokens, q)
        got = self.inner.query(tokens, dataclasses.replace(q, T=self.ctx.T))
        self._append(tokens)
        return got

    def device_step(self, tokens):
        rows = self.inner.device_step(tokens)
        if rows is None:
            return None
        self._append(tokens)
        return temper_tensor(rows, self.ctx.T)
