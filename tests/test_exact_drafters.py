"""The drafters against trees worked out by hand: a drafter that ranks tokens the opposite way from the target.

Target: the fixed law p = (0.5, 0.3, 0.2) (token i has target rank i). Drafter ``Reverse``: q_i = p_{V-1-i},
so the drafter's favourite token is the target's least likely one. A builder that reads p instead of q, or
mixes up the drafter's rank with the target's, builds a different tree.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from brwsim._registry import registrar
from brwsim.drafters import (
    DraftLaw,
    Mix,
    Noise,
    Temp,
    chain_one,
    divergences,
    draft_stats,
    eagle_one,
    node_qtable,
    topq_one,
)
from brwsim.laws import fixed_law

_register = registrar({})
L = math.log
P3 = [0.5, 0.3, 0.2]


@_register("reverse")
class Reverse(DraftLaw):
    """q_i = p_{V-1-i}: the target's ranking turned upside down."""

    deterministic = True

    def logq(self, key, lp):
        return lp[::-1]


def tree(t):
    return {f: np.asarray(getattr(t, f)) for f in ("parent", "depth", "logP", "rank")}


def test_node_qtable_ranks_by_q_and_reports_target_ranks():
    q, p, r = (np.asarray(a) for a in node_qtable(fixed_law(P3), Reverse(), jax.random.key(0), 0, 3))
    np.testing.assert_allclose(np.exp(q), [0.5, 0.3, 0.2], rtol=1e-6)  # the drafter's order
    np.testing.assert_allclose(np.exp(p), [0.2, 0.3, 0.5], rtol=1e-6)  # the target's probabilities of those
    np.testing.assert_array_equal(r, [2, 1, 0])


def test_node_qtable_wide_path_with_ties():
    probs = np.array([5, 4, 4, 3, 3, 3] + [2] * 14 + [1] * 4, np.float64)  # 24 tokens, many ties
    law = fixed_law(probs / probs.sum())
    K = 18  # above 16: the ranks come from one stable sort
    _, p, r = (np.asarray(a) for a in node_qtable(law, Reverse(), jax.random.key(0), 0, K))
    # q_i = p_{23-i}: the largest q sit at tokens 23, 22, 21 (p = 5, 4, 4 there); ties in q go to the smaller token
    want_tokens = [23, 21, 22, 18, 19, 20, *range(4, 18)][:K]
    np.testing.assert_array_equal(r, want_tokens)  # target rank = token index for a sorted fixed law
    np.testing.assert_allclose(np.exp(p), probs[want_tokens] / probs.sum(), rtol=1e-6)
    _, _, r16 = (
        np.asarray(a) for a in node_qtable(law, Reverse(), jax.random.key(0), 0, 16)
    )  # the counting path agrees
    np.testing.assert_array_equal(r16, want_tokens[:16])


def test_chain_follows_the_drafter():
    t = tree(jax.jit(lambda k: chain_one(fixed_law(P3), Reverse(), k, 3))(jax.random.key(0)))
    np.testing.assert_array_equal(t["parent"], [-1, 0, 1])
    np.testing.assert_array_equal(t["depth"], [1, 2, 3])
    np.testing.assert_array_equal(t["rank"], [2, 2, 2])
    np.testing.assert_allclose(t["logP"], [L(0.2), 2 * L(0.2), 3 * L(0.2)], rtol=1e-6)


def test_topq_takes_the_largest_drafter_path_probabilities():
    # Q: [2] 0.5, [1] 0.3, [2,2] 0.25, [0] 0.2, [2,1] 0.15 ... ; target P: 0.2, 0.3, 0.04, 0.5
    t = tree(jax.jit(lambda k: topq_one(fixed_law(P3), Reverse(), k, 4, 3))(jax.random.key(0)))
    np.testing.assert_array_equal(t["parent"], [-1, -1, 0, -1])
    np.testing.assert_array_equal(t["depth"], [1, 1, 2, 1])
    np.testing.assert_array_equal(t["rank"], [2, 1, 2, 0])
    np.testing.assert_allclose(t["logP"], [L(0.2), L(0.3), L(0.04), L(0.5)], rtol=1e-5)


def test_eagle_keeps_the_best_candidates_by_drafter_score():
    # top_k = 2, depth = 1: the root's two best by q ([2] 0.5, [1] 0.3), then each one's two best children
    # ([2,2] 0.25, [2,1] 0.15, [1,2] 0.15, [1,1] 0.09); equal scores keep generation order
    t = tree(jax.jit(lambda k: eagle_one(fixed_law(P3), Reverse(), k, 5, 2, 1))(jax.random.key(0)))
    np.testing.assert_array_equal(t["parent"], [-1, -1, 0, 0, 1])
    np.testing.assert_array_equal(t["depth"], [1, 1, 2, 2, 2])
    np.testing.assert_array_equal(t["rank"], [2, 1, 2, 1, 2])
    np.testing.assert_allclose(t["logP"], [L(0.2), L(0.3), L(0.04), L(0.06), L(0.06)], rtol=1e-5)


def test_eagle_breaks_score_ties_by_depth():
    # p = (0.5, 0.25, 0.25): q = (0.25, 0.25, 0.5); [2,2] scores 0.25 like the depth-1 [0] and [1]: depth 1 first
    t = tree(jax.jit(lambda k: eagle_one(fixed_law([0.5, 0.25, 0.25]), Reverse(), k, 4, 3, 1))(jax.random.key(0)))
    np.testing.assert_array_equal(t["depth"], [1, 1, 1, 2])
    np.testing.assert_array_equal(t["rank"], [2, 0, 1, 2])
    np.testing.assert_array_equal(t["parent"], [-1, -1, -1, 0])


def test_temperature_draft_law_by_hand():
    lq = np.asarray(Temp(T=2.0).logq(None, np.log(np.float32(P3))))
    s = np.sqrt(P3)
    np.testing.assert_allclose(np.exp(lq), s / s.sum(), rtol=1e-6)


def test_noise_draft_law_log_odds_variance():
    lp = np.log(np.float32([0.4, 0.3, 0.2, 0.1]))
    sigma, n = 0.5, 4000
    lq = np.asarray(jax.jit(jax.vmap(lambda k: Noise(sigma=sigma).logq(k, lp)))(jax.random.split(jax.random.key(0), n)))
    d = (lq[:, 0] - lq[:, 1]) - (lp[0] - lp[1])  # sigma (z_0 - z_1) ~ N(0, 2 sigma^2)
    v = np.var(d, ddof=1)
    assert abs(v - 2 * sigma**2) <= 4 * 2 * sigma**2 * math.sqrt(2 / (n - 1))
    np.testing.assert_allclose(np.logaddexp.reduce(lq, axis=1), 0, atol=1e-5)


def test_mixture_puts_w_on_one_uniformly_placed_token():
    w, n = 0.3, 4000
    mix = Mix(w=w, law=fixed_law([1.0]))  # the second law is a point mass, placed on a random token
    lp = np.log(np.float32([0.4, 0.3, 0.2, 0.1]))
    q = np.exp(
        np.asarray(jax.jit(jax.vmap(lambda k: mix.logq(k, lp)))(jax.random.split(jax.random.key(0), n)), np.float64)
    )
    extra = q - (1 - w) * np.exp(lp)
    where = np.argmax(extra, axis=1)
    np.testing.assert_allclose(extra[np.arange(n), where], w, atol=1e-6)
    np.testing.assert_allclose(np.sort(extra, axis=1)[:, :3], 0, atol=1e-6)
    for t in range(4):
        f = np.mean(where == t)
        assert abs(f - 0.25) <= 4 * math.sqrt(0.25 * 0.75 / n)


def test_divergences_by_hand():
    with np.errstate(divide="ignore"):
        lp = np.log(np.float32([0.5, 0.5, 0.0]))
    h, ce, kl, tv = (float(x) for x in divergences(lp, np.log(np.float32([0.25, 0.5, 0.25]))))
    assert h == pytest.approx(L(2), rel=1e-6)
    assert ce == pytest.approx(-(0.5 * L(0.25) + 0.5 * L(0.5)), rel=1e-6)
    assert kl == pytest.approx(0.5 * L(2), rel=1e-5)
    assert tv == pytest.approx(0.25, rel=1e-6)


def test_draft_stats_of_a_deterministic_pair_by_hand():
    st = draft_stats(jax.random.key(0), fixed_law([0.5, 0.5]), Temp(T=0.5))  # q = (0.5, 0.5): no divergence
    assert st.entropy.mean == pytest.approx(L(2), rel=1e-6) and st.kl.mean == pytest.approx(0, abs=1e-6)
    st = draft_stats(jax.random.key(0), fixed_law([0.75, 0.25]), Temp(T=0.5))  # q = (0.9, 0.1)
    assert st.cross_entropy.mean == pytest.approx(-(0.75 * L(0.9) + 0.25 * L(0.1)), rel=1e-5)
    assert st.tv.mean == pytest.approx(0.15, rel=1e-5) and st.entropy.n == 2
