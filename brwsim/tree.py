"""The realised token tree and the exact oracle drafter (THEORY.md section 2).

Node keys
---------
A tree is a pure function of its PRNG key ``k_root``. Node ``u`` with key
``k_u`` has

* distribution ``law.node_logp(fold_in(k_u, 0), s_u, K)``,
* hidden state ``s_u = law.child_state(fold_in(k_u, 1), s_parent, rank)``
  (the root's: ``law.init_state(fold_in(k_root, 1))``),
* children keys ``k_{u i} = fold_in(k_u, 2 + i)`` for rank ``i`` (0-based, in
  decreasing order of ``p_u``).

So the tree does not depend on the order in which it is explored: the oracle,
every other drafter, the sampled-continuation check and the benchmark's
reference implementation all see the same nodes.

The oracle
----------
``T*_P`` is the set of the P non-root nodes of largest path probability
``P(v)``. Best-first search finds it: keep, for every node already taken
(and the root), the path log-probability of its best child not yet taken;
take the largest; replace it by its parent's next child and add the new
node's own best child. Nodes come out in non-increasing ``log P(v)``, so the
first ``P`` nodes of a run at ``P_max`` are ``T*_P`` for every ``P <= P_max``,
and the result is prefix-closed by construction. Ties in ``log P`` go to the
earliest-taken parent (any tie-break gives the same value). A node of a
P-node tree has at most ``P`` children in it, so ``K = min(V, P)`` sorted
entries per node suffice; nothing past them can be needed.
"""

from __future__ import annotations

import math
from functools import cache, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .errors import BrwsimError
from .laws import Law
from .lowering import unrolled_threefry

NEG_INF = -jnp.inf


class DraftTree(NamedTuple):
    """A drafted tree of P nodes, in the order the drafter took them.

    All fields have shape ``[..., P]`` (a leading batch axis for many trees).

    parent: index (0..P-1) of the parent node in this array, -1 for the root.
    depth:  depth of the node (1 for children of the root).
    logP:   log path probability ``log P(v)`` under the target; ``-inf`` marks
            an unused slot.
    rank:   rank of the node among its parent's children (0 = most likely).
    state:  the node's hidden state (0 for i.i.d. laws).
    key:    the node's key data (``uint32[..., P, 2]`` for threefry keys).
    """

    parent: jax.Array
    depth: jax.Array
    logP: jax.Array
    rank: jax.Array
    state: jax.Array
    key: jax.Array


def dist_key(k):
    return jax.random.fold_in(k, 0)


def state_key(k):
    return jax.random.fold_in(k, 1)


def child_key(k, rank):
    return jax.random.fold_in(k, 2 + rank)


def root_node(law: Law, tree_key, K: int):
    """(state, sorted top-K log-probs) of the root of the tree with this key."""
    s0 = law.init_state(state_key(tree_key))
    return s0, law.node_logp(dist_key(tree_key), s0, K)


def child_node(law: Law, parent_key, parent_state, rank, K: int):
    """(key, state, sorted top-K log-probs) of the child of given rank."""
    k = child_key(parent_key, rank)
    s = law.child_state(state_key(k), parent_state, rank)
    return k, s, law.node_logp(dist_key(k), s, K)


def empty_tree(P: int, kd) -> DraftTree:
    """A DraftTree of P unused slots (logP = -inf); ``kd`` is a key-data example for the key field."""
    return DraftTree(
        parent=jnp.full((P,), -1, jnp.int32),
        depth=jnp.zeros((P,), jnp.int32),
        logP=jnp.full((P,), NEG_INF, jnp.float32),
        rank=jnp.zeros((P,), jnp.int32),
        state=jnp.zeros((P,), jnp.int32),
        key=jnp.zeros((P,) + kd.shape, kd.dtype),
    )


def record_node(out: DraftTree, i, parent, depth, logP, rank, state, key_data) -> DraftTree:
    """``out`` with slot ``i`` set to the given node (drafters fill their trees one node at a time)."""
    return DraftTree(
        parent=out.parent.at[i].set(parent),
        depth=out.depth.at[i].set(depth),
        logP=out.logP.at[i].set(logP),
        rank=out.rank.at[i].set(rank),
        state=out.state.at[i].set(state),
        key=out.key.at[i].set(key_data),
    )


def oracle_one(law: Law, tree_key, P: int, K: int) -> DraftTree:
    """The oracle tree T*_P of one realised tree (best-first search).

    Cost: P node distributions plus O(P^2) for the frontier maxima.
    """
    S = P + 1  # slot 0 is the root, slot i + 1 the i-th node taken
    s0, d0 = root_node(law, tree_key, K)
    kd = jax.random.key_data(tree_key)
    tab = jnp.full((S, K), NEG_INF, jnp.float32).at[0].set(d0)
    cand = jnp.full((S,), NEG_INF, jnp.float32).at[0].set(d0[0])
    ptr = jnp.zeros((S,), jnp.int32)
    slot_lp = jnp.zeros((S,), jnp.float32)
    slot_key = jnp.zeros((S,) + kd.shape, kd.dtype).at[0].set(kd)
    slot_state = jnp.zeros((S,), jnp.int32).at[0].set(s0)
    slot_depth = jnp.zeros((S,), jnp.int32)
    out = empty_tree(P, kd)
    impl = jax.random.key_impl(tree_key)

    def body(i, st):
        tab, cand, ptr, slot_lp, slot_key, slot_state, slot_depth, out = st
        j = jnp.argmax(cand)
        r = ptr[j]
        lp = cand[j]
        pk = jax.random.wrap_key_data(slot_key[j], impl=impl)
        k, s, d = child_node(law, pk, slot_state[j], r, K)
        nxt = jnp.where(r + 1 < K, tab[j, jnp.minimum(r + 1, K - 1)], NEG_INF)
        cand = cand.at[j].set(slot_lp[j] + nxt)
        ptr = ptr.at[j].set(r + 1)
        n = i + 1
        dep = slot_depth[j] + 1
        kd_new = jax.random.key_data(k)
        tab = tab.at[n].set(d)
        cand = cand.at[n].set(lp + d[0])
        slot_lp = slot_lp.at[n].set(lp)
        slot_key = slot_key.at[n].set(kd_new)
        slot_state = slot_state.at[n].set(s)
        slot_depth = slot_depth.at[n].set(dep)
        out = record_node(out, i, j - 1, dep, lp, r, s, kd_new)
        return tab, cand, ptr, slot_lp, slot_key, slot_state, slot_depth, out

    st = (tab, cand, ptr, slot_lp, slot_key, slot_state, slot_depth, out)
    return jax.lax.fori_loop(0, P, body, st)[-1]


def _frontier_shape(S: int) -> tuple[int, int, int]:
    """(A, G1, G0): the frontier's S slots as A groups of G1 blocks of G0 slots.

    Measured on XLA CPU (benchmarks/frontier_shapes.py): an argmax over a row
    of 8-16 gathered entries is cheap and gets slow past 16, a min over the A
    groups (a leading axis, vectorised over the batch) stays cheap up to ~30;
    so blocks of 8 slots, and blocks per group doubled (up to 16) while there
    would be more than 24 groups.
    """
    G0, G1 = 8, 1
    while G1 < 16 and G0 * G1 * 24 < S:
        G1 *= 2
    return -(-S // (G0 * G1)), G1, G0


def _tail_bound(d: jax.Array, V: int) -> jax.Array:
    """An upper bound on log p of every entry past the ``Kc`` kept ones.

    The entries past the top ``Kc`` are each at most ``p[Kc - 1]`` and sum to
    at most ``1 - sum(p[:Kc])``; ``slack`` covers float32 rounding of the
    normalisation (and a user distribution's 1e-6 tolerance).
    """
    slack = 2e-6 + 2.4e-7 * (V + d.shape[-1])
    tail = jnp.maximum(1.0 - jnp.sum(jnp.exp(d), axis=-1), 0.0) + slack
    return jnp.minimum(d[..., -1], jnp.log(tail))


def _rotl(x, d: int):
    return (x << jnp.uint32(d)) | (x >> jnp.uint32(32 - d))


def _threefry_words(k1: jax.Array, k2: jax.Array, data) -> tuple[jax.Array, jax.Array]:
    """The two words of ``key_data(fold_in(k, data))`` for threefry2x32 key words (k1, k2), bit for bit.

    JAX's fold_in is ``threefry_2x32(k, [0, data])``; on CPU its lowering is a
    rolled loop (a nested while loop per call), which inside the oracle's own
    loop costs more than the arithmetic. This is the same 20 rounds unrolled.
    """
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = k1, jnp.asarray(data).astype(jnp.uint32) + k2
    for i in range(5):
        for r in rot[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotl(x1, r)
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x0, x1


def _threefry_fold_in(kd: jax.Array, data: jax.Array) -> jax.Array:
    """``key_data(fold_in(k, data))`` for threefry2x32 key data ``kd[..., 2]`` (see :func:`_threefry_words`)."""
    return jnp.stack(_threefry_words(kd[..., 0], kd[..., 1], data), axis=-1)


def _zero_of(x: jax.Array) -> jax.Array:
    """0.0 of x's shape that XLA cannot fold away (so it carries a data dependency on x)."""
    return jnp.isnan(x).astype(jnp.float32) * 0.0


# fields of a node record (int32 words; float32 and key data bitcast); key words follow, then the parent
_LP, _DEP, _ST, _ROW, _PTR, _KD = 0, 1, 2, 3, 4, 5


def _as_i32(x: jax.Array) -> jax.Array:
    return x if x.dtype == jnp.int32 else jax.lax.bitcast_convert_type(x, jnp.int32)


@partial(jax.jit, static_argnames=("P", "K", "Kc", "shape"), donate_argnames=("scratch",))
def _oracle_kernel(law: Law, tree_keys, scratch, P: int, K: int, Kc: int, shape: tuple[int, int, int]):
    """Best-first search for a batch of trees at once; returns (tree, dropped, scratch).

    The frontier (the path log-prob of each taken node's next child, one slot
    per node taken, slot 0 the root) is a three-level max structure: slot
    values ``v0[A, G1, B, G0]``, block maxima ``v1[A, B, G1]``, group maxima
    ``v2[A, B]`` (``shape = (A, G1, G0)``). A step finds the largest group
    maximum and the first group holding it (a masked min over the leading
    axis), then the first block and slot holding it (argmax over a contiguous
    row returns the first maximum): the lowest slot index, i.e. the
    earliest-taken parent, the reference tie-break. It rewrites one entry per
    level. Slot ``n = i + 1`` of step ``i`` is the same
    for every tree, so every write of the new node is a dynamic-update-slice;
    only the taken parent's entries are per-tree scatters. A node's fields
    (log P, depth, state, row, next-child pointer, key, parent) are one record
    ``rec[n, b]`` of int32 words, so a step reads its parent with one gather.

    Node distributions: for an indexed law (``law.indexed``) a node keeps only
    its row of ``law.row_table(K)``; otherwise its ``Kc <= K`` largest sorted
    entries (a ``[S, B, Kc]`` table), and ``dropped[b]`` is an upper bound on
    the path log-prob of every child that was not kept (``-inf`` if none).

    ``scratch``: the record buffer (and a drawn law's node table) to write
    into, donated; None allocates them. Every slot is written before it is
    read, so their contents do not matter. They come back as ``scratch``.
    """
    B = tree_keys.shape[0]
    S = P + 1
    A, G1, G0 = shape
    impl = jax.random.key_impl(tree_keys)
    kd_root = jax.random.key_data(tree_keys)  # [B, *ks]
    ks = kd_root.shape[1:]
    nk = math.prod(ks)
    kdt = kd_root.dtype
    V = law.vocab
    indexed = law.indexed
    trunc = Kc < K and not indexed
    f32, i32 = jnp.float32, jnp.int32
    PAR = _KD + nk
    F = PAR + 1

    def key_of(words):
        return jax.random.wrap_key_data(jnp.stack(words, axis=-1).reshape((B,) + ks), impl=impl)

    if str(impl) == "threefry2x32" and ks == (2,):  # the node keys with the unrolled fold_in (same bits)

        def fold(words, data):
            return _threefry_words(words[0], words[1], data)
    else:

        def fold(words, data):
            kd = jax.random.key_data(jax.vmap(jax.random.fold_in)(key_of(words), jnp.broadcast_to(data, (B,))))
            kd = kd.reshape(B, nk)
            return tuple(kd[:, w] for w in range(nk))

    if indexed:
        table = law.row_table(Kc).astype(f32)  # [N, Kc]

        def draw(words, s):
            return jax.vmap(law.node_row)(key_of(fold(words, 0)), s).astype(i32)

        def first(row):
            return table[row, 0]
    else:

        def draw(words, s):
            return jax.vmap(lambda k, s: law.node_logp(k, s, Kc))(key_of(fold(words, 0)), s).astype(f32)

        def first(d):
            return d[:, 0]

    root_words = tuple(kd_root.reshape(B, nk)[:, w] for w in range(nk))
    s0 = jax.vmap(law.init_state)(key_of(fold(root_words, 1))).astype(i32)
    d0 = draw(root_words, s0)
    c0 = first(d0)
    b_ix = jnp.arange(B, dtype=i32)
    a_ix = jnp.arange(A, dtype=i32)[:, None]
    g1_ix = jnp.arange(G1, dtype=i32)
    g0_ix = jnp.arange(G0, dtype=i32)

    v0 = jnp.full((A, G1, B, G0), NEG_INF, f32).at[0, 0, :, 0].set(c0)
    v1 = jnp.full((A, B, G1), NEG_INF, f32).at[0, :, 0].set(c0)
    v2 = jnp.full((A, B), NEG_INF, f32).at[0].set(c0)
    w0 = [jnp.zeros((B,), i32)] * F
    w0[_ST] = s0
    w0[PAR] = jnp.full((B,), -1, i32)
    if indexed:
        w0[_ROW] = d0
    w0[_KD:PAR] = [_as_i32(w) for w in root_words]
    if scratch is None:
        scratch = _scratch_arrays(S, B, F, None if indexed else Kc)
    rec = scratch[0].at[0].set(jnp.stack(w0, axis=1))
    rk = jnp.zeros((S, B), i32)
    if indexed:
        tab = tail = None
    else:
        # slot-major: the new node's row of every tree is one contiguous block
        tab = scratch[1].at[0].set(d0)
        tail = jnp.full((S, B), NEG_INF, f32).at[0].set(_tail_bound(d0, V)) if trunc else None
    dropped = jnp.full((B,), NEG_INF, f32)

    def body(i, carry):
        v0, v1, v2, rec, rk, tab, tail, dropped = carry
        n = i + 1
        # the frontier's largest entry and its first slot (a, g, c), from max/min reductions
        m = jnp.max(v2, axis=0)  # [B]
        a = jnp.minimum(jnp.min(jnp.where(v2 == m, a_ix, A), axis=0), A - 1)  # the first group holding m
        # (argmax over a contiguous row returns the first maximum: the lowest index)
        r1v = v1[a, b_ix]  # [B, G1]: the blocks of group a
        g = jnp.argmax(r1v, axis=1).astype(i32)
        r0v = v0[a, g, b_ix]  # [B, G0]: the slots of block (a, g)
        c = jnp.argmax(r0v, axis=1).astype(i32)
        j = (a * G1 + g) * G0 + c
        pr = rec[j, b_ix]  # [B, F]: the parent's record
        r = pr[:, _PTR]
        plp = jax.lax.bitcast_convert_type(pr[:, _LP], f32)
        pwords = tuple(jax.lax.bitcast_convert_type(pr[:, _KD + w], kdt) for w in range(nk))
        r1 = r + 1
        rc = jnp.minimum(r1, Kc - 1)
        nxt = table[pr[:, _ROW], rc] if indexed else tab[j, b_ix, rc]
        nxt = jnp.where(r1 < Kc, nxt, NEG_INF)
        if trunc:
            bound = plp + jnp.minimum(tab[j, b_ix, Kc - 1], tail[j, b_ix])
            dropped = jnp.where(r1 >= Kc, jnp.maximum(dropped, bound), dropped)
        # the new node (slot n, the same for every tree)
        kw = fold(pwords, 2 + r)
        sn = jax.vmap(law.child_state)(key_of(fold(kw, 1)), pr[:, _ST], r).astype(i32)
        dn = draw(kw, sn)
        # Tie every value written below to every per-tree read above: without a
        # data dependency XLA cannot prove the reads happen before the in-place
        # writes and copies whole arrays every step.
        # (an optimization_barrier does not do it; a float zero does).
        zero = _zero_of(nxt) + _zero_of(plp) + (_zero_of(dropped) if trunc else 0.0)
        m = m + zero
        # the taken parent's next child replaces it in the frontier
        c_new = plp + nxt
        m1 = jnp.max(jnp.where(g0_ix == c[:, None], c_new[:, None], r0v), axis=1)
        m2 = jnp.max(jnp.where(g1_ix == g[:, None], m1[:, None], r1v), axis=1)
        v0 = v0.at[a, g, b_ix, c].set(c_new, unique_indices=True)
        v1 = v1.at[a, b_ix, g].set(m1, unique_indices=True)
        v2 = v2.at[a, b_ix].set(m2, unique_indices=True)
        rec = rec.at[j, b_ix, _PTR].set(r1, unique_indices=True)
        # the new node's best child enters at slot n
        if indexed:
            cn = m + first(dn)
        else:
            dn = dn + zero[:, None]
            cn = m + dn[:, 0]
        na, ng, nc = n // (G1 * G0), (n // G0) % G1, n % G0
        v0 = jax.lax.dynamic_update_slice(v0, cn[None, None, :, None], (na, ng, 0, nc))
        old1 = jax.lax.dynamic_slice(v1, (na, 0, ng), (1, B, 1))
        v1 = jax.lax.dynamic_update_slice(v1, jnp.maximum(old1, cn[None, :, None]), (na, 0, ng))
        old2 = jax.lax.dynamic_slice(v2, (na, 0), (1, B))
        v2 = jax.lax.dynamic_update_slice(v2, jnp.maximum(old2, cn), (na, 0))
        words = [None] * F
        words[_LP] = _as_i32(m)
        words[_DEP] = pr[:, _DEP] + 1
        words[_ST] = sn
        words[_ROW] = dn if indexed else jnp.zeros((B,), i32)
        words[_PTR] = jnp.zeros((B,), i32)
        words[_KD:PAR] = [_as_i32(w) for w in kw]
        words[PAR] = j - 1
        rec = jax.lax.dynamic_update_slice(rec, jnp.stack(words, axis=1)[None], (n, 0, 0))
        rk = jax.lax.dynamic_update_slice(rk, r[None], (n, 0))
        if not indexed:
            tab = jax.lax.dynamic_update_slice(tab, dn[None], (n, 0, 0))
            if trunc:
                tail = jax.lax.dynamic_update_slice(tail, _tail_bound(dn, V)[None], (n, 0))
        return v0, v1, v2, rec, rk, tab, tail, dropped

    carry = jax.lax.fori_loop(0, P, body, (v0, v1, v2, rec, rk, tab, tail, dropped))
    rec, rk, tab, dropped = carry[3], carry[4], carry[5], carry[-1]
    scratch = (rec,) if indexed else (rec, tab)
    rec = jnp.moveaxis(rec[1:], 0, 1)  # [B, P, F]
    kd = jax.lax.bitcast_convert_type(rec[..., _KD:PAR], kdt).reshape((B, P) + ks)
    tree = DraftTree(
        parent=rec[..., PAR],
        depth=rec[..., _DEP],
        logP=jax.lax.bitcast_convert_type(rec[..., _LP], f32),
        rank=jnp.moveaxis(rk[1:], 0, 1),
        state=rec[..., _ST],
        key=kd,
    )
    return tree, dropped, scratch


def oracle_batch(law: Law, tree_keys, P: int, K: int, *, K_keep: int | None = None, devices=None) -> DraftTree:
    """Oracle trees T*_P for a batch of tree keys (``tree_keys``: key array [B]).

    Exactly the trees of :func:`oracle_one` (same nodes, order and tie-breaks),
    computed by the batched best-first search of :func:`_oracle_kernel`.
    ``K_keep`` (default: all ``K`` unless the node tables would pass
    :data:`TABLE_BYTES` per tree) is how many entries of each node's sorted
    distribution are kept. Never a silent truncation: when a child past the
    kept ones could have entered a tree, that batch is recomputed with four
    times as many kept entries (node distributions are a pure function of the
    node key, so this is exact), up to ``K``. Inside an outer ``jit`` (traced
    keys) all ``K`` entries are kept.

    ``devices`` (a list of devices, see :func:`resolve_devices`): split the
    batch evenly over them (``B`` must be a multiple of their number); every
    tree is computed by the same program, so the trees are those of one device.
    """
    P, K = int(P), int(K)
    if P < 1 or K < 1:
        raise BrwsimError(f"oracle needs P >= 1 and K >= 1, got P={P}, K={K}")
    # inside a jit/vmap (even with concrete keys: jnp ops are staged there),
    # keep all K entries and no buffers between calls
    traced = isinstance(tree_keys, jax.core.Tracer) or isinstance(jnp.zeros(()), jax.core.Tracer)
    Kc = keep_entries(P, K, K_keep)
    if traced or law.indexed:  # an indexed law keeps a row index per node, not its entries
        Kc = K
    shape = _frontier_shape(P + 1)
    kernel = _oracle_kernel
    sharded = devices is not None and len(devices) > 1 and not traced
    devs = tuple(devices) if sharded else None
    if sharded:
        kernel, tree_keys = _sharded(devs, tree_keys)

    def run(Kc):
        if traced:
            with unrolled_threefry():
                return kernel(law, tree_keys, None, P=P, K=K, Kc=Kc, shape=shape)[:2]
        # the buffers of a call with the same shapes on the same devices
        F = _KD + math.prod(jax.random.key_data(tree_keys).shape[1:]) + 1
        tag = (P + 1, tree_keys.shape[0], F, None if law.indexed else Kc, devs or tree_keys.sharding)
        with unrolled_threefry():
            tree, dropped, _SCRATCH[tag] = kernel(law, tree_keys, _take_scratch(tag), P=P, K=K, Kc=Kc, shape=shape)
        return tree, dropped

    tree, dropped = run(Kc)
    while Kc < K:
        bad = np.asarray(dropped >= tree.logP[:, -1])
        if not bad.any():
            break
        Kc = min(K, 4 * Kc)
        t2, dropped = run(Kc)
        tree = _merge(jnp.asarray(bad), tree, t2)
        dropped = jnp.where(jnp.asarray(bad), dropped, NEG_INF)
    return tree


# The oracle's slot-major buffers (node records, a drawn law's node table) of
# the last call, handed back to the next call of the same shape (donated, so
# XLA reuses them in place). Every slot is written before it is read, so their
# old contents never matter; this saves writing the whole table each call.
_SCRATCH: dict = {}


def _scratch_arrays(S: int, B: int, F: int, Kc: int | None):
    rec = jnp.zeros((S, B, F), jnp.int32)
    return (rec,) if Kc is None else (rec, jnp.zeros((S, B, Kc), jnp.float32))


def _take_scratch(tag: tuple):
    """The buffers for ``tag = (S, B, F, Kc or None, devices or the keys' sharding)``: cached ones, else zeros."""
    buf = _SCRATCH.pop(tag, None)
    _SCRATCH.clear()  # one shape at a time: release the others first
    if buf is not None:
        return buf
    S, B, F, Kc, devs = tag
    if not isinstance(devs, tuple):  # one device: placed with the keys by jit
        return _scratch_arrays(S, B, F, Kc)
    return _sharded_scratch(S, B, F, Kc, devs)()


@cache
def _sharded_scratch(S: int, B: int, F: int, Kc: int | None, devs: tuple):
    """A compiled maker of the scratch buffers split over ``devs`` along the batch (compiled once per shape)."""
    from jax.sharding import NamedSharding, PartitionSpec

    spec = NamedSharding(_mesh(devs), PartitionSpec(None, "trees"))
    n = 1 if Kc is None else 2
    return jax.jit(partial(_scratch_arrays, S, B, F, Kc), out_shardings=(spec,) * n)


def release_scratch() -> None:
    """Free the buffers the oracle keeps between calls (``oracle_values`` does this when it ends)."""
    _SCRATCH.clear()


@cache
def _mesh(devices: tuple):
    """A one-axis mesh ("trees") over these devices: the oracle splits its batch along it."""
    from jax.sharding import Mesh

    return Mesh(np.array(devices), ("trees",))


@cache
def _sharded_kernel(devices: tuple, P: int, K: int, Kc: int, shape: tuple):
    from jax.sharding import PartitionSpec

    mesh = _mesh(devices)
    f = jax.shard_map(
        lambda law, keys, scratch: _oracle_kernel(law, keys, scratch, P=P, K=K, Kc=Kc, shape=shape),
        mesh=mesh,
        in_specs=(PartitionSpec(), PartitionSpec("trees"), PartitionSpec(None, "trees")),
        out_specs=(PartitionSpec("trees"), PartitionSpec("trees"), PartitionSpec(None, "trees")),
        check_vma=False,
    )
    return jax.jit(f, donate_argnums=2)


def _sharded(devices: tuple, tree_keys):
    """The kernel split over ``devices`` along the batch axis, and the keys placed there."""
    from jax.sharding import NamedSharding, PartitionSpec

    n = len(devices)
    if tree_keys.shape[0] % n:
        raise BrwsimError(f"a batch of {tree_keys.shape[0]} trees does not split evenly over {n} devices")

    def kernel(law, keys, scratch, P, K, Kc, shape):
        return _sharded_kernel(devices, P, K, Kc, shape)(law, keys, scratch)

    return kernel, jax.device_put(tree_keys, NamedSharding(_mesh(devices), PartitionSpec("trees")))


def resolve_devices(spec=None) -> list | None:
    """Devices to shard over: None (the default device), ``"all"``, a count, or a list of devices."""
    if spec is None:
        return None
    avail = jax.devices()
    if isinstance(spec, str):
        if spec.strip().lower() == "all":
            return list(avail)
        try:
            spec = int(spec)
        except ValueError:
            raise BrwsimError(f"devices must be 'all' or a positive integer, got {spec!r}") from None
    if isinstance(spec, int) and not isinstance(spec, bool):
        if not 1 <= spec <= len(avail):
            raise BrwsimError(f"devices must be between 1 and {len(avail)} (devices available), got {spec}")
        return list(avail[:spec])
    try:
        devs = list(spec)
    except TypeError:
        raise BrwsimError(f"devices must be 'all', a positive integer or a list of devices, got {spec!r}") from None
    if not devs:
        raise BrwsimError("devices: the list of devices is empty")
    return devs


def _merge(sel, a: DraftTree, b: DraftTree) -> DraftTree:
    """Tree ``b[i]`` where ``sel[i]``, else ``a[i]``."""
    return jax.tree.map(lambda x, y: jnp.where(sel.reshape((-1,) + (1,) * (x.ndim - 1)), y, x), a, b)


TABLE_BYTES = 16 * 2**20  # default cap on one tree's node table (float32 [P + 1, K_keep])


def keep_entries(P: int, K: int, K_keep: int | None = None) -> int:
    """Entries kept per node: ``K_keep`` if given, else ``K`` while the table fits TABLE_BYTES."""
    if K_keep is not None:
        if int(K_keep) < 1:
            raise BrwsimError(f"K_keep must be >= 1, got {K_keep}")
        return min(int(K_keep), K)
    fit = TABLE_BYTES // (4 * (P + 1))
    if fit >= K:
        return K
    return max(16, 1 << (max(fit, 1).bit_length() - 1))


_SLOT_BYTES = 76  # per slot and tree: node record (8 words with threefry keys), frontier, output


def oracle_memory(law: Law, P: int, K: int | None = None) -> int:
    """Approximate bytes one tree needs in :func:`_oracle_kernel` (records, frontier, node table, node draw)."""
    K = min(law.vocab, P) if K is None else K
    per_slot = _SLOT_BYTES
    if not law.indexed:
        Kc = keep_entries(P, K)
        per_slot += 4 * Kc + (4 if Kc < K else 0)
    return per_slot * (P + 1) + 16 * law.vocab


def default_batch(law: Law, P: int, hot: int = 64 * 2**20, budget: int = 256 * 2**20) -> int:
    """Trees per oracle call on one device: at most 4096, ``hot`` bytes of records, ``budget`` bytes in all.

    Measured (benchmarks/README.md): large batches amortise the per-step
    dispatch of the loop body at small P (P = 16: 4096 trees 1.8x faster
    than 1024), while past ~64 MB the node records and frontier (read at
    random every step) fall out of cache at large P (P = 4096: 205 trees 1.3x
    faster than 859). A drawn law's node table is written once per node and
    read rarely, so it counts only towards ``budget``.
    """
    hot_per_tree = _SLOT_BYTES * (P + 1) + 16 * law.vocab
    return int(max(1, min(4096, hot // hot_per_tree, budget // oracle_memory(law, P))))


def prefix_values(tree: DraftTree) -> jax.Array:
    """``sum_{v in first n nodes} P(v)`` for n = 1..P: E[L | U] of every prefix.

    For the oracle, entry ``n - 1`` is the value of ``T*_n``.
    """
    return jnp.cumsum(jnp.exp(tree.logP), axis=-1)


def tree_value(tree: DraftTree) -> jax.Array:
    """E[L(T) | U] = sum over the tree of P(v) (THEORY section 2)."""
    return jnp.sum(jnp.exp(tree.logP), axis=-1)


def sample_accepted_one(law: Law, tree_key, tree: DraftTree, walk_key, K: int) -> jax.Array:
    """Let the target sample its continuation; count the tokens inside the tree.

    At the current node (the root first) a child rank is drawn from the node's
    whole distribution (the top-K entries plus the remaining mass as one
    outcome, which no tree node can hold); the walk goes on while the drawn
    child is a node of ``tree``. Returns the accepted length L(T).
    """
    valid = tree.logP > NEG_INF

    def logits_of(d):
        tail = jnp.maximum(1.0 - jnp.sum(jnp.exp(d)), 0.0)
        return jnp.concatenate([d, jnp.log(tail)[None]])

    s0, d0 = root_node(law, tree_key, K)

    def cond(st):
        return st[0]

    def body(st):
        _, cur, depth, d, node_key, node_state = st
        r = jax.random.categorical(jax.random.fold_in(walk_key, depth), logits_of(d))
        hit = valid & (tree.parent == cur) & (tree.rank == r)
        found = jnp.any(hit)
        nxt = jnp.argmax(hit).astype(jnp.int32)
        k, s, dn = child_node(law, node_key, node_state, jnp.minimum(r, K - 1), K)
        return found, jnp.where(found, nxt, cur), depth + found.astype(jnp.int32), dn, k, s

    init = (jnp.bool_(True), jnp.int32(-1), jnp.int32(0), d0, tree_key, s0)
    return jax.lax.while_loop(cond, body, init)[2]


@partial(jax.jit, static_argnames=("K",))
def sample_accepted_batch(law: Law, tree_keys, trees: DraftTree, walk_keys, K: int) -> jax.Array:
    return jax.vmap(lambda tk, t, wk: sample_accepted_one(law, tk, t, wk, K))(tree_keys, trees, walk_keys)
