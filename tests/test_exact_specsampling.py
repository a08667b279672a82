"""Speculative sampling and exponential races against exact enumeration on deterministic trees.

Target: the fixed law p = (0.6, 0.3, 0.1) at every node; drafter q_i = p_{V-1-i} = (0.1, 0.3, 0.6).
With m i.i.d. candidates, recursive rejection accepts one with probability
a(m) = 1 - prod_{j<m} (1 - sum_x min(r_j(x), q(x))), r_0 = p, r_{j+1} = (r_j - q)^+ / Z; the number of
candidates equal to the accepted token (which sets the next depth's candidates) is enumerated exactly.

Exponential races: with shared Exp(1) clocks E_x, the winner x = argmin E_x / p_x and its rank
R = #{y : E_y / q_y < E_x / q_x} have the joint law
P(x, R = r) = int_0^inf e^{-e} sum_{|S| = r} prod_{y in S} P(a_y e < E_y < b_y e) prod_{y not in S, y != x}
P(E_y > max(a_y, b_y) e) de, with a_y = p_y / p_x, b_y = q_y / q_x: a sum of exponentials, integrated term
by term (``race_joint``). A two-state Markov tree (the child of rank 0 of an A node is a B node, every other
child an A node; the root is A or B with probability 1/2, drawn from the tree's key) makes the node law
depend on the path taken, so a walk that loses its place in the tree is seen.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brwsim._keys import Stream
from brwsim._registry import registrar
from brwsim.drafters import DraftLaw
from brwsim.errors import BrwsimError
from brwsim.laws import fixed_law, markov_law
from brwsim.specsampling import (
    ACCEPT,
    BONUS,
    REJECT,
    call_accepted,
    drafted_count,
    generate,
    kobus_bound,
    max_candidates,
    optimal_race_tree,
    race,
    race_rank_law,
    rejection_identity,
    rrs,
    shape,
)
from brwsim.specsampling._rejection import batched, first_call_accepted, run_keys

_register = registrar({})
p = np.array([0.6, 0.3, 0.1])
q = p[::-1].copy()


@_register("reverse_spec")
class Reverse(DraftLaw):
    deterministic = True

    def logq(self, key, lp):
        return lp[::-1]


@_register("swap_spec")
class Swap(DraftLaw):
    """q = (p_0, p_2, p_1): with p = (0.6, 0.3, 0.1), TV(p, q) = (0 + 0.2 + 0.2) / 2 = 0.2."""

    deterministic = True

    def logq(self, key, lp):
        return lp[jnp.array([0, 2, 1])]


def residuals(m, p=p, q=q):
    rs = [p]
    for _ in range(m):
        res = np.maximum(rs[-1] - q, 0)
        rs.append(res / res.sum() if res.sum() > 0 else rs[-1])
    return rs


def accept_prob(m):
    rs = residuals(m)
    return 1 - math.prod(1 - np.minimum(rs[j], q).sum() for j in range(m))


def accepted_token_and_count(m, p=p, q=q):
    """{(x, c): P(x is accepted and c of the m candidates equal it)}, by enumerating the candidates."""
    rs, out = residuals(m, p, q), {}
    for xs in itertools.product(range(len(p)), repeat=m):
        pr, reach = math.prod(q[x] for x in xs), 1.0
        if pr == 0:
            continue
        for j, x in enumerate(xs):
            acc = min(1.0, rs[j][x] / q[x])
            key = (x, xs.count(x))
            out[key] = out.get(key, 0.0) + pr * reach * acc
            reach *= 1 - acc
    return out


def accepted_with_count(m):
    """{c: P(a candidate is accepted and c of the m candidates equal it)}."""
    out = {}
    for (_, c), pr in accepted_token_and_count(m).items():
        out[c] = out.get(c, 0.0) + pr
    return out


def expected_x(widths):
    """E[X] of one call: depth by depth, the candidates are (count of the accepted token) x the next width."""
    dist, ex = {widths[0]: 1.0}, 0.0  # {candidates at this depth: probability of reaching it}
    for d in range(len(widths)):
        nxt = {}
        for m, pm in dist.items():
            for c, pc in accepted_with_count(m).items():
                ex += pm * pc
                if d + 1 < len(widths):
                    nxt[c * widths[d + 1]] = nxt.get(c * widths[d + 1], 0.0) + pm * pc
        dist = nxt
    return ex


def within(freq, prob, n):
    """A frequency over n draws within four binomial standard errors of its probability (exactly 0 for 0)."""
    return abs(freq - prob) <= 4 * math.sqrt(prob * (1 - prob) / n) + 1e-12


# ---------------------------------------------------------------------------
# small pieces by hand


def test_first_call_accepted_counts_the_leading_accepts():
    events = np.array(
        [
            [ACCEPT, ACCEPT, REJECT],
            [ACCEPT, ACCEPT, ACCEPT],  # all accepted: X is the row's length
            [BONUS, ACCEPT, ACCEPT],
            [ACCEPT, BONUS, ACCEPT],
        ]
    )
    np.testing.assert_array_equal(first_call_accepted(events), [2, 3, 0, 1])
    np.testing.assert_array_equal(first_call_accepted(events[1:2]), [3])


TREE_RULE = r"tree drafting is defined for k = 1, 2, 4, 8, 12, 16, \.\.\."


def test_shape_rules_and_messages():
    with pytest.raises(BrwsimError, match=r"^drafted tokens k must be an integer >= 1, got 0$"):
        shape("sequence", 0)
    with pytest.raises(BrwsimError, match=r"^batch drafting with 4 chains needs k divisible by 4, got k=6$"):
        shape("batch", 6)
    for k in (3, 5, 6, 7, 9, 10, 11, 13):  # only 1, 2, 4 and 8 + 4n
        with pytest.raises(BrwsimError, match=rf"^{TREE_RULE}; got k={k}$"):
            shape("tree", k)
    assert shape("tree", 16) == (2, 1, 2, 1, 1)
    with pytest.raises(BrwsimError, match=r"^unknown scheme 'fan'; use sequence, batch or tree$"):
        shape("fan", 2)


def test_generate_refuses_bad_input():
    key, law = jax.random.key(0), fixed_law(p)
    for widths, shown in (((1, 0), r"\(1, 0\)"), ((), r"\(\)")):
        with pytest.raises(BrwsimError, match=rf"^draft shape must be a non-empty list of widths >= 1, got {shown}$"):
            generate(key, law, Reverse(), widths, T=1, runs=1)
    with pytest.raises(BrwsimError, match=r"^T must be an integer >= 1, got 0$"):
        generate(key, law, Reverse(), (1,), T=0, runs=1)
    # the draft law is checked against the target
    with pytest.raises(BrwsimError, match="second law has V=8 tokens but the target law has 3"):
        generate(key, law, "mix:w=0.5,law=dirichlet:V=8,alpha=1", (1,), T=1, runs=1)


def test_run_keys_are_items_of_the_named_streams():
    key = jax.random.key(21)

    def item(stream, i):  # item i of a stream: fold_in(fold_in(run key, stream), i)
        return np.asarray(jax.random.key_data(jax.random.fold_in(jax.random.fold_in(key, int(stream)), i)))

    tk, wk = run_keys(key, 3, Stream.GENERATE, False)
    assert tk.shape == wk.shape == (3,)
    for i in range(3):
        np.testing.assert_array_equal(jax.random.key_data(tk[i]), item(Stream.TREES, i))  # run i on tree i
        np.testing.assert_array_equal(jax.random.key_data(wk[i]), item(Stream.GENERATE, i))
    tk, wk = run_keys(key, 3, Stream.RACE, True)
    assert tk.shape == wk.shape == (3,)
    for i in range(3):
        np.testing.assert_array_equal(jax.random.key_data(tk[i]), item(Stream.TREES, 0))  # every run on tree 0
        np.testing.assert_array_equal(jax.random.key_data(wk[i]), item(Stream.RACE, i))


@pytest.mark.parametrize(
    "runs,V,width,chunk",
    [
        (11, 2**22, None, 4),  # 2**24 values per chunk: 4 runs, chunks 4, 4, 3 (+1 padding)
        (10, 2**21, 2, 4),  # chunks 4, 4, 2 (+2 padding)
        (9, 2**21, 2, 4),  # chunks 4, 4, 1 (+3 padding: the last chunk's one run repeated)
        (3, 2**25, 1, 1),  # one run is over the budget: one run per chunk
        (5, 3, 1, 5),  # everything in one chunk, no padding
    ],
)
def test_batched_runs_every_run_once_in_chunks_of_one_shape(runs, V, width, chunk):
    seen = []

    def f(a, b):
        seen.append(a.shape[0])
        return np.asarray(a) * 1000 + np.asarray(b), np.asarray(a)[:, None] * np.array([1, 2])

    tk, wk = jnp.arange(runs), jnp.arange(runs) + 100
    out = batched(f, tk, wk, runs, V) if width is None else batched(f, tk, wk, runs, V, width)
    np.testing.assert_array_equal(out[0], np.arange(runs) * 1000 + np.arange(runs) + 100)
    np.testing.assert_array_equal(out[1], np.arange(runs)[:, None] * np.array([1, 2]))
    assert seen == [chunk] * math.ceil(runs / chunk)


def test_kobus_bound_by_hand():
    assert kobus_bound(3, 2, math.log(3)) == pytest.approx(2.0, rel=1e-12)  # (log 3 + log 3) / log 3
    assert kobus_bound(4, 1, math.log(2)) == pytest.approx(3.0, rel=1e-12)  # (2 log 2 + log 2) / log 2
    assert kobus_bound(8, 7, 1.5) == pytest.approx(4 * math.log(2), rel=1e-12)  # 6 log 2 / 1.5
    assert kobus_bound(5, 3, 0.0) == math.inf and kobus_bound(5, 3, -0.5) == math.inf  # H[R] = 0: no bound


def brute_force_top_paths(pi, k, depth):
    """The k rank paths of largest prod pi, by listing every path up to ``depth`` (no tie at the cut)."""
    paths = [t for d in range(1, depth + 1) for t in itertools.product(range(len(pi)), repeat=d)]
    w = {t: math.prod(pi[r] for r in t) for t in paths}
    best = sorted(paths, key=lambda t: -w[t])
    assert w[best[k - 1]] > w[best[k]]
    return sorted(best[:k], key=lambda t: (len(t), t))


@pytest.mark.parametrize("pi,k", [((0.6, 0.3, 0.1), 3), ((0.6, 0.3, 0.1), 6), ((0.7, 0.3, 0.0), 4)])
def test_optimal_race_tree_is_the_brute_force_top(pi, k):
    tree = optimal_race_tree(np.array(pi), k)
    assert tree == brute_force_top_paths(pi, k, depth=k)


# ---------------------------------------------------------------------------
# recursive rejection at one node, against the enumeration

P4 = np.array([0.4, 0.3, 0.2, 0.1])
Q4 = P4[::-1].copy()


@jax.jit
def _rrs_runs(keys, m):
    lp, lq = jnp.log(jnp.asarray(P4, jnp.float32)), jnp.log(jnp.asarray(Q4, jnp.float32))
    return jax.vmap(lambda k: rrs(k, lp, lq, m, 3))(keys)


def test_rrs_with_fewer_candidates_than_its_bound():
    # p = (0.4, 0.3, 0.2, 0.1), q reversed: r_1 = (0.3, 0.1, 0, 0) / 0.4, r_2 = (0.65, 0.05, 0, 0) / 0.7;
    # P(reject both) = (1 - 0.6) (1 - (0.1 + 0.2)) = 0.28. Candidate 3 is drawn (M = 3) but is no candidate.
    assert residuals(2, P4, Q4)[2] == pytest.approx([13 / 14, 1 / 14, 0, 0])
    n = 20000
    keys = jax.random.split(jax.random.key(13), n)
    for m, r_m in ((0, P4), (1, [0.75, 0.25, 0, 0]), (2, [13 / 14, 1 / 14, 0, 0])):
        acc, x, c, lr = (np.asarray(a) for a in _rrs_runs(keys, jnp.int32(m)))
        rej = ~acc
        np.testing.assert_allclose(np.exp(lr[rej]), np.broadcast_to(r_m, (rej.sum(), 4)), atol=1e-6)
        law = accepted_token_and_count(m, P4, Q4)
        assert within(rej.mean(), 1 - sum(law.values()), n)
        assert 1 - sum(law.values()) == pytest.approx([1, 0.4, 0.28][m])
        for xx in range(4):
            for cc in range(1, m + 1):
                assert within(np.mean(acc & (x == xx) & (c == cc)), law.get((xx, cc), 0.0), n), (m, xx, cc)


# ---------------------------------------------------------------------------
# one call on the fixed tree


def test_enumeration_matches_the_closed_acceptance():
    for m in (1, 2, 3):
        assert sum(accepted_with_count(m).values()) == pytest.approx(accept_prob(m), rel=1e-12)
    assert accept_prob(1) == pytest.approx(0.1 + 0.3 + 0.1)  # sum min(p, q)


@pytest.mark.parametrize("widths", [(1, 1, 1), (2, 1), (1, 3)])
def test_one_call_accepts_as_enumerated_and_outputs_the_target(widths):
    # E[X]: 0.875, 0.833, 0.798; a width read at the wrong depth gives 0.75 to 0.87, more than 4 se away
    n = 16000
    g = generate(jax.random.key(5), fixed_law(p), Reverse(), widths, T=len(widths) + 1, runs=n)
    x = first_call_accepted(g.event).astype(np.float64)
    assert abs(x.mean() - expected_x(widths)) <= 4 * x.std(ddof=1) / math.sqrt(n)
    for r in range(3):  # every position's token follows p, whatever was drafted
        f = np.mean(g.token[:, 1] == r)
        assert abs(f - p[r]) <= 4 * math.sqrt(p[r] * (1 - p[r]) / n)
    np.testing.assert_allclose(g.tv, 0.5, atol=1e-6)  # TV(p, q) = (0.5 + 0 + 0.5) / 2
    assert np.all(g.verified[:, 0])
    np.testing.assert_array_equal(call_accepted(jax.random.key(5), fixed_law(p), Reverse(), widths, n), x)


def test_shapes_by_hand():
    assert drafted_count((2, 1, 2)) == 2 + 2 + 4 and max_candidates((2, 1, 2)) == 4
    assert drafted_count((3,)) == 3 and max_candidates((1, 1, 1)) == 1
    assert shape("sequence", 3) == (1, 1, 1)
    assert shape("batch", 8) == (4, 1) and shape("batch", 3) == (3,)
    assert [shape("tree", k) for k in (1, 2, 4, 8, 12)] == [(1,), (2,), (2, 1), (2, 1, 2), (2, 1, 2, 1)]


# ---------------------------------------------------------------------------
# Yin et al.'s identity: E[rejections] = E[sum of TV over verified positions]


def expected_verified(G, a, T):
    """E[verified positions among T] for the sequence shape (1,) * G with acceptance a: a chain over the depth
    d = 0..G of the next position (d = G: the bonus position, unverified)."""
    dist, ver = np.eye(G + 1)[0], 0.0
    for _ in range(T):
        ver += dist[:G].sum()
        nxt = np.zeros(G + 1)
        nxt[0] = dist[:G].sum() * (1 - a) + dist[G]
        nxt[1:] = dist[:G] * a
        dist = nxt
    return ver


def test_rejection_identity_on_the_fixed_tree():
    # TV(p, q) = 0.2 at every node: the TV summed over T = 5 positions is 1.0; a verified position rejects
    # w.p. 0.2; calls of two drafted tokens leave the position after two accepts unverified (a bonus)
    n, T = 4000, 5
    ev = expected_verified(2, 0.8, T)
    assert expected_verified(2, 0.8, 3) == pytest.approx(3 - 0.8 * 0.8)  # only position 2 can be a bonus
    ri = rejection_identity(jax.random.key(9), fixed_law(p), Swap(), (1, 1), T=T, runs=n)
    assert ri.rejections.n == ri.tv_verified.n == ri.tv_all.n == ri.difference.n == n
    assert ri.tv_all.mean == pytest.approx(0.2 * T, rel=1e-5) and ri.tv_all.se < 1e-5
    assert abs(ri.rejections.mean - 0.2 * ev) <= 4 * ri.rejections.se
    assert abs(ri.tv_verified.mean - 0.2 * ev) <= 4 * ri.tv_verified.se
    assert abs(ri.difference.mean) <= 4 * ri.difference.se


# ---------------------------------------------------------------------------
# exponential races


def race_joint(p, q):
    """J[x, r] = P(the race's winner is x and its rank in the drafter's order is r), exactly."""
    V = len(p)
    J = np.zeros((V, V))
    for x in range(V):
        if p[x] == 0:
            continue
        a = {y: p[y] / p[x] for y in range(V) if y != x}  # y loses the target's race: E_y > a_y e
        b = {y: q[y] / q[x] if q[x] > 0 else (math.inf if q[y] > 0 else 0.0) for y in a}  # y ahead: E_y < b_y e
        for n in range(V):
            for S in itertools.combinations(a, n):
                if any(b[y] <= a[y] for y in S):
                    continue
                base = 1.0 + sum(max(a[y], b[y]) for y in a if y not in S)
                for signs in itertools.product((0, 1), repeat=n):  # (e^{-a e} - e^{-b e}) expanded
                    rate = base + sum(b[y] if s else a[y] for y, s in zip(S, signs, strict=True))
                    if math.isfinite(rate):
                        J[x, n] += (-1) ** sum(signs) / rate
    return J


B_P = np.array([0.8, 0.2, 0.0])  # state B: fixed 0.8/0.2, padded to V = 3
LAWS = (p, B_P)  # states A = 0, B = 1
TV = (0.5, 0.8)  # TV(p, reversed p): (0.5 + 0 + 0.5) / 2 and (0.8 + 0 + 0.8) / 2


@functools.cache
def markov():
    """The two-state law, built on first use: no JAX array may exist at import (mutmut forks after collection)."""
    return markov_law(
        {
            "states": {"A": "fixed:probs=0.6/0.3/0.1", "B": "fixed:probs=0.8/0.2"},
            "initial": {"A": 0.5, "B": 0.5},
            "kernel": {"A": [[0, 1], [1, 0]], "B": [[1, 0]]},
        }
    )


PATHS = [(0, 0), (1,), (0,)]  # R-paths, not in breadth-first order


def next_state(s, token):
    return np.where((s == 0) & (token == 0), 1, 0)


def root_states(key, runs):
    """The root's state of tree n: the law's initial draw with the key fold_in(tree key n, 1)."""
    trees = jax.random.fold_in(key, int(Stream.TREES))
    n = jnp.arange(runs, dtype=jnp.uint32)
    return np.asarray(jax.vmap(lambda i: markov().init_state(jax.random.fold_in(jax.random.fold_in(trees, i), 1)))(n))


def test_race_joint_law_by_hand():
    J = race_joint(p, q)
    np.testing.assert_allclose(J.sum(axis=1), p, rtol=1e-12)  # the winner follows p
    # winner 2 (p = 0.1) is first in q's order whenever it wins (q_2 = 0.6 is the largest rate ratio):
    # P(x = 2, R = 0) = 0.1; winner 0 ahead of both: int e^{-e} e^{-3e} e^{-6e} de = 1/10
    np.testing.assert_allclose(J[2], [0.1, 0, 0], atol=1e-12)
    assert J[0, 0] == pytest.approx(0.1, rel=1e-12)
    JB = race_joint(B_P, B_P[::-1])
    np.testing.assert_allclose(JB[0], [0, 0, 0.8], atol=1e-12)  # q(0) = 0: every token with q > 0 is ahead
    # winner 1 first in q's order: E_1 / 0.2 below E_0 / 0.8 and E_2 / 0.8, int e^{-e} e^{-4e} e^{-4e} de
    assert JB[1, 0] == pytest.approx(1 / 9, rel=1e-12)


def test_race_rank_law_is_the_law_at_the_roots():
    # roots are A or B with probability 1/2: pi = (pi_A + pi_B) / 2 = (0.256, 0.181, 0.563); at depth 1 the
    # state is A with probability 0.7, (0.313, 0.218, 0.469)
    pi, H, se = race_rank_law(jax.random.key(4), markov(), Reverse())  # the default 20000 roots
    n = 20000
    exact = (race_joint(p, q).sum(axis=0) + race_joint(B_P, B_P[::-1]).sum(axis=0)) / 2
    assert pi.shape == (3,)
    np.testing.assert_allclose(pi * n, np.round(pi * n), atol=1e-6)  # frequencies over n roots
    for r in range(3):
        assert within(pi[r], exact[r], n), r
    h = -np.sum(exact * np.log(exact))
    v = np.sum(exact * np.log(exact) ** 2) - h**2  # Var[log pi(R)]
    assert abs(H - h) <= 4 * math.sqrt(v / n)
    # the plug-in entropy of the returned frequencies, and the sample SD of log pi(R) over sqrt(n)
    assert H == pytest.approx(-np.sum(pi * np.log(pi)), rel=1e-9)
    v_hat = np.sum(pi * np.log(pi) ** 2) - np.sum(pi * np.log(pi)) ** 2
    assert se == pytest.approx(math.sqrt(v_hat / (n - 1)), rel=1e-6)


def test_race_rank_law_of_an_exact_drafter():
    # q = p: the clocks order both races alike, the target's winner is the drafter's first: R = 0 always
    pi, H, se = race_rank_law(jax.random.key(4), fixed_law(p), "exact", samples=64)
    np.testing.assert_array_equal(pi, [1.0, 0.0, 0.0])
    assert H == 0.0 and se == 0.0 and kobus_bound(3, 4, H) == math.inf


def check_cells(token, R, J, n, what):
    for x in range(3):
        for r in range(3):
            assert within(np.mean((token == x) & (R == r)), J[x, r], n), (what, x, r)


def test_race_on_the_two_state_tree():
    n, key = 12000, jax.random.key(3)
    J = [race_joint(law, law[::-1]) for law in LAWS]
    pi = [j.sum(axis=0) for j in J]
    s0 = root_states(key, n)
    out = race(key, markov(), Reverse(), PATHS, runs=n)  # run n on tree n
    assert out.token.shape == out.R.shape == (n, 3) and out.X.shape == (n,)
    for s in (0, 1):
        rows = s0 == s
        m = int(rows.sum())
        check_cells(out.token[rows, 0], out.R[rows, 0], J[s], m, ("root", s))
        # position 1: the state after the root's token, fresh clocks
        J1 = sum(LAWS[s][x] * J[int(next_state(s, x))] for x in range(3))
        check_cells(out.token[rows, 1], out.R[rows, 1], J1, m, ("depth 1", s))
        # X: how far the R-path stays in the tree {(0,), (1,), (0, 0)}
        x2 = sum(J[s][x, 0] * pi[int(next_state(s, x))][0] for x in range(3))
        for k, pk in enumerate((pi[s][2], 1 - pi[s][2] - x2, x2)):
            assert within(np.mean(out.X[rows] == k), pk, m), ("X", s, k)
    same = race(key, markov(), Reverse(), PATHS, runs=n, same_tree=True)  # every run on tree 0
    check_cells(same.token[:, 0], same.R[:, 0], J[s0[0]], n, "tree 0")


# ---------------------------------------------------------------------------
# generation on the two-state tree


def test_generate_on_the_two_state_tree():
    # shape (1, 2): one candidate at depth 0, two at depth 1, then the target's bonus token
    n, T, key = 3000, 8, jax.random.key(7)
    g = generate(key, markov(), Reverse(), (1, 2), T=T, runs=n)  # run n on tree n
    s = np.zeros((n, T), np.int64)
    s[:, 0] = root_states(key, n)
    for t in range(1, T):
        s[:, t] = next_state(s[:, t - 1], g.token[:, t - 1])
    np.testing.assert_allclose(g.tv, np.choose(s, TV), atol=1e-6)  # the node the output path reached
    d = np.zeros((n, T), np.int64)  # depth in the call: verified at 0 and 1, the bonus at 2
    for t in range(T):
        np.testing.assert_array_equal(g.verified[:, t], d[:, t] < 2)
        np.testing.assert_array_equal(g.event[:, t] == BONUS, d[:, t] == 2)
        if t + 1 < T:
            d[:, t + 1] = np.where(g.event[:, t] == ACCEPT, d[:, t] + 1, 0)
    assert np.any(g.event == REJECT) and np.any(g.event == BONUS)
    for st in (0, 1):
        lp = LAWS[st]
        for depth, m in ((0, 1), (1, 2)):  # A: 0.5 and 1 - 0.5 * 0.9; B: 0.2 and 0.2 (r_1 = (1, 0, 0), q_0 = 0)
            at = (s == st) & (d == depth)
            a = sum(accepted_token_and_count(m, lp, lp[::-1]).values())
            assert within(np.mean(g.event[at] == ACCEPT), a, int(at.sum())), (st, depth)
        assert sum(accepted_token_and_count(1, lp, lp[::-1]).values()) == pytest.approx(1 - TV[st])
        at = s == st
        for r in range(3):  # the output follows the target at every node
            assert within(np.mean(g.token[at] == r), lp[r], int(at.sum())), (st, r)
    same = generate(key, markov(), Reverse(), (1, 2), T=T, runs=n, same_tree=True)  # every run on tree 0
    np.testing.assert_allclose(same.tv[:, 0], TV[s[0, 0]], atol=1e-6)
