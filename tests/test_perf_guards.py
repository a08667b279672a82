"""Performance guards for the oracle (no timing): recompilation, sharding, exactness at large P."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from brwsim import tree as T
from brwsim.errors import BrwsimError
from brwsim.estimate import oracle_values, tree_keys
from brwsim.laws import fixed_law, markov_law, parse_law

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from reference_heapq import reference_batch, root_rows, table_law, table_rows  # noqa: E402


def _same(a: T.DraftTree, b: T.DraftTree) -> bool:
    return all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in a._fields)


def _simple(law, keys, P, K):
    return jax.jit(jax.vmap(lambda k: T.oracle_one(law, k, P, K)))(keys)


def test_no_recompilation_on_second_call():
    law = parse_law("dirichlet:V=20,alpha=0.3")
    T.oracle_batch(law, tree_keys(0, 0, 8), 12, 12)
    n = T._oracle_kernel._cache_size()
    T.oracle_batch(law, tree_keys(1, 8, 8), 12, 12)  # new keys, same shapes
    T.oracle_batch(parse_law("dirichlet:V=20,alpha=0.3"), tree_keys(2, 0, 8), 12, 12)  # an equal law object
    assert T._oracle_kernel._cache_size() == n
    oracle_values(law, 12, 20, seed=0, batch=8)
    n = T._oracle_kernel._cache_size()
    oracle_values(law, 12, 20, seed=1, batch=8)
    assert T._oracle_kernel._cache_size() == n


@pytest.mark.parametrize(
    "spec,P",
    [("dirichlet:V=16,alpha=0.5", 1), ("dirichlet:V=16,alpha=0.5", 70), ("fixed:probs=0.5/0.25/0.25", 150)],
)
def test_matches_simple_oracle_all_fields(spec, P):
    """Same nodes, order and tie-breaks (the fixed law is all ties) as the plain oracle_one."""
    law = parse_law(spec)
    K = min(law.vocab, P)
    keys = tree_keys(3, 0, 9)
    assert _same(T.oracle_batch(law, keys, P, K), _simple(law, keys, P, K))


_MIXED = {
    "states": {"a": "fixed:probs=0.9/0.1", "b": "dirichlet:V=2,alpha=1"},
    "initial": "a",
    "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
}


def _indexed_laws(tmp_path):
    np.savez(tmp_path / "pool.npz", probs=np.array([[0.7, 0.2, 0.1, 0.0], [0.4, 0.3, 0.2, 0.1], [0.25] * 4]))
    markov = {
        "states": {"a": "fixed:probs=0.9/0.1", "b": f"pool:path={tmp_path / 'pool.npz'}"},
        "initial": {"a": 0.5, "b": 0.5},
        "kernel": {"a": [[0.8, 0.2], [0.1, 0.9]], "b": [[0.3, 0.7]]},
    }
    return [
        parse_law("fixed:probs=0.5/0.3/0.2"),
        parse_law(f"pool:path={tmp_path / 'pool.npz'}"),
        markov_law(markov),
        table_law(6, n_rows=32, alpha=0.4),
    ]


def test_indexed_laws_rows_are_their_node_distributions(tmp_path):
    """node_logp(key, s, K) == row_table(K)[node_row(key, s)], bit for bit, for every indexed law."""
    for law in _indexed_laws(tmp_path):
        assert law.indexed
        K = law.vocab
        keys = jax.random.split(jax.random.key(1), 50)
        states = jax.random.randint(jax.random.key(2), (50,), 0, law.n_states)
        a = jax.vmap(lambda k, s, law=law, K=K: law.node_logp(k, s, K))(keys, states)
        b = law.row_table(K)[jax.vmap(law.node_row)(keys, states)]
        assert np.array_equal(np.asarray(a), np.asarray(b)), law.family
    assert not parse_law("dirichlet:V=5,alpha=1").indexed
    assert not markov_law(_MIXED).indexed


@pytest.mark.parametrize("P", [2, 23, 385])
def test_both_paths_match_simple_oracle(tmp_path, P):
    """Indexed laws (a row index per node) and drawn ones (stored rows) give the plain oracle's trees,
    at frontier shapes of every size."""
    for law in _indexed_laws(tmp_path) + [parse_law("dirichlet:V=6,alpha=0.5"), markov_law(_MIXED)]:
        K = min(law.vocab, P)
        keys = tree_keys(11, 0, 5)
        assert _same(T.oracle_batch(law, keys, P, K), _simple(law, keys, P, K)), (law.family, P)


def test_frontier_shape_covers_every_slot():
    for S in [2, 3, 17, 65, 257, 1025, 4097, 65537]:
        A, G1, G0 = T._frontier_shape(S)
        assert A * G1 * G0 >= S and (A - 1) * G1 * G0 < S


def test_zero_probabilities_match_simple_oracle():
    law = fixed_law([0.7, 0.3, 0.0, 0.0])  # -inf entries; the tree is still infinite
    keys = tree_keys(0, 0, 4)
    assert _same(T.oracle_batch(law, keys, 40, 4), _simple(law, keys, 40, 4))


def test_kept_entries_never_truncate_silently():
    """With few kept entries per node, children past them are detected and recomputed exactly."""
    law = parse_law("dirichlet:V=64,alpha=0.2")
    P, K = 300, 64
    keys = tree_keys(5, 0, 12)
    full = _simple(law, keys, P, K)
    for keep in (2, 5, 16):
        assert _same(T.oracle_batch(law, keys, P, K, K_keep=keep), full)
    with pytest.raises(BrwsimError):
        T.oracle_batch(law, keys, P, K, K_keep=0)


def test_large_P_exact_against_heapq_reference():
    law = table_law(8, n_rows=256, alpha=0.5)
    P, K = 4096, 8
    keys = tree_keys(7, 0, 4)
    t = T.oracle_batch(law, keys, P, K)
    lp, par, rank = reference_batch(table_rows(law), root_rows(law, keys), P, K)
    assert np.array_equal(np.asarray(t.logP, np.float64), lp)
    assert np.array_equal(np.asarray(t.parent), par)
    assert np.array_equal(np.asarray(t.rank), rank)
    assert np.all(np.diff(lp, axis=1) <= 0)


def test_oracle_inside_jit_with_concrete_keys():
    """Called inside an outer jit with closed-over keys: same trees, and nothing traced is kept for later calls."""
    law = parse_law("dirichlet:V=64,alpha=0.2")
    keys = tree_keys(5, 0, 12)
    inner = jax.jit(lambda: T.oracle_batch(law, keys, 300, 64, K_keep=2).logP)()
    outer = T.oracle_batch(law, keys, 300, 64, K_keep=2).logP  # would fail on a kept tracer
    assert np.array_equal(np.asarray(inner), np.asarray(outer))


def test_nested_unrolled_threefry_restores_the_rule():
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32 as tf

    from brwsim.lowering import unrolled_threefry

    rules = mlir._platform_specific_lowerings["cpu"]
    before = rules[tf.threefry2x32_p]
    with unrolled_threefry():
        with unrolled_threefry():
            pass
        assert rules[tf.threefry2x32_p] is not before
    assert rules[tf.threefry2x32_p] is before


def test_bad_devices_is_one_line_error():
    for bad in ("x", 0, 10**6, []):
        with pytest.raises(BrwsimError) as e:
            T.resolve_devices(bad)
        assert "\n" not in str(e.value)


_SHARD_SCRIPT = r"""
import json, jax, numpy as np
from brwsim import tree as T
from brwsim.estimate import simulate, tree_keys
from brwsim.laws import parse_law
assert len(jax.devices()) == 4, jax.devices()
law = parse_law("dirichlet:V=40,alpha=0.2")
keys = tree_keys(0, 0, 12)
a = T.oracle_batch(law, keys, 50, 40)
b = T.oracle_batch(law, keys, 50, 40, devices=T.resolve_devices("all"))
trees_equal = all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in a._fields)
one = simulate(law, P=[1, 8, 50], trees=37, seed=4, bounds=False).to_dict()
four = simulate(law, P=[1, 8, 50], trees=37, seed=4, bounds=False, devices="all").to_dict()
two = simulate(law, P=[1, 8, 50], trees=37, seed=4, bounds=False, devices=2, batch=6).to_dict()
d = jax.devices()  # buffers kept between calls follow the keys' device
t3 = T.oracle_batch(law, jax.device_put(keys, d[3]), 50, 40)
t1 = T.oracle_batch(law, jax.device_put(keys, d[1]), 50, 40)
moved = all(np.array_equal(np.asarray(t.logP), np.asarray(a.logP)) for t in (t3, t1))
print(json.dumps({"trees_equal": trees_equal, "sim_equal": one == four == two,
                  "sharded": len(b.logP.sharding.device_set), "moved": bool(moved)}))
"""


def test_sharded_equals_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", _SHARD_SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res == {"trees_equal": True, "sim_equal": True, "sharded": 4, "moved": True}


def test_unrolled_threefry_gives_the_same_bits():
    """The CPU lowering swap changes loop structure only: compilations under both agree bit for bit.

    (Each compilation needs a fresh function object: JAX caches lowerings by traced function.)
    """
    from brwsim.lowering import unrolled_threefry

    def make():
        def draws(k):
            k1, k2 = jax.random.split(jax.random.fold_in(k, 7))
            return (
                jax.random.gamma(k1, 0.3, (500,)),
                jax.random.randint(k2, (50,), 0, 1000),
                jax.random.categorical(k1, jax.numpy.log(jax.numpy.arange(1.0, 9.0)), shape=(50,)),
            )

        return jax.jit(draws)

    key = jax.random.key(3)
    rolled_f = make()
    rolled = rolled_f(key)
    with unrolled_threefry():
        unrolled_f = make()
        unrolled = unrolled_f(key)
    # the swap takes effect: the rolled CPU lowering has a while loop per threefry call, the unrolled none
    n_rolled = rolled_f.lower(key).as_text().count("stablehlo.while")
    n_unrolled = unrolled_f.lower(key).as_text().count("stablehlo.while")
    assert n_unrolled < n_rolled, (n_unrolled, n_rolled)
    for a, b in zip(rolled, unrolled, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
