"""Monte Carlo statistics: a mean with its standard error, and the one chunked sampling loop.

Every estimate brwsim prints carries its uncertainty: a :class:`Stat` (mean,
standard error, count) and the 95% half-width ``Z95 * se``. Used one-sided,
as the margin of an upper bound (``estimate + Z95 * se``), the same z gives an
upper 97.5% confidence value (docs/theory.md, "Confidence margins").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import scipy.special

from ._keys import item_keys

CONVENTION = "X = accepted draft tokens per verifier call (tokens per call = X + 1)"
Z95 = 1.959963984540054  # two-sided 95% normal quantile; one-sided it is the 97.5% quantile
MARGIN_Z = 1.96  # z of the bounds' upper confidence margin: estimate + 1.96 se, a one-sided upper 97.5% value


@dataclasses.dataclass(frozen=True)
class Stat:
    """A Monte Carlo mean with its standard error (95% CI = 1.96 se)."""

    mean: float
    se: float
    n: int

    @property
    def ci95(self) -> float:
        return Z95 * self.se

    @classmethod
    def of(cls, x) -> Stat:
        """The mean of samples ``x`` (first axis) and its standard error (NaN for one sample)."""
        x = np.asarray(x, np.float64)
        n = x.shape[0]
        with np.errstate(invalid="ignore"):  # infinite samples (a KL against a q with zeros): the se is NaN
            se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        return cls(float(x.mean()), se, n)


class RunningStat:
    """Mean and standard error of a stream of values in bounded memory, whatever the stream's length.

    Values are kept in blocks of ``BLOCK``; a full block is folded into
    running (count, mean, sum of squared deviations) by Chan et al.'s
    pairwise update, each block's own sums by NumPy's pairwise summation, so
    memory does not grow with the count and the result does not depend on how
    the values were fed (only on their order). Up to ``BLOCK`` values the
    result is exactly :meth:`Stat.of` of them.
    """

    BLOCK = 2**16

    def __init__(self):
        self._buf = np.empty(self.BLOCK)
        self._fill = 0
        self._n, self._mean, self._m2 = 0, 0.0, 0.0

    def add(self, x) -> None:
        """Append values (a 1-D array or a scalar), in order."""
        x = np.atleast_1d(np.asarray(x, np.float64))
        while x.size:
            if self._fill == self.BLOCK:  # fold a full block only when more values come
                self._fold()
            k = min(x.size, self.BLOCK - self._fill)
            self._buf[self._fill : self._fill + k] = x[:k]
            self._fill += k
            x = x[k:]

    def _fold(self) -> None:
        b = self._buf[: self._fill]
        nb, mb = b.size, b.mean()
        m2b = float(((b - mb) ** 2).sum())
        n = self._n + nb
        delta = mb - self._mean
        self._mean += delta * nb / n
        self._m2 += m2b + delta * delta * self._n * nb / n
        self._n, self._fill = n, 0

    @property
    def n(self) -> int:
        return self._n + self._fill

    def state(self) -> dict:
        """Everything this statistic holds, exactly (for a checkpoint): :meth:`restore` gives it back."""
        return {"buf": self._buf[: self._fill].copy(), "n": self._n, "mean": self._mean, "m2": self._m2}

    @classmethod
    def restore(cls, state: dict) -> RunningStat:
        """The statistic :meth:`state` described, bit for bit."""
        r = cls()
        buf = np.asarray(state["buf"], np.float64)
        r._buf[: buf.size] = buf
        r._fill, r._n, r._mean, r._m2 = buf.size, int(state["n"]), float(state["mean"]), float(state["m2"])
        return r

    def stat(self) -> Stat:
        """The :class:`Stat` of every value added so far."""
        if self._n == 0:
            return Stat.of(self._buf[: self._fill])
        if self._fill:
            self._fold()
        n = self._n
        se = math.sqrt(self._m2 / (n - 1)) / math.sqrt(n) if n > 1 else float("nan")
        return Stat(float(self._mean), se, n)


def t95(n: int) -> float:
    """Two-sided 95% quantile of Student's t with ``n - 1`` degrees of freedom (a sample of ``n`` values).

    12.706 for two values, 2.776 for five, 1.998 for 64; tends to :data:`Z95` as n grows.
    """
    if n < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {n}")
    return float(scipy.special.stdtrit(n - 1, 0.975))


def mean_ci95(x) -> tuple[float, float]:
    """(mean, 95% half-width) of a small 1-D sample, e.g. one value per prompt: a Student t interval.

    half-width = t_{0.975, n-1} * s / sqrt(n) with s the sample standard deviation (ddof = 1): the
    interval for the mean of n independent draws, exact for normal values and never the normal z,
    which is several times too narrow at n = 2..4. NaN for an empty sample, NaN half-width for one value.
    """
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), math.nan
    return float(x.mean()), float(t95(x.size) * x.std(ddof=1) / math.sqrt(x.size))


def paired_ci95(a, b) -> tuple[float, float]:
    """(mean, 95% t half-width) of the paired differences ``a - b`` over the same units (e.g. prompts).

    Two drafters measured on the same prompts are compared through their per-prompt differences,
    which removes the prompt-to-prompt variation both share; an interval that excludes 0 is a
    difference at the 95% level.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired samples need the same shape, got {a.shape} and {b.shape}")
    return mean_ci95(a - b)


def sample_chunks(f: Callable, base, samples: int, width: int) -> list[np.ndarray]:
    """Apply a jitted ``f(keys) -> tuple of [n, ...] arrays`` to the item keys ``fold_in(base, i)``, i < samples.

    Runs in chunks of at most ``2**22 // width`` items (``width``: floats per item
    that ``f`` materialises, e.g. the vocabulary), every chunk of one shape (one
    compilation); returns each output concatenated over items, as float64.
    """
    chunk = max(1, min(samples, 2**22 // max(width, 1)))
    cols: list[list[np.ndarray]] = []
    for start in range(0, samples, chunk):
        n = min(chunk, samples - start)
        out = f(item_keys(base, start, chunk))
        out = out if isinstance(out, tuple) else (out,)
        if not cols:
            cols = [[] for _ in out]
        for c, o in zip(cols, out, strict=True):
            c.append(np.asarray(o, np.float64)[:n])
    return [np.concatenate(c) for c in cols]


__all__ = ["CONVENTION", "MARGIN_Z", "RunningStat", "Stat", "Z95", "mean_ci95", "paired_ci95", "sample_chunks", "t95"]
