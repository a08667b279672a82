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

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

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
    out = DraftTree(
        parent=jnp.full((P,), -1, jnp.int32),
        depth=jnp.zeros((P,), jnp.int32),
        logP=jnp.full((P,), NEG_INF, jnp.float32),
        rank=jnp.zeros((P,), jnp.int32),
        state=jnp.zeros((P,), jnp.int32),
        key=jnp.zeros((P,) + kd.shape, kd.dtype),
    )
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
        out = DraftTree(
            parent=out.parent.at[i].set(j - 1),
            depth=out.depth.at[i].set(dep),
            logP=out.logP.at[i].set(lp),
            rank=out.rank.at[i].set(r),
            state=out.state.at[i].set(s),
            key=out.key.at[i].set(kd_new),
        )
        return tab, cand, ptr, slot_lp, slot_key, slot_state, slot_depth, out

    st = (tab, cand, ptr, slot_lp, slot_key, slot_state, slot_depth, out)
    return jax.lax.fori_loop(0, P, body, st)[-1]


@partial(jax.jit, static_argnames=("P", "K"))
def oracle_batch(law: Law, tree_keys, P: int, K: int) -> DraftTree:
    """Oracle trees for a batch of tree keys (``tree_keys``: key array [B])."""
    return jax.vmap(lambda k: oracle_one(law, k, P, K))(tree_keys)


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
    P = tree.logP.shape[-1]
    impl = jax.random.key_impl(tree_key)
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
    del impl, P
    return jax.lax.while_loop(cond, body, init)[2]


@partial(jax.jit, static_argnames=("K",))
def sample_accepted_batch(law: Law, tree_keys, trees: DraftTree, walk_keys, K: int) -> jax.Array:
    return jax.vmap(lambda tk, t, wk: sample_accepted_one(law, tk, t, wk, K))(tree_keys, trees, walk_keys)
