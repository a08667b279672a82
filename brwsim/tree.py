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


def _block_size(S: int) -> int:
    """Frontier block: a power of two near sqrt(S), so a step costs O(sqrt(S))."""
    b = 1 << max(2, round(math.log2(max(S, 4)) / 2))
    return min(b, 1 << max(2, (S - 1).bit_length()))


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


def _threefry_fold_in(kd: jax.Array, data: jax.Array) -> jax.Array:
    """``key_data(fold_in(k, data))`` for threefry2x32 key data ``kd[..., 2]``, bit for bit.

    JAX's fold_in is ``threefry_2x32(k, [0, data])``; on CPU its lowering is a
    rolled loop (a nested while loop per call), which inside the oracle's own
    loop costs more than the arithmetic. This is the same 20 rounds unrolled.
    """
    k1, k2 = kd[..., 0], kd[..., 1]
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = k1, jnp.asarray(data).astype(jnp.uint32) + k2
    for i in range(5):
        for r in rot[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotl(x1, r)
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return jnp.stack([x0, x1], axis=-1)


def _zero_of(x: jax.Array) -> jax.Array:
    """0.0 of x's shape that XLA cannot fold away (so it carries a data dependency on x)."""
    return jnp.isnan(x).astype(jnp.float32) * 0.0


@partial(jax.jit, static_argnames=("P", "K", "Kc", "blk"))
def _oracle_kernel(law: Law, tree_keys, P: int, K: int, Kc: int, blk: int):
    """Best-first search for a batch of trees at once; returns (tree, dropped).

    Layout: the frontier ``cand`` (the path log-prob of each taken node's next
    child) is ``[nblk, B, blk]`` with block maxima ``bmax[nblk, B]``; a step
    finds the largest block maximum with max reductions (no argmax), the first
    block and the first slot in it holding that value (lowest slot index =
    earliest-taken parent, the reference tie-break), and rewrites one block
    maximum. Slot ``n = i + 1`` of step ``i`` is the same for every tree, so
    all writes of the new node are dynamic-update-slices; only the taken
    parent's entries are per-tree scatters. Only ``Kc <= K`` sorted entries of
    each node are kept; ``dropped[b]`` is an upper bound on the path log-prob
    of every child that was not kept (``-inf`` if none).
    """
    B = tree_keys.shape[0]
    S = P + 1
    nblk = -(-S // blk)
    impl = jax.random.key_impl(tree_keys)
    kd_root = jax.random.key_data(tree_keys)  # [B, *ks]
    ks = kd_root.shape[1:]
    V = law.vocab
    trunc = Kc < K
    f32 = jnp.float32

    s0, d0 = jax.vmap(lambda k: root_node(law, k, Kc))(tree_keys)
    d0 = d0.astype(f32)
    b_ix = jnp.arange(B, dtype=jnp.int32)
    blk_ix = jnp.arange(blk, dtype=jnp.int32)
    nblk_ix = jnp.arange(nblk, dtype=jnp.int32)[:, None]

    cand = jnp.full((nblk, B, blk), NEG_INF, f32).at[0, :, 0].set(d0[:, 0])
    bmax = jnp.full((nblk, B), NEG_INF, f32).at[0].set(d0[:, 0])
    # slot-major: the new node's row of every tree is one contiguous block
    tab = jnp.full((S, B, Kc), NEG_INF, f32).at[0].set(d0)
    tail = jnp.full((S, B), NEG_INF, f32)
    if trunc:
        tail = tail.at[0].set(_tail_bound(d0, V))
    ptr = jnp.zeros((S, B), jnp.int32)
    lp = jnp.zeros((S, B), f32)
    par = jnp.full((S, B), -1, jnp.int32)
    dep = jnp.zeros((S, B), jnp.int32)
    rk = jnp.zeros((S, B), jnp.int32)
    st = jnp.zeros((S, B), jnp.int32).at[0].set(s0)
    kd = jnp.zeros((S, B) + ks, kd_root.dtype).at[0].set(kd_root)
    dropped = jnp.full((B,), NEG_INF, f32)

    fast = str(impl) == "threefry2x32" and ks == (2,)

    def gen(pkd, pstate, r):
        if not fast:
            pk = jax.random.wrap_key_data(pkd, impl=impl)
            k, s, d = child_node(law, pk, pstate, r, Kc)
            return jax.random.key_data(k), s, d.astype(f32)
        # child_node with the unrolled fold_in (same bits)
        kd = _threefry_fold_in(pkd, 2 + r)
        wrap = lambda x: jax.random.wrap_key_data(x, impl=impl)
        s = law.child_state(wrap(_threefry_fold_in(kd, 1)), pstate, r)
        d = law.node_logp(wrap(_threefry_fold_in(kd, 0)), s, Kc)
        return kd, s, d.astype(f32)

    def body(i, carry):
        cand, bmax, tab, tail, ptr, lp, par, dep, rk, st, kd, dropped = carry
        n = i + 1
        # exact argmax of the frontier from max reductions
        m = jnp.max(bmax, axis=0)  # [B]
        jb = jnp.min(jnp.where(bmax == m, nblk_ix, nblk), axis=0)
        jb = jnp.minimum(jb, nblk - 1)
        row = cand[jb, b_ix]  # [B, blk]
        jj = jnp.min(jnp.where(row == m[:, None], blk_ix, blk), axis=1)
        jj = jnp.minimum(jj, blk - 1)
        j = jb * blk + jj
        r = ptr[j, b_ix]
        plp = lp[j, b_ix]
        r1 = r + 1
        nxt = jnp.where(r1 < Kc, tab[j, b_ix, jnp.minimum(r1, Kc - 1)], NEG_INF)
        pkd, pst, pdep = kd[j, b_ix], st[j, b_ix], dep[j, b_ix]
        if trunc:
            bound = plp + jnp.minimum(tab[j, b_ix, Kc - 1], tail[j, b_ix])
            dropped = jnp.where(r1 >= Kc, jnp.maximum(dropped, bound), dropped)
        # the new node (slot n, the same for every tree)
        kn, sn, dn = jax.vmap(gen)(pkd, pst, r)
        # Tie every value written below to every per-tree read above: without a
        # data dependency XLA cannot prove the reads happen before the in-place
        # writes and copies whole arrays every step.
        # (an optimization_barrier does not do it; a float zero does).
        zero = _zero_of(nxt) + _zero_of(plp) + (_zero_of(dropped) if trunc else 0.0)
        dn = dn + zero[:, None]
        m = m + zero
        c_new = plp + nxt
        row = jnp.where(blk_ix == jj[:, None], c_new[:, None], row)
        cand = cand.at[jb, b_ix, jj].set(c_new, unique_indices=True)
        bmax = bmax.at[jb, b_ix].set(jnp.max(row, axis=1), unique_indices=True)
        ptr = ptr.at[j, b_ix].set(r1, unique_indices=True)
        # write slot n
        cn = m + dn[:, 0]
        nb, no = n // blk, n % blk
        cand = jax.lax.dynamic_update_slice(cand, cn[None, :, None], (nb, 0, no))
        bm = jax.lax.dynamic_slice(bmax, (nb, 0), (1, B))
        bmax = jax.lax.dynamic_update_slice(bmax, jnp.maximum(bm, cn[None]), (nb, 0))

        def put(a, v):
            return jax.lax.dynamic_update_slice(a, v[None], (n,) + (0,) * (a.ndim - 1))

        tab = put(tab, dn)
        if trunc:
            tail = put(tail, _tail_bound(dn, V))
        lp = put(lp, m)
        par = put(par, j - 1)
        dep = put(dep, pdep + 1)
        rk = put(rk, r)
        st = put(st, sn)
        kd = put(kd, kn)
        return cand, bmax, tab, tail, ptr, lp, par, dep, rk, st, kd, dropped

    carry = (cand, bmax, tab, tail, ptr, lp, par, dep, rk, st, kd, dropped)
    cand, bmax, tab, tail, ptr, lp, par, dep, rk, st, kd, dropped = jax.lax.fori_loop(0, P, body, carry)
    out = lambda a: jnp.moveaxis(a[1:], 0, 1)
    tree = DraftTree(parent=out(par), depth=out(dep), logP=out(lp), rank=out(rk), state=out(st), key=out(kd))
    return tree, dropped


def oracle_batch(law: Law, tree_keys, P: int, K: int, *, K_keep: int | None = None, devices=None) -> DraftTree:
    """Oracle trees T*_P for a batch of tree keys (``tree_keys``: key array [B]).

    Exactly the trees of :func:`oracle_one` (same nodes, order and tie-breaks),
    computed by the blocked best-first search of :func:`_oracle_kernel`.
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
    traced = isinstance(tree_keys, jax.core.Tracer)
    Kc = K if traced else keep_entries(P, K, K_keep)
    blk = _block_size(P + 1)
    kernel = _oracle_kernel
    if devices is not None and len(devices) > 1 and not traced:
        kernel, tree_keys = _sharded(tuple(devices), tree_keys)
    tree, dropped = kernel(law, tree_keys, P=P, K=K, Kc=Kc, blk=blk)
    while Kc < K:
        bad = np.asarray(dropped >= tree.logP[:, -1])
        if not bad.any():
            break
        Kc = min(K, 4 * Kc)
        t2, dropped = kernel(law, tree_keys, P=P, K=K, Kc=Kc, blk=blk)
        tree = _merge(jnp.asarray(bad), tree, t2)
        dropped = jnp.where(jnp.asarray(bad), dropped, NEG_INF)
    return tree


@cache
def _sharded_kernel(devices: tuple, P: int, K: int, Kc: int, blk: int):
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(devices), ("trees",))
    f = jax.shard_map(
        lambda law, keys: _oracle_kernel(law, keys, P=P, K=K, Kc=Kc, blk=blk),
        mesh=mesh,
        in_specs=(PartitionSpec(), PartitionSpec("trees")),
        out_specs=PartitionSpec("trees"),
        check_vma=False,
    )
    return jax.jit(f), mesh


def _sharded(devices: tuple, tree_keys):
    """The kernel split over ``devices`` along the batch axis, and the keys placed there."""
    from jax.sharding import NamedSharding, PartitionSpec

    n = len(devices)
    if tree_keys.shape[0] % n:
        raise BrwsimError(f"a batch of {tree_keys.shape[0]} trees does not split evenly over {n} devices")

    def kernel(law, keys, P, K, Kc, blk):
        f, mesh = _sharded_kernel(devices, P, K, Kc, blk)
        return f(law, keys)

    _, mesh = _sharded_kernel(devices, 1, 1, 1, 4)
    return kernel, jax.device_put(tree_keys, NamedSharding(mesh, PartitionSpec("trees")))


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


def oracle_memory(law: Law, P: int, K: int | None = None) -> int:
    """Approximate bytes one tree needs in :func:`_oracle_kernel` (node table, slots, frontier, node draw)."""
    K = min(law.vocab, P) if K is None else K
    Kc = keep_entries(P, K)
    return 4 * (P + 1) * (Kc + 2) + 48 * (P + 1) + 16 * law.vocab


def default_batch(law: Law, P: int, budget: int = 256 * 2**20) -> int:
    """Trees per oracle step: fill ``budget`` bytes, at most 1024 trees."""
    return int(max(1, min(1024, budget // oracle_memory(law, P))))


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
