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

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brwsim.errors import BrwsimError
from brwsim.laws import fixed_law, markov_law, parse_law
from brwsim.oracle import (
    KERNELS,
    TABLE_BYTES,
    _batch,
    _frontier,
    _records,
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
from brwsim.tree import (
    DraftTree,
    child_node,
    child_of,
    empty_tree,
    prefix_values,
    record_node,
    root_node,
    sample_accepted_batch,
    tree_value,
)

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


@pytest.mark.parametrize("how", ["reference", "kernel", "inside jit", "rbg keys"])
def test_oracle_tree_by_hand(how):
    law, P = fixed_law(P3), 9
    keys = jax.random.split(jax.random.key(5, impl="rbg" if how == "rbg keys" else None), 2)
    if how == "reference":
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
    """The P nodes of largest P(v) of a realised i.i.d. tree: (float64 log P, rank path), largest first.

    Every node is expanded whose P(v) is not below the P-th best found so far (its descendants are no larger);
    node u has distribution ``law.node_logp(fold_in(k_u, 0), 0, K)`` and child keys ``fold_in(k_u, 2 + rank)``.
    """
    node = jax.jit(
        lambda k: (
            law.node_logp(jax.random.fold_in(k, 0), 0, K),
            jax.vmap(lambda r: jax.random.fold_in(k, 2 + r))(jnp.arange(K)),
        )
    )
    nodes, level = [], [((), tree_key, 0.0)]
    for _ in range(P):
        nxt = []
        for path, k, lp in level:
            d, kids = node(k)
            d = np.asarray(d, np.float64)
            nxt += [(path + (r,), kids[r], lp + d[r]) for r in range(K) if np.isfinite(d[r])]
        nodes += [(lp, path) for path, _, lp in nxt]
        cut = sorted(lp for lp, _ in nodes)[-P] if len(nodes) >= P else -np.inf
        level = [x for x in nxt if x[2] >= cut]
    return sorted(nodes, reverse=True)[:P]


DIRICHLET = "dirichlet:V=6,alpha=0.5"


@pytest.fixture(scope="module")
def drawn():
    law = parse_law(DIRICHLET)
    keys = jax.random.split(jax.random.key(11), 3)
    return law, keys, [realised_best(law, k, 5, 5) for k in keys]


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


def test_drawn_law_one_tree(drawn):
    law, keys, best = drawn
    t = oracle_batch(law, keys[2:], 5, 5, K_keep=4, kernel="jax")  # run twice, one copy kept
    assert t.logP.shape == (1, 5) and t.key.shape == (1, 5, 2)
    one = fields(t, 0)
    assert paths_of(one) == [path for _, path in best[2]]
    np.testing.assert_allclose(one["logP"], [lp for lp, _ in best[2]], rtol=1e-5)


def test_rerun_that_cannot_fit_is_one_line_error(drawn, monkeypatch):
    law, keys, _ = drawn
    monkeypatch.setattr(_batch, "available_memory", lambda: 1000)
    with pytest.raises(BrwsimError, match=r"P=5: to stay exact, some nodes of these trees need their 4 largest"):
        oracle_batch(law, keys, 5, 5, K_keep=1, kernel="jax")


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


def test_frontier_shape_rule():
    # blocks of 8 slots; blocks per group doubled (to 16 at most) while there would be more than 24 groups
    for S, want in [(1, (1, 1, 8)), (9, (2, 1, 8)), (192, (24, 1, 8)), (193, (13, 2, 8)), (384, (24, 2, 8))]:
        assert tuple(frontier_shape(S)) == want, S
    assert tuple(frontier_shape(385)) == (13, 4, 8) and tuple(frontier_shape(10**5)) == (782, 16, 8)


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


def test_tree_values_and_records_by_hand():
    t = empty_tree(3, jax.random.key_data(jax.random.key(0)))
    assert t.key.shape == (3, 2) and t.key.dtype == jnp.uint32
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


def test_buffers_kept_between_calls_change_nothing():
    law, keys = fixed_law(P3), jax.random.split(jax.random.key(5), 2)
    _batch.clear_caches()
    assert not _batch._SCRATCH  # freed
    first = fields(oracle_batch(law, keys, 9, 3, kernel="jax"), 1)
    assert len(_batch._SCRATCH) == 1  # the last call's buffers, one shape at a time
    again = fields(oracle_batch(law, keys, 9, 3, kernel="jax"), 1)  # reuses them: every slot is rewritten
    for f in first:
        np.testing.assert_array_equal(again[f], first[f])
    np.testing.assert_allclose(np.exp(again["logP"]), [x[3] for x in HAND9], rtol=1e-6)
    oracle_batch(law, keys, 4, 3, kernel="jax")  # another shape: the first buffers are released
    assert len(_batch._SCRATCH) == 1
    _batch.clear_caches()
    assert not _batch._SCRATCH


def test_kernel_names_and_the_laws_the_native_kernel_serves():
    assert check_kernel(" JAX ") == "jax" and KERNELS == ("auto", "jax", "native")
    with pytest.raises(BrwsimError, match="kernel must be one of auto, jax, native, got 'gpu'"):
        check_kernel("gpu")
    drawn_law, keys = parse_law(DIRICHLET), jax.random.split(jax.random.key(0), 2)
    assert program(drawn_law) is None and program(fixed_law(P3)) is not None
    serves = "the native oracle kernel serves only the laws fixed, pool and the benchmark's table law"
    with kernel_choice("native"):
        with pytest.raises(BrwsimError, match=serves):
            use_native(drawn_law, keys, None, None)
        with pytest.raises(BrwsimError, match=serves):  # a fixed law, but rbg keys
            use_native(fixed_law(P3), jax.random.split(jax.random.key(0, impl="rbg"), 2), None, None)
        with kernel_choice("jax"):
            assert not use_native(fixed_law(P3), keys, None, None)
    assert not use_native(drawn_law, keys, None, None)  # auto again: not served, no error
