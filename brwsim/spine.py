"""Spine walks: the target's own sampled continuation (THEORY.md section 4).

A spine walk starts at the root of a realised tree and, at every node, moves
to a child drawn from the node's whole distribution ``p_u``. It visits the
same nodes (same keys, see :mod:`brwsim.tree`) the oracle would. Its
cumulative surprisal ``S_d = sum_{k<=d} xi_k``, ``xi = -log p_u(child)``, is the
random walk of the many-to-one lemma.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .laws import Law, log_moments
from .tree import child_key, dist_key, state_key


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
    """One walk of ``depth`` steps from the root of the tree with ``tree_key``."""
    s0 = law.init_state(state_key(tree_key))

    def step(carry, d):
        k, s = carry
        lp = law.full_logp(dist_key(k), s)
        c = jax.random.categorical(jax.random.fold_in(walk_key, d), lp)
        xi = -lp[c]
        # rank among the children: entries strictly more likely, plus equal ones
        # of smaller index (the order top_k uses for ties)
        idx = jnp.arange(lp.shape[0])
        rank = jnp.sum(lp > lp[c]) + jnp.sum((lp == lp[c]) & (idx < c))
        h, m2 = log_moments(lp)
        kc = child_key(k, rank)
        sc = law.child_state(state_key(kc), s, rank)
        return (kc, sc), (xi, h, m2, rank.astype(jnp.int32), s)

    _, out = jax.lax.scan(step, (tree_key, s0), jnp.arange(depth))
    return Spine(*out)


@partial(jax.jit, static_argnames=("depth",))
def spine_batch(law: Law, tree_keys, walk_keys, depth: int) -> Spine:
    return jax.vmap(lambda tk, wk: spine_one(law, tk, wk, depth))(tree_keys, walk_keys)


def spine_moments(law: Law, seed: int = 0, walks: int = 2048, depth: int = 64, burn: int = 16):
    """Long-run mean entropy and second log-moment along the spine.

    Averages H and M2 of the nodes at depths ``burn .. depth - 1`` of ``walks``
    independent spine walks; the standard error treats each walk's average as
    one observation. Per-state values (over all visited nodes) go in
    ``per_state``.
    """
    from .estimate import tree_keys
    from .theory import Moments

    tk = tree_keys(seed, 0, walks, stream=3)
    wk = tree_keys(seed, 0, walks, stream=4)
    sp = spine_batch(law, tk, wk, depth=depth)
    H = np.asarray(sp.H, np.float64)[:, burn:]
    M2 = np.asarray(sp.M2, np.float64)[:, burn:]
    st = np.asarray(sp.state)[:, burn:]
    h_w, m_w = H.mean(1), M2.mean(1)
    per_state = {}
    for i, name in enumerate(law.state_names()):
        sel = st == i
        per_state[name] = {
            "fraction": float(sel.mean()),
            "mu": float(H[sel].mean()) if sel.any() else math.nan,
            "mu2": float(M2[sel].mean()) if sel.any() else math.nan,
        }
    return Moments(
        mu=float(h_w.mean()),
        mu2=float(m_w.mean()),
        mu_se=float(h_w.std(ddof=1) / math.sqrt(walks)),
        mu2_se=float(m_w.std(ddof=1) / math.sqrt(walks)),
        exact=False,
        per_state=per_state,
    )
