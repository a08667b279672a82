"""Entropy moments of a law and the bounds on E[X] (THEORY.md sections 3, 5).

All bounds count X = accepted draft tokens per verifier call (tokens per call
are X + 1); add 1 for tokens per call. Derivations: docs/theory.md.

Closed forms, plain functions of (P, mu, mu_2):

* :func:`theorem1_leading`: the paper's headline term (mu + mu_2) ln P / mu^2;
* :func:`renewal`: THEORY 5(c), rigorous for i.i.d. laws only;
* :func:`asymptotic`: THEORY 5(d), a large-P prediction, not a bound.

From spine walks (any law, no independence needed; also real models):

* ``splitting``: THEORY 5(b), min over s of E[tau_s] - 1 + P e^-s;
* ``dual``: THEORY 5(b'), min over s of E[tau_s] - 1 + e^-s (P - E[N(s)]);

both with an upper confidence margin (estimate + z se at the chosen s), see
:func:`spine_bounds` (law-free, from sampled surprisals) and
:func:`law_spine_bounds`.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from .errors import BrwsimError
from .laws import Law, log_moments
from .spine import SpineCurves, curves_from_xi, law_curves


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
    if mu2 < mu * mu * (1 - 1e-9) - 1e-12:
        raise BrwsimError(f"mu_2 must be >= mu^2 (Jensen), got mu={mu!r}, mu_2={mu2!r}")
    return float(P), mu, mu2


def theorem1_leading(P: float, mu: float, mu2: float) -> float:
    """Paper's Theorem 1 headline term (mu + mu_2) ln(P) / mu^2 (counts X).

    The theorem adds an O(1) term whose constant we have not reproduced; this
    is the leading term only, not a bound by itself. A zero-entropy law
    (mu = 0) gives +inf. Raises BrwsimError for P < 1, mu < 0, mu_2 < mu^2.
    """
    P, mu, mu2 = _check(P, mu, mu2)
    if mu == 0:
        return math.inf
    return (mu + mu2) * math.log(P) / (mu * mu)


def renewal_formula(P: float, mu: float, mu2: float) -> float:
    """THEORY 5(c) without the cap: (ln(mu P) + 1)/mu + mu_2/mu^2 - 1 (+inf if mu = 0 or mu P < 1)."""
    P, mu, mu2 = _check(P, mu, mu2)
    if mu == 0 or mu * P < 1:
        return math.inf
    return (math.log(mu * P) + 1) / mu + mu2 / (mu * mu) - 1


def renewal(P: float, mu: float, mu2: float) -> float:
    """THEORY 5(c): min(P, (ln(mu P) + 1)/mu + mu_2/mu^2 - 1), counts X.

    Rigorous for i.i.d. laws (Wald + Lorden, docs/theory.md). When mu P < 1
    or mu = 0 (zero entropy: the formula is +inf, see
    :func:`renewal_formula`) only the trivial bound P remains. For a Markov
    law fed with the spine's stationary moments it is NOT a bound.
    """
    return min(float(P), renewal_formula(P, mu, mu2))


def asymptotic(P: float, mu: float, mu2: float) -> float:
    """THEORY 5(d): ln(mu P)/mu + mu_2/(2 mu^2) - 1, the large-P prediction (counts X).

    i.i.d. non-lattice laws, P -> infinity; not a bound. +inf for mu = 0.
    """
    P, mu, mu2 = _check(P, mu, mu2)
    if mu == 0:
        return math.inf
    return math.log(mu * P) / mu + mu2 / (2 * mu * mu) - 1


CLOSED_FORM = {"theorem1_leading": theorem1_leading, "renewal": renewal, "asymptotic": asymptotic}
BOUND_NAMES = ("theorem1_leading", "renewal", "asymptotic", "splitting", "dual")


def _check_z(margin_z) -> float:
    try:
        z = float(margin_z)
    except (TypeError, ValueError):
        raise BrwsimError(f"margin_z must be a number >= 0, got {margin_z!r}") from None
    if not (math.isfinite(z) and z >= 0):
        raise BrwsimError(f"margin_z must be a finite number >= 0, got {margin_z!r}")
    return z


def _check_P_values(P_list) -> list:
    if isinstance(P_list, (int, float, np.integer, np.floating)):
        P_list = [P_list]
    out = []
    for P in P_list:
        _check(P, 1.0, 1.0)
        out.append(int(P) if float(P).is_integer() else float(P))
    if not out:
        raise BrwsimError("P_list must hold at least one budget P >= 1")
    return out


def splitting(P: float, curves: SpineCurves, margin_z: float = 1.96) -> float:
    """THEORY 5(b) from spine curves, minimised over s (left limits), + margin_z se. Counts X."""
    (P,) = _check_P_values([P])
    return curves.splitting(P, _check_z(margin_z)).upper


def dual(P: float, curves: SpineCurves, margin_z: float = 1.96) -> float:
    """THEORY 5(b') from spine curves, minimised over s, + margin_z se. Counts X."""
    (P,) = _check_P_values([P])
    return curves.dual(P, _check_z(margin_z)).upper


def _bounds_from_curves(curves: SpineCurves, P_list, z: float) -> dict:
    out = {}
    for P in P_list:
        sp = curves.splitting(P, z)
        du = curves.dual(P, z)
        out[P] = {
            "splitting": sp.upper,
            "dual": du.upper,
            "splitting_estimate": sp.estimate,
            "splitting_se": sp.se,
            "splitting_s": sp.s,
            "dual_estimate": du.estimate,
            "dual_se": du.se,
            "dual_s": du.s,
        }
    return out


# Below this many walks the normal-theory margin means little: with two walks whose
# first steps both happen to be unlikely tokens, E[tau_s] - 1 is estimated as 0
# with a standard error of 0, and the "bound" collapses far below the truth.
MIN_SPINE_WALKS = 16


def spine_bounds(xi, P_list, *, margin_z: float = 1.96) -> dict[int, dict[str, float]]:
    """Splitting and dual bounds (THEORY 5(b), 5(b'), 5(e)) from sampled continuations.

    ``xi``: float array [walks, depth] of per-step surprisals -log p(token) of
    independent continuations sampled from the target itself (NaN after a
    walk's end: the walk ended, S = +inf). Law-free: no independence between
    steps is assumed. A walk that did not end is only observed up to its
    final S, so s ranges below the smallest such S.

    Returns ``{P: {"splitting", "dual", and for each the "_estimate", "_se"
    and "_s" at the chosen s}}``; "splitting" and "dual" are upper
    confidence values (estimate + margin_z se, minimised over s; at most P).
    All count X = accepted draft tokens per call.
    """
    P_list = _check_P_values(P_list)
    z = _check_z(margin_z)
    n = np.shape(xi)[0] if np.ndim(xi) == 2 else 0
    if n < MIN_SPINE_WALKS:
        raise BrwsimError(
            f"the empirical bounds need at least {MIN_SPINE_WALKS} sampled continuations for a confidence margin, "
            f"got {n}; sample more continuations"
        )
    curves = curves_from_xi(xi, P_max=max(P_list))
    return _bounds_from_curves(curves, P_list, z)


def law_spine_bounds(
    law: Law, P_list, *, walks: int = 8192, seed: int = 0, margin_z: float = 1.96, mu_hint: float | None = None
) -> dict:
    """:func:`spine_bounds` for a law, from ``walks`` fresh spine walks (any law, Markov too)."""
    P_list = _check_P_values(P_list)
    z = _check_z(margin_z)
    curves = law_curves(law, max(P_list), walks=walks, seed=seed, mu_hint=mu_hint)
    return _bounds_from_curves(curves, P_list, z)


ATTACH_WALKS = 8192


def attach_bounds(law: Law, results, mom: Moments, seed: int = 0, walks: int | None = None) -> None:
    """Fill ``r.bounds`` of each per-P result with all five bounds at that P.

    Closed forms use (mom.mu, mom.mu2): for Markov laws the spine's long-run
    moments, with which ``renewal`` is not guaranteed (docs/theory.md).
    ``splitting`` and ``dual`` come from ``walks`` spine walks (seeded from
    ``seed``, independent of the trees; default 8192, 4096 for Markov laws
    whose steps cost O(V)) with a 1.96-se upper margin.
    """
    if not results:
        return
    P_list = [r.P for r in results]
    if walks is None:
        walks = ATTACH_WALKS if law.is_iid else ATTACH_WALKS // 2
    spine = law_spine_bounds(law, P_list, walks=walks, seed=seed, mu_hint=mom.mu)
    for r in results:
        b = {name: f(r.P, mom.mu, mom.mu2) for name, f in CLOSED_FORM.items()}
        b["splitting"] = spine[r.P]["splitting"]
        b["dual"] = spine[r.P]["dual"]
        r.bounds = b
