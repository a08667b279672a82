"""Property tests: the rigorous bounds hold for random laws.

For random small laws, the simulated oracle mean must not exceed `renewal`
(i.i.d. laws) nor `splitting` and `dual` (all laws, Markov included) by more
than 4 combined standard errors; `renewal` >= `asymptotic` at large P.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.random import key

import brwsim
from brwsim import laws, theory

P_LIST = [4, 16]
FAST = settings(max_examples=4, deadline=None, derandomize=True)


def check_bounds(law, trees, iid, walks=2048):
    res = brwsim.simulate(law, P=P_LIST, trees=trees, seed=1, bounds=False)
    mom = theory.moments(key(0), law)
    spine = theory.law_spine_bounds(key(2), law, P_LIST, walks=walks, mu_hint=mom.mu)
    for r in res.results:
        se = r.stat.se if math.isfinite(r.stat.se) else 0.0
        b = spine[r.P]
        assert r.stat.mean <= b.splitting.upper + 4 * math.hypot(se, b.splitting.se) + 1e-6
        assert r.stat.mean <= b.dual.upper + 4 * math.hypot(se, b.dual.se) + 1e-6
        if iid:
            assert r.stat.mean <= theory.renewal(r.P, mom.mu, mom.mu2) + 4 * se + 1e-6


probs3 = st.lists(st.floats(0.02, 1.0), min_size=3, max_size=3).map(lambda w: list(np.array(w) / np.sum(w)))


@FAST
@given(probs3)
def test_fixed_laws(p):
    p = np.asarray(p)
    p[-1] = 1 - p[:-1].sum()
    check_bounds(laws.fixed_law(p), trees=2, iid=True)


# few distinct sizes and alphas (they are static to the jitted code): compilations are reused
@settings(max_examples=3, deadline=None, derandomize=True)
@given(st.sampled_from([3, 6]), st.sampled_from([0.15, 0.5, 1.7]))
def test_dirichlet_laws(V, alpha):
    check_bounds(laws.Dirichlet(V=V, alpha=alpha), trees=150, iid=True)


kernel_row = st.floats(0.05, 0.95).map(lambda a: [a, 1 - a])


@settings(max_examples=3, deadline=None, derandomize=True)
@given(probs3, st.sampled_from([0.3, 1.2]), kernel_row, kernel_row, kernel_row, kernel_row)
def test_two_state_markov_laws(p, alpha, k00, k01, k10, k11):
    p = np.asarray(p)
    p[-1] = 1 - p[:-1].sum()
    cfg = {
        "states": {"a": laws.fixed_law(p).spec(), "b": f"dirichlet:V=4,alpha={alpha:.2f}"},
        "initial": "a",
        "kernel": {"a": [k00, k01], "b": [k10, k11]},
    }
    check_bounds(laws.markov_law(cfg), trees=150, iid=False)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.floats(0.01, 12.0), st.floats(1.0, 30.0), st.floats(1e4, 1e12))
def test_renewal_above_asymptotic_at_large_P(mu, ratio, P):
    mu2 = mu * mu * ratio
    if mu * P < 1 or theory.renewal_formula(P, mu, mu2) > P:
        return
    # renewal - asymptotic = 1/mu + mu_2 / (2 mu^2) > 0 exactly
    assert theory.renewal(P, mu, mu2) >= theory.asymptotic(P, mu, mu2) - 1e-9


def test_renewal_above_asymptotic_for_real_laws():
    for spec in ["fixed:probs=0.6/0.3/0.1", "dirichlet:V=1000,alpha=0.1", "zipf:V=1000,s=1.1"]:
        mu, mu2 = laws.parse_law(spec).exact_moments()
        for P in (10**3, 10**6):
            assert theory.renewal(P, mu, mu2) >= theory.asymptotic(P, mu, mu2) - 1e-9
