"""The oracle against trees known by hand and against brute force.

Fixed law p = (0.5, 0.3, 0.2): the nodes by path probability are [0] .5, [1] .3, [0,0] .25, [2] .2, [0,1] .15,
[1,0] .15, [0,0,0] .125, [0,2] .1, [2,0] .1 (ties to the earlier-taken parent), so T*_n has value .5, .8,
1.05, 1.25, 1.4, 1.55, 1.675, 1.775, 1.875; the same maxima come from trying every prefix-closed set of n paths.
Fixed law p = (1/2, 1/2): every node of depth d has P(v) = 2^-d, all ties: the oracle takes the nodes breadth
first, children of the earlier-taken parent first, rank 0 before rank 1. A drawn law (Dirichlet): the P nodes
of largest P(v) of the realised tree, found by expanding every node that can still enter (pruned search on the
law's own node distributions, float64 path sums), with some entries per node not kept so that trees are rerun.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brwsim._lowering import threefry_fold_in_words
from brwsim.errors import BrwsimError
from brwsim.laws import fixed_law, load_pool, markov_law, parse_law
from brwsim.oracle import (
    KERNELS,
    TABLE_BYTES,
    _batch,
    _frontier,
    _kernel,
    _native,
    _records,
    best_first_one,
    default_batch,
    frontier_shape,
    keep_entries,
    kernel_choice,
    oracle_batch,
    oracle_memory,
    oracle_one,
    tail_bound,
)
from brwsim.oracle._native import check_kernel, program, use_native
from brwsim.testing import TableLaw, stored_rows
from brwsim.tree import (
    DraftTree,
    child_node,
    child_of,
    dist_key,
    empty_tree,
    prefix_values,
    record_node,
    root_node,
    sample_accepted_batch,
    tree_value,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
L = math.log
P3 = [0.5, 0.3, 0.2]
# T*_9 of p = (0.5, 0.3, 0.2), by hand: (parent index, rank, depth, P(v)) in the order taken
HAND9 = [(-1, 0, 1, 0.5), (-1, 1, 1, 0.3), (0, 0, 2, 0.25), (-1, 2, 1, 0.2), (0, 1, 2, 0.15), (1, 0, 2, 0.15)]
HAND9 += [(2, 0, 3, 0.125), (0, 2, 2, 0.1), (3, 0, 2, 0.1)]


def fields(t, i=None):
    return {f: np.asarray(getattr(t, f) if i is None else getattr(t, f)[i]) for f in DraftTree._fields}


def best_prefix_closed(p, n) -> float:
    """max over every prefix-closed set of n rank paths of sum_v prod p[rank]: all of them, one by one."""
    sets, best = {frozenset()}, 0.0
    for _ in range(n):
        grown = set()
        for s in sets:
            for c in [(r,) for r in range(len(p))] + [q + (r,) for q in s for r in range(len(p))]:
                if c not in s:
                    grown.add(s | {c})
        sets = grown
        best = max(sum(math.prod(p[r] for r in path) for path in s) for s in sets)
    return best


def paths_of(t) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for par, r in zip(t["parent"].tolist(), t["rank"].tolist(), strict=True):
        out.append((out[par] if par >= 0 else ()) + (r,))
    return out


def test_brute_force_maxima_are_the_hand_values():
    want = [0.5, 0.8, 1.05, 1.25, 1.4, 1.55]
    assert [best_prefix_closed(P3, n) for n in range(1, 7)] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("how", ["reference", "kernel", "inside jit", "rbg keys", "reference rbg keys"])
def test_oracle_tree_by_hand(how):
    law, P = fixed_law(P3), 9
    keys = jax.random.split(jax.random.key(5, impl="rbg" if "rbg" in how else None), 2)
    if how.startswith("reference"):  # rbg: the search rewraps each node's four key words as an rbg key
        t = fields(jax.jit(lambda k: oracle_one(law, k, P, 3))(keys[1]))
    elif how in ("kernel", "rbg keys"):  # rbg: four key words, folded by jax.random.fold_in
        t = fields(oracle_batch(law, keys, P, 3, kernel="jax"), 1)
    else:  # traced keys: no buffers kept
        t = fields(jax.jit(lambda k: oracle_batch(law, k, P, 3, kernel="jax"))(keys), 1)
    parent, rank, depth, pv = (list(x) for x in zip(*HAND9, strict=True))
    np.testing.assert_array_equal(t["parent"], parent)
    np.testing.assert_array_equal(t["rank"], rank)
    np.testing.assert_array_equal(t["depth"], depth)
    np.testing.assert_allclose(np.exp(t["logP"]), pv, rtol=1e-6)
    np.testing.assert_array_equal(t["state"], 0)
    # key of each node: fold_in(parent key, 2 + rank), from the tree's own key
    kd = [jax.random.key_data(keys[1])]
    for i, (par, r) in enumerate(zip(parent, rank, strict=True)):
        parent_key = jax.random.wrap_key_data(kd[par + 1], impl=jax.random.key_impl(keys))
        kd.append(jax.random.key_data(jax.random.fold_in(parent_key, 2 + r)))
        np.testing.assert_array_equal(t["key"][i], kd[-1])
    # every prefix is the best tree of its size (brute force), and the values are the hand ones
    pre = np.asarray(prefix_values(DraftTree(**{f: jnp.asarray(v) for f, v in t.items()})), np.float64)
    np.testing.assert_allclose(pre[:6], [best_prefix_closed(P3, n) for n in range(1, 7)], rtol=1e-6)
    np.testing.assert_allclose(pre, np.cumsum(pv), rtol=1e-6)


def bfs_binary(n):
    paths, layer = [], [()]
    while len(paths) < n:
        layer = [q + (r,) for q in layer for r in (0, 1)]
        paths += layer
    return paths[:n]


@pytest.mark.parametrize("how,P", [("reference", 30), ("kernel", 254)])
def test_ties_go_breadth_first_to_the_earlier_parent(how, P):
    # p = (1/2, 1/2): all nodes of a depth tie; P = 254 fills depths 1..7 over 16 groups of 2 blocks of 8 slots
    law = fixed_law([0.5, 0.5])
    k = jax.random.key(1)
    if how == "reference":
        t = fields(jax.jit(lambda k: oracle_one(law, k, P, 2))(k))
    else:
        t = fields(oracle_batch(law, k[None], P, 2, kernel="jax"), 0)
    want = bfs_binary(P)
    assert paths_of(t) == want
    index = {q: i for i, q in enumerate(want)}
    np.testing.assert_array_equal(t["parent"], [index[q[:-1]] if len(q) > 1 else -1 for q in want])
    np.testing.assert_array_equal(t["depth"], [len(q) for q in want])
    np.testing.assert_allclose(t["logP"], [-len(q) * L(2) for q in want], rtol=1e-6)


def realised_best(law, tree_key, P, K):
    """The P nodes of largest P(v) of a realised tree: (float64 log P, rank path), largest first.

    Every node is expanded whose P(v) is not below the P-th best found so far (its descendants are no larger);
    node u with key k_u and state s_u has distribution ``law.node_logp(fold_in(k_u, 0), s_u, K)`` and child
    keys ``fold_in(k_u, 2 + rank)``; the root's state is ``law.init_state(fold_in(k_root, 1))``, the state of a
    child with key k ``law.child_state(fold_in(k, 1), s_u, rank)`` (0 throughout for an i.i.d. law).
    """

    def node(k, s):
        kids = jax.vmap(lambda r: jax.random.fold_in(k, 2 + r))(jnp.arange(K))
        states = jax.vmap(lambda kc, r: law.child_state(jax.random.fold_in(kc, 1), s, r))(kids, jnp.arange(K))
        return law.node_logp(jax.random.fold_in(k, 0), s, K), kids, states

    node = jax.jit(node)
    nodes, level = [], [((), tree_key, law.init_state(jax.random.fold_in(tree_key, 1)), 0.0)]
    for _ in range(P):
        nxt = []
        for path, k, s, lp in level:
            d, kids, states = node(k, s)
            d = np.asarray(d, np.float64)
            nxt += [(path + (r,), kids[r], states[r], lp + d[r]) for r in range(K) if np.isfinite(d[r])]
        nodes += [(x[3], x[0]) for x in nxt]
        cut = sorted(lp for lp, _ in nodes)[-P] if len(nodes) >= P else -np.inf
        level = [x for x in nxt if x[3] >= cut]
    return sorted(nodes, reverse=True)[:P]


DIRICHLET = "dirichlet:V=6,alpha=0.5"


@pytest.fixture(scope="module")
def drawn():
    law = parse_law(DIRICHLET)
    keys = jax.random.split(jax.random.key(11), 3)
    return law, keys, [realised_best(law, k, 5, 5) for k in keys]


def test_reference_oracle_on_drawn_and_markov_laws(drawn):
    law, keys, best = drawn
    for k, b in zip(keys, best, strict=True):
        t = fields(jax.jit(lambda k: oracle_one(law, k, 5, 5))(k))
        assert paths_of(t) == [path for _, path in b]
        np.testing.assert_allclose(t["logP"], [lp for lp, _ in b], rtol=1e-5)
    # states a: (1/2, 1/2), b: (0.8, 0.2); a's rank-0 child in b, rank-1 child in a; b's children in a.
    # Best 4 nodes: (0) 1/2 [b], (1) 1/2 [a], (0, 0) 0.4 [a], (1, 0) 1/4 [b] (ties to the smaller rank)
    m = markov_law({"states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.8/0.2"}, "initial": "a",
                    "kernel": {"a": [[0.0, 1.0], [1.0, 0.0]], "b": [[1.0, 0.0]]}})  # fmt: skip
    t = fields(jax.jit(lambda k: oracle_one(m, k, 4, 2))(jax.random.key(2)))
    assert paths_of(t) == [(0,), (1,), (0, 0), (1, 0)]
    np.testing.assert_allclose(np.exp(t["logP"]), [0.5, 0.5, 0.4, 0.25], rtol=1e-6)
    np.testing.assert_array_equal(t["state"], [1, 0, 0, 1])


def test_reference_oracle_follows_a_chain_from_the_initial_state():
    # states a: (1/2, 1/2), b: (0.9, 0.1); every child stays in its parent's state; the root starts in b (state 1).
    # So every node is in b and T*_4 is the chain of rank-0 children, P(v) = 0.9^depth (the next node, (1,), has
    # 0.1 < 0.9^4): each node is the previous one's child, and its distribution is b's.
    m = markov_law({"states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.9/0.1"}, "initial": "b",
                    "kernel": {"a": [[1.0, 0.0]], "b": [[0.0, 1.0]]}})  # fmt: skip
    t = fields(jax.jit(lambda k: oracle_one(m, k, 4, 2))(jax.random.key(3)))
    assert paths_of(t) == [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)]
    np.testing.assert_array_equal(t["parent"], [-1, 0, 1, 2])
    np.testing.assert_array_equal(t["depth"], [1, 2, 3, 4])
    np.testing.assert_array_equal(t["state"], 1)
    np.testing.assert_allclose(np.exp(t["logP"]), [0.9, 0.81, 0.729, 0.6561], rtol=1e-6)


def test_best_first_search_takes_no_node_of_score_minus_infinity():
    # states a: (1/2, 1/2) (the root's), b: (0.8, 0.2); a's rank-0 child is in b. Score table: in a, (1, 0) (log 0,
    # -inf); in b, nothing (-inf, -inf). Only the root's rank-0 child has a finite score, so T_3 is that one node
    # (P(v) = 1/2, state b) and two unused slots (logP -inf), though the target gives every other node P(v) > 0.
    m = markov_law({"states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.8/0.2"}, "initial": "a",
                    "kernel": {"a": [[0.0, 1.0], [1.0, 0.0]], "b": [[1.0, 0.0]]}})  # fmt: skip

    def table(k, s):
        q = jnp.where(s == 0, jnp.float32([0.0, -np.inf]), jnp.float32([-np.inf, -np.inf]))
        return q, m.node_logp(dist_key(k), s, 2), jnp.arange(2, dtype=jnp.int32)

    t = fields(jax.jit(lambda k: best_first_one(m, k, 3, 2, table))(jax.random.key(2)))
    np.testing.assert_allclose(np.exp(t["logP"]), [0.5, 0.0, 0.0], rtol=1e-6)
    assert t["logP"][1] == t["logP"][2] == -np.inf
    assert (t["parent"][0], t["rank"][0], t["depth"][0], t["state"][0]) == (-1, 0, 1, 1)


def test_kernel_on_a_markov_law_of_drawn_laws():
    # two drawn states (Dirichlet, alpha 0.5 and 5), each child's state drawn 1/2 : 1/2 from its own key: the
    # kernel's trees are the P nodes of largest P(v) of the realised trees, states followed node by node
    m = markov_law({"states": {"a": DIRICHLET, "b": "dirichlet:V=6,alpha=5"}, "initial": {"a": 0.5, "b": 0.5},
                    "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]}})  # fmt: skip
    keys = jax.random.split(jax.random.key(12), 2)
    t = oracle_batch(m, keys, 5, 5, kernel="jax")
    for i, k in enumerate(keys):
        best = realised_best(m, k, 5, 5)
        assert paths_of(fields(t, i)) == [path for _, path in best]
        np.testing.assert_allclose(np.asarray(t.logP[i]), [lp for lp, _ in best], rtol=1e-5)


def test_kernel_on_indexed_laws_whose_rows_vary(tmp_path):
    # indexed laws whose nodes hold different rows: a pool law (each node's row drawn from its key, rows without
    # ties) and a Markov law of fixed laws whose root starts in its second state (row 1). The JAX kernel's trees
    # are the P nodes of largest P(v) of the realised trees (realised_best: float64 path sums, rows read through
    # law.node_logp). A row repeated along a path makes ties ((0, 1) and (1, 0)), so the node sets are compared,
    # with no tie across the P-th place, and the values in order
    np.savez(tmp_path / "pool.npz", probs=np.array([[0.61, 0.27, 0.12], [0.47, 0.34, 0.19]]))
    pool, keys = load_pool(str(tmp_path / "pool.npz")), jax.random.split(jax.random.key(13), 3)
    t = oracle_batch(pool, keys, 6, 3, kernel="jax")
    firsts = set()
    for i, k in enumerate(keys):
        best = realised_best(pool, k, 7, 3)
        assert best[5][0] > best[6][0] + 1e-6
        best = best[:6]
        assert set(paths_of(fields(t, i))) == {path for _, path in best}
        np.testing.assert_allclose(np.asarray(t.logP[i]), [lp for lp, _ in best], rtol=1e-5)
        firsts.add(round(math.exp(best[0][0]), 6))
    assert firsts == {0.61, 0.47}  # roots in both rows
    # the chain of rank-0 children in state b: P(v) = 0.9^depth (the next node, (1,), has 0.1 < 0.9^4)
    m = markov_law({"states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.9/0.1"}, "initial": "b",
                    "kernel": {"a": [[1.0, 0.0]], "b": [[0.0, 1.0]]}})  # fmt: skip
    t = fields(oracle_batch(m, jax.random.split(jax.random.key(3), 2), 4, 2, kernel="jax"), 1)
    assert paths_of(t) == [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)]
    np.testing.assert_array_equal(t["state"], 1)
    np.testing.assert_allclose(np.exp(t["logP"]), [0.9, 0.81, 0.729, 0.6561], rtol=1e-6)


def test_rerun_when_a_left_out_child_passes_only_the_last_node():
    # p = (0.5, 0.3, 0.2) stored as a drawn law, 2 entries kept a node, P = 4: the first call's tree is the best 4
    # nodes of ranks 0 and 1, (0) .5, (1) .3, (0, 0) .25, (0, 1) .15; the root's rank-1 child was taken, so its
    # left-out children are bounded by min(p[1], 1 - .8 + slack) = .2 >= .15, the last node only: that tree is
    # rerun with every entry, and T*_4 takes (2) .2 instead of (0, 1)
    law = stored_rows(TableLaw(logp=jnp.log(jnp.float32([P3]))))
    t = fields(oracle_batch(law, jax.random.split(jax.random.key(5), 2), 4, 3, K_keep=2, kernel="jax"), 0)
    assert paths_of(t) == [(0,), (1,), (0, 0), (2,)]
    np.testing.assert_allclose(np.exp(t["logP"]), [0.5, 0.3, 0.25, 0.2], rtol=1e-6)


def test_kernel_on_a_drawn_law_inside_jit(drawn):
    # traced keys: the kernel makes its own buffers (records and the node table of each tree's entries), and keeps
    # all K entries whatever K_keep asks (a traced call cannot rerun a tree)
    law, keys, best = drawn
    t = jax.jit(lambda k: oracle_batch(law, k, 5, 5, K_keep=1, kernel="jax"))(keys)
    for i, b in enumerate(best):
        assert paths_of(fields(t, i)) == [path for _, path in b]
        np.testing.assert_allclose(np.asarray(t.logP[i]), [lp for lp, _ in b], rtol=1e-5)


def test_indexed_law_keeps_every_entry_and_a_chain_fills_the_frontier():
    # an indexed law's node keeps a row index, so K_keep leaves nothing out: T*_9 of (0.5, 0.3, 0.2) by hand.
    # p = (0.9, 0.1): T*_9 is the chain of rank-0 children (0.9^9 = 0.387 > 0.1), each node the previous one's
    # child, so the 9th node is the child of the 8th, whose candidate sits in frontier slot 8 (past one block)
    keys = jax.random.split(jax.random.key(5), 2)
    t = fields(oracle_batch(fixed_law(P3), keys, 9, 3, K_keep=1, kernel="jax"), 1)
    np.testing.assert_array_equal(t["parent"], [x[0] for x in HAND9])
    np.testing.assert_allclose(np.exp(t["logP"]), [x[3] for x in HAND9], rtol=1e-6)
    t = fields(oracle_batch(fixed_law([0.9, 0.1]), keys, 9, 2, kernel="jax"), 0)
    np.testing.assert_array_equal(t["parent"], np.arange(-1, 8))
    np.testing.assert_allclose(np.exp(t["logP"]), 0.9 ** np.arange(1, 10), rtol=1e-6)


def test_auto_runs_the_native_kernel_on_the_laws_it_serves(monkeypatch):
    # auto (the default): a fixed law on this CPU device runs natively (where a compiler is found), a drawn law in JAX
    if not _native.available():
        pytest.skip("no C compiler here: auto runs the JAX kernel")
    calls, native = [], _native.run_native
    monkeypatch.setattr(_native, "run_native", lambda law, *a: calls.append(type(law).__name__) or native(law, *a))
    keys = jax.random.split(jax.random.key(5), 2)
    t = fields(oracle_batch(fixed_law(P3), keys, 9, 3), 1)
    np.testing.assert_allclose(np.exp(t["logP"]), [x[3] for x in HAND9], rtol=1e-6)
    oracle_batch(parse_law(DIRICHLET), keys, 5, 5)
    assert calls == ["Fixed"]


def test_drawn_law_with_entries_left_out_is_rerun_exactly(drawn):
    law, keys, best = drawn
    # the example needs the reruns: every tree takes some node's second child, which one kept entry misses
    assert all(max(max(path) for _, path in b) >= 1 for b in best)
    t = oracle_batch(law, keys, 5, 5, K_keep=1, kernel="jax")
    for i, b in enumerate(best):
        ti = fields(t, i)
        assert paths_of(ti) == [path for _, path in b]
        np.testing.assert_allclose(ti["logP"], [lp for lp, _ in b], rtol=1e-5)
        np.testing.assert_array_equal(ti["depth"], [len(path) for _, path in b])


def test_bound_on_the_children_left_out(drawn, monkeypatch):
    # 2 entries kept a node: the first call's trees are the best 5 nodes among ranks 0 and 1 (brute force with
    # K = 2). A node whose rank-1 child was taken has its kept children used up; any child it did not keep has
    # P(v) <= P(parent) min(p[1], 1 - p[0] - p[1] + slack), slack = 2e-6 + 2.4e-7 (V + 2) (tail_bound), and
    # `dropped` is the largest such bound of the tree (-inf if none), in logs.
    law, keys, _ = drawn
    seen, run = [], _batch._run
    monkeypatch.setattr(_batch, "_run", lambda *a, **kw: seen.append(run(*a, **kw)) or seen[-1])
    oracle_batch(law, keys, 5, 5, K_keep=2, kernel="jax")
    slack = 2e-6 + 2.4e-7 * (6 + 2)
    want = []
    for k in keys:
        lp = {path: x for x, path in realised_best(law, k, 5, 2)} | {(): 0.0}
        b = [lp[q[:-1]] + min(lp[q] - lp[q[:-1]], L(max(1 - sum(math.exp(lp[q[:-1] + (i,)] - lp[q[:-1]])
                                                                for i in (0, 1)), 0) + slack))
             for q in lp if q and q[-1] == 1]  # fmt: skip
        want.append(max(b, default=-np.inf))
    assert np.isfinite(want).sum() >= 2  # the example has bounds to check
    np.testing.assert_allclose(np.asarray(seen[0][1]), want, rtol=1e-5)


def test_rerun_when_a_left_out_child_ties_the_last_node():
    # A law that is not indexed (a Markov law with a drawn state b, never entered) whose every node has
    # p = (0.5, 0.25, 0.25), 2 entries kept: the first call finds (0) 1/2, (1) 1/4, (0, 0) 1/4, and bounds the
    # root's third child by min(0.25, 0.25 + slack) = 1/4, equal (in float32: log 1/4 = 2 log 1/2) to the last
    # node. The tie must be rerun: (2) 1/4 is the root's, taken before node (0), so T*_3 is (0), (1), (2).
    m = markov_law({"states": {"a": "fixed:probs=0.5/0.25/0.25", "b": "dirichlet:V=3,alpha=1"}, "initial": "a",
                    "kernel": {"a": [[1.0, 0.0]], "b": [[0.0, 1.0]]}})  # fmt: skip
    assert not m.indexed
    t = oracle_batch(m, jax.random.split(jax.random.key(0), 2), 3, 3, K_keep=2, kernel="jax")
    for i in range(2):
        assert paths_of(fields(t, i)) == [(0,), (1,), (2,)]
        np.testing.assert_allclose(np.exp(np.asarray(t.logP[i])), [0.5, 0.25, 0.25], rtol=1e-6)


def test_kernel_split_over_a_tuple_of_devices():
    # the path of a call over several devices, here the one CPU device: T*_9 of p = (0.5, 0.3, 0.2) by hand, and
    # its buffers kept under that tuple of devices
    _batch.clear_caches()
    devs, keys = (jax.devices()[0],), jax.random.split(jax.random.key(5), 2)
    tree, _ = _batch._run(fixed_law(P3), keys, 3, P=9, K=3, shape=frontier_shape(10), devs=devs, traced=False)
    t = fields(tree, 1)
    assert paths_of(t) == paths_of({"parent": np.int32([x[0] for x in HAND9]), "rank": np.int32([x[1] for x in HAND9])})
    np.testing.assert_allclose(np.exp(t["logP"]), [x[3] for x in HAND9], rtol=1e-6)
    assert [tag[-1] for tag in _batch._SCRATCH] == [devs]
    _batch.clear_caches()


_DEVICES_SCRIPT = r"""
import json, sys, jax, numpy as np
from brwsim.laws import parse_law
from brwsim.oracle import oracle_batch
d, keys = jax.devices(), jax.random.split(jax.random.key(5), 4)
assert len(d) == 4, d
out = {}
for spec, n, B, K, kw in json.loads(sys.argv[1]):
    t = oracle_batch(parse_law(spec), keys[:B], 9, K, devices=d[:n], **kw)
    words = {f: np.asarray(getattr(t, f)).view(np.int32).tolist() for f in t._fields}  # logP's bits as int32
    out[f"{spec} {n} {B}"] = [[s.data.shape[0] for s in t.logP.addressable_shards], words]  # rows on each device
print(json.dumps(out))
"""


def test_trees_split_over_devices_are_this_process_trees(processes):
    # a process with four host devices splits trees over 2 or 4 of them: they come back split over those devices
    # and are this process's trees (one device) bit for bit. A drawn law with one tree per device (run twice), and
    # with entries left out (reruns in batches that split evenly), two trees a device, and the native kernel (where a
    # compiler is found)
    cases = [(DIRICHLET, 2, 2, 5, {"kernel": "jax"}), (DIRICHLET, 4, 4, 5, {"kernel": "jax", "K_keep": 2})]
    cases.append((DIRICHLET, 2, 4, 5, {"kernel": "jax", "K_keep": 2}))  # two trees a device: run once, split
    if _native.available():
        cases.append(("fixed:probs=0.5/0.3/0.2", 2, 2, 3, {"kernel": "native"}))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    argv = [sys.executable, "-c", _DEVICES_SCRIPT, json.dumps(cases)]
    rc, out, err = processes.run(argv, 300, env=env, cwd=ROOT)
    assert rc == 0, err[-2000:]
    got = json.loads(out.strip().splitlines()[-1])
    keys = jax.random.split(jax.random.key(5), 4)
    for spec, n, B, K, kw in cases:
        t = oracle_batch(parse_law(spec), keys[:B], 9, K, **kw)
        rows, words = got[f"{spec} {n} {B}"]
        assert rows == [B // n] * n, (spec, n, rows)  # split: B / n trees on each of the n devices
        for f in DraftTree._fields:
            np.testing.assert_array_equal(np.asarray(words[f]), np.asarray(getattr(t, f)).view(np.int32), f)


def test_drawn_law_one_tree(drawn, monkeypatch):
    # one tree per device (here one tree, one device): a drawn law's tree is run twice in one kernel call (XLA
    # copies the node table at every step otherwise) and one copy kept; reruns with 4 entries kept do the same.
    # Two trees, or an indexed law, run as they are.
    law, keys, best = drawn
    sizes, run = [], _batch._run
    monkeypatch.setattr(
        _batch, "_run", lambda law, k, Kc, **kw: sizes.append((k.shape[0], Kc)) or run(law, k, Kc, **kw)
    )
    t = oracle_batch(law, keys[2:], 5, 5, K_keep=4, kernel="jax")  # run twice, one copy kept
    assert sizes[0] == (2, 4) and all(n == 2 for n, _ in sizes)
    sizes.clear()
    oracle_batch(law, keys[:2], 5, 5, kernel="jax")
    oracle_batch(fixed_law(P3), keys[:1], 5, 3, kernel="jax")
    assert sizes == [(2, 5), (1, 3)]
    assert t.logP.shape == (1, 5) and t.key.shape == (1, 5, 2)
    one = fields(t, 0)
    assert paths_of(one) == [path for _, path in best[2]]
    np.testing.assert_allclose(one["logP"], [lp for lp, _ in best[2]], rtol=1e-5)


def test_rerun_that_cannot_fit_is_one_line_error(drawn, monkeypatch):
    law, keys, _ = drawn
    monkeypatch.setattr(_batch, "available_memory", lambda: 1000)
    with pytest.raises(BrwsimError, match=r"P=5: to stay exact, some nodes of these trees need their 4 largest"):
        oracle_batch(law, keys, 5, 5, K_keep=1, kernel="jax")


def test_reruns_go_in_batches_of_no_more_memory(monkeypatch):
    # _rerun with a stand-in kernel that records its calls and answers a one-field tree = the tree's key (keys 10, 20,
    # ...): the trees `bad` are rerun keeping `wider` entries, each batch has b trees, b a multiple of the devices
    # n and at least 2 n, b wider <= B Kc (the first call's node tables), and 0.8 of the available memory holding
    # b trees of oracle_memory_at(law, 5, 4) = (76 + 4 * 4 + 4) * 6 + 16 * 6 = 672 bytes; the last batch is padded
    # with the first bad tree, whose copy is not kept. Every other tree is left as it was (zeros).
    law, calls = parse_law(DIRICHLET), []

    def run(keys, wider):
        calls.append((np.asarray(keys).tolist(), wider))
        return (keys,), keys.astype(jnp.float32)  # a one-field tree: _rerun maps over any pytree

    def rerun(B, Kc, bad, n_dev, avail):
        calls.clear()
        monkeypatch.setattr(_batch, "available_memory", lambda: avail)
        keys = 10 * jnp.arange(1, B + 1, dtype=jnp.int32)
        (t,), d = _batch._rerun(
            run, law, keys, (jnp.zeros(B, jnp.int32),), jnp.zeros(B), np.array(bad), 5, Kc, 4, n_dev
        )
        want = np.zeros(B, np.int64)
        want[bad] = 10 * (np.array(bad) + 1)
        np.testing.assert_array_equal(np.asarray(t), want)
        np.testing.assert_array_equal(np.asarray(d), want)
        assert all(w == 4 for _, w in calls)
        return [k for k, _ in calls]

    # memory unknown: b = 12 * 1 // 4 = 3; five trees, padded to six with tree 0 (key 10)
    assert rerun(12, 1, [0, 2, 5, 7, 11], 1, None) == [[10, 30, 60], [80, 120, 10]]
    # 2 devices, 3 entries kept: b = 12 * 3 // 4 = 9 -> 8 (a multiple of 2), but 0.8 * 6000 = 4800 bytes hold 7
    # trees (7 * 672 = 4704), so b = 6; seven trees, padded to twelve
    assert rerun(12, 3, [1, 3, 4, 8, 9, 10, 11], 2, 6000) == [[20, 40, 50, 90, 100, 110], [120] + [20] * 5]
    # b = 12 // 4 = 3, but 0.8 * 1680 = 1344 bytes hold exactly 2 trees, the least allowed: b = 2, no error
    assert rerun(12, 1, [0, 1, 2], 1, 1680) == [[10, 20], [30, 10]]
    # 2 trees of 96 * 14322915 + 160 = 1.375e9 bytes (dirichlet V = 10, P = 14322914) do not fit 0.8 * 2.375e9
    # bytes: a one-line error, sizes to three digits (round half to even: 1.375 -> 1.38, 2.375 -> 2.38)
    big = parse_law("dirichlet:V=10,alpha=0.5")
    assert _batch.oracle_memory_at(big, 14_322_914, 4) == 1_375_000_000
    monkeypatch.setattr(_batch, "available_memory", lambda: 2_375_000_000)
    calls.clear()
    msg = "P=14322914: to stay exact, some nodes of these trees need their 4 largest entries, 1.38 GB a tree, "
    with pytest.raises(BrwsimError, match=re.escape(msg + "more than the 2.38 GB available allow; lower P")):
        _batch._rerun(run, big, jnp.arange(4), None, None, np.array([0]), 14_322_914, 1, 4, 1)
    assert not calls


@pytest.mark.parametrize("P,K", [(0, 3), (3, 0)])
def test_oracle_input_errors(P, K):
    with pytest.raises(BrwsimError, match=f"oracle needs P >= 1 and K >= 1, got P={P}, K={K}"):
        oracle_batch(fixed_law(P3), jax.random.split(jax.random.key(0), 2), P, K, kernel="jax")


def test_keep_entries_by_hand():
    assert keep_entries(10, 8, K_keep=3) == 3 and keep_entries(10, 8, K_keep=99) == 8
    with pytest.raises(BrwsimError, match="K_keep must be >= 1, got 0"):
        keep_entries(10, 8, K_keep=0)
    assert keep_entries(100, 5000) == 5000  # 101 rows of 5000 float32: 2 MB, under the cap
    # 1001 rows of 4 bytes: 16 MiB fits 4190 entries a row; kept: the largest power of two, 4096
    assert TABLE_BYTES == 16 * 2**20 and keep_entries(1000, 5000) == 4096
    assert keep_entries(2**20, 5000) == 16  # fits 3 a row: never fewer than 16
    # 1000 rows: 16 MiB / 4000 bytes = 4194.3, so 4194 entries fit and 4195 do not
    assert keep_entries(999, 4194) == 4194 and keep_entries(999, 4195) == 4096


def test_memory_and_batch_by_hand():
    law = fixed_law(P3)  # indexed: 76 bytes a slot, 16 V bytes of node draw
    assert oracle_memory(law, 9) == 76 * 10 + 48
    assert default_batch(law, 16) == 4096  # the cap
    hot = 76 * 100_001 + 48  # P = 10^5: 64 MiB of records hold 8 trees
    assert default_batch(law, 100_000) == 64 * 2**20 // hot == 8
    drawn_law = parse_law(DIRICHLET)  # a drawn law keeps 4 Kc bytes a slot more, 4 more when Kc < K
    assert oracle_memory(drawn_law, 9) == (76 + 4 * 6) * 10 + 16 * 6
    assert default_batch(drawn_law, 100_000, hot=2**40, budget=10 * oracle_memory(drawn_law, 100_000)) == 10
    assert _batch.oracle_memory_at(drawn_law, 9, 2, 6) == (76 + 8 + 4) * 10 + 96
    # K = 3 given: all 3 entries kept, no bound bytes (a K taken from the vocabulary would keep 6 or add a bound)
    assert oracle_memory(drawn_law, 9, 3) == (76 + 4 * 3) * 10 + 16 * 6
    # P = 10^5, K = 1000: 16 MiB of table keeps 41 entries a row, so 32 (a power of two) and 4 bytes of bound
    assert oracle_memory(parse_law("dirichlet:V=1000,alpha=0.5"), 100_000) == (76 + 4 * 32 + 4) * 100_001 + 16_000
    # P = 9 on p = (0.5, 0.3, 0.2): 808 bytes of records a tree (76 a slot, 16 a token); hot bytes give the batch
    for hot, want in [(808 * 5, 5), (808 * 6 - 1, 5), (808 * 6, 6), (100, 1)]:
        assert default_batch(law, 9, hot=hot, budget=2**40) == want, hot


def test_tail_bound_by_hand():
    d = jnp.log(jnp.float32([[0.5, 0.3], [0.45, 0.45]]))
    b = np.exp(np.asarray(tail_bound(d, 4), np.float64))
    # row 1: the rest sums to 0.2 < 0.3; row 2: each of the rest is at most 0.1 (sum), below 0.45
    assert 0.2 <= b[0] <= 0.2 + 1e-5 and 0.1 <= b[1] <= 0.1 + 1e-5
    b = np.exp(np.asarray(tail_bound(jnp.log(jnp.float32([[0.5, 0.5], [0.6, 0.2]])), 2), np.float64))
    assert 0 < b[0] <= 1e-5 and b[1] == pytest.approx(0.2, rel=1e-6)  # nothing left; the last kept entry
    # three kept, 0.25 left: each of the rest is at most the last kept entry, 0.05
    b = np.exp(np.asarray(tail_bound(jnp.log(jnp.float32([[0.4, 0.3, 0.05]])), 5), np.float64))
    assert b[0] == pytest.approx(0.05, rel=1e-6)
    # nothing left of 100 tokens: the margin still covers a user distribution's 1e-6 and the float32 rounding of a
    # sum of 100 terms (at most 100 x 6e-8), and stays small
    b = np.exp(np.asarray(tail_bound(jnp.log(jnp.float32([[0.5, 0.5]])), 100), np.float64))
    assert 1e-6 + 100 * 6e-8 <= b[0] <= 1e-4
    # one row (no batch axis) of all 100 tokens kept, 0.01 each: nothing left, and the margin covers 1e-6 and the
    # rounding of two float32 sums of 100 terms (the law's normalisation and the kept entries' sum)
    b = float(np.exp(np.float64(tail_bound(jnp.log(jnp.full(100, 0.01, jnp.float32)), 100))))
    assert 1e-6 + 200 * 6e-8 <= b <= 1e-4


def test_frontier_shape_rule():
    # blocks of 8 slots; blocks per group doubled (to 16 at most) while there would be more than 24 groups
    for S, want in [(1, (1, 1, 8)), (9, (2, 1, 8)), (192, (24, 1, 8)), (193, (13, 2, 8)), (384, (24, 2, 8))]:
        assert tuple(frontier_shape(S)) == want, S
    assert tuple(frontier_shape(385)) == (13, 4, 8) and tuple(frontier_shape(10**5)) == (782, 16, 8)
    for S, want in [(768, (24, 4, 8)), (769, (13, 8, 8)), (3072, (24, 16, 8)), (3073, (25, 16, 8))]:
        assert tuple(frontier_shape(S)) == want, S


def test_frontier_top_replace_insert():
    shape = _frontier.Shape(3, 2, 4)  # 3 groups of 2 blocks of 4 slots
    rng = np.random.default_rng(0)
    vals = rng.choice([-1.0, -2.0, -3.0], size=(2, 24)).astype(np.float32)
    vals[0, [3, 6, 13, 20]] = 0.5  # tree 0: the maximum in two blocks of group 0, in groups 1 and 2
    vals[1, [17, 18]] = 0.25  # tree 1: twice in one block

    def check(fr, vals):
        s = np.asarray(fr.slot)  # [groups, blocks, B, slots]
        np.testing.assert_array_equal(np.moveaxis(s, 2, 0).reshape(2, 24), vals)
        np.testing.assert_array_equal(np.asarray(fr.block), s.max(axis=3).transpose(0, 2, 1))
        np.testing.assert_array_equal(np.asarray(fr.group), s.max(axis=(1, 3)))

    fr = _frontier.init(shape, jnp.float32([-9.0, -8.0]))
    check(fr, np.float32([[-9.0] + [-np.inf] * 23, [-8.0] + [-np.inf] * 23]))
    fr = _frontier.insert(fr, shape, 13, jnp.asarray(vals[:, 13]))  # group 1, block 1, slot 1
    check(fr, np.float32([[-9.0] + [-np.inf] * 12 + [vals[0, 13]] + [-np.inf] * 10,
                          [-8.0] + [-np.inf] * 12 + [vals[1, 13]] + [-np.inf] * 10]))  # fmt: skip
    fr = _frontier.Frontier(  # every slot filled at once, the maxima from NumPy
        slot=jnp.asarray(np.moveaxis(vals.reshape(2, 3, 2, 4), 0, 2)),
        block=jnp.asarray(vals.reshape(2, 3, 2, 4).max(axis=3).transpose(1, 0, 2)),
        group=jnp.asarray(vals.reshape(2, 3, 8).max(axis=2).T),
    )
    top, replace = jax.jit(_frontier.top, static_argnums=1), jax.jit(_frontier.replace)
    for step in range(8):  # take the largest (its first slot, as NumPy's argmax), replace it by a smaller value
        check(fr, vals)
        t = top(fr, shape)
        first = np.argmax(vals, axis=1)
        np.testing.assert_array_equal(np.asarray(t.value), vals.max(axis=1))
        np.testing.assert_array_equal(np.asarray(t.index), first)
        np.testing.assert_array_equal(np.asarray(t.group), first // 8)
        np.testing.assert_array_equal(np.asarray(t.block), first // 4 % 2)
        np.testing.assert_array_equal(np.asarray(t.slot), first % 4)
        if step == 0:
            assert first.tolist() == [3, 17]
        new = np.float32([-4.0 - step, 0.75 if step == 0 else -4.0 - step])  # tree 1 first raises its maximum
        fr = replace(fr, t, jnp.asarray(new))
        vals[[0, 1], first] = new


def test_records_layout_round_trip():
    lay = _records.Layout(2, jnp.uint32)
    assert (lay.parent, lay.width) == (7, 8)
    logp = jnp.float32([-0.5, -np.inf])
    kw = (jnp.uint32([1, 2**32 - 1]), jnp.uint32([3, 2**31]))
    rec = lay.pack(logp, jnp.int32([1, 2]), jnp.int32([3, 4]), jnp.int32([5, 6]), jnp.int32([7, 8]), kw,
                   jnp.int32([-1, 9]))  # fmt: skip
    assert rec.shape == (2, 8) and rec.dtype == jnp.int32
    r = np.asarray(rec)
    np.testing.assert_array_equal(r[:, [1, 2, 3, 4, 7]], [[1, 3, 5, 7, -1], [2, 4, 6, 8, 9]])
    np.testing.assert_array_equal(np.asarray(lay.logp(rec)), logp)
    k0, k1 = lay.keys(rec)
    np.testing.assert_array_equal(np.asarray(k0), [1, 2**32 - 1])
    np.testing.assert_array_equal(np.asarray(k1), [3, 2**31])
    kd = np.asarray(lay.key_data(rec, (2,)))
    assert kd.dtype == np.uint32
    np.testing.assert_array_equal(kd, [[1, 3], [2**32 - 1, 2**31]])
    assert _records.as_i32(jnp.float32(1.0)) == 0x3F800000 and _records.as_i32(jnp.uint32(2**31)) == -(2**31)


def test_scratch_buffers_split_over_devices():
    # the buffers of a call over several devices (here a tuple of the one CPU device): zeroed records [S, B, width]
    # (int32) and a drawn law's node table [S, B, Kc] (float32), or the records alone for an indexed law
    _batch.clear_caches()
    devs = (jax.devices()[0],)
    rec, tab = _batch._take_scratch((4, 2, 8, 3, devs))
    assert (rec.shape, rec.dtype, tab.shape, tab.dtype) == ((4, 2, 8), jnp.int32, (4, 2, 3), jnp.float32)
    assert not np.asarray(rec).any() and not np.asarray(tab).any()
    (rec,) = _batch._take_scratch((4, 2, 8, None, devs))
    assert rec.shape == (4, 2, 8) and not np.asarray(rec).any()


def test_tree_values_and_records_by_hand():
    t = empty_tree(3, jax.random.key_data(jax.random.key(0)))
    assert t.key.shape == (3, 2) and t.key.dtype == jnp.uint32
    # int32 fields and float32 log P, strongly typed (a weakly typed field would take the dtype of what it meets)
    assert [x.dtype for x in t[:5]] == [jnp.int32, jnp.int32, jnp.float32, jnp.int32, jnp.int32]
    assert not any(x.weak_type for x in t)
    np.testing.assert_array_equal(np.asarray(t.parent), -1)
    np.testing.assert_array_equal(np.asarray(t.logP), -np.inf)
    for f in ("depth", "rank", "state"):
        np.testing.assert_array_equal(np.asarray(getattr(t, f)), 0)
    t = record_node(t, 1, 0, 2, jnp.float32(L(0.3)), 1, 4, jnp.uint32([7, 8]))
    t = record_node(t, 0, -1, 1, jnp.float32(L(0.5)), 0, 3, jnp.uint32([5, 6]))
    f = fields(t)
    np.testing.assert_array_equal(f["parent"], [-1, 0, -1])
    np.testing.assert_array_equal(f["depth"], [1, 2, 0])
    np.testing.assert_array_equal(f["rank"], [0, 1, 0])
    np.testing.assert_array_equal(f["state"], [3, 4, 0])
    np.testing.assert_array_equal(f["key"], [[5, 6], [7, 8], [0, 0]])
    np.testing.assert_allclose(np.asarray(prefix_values(t)), [0.5, 0.8, 0.8], rtol=1e-6)
    assert float(tree_value(t)) == pytest.approx(0.8, rel=1e-6)
    both = jax.tree.map(lambda x: jnp.stack([x, x]), t)  # a batch: sums along the last axis
    np.testing.assert_allclose(np.asarray(tree_value(both)), [0.8, 0.8], rtol=1e-6)


def test_root_and_child_nodes():
    law, k = fixed_law(P3), jax.random.key(4)
    s0, d0 = root_node(law, k, 4)
    assert int(s0) == 0
    np.testing.assert_allclose(np.exp(np.asarray(d0)), [0.5, 0.3, 0.2, 0.0], rtol=1e-6)
    kc, sc = child_of(law, k, s0, 2)
    np.testing.assert_array_equal(jax.random.key_data(kc), jax.random.key_data(jax.random.fold_in(k, 4)))
    kn, sn, dn = child_node(law, k, s0, 1, 2)
    np.testing.assert_array_equal(jax.random.key_data(kn), jax.random.key_data(jax.random.fold_in(k, 3)))
    np.testing.assert_allclose(np.exp(np.asarray(dn)), [0.5, 0.3], rtol=1e-6)
    # a Markov law whose child state is fixed by the rank: state a's rank-0 child is in b, its rank-1 child in a
    m = markov_law({"states": {"a": "fixed:probs=0.9/0.1", "b": "fixed:probs=0.6/0.4"}, "initial": "a",
                    "kernel": {"a": [[0.0, 1.0], [1.0, 0.0]], "b": [[1.0, 0.0]]}})  # fmt: skip
    s0, d0 = root_node(m, k, 2)
    assert int(s0) == 0
    np.testing.assert_allclose(np.exp(np.asarray(d0)), [0.9, 0.1], rtol=1e-6)
    assert int(child_of(m, k, s0, 0)[1]) == 1 and int(child_of(m, k, s0, 1)[1]) == 0
    _, sb, db = child_node(m, k, s0, 0, 2)
    assert int(sb) == 1
    np.testing.assert_allclose(np.exp(np.asarray(db)), [0.6, 0.4], rtol=1e-6)


def test_root_and_child_nodes_of_a_drawn_law():
    # a drawn law: node u's distribution is law.node_logp(fold_in(k_u, 0), 0, K), and its rank-i child's key is
    # fold_in(k_u, 2 + i) (as in realised_best); two nodes' distributions differ
    law, k = parse_law(DIRICHLET), jax.random.key(3)
    s0, d0 = root_node(law, k, 5)
    assert int(s0) == 0
    np.testing.assert_array_equal(np.asarray(d0), np.asarray(law.node_logp(jax.random.fold_in(k, 0), 0, 5)))
    kn, sn, dn = child_node(law, k, s0, 1, 5)
    kc = jax.random.fold_in(k, 3)
    np.testing.assert_array_equal(jax.random.key_data(kn), jax.random.key_data(kc))
    np.testing.assert_array_equal(np.asarray(dn), np.asarray(law.node_logp(jax.random.fold_in(kc, 0), 0, 5)))
    assert int(sn) == 0 and not np.allclose(np.asarray(dn), np.asarray(d0))


def _tree(parent, rank, logP):
    n = len(parent)
    return DraftTree(
        parent=jnp.int32(parent), depth=jnp.zeros(n, jnp.int32), logP=jnp.float32(logP), rank=jnp.int32(rank),
        state=jnp.zeros(n, jnp.int32), key=jnp.zeros((n, 2), jnp.uint32),
    )  # fmt: skip


def test_sampled_continuation():
    # p = (1/2, 1/2), K = 2: every walk leaves the full depth-2 tree after 2 tokens, and a tree of unused
    # slots after none; the chain of rank-0 children (3 nodes, then unused slots) keeps P(L >= d) = 2^-d
    law, n = fixed_law([0.5, 0.5]), 4000
    full = _tree([-1, -1, 0, 0, 1, 1], [0, 1, 0, 1, 0, 1], [L(0.5)] * 2 + [L(0.25)] * 4)
    unused = full._replace(logP=full.logP.at[:].set(-jnp.inf))
    chain = _tree([-1, 0, 1, -1, 0, 1], [0, 0, 0, 1, 1, 1], [L(0.5), L(0.25), L(0.125)] + [-np.inf] * 3)
    trees = jax.tree.map(lambda *x: jnp.repeat(jnp.stack(x), np.array([64, 64, n]), axis=0), full, unused, chain)
    B = 128 + n
    x = np.asarray(sample_accepted_batch(law, jax.random.split(jax.random.key(9), B), trees,
                                         jax.random.split(jax.random.key(0), B), 2))  # fmt: skip
    np.testing.assert_array_equal(x[:64], 2)
    np.testing.assert_array_equal(x[64:128], 0)
    for v, want in enumerate([0.5, 0.25, 0.125, 0.125]):
        f = np.mean(x[128:] == v)
        assert abs(f - want) <= 4 * math.sqrt(want * (1 - want) / n), (v, f)


def test_sampled_continuation_follows_the_markov_states():
    # states a: p = (1/2, 1/2), b: p = (0.8, 0.2); a's rank-0 child is in b, its rank-1 child in a; b's children
    # in a. Tree: both root children, the rank-1 child of the root's rank-1 child (a, then a: 1/2 * 1/2), the
    # rank-1 child of the root's rank-0 child (b: 1/2 * 0.2). So L is 1 or 2, P(L = 2) = 0.25 + 0.1 = 0.35.
    m = markov_law({"states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.8/0.2"}, "initial": "a",
                    "kernel": {"a": [[0.0, 1.0], [1.0, 0.0]], "b": [[1.0, 0.0]]}})  # fmt: skip
    n = 4000
    t = _tree([-1, -1, 1, 0], [0, 1, 1, 1], [L(0.5), L(0.5), L(0.25), L(0.1)])
    trees = jax.tree.map(lambda x: jnp.repeat(x[None], n, axis=0), t)
    x = np.asarray(sample_accepted_batch(m, jax.random.split(jax.random.key(9), n), trees,
                                         jax.random.split(jax.random.key(1), n), 2))  # fmt: skip
    assert set(np.unique(x)) <= {1, 2}
    f = np.mean(x == 2)
    assert abs(f - 0.35) <= 4 * math.sqrt(0.35 * 0.65 / n), f


def test_sampled_continuation_counts_only_used_children_of_the_current_node():
    # p = (0.5, 0.3, 0.2), K = 1: each step draws rank 0 (the kept entry) or the tail outcome, 1/2 each.
    # Two slots: the root's rank-0 child, and that node's rank-0 child (never used). With both slots unused,
    # no walk enters the tree: L = 0. With the first slot used, L = 1 when the root's draw is rank 0 (1/2), and
    # the walk stops at that node whatever it draws: L <= 1. 2000 walks: 4 standard errors of the frequency are
    # 4 sqrt(1/4 / 2000) = 0.045.
    law, n = fixed_law(P3), 2000
    used = _tree([-1, 0], [0, 0], [L(0.5), -np.inf])
    unused = used._replace(logP=used.logP.at[0].set(-jnp.inf))
    tree_keys, walk_keys = jax.random.split(jax.random.key(9), n), jax.random.split(jax.random.key(4), n)
    for t, want in [(unused, 0.0), (used, 0.5)]:
        x = np.asarray(sample_accepted_batch(law, tree_keys, jax.tree.map(lambda a: jnp.repeat(a[None], n, 0), t),
                                             walk_keys, 1))  # fmt: skip
        assert x.min() >= 0 and x.max() <= (1 if want else 0), np.unique(x)
        assert abs(np.mean(x == 1) - want) <= 4 * math.sqrt(0.25 / n), np.mean(x == 1)


def test_buffers_kept_between_calls_change_nothing():
    law, keys = fixed_law(P3), jax.random.split(jax.random.key(5), 2)
    _batch.clear_caches()
    assert not _batch._SCRATCH  # freed
    first = fields(oracle_batch(law, keys, 9, 3, kernel="jax"), 1)
    assert len(_batch._SCRATCH) == 1  # the last call's buffers, one shape at a time
    # an indexed law keeps a row index per node: records [P + 1, B, width] only, no node table (tag's Kc None);
    # width = 5 words (log P, depth, state, row, pointer), 2 key words (threefry), the parent
    ((tag, buf),) = _batch._SCRATCH.items()
    assert tag[:4] == (10, 2, 8, None) and [b.shape for b in buf] == [(10, 2, 8)]
    again = fields(oracle_batch(law, keys, 9, 3, kernel="jax"), 1)  # reuses them: every slot is rewritten
    for f in first:
        np.testing.assert_array_equal(again[f], first[f])
    np.testing.assert_allclose(np.exp(again["logP"]), [x[3] for x in HAND9], rtol=1e-6)
    oracle_batch(law, keys, 4, 3, kernel="jax")  # another shape: the first buffers are released
    assert len(_batch._SCRATCH) == 1
    _batch.clear_caches()
    assert not _batch._SCRATCH


def test_node_keys_take_the_unrolled_fold_for_threefry_keys():
    # the hand-unrolled fold gives jax.random.fold_in's key words bit for bit, and the kernel takes it for
    # threefry keys only (rbg keys have four words and go through fold_in itself)
    keys = jax.random.split(jax.random.key(7), 4)
    kd = jax.random.key_data(keys)
    for data in (0, 1, 5, 2**31 - 3):
        words = threefry_fold_in_words(kd[:, 0], kd[:, 1], data)
        want = jax.random.key_data(jax.vmap(lambda k, data=data: jax.random.fold_in(k, data))(keys))
        np.testing.assert_array_equal(np.stack(words, axis=-1), want)
    assert _kernel._Draws(fixed_law(P3), keys, 3).unrolled is True
    assert _kernel._Draws(fixed_law(P3), jax.random.split(jax.random.key(7, impl="rbg"), 4), 3).unrolled is False


def test_buffers_are_taken_by_their_tag():
    # the buffers kept under the asked tag come back as they are, and every other shape's are released
    _batch.clear_caches()
    tag, kept = (4, 2, 8, None, None), (jnp.ones((4, 2, 8), jnp.int32),)
    _batch._SCRATCH.update({tag: kept, (5, 2, 8, None, None): (jnp.zeros((5, 2, 8), jnp.int32),)})
    assert _batch._take_scratch(tag) is kept and not _batch._SCRATCH
    new = _batch._take_scratch((4, 2, 8, 3, None))  # none kept: fresh records and node table
    assert [(b.shape, b.dtype) for b in new] == [((4, 2, 8), jnp.int32), ((4, 2, 3), jnp.float32)]


def test_kernel_names_and_the_laws_the_native_kernel_serves():
    assert check_kernel(" JAX ") == "jax" and KERNELS == ("auto", "jax", "native")
    with pytest.raises(BrwsimError, match="kernel must be one of auto, jax, native, got 'gpu'"):
        check_kernel("gpu")
    drawn_law, keys = parse_law(DIRICHLET), jax.random.split(jax.random.key(0), 2)
    assert program(drawn_law) is None and program(fixed_law(P3)) is not None
    serves = "the native oracle kernel serves only the laws fixed, pool and the benchmark's table law"
    markov = markov_law({"states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.8/0.2"}, "initial": "a",
                         "kernel": {"a": [[0.0, 1.0], [1.0, 0.0]], "b": [[1.0, 0.0]]}})  # fmt: skip
    assert program(markov) is None  # not the JAX kernel's trees: its states come from the native stream
    with kernel_choice("native"):
        assert use_native(markov, keys, None, None)  # a Markov law of fixed states: served by name
        with pytest.raises(BrwsimError, match=serves):  # a law with no native program
            use_native(stored_rows(TableLaw(logp=jnp.log(jnp.float32([P3])))), keys, None, None)
        assert "native" in drawn_law.kernels  # a drawn law: served by name, from a stream of its own
        with pytest.raises(BrwsimError, match=serves):  # a fixed law, but rbg keys
            use_native(fixed_law(P3), jax.random.split(jax.random.key(0, impl="rbg"), 2), None, None)
        with kernel_choice("jax"):
            assert not use_native(fixed_law(P3), keys, None, None)
    assert not use_native(drawn_law, keys, None, None)  # auto again: not served, no error
