"""Entropy moments: the formula, and the typed result every law and real model reports.

For a distribution p, the entropy and the second log-moment are

    H(p)  = sum_i p_i (-log p_i),      M2(p) = sum_i p_i (log p_i)^2,

and a law's moments are their means, mu = E[H(p)] and mu_2 = E[M2(p)]
(docs/theory.md, "Definitions and conventions"). :func:`entropy_moments` is
the one implementation; it takes NumPy or JAX arrays.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np


def entropy_moments(logp, sum_dtype=None):
    """(H, M2) over the last axis of log-probabilities ``logp`` (NumPy or JAX, any leading shape).

    Zero-probability entries (``-inf``) contribute nothing. ``sum_dtype``
    accumulates the sums in a wider type (e.g. float64 for float32 rows).
    """
    xp = np if isinstance(logp, np.ndarray) else jnp
    p = xp.exp(logp)
    safe = xp.where(p > 0, logp, 0)
    ps = p * safe
    return -xp.sum(ps, axis=-1, dtype=sum_dtype), xp.sum(ps * safe, axis=-1, dtype=sum_dtype)


@dataclasses.dataclass(frozen=True)
class StateMoments:
    """One hidden state of a Markov law: its long-run fraction along the spine and its own law's moments."""

    fraction: float
    fraction_se: float
    mu: float
    mu2: float
    exact: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Moments:
    """mu = E[H(p)] and mu_2 = E[M2(p)] with standard errors (0 when exact).

    For a Markov law these are the long-run values along the spine (the
    target's own continuation) and ``per_state`` gives every state's share.
    """

    mu: float
    mu2: float
    mu_se: float = 0.0
    mu2_se: float = 0.0
    exact: bool = True
    per_state: dict[str, StateMoments] | None = None
