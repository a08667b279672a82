"""The realised token tree: its nodes, a drafted tree of P nodes, and that tree's value.

A tree is a pure function of its PRNG key ``k_root`` (docs/theory.md, "Node
keys"). Node ``u`` with key ``k_u`` has

* distribution ``law.node_logp(dist_key(k_u), s_u, K)`` (its K largest entries),
* hidden state ``s_u = law.child_state(state_key(k_u), s_parent, rank)``
  (the root's: ``law.init_state(state_key(k_root))``),
* children keys ``child_key(k_u, i)`` for rank ``i`` (0-based, decreasing ``p_u``).

So the tree does not depend on the order in which it is explored: the oracle,
every other drafter, the sampled-continuation check and the reference
implementations all see the same nodes.

A drafter returns a :class:`DraftTree`; its value is E[L(T) | U] = sum over
its nodes of P(v) (docs/theory.md, "The token tree"): :func:`tree_value`,
and :func:`prefix_values` for every prefix of the order the nodes were taken.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ._keys import child_key, dist_key, state_key
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


def root_node(law: Law, tree_key, K: int):
    """(state, sorted top-K log-probs) of the root of the tree with this key."""
    s0 = law.init_state(state_key(tree_key))
    return s0, law.node_logp(dist_key(tree_key), s0, K)


def child_of(law: Law, parent_key, parent_state, rank):
    """(key, state) of the child of given rank."""
    k = child_key(parent_key, rank)
    return k, law.child_state(state_key(k), parent_state, rank)


def child_node(law: Law, parent_key, parent_state, rank, K: int):
    """(key, state, sorted top-K log-probs) of the child of given rank."""
    k, s = child_of(law, parent_key, parent_state, rank)
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


def prefix_values(tree: DraftTree) -> jax.Array:
    """``sum_{v in first n nodes} P(v)`` for n = 1..P: E[L | U] of every prefix.

    For the oracle, entry ``n - 1`` is the value of ``T*_n``.
    """
    return jnp.cumsum(jnp.exp(tree.logP), axis=-1)


def tree_value(tree: DraftTree) -> jax.Array:
    """E[L(T) | U] = sum over the tree of P(v) (docs/theory.md, "The token tree")."""
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

    def body(st):
        _, cur, depth, d, node_key, node_state = st
        r = jax.random.categorical(jax.random.fold_in(walk_key, depth), logits_of(d))
        hit = valid & (tree.parent == cur) & (tree.rank == r)
        found = jnp.any(hit)
        nxt = jnp.argmax(hit).astype(jnp.int32)
        k, s, dn = child_node(law, node_key, node_state, jnp.minimum(r, K - 1), K)
        return found, jnp.where(found, nxt, cur), depth + found.astype(jnp.int32), dn, k, s

    init = (jnp.bool_(True), jnp.int32(-1), jnp.int32(0), d0, tree_key, s0)
    # each step goes one node deeper into the tree, so at most P steps find a node: the bound never acts, and the
    # loop ends however the tree is built
    P = tree.logP.shape[-1]

    def going(st):
        found, _, depth, *_ = st
        return jnp.logical_and(found, depth < P)

    return jax.lax.while_loop(going, body, init)[2]


@partial(jax.jit, static_argnames=("K",))
def sample_accepted_batch(law: Law, tree_keys, trees: DraftTree, walk_keys, K: int) -> jax.Array:
    """:func:`sample_accepted_one` for a batch of trees and walk keys."""
    return jax.vmap(lambda tk, t, wk: sample_accepted_one(law, tk, t, wk, K))(tree_keys, trees, walk_keys)


__all__ = [
    "DraftTree",
    "NEG_INF",
    "child_key",
    "child_node",
    "child_of",
    "dist_key",
    "empty_tree",
    "prefix_values",
    "record_node",
    "root_node",
    "sample_accepted_batch",
    "sample_accepted_one",
    "state_key",
    "tree_value",
]
