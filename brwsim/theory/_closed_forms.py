"""Closed forms in (P, mu, mu_2): the paper's leading term, the renewal bound, the asymptotic prediction.

All count X = accepted draft tokens per verifier call (tokens per call are
X + 1). Derivations: docs/theory.md, "Bounds". Which of them is a bound for
which law is in :class:`brwsim.theory.Bounds`.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import BrwsimError

# Jensen's inequality mu_2 >= mu^2 holds exactly, but mu and mu_2 are means of float32 sums over a vocabulary
# (a law's or a model's log-probabilities): each carries a relative rounding error of a few float32 eps (measured:
# up to 5 eps on uniform rows of V = 2 to 10^7, where the two sides are equal), so mu_2 may sit a few eps below mu^2.
# A violation within 64 float32 eps of mu^2 is rounding; anything beyond is refused.
JENSEN_RTOL = 64 * float(np.finfo(np.float32).eps)
JENSEN_ATOL = 1e-12  # at mu = 0 (zero entropy) mu_2 is 0 up to a float's sign and the smallest rounding
EPS64 = float(np.finfo(np.float64).eps)


def _check(P, mu, mu2):
    if isinstance(P, bool) or not isinstance(P, (int, float, np.integer, np.floating)):
        raise BrwsimError(f"P must be a number >= 1, got {P!r}")
    if not (math.isfinite(P) and P >= 1):
        raise BrwsimError(f"P must be >= 1, got {P!r}")
    try:
        mu, mu2 = float(mu), float(mu2)
    except (TypeError, ValueError):
        raise BrwsimError(f"mu and mu_2 must be numbers, got mu={mu!r}, mu_2={mu2!r}") from None
    if not (math.isfinite(mu) and math.isfinite(mu2)):
        raise BrwsimError(f"mu and mu_2 must be finite, got mu={mu!r}, mu_2={mu2!r}")
    if mu < 0:
        raise BrwsimError(f"mu must be >= 0 (an entropy; 0 only for a zero-entropy law), got {mu!r}")
    if mu2 < mu * mu * (1 - JENSEN_RTOL) - JENSEN_ATOL:
        raise BrwsimError(f"mu_2 must be >= mu^2 (Jensen), got mu={mu!r}, mu_2={mu2!r}")
    return float(P), mu, mu2


def theorem1_leading(P: float, mu: float, mu2: float) -> float:
    """Paper's Theorem 1 headline term (mu + mu_2) ln(P) / mu^2 (counts X).

    The theorem adds an O(1) term whose constant we have not reproduced; this
    is the leading term only, not a bound by itself. A zero-entropy law
    (mu = 0) gives +inf. Raises BrwsimError for P < 1, mu < 0, mu_2 < mu^2.
    """
    P, mu, mu2 = _check(P, mu, mu2)
    if mu * mu == 0:  # mu = 0, or so small (below 1e-154) that mu^2 underflows: the zero-entropy limit
        return math.inf
    return (mu + mu2) * math.log(P) / (mu * mu)


def renewal_formula(P: float, mu: float, mu2: float) -> float:
    """docs/theory.md (c) without the cap: (ln(mu P) + 1)/mu + mu_2/mu^2 - 1 (+inf if mu = 0 or mu P < 1)."""
    P, mu, mu2 = _check(P, mu, mu2)
    if mu == 0 or mu * P < 1:
        return math.inf
    a, b = (math.log(mu * P) + 1) / mu, mu2 / (mu * mu)
    # rounded outward: each of the few float64 operations errs by at most eps of its result
    return float(np.nextafter(a + b - 1 + 8 * EPS64 * (abs(a) + b + 1), math.inf))


def renewal(P: float, mu: float, mu2: float) -> float:
    """docs/theory.md (c): min(P, (ln(mu P) + 1)/mu + mu_2/mu^2 - 1), counts X.

    Rigorous for i.i.d. laws (Wald + Lorden, docs/theory.md). When mu P < 1
    or mu = 0 (zero entropy: the formula is +inf, see
    :func:`renewal_formula`) only the trivial bound P remains. For a Markov
    law fed with the spine's stationary moments it is NOT a bound.
    """
    return min(float(P), renewal_formula(P, mu, mu2))


def asymptotic(P: float, mu: float, mu2: float) -> float:
    """docs/theory.md (d): ln(mu P)/mu + mu_2/(2 mu^2) - 1, the large-P prediction (counts X).

    i.i.d. non-lattice laws, P -> infinity; not a bound. +inf for mu = 0.
    """
    P, mu, mu2 = _check(P, mu, mu2)
    if mu * mu == 0:  # mu = 0, or so small that mu^2 underflows: the zero-entropy limit
        return math.inf
    return math.log(mu * P) / mu + mu2 / (2 * mu * mu) - 1


CLOSED_FORM = {"theorem1_leading": theorem1_leading, "renewal": renewal, "asymptotic": asymptotic}
