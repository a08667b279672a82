"""Theory: entropy moments and the closed-form bounds (issue 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import brwsim
from brwsim import laws, spine, theory
from brwsim.errors import BrwsimError

# a small Markov law where the spine's stationary moments make `renewal` fail
SMALL_MARKOV = {
    "states": {"c": "fixed:probs=0.97/0.02/0.01", "u": "dirichlet:V=8,alpha=0.5"},
    "initial": "c",
    "kernel": {"c": [[0.97, 0.03], [0.1, 0.9]], "u": [[0.3, 0.7], [0.05, 0.95]]},
}


def test_closed_forms_values():
    mu, mu2 = 1.0, 2.0
    P = 100
    assert theory.theorem1_leading(P, mu, mu2) == pytest.approx(3 * math.log(100))
    assert theory.renewal(P, mu, mu2) == pytest.approx(math.log(100) + 1 + 2 - 1)
    assert theory.asymptotic(P, mu, mu2) == pytest.approx(math.log(100) + 1 - 1)
    # renewal is capped by the trivial bound P, and is P when mu P < 1
    assert theory.renewal(2, 1.0, 5.0) == 2.0
    assert theory.renewal(3, 0.2, 0.1) == 3.0


@pytest.mark.parametrize(
    "args",
    [
        (0, 1.0, 2.0),
        (0.5, 1.0, 2.0),
        (-3, 1.0, 2.0),
        (10, -0.1, 1.0),
        (10, 1.0, 0.5),
        (10, math.nan, 1.0),
        (10, 1.0, math.inf),
        (math.inf, 1.0, 2.0),
        ("10", 1.0, 2.0),
    ],
)
@pytest.mark.parametrize("f", [theory.theorem1_leading, theory.renewal, theory.asymptotic])
def test_bad_arguments_raise(f, args):
    with pytest.raises(BrwsimError) as e:
        f(*args)
    assert "\n" not in str(e.value)


def test_spine_bound_bad_arguments_raise():
    xi = np.ones((4, 3))
    for bad in ([0], [0.5], [], ["x"]):
        with pytest.raises(BrwsimError):
            theory.spine_bounds(xi, bad)
    with pytest.raises(BrwsimError):
        theory.spine_bounds(xi, [4], margin_z=-1)
    with pytest.raises(BrwsimError):
        theory.spine_bounds(np.ones(5), [4])  # not [walks, depth]
    with pytest.raises(BrwsimError):
        theory.spine_bounds(-np.ones((4, 3)), [4])  # negative surprisal


def test_zero_entropy_is_infinite_not_a_division():
    assert theory.theorem1_leading(16, 0.0, 0.0) == math.inf
    assert theory.asymptotic(16, 0.0, 0.0) == math.inf
    assert theory.renewal_formula(16, 0.0, 0.0) == math.inf
    assert theory.renewal(16, 0.0, 0.0) == 16.0  # min(P, +inf)
    law = laws.parse_law("fixed:probs=1")
    res = brwsim.simulate(law, P=[1, 8], trees=2, seed=0)
    for r in res.results:
        assert r.stat.mean == pytest.approx(r.P)  # a chain of certain tokens
        assert r.bounds["theorem1_leading"] == math.inf
        assert r.bounds["asymptotic"] == math.inf
        assert r.bounds["splitting"] == r.P and r.bounds["dual"] == r.P


def test_dirichlet_closed_form_vs_monte_carlo():
    law = laws.parse_law("dirichlet:V=20,alpha=0.3")
    mu, mu2 = law.exact_moments()
    mc = theory.moments(laws.LogitNormal(V=2, sigma=1.0))  # warm path check: MC has a reported SE
    assert mc.mu_se > 0 and not mc.exact
    import jax

    h, m = theory._mc_law_moments(law, jax.random.key(7), 0, 20000)
    se_h, se_m = h.std(ddof=1) / math.sqrt(h.size), m.std(ddof=1) / math.sqrt(m.size)
    assert abs(h.mean() - mu) < 4 * se_h
    assert abs(m.mean() - mu2) < 4 * se_m


def test_fixed_and_zipf_closed_forms():
    p = np.array([0.5, 0.25, 0.125, 0.125])
    mom = theory.moments(laws.fixed_law(p))
    assert mom.exact and mom.mu_se == 0
    assert mom.mu == pytest.approx(-(p * np.log(p)).sum())
    assert mom.mu2 == pytest.approx((p * np.log(p) ** 2).sum())
    z = laws.parse_law("zipf:V=50,s=1.3")
    q = np.arange(1, 51.0) ** -1.3
    q /= q.sum()
    assert theory.moments(z).mu == pytest.approx(-(q * np.log(q)).sum(), rel=1e-9)


def test_markov_stationary_moments_match_walks():
    law = laws.markov_law(SMALL_MARKOV)
    mom = theory.moments(law, seed=0)
    assert set(mom.per_state) == {"c", "u"}
    # each state's values are its own law's moments
    for name, sub in zip(["c", "u"], law.laws, strict=True):
        mu_s, mu2_s = sub.exact_moments()
        assert mom.per_state[name]["mu"] == pytest.approx(mu_s)
        assert mom.per_state[name]["mu2"] == pytest.approx(mu2_s)
    mu_w, mu_w_se, mu2_w, mu2_w_se, frac = spine.spine_moments_walks(law, seed=1, walks=256, depth=40, burn=12)
    assert abs(mu_w - mom.mu) < 4 * math.hypot(mu_w_se, mom.mu_se)
    assert abs(mu2_w - mom.mu2) < 4 * math.hypot(mu2_w_se, mom.mu2_se)
    # a walk's fraction of time in "c" lies in [0, 1], so its variance is at most f (1 - f):
    # sqrt(f (1 - f) / walks) bounds the standard error of the mean over the 256 walks
    f = frac[0]
    assert abs(f - mom.per_state["c"]["fraction"]) < 4 * math.sqrt(f * (1 - f) / 256) + 1e-9


def test_simulate_carries_all_five_bounds():
    res = brwsim.simulate("dirichlet:V=6,alpha=0.5", P=[1, 4], trees=50, seed=0)
    d = res.to_dict()
    assert d["mu_se"] == 0 and d["mu2_se"] == 0
    for r in d["results"]:
        assert set(r["bounds"]) == set(theory.BOUND_NAMES)
        assert r["mean"] <= r["bounds"]["dual"] + 4 * r["se"]


def test_renewal_fails_for_a_markov_law():
    """THEORY 5(c) warning: fed with the spine's stationary moments, renewal is not a bound."""
    law = laws.markov_law(SMALL_MARKOV)
    res = brwsim.simulate(law, P=[16], trees=300, seed=0)
    r = res.results[0]
    assert r.stat.mean > r.bounds["renewal"] + 4 * r.stat.se  # renewal fails
    assert r.stat.mean <= r.bounds["dual"] + 4 * r.stat.se  # the spine bounds hold
    assert r.stat.mean <= r.bounds["splitting"] + 4 * r.stat.se
