"""Spine walks on the oracle's own tree: the same node keys, a fixed depth, the whole distribution per node."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._keys import child_key, dist_key, state_key
from .._moments import entropy_moments
from ..laws import Law, rank_of


class Spine(NamedTuple):
    """Spine walks, each field ``[walks, depth]``.

    xi:    surprisal of the step into depth d + 1, -log p_u(child).
    H:     entropy of the distribution at the node left by that step.
    M2:    second log-moment of that distribution.
    rank:  rank of the chosen child (0 = most likely).
    state: hidden state of the node left by that step.
    """

    xi: jax.Array
    H: jax.Array
    M2: jax.Array
    rank: jax.Array
    state: jax.Array


def spine_one(law: Law, tree_key, walk_key, depth: int) -> Spine:
    """One walk of ``depth`` steps from the root of the tree with ``tree_key`` (couples a walk with a tree)."""
    s0 = law.init_state(state_key(tree_key))

    def step(carry, d):
        k, s = carry
        lp = law.full_logp(dist_key(k), s)
        c = jax.random.categorical(jax.random.fold_in(walk_key, d), lp)
        rank = rank_of(lp, c)
        h, m2 = entropy_moments(lp)
        kc = child_key(k, rank)
        sc = law.child_state(state_key(kc), s, rank)
        return (kc, sc), (-lp[c], h, m2, rank, s)

    _, out = jax.lax.scan(step, (tree_key, s0), jnp.arange(depth))
    return Spine(*out)


@partial(jax.jit, static_argnames=("depth",))
def spine_batch(law: Law, tree_keys, walk_keys, depth: int) -> Spine:
    """:func:`spine_one` for a batch of trees and walk keys."""
    return jax.vmap(lambda tk, wk: spine_one(law, tk, wk, depth))(tree_keys, walk_keys)
