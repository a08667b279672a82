"""The drafters against trees worked out by hand: a drafter that ranks tokens the opposite way from the target.

Target: the fixed law p = (0.5, 0.3, 0.2) (token i has target rank i). Drafter ``Reverse``: q_i = p_{V-1-i},
so the drafter's favourite token is the target's least likely one. A builder that reads p instead of q, or
mixes up the drafter's rank with the target's, builds a different tree.
"""

from __future__ import annotations

import math
import re
import types
import warnings
from decimal import Decimal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brwsim._keys import draft_key
from brwsim._registry import registrar
from brwsim.drafters import (
    Drafter,
    DraftLaw,
    Exact,
    Mix,
    Noise,
    Oracle,
    Temp,
    acceptance_rates,
    bfs_order,
    brute_force_best,
    chain_one,
    divergences,
    draft_stats,
    drafter_batches,
    drafter_values,
    eagle_one,
    greedy_tree,
    kary_paths,
    load_paths,
    node_pq,
    node_qtable,
    parse_draft_law,
    parse_drafter,
    sequoia_dp,
    sequoia_paths,
    static_one,
    topq_one,
    tree_arrays,
)
from brwsim.errors import BrwsimError
from brwsim.laws import fixed_law, markov_law, parse_law
from brwsim.testing import returns_within, table_law

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


def test_node_qtable_of_the_exact_drafter_lists_target_ranks_in_order():
    # q = p: the drafter's k-th token is the target's rank k, on a law whose tokens are in no particular order
    law, k = parse_law("dirichlet:V=40,alpha=1"), jax.random.key(1)
    lp = np.asarray(node_pq(law, Exact(), k, 0)[0])
    for K in (3, 16, 17, 24):  # ranks by counting (K <= 16) and by one sort (K > 16)
        assert not np.array_equal(np.argsort(-lp)[:K], np.arange(K))  # the top K tokens are not tokens 0 .. K - 1
        q, p, r = node_qtable(law, Exact(), k, 0, K)
        np.testing.assert_array_equal(r, np.arange(K))
        assert r.dtype == jnp.int32
        np.testing.assert_array_equal(q, p)
        np.testing.assert_array_equal(p, np.sort(lp)[::-1][:K])


def test_chain_follows_the_drafter():
    t = tree(jax.jit(lambda k: chain_one(fixed_law(P3), Reverse(), k, 3))(jax.random.key(0)))
    np.testing.assert_array_equal(t["parent"], [-1, 0, 1])
    np.testing.assert_array_equal(t["depth"], [1, 2, 3])
    np.testing.assert_array_equal(t["rank"], [2, 2, 2])
    np.testing.assert_allclose(t["logP"], [L(0.2), 2 * L(0.2), 3 * L(0.2)], rtol=1e-6)


def markov_ab(initial="a"):
    """States a: (0.6, 0.4), b: (0.9, 0.1); the root is in ``initial``; a's rank-0 child is in a, its rank-1 child
    in b; b's children are in a (every transition certain)."""
    return markov_law({"states": {"a": "fixed:probs=0.6/0.4", "b": "fixed:probs=0.9/0.1"}, "initial": initial,
                       "kernel": {"a": [[1.0, 0.0], [0.0, 1.0]], "b": [[1.0, 0.0]]}})  # fmt: skip


def test_chain_carries_each_node_state_and_key():
    # Reverse takes the target's rank 1 everywhere (q = (0.4, 0.6) in a, (0.1, 0.9) in b), so the chain goes
    # a -> b -> a -> b: P(v) = 0.4, 0.4 * 0.1, 0.4 * 0.1 * 0.4 and states b, a, b.
    k0 = jax.random.key(4)
    t = jax.jit(lambda k: chain_one(markov_ab(), Reverse(), k, 3))(k0)
    np.testing.assert_array_equal(t.rank, [1, 1, 1])
    np.testing.assert_array_equal(t.state, [1, 0, 1])
    np.testing.assert_allclose(np.exp(np.asarray(t.logP)), [0.4, 0.04, 0.016], rtol=1e-6)
    # node keys: each the parent's key folded with 2 + target rank (docs/theory.md, "Node keys")
    k1 = jax.random.fold_in(k0, 3)
    k2 = jax.random.fold_in(k1, 3)
    want = [jax.random.key_data(k) for k in (k1, k2, jax.random.fold_in(k2, 3))]
    np.testing.assert_array_equal(t.key, np.stack(want))
    # a one-token vocabulary: the chain is that token P times, each with P(v) = 1
    t = tree(jax.jit(lambda k: chain_one(fixed_law([1.0]), Reverse(), k, 3))(k0))
    np.testing.assert_array_equal(t["rank"], [0, 0, 0])
    np.testing.assert_array_equal(t["logP"], [0, 0, 0])


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


def test_noise_draft_law_adds_sigma_times_the_keys_own_normal_draw():
    # log q = log p + sigma Z, renormalised, with Z = jax.random.normal(key, (V,)): a seed names one q
    lp = np.log(np.float32([0.4, 0.3, 0.2, 0.1]))
    k = jax.random.key(11)
    z = np.asarray(jax.random.normal(k, (4,)), np.float64)
    assert np.all(np.abs(z) > 0.05)  # every token moved
    want = lp.astype(np.float64) + 0.5 * z
    want -= np.logaddexp.reduce(want)
    np.testing.assert_allclose(np.asarray(Noise(sigma=0.5).logq(k, lp), np.float64), want, atol=1e-6)


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


def test_mixture_with_a_random_second_law_draws_it_at_every_node():
    # p = (1/2, 1/2), w = 1/2, r ~ Dirichlet(1, 1) = (U, 1 - U) with U uniform on (0, 1), a law that permuting the
    # two tokens keeps: q_0 = 1/4 + U / 2 is uniform on (1/4, 3/4), mean 1/2, variance 1/48, P(q_0 < 3/8) = 1/4
    mix, n = parse_draft_law("mix:w=0.5,law=dirichlet:V=2,alpha=1"), 4000
    lp = np.log(np.float32([0.5, 0.5]))
    q = np.exp(
        np.asarray(jax.jit(jax.vmap(lambda k: mix.logq(k, lp)))(jax.random.split(jax.random.key(2), n)), np.float64)
    )
    np.testing.assert_allclose(q.sum(axis=1), 1, rtol=1e-6)
    assert np.all(q[:, 0] >= 0.25 - 1e-6) and np.all(q[:, 0] <= 0.75 + 1e-6)
    assert abs(q[:, 0].mean() - 0.5) <= 4 * math.sqrt(1 / 48 / n)
    assert abs(np.mean(q[:, 0] < 0.375) - 0.25) <= 4 * math.sqrt(0.25 * 0.75 / n)


def test_mixture_of_two_point_masses_is_log_one_and_eagle_keeps_its_tree_whole():
    # p = (1) and a second law (1): q = (1 - w) + w = 1 exactly, so log q = 0; in float32 log1p(-w) and log w
    # summed by logaddexp round above 0 for some w (0.07, 0.29, 0.6), which let a child outscore its parent
    for w in (0.07, 0.29, 0.6):
        mix = Mix(w=w, law=fixed_law([1.0]))
        assert float(mix.logq(jax.random.key(0), jnp.zeros(1))[0]) == 0.0
        # EAGLE with P = 1, top_k = 1, depth 2: the one node is the root's child (depth 1, parent -1)
        t = tree(jax.jit(lambda k, mix=mix: eagle_one(fixed_law([1.0]), mix, k, 1, 1, 2))(jax.random.key(0)))
        np.testing.assert_array_equal(t["parent"], [-1])
        np.testing.assert_array_equal(t["depth"], [1])


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


# -- Sequoia's dynamic program, the greedy tree and the brute force, against an enumeration of every tree


def best_prefix_closed(a, n, depth=None) -> float:
    """max over every prefix-closed set of at most n rank paths (of at most ``depth`` ranks) of sum prod a."""
    sets, best = {frozenset()}, 0.0
    for _ in range(n):
        grown = set()
        for s in sets:
            for c in [(r,) for r in range(len(a))] + [q + (r,) for q in s for r in range(len(a))]:
                if c not in s and (depth is None or len(c) <= depth):
                    grown.add(s | {c})
        sets = grown or sets
        best = max(best, max(value(a, s) for s in sets))
    return best


def value(a, paths) -> float:
    return sum(math.prod(a[r] for r in p) for p in paths)


def check_paths(paths, n, depth=None):
    assert len(paths) <= n and len(set(paths)) == len(paths)
    assert all(len(p) == 1 or p[:-1] in paths for p in paths)  # prefix-closed
    assert paths == sorted(paths, key=lambda t: (len(t), t))  # breadth-first
    assert depth is None or max(len(p) for p in paths) <= depth


A_SORTED = [0.6, 0.3, 0.1]  # best n-node values .6, .96, 1.26, 1.476, 1.656 (the n largest products)
A_MIXED = [0.2, 0.5, 0.3]  # ranks not in order: .5, .8, 1.05, 1.25, 1.4


@pytest.mark.parametrize(
    "a,want", [(A_SORTED, [0.6, 0.96, 1.26, 1.476, 1.656]), (A_MIXED, [0.5, 0.8, 1.05, 1.25, 1.4])]
)
def test_sequoia_dp_is_the_best_tree(a, want):
    for n in range(1, 6):
        best = best_prefix_closed(a, n)
        assert best == pytest.approx(want[n - 1], rel=1e-12)
        v, paths = sequoia_dp(a, n)
        assert v == pytest.approx(best, rel=1e-12), n
        check_paths(paths, n)
        assert value(a, paths) == pytest.approx(v, rel=1e-12)
        assert brute_force_best(a, n) == pytest.approx(best, rel=1e-12)
        g, gpaths = greedy_tree(a, n)
        assert g == pytest.approx(best, rel=1e-12) and len(gpaths) == n
        check_paths(gpaths, n)
        assert value(a, gpaths) == pytest.approx(g, rel=1e-12)


def test_sequoia_dp_with_a_depth_limit():
    for depth, n, want in [(1, 2, 0.9), (1, 5, 1.0), (2, 4, 1.44), (2, 6, 1.72), (3, 5, 1.656)]:
        best = best_prefix_closed(A_SORTED, n, depth)
        assert best == pytest.approx(want, rel=1e-12)
        v, paths = sequoia_dp(A_SORTED, n, depth)
        assert v == pytest.approx(best, rel=1e-12), (depth, n)
        check_paths(paths, n, depth)
        assert value(A_SORTED, paths) == pytest.approx(v, rel=1e-12)
    assert sequoia_dp(A_SORTED, 2, 1)[1] == [(0,), (1,)]
    v, paths = sequoia_dp(A_MIXED, 4, 2)  # (1,) .5, (2,) .3, (1,1) .25, (0,) .2
    assert v == pytest.approx(1.25) and paths == [(0,), (1,), (2,), (1, 1)]


def test_greedy_tree_and_brute_force_by_hand():
    assert returns_within(10, greedy_tree, A_MIXED, 4) == (pytest.approx(1.25), [(0,), (1,), (2,), (1, 1)])
    assert greedy_tree([0.5], 3) == (pytest.approx(0.875), [(0,), (0, 0), (0, 0, 0)])  # a chain
    assert greedy_tree([0.5, 0.25], 3) == (pytest.approx(1.0), [(0,), (1,), (0, 0)])  # .5, .25, .25: sibling first
    assert brute_force_best(A_MIXED, 3, max_rank=2) == pytest.approx(0.95)  # ranks 0, 1 only: .5, .25, .2
    assert brute_force_best(A_MIXED, 0) == 0.0


def test_greedy_tree_and_brute_force_compute_in_float64():
    # float32 rates (0.6f is not 0.6): the value is the float64 sum of the five largest products of those rates
    # (.6, .36, .3, .216, .18), not a float32 sum (off by about 2e-8 relative)
    a = np.float32([0.6, 0.3, 0.1])
    b = a.astype(np.float64)
    want = b[0] + b[1] + b[0] ** 2 + b[0] * b[1] + b[0] ** 3
    g = greedy_tree(a, 5)[0]
    assert isinstance(g, float) and g == pytest.approx(want, rel=1e-14)
    v = brute_force_best(a, 5)
    assert isinstance(v, float) and v == pytest.approx(want, rel=1e-14)


def test_sequoia_dp_reads_its_rates_as_float64():
    # rates as Decimals or strings are read as the float64 numbers they name: a = (.5, .2), best 3 nodes
    # [0] .5, [0,0] .25, [1] .2
    want = (pytest.approx(0.95, rel=1e-12), [(0,), (1,), (0, 0)])
    assert sequoia_dp([Decimal("0.5"), Decimal("0.2")], 3) == want
    assert sequoia_dp(["0.5", "0.2"], 3) == want


def test_sequoia_dp_takes_no_node_that_adds_nothing():
    # the drafter's tokens are never accepted: every node has value 0 and the best tree is the empty one
    assert sequoia_dp([0.0, 0.0], 3) == (0.0, [])
    assert sequoia_dp([0.0], 2, 1) == (0.0, [])


def test_greedy_tree_breaks_rate_ties_to_the_smaller_rank():
    # ranks 2 and 3 share the largest rate: the one-node tree is rank 2 (ties to the smaller rank, as rank_of);
    # numpy's default (unstable) sort of these rates puts rank 3 first
    assert greedy_tree([0.25, 0.25, 0.5, 0.5], 1) == (0.5, [(2,)])
    assert greedy_tree([0.25, 0.25, 0.5, 0.5], 2) == (1.0, [(2,), (3,)])


# -- static trees


def test_static_paths_by_hand(tmp_path):
    assert kary_paths(2, 5) == [(0,), (1,), (0, 0), (0, 1), (1, 0)] and kary_paths(3, 2) == [(0,), (1,)]
    assert bfs_order([[0, 1], [1], [0], (0, 0)]) == [(0,), (1,), (0, 0), (0, 1)]
    par, qr = tree_arrays([(0,), (1,), (0, 0), (0, 1), (1, 0)])
    np.testing.assert_array_equal(par, [-1, -1, 0, 0, 1])
    np.testing.assert_array_equal(qr, [0, 1, 0, 1, 0])
    assert par.dtype == np.int32 and qr.dtype == np.int32
    for bad, msg in [
        ([[0], [0]], r"rank path \[0\] is listed twice"),
        ([[0], [1, 0]], r"not prefix-closed: \[1, 0\] is listed but its parent \[1\] is not"),
        ([[0], [0, 0, 0]], r"not prefix-closed: \[0, 0, 0\] is listed but its parent \[0, 0\] is not"),
        ([[]], r"rank path \[\] must be a non-empty list of integers >= 0, e\.g\. \[0, 1\]"),
        ([[0, -1]], "must be a non-empty list"),
        ([[0.0]], "must be a non-empty list"),
        ([0], "rank path 0 must be"),
    ]:
        with pytest.raises(BrwsimError, match=msg):
            bfs_order(bad)
    f = tmp_path / "tree.json"
    f.write_text("[[1], [0], [0, 0]]")
    assert load_paths(str(f)) == [(0,), (1,), (0, 0)]
    with pytest.raises(BrwsimError, match=r"static tree file '.*nothere\.json' cannot be read: No such file"):
        load_paths(str(tmp_path / "nothere.json"))
    f.write_text("[[0],")
    with pytest.raises(BrwsimError, match=r"static tree file '.*' is not JSON: Expecting value"):
        load_paths(str(f))
    for text in ("[]", '{"a": 1}'):
        f.write_text(text)
        with pytest.raises(
            BrwsimError, match=r"must hold a non-empty JSON list of rank paths like \[\[0\], \[0, 1\]\]"
        ):
            load_paths(str(f))


def test_static_tree_follows_drafter_ranks():
    # drafter ranks [0], [1], [0,0] under Reverse: target ranks 2, 1 and [2,2]
    par, qr = (jnp.asarray(x) for x in tree_arrays([(0,), (1,), (0, 0)]))
    t = tree(jax.jit(lambda k: static_one(fixed_law(P3), Reverse(), k, par, qr, 2))(jax.random.key(0)))
    np.testing.assert_array_equal(t["parent"], [-1, -1, 0])
    np.testing.assert_array_equal(t["depth"], [1, 1, 2])
    np.testing.assert_array_equal(t["rank"], [2, 1, 2])
    np.testing.assert_allclose(t["logP"], [L(0.2), L(0.3), L(0.04)], rtol=1e-5)


def test_static_tree_reads_each_node_state():
    # markov_ab under Reverse (K = 2): in a, drafter rank 0 is target rank 1 (p .4, child in b) and drafter rank 1
    # is target rank 0 (p .6, child in a); below [0], in b, drafter rank 0 is target rank 1 (p .1, child in a)
    par, qr = (jnp.asarray(x) for x in tree_arrays([(0,), (1,), (0, 0)]))
    t = jax.jit(lambda k: static_one(markov_ab(), Reverse(), k, par, qr, 2))(jax.random.key(0))
    np.testing.assert_array_equal(t.parent, [-1, -1, 0])
    np.testing.assert_array_equal(t.rank, [1, 0, 1])
    np.testing.assert_array_equal(t.state, [1, 0, 0])
    np.testing.assert_allclose(np.exp(np.asarray(t.logP)), [0.4, 0.6, 0.04], rtol=1e-6)


def test_static_tree_reads_the_root_state_and_carries_each_node_key():
    # markov_ab rooted in b under Reverse (K = 2): in b, drafter rank 0 is target rank 1 (p .1) and drafter rank 1
    # target rank 0 (p .9), both children in a; below [0], in a, drafter rank 0 is target rank 1 (p .4, child in b)
    par, qr = (jnp.asarray(x) for x in tree_arrays([(0,), (1,), (0, 0)]))
    k0 = jax.random.key(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no scatter of a float into an int field (JAX's FutureWarning)
        t = jax.jit(lambda k: static_one(markov_ab("b"), Reverse(), k, par, qr, 2))(k0)
    np.testing.assert_array_equal(t.rank, [1, 0, 1])
    np.testing.assert_array_equal(t.state, [0, 0, 1])
    np.testing.assert_allclose(np.exp(np.asarray(t.logP)), [0.1, 0.9, 0.04], rtol=1e-6)
    # node keys: the parent's key folded with 2 + target rank
    k1 = jax.random.fold_in(k0, 3)
    want = [k1, jax.random.fold_in(k0, 2), jax.random.fold_in(k1, 3)]
    np.testing.assert_array_equal(t.key, np.stack([jax.random.key_data(k) for k in want]))
    # a tree key of another PRNG implementation: its node keys are of that implementation
    kr = jax.random.key(4, impl="rbg")
    t = jax.jit(lambda k: static_one(fixed_law(P3), Reverse(), k, par, qr, 2))(kr)
    np.testing.assert_array_equal(t.rank, [2, 1, 2])
    k1 = jax.random.fold_in(kr, 4)
    want = [k1, jax.random.fold_in(kr, 3), jax.random.fold_in(k1, 4)]
    np.testing.assert_array_equal(t.key, np.stack([jax.random.key_data(k) for k in want]))


def test_tree_arrays_of_a_deep_tree():
    # a chain of three and a branch below its second node: each node's parent is the node of its path minus one rank
    par, qr = tree_arrays([(0,), (1,), (0, 0), (0, 0, 0), (0, 0, 1), (0, 0, 1, 0)])
    np.testing.assert_array_equal(par, [-1, -1, 0, 2, 2, 4])
    np.testing.assert_array_equal(qr, [0, 1, 0, 0, 1, 0])


def test_acceptance_rates_and_sequoia_paths_by_hand():
    # Reverse on p = (0.5, 0.3, 0.2): the drafter's k-th token has target probability 0.2, 0.3, 0.5
    a, se = acceptance_rates(jax.random.key(0), fixed_law(P3), Reverse(), 3, samples=5)
    np.testing.assert_allclose(a, [0.2, 0.3, 0.5], rtol=1e-6)
    np.testing.assert_allclose(se, 0, atol=1e-9)
    assert a.dtype == np.float64 and se.shape == (3,)
    a1, se1 = acceptance_rates(jax.random.key(0), fixed_law(P3), Reverse(), 2, samples=1)
    np.testing.assert_allclose(a1, [0.2, 0.3], rtol=1e-6)
    np.testing.assert_array_equal(se1, [0, 0])
    # best 3 nodes under a = (.2, .3, .5): [2] .5, [1] .3, [2,2] .25; at depth 1: all three ranks
    assert sequoia_paths(jax.random.key(0), fixed_law(P3), Reverse(), 3, None, samples=4) == [(1,), (2,), (2, 2)]
    assert sequoia_paths(jax.random.key(0), fixed_law(P3), Reverse(), 3, 1, samples=4) == [(0,), (1,), (2,)]


def test_acceptance_rates_and_draft_stats_read_the_root_state():
    # markov_ab rooted in b: p = (0.9, 0.1), Reverse's q = (0.1, 0.9): its k-th token has target probability .1, .9
    a, _ = acceptance_rates(jax.random.key(0), markov_ab("b"), Reverse(), 2, samples=2)
    np.testing.assert_allclose(a, [0.1, 0.9], rtol=1e-6)
    for initial, p in [("a", 0.6), ("b", 0.9)]:  # the root state's entropy
        st = draft_stats(jax.random.key(0), markov_ab(initial), "exact", samples=2)
        assert st.entropy.mean == pytest.approx(-(p * L(p) + (1 - p) * L(1 - p)), rel=1e-6)


def test_acceptance_rates_standard_error_of_a_random_draft():
    # Noise on p = (1/2, 1/2): the drafter's top token is either one, each of probability 1/2: no spread
    # p = (0.75, 0.25): the top token is 0.75 or 0.25, so E = 0.75 u + 0.25 (1 - u), se from the sample
    a, se = acceptance_rates(jax.random.key(1), fixed_law([0.75, 0.25]), Noise(sigma=3.0), 1, samples=400)
    u = (a[0] - 0.25) / 0.5  # the fraction of roots where the drafter's top token is the target's
    want_se = 0.5 * math.sqrt(u * (1 - u) / 399)  # sample sd of a two-valued variable, ddof = 1
    assert 0.1 < u < 0.9 and se[0] == pytest.approx(want_se, rel=1e-6)
    # two roots, one top token of each kind: mean 0.5, sample sd 0.5 / sqrt(2), se = sd / sqrt(2) = 0.25
    a, se = acceptance_rates(jax.random.key(3), fixed_law([0.75, 0.25]), Noise(sigma=3.0), 1, samples=2)
    assert a[0] == pytest.approx(0.5) and se[0] == pytest.approx(0.25)


def test_sequoia_reads_its_samples():
    # p = (0.9, 0.1) under Noise(sigma=4): a root's drafter top token is the target's top with probability u
    # (about 0.65), so a_0 = 0.1 + 0.8 c / N, a_1 = 1 - a_0, c of the N roots; the 2-node tree is [0], [1] when
    # a_0^2 < a_1, i.e. a_0 < (sqrt 5 - 1) / 2 = 0.6180340, else [0], [0, 0]. Run key 1937: c = 2652 of the first
    # 4096 roots (a_0 = 0.6179688), and roots 0, 1 and 4096 are all such roots: 2653 of 4097 (a_0 = 0.6180376),
    # 2 of 2 (a_0 = 0.9)
    law, dl, k = fixed_law([0.9, 0.1]), Noise(sigma=4.0), jax.random.key(1937)
    for n, c in [(2, 2), (4096, 2652), (4097, 2653)]:
        a, _ = acceptance_rates(k, law, dl, 2, samples=n)
        np.testing.assert_allclose(a, [0.1 + 0.8 * c / n, 0.9 - 0.8 * c / n], rtol=1e-6)
    np.testing.assert_allclose(acceptance_rates(k, law, dl, 2)[0][0], 0.1 + 0.8 * 2652 / 4096, rtol=1e-6)  # 4096
    assert sequoia_paths(k, law, dl, 2, None) == [(0,), (1,)]  # 4096 roots by default
    assert sequoia_paths(k, law, dl, 2, None, samples=4097) == [(0,), (0, 0)]
    assert sequoia_paths(k, law, dl, 2, None, samples=2) == [(0,), (0, 0)]
    assert parse_drafter("sequoia").paths(k, law, dl, 2) == [(0,), (1,)]
    assert parse_drafter("sequoia:samples=2").paths(k, law, dl, 2) == [(0,), (0, 0)]


# -- EAGLE beyond one level, and a candidate the drafter gives no mass


def test_eagle_two_levels_by_hand():
    # top_k = 2, depth = 2 under Reverse (a = target rank 2, p .2, q .5; b = target rank 1, p .3, q .3):
    # depth 1: a .5, b .3; depth 2: aa .25, ab .15, ba .15, bb .09, of which aa, ab (the first of the tie) go on;
    # depth 3: aaa .125, aab .075, aba .075, abb .045. Best 8 by score, ties by depth, then generation order:
    # a, b, aa, ab, ba, aaa, bb, aab
    t = tree(jax.jit(lambda k: eagle_one(fixed_law(P3), Reverse(), k, 8, 2, 2))(jax.random.key(0)))
    np.testing.assert_array_equal(t["parent"], [-1, -1, 0, 0, 1, 2, 1, 2])
    np.testing.assert_array_equal(t["depth"], [1, 1, 2, 2, 2, 3, 2, 3])
    np.testing.assert_array_equal(t["rank"], [2, 1, 2, 1, 2, 2, 1, 1])
    want = [0.2, 0.3, 0.04, 0.06, 0.06, 0.008, 0.09, 0.012]
    np.testing.assert_allclose(np.exp(t["logP"]), want, rtol=1e-5)


def test_eagle_three_levels_links_every_candidate_to_its_own_parent():
    # top_k = 2, depth = 3 under Reverse (a = target rank 2: q .5, p .2; b = target rank 1: q .3, p .3): the frontier
    # is a, b; then aa, ab (of aa .25, ab .15, ba .15, bb .09); then aaa, aab (of aaa .125, aab .075, aba .075,
    # abb .045); P = 14 keeps all 2 + 4 + 4 + 4 candidates. Each node's path, read through its parent links:
    t = tree(jax.jit(lambda k: eagle_one(fixed_law(P3), Reverse(), k, 14, 2, 3))(jax.random.key(0)))
    assert [t[f].dtype for f in ("parent", "depth", "logP", "rank")] == [np.int32, np.int32, np.float32, np.int32]
    paths = []
    for i in range(14):
        par = t["parent"][i]
        assert -1 <= par < i
        paths.append((paths[par] if par >= 0 else "") + "ab"[2 - t["rank"][i]])
        assert t["depth"][i] == len(paths[i])
        want = math.prod({"a": 0.2, "b": 0.3}[c] for c in paths[i])
        assert math.exp(t["logP"][i]) == pytest.approx(want, rel=1e-5)
    assert sorted(paths) == sorted("a b aa ab ba bb aaa aab aba abb aaaa aaab aaba aabb".split())


def test_eagle_carries_each_node_state_and_key():
    # markov_ab under Reverse, top_k = 2, depth = 1. Depth 1 (root in a): target rank 1 (q .6, p .4, state b),
    # rank 0 (q .4, p .6, state a). Depth 2: below [1] (in b, q = .1, .9): [1,1] score .54 (p .04, state a),
    # [1,0] .06; below [0] (in a): [0,1] .24 (p .24, state b), [0,0] .16. Best 4 by score: [1], [1,1], [0], [0,1]
    k0 = jax.random.key(4)
    t = jax.jit(lambda k: eagle_one(markov_ab(), Reverse(), k, 4, 2, 1))(k0)
    np.testing.assert_array_equal(t.parent, [-1, 0, -1, 2])
    np.testing.assert_array_equal(t.rank, [1, 1, 0, 1])
    np.testing.assert_array_equal(t.state, [1, 0, 0, 1])
    np.testing.assert_allclose(np.exp(np.asarray(t.logP)), [0.4, 0.04, 0.6, 0.24], rtol=1e-6)
    # node keys: the parent's key folded with 2 + target rank
    k1, k0_ = jax.random.fold_in(k0, 3), jax.random.fold_in(k0, 2)
    want = [k1, jax.random.fold_in(k1, 3), k0_, jax.random.fold_in(k0_, 3)]
    np.testing.assert_array_equal(t.key, np.stack([jax.random.key_data(k) for k in want]))


def test_eagle_candidate_without_drafter_mass_counts_nothing():
    # p = (0.5, 0.5, 0): Reverse gives q = (0, 0.5, 0.5); the third candidate (q = 0) is the target's rank 0
    t = tree(jax.jit(lambda k: eagle_one(fixed_law([0.5, 0.5, 0.0]), Reverse(), k, 3, 5, 0))(jax.random.key(0)))
    np.testing.assert_array_equal(t["rank"], [1, 2, 0])
    np.testing.assert_array_equal(t["parent"], [-1, -1, -1])
    assert t["logP"][0] == pytest.approx(L(0.5), rel=1e-6) and np.all(np.isneginf(t["logP"][1:]))


def test_eagle_too_few_candidates():
    with pytest.raises(
        BrwsimError,
        match=r"eagle with top_k=1, depth=1 generates only 2 candidates, fewer than P=3; raise top_k or depth(\n|$)",
    ):
        jax.eval_shape(lambda k: eagle_one(fixed_law(P3), Reverse(), k, 3, 1, 1), jax.random.key(0))


# -- drafters by name: every drafter's values on p = (0.5, 0.3, 0.2) under Reverse, by hand


@pytest.mark.parametrize(
    "name,P_list,want",
    [
        ("oracle", [1, 3], [0.5, 1.05]),
        ("topq", [1, 4], [0.2, 1.04]),  # [2] .2, [1] .3, [2,2] .04, [0] .5
        ("chain", [1, 3], [0.2, 0.248]),  # .2, .04, .008
        ("eagle:top_k=2,depth=1", [5], [0.66]),  # the EAGLE tree above
        ("static:k=2", [3, 2], [0.54, 0.5]),  # drafter ranks [0], [1], [0,0]: .2 + .3 + .04
        ("sequoia:samples=4", [1, 3], [0.2, 1.05]),  # P = 1: [0] (p .2); P = 3: [1], [2], [2,2]: .3 + .5 + .25
        ("sequoia:depth=1,samples=4", [3], [1.0]),  # the root's three children
    ],
)
def test_drafter_values_by_hand(name, P_list, want):
    v = drafter_values(jax.random.key(0), name, fixed_law(P3), Reverse(), P_list, trees=3, batch=2)
    assert v.shape == (3, len(P_list)) and v.dtype == np.float64
    np.testing.assert_allclose(v, np.tile(want, (3, 1)), rtol=1e-5)


def test_drafter_values_tree_by_tree():
    law = table_law(4, n_rows=64, alpha=0.5)  # each tree's root draws one of 64 rows: the trees differ
    a = drafter_values(jax.random.key(2), "topq", law, "exact", [1, 3], trees=5, batch=2)
    b = drafter_values(jax.random.key(2), "topq", law, "exact", [1, 3], trees=3, batch=2)
    np.testing.assert_array_equal(a[:3], b)  # tree n is the same tree whatever the number of trees
    d, dl = parse_drafter("topq"), parse_draft_law("exact")
    parts = list(drafter_batches(jax.random.key(2), d, law, dl, [1, 3], 5, 2, lo=2))  # trees 2, 3, 4 only
    assert [(cols, start, v.shape) for cols, start, v in parts] == [([0, 1], 0, (2, 2)), ([0, 1], 2, (1, 2))]
    assert all(v.dtype == np.float64 for _, _, v in parts)
    np.testing.assert_array_equal(np.concatenate([v for _, _, v in parts]), a[2:])
    assert len(set(a[:, 1].tolist())) == 5  # five different trees
    assert np.all(a[:, 1] > a[:, 0]) and np.all(a[:, 0] >= 0.25)  # the root's top child has p >= 1/V


class CountingOracle(Oracle):
    """The oracle, noting how many tree keys each call receives."""

    def trees(self, key, law, dlaw, keys, P):
        CALLS.append(keys.shape[0])
        return super().trees(key, law, dlaw, keys, P)


CALLS: list[int] = []


def test_drafter_values_builds_batch_trees_at_a_time():
    CALLS.clear()
    v = drafter_values(jax.random.key(0), CountingOracle(), fixed_law(P3), "exact", [1, 2], trees=5, batch=2)
    np.testing.assert_allclose(v, np.tile([0.5, 0.8], (5, 1)), rtol=1e-6)
    assert CALLS == [2, 2, 2]  # trees 0-1, 2-3, 4 (the last call's second tree is cut off)
    # the draft law is checked against the target law
    with pytest.raises(BrwsimError, match="draft law mix: the second law has V=3 tokens but the target law has 2"):
        drafter_values(jax.random.key(0), "oracle", fixed_law([0.5, 0.5]), Mix(w=0.5, law=fixed_law(P3)), [1], 1)


def test_drafters_by_name():
    assert isinstance(parse_drafter(None), Oracle) and parse_drafter(None).text == "oracle"
    d = parse_drafter("eagle")
    assert (d.top_k, d.depth, d.text, d.nested) == (10, 7, "eagle", True)
    d = parse_drafter(" eagle:top_k=3,depth=0 ")
    assert (d.top_k, d.depth, d.text) == (3, 0, "eagle:top_k=3,depth=0")
    assert parse_drafter(d) is d
    d = parse_drafter("sequoia")
    assert (d.depth, d.samples, d.nested) == (None, 4096, False)
    d = parse_drafter("sequoia:depth=2,samples=16")
    assert (d.depth, d.samples, d.text) == (2, 16, "sequoia:depth=2,samples=16")
    assert parse_drafter("static:k=3").k == 3 and parse_drafter("static:k=3").path is None
    assert [parse_drafter(n).text for n in ("topq", "chain", "oracle")] == ["topq", "chain", "oracle"]
    with pytest.raises(BrwsimError, match="drafter 'bogus': unknown name 'bogus'; use one of chain, eagle, oracle"):
        parse_drafter("bogus")
    for bad in ("", 5):
        with pytest.raises(BrwsimError, match=r"drafter must be NAME\[:key=value,...\] with NAME one of oracle, topq"):
            parse_drafter(bad)
    assert isinstance(parse_drafter("eagle:top_k=3").top_k, int) and isinstance(parse_drafter("static:k=3").k, int)
    assert isinstance(parse_drafter("eagle:depth=3").depth, int) and isinstance(
        parse_drafter("sequoia:depth=2").depth, int
    )
    assert isinstance(parse_drafter("sequoia:samples=16").samples, int)
    assert parse_drafter("eagle:top_k=1").top_k == 1 and parse_drafter("sequoia:depth=1,samples=2").samples == 2
    assert parse_drafter("static:k=1").k == 1 and parse_drafter("sequoia:depth=1").depth == 1
    for bad, msg in [
        ("eagle:top_k=2.5", "top_k must be an integer, got '2.5'"),
        ("eagle:top_k=0", "top_k must be >= 1, got 0"),
        ("eagle:depth=1.5", "depth must be an integer"),
        ("eagle:depth=-1", "depth must be >= 0, got -1"),
        ("sequoia:depth=1.5", "depth must be an integer"),
        ("sequoia:depth=0", "depth must be >= 1, got 0"),
        ("sequoia:samples=2.5", "samples must be an integer"),
        ("sequoia:samples=1", "samples must be >= 2, got 1"),
        ("static:k=1.5", "k must be an integer"),
        ("static:k=0", "k must be >= 1, got 0"),
    ]:
        with pytest.raises(BrwsimError, match=f"drafter '{re.escape(bad)}': {re.escape(msg)}"):
            parse_drafter(bad)
    for bad in ("static", "static:k=2,path=x.json"):
        with pytest.raises(BrwsimError, match="give exactly one of path=FILE .rank-path list. or k=K .K-ary tree."):
            parse_drafter(bad)


def test_static_drafter_errors(tmp_path):
    f = tmp_path / "two.json"
    f.write_text("[[0], [1]]")
    d = parse_drafter(f"static:path={f}")
    assert d.path == str(f) and d.k is None
    assert d.paths(None, fixed_law(P3), Reverse(), 2) == [(0,), (1,)]
    with pytest.raises(BrwsimError, match=r"drafter 'static:path=.*': the static tree has 2 nodes, fewer than P=3"):
        drafter_values(jax.random.key(0), d, fixed_law(P3), Reverse(), [3], trees=1)
    with pytest.raises(BrwsimError, match=r"drafter 'static:k=4': a path uses rank 3 but the vocabulary has 3 tokens"):
        drafter_values(jax.random.key(0), "static:k=4", fixed_law(P3), Reverse(), [4], trees=1)
    with pytest.raises(BrwsimError, match="cannot be read"):
        parse_drafter(f"static:path={tmp_path / 'missing.json'}")  # checked when parsed


def test_batch_sizes_by_hand():
    law = types.SimpleNamespace(vocab=32000)
    # 8 V floats of distributions, 6 (P + 1) min(V, P) of node tables, 64 P bytes of output
    assert Drafter().tree_bytes(law, 64) == 4 * (8 * 32000 + 6 * 65 * 64) + 64 * 64
    assert Drafter().batch_size(law, 64) == 96 * 2**20 // (4 * (8 * 32000 + 6 * 65 * 64) + 64 * 64) == 89
    assert Drafter().batch_size(types.SimpleNamespace(vocab=3), 4) == 512  # at most 512
    assert Drafter().batch_size(types.SimpleNamespace(vocab=10**7), 1000) == 1  # at least 1
    e = parse_drafter("eagle:top_k=4,depth=3")  # k V floats per frontier node, k + depth k^2 candidates
    assert e.tree_bytes(law, 64) == 4 * (8 * 32000 * 4 + 6 * 65 * 64) + 64 * 64 + 64 * (4 + 3 * 16)


# -- draft laws by name, and what each does with tokens of no target mass


def test_draft_laws_by_name(tmp_path):
    markov = tmp_path / "markov.json"  # a Markov law: two fixed states
    markov.write_text('{"states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=1"}, "initial": "a", '
                      '"kernel": {"a": [[0.5, 0.5]], "b": [[1.0, 0.0]]}}')  # fmt: skip
    assert isinstance(parse_draft_law(None), Exact) and parse_draft_law(None).spec() == "exact"
    n = Noise(sigma=0.1)
    assert parse_draft_law(n) is n
    for text, spec in [
        ("exact", "exact"),
        (" noise:sigma=0.25 ", "noise:sigma=0.25"),
        ("temp:T=1.5", "temp:T=1.5"),
        ("temp:T=0.5", "temp:T=0.5"),  # any T > 0
        ("noise:sigma=0", "noise:sigma=0"),  # sigma >= 0
        ("mix:w=0,law=fixed:probs=1", "mix:w=0,law=fixed:probs=1"),  # 0 <= w < 1
        ("mix:w=0.3,law=fixed:probs=0.5/0.5", "mix:w=0.3,law=fixed:probs=0.5/0.5"),
    ]:
        assert parse_draft_law(text).spec() == spec
    m = parse_draft_law("mix:w=0.3,law=fixed:probs=0.5/0.5")
    assert m.w == 0.3 and m.law.vocab == 2 and m.law_text == "fixed:probs=0.5/0.5"
    assert parse_draft_law("temp:T=2").T == 2.0
    for bad, msg in [
        ("bogus", r"draft law 'bogus': unknown family 'bogus'; examples: exact, noise:sigma=0\.5, temp:T=1\.5"),
        ("", r"draft law SPEC must be a non-empty string like 'noise:sigma=0\.5', got ''"),
        (3, "draft law SPEC must be a non-empty string"),
        ("temp:T=0", "T must be > 0, got 0"),
        ("noise:sigma=-1", "sigma must be >= 0, got -1"),
        ("mix:w=1,law=fixed:probs=1", "w must be < 1, got 1"),
        ("mix:w=-0.1,law=fixed:probs=1", "w must be >= 0, got -0.1"),
        ("mix:w=0.5,law=", "law= needs a law SPEC, e.g. law=dirichlet:V=1000,alpha=0.1"),
        (f"mix:w=0.5,law={markov}", "the second law of a mixture must be i.i.d., not Markov"),
    ]:
        with pytest.raises(BrwsimError, match=msg):
            parse_draft_law(bad)
    with pytest.raises(BrwsimError, match=r"draft law mix: the second law has V=3 tokens but the target law has 2; "
                       r"use a second law with V <= 2"):  # fmt: skip
        Mix(w=0.5, law=fixed_law(P3)).check(fixed_law([0.5, 0.5]))
    Mix(w=0.5, law=fixed_law(P3)).check(fixed_law(P3))  # the same size is fine


def test_draft_laws_at_their_float_limits():
    """A draft law's parameter past float32's range gives the limit of its q, the same trees as a parameter far
    enough inside it: temperature 1e-300 (1/T overflows) the point mass on p's most likely token, as at T = 1e-3
    (0.5^1000 is 0 in float32); 1e300 the uniform law, as at 1e6 (q within 1e-6 of uniform: E[X] within 2e-6);
    noise 1e300 the point mass on the largest normal, as at 1e6; a mixture weight within 2^-24 of 1 keeps its
    1 - w (a finite KL, not a q of zeros). Before, T = 1e-300 gave E[X] = 0 (every log q -inf) and
    sigma = 1e300 the same."""
    from brwsim import simulate

    def run(dl, trees=2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow warnings either
            r = simulate("fixed:probs=0.6/0.3/0.1", P=[1, 4], trees=trees, drafter="topq", draft_law=dl)
        return [r[P].stat.mean for P in (1, 4)], r.to_dict()

    assert run("temp:T=1e-300")[0] == run("temp:T=1e-3")[0] == pytest.approx([0.6, 0.6 + 0.36 + 0.216 + 0.1296])
    np.testing.assert_allclose(run("temp:T=1e300")[0], run("temp:T=1e6")[0], atol=2e-6)
    noisy, r = run("noise:sigma=1e300", trees=40)
    assert noisy == run("noise:sigma=1e6", trees=40)[0] and r["draft"]["draft_law"] == "noise:sigma=1e+300"
    assert parse_draft_law("temp:T=1e300").spec() == "temp:T=1e+300"
    m = parse_draft_law("mix:w=0.999999999,law=fixed:probs=0.5/0.5")
    assert m.spec() == "mix:w=0.999999999,law=fixed:probs=0.5/0.5"
    st = draft_stats(jax.random.key(0), "fixed:probs=0.6/0.3/0.1", m, samples=64)
    # q = 1e-9 p + (1 - 1e-9) r, r = (0.5, 0.5, 0) in a uniformly random order: the exact KL, over the 3 places of 0
    p, w = np.array([0.6, 0.3, 0.1]), 1 - 1e-9
    kl = [np.sum(p * np.log(p / ((1 - w) * p + w * np.insert([0.5, 0.5], j, 0.0)))) for j in range(3)]
    assert abs(st.kl.mean - np.mean(kl)) < 4 * st.kl.se + 1e-4, (st.kl, np.mean(kl))


def test_draft_laws_keep_zero_mass_tokens_at_zero():
    with np.errstate(divide="ignore"):
        lp = np.log(np.float32([0.5, 0.5, 0.0]))
    q = np.exp(np.asarray(Noise(sigma=0.7).logq(jax.random.key(3), lp), np.float64))
    assert q[2] == 0 and q.sum() == pytest.approx(1, rel=1e-6) and q[0] != q[1]
    np.testing.assert_allclose(np.exp(np.asarray(Noise(sigma=0.0).logq(jax.random.key(3), lp))), [0.5, 0.5, 0])
    np.testing.assert_allclose(np.exp(np.asarray(Temp(T=0.5).logq(None, lp))), [0.5, 0.5, 0])
    np.testing.assert_allclose(np.exp(np.asarray(Exact().logq(None, lp))), [0.5, 0.5, 0])
    # w = 0: q = p exactly
    q0 = np.exp(np.asarray(Mix(w=0.0, law=fixed_law([1.0])).logq(jax.random.key(0), lp)))
    np.testing.assert_allclose(q0, [0.5, 0.5, 0], atol=1e-7)


def test_node_pq_reads_the_node_keys_and_state(tmp_path):
    rows = np.random.default_rng(0).dirichlet(np.ones(4), size=32)
    np.savez(tmp_path / "pool.npz", probs=rows)
    law, k = parse_law(f"pool:path={tmp_path / 'pool.npz'}"), jax.random.key(6)
    lp, lq = node_pq(law, Noise(sigma=0.5), k, 0)
    want = law.full_logp(jax.random.fold_in(k, 0), 0)  # the node's distribution key
    assert not np.array_equal(want, law.full_logp(k, 0))  # (the tree's key draws another row here)
    np.testing.assert_array_equal(lp, want)
    np.testing.assert_array_equal(lq, Noise(sigma=0.5).logq(draft_key(k), lp))  # the node's drafter key
    assert not np.array_equal(np.asarray(lq), np.asarray(Noise(sigma=0.5).logq(jax.random.fold_in(k, 0), lp)))
    table = table_law(4, n_rows=8)  # a law whose node distribution is the row of its state
    np.testing.assert_array_equal(node_pq(table, Exact(), k, 3)[0], table.logp[3])


def test_draft_stats_of_a_random_drafter_samples_every_tree():
    st = draft_stats(jax.random.key(0), "fixed:probs=0.5/0.5", "noise:sigma=0.3", samples=6)
    assert st.entropy.n == 6 and st.entropy.mean == pytest.approx(L(2), rel=1e-6)
    assert draft_stats(jax.random.key(0), "fixed:probs=0.5/0.5", "noise:sigma=0.3").entropy.n == 4096  # by default
    assert st.kl.mean > 0 and st.tv.mean > 0
    with pytest.raises(BrwsimError, match="the second law has V=3 tokens"):
        draft_stats(jax.random.key(0), "fixed:probs=0.5/0.5", "mix:w=0.5,law=fixed:probs=0.5/0.3/0.2")
