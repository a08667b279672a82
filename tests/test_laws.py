"""Laws: SPEC parsing, samplers, moments in closed form, the indexed-law contract."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.random import key
from shared_laws import MIXED_MARKOV

import brwsim
from brwsim import entropy_moments, laws, tree_keys
from brwsim.laws import markov_law, parse_law


def test_dirichlet_sampler_moments():
    """The Gamma sampler behind Dirichlet: E[p_i] = 1/V, Var = (V-1)/(V^2 (V alpha + 1))."""
    V, alpha, n = 5, 0.1, 20000
    law = laws.Dirichlet(V=V, alpha=alpha)
    keys = tree_keys(key(0), 0, n)
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
        assert laws.parse_law(spec).spec() == spec


def test_dirichlet_closed_form_moments_match_sampling():
    law = laws.Dirichlet(V=50, alpha=0.2)
    mu, mu2 = law.exact_moments()
    keys = tree_keys(key(0), 0, 4000)
    h, m = jax.vmap(lambda k: entropy_moments(law.full_logp(k, 0)))(keys)
    h, m = np.asarray(h, np.float64), np.asarray(m, np.float64)
    assert abs(h.mean() - mu) < 4 * h.std() / math.sqrt(h.size)
    assert abs(m.mean() - mu2) < 4 * m.std() / math.sqrt(m.size)


def test_indexed_laws_rows_are_their_node_distributions(indexed_laws):
    """node_logp(key, s, K) == row_table(K)[node_row(key, s)], bit for bit, for every indexed law."""
    for law in indexed_laws:
        assert law.indexed
        K = law.vocab
        keys = jax.random.split(jax.random.key(1), 50)
        states = jax.random.randint(jax.random.key(2), (50,), 0, law.n_states)
        a = jax.vmap(lambda k, s, law=law, K=K: law.node_logp(k, s, K))(keys, states)
        b = law.row_table(K)[jax.vmap(law.node_row)(keys, states)]
        assert np.array_equal(np.asarray(a), np.asarray(b)), law.family
    assert not parse_law("dirichlet:V=5,alpha=1").indexed
    assert not markov_law(MIXED_MARKOV).indexed


def test_log_normalize_keeps_a_row_of_minus_infinity():
    """A row with no finite logit stays -inf (no NaN); the finite rows beside it are normalised as usual."""
    from brwsim.laws._base import log_normalize

    out = np.asarray(log_normalize(jnp.array([[-jnp.inf, -jnp.inf], [0.0, np.log(3.0)]], jnp.float32)))
    assert np.all(out[0] == -np.inf)
    np.testing.assert_allclose(np.exp(out[1]), [0.25, 0.75], rtol=1e-6)
