"""Sampling temperature on log-probability rows: ``log_softmax(logp / T)`` (docs/llm.md, "Temperature").

:func:`temper` transforms rows (any shape, the vocabulary last);
:class:`TempSource` wraps a logits source so that its root, tree rows and
walks are all at temperature ``T`` (T = 1 returns the rows unchanged).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import BrwsimError
from ._base import Context, LogitsSource, Walker, WrappedWalker, Wrapper


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


def temper(rows, T: float) -> np.ndarray:
    """``log_softmax(rows / T)`` along the last axis, float32 (rows unchanged at T = 1)."""
    rows = np.asarray(rows, np.float32)
    if T == 1.0:
        return rows
    x = rows.astype(np.float64) / T
    m = np.max(x, axis=-1, keepdims=True)
    out = x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))
    return out.astype(np.float32)


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
        self.root = temper(inner.root, T)

    def logprobs(self, prefixes):
        return temper(self.inner.logprobs(prefixes), self.T)

    def walker(self, n: int) -> Walker:
        return _TempWalker(self, self.inner.walker(n))


class _TempWalker(WrappedWalker):
    def rows(self, rows):
        return temper(rows, self.ctx.T)
