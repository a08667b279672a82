"""The core engine: laws, the exact oracle, the estimator (issue: core engine)."""

from __future__ import annotations

import heapq
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exact import enumerate_fixed
from hypothesis import given, settings
from hypothesis import strategies as st

import brwsim
from brwsim import laws, tree
from brwsim.estimate import oracle_values, tree_keys

# ---------------------------------------------------------------------------
# exact cases: a fixed law gives a deterministic tree, enumerated here in float64


FIXED_CASES = [
    [0.6, 0.3, 0.1],
    [0.9, 0.1],
    [0.5, 0.5],
    [0.25, 0.25, 0.25, 0.25],
    [0.7, 0.2, 0.05, 0.03, 0.02],
    [0.99, 0.01],
    [1.0],
    [0.4, 0.0, 0.6],
]


@pytest.mark.parametrize("probs", FIXED_CASES)
def test_fixed_law_matches_enumeration(probs):
    P = 500
    law = laws.fixed_law(probs)
    values, _ = oracle_values(law, P, trees=2, seed=3)
    exact = enumerate_fixed(probs, P)
    # float32 path sums: relative error a few 1e-7 per node at most
    np.testing.assert_allclose(values[0], exact, rtol=2e-5)
    np.testing.assert_array_equal(values[0], values[1])


def test_fixed_law_simulate_exact_values_and_zero_ci():
    res = brwsim.simulate("fixed:probs=0.6/0.3/0.1", P=[1, 64, 500], trees=3, seed=0)
    exact = enumerate_fixed([0.6, 0.3, 0.1], 500)
    for r in res.results:
        assert r.stat.mean == pytest.approx(exact[r.P - 1], rel=2e-5)
        assert r.stat.ci95 == 0.0


def test_deterministic_zipf_matches_enumeration():
    V, s = 6, 1.3
    w = np.arange(1, V + 1, dtype=np.float64) ** -s
    probs = w / w.sum()
    values, _ = oracle_values(laws.parse_law(f"zipf:V={V},s={s}"), 200, trees=1, seed=0)
    np.testing.assert_allclose(values[0], enumerate_fixed(probs, 200), rtol=2e-5)


# ---------------------------------------------------------------------------
# the oracle tree's structure, on random laws


def _oracle(law, P, n=4, seed=0):
    K = min(law.vocab, P)
    keys = tree_keys(seed, 0, n)
    return keys, jax.tree.map(np.asarray, tree.oracle_batch(law, keys, P=P, K=K))


def _law_strategy():
    return st.one_of(
        st.builds(
            lambda V, a: laws.Dirichlet(V=V, alpha=a),
            st.integers(1, 40),
            st.sampled_from([0.05, 0.3, 1.0, 4.0]),
        ),
        st.builds(lambda V, s: laws.LogitNormal(V=V, sigma=s), st.integers(2, 40), st.sampled_from([0.5, 2.0, 4.0])),
        st.builds(lambda s: laws.Zipf(V=30, s=1.1, s_sd=s), st.sampled_from([0.2, 0.6])),
    )


@settings(max_examples=12, deadline=None, derandomize=True)
@given(law=_law_strategy(), P=st.sampled_from([1, 3, 17, 40]), seed=st.integers(0, 3))
def test_oracle_structure(law, P, seed):
    _, t = _oracle(law, P, seed=seed)
    for b in range(t.logP.shape[0]):
        parent, depth, logP, rank = t.parent[b], t.depth[b], t.logP[b], t.rank[b]
        # exactly P nodes: the tree is infinite, so all P slots are used
        assert np.all(np.isfinite(logP)) or law.vocab == 1
        # prefix-closed: every parent was taken earlier; depths consistent
        for i in range(P):
            j = parent[i]
            assert -1 <= j < i
            assert depth[i] == (1 if j < 0 else depth[j] + 1)
            if j >= 0:
                assert logP[i] <= logP[j] + 1e-6
        # no node taken twice
        pairs = set(zip(parent.tolist(), rank.tolist(), strict=True))
        assert len(pairs) == P
        # non-increasing order: values are concave and non-decreasing in P
        inc = np.exp(logP.astype(np.float64))
        assert np.all(np.diff(inc) <= 1e-7)
        assert np.all(inc >= 0)


def _node_logp_eager(law, key, state, K):
    return np.asarray(law.node_logp(tree.dist_key(key), state, K), np.float64)


def _random_prefix_closed_value(law, tree_key, P, K, rng):
    """Grow a random prefix-closed tree of P nodes on the realised tree; its value."""
    s0, d0 = tree.root_node(law, tree_key, K)
    nodes = [(tree_key, int(s0), np.asarray(d0, np.float64), 0.0, set())]  # key, state, logp, logP, used ranks
    value = 0.0
    while len(nodes) < P + 1:
        pi = int(rng.integers(len(nodes)))
        key, state, d, lp, used = nodes[pi]
        free = [r for r in range(K) if r not in used and np.isfinite(d[r])]
        if not free:
            continue
        r = int(rng.choice(free[:4]))
        used.add(r)
        k, s, dn = tree.child_node(law, key, state, r, K)
        lpc = lp + d[r]
        value += math.exp(lpc)
        nodes.append((k, int(s), np.asarray(dn, np.float64), lpc, set()))
    return value


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    law=st.sampled_from(
        [laws.Dirichlet(V=8, alpha=0.5), laws.LogitNormal(V=12, sigma=2.0), laws.fixed_law([0.5, 0.3, 0.2])]
    ),
    P=st.sampled_from([2, 5, 9]),
    seed=st.integers(0, 100),
)
def test_oracle_beats_random_prefix_closed_trees(law, P, seed):
    keys, t = _oracle(law, P, n=1, seed=seed)
    best = float(np.exp(t.logP[0].astype(np.float64)).sum())
    rng = np.random.default_rng(seed)
    K = min(law.vocab, P)
    for _ in range(5):
        v = _random_prefix_closed_value(law, keys[0], P, K, rng)
        assert v <= best * (1 + 1e-5)


# ---------------------------------------------------------------------------
# the estimator


def test_check_mode_agrees_with_tree_value():
    """Sampled continuations and exact conditional values estimate the same E[X].

    Paired on the same trees: the difference accepted - value has mean 0, and
    its standard error gives the tolerance (4 se, fixed seed).
    """
    law = laws.Dirichlet(V=20, alpha=0.3)
    values, accepted = oracle_values(law, 12, trees=3000, seed=11, check=True)
    d = accepted - values[:, -1]
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert abs(d.mean()) < 4 * se
    assert se < 0.05  # the check is informative


def test_check_mode_on_deterministic_tree():
    law = laws.fixed_law([0.6, 0.3, 0.1])
    values, accepted = oracle_values(law, 30, trees=4000, seed=5, check=True)
    exact = enumerate_fixed([0.6, 0.3, 0.1], 30)[-1]
    se = accepted.std(ddof=1) / math.sqrt(accepted.size)
    assert abs(accepted.mean() - exact) < 4 * se


def test_same_seed_same_numbers_whatever_the_batch():
    law = laws.LogitNormal(V=50, sigma=2.0)
    a, _ = oracle_values(law, 16, trees=37, seed=9, batch=37)
    b, _ = oracle_values(law, 16, trees=37, seed=9, batch=5)
    c, _ = oracle_values(law, 16, trees=37, seed=9, batch=64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    r1 = brwsim.simulate("dirichlet:V=30,alpha=0.2", P=[4, 8], trees=20, seed=1, batch=3, bounds=False)
    r2 = brwsim.simulate("dirichlet:V=30,alpha=0.2", P=[4, 8], trees=20, seed=1, batch=20, bounds=False)
    assert r1.to_dict()["results"] == r2.to_dict()["results"]


def test_different_seeds_differ():
    a, _ = oracle_values(laws.Dirichlet(V=30, alpha=0.2), 8, trees=10, seed=0)
    b, _ = oracle_values(laws.Dirichlet(V=30, alpha=0.2), 8, trees=10, seed=1)
    assert not np.array_equal(a, b)


def test_nested_prefixes_equal_separate_runs():
    """T*_P from a run at P_max equals a run at P (best-first order)."""
    law = laws.Dirichlet(V=40, alpha=0.2)
    big, _ = oracle_values(law, 32, trees=8, seed=4)
    small, _ = oracle_values(law, 8, trees=8, seed=4)
    np.testing.assert_allclose(big[:, 7], small[:, 7], rtol=1e-6)


# ---------------------------------------------------------------------------
# laws


def test_dirichlet_sampler_moments():
    """The Gamma sampler behind Dirichlet: E[p_i] = 1/V, Var = (V-1)/(V^2 (V alpha + 1))."""
    V, alpha, n = 5, 0.1, 20000
    law = laws.Dirichlet(V=V, alpha=alpha)
    keys = tree_keys(0, 0, n)
    p = np.exp(np.asarray(jax.vmap(lambda k: law.full_logp(k, 0))(keys), np.float64))
    np.testing.assert_allclose(p.sum(1), 1, atol=1e-5)
    var = (V - 1) / (V * V * (V * alpha + 1))
    se = math.sqrt(var / n)
    assert np.all(np.abs(p.mean(0) - 1 / V) < 4.5 * se)
    # standard error of a sample variance: sqrt((m4 - var^2) / n), m4 the fourth central moment
    x = p[:, 0] - p[:, 0].mean()
    se_var = math.sqrt(max((x**4).mean() - x.var() ** 2, 0.0) / n)
    assert abs(p[:, 0].var() - var) < 4 * se_var


def test_node_logp_sorted_and_padded():
    law = laws.LogitNormal(V=5, sigma=1.0)
    d = np.asarray(law.node_logp(jax.random.key(0), 0, 8))
    assert np.all(np.diff(d[:5]) <= 0)
    assert np.all(np.isneginf(d[5:]))
    np.testing.assert_allclose(np.exp(d[:5]).sum(), 1, rtol=1e-5)


def test_large_vocabulary_runs():
    res = brwsim.simulate("logitnormal:V=32000,sigma=3", P=[1, 8], trees=4, seed=0, bounds=False)
    assert 0 < res[1].stat.mean <= res[8].stat.mean <= 8


def test_markov_law_from_dict_and_states():
    cfg = {
        "states": {"a": "fixed:probs=0.9/0.1", "b": "fixed:probs=0.5/0.5"},
        "initial": "a",
        "kernel": {"a": [[1.0, 0.0], [0.0, 1.0]], "b": [[0.0, 1.0]]},
    }
    law = laws.markov_law(cfg)
    # state a: rank-0 child stays a, others go to b; b is absorbing.
    # Best node: 0.9 (a); then 0.81 (a,a) ... compare with enumeration of this small tree
    values, _ = oracle_values(law, 40, trees=2, seed=0)

    heap = [(-0.9, 0), (-0.1, 1)]  # (neg prob, state) of root's children
    out = []
    probs = {0: [0.9, 0.1], 1: [0.5, 0.5]}
    while len(out) < 40:
        q, s = heapq.heappop(heap)
        out.append(-q)
        for r, p in enumerate(probs[s]):
            heapq.heappush(heap, (q * p, 0 if (s == 0 and r == 0) else 1))
    np.testing.assert_allclose(values[0], np.cumsum(out), rtol=2e-5)


def test_pool_law_roundtrip(tmp_path):
    rows = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    path = tmp_path / "pool.npz"
    np.savez(path, probs=rows)
    law = laws.parse_law(f"pool:path={path}")
    assert law.vocab == 3 and law.size == 2
    mu, _ = law.exact_moments()
    H = -(rows * np.log(rows)).sum(1).mean()
    assert mu == pytest.approx(H, rel=1e-5)
    res = brwsim.simulate(f"pool:path={path}", P=[1], trees=400, seed=0, bounds=False)
    # root's best child has prob 0.7 or 0.8 with equal chance
    assert abs(res[1].stat.mean - 0.75) < 4 * res[1].stat.se + 1e-9


def test_truncated_pool_refuses_too_large_P(tmp_path):
    path = tmp_path / "trunc.npz"
    np.savez(path, probs=np.array([[0.5, 0.3]]), entropy=np.array([1.2]), m2=np.array([2.0]))
    law = laws.parse_law(str(path))
    assert law.truncated
    brwsim.simulate(law, P=[2], trees=2, seed=0, bounds=False)
    with pytest.raises(brwsim.BrwsimError, match="entries per row"):
        brwsim.simulate(law, P=[3], trees=2, seed=0, bounds=False)


def test_spec_roundtrip():
    for spec in ["dirichlet:V=100,alpha=0.05", "logitnormal:V=7,sigma=3", "zipf:V=9,s=1.1,s_sd=0.2"]:
        assert laws.law_spec(laws.parse_law(spec)) == spec


def test_readme_python_example_runs(capsys):
    """The README's Python example is real: run it and check what it prints."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.split()[:2] == ["64", "4.2318"]


def test_dirichlet_closed_form_moments_match_sampling():
    law = laws.Dirichlet(V=50, alpha=0.2)
    mu, mu2 = law.exact_moments()
    keys = tree_keys(0, 0, 4000)
    h, m = jax.vmap(lambda k: laws.log_moments(law.full_logp(k, 0)))(keys)
    h, m = np.asarray(h, np.float64), np.asarray(m, np.float64)
    assert abs(h.mean() - mu) < 4 * h.std() / math.sqrt(h.size)
    assert abs(m.mean() - mu2) < 4 * m.std() / math.sqrt(m.size)


def test_jnp_inf_padding_never_selected():
    law = laws.fixed_law([0.5, 0.5])
    values, _ = oracle_values(law, 6, trees=1, seed=0)
    assert np.all(np.isfinite(values))
    assert values[0, -1] == pytest.approx(enumerate_fixed([0.5, 0.5], 6)[-1], rel=1e-6)
    assert jnp.isfinite(values).all()
