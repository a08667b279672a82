"""Rigorous bounds never below what they bound, and invariant checks that tolerate rounding, not errors.

* Fixed laws (deterministic trees): the printed dual and splitting (estimate + 1.96 se from spine walks,
  rounded outward) and renewal are >= the exact E[X], enumerated in float64 (brwsim.testing). Where the
  chosen threshold has se 0 (P = 1, the largest probability) a bound computed without outward rounding
  lands a few float32 ulps below the exact value.
* A Dirichlet law with many symbols: against an independent NumPy estimate of E[X] (P = 1: E[max p];
  P = 4: E[sum of the 4 largest p], the value of one 4-node tree, so at most E[X]). With few walks below
  the optimal threshold the sample once claimed E[tau_s] - 1 = 0 with se 0 there, and the bound sat
  below E[X].
* Jensen's mu_2 >= mu^2 on float32 moments of tied or uniform rows (equality up to rounding) passes; a
  genuine violation is refused.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from brwsim._moments import entropy_moments
from brwsim.errors import BrwsimError
from brwsim.laws import Temp, fixed_law, parse_law
from brwsim.spine import SpineCurves, law_curves
from brwsim.testing import enumerate_fixed
from brwsim.theory import asymptotic, bounds_from_curves, moments, renewal, theorem1_leading
from brwsim.theory._closed_forms import JENSEN_RTOL, renewal_formula

FIXED = [
    [0.6, 0.3, 0.1],  # the README's law
    [0.5, 0.5],  # tied
    [1 / 3, 1 / 3, 1 / 3],  # uniform, not dyadic
    [0.7, 0.2, 0.05, 0.05],
    [0.97, 0.02, 0.01],  # peaked
]


@pytest.mark.parametrize("probs", FIXED)
def test_bounds_of_fixed_laws_are_at_least_the_exact_value(probs):
    P_list = [1, 2, 4, 16]
    law = fixed_law(probs)
    exact = enumerate_fixed(probs, max(P_list))
    mom = moments(jax.random.key(0), law)
    curves = law_curves(jax.random.key(1), law, max(P_list), walks=512, mu_hint=mom.mu)
    for b in bounds_from_curves(curves, P_list, mom.mu, mom.mu2, iid=True):
        ex = float(exact[b.P - 1])
        for name, value in b.rigorous.items():
            assert value >= ex, (probs, b.P, name, value, ex)
    # P = 1: the threshold just below the largest probability, certain (se 0): tight up to the rounding margin
    (b1,) = bounds_from_curves(curves, [1], mom.mu, mom.mu2, iid=True)
    assert b1.dual.se == 0.0 and b1.dual.upper == pytest.approx(max(probs), rel=1e-6)


def test_readme_law_at_P_1_is_above_point_six():
    # the old value was 0.5999999938579831: e^-u at u = float32(-log 0.6), rounded up, with no outward rounding
    law = fixed_law([0.6, 0.3, 0.1])
    (b,) = bounds_from_curves(law_curves(jax.random.key(0), law, 1, walks=64), [1], 0.9, 1.0, iid=True)
    assert b.dual.upper >= 0.6 and b.splitting.upper >= 0.6
    assert b.dual.upper - 0.6 < 1e-6


def test_float32_steps_are_lowered_by_their_rounding_error():
    # every walk one step 0.5 (a float32 value): the threshold just below it gives e^-u, u lowered by 4 ulps
    xi = np.full((32, 1), np.float32(0.5))
    c = SpineCurves(xi, cover=np.full(32, 1.0), floor=0.5)
    u = float(np.float32(0.5))
    eps = float(np.finfo(np.float32).eps)  # 4 ulps of max(0.5, 1): 4 eps
    assert math.exp(-u) * (1 + 3 * eps) < c.dual(1.0).upper < math.exp(-u) * (1 + 5 * eps)
    # declared float64: lowered by 4 float64 ulps, plus (points + 8) eps64 for the float64 sums
    c64 = SpineCurves(xi.astype(np.float64), cover=np.full(32, 1.0), floor=0.5)
    assert math.exp(-u) < c64.dual(1.0).upper < math.exp(-u) * (1 + 1e-13)


def test_a_threshold_no_walk_lies_below_is_not_taken_as_certain():
    # 64 walks of one step each, all at 2 or more: the sample alone cannot tell what lies below 2
    xi = np.linspace(2.0, 3.0, 64)[:, None]
    c = SpineCurves(xi, cover=np.full(64, 3.0))
    assert c.dual(1.0).s >= xi[15, 0] and c.splitting(1.0).s >= xi[15, 0]  # 16 walks below the chosen s
    # with the law's word that no step is shorter than 2, the threshold 2^- is certain
    sure = SpineCurves(xi, cover=np.full(64, 3.0), floor=2.0)
    assert sure.dual(1.0).upper == pytest.approx(math.exp(-2.0), rel=1e-12) and sure.dual(1.0).se == 0.0


def numpy_top_means(V, alpha, ks, n, seed):
    """{k: (mean, se)} over n draws of p ~ Dirichlet(alpha) on V symbols of the sum of the k largest p."""
    rng = np.random.default_rng(seed)
    vals = np.empty((n, len(ks)))
    for i in range(n):
        g = rng.gamma(alpha, size=V)
        top = -np.sort(-np.partition(g, -max(ks))[-max(ks) :])
        vals[i] = [top[:k].sum() / g.sum() for k in ks]
    return {k: (vals[:, j].mean(), vals[:, j].std(ddof=1) / math.sqrt(n)) for j, k in enumerate(ks)}


def test_large_vocabulary_dirichlet_bounds_stay_above_an_independent_estimate():
    # V = 10^5: with 64 walks the old bound at P = 1 was e^-(smallest first step), 5.2e-4 on average over 40
    # seeds and below E[max p] = 7.9e-4 in 95% of them (here 4.6e-4 and 3.1e-4 with keys 0 and 1; with 2048
    # walks 7.5e-4 and 7.4e-4): the same failure as at V = 10^7 with 8192 walks
    V, alpha = 10**5, 0.1
    law = parse_law(f"dirichlet:V={V},alpha={alpha}")
    mom = moments(jax.random.key(0), law)
    truth = numpy_top_means(V, alpha, (1, 4), 80, seed=5)
    for walks, k in ((64, 0), (64, 1), (2048, 0), (2048, 1)):
        curves = law_curves(jax.random.key(k), law, 4, walks=walks, mu_hint=mom.mu)
        for b in bounds_from_curves(curves, [1, 4], mom.mu, mom.mu2, iid=True):
            mean, se = truth[b.P]
            for name, value in b.rigorous.items():
                assert value >= mean - 4 * se, (walks, k, b.P, name, value, mean, se)


def test_renewal_formula_is_rounded_upward():
    mpmath.mp.dps = 50
    for P, mu, mu2 in [(16, 0.8979457, 1.1), (1e6, 3.3, 11.0), (7, 1 / 3, 1 / 9 + 1e-3), (2, 0.5, 0.25)]:
        m, m2 = mpmath.mpf(mu), mpmath.mpf(mu2)
        want = (mpmath.log(m * P) + 1) / m + m2 / (m * m) - 1
        assert renewal_formula(P, mu, mu2) >= want
        assert renewal_formula(P, mu, mu2) - want < 1e-12 * abs(want)
        assert renewal(P, mu, mu2) >= min(P, want)


@pytest.mark.parametrize("T", [1.0, 2.0, 0.5, 1e-30])
@pytest.mark.parametrize("probs", [[0.5, 0.5], [1 / 3, 1 / 3, 1 / 3], [0.25] * 4])
def test_jensen_holds_on_tied_and_uniform_rows_at_any_temperature(T, probs):
    mom = moments(jax.random.key(0), Temp(law=fixed_law(probs), T=T), samples=16)
    for f in (theorem1_leading, renewal, asymptotic):
        assert math.isfinite(f(4, mom.mu, mom.mu2))


@pytest.mark.parametrize("V", [2, 3, 1000, 49152])
def test_jensen_holds_on_float32_uniform_rows(V):
    # a real model at temperature 1e30: every row uniform over the vocabulary, moments summed in float32
    h, m2 = entropy_moments(jnp.full((V,), -jnp.log(jnp.float32(V))))
    assert math.isfinite(renewal(4, float(h), float(m2)))


def test_a_genuine_jensen_violation_is_still_refused():
    with pytest.raises(BrwsimError, match=r"mu_2 must be >= mu\^2 \(Jensen\)"):
        renewal(4, 1.0, 1.0 - 4 * JENSEN_RTOL)
    with pytest.raises(BrwsimError, match="Jensen"):
        asymptotic(4, 2.0, 3.9)
    assert math.isfinite(renewal(4, 1.0, 1.0 - JENSEN_RTOL / 2))  # within the rounding tolerance
    assert JENSEN_RTOL < 1e-5


@pytest.mark.parametrize("probs", [[0.9999, 0.0001], [0.99999999, 1e-8]])
def test_peaked_fixed_laws_match_the_enumerated_answer(probs):
    # a near-deterministic law: a walk takes ~1/p_min steps of ~p_min nats, so the points the curves keep are capped
    # (walks x steps, not 1/p_min); the oracle's E[X] is the enumerated value and every bound stays at or above it
    from brwsim.estimate import oracle_values

    P_list = [1, 2, 4]
    law = fixed_law(probs)
    exact = enumerate_fixed(probs, max(P_list))
    values, _ = oracle_values(jax.random.key(0), law, max(P_list), trees=4, progress=False)
    np.testing.assert_allclose(values[0], exact, rtol=1e-6)
    mom = moments(jax.random.key(0), law)
    curves = law_curves(jax.random.key(1), law, max(P_list), walks=64, mu_hint=mom.mu)
    for b in bounds_from_curves(curves, P_list, mom.mu, mom.mu2, iid=True):
        for name, value in b.rigorous.items():
            assert exact[b.P - 1] <= value <= b.P * (1 + 1e-9), (probs, b.P, name, value)
