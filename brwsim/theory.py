"""Entropy moments of a law and the closed-form bounds (THEORY.md sections 3, 5).

All bounds count X = accepted draft tokens per verifier call (tokens per call
are X + 1). Derivations: docs/theory.md.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from .errors import BrwsimError
from .laws import Law, log_moments


@dataclasses.dataclass(frozen=True)
class Moments:
    """mu = E[H(p)], mu2 = E[sum p (log p)^2] with standard errors (0 if exact)."""

    mu: float
    mu2: float
    mu_se: float = 0.0
    mu2_se: float = 0.0
    exact: bool = True
    per_state: dict | None = None


def _mc_law_moments(law: Law, key, state: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
    f = jax.jit(jax.vmap(lambda k: log_moments(law.full_logp(k, state))))
    chunk = max(1, min(samples, 2**22 // max(law.vocab, 1)))
    hs, ms = [], []
    for start in range(0, samples, chunk):
        n = min(chunk, samples - start)
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(start, start + chunk, dtype=jnp.uint32))
        h, m = f(keys)
        hs.append(np.asarray(h, np.float64)[:n])
        ms.append(np.asarray(m, np.float64)[:n])
    return np.concatenate(hs), np.concatenate(ms)


def moments(law: Law, seed: int = 0, samples: int = 4096) -> Moments:
    """mu and mu_2 of an i.i.d. law: closed form where known, else Monte Carlo.

    For a Markov law: the moments along the spine (the target's own sampled
    continuation), see :func:`brwsim.spine.spine_moments`.
    """
    if not law.is_iid:
        from . import spine

        return spine.spine_moments(law, seed=seed)
    ex = law.exact_moments()
    if ex is not None:
        return Moments(mu=ex[0], mu2=ex[1])
    key = jax.random.fold_in(jax.random.key(seed), 2)
    h, m = _mc_law_moments(law, key, 0, samples)
    n = h.shape[0]
    return Moments(
        mu=float(h.mean()),
        mu2=float(m.mean()),
        mu_se=float(h.std(ddof=1) / math.sqrt(n)),
        mu2_se=float(m.std(ddof=1) / math.sqrt(n)),
        exact=False,
    )


def _check(P, mu, mu2):
    if not (isinstance(P, (int, float, np.integer, np.floating)) and math.isfinite(P) and P >= 1):
        raise BrwsimError(f"P must be >= 1, got {P!r}")
    if not (math.isfinite(mu) and math.isfinite(mu2)):
        raise BrwsimError(f"mu and mu_2 must be finite, got mu={mu!r}, mu_2={mu2!r}")
    if mu < 0:
        raise BrwsimError(f"mu must be >= 0 (an entropy), got {mu!r}")
    if mu2 < mu * mu * (1 - 1e-9) - 1e-12:
        raise BrwsimError(f"mu_2 must be >= mu^2 (Jensen), got mu={mu!r}, mu_2={mu2!r}")


def theorem1_leading(P: float, mu: float, mu2: float) -> float:
    """Paper's Theorem 1 headline term (mu + mu_2) ln(P) / mu^2 (X convention).

    The theorem adds an O(1) term whose constant we have not reproduced; this
    is the leading term only. A zero-entropy law (mu = 0) gives +inf.
    """
    _check(P, mu, mu2)
    if mu == 0:
        return math.inf
    return (mu + mu2) * math.log(P) / (mu * mu)


def renewal(P: float, mu: float, mu2: float) -> float:
    """THEORY 5(c): min(P, (ln(mu P) + 1)/mu + mu_2/mu^2 - 1) for mu P >= 1.

    Rigorous for i.i.d. laws (Wald + Lorden). For mu P < 1 the choice s = 0
    gives E[X] <= E[tau_0] - 1 + P e^0, so only the trivial bound P remains.
    """
    _check(P, mu, mu2)
    if mu == 0:
        return float(P)
    if mu * P < 1:
        return float(P)
    return min(float(P), (math.log(mu * P) + 1) / mu + mu2 / (mu * mu) - 1)


def asymptotic(P: float, mu: float, mu2: float) -> float:
    """THEORY 5(d): ln(mu P)/mu + mu_2/(2 mu^2) - 1, the large-P prediction.

    Not a bound. Returns +inf for mu = 0.
    """
    _check(P, mu, mu2)
    if mu == 0:
        return math.inf
    return math.log(mu * P) / mu + mu2 / (2 * mu * mu) - 1


CLOSED_FORM = {"theorem1_leading": theorem1_leading, "renewal": renewal, "asymptotic": asymptotic}


def attach_bounds(law: Law, results, mom: Moments, seed: int = 0) -> None:
    """Fill ``r.bounds`` of each per-P result with every bound at that P."""
    for r in results:
        r.bounds = {name: f(r.P, mom.mu, mom.mu2) for name, f in CLOSED_FORM.items()}
