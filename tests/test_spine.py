"""The spine estimator: many-to-one identity, curves, law-free bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from jax.random import key

from brwsim import laws, spine, theory
from brwsim.errors import BrwsimError
from brwsim.estimate import oracle_values
from brwsim.testing import enumerate_fixed

# the kernel depends on the child's rank only: the most likely child keeps the state, any other flips it
RANK_MARKOV = {
    "states": {"c": "fixed:probs=0.8/0.12/0.05/0.03", "u": "dirichlet:V=6,alpha=0.5"},
    "initial": "c",
    "kernel": {"c": [[1.0, 0.0], [0.0, 1.0]], "u": [[0.0, 1.0], [1.0, 0.0]]},
}
SMALL_MARKOV = {
    "states": {"c": "fixed:probs=0.8/0.15/0.05", "u": "dirichlet:V=6,alpha=0.7"},
    "initial": {"c": 0.5, "u": 0.5},
    "kernel": {"c": [[0.9, 0.1], [0.2, 0.8]], "u": [[0.5, 0.5], [0.1, 0.9]]},
}


def threshold_sums(law, t, trees, seed, P_max):
    """Per tree: number and total P(v) of the non-root nodes with V(v) <= t, from oracle trees.

    The oracle takes nodes in decreasing P(v), so the nodes with V <= t are a
    prefix of it; P_max must be large enough to pass the threshold in every tree.
    """
    values, _ = oracle_values(key(seed), law, P_max, trees)
    node_p = np.diff(np.concatenate([np.zeros((trees, 1)), values], axis=1), axis=1)
    inside = node_p >= math.exp(-t) * (1 - 1e-6)
    assert not inside[:, -1].any(), "P_max too small for this threshold"
    return inside.sum(1), (node_p * inside).sum(1)


@pytest.mark.parametrize("which", ["iid", "markov", "rank"])
def test_many_to_one_identity(which):
    """E[sum over {V <= t} of P(v)] = E[tau_t] - 1 and E[#{V <= t}] = sum_d E[e^S_d 1{S_d <= t}].

    "rank": a Markov law whose kernel depends on the child's rank alone, so walks that drew the next state
    without the rank of the step would see another tree."""
    law = {
        "iid": laws.parse_law("dirichlet:V=5,alpha=0.6"),
        "markov": laws.markov_law(SMALL_MARKOV),
        "rank": laws.markov_law(RANK_MARKOV),
    }[which]
    t = 2.2
    n_tree, v_tree = threshold_sums(law, t, trees=400, seed=11, P_max=200)
    curves = spine.law_curves(key(5), law, 50, walks=8192)
    tau, tau_se = curves.tau(np.array([t]))
    N, N_se = curves.N(np.array([t]))
    se_v = v_tree.std(ddof=1) / math.sqrt(v_tree.size)
    se_n = n_tree.std(ddof=1) / math.sqrt(n_tree.size)
    assert abs(v_tree.mean() - (tau[0] - 1)) < 4 * math.hypot(se_v, tau_se[0])
    assert abs(n_tree.mean() - N[0]) < 4 * math.hypot(se_n, N_se[0])


def fixed_tree_nodes(probs, t):
    """Exact (count, sum P) of nodes with V <= t in the deterministic tree of a fixed law."""
    out_n, out_v = 0, 0.0
    stack = [1.0]
    lim = math.exp(-t) * (1 - 1e-12)
    while stack:
        q = stack.pop()
        for p in probs:
            c = q * p
            if c >= lim:
                out_n += 1
                out_v += c
                stack.append(c)
    return out_n, out_v


def test_curves_match_exact_deterministic_tree():
    probs = [0.6, 0.3, 0.1]
    curves = spine.law_curves(key(2), laws.fixed_law(probs), 200, walks=16384)
    for t in (0.7, 1.9, 3.3, 4.6):
        n, v = fixed_tree_nodes(probs, t)
        N, N_se = curves.N(np.array([t]))
        tau, tau_se = curves.tau(np.array([t]))
        assert abs(N[0] - n) < 4 * N_se[0] + 1e-9
        assert abs(tau[0] - 1 - v) < 4 * tau_se[0] + 1e-9


@pytest.mark.parametrize("probs", [[0.6, 0.3, 0.1], [0.7, 0.2, 0.05, 0.03, 0.02]])
def test_dual_within_one_percent_of_exact_oracle(probs):
    Ps = [16, 64, 256]
    exact = enumerate_fixed(probs, max(Ps))
    b = theory.law_spine_bounds(key(3), laws.fixed_law(probs), Ps, walks=16384)
    for P in Ps:
        x = exact[P - 1]
        assert b[P].dual.upper >= x - 4 * b[P].dual.se  # a bound
        assert abs(b[P].dual.estimate / x - 1) < 0.01  # and within 1%
        assert b[P].splitting.upper >= b[P].dual.estimate


def test_spine_bounds_law_free_with_ended_walks():
    rng = np.random.default_rng(0)
    p = np.array([0.6, 0.3, 0.1])
    n, D = 4000, 60
    xi = -np.log(p[rng.choice(3, size=(n, D), p=p)])
    b_full = theory.spine_bounds(xi, [4, 16], margin_z=1.96)
    # the same walks cut short and marked ended lose no information below their cut
    xi_nan = xi.copy()
    xi_nan[:, 50:] = np.nan
    b_nan = theory.spine_bounds(xi_nan, [4, 16])
    for P in (4, 16):
        assert b_nan[P].dual.upper == pytest.approx(b_full[P].dual.upper)
        assert b_full[P].dual.upper <= b_full[P].splitting.upper + 1e-12
        assert 0 < b_full[P].dual.upper <= P
    exact = enumerate_fixed(list(p), 16)
    assert b_full[16].dual.upper >= exact[15] - 1e-9
    # walks ended right away: no walk has a point below any threshold, and 20 walks that saw nothing do not show
    # that nothing is there (a threshold needs 16 walks below it), so only the trivial bound P remains
    ended = np.full((20, 3), np.nan)
    assert theory.spine_bounds(ended, [5])[5].dual.upper == 5.0
    # zero surprisal forever: only the trivial bound P remains
    assert theory.spine_bounds(np.zeros((20, 5)), [7])[7].dual.upper == 7.0
    # too few continuations for a confidence margin: refused, one line
    with pytest.raises(BrwsimError, match="at least 16 sampled continuations"):
        theory.spine_bounds(xi[:2], [4])


def test_curve_queries_beyond_coverage_raise():
    curves = spine.SpineCurves(np.ones((3, 4)))
    assert curves.coverage == 4.0
    with pytest.raises(BrwsimError):
        curves.tau(np.array([4.0]))
    tau, se = curves.tau(np.array([2.5]))
    assert tau[0] == 3.0 and se[0] == 0.0


def test_huge_P_from_walks():
    """The spine reaches P = 10^6 at the cost of a few walks; the dual stays below renewal."""
    law = laws.parse_law("dirichlet:V=1000,alpha=0.1")
    b = theory.law_spine_bounds(key(0), law, [10**6], walks=2048)[10**6]
    mu, mu2 = law.exact_moments()
    assert math.isfinite(b.dual.upper) and b.dual.upper <= theory.renewal(10**6, mu, mu2)
    assert b.dual.upper >= theory.asymptotic(10**6, mu, mu2) - 0.3


def test_rank_dependent_markov_long_run_moments_match_walks():
    """The spine's state chain weights each kernel row by the probability of its rank: the long-run mu from
    the chain equals the direct average of H along long spine walks."""
    law = laws.markov_law(RANK_MARKOV)
    mom = theory.moments(key(0), law)
    w = spine.spine_moments_walks(key(1), law, walks=512, depth=40, burn=12)
    assert abs(w.mu - mom.mu) < 4 * math.hypot(w.mu_se, mom.mu_se)
    assert abs(w.mu2 - mom.mu2) < 4 * math.hypot(w.mu2_se, mom.mu2_se)


def test_the_margin_is_added_to_the_estimate():
    """A bound's value is estimate + z se at the chosen s (an upper confidence value), never estimate - z se."""
    rng = np.random.default_rng(4)
    xi = rng.exponential(1.0, size=(500, 60))
    b = theory.spine_bounds(xi, [16], margin_z=1.96)[16]
    b0 = theory.spine_bounds(xi, [16], margin_z=0.0)[16]
    for bb, bb0 in ((b.dual, b0.dual), (b.splitting, b0.splitting)):
        assert bb.se > 0
        # rel 1e-9: the upper value also carries its float64 rounding margin, (points + 8) eps64 of its magnitude
        assert bb.upper == pytest.approx(bb.estimate + 1.96 * bb.se, rel=1e-9)
        assert bb0.upper == pytest.approx(bb0.estimate, rel=1e-9) and bb0.upper >= bb0.estimate
        assert bb.upper > bb0.upper
