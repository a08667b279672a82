"""The plain best-first search, one tree at a time: the oracle's specification.

``T*_P`` is the set of the P non-root nodes of largest path probability
``P(v)`` (docs/theory.md, "The oracle"). Best-first search finds it: keep,
for every node already taken (and the root), the score of its best child not
yet taken; take the largest; replace it by its parent's next child and add
the new node's own best child. Nodes come out in non-increasing score, so the
first ``n`` nodes of a run at ``P`` are the ``n``-node tree for every
``n <= P``, and the result is prefix-closed. Ties go to the earliest-taken
parent. :func:`best_first_one` is the search for any score (the drafter's
``Q(v)`` for top-P-by-Q); :func:`oracle_one` scores by ``P(v)`` itself.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .._keys import dist_key, state_key
from ..laws import Law
from ..tree import NEG_INF, DraftTree, child_of, empty_tree, record_node

# table(node_key, state) -> (score [K], target log-prob [K], target rank [K]) of a node's
# children in the order the search takes them (decreasing score)
NodeTable = Callable


def best_first_one(law: Law, tree_key, P: int, K: int, table: NodeTable) -> DraftTree:
    """The P nodes of largest path score (sum of the children's scores along the path), best first.

    The tree records the *target's* path log-probability and rank of every
    node, whatever the score. Cost: P node tables plus O(P^2) for the
    frontier maxima.
    """
    S = P + 1  # slot 0 is the root, slot i + 1 the i-th node taken
    impl = jax.random.key_impl(tree_key)
    kd = jax.random.key_data(tree_key)
    s0 = law.init_state(state_key(tree_key))
    q0, p0, r0 = table(tree_key, s0)
    qtab = jnp.full((S, K), NEG_INF, jnp.float32).at[0].set(q0)
    ptab = jnp.full((S, K), NEG_INF, jnp.float32).at[0].set(p0)
    rtab = jnp.zeros((S, K), jnp.int32).at[0].set(r0)
    cand = jnp.full((S,), NEG_INF, jnp.float32).at[0].set(q0[0])
    ptr = jnp.zeros((S,), jnp.int32)
    slot_q = jnp.zeros((S,), jnp.float32)
    slot_p = jnp.zeros((S,), jnp.float32)
    slot_key = jnp.zeros((S,) + kd.shape, kd.dtype).at[0].set(kd)
    slot_state = jnp.zeros((S,), jnp.int32).at[0].set(s0)
    slot_depth = jnp.zeros((S,), jnp.int32)

    def body(i, st):
        qtab, ptab, rtab, cand, ptr, slot_q, slot_p, slot_key, slot_state, slot_depth, out = st
        j = jnp.argmax(cand)
        ok = cand[j] > NEG_INF
        r = ptr[j]
        rc = jnp.minimum(r, K - 1)
        sq = cand[j]
        lp = slot_p[j] + ptab[j, rc]
        prank = rtab[j, rc]
        k, s = child_of(law, jax.random.wrap_key_data(slot_key[j], impl=impl), slot_state[j], prank)
        qv, pv, rv = table(k, s)
        nxt = jnp.where(r + 1 < K, qtab[j, jnp.minimum(r + 1, K - 1)], NEG_INF)
        cand = cand.at[j].set(slot_q[j] + nxt)
        ptr = ptr.at[j].set(r + 1)
        n = i + 1
        dep = slot_depth[j] + 1
        kdn = jax.random.key_data(k)
        qtab, ptab, rtab = qtab.at[n].set(qv), ptab.at[n].set(pv), rtab.at[n].set(rv)
        cand = cand.at[n].set(jnp.where(ok, sq + qv[0], NEG_INF))
        slot_q, slot_p = slot_q.at[n].set(sq), slot_p.at[n].set(lp)
        slot_key, slot_state, slot_depth = slot_key.at[n].set(kdn), slot_state.at[n].set(s), slot_depth.at[n].set(dep)
        out = record_node(out, i, j - 1, dep, jnp.where(ok, lp, NEG_INF), prank, s, kdn)
        return qtab, ptab, rtab, cand, ptr, slot_q, slot_p, slot_key, slot_state, slot_depth, out

    st = (qtab, ptab, rtab, cand, ptr, slot_q, slot_p, slot_key, slot_state, slot_depth, empty_tree(P, kd))
    return jax.lax.fori_loop(0, P, body, st)[-1]


def oracle_one(law: Law, tree_key, P: int, K: int) -> DraftTree:
    """The oracle tree T*_P of one realised tree: best-first by the target's own path probability."""

    def table(k, s):
        d = law.node_logp(dist_key(k), s, K)
        return d, d, jnp.arange(K, dtype=jnp.int32)

    return best_first_one(law, tree_key, P, K, table)
