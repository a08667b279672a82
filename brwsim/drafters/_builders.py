"""Tree builders that choose from the drafter's q only: top-P-by-Q, the greedy chain, EAGLE's dynamic tree.

Each returns a :class:`brwsim.tree.DraftTree` with the oracle's meaning:
``logP`` is the path log-probability under the *target* and ``rank`` the
node's target rank among its siblings (so ``child_key(parent_key, rank)`` is
its key). What a builder *sees* is the drafter's ``q_u`` at each node it has
expanded (:func:`node_qtable`); it never looks at ``p`` to choose.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._keys import state_key
from ..errors import BrwsimError
from ..laws import Law, rank_of
from ..oracle import best_first_one
from ..tree import NEG_INF, DraftTree, child_of
from ._draftlaws import DraftLaw, node_pq


def node_qtable(law: Law, dlaw: DraftLaw, node_key, state, K: int):
    """The drafter's top-K children of a node: (log q, log p, target rank), each ``[K]``, by decreasing q."""
    lp, lq = node_pq(law, dlaw, node_key, state)
    qv, idx = jax.lax.top_k(lq, K)
    if K <= 16:  # count: O(K V)
        ranks = jax.vmap(lambda t: rank_of(lp, t))(idx)
    else:  # invert one stable sort: O(V log V); ties to the smaller index, as rank_of
        order = jnp.argsort(-lp, stable=True)
        ranks = jnp.zeros(lp.shape, jnp.int32).at[order].set(jnp.arange(lp.shape[0], dtype=jnp.int32))[idx]
    return qv, lp[idx], ranks


def root_state(law: Law, tree_key):
    return law.init_state(state_key(tree_key))


def topq_one(law: Law, dlaw: DraftLaw, tree_key, P: int, K: int) -> DraftTree:
    """The P nodes of largest Q(v), in non-increasing Q order (prefixes are the smaller budgets)."""
    return best_first_one(law, tree_key, P, K, lambda k, s: node_qtable(law, dlaw, k, s, K))


def chain_one(law: Law, dlaw: DraftLaw, tree_key, P: int) -> DraftTree:
    """The drafter's greedy path of P tokens."""

    def step(carry, i):
        k, s, lp = carry
        _, pv, rv = node_qtable(law, dlaw, k, s, 1)
        kc, sc = child_of(law, k, s, rv[0])
        lpc = lp + pv[0]
        return (kc, sc, lpc), (lpc, rv[0], sc, jax.random.key_data(kc))

    init = (tree_key, root_state(law, tree_key), jnp.float32(0))
    _, (lps, ranks, states, keys) = jax.lax.scan(step, init, jnp.arange(P))
    return DraftTree(
        parent=jnp.arange(-1, P - 1, dtype=jnp.int32),
        depth=jnp.arange(1, P + 1, dtype=jnp.int32),
        logP=lps,
        rank=ranks,
        state=states,
        key=keys,
    )


def eagle_candidates(V: int, top_k: int, depth: int) -> int:
    """How many candidates EAGLE-2's ``topK_genrate`` generates on a vocabulary of V tokens (no arrays: any size)."""
    kc = min(top_k, V)
    total, f = kc, kc
    for d in range(depth):
        if f == min(top_k, f * kc):  # the frontier no longer grows: every further level adds f * kc
            return total + (depth - d) * f * kc
        total, f = total + f * kc, min(top_k, f * kc)
    return total


def eagle_effective(V: int, P: int, top_k: int, depth: int) -> tuple[int, int, int]:
    """(children per node, frontier size, levels) that give the same best P candidates as EAGLE-2 with these
    parameters. A candidate's score is at most its parent's and it lies deeper, so it ranks after its parent: the
    best P are closed under parents, and a candidate outside the best P of its level, or beyond the first P
    children of its node, has P candidates ranked before it, and so have its descendants. Hence at most P
    children a node, P frontier nodes a level, and P - 1 levels below the first give the same tree, whatever
    top_k and depth are (``eagle:top_k=1000000000`` or ``depth=200`` at small P cost what P costs)."""
    return min(top_k, V, P), min(top_k, P), min(depth, P - 1)


def _eagle_candidates(law: Law, dlaw: DraftLaw, tree_key, top_k: int, depth: int, P: int) -> dict:
    """The candidates of EAGLE-2's ``topK_genrate`` that can enter the best P (:func:`eagle_effective`): score,
    target logP, parent, rank, depth, key, state."""
    kc, top_k, depth = eagle_effective(law.vocab, P, top_k, depth)  # kc: children proposed per frontier node
    s0 = root_state(law, tree_key)
    q0, p0, r0 = node_qtable(law, dlaw, tree_key, s0, kc)
    keys0, states0 = jax.vmap(lambda r: child_of(law, tree_key, s0, r))(r0)
    cols = {"score": [q0], "logp": [p0], "parent": [jnp.full((kc,), -1, jnp.int32)], "rank": [r0]}
    cols |= {"dep": [jnp.ones((kc,), jnp.int32)], "keyd": [jax.random.key_data(keys0)], "state": [states0]}
    f_idx = jnp.arange(kc, dtype=jnp.int32)  # frontier: candidate indices
    f_score, f_logp, f_keys, f_states = q0, p0, keys0, states0
    offset = kc
    for d in range(depth):
        f = f_idx.shape[0]
        qv, pv, rv = jax.vmap(lambda kk, ss: node_qtable(law, dlaw, kk, ss, kc))(f_keys, f_states)  # [f, kc]
        ck, cs = jax.vmap(jax.vmap(lambda pk, ps, r: child_of(law, pk, ps, r), (None, None, 0)))(f_keys, f_states, rv)
        cu = (f_score[:, None] + qv).reshape(-1)
        cl = (f_logp[:, None] + pv).reshape(-1)
        ck, cs = ck.reshape(-1), cs.reshape(-1)
        for name, v in (("score", cu), ("logp", cl), ("parent", jnp.repeat(f_idx, kc)), ("rank", rv.reshape(-1))):
            cols[name].append(v)
        cols["dep"].append(jnp.full((f * kc,), d + 2, jnp.int32))
        cols["keyd"].append(jax.random.key_data(ck))
        cols["state"].append(cs)
        _, top = jax.lax.top_k(cu, min(top_k, f * kc))
        f_idx = (offset + top).astype(jnp.int32)
        f_score, f_logp, f_keys, f_states = cu[top], cl[top], ck[top], cs[top]
        offset += f * kc
    return {name: jnp.concatenate(v) for name, v in cols.items()}


def eagle_one(law: Law, dlaw: DraftLaw, tree_key, P: int, top_k: int, depth: int) -> DraftTree:
    """EAGLE-2's ``topK_genrate`` on the realised tree; keeps the best P candidates by drafter score."""
    C = eagle_candidates(law.vocab, top_k, depth)
    if P > C:
        raise BrwsimError(
            f"eagle with top_k={top_k}, depth={depth} generates only {C} candidates, fewer than P={P}; "
            "raise top_k or depth"
        )
    c = _eagle_candidates(law, dlaw, tree_key, top_k, depth, P)
    C = c["score"].shape[0]
    order = jnp.lexsort((c["dep"], -c["score"]))[:P]
    pos = jnp.full((C,), -1, jnp.int32).at[order].set(jnp.arange(P, dtype=jnp.int32))
    par = c["parent"][order]
    ok = c["score"][order] > NEG_INF
    return DraftTree(
        parent=jnp.where(par >= 0, pos[jnp.maximum(par, 0)], -1),
        depth=c["dep"][order],
        logP=jnp.where(ok, c["logp"][order], NEG_INF),
        rank=c["rank"][order],
        state=c["state"][order],
        key=c["keyd"][order],
    )
