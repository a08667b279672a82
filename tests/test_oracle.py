"""The exact oracle: exact cases, tree structure, the batched kernel against the plain search, guards."""

from __future__ import annotations

import heapq
import json
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.random import key
from shared_laws import MIXED_MARKOV

from brwsim import laws, resolve_devices, tree, tree_keys
from brwsim.errors import BrwsimError
from brwsim.estimate import oracle_values
from brwsim.laws import fixed_law, markov_law, parse_law
from brwsim.oracle import frontier_shape, oracle_batch, oracle_kernel, oracle_one
from brwsim.testing import enumerate_fixed, reference_batch, root_rows, table_law, table_rows
from brwsim.tree import DraftTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
    values, _ = oracle_values(key(3), law, P, trees=2)
    exact = enumerate_fixed(probs, P)
    # float32 path sums: relative error a few 1e-7 per node at most
    np.testing.assert_allclose(values[0], exact, rtol=2e-5)
    np.testing.assert_array_equal(values[0], values[1])


def test_deterministic_zipf_matches_enumeration():
    V, s = 6, 1.3
    w = np.arange(1, V + 1, dtype=np.float64) ** -s
    probs = w / w.sum()
    values, _ = oracle_values(key(0), laws.parse_law(f"zipf:V={V},s={s}"), 200, trees=1)
    np.testing.assert_allclose(values[0], enumerate_fixed(probs, 200), rtol=2e-5)


def _oracle(law, P, n=4, seed=0):
    K = min(law.vocab, P)
    keys = tree_keys(key(seed), 0, n)
    return keys, jax.tree.map(np.asarray, oracle_batch(law, keys, P=P, K=K))


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


def test_markov_law_from_dict_and_states():
    cfg = {
        "states": {"a": "fixed:probs=0.9/0.1", "b": "fixed:probs=0.5/0.5"},
        "initial": "a",
        "kernel": {"a": [[1.0, 0.0], [0.0, 1.0]], "b": [[0.0, 1.0]]},
    }
    law = laws.markov_law(cfg)
    # state a: rank-0 child stays a, others go to b; b is absorbing.
    # Best node: 0.9 (a); then 0.81 (a,a) ... compare with enumeration of this small tree
    values, _ = oracle_values(key(0), law, 40, trees=2)

    heap = [(-0.9, 0), (-0.1, 1)]  # (neg prob, state) of root's children
    out = []
    probs = {0: [0.9, 0.1], 1: [0.5, 0.5]}
    while len(out) < 40:
        q, s = heapq.heappop(heap)
        out.append(-q)
        for r, p in enumerate(probs[s]):
            heapq.heappush(heap, (q * p, 0 if (s == 0 and r == 0) else 1))
    np.testing.assert_allclose(values[0], np.cumsum(out), rtol=2e-5)


def test_jnp_inf_padding_never_selected():
    law = laws.fixed_law([0.5, 0.5])
    values, _ = oracle_values(key(0), law, 6, trees=1)
    assert np.all(np.isfinite(values))
    assert values[0, -1] == pytest.approx(enumerate_fixed([0.5, 0.5], 6)[-1], rel=1e-6)
    assert jnp.isfinite(values).all()


def _same(a: DraftTree, b: DraftTree) -> bool:
    return all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in a._fields)


def _simple(law, keys, P, K):
    return jax.jit(jax.vmap(lambda k: oracle_one(law, k, P, K)))(keys)


def test_no_recompilation_on_second_call():
    law = parse_law("dirichlet:V=20,alpha=0.3")
    oracle_batch(law, tree_keys(key(0), 0, 8), 12, 12)
    n = oracle_kernel._cache_size()
    oracle_batch(law, tree_keys(key(1), 8, 8), 12, 12)  # new keys, same shapes
    oracle_batch(parse_law("dirichlet:V=20,alpha=0.3"), tree_keys(key(2), 0, 8), 12, 12)  # an equal law object
    assert oracle_kernel._cache_size() == n
    oracle_values(key(0), law, 12, 20, batch=8)
    n = oracle_kernel._cache_size()
    oracle_values(key(1), law, 12, 20, batch=8)
    assert oracle_kernel._cache_size() == n


@pytest.mark.parametrize(
    "spec,P",
    [("dirichlet:V=16,alpha=0.5", 1), ("dirichlet:V=16,alpha=0.5", 70), ("fixed:probs=0.5/0.25/0.25", 150)],
)
def test_matches_simple_oracle_all_fields(spec, P):
    """Same nodes, order and tie-breaks (the fixed law is all ties) as the plain oracle_one."""
    law = parse_law(spec)
    K = min(law.vocab, P)
    keys = tree_keys(key(3), 0, 9)
    assert _same(oracle_batch(law, keys, P, K), _simple(law, keys, P, K))


@pytest.mark.parametrize("P", [2, 23, 385])
def test_both_paths_match_simple_oracle(indexed_laws, P):
    """Indexed laws (a row index per node) and drawn ones (stored rows) give the plain oracle's trees,
    at frontier shapes of every size: the JAX kernel, and the default (native on CPU where it serves)."""
    for law in indexed_laws + [parse_law("dirichlet:V=6,alpha=0.5"), markov_law(MIXED_MARKOV)]:
        K = min(law.vocab, P)
        keys = tree_keys(key(11), 0, 5)
        simple = _simple(law, keys, P, K)
        assert _same(oracle_batch(law, keys, P, K, kernel="jax"), simple), (law.family, P)
        assert _same(oracle_batch(law, keys, P, K), simple), (law.family, P)


def test_frontier_shape_covers_every_slot():
    for S in [2, 3, 17, 65, 257, 1025, 4097, 65537]:
        A, G1, G0 = frontier_shape(S)
        assert A * G1 * G0 >= S and (A - 1) * G1 * G0 < S


def test_zero_probabilities_match_simple_oracle():
    law = fixed_law([0.7, 0.3, 0.0, 0.0])  # -inf entries; the tree is still infinite
    keys = tree_keys(key(0), 0, 4)
    assert _same(oracle_batch(law, keys, 40, 4), _simple(law, keys, 40, 4))


def test_kept_entries_never_truncate_silently():
    """With few kept entries per node, children past them are detected and recomputed exactly."""
    law = parse_law("dirichlet:V=64,alpha=0.2")
    P, K = 300, 64
    keys = tree_keys(key(5), 0, 12)
    full = _simple(law, keys, P, K)
    for keep in (2, 5, 16):
        assert _same(oracle_batch(law, keys, P, K, K_keep=keep), full)
    with pytest.raises(BrwsimError):
        oracle_batch(law, keys, P, K, K_keep=0)


def test_large_P_exact_against_heapq_reference():
    law = table_law(8, n_rows=256, alpha=0.5)
    P, K = 4096, 8
    keys = tree_keys(key(7), 0, 4)
    t = oracle_batch(law, keys, P, K)
    lp, par, rank = reference_batch(table_rows(law), root_rows(law, keys), P, K)
    assert np.array_equal(np.asarray(t.logP, np.float64), lp)
    assert np.array_equal(np.asarray(t.parent), par)
    assert np.array_equal(np.asarray(t.rank), rank)
    assert np.all(np.diff(lp, axis=1) <= 0)


def test_oracle_inside_jit_with_concrete_keys():
    """Called inside an outer jit with closed-over keys: same trees, and nothing traced is kept for later calls."""
    law = parse_law("dirichlet:V=64,alpha=0.2")
    keys = tree_keys(key(5), 0, 12)
    inner = jax.jit(lambda: oracle_batch(law, keys, 300, 64, K_keep=2).logP)()
    outer = oracle_batch(law, keys, 300, 64, K_keep=2).logP  # would fail on a kept tracer
    assert np.array_equal(np.asarray(inner), np.asarray(outer))


def test_bad_devices_is_one_line_error():
    for bad in ("x", 0, 10**6, []):
        with pytest.raises(BrwsimError) as e:
            resolve_devices(bad)
        assert "\n" not in str(e.value)


_SHARD_SCRIPT = r"""
import json, jax, numpy as np
from jax.random import key
from brwsim import resolve_devices, simulate, tree_keys
from brwsim.laws import parse_law
from brwsim.oracle import oracle_batch
assert len(jax.devices()) == 4, jax.devices()
law = parse_law("dirichlet:V=40,alpha=0.2")
keys = tree_keys(key(0), 0, 12)
a = oracle_batch(law, keys, 50, 40)
b = oracle_batch(law, keys, 50, 40, devices=resolve_devices("all"))
trees_equal = all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in a._fields)
one = simulate(law, P=[1, 8, 50], trees=37, seed=4, bounds=False).to_dict()
four = simulate(law, P=[1, 8, 50], trees=37, seed=4, bounds=False, devices="all").to_dict()
two = simulate(law, P=[1, 8, 50], trees=37, seed=4, bounds=False, devices=2, batch=6).to_dict()
d = jax.devices()  # buffers kept between calls follow the keys' device
t3 = oracle_batch(law, jax.device_put(keys, d[3]), 50, 40)
t1 = oracle_batch(law, jax.device_put(keys, d[1]), 50, 40)
moved = all(np.array_equal(np.asarray(t.logP), np.asarray(a.logP)) for t in (t3, t1))
print(json.dumps({"trees_equal": trees_equal, "sim_equal": one == four == two,
                  "sharded": len(b.logP.sharding.device_set), "moved": bool(moved)}))
"""


def test_sharded_equals_single_device(processes):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    rc, out, err = processes.run([sys.executable, "-c", _SHARD_SCRIPT], 600, env=env, cwd=ROOT)
    assert rc == 0, err[-2000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res == {"trees_equal": True, "sim_equal": True, "sharded": 4, "moved": True}


def test_one_tree_per_device_on_the_drawn_law_path():
    """A batch of one tree (run twice internally, see oracle_batch) gives the plain search's tree."""
    law = parse_law("dirichlet:V=12,alpha=0.4")
    keys = tree_keys(key(8), 0, 1)
    assert _same(oracle_batch(law, keys, 40, 12), _simple(law, keys, 40, 12))
