"""Static trees of drafter-rank paths (the Medusa / EAGLE-1 format) and the tree of P nodes they give.

A static tree is a list of rank paths in the drafter's order (``[[0], [1],
[0, 0], ...]``, rank 0 = the drafter's top token), read from a JSON file or
the complete K-ary tree. Paths are taken in breadth-first order (by length,
then lexicographically) and the first P form the tree at budget P; the set
must be prefix-closed.
"""

from __future__ import annotations

import itertools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import BrwsimError
from ..laws import Law
from ..tree import NEG_INF, DraftTree, child_of, empty_tree, record_node
from ._builders import node_qtable, root_state
from ._draftlaws import DraftLaw


def static_one(law: Law, dlaw: DraftLaw, tree_key, parents, qranks, K: int) -> DraftTree:
    """A static tree: node i is the child of drafter rank ``qranks[i]`` of node ``parents[i]`` (-1 = root).

    ``parents``/``qranks`` are int arrays ``[P]`` with parents before children; ``K`` > every q-rank.
    """
    P = parents.shape[0]
    impl = jax.random.key_impl(tree_key)
    kd = jax.random.key_data(tree_key)
    s0 = root_state(law, tree_key)
    q0, p0, r0 = node_qtable(law, dlaw, tree_key, s0, K)
    S = P + 1
    ptab = jnp.full((S, K), NEG_INF, jnp.float32).at[0].set(p0)
    rtab = jnp.zeros((S, K), jnp.int32).at[0].set(r0)
    slot_p = jnp.zeros((S,), jnp.float32)
    slot_key = jnp.zeros((S,) + kd.shape, kd.dtype).at[0].set(kd)
    slot_state = jnp.zeros((S,), jnp.int32).at[0].set(s0)
    slot_depth = jnp.zeros((S,), jnp.int32)

    def body(i, st):
        ptab, rtab, slot_p, slot_key, slot_state, slot_depth, out = st
        j = parents[i] + 1
        r = qranks[i]
        lp = slot_p[j] + ptab[j, r]
        prank = rtab[j, r]
        pk = jax.random.wrap_key_data(slot_key[j], impl=impl)
        k, s = child_of(law, pk, slot_state[j], prank)
        _, pv, rv = node_qtable(law, dlaw, k, s, K)
        n = i + 1
        dep = slot_depth[j] + 1
        kdn = jax.random.key_data(k)
        ptab, rtab, slot_p = ptab.at[n].set(pv), rtab.at[n].set(rv), slot_p.at[n].set(lp)
        slot_key, slot_state, slot_depth = slot_key.at[n].set(kdn), slot_state.at[n].set(s), slot_depth.at[n].set(dep)
        out = record_node(out, i, j - 1, dep, lp, prank, s, kdn)
        return ptab, rtab, slot_p, slot_key, slot_state, slot_depth, out

    st = (ptab, rtab, slot_p, slot_key, slot_state, slot_depth, empty_tree(P, kd))
    return jax.lax.fori_loop(0, P, body, st)[-1]


def bfs_order(paths) -> list[tuple[int, ...]]:
    """Rank paths sorted breadth-first (by length, then lexicographically), checked prefix-closed."""
    out = []
    seen = set()
    for p in paths:
        if not isinstance(p, (list, tuple)) or not p or not all(isinstance(x, int) and x >= 0 for x in p):
            raise BrwsimError(f"rank path {p!r} must be a non-empty list of integers >= 0, e.g. [0, 1]")
        t = tuple(int(x) for x in p)
        if t in seen:
            raise BrwsimError(f"rank path {list(t)} is listed twice")
        seen.add(t)
        out.append(t)
    for t in out:
        if len(t) > 1 and t[:-1] not in seen:
            raise BrwsimError(
                f"rank paths are not prefix-closed: {list(t)} is listed but its parent {list(t[:-1])} is not"
            )
    return sorted(out, key=lambda t: (len(t), t))


def tree_arrays(paths) -> tuple[np.ndarray, np.ndarray]:
    """(parents, qranks) int32 arrays of BFS-ordered, prefix-closed rank paths."""
    index = {p: i for i, p in enumerate(paths)}
    parents = np.array([index[p[:-1]] if len(p) > 1 else -1 for p in paths], np.int32)
    qranks = np.array([p[-1] for p in paths], np.int32)
    return parents, qranks


def kary_paths(k: int, n: int) -> list[tuple[int, ...]]:
    """The first n nodes, breadth-first, of the complete k-ary tree."""
    out: list[tuple[int, ...]] = []
    layer = [()]
    while len(out) < n:  # each layer cut at the nodes still needed: O(n) whatever k is
        layer = list(itertools.islice((p + (r,) for p in layer for r in range(k)), n - len(out)))
        out += layer
    return out


def load_paths(path: str) -> list[tuple[int, ...]]:
    """Read a JSON list of rank paths (Medusa / EAGLE-1 ``choices`` format)."""
    try:
        with open(os.path.expanduser(path)) as f:
            data = json.load(f)
    except OSError as e:
        raise BrwsimError(f"static tree file {path!r} cannot be read: {e.strerror or e}") from None
    except ValueError as e:
        raise BrwsimError(f"static tree file {path!r} is not JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(data, list) or not data:
        raise BrwsimError(f"static tree file {path!r} must hold a non-empty JSON list of rank paths like [[0], [0, 1]]")
    return bfs_order(data)
