"""Drafters beyond the oracle (THEORY.md section 6; docs/drafters.md).

Every drafter here returns a :class:`brwsim.tree.DraftTree` with the oracle's
fields and meaning: ``logP`` is the path log-probability under the *target*,
``rank`` the node's rank among its parent's children under the *target* (so
``child_key(parent_key, rank)`` is its key), so one value function
(:func:`brwsim.tree.tree_value` / :func:`~brwsim.tree.prefix_values`) and one
estimator serve them all. What a drafter *sees* is the drafter's distribution
``q_u`` at each node it has expanded (:mod:`brwsim.draftlaws`); it never
looks at ``p`` to choose.

Drafters (``NAME[:key=value,...]``):

``oracle``
    T*_P, the P nodes of largest P(v) (perfect knowledge; :mod:`brwsim.tree`).
``topq``
    the P nodes of largest drafter path probability Q(v) = prod q along the
    path: best-first search exactly as the oracle, scored by Q.
``eagle[:top_k=10,depth=7]``
    EAGLE-2/3's dynamic tree: the root's top_k children by q form layer 1;
    then ``depth`` times, every node of the current frontier (top_k nodes)
    proposes its top_k children, scored by the summed drafter log-probability,
    and the top_k of those top_k^2 candidates become the next frontier. Of all
    candidates generated (top_k + depth top_k^2), the best P = total_tokens by
    score are kept (ties to the shallower node, so the tree is prefix-closed).
    The deepest node is at depth ``depth + 1``, as in EAGLE-2's ``topK_genrate``.
``chain``
    greedy by q: the drafter's most likely child, P times.
``static:path=FILE`` / ``static:k=K``
    a fixed tree of rank paths in the drafter's order (the Medusa / EAGLE-1
    format: ``[[0], [1], [0, 0], ...]``, rank 0 = the drafter's top token), read
    from a JSON file, or the complete K-ary tree. Paths are taken in
    breadth-first order (by length, then lexicographically) and the first P
    form the tree at budget P; the tree must be prefix-closed.
``sequoia[:depth=D,samples=N]``
    Sequoia's tree: positional acceptance rates ``a[k] = E[p_u(x_k)]``, x_k
    the drafter's k-th ranked token, are estimated from the law (Monte Carlo
    over N = 4096 independent tree roots); a dynamic program picks the static tree of P
    nodes maximising ``sum over nodes of prod a[rank]`` (optionally of depth
    at most D), which is then drafted as a ``static`` tree.

All searches are jitted and vmapped over trees.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .draftlaws import DraftLaw, node_pq, parse_draft_law, target_rank
from .errors import BrwsimError, check_positive_int
from .laws import Law, parse_law
from .tree import DraftTree, child_key, empty_tree, record_node, state_key

NEG_INF = -jnp.inf
NAMES = ("oracle", "topq", "eagle", "chain", "static", "sequoia")


# ---------------------------------------------------------------------------
# node tables


def node_qtable(law: Law, dlaw: DraftLaw, node_key, state, K: int):
    """The drafter's top-K children of a node: (log q, log p, target rank), each ``[K]``, by decreasing q."""
    lp, lq = node_pq(law, dlaw, node_key, state)
    qv, idx = jax.lax.top_k(lq, K)
    if K <= 16:  # count: O(K V)
        ranks = jax.vmap(lambda t: target_rank(lp, t))(idx)
    else:  # invert one stable sort: O(V log V); ties to the smaller index, as target_rank
        order = jnp.argsort(-lp, stable=True)
        ranks = jnp.zeros(lp.shape, jnp.int32).at[order].set(jnp.arange(lp.shape[0], dtype=jnp.int32))[idx]
    return qv, lp[idx], ranks


def _child(law: Law, parent_key, parent_state, prank):
    k = child_key(parent_key, prank)
    return k, law.child_state(state_key(k), parent_state, prank)


def _root(law: Law, tree_key):
    return law.init_state(state_key(tree_key))


# ---------------------------------------------------------------------------
# top-P by Q (best-first, as the oracle, scored by the drafter)


def topq_one(law: Law, dlaw: DraftLaw, tree_key, P: int, K: int) -> DraftTree:
    """The P nodes of largest Q(v), in non-increasing Q order (prefixes are the smaller budgets)."""
    S = P + 1
    impl = jax.random.key_impl(tree_key)
    kd = jax.random.key_data(tree_key)
    s0 = _root(law, tree_key)
    q0, p0, r0 = node_qtable(law, dlaw, tree_key, s0, K)
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
        pk = jax.random.wrap_key_data(slot_key[j], impl=impl)
        k, s = _child(law, pk, slot_state[j], prank)
        qv, pv, rv = node_qtable(law, dlaw, k, s, K)
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


# ---------------------------------------------------------------------------
# chain: greedy by q


def chain_one(law: Law, dlaw: DraftLaw, tree_key, P: int) -> DraftTree:
    """The drafter's greedy path of P tokens."""
    kd0 = jax.random.key_data(tree_key)

    def step(carry, i):
        k, s, lp = carry
        _, pv, rv = node_qtable(law, dlaw, k, s, 1)
        kc, sc = _child(law, k, s, rv[0])
        lpc = lp + pv[0]
        return (kc, sc, lpc), (lpc, rv[0], sc, jax.random.key_data(kc))

    _, (lps, ranks, states, keys) = jax.lax.scan(step, (tree_key, _root(law, tree_key), jnp.float32(0)), jnp.arange(P))
    del kd0
    return DraftTree(
        parent=jnp.arange(-1, P - 1, dtype=jnp.int32),
        depth=jnp.arange(1, P + 1, dtype=jnp.int32),
        logP=lps,
        rank=ranks,
        state=states,
        key=keys,
    )


# ---------------------------------------------------------------------------
# EAGLE-2/3 dynamic tree


def eagle_one(law: Law, dlaw: DraftLaw, tree_key, P: int, top_k: int, depth: int) -> DraftTree:
    """EAGLE-2's ``topK_genrate`` on the realised tree; keeps the best P candidates by drafter score."""
    kc = min(top_k, law.vocab)  # children proposed per frontier node
    s0 = _root(law, tree_key)
    q0, p0, r0 = node_qtable(law, dlaw, tree_key, s0, kc)
    keys0, states0 = jax.vmap(lambda r: _child(law, tree_key, s0, r))(r0)
    score = [q0]
    logp = [p0]
    parent = [jnp.full((kc,), -1, jnp.int32)]
    rank = [r0]
    dep = [jnp.ones((kc,), jnp.int32)]
    keyd = [jax.random.key_data(keys0)]
    state = [states0]
    f_idx = jnp.arange(kc, dtype=jnp.int32)  # frontier: candidate indices
    f_score, f_logp, f_keys, f_states = q0, p0, keys0, states0
    offset = kc
    for d in range(depth):
        f = f_idx.shape[0]
        qv, pv, rv = jax.vmap(lambda kk, ss: node_qtable(law, dlaw, kk, ss, kc))(f_keys, f_states)  # [f, kc]
        ck, cs = jax.vmap(jax.vmap(lambda pk, ps, r: _child(law, pk, ps, r), (None, None, 0)))(f_keys, f_states, rv)
        cu = (f_score[:, None] + qv).reshape(-1)
        cl = (f_logp[:, None] + pv).reshape(-1)
        score.append(cu)
        logp.append(cl)
        parent.append(jnp.repeat(f_idx, kc))
        rank.append(rv.reshape(-1))
        dep.append(jnp.full((f * kc,), d + 2, jnp.int32))
        ck = ck.reshape(-1)
        cs = cs.reshape(-1)
        keyd.append(jax.random.key_data(ck))
        state.append(cs)
        _, top = jax.lax.top_k(cu, min(top_k, f * kc))
        f_idx = (offset + top).astype(jnp.int32)
        f_score, f_logp, f_keys, f_states = cu[top], cl[top], ck[top], cs[top]
        offset += f * kc
    score = jnp.concatenate(score)
    logp = jnp.concatenate(logp)
    parent = jnp.concatenate(parent)
    rank = jnp.concatenate(rank)
    dep = jnp.concatenate(dep)
    keyd = jnp.concatenate(keyd)
    state = jnp.concatenate(state)
    C = score.shape[0]
    if P > C:
        raise BrwsimError(
            f"eagle with top_k={top_k}, depth={depth} generates only {C} candidates, fewer than P={P}; "
            "raise top_k or depth"
        )
    order = jnp.lexsort((dep, -score))[:P]
    pos = jnp.full((C,), -1, jnp.int32).at[order].set(jnp.arange(P, dtype=jnp.int32))
    par = parent[order]
    ok = score[order] > NEG_INF
    return DraftTree(
        parent=jnp.where(par >= 0, pos[jnp.maximum(par, 0)], -1),
        depth=dep[order],
        logP=jnp.where(ok, logp[order], NEG_INF),
        rank=rank[order],
        state=state[order],
        key=keyd[order],
    )


# ---------------------------------------------------------------------------
# static trees of drafter-rank paths


def static_one(law: Law, dlaw: DraftLaw, tree_key, parents, qranks, K: int) -> DraftTree:
    """A static tree: node i is the child of drafter rank ``qranks[i]`` of node ``parents[i]`` (-1 = root).

    ``parents``/``qranks`` are int arrays ``[P]`` with parents before children; ``K`` > every q-rank.
    """
    P = parents.shape[0]
    impl = jax.random.key_impl(tree_key)
    kd = jax.random.key_data(tree_key)
    s0 = _root(law, tree_key)
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
        k, s = _child(law, pk, slot_state[j], prank)
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
    while len(out) < n:
        layer = [p + (r,) for p in layer for r in range(k)]
        out += layer
    return out[:n]


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


# ---------------------------------------------------------------------------
# Sequoia: positional acceptance rates and the dynamic program


def acceptance_rates(law: Law, dlaw: DraftLaw, K: int, samples: int = 4096, seed: int = 0):
    """``a[k] = E[p_u(x_k)]``, x_k the drafter's k-th ranked token, k < K; Monte Carlo over tree roots.

    Returns (mean [K], standard error [K]) as float64 arrays.
    """
    from .estimate import tree_keys

    f = jax.jit(jax.vmap(lambda kk: jnp.exp(node_qtable(law, dlaw, kk, _root(law, kk), K)[1])))
    chunk = max(1, min(samples, 2**22 // max(law.vocab, 1)))
    rows = []
    for start in range(0, samples, chunk):
        n = min(chunk, samples - start)
        rows.append(np.asarray(f(tree_keys(seed, start, chunk, stream=6)), np.float64)[:n])
    x = np.concatenate(rows)
    se = x.std(axis=0, ddof=1) / math.sqrt(x.shape[0]) if x.shape[0] > 1 else np.zeros(K)
    return x.mean(axis=0), se


def sequoia_dp(a, n: int, depth: int | None = None) -> tuple[float, list[tuple[int, ...]]]:
    """Best static tree of at most n nodes under positional rates ``a`` (Sequoia's dynamic program).

    Value of a tree = sum over its nodes v of prod over the edges of v's path of
    ``a[rank]``. With G_l(m) = 1 + V_{l-1}(m - 1) the best value of an m-node
    subtree hanging below a node with l levels left, and H_l(k, m) the best
    value of at most m nodes placed under ranks k, k+1, ... of one node:
    H_l(k, m) = max(H_l(k+1, m), max_{1<=j<=m} a[k] G_l(j) + H_l(k+1, m - j)),
    V_l(m) = H_l(0, m), V_0 = 0. Without a depth limit, V_{l-1} = V_l.
    Returns (value, BFS-ordered rank paths).
    """
    a = np.asarray(a, np.float64)
    K = a.shape[0]
    L = 1 if depth is None else int(depth)
    Vt = np.zeros((L + 1, n + 1))
    H = np.zeros((L + 1, K + 1, n + 1))
    choice = np.zeros((L + 1, K, n + 1), np.int64)
    for m in range(1, n + 1):
        for lev in range(1, L + 1):
            sub = lev if depth is None else lev - 1
            G = 1.0 + Vt[sub, :m]  # G(j) for j = 1..m
            for k in range(K - 1, -1, -1):
                opts = a[k] * G + H[lev, k + 1, m - 1 :: -1][:m]
                j = int(np.argmax(opts))
                if opts[j] > H[lev, k + 1, m]:
                    H[lev, k, m] = opts[j]
                    choice[lev, k, m] = j + 1
                else:
                    H[lev, k, m] = H[lev, k + 1, m]
            Vt[lev, m] = H[lev, 0, m]

    paths: list[tuple[int, ...]] = []

    def build(lev, m, prefix):
        for k in range(K):
            j = choice[lev, k, m]
            if j > 0:
                node = prefix + (k,)
                paths.append(node)
                build(lev if depth is None else lev - 1, j - 1, node)
                m -= j
            if m == 0:
                break

    build(L, n, ())
    return float(Vt[L, n]), sorted(paths, key=lambda t: (len(t), t))


def greedy_tree(a, n: int) -> tuple[float, list[tuple[int, ...]]]:
    """The n rank paths of largest prod a[rank] (best-first with a heap, O(n log n)); prefix-closed when a is
    non-increasing. Kobus and Gunduz build their optimal drafting tree this way (Tunstall's rule)."""
    a = np.asarray(a, np.float64)
    order = np.argsort(-a, kind="stable")
    heap = [(-a[order[0]], (int(order[0]),), 0)]
    out, total = [], 0.0
    while heap and len(out) < n:
        negw, path, i = heapq.heappop(heap)
        out.append(path)
        total += -negw
        if i + 1 < len(order):  # next sibling
            heapq.heappush(heap, (negw / a[order[i]] * a[order[i + 1]], path[:-1] + (int(order[i + 1]),), i + 1))
        heapq.heappush(heap, (negw * a[order[0]], path + (int(order[0]),), 0))  # first child
    return total, sorted(out, key=lambda t: (len(t), t))


def brute_force_best(a, n: int, max_rank: int | None = None) -> float:
    """Best value over *all* prefix-closed sets of at most n rank paths (exponential; tests only)."""
    a = np.asarray(a, np.float64)
    R = len(a) if max_rank is None else max_rank
    best = 0.0
    seen = {frozenset()}
    frontier = [frozenset()]
    for _ in range(n):
        nxt = []
        for s in frontier:
            cands = [(r,) for r in range(R)] + [p + (r,) for p in s for r in range(R)]
            for c in cands:
                if c in s:
                    continue
                t = s | {c}
                if t not in seen:
                    seen.add(t)
                    nxt.append(t)
                    best = max(best, sum(math.prod(a[x] for x in p) for p in t))
        frontier = nxt
    return best


def sequoia_paths(law: Law, dlaw: DraftLaw, P: int, depth: int | None, seed: int, samples: int = 4096):
    K = min(law.vocab, P)
    a, _ = acceptance_rates(law, dlaw, K, samples=samples, seed=seed)
    return sequoia_dp(a, P, depth)[1]


# ---------------------------------------------------------------------------
# the drafter registry and the batch driver


@dataclasses.dataclass(frozen=True)
class Drafter:
    """A parsed ``NAME[:key=value,...]`` drafter."""

    name: str
    top_k: int = 10
    depth: int | None = 7
    k: int | None = None
    path: str | None = None
    samples: int = 4096
    text: str = "oracle"

    @property
    def nested(self) -> bool:
        """True when the first n nodes of its P_max-node tree are its n-node tree for every n."""
        return self.name != "sequoia"


_KEYS = {
    "oracle": set(),
    "topq": set(),
    "chain": set(),
    "eagle": {"top_k", "depth"},
    "static": {"path", "k"},
    "sequoia": {"depth", "samples"},
}


def parse_drafter(spec: str | Drafter | None) -> Drafter:
    """``NAME[:key=value,...]`` with NAME in oracle, topq, eagle, chain, static, sequoia."""
    if spec is None:
        return Drafter("oracle")
    if isinstance(spec, Drafter):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise BrwsimError(f"drafter must be NAME[:key=value,...] with NAME one of {', '.join(NAMES)}; got {spec!r}")
    text = spec.strip()
    name, _, rest = text.partition(":")
    name = name.strip().lower()
    if name not in _KEYS:
        raise BrwsimError(f"drafter {text!r}: unknown name {name!r}; use one of {', '.join(NAMES)}")
    kv = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        if "=" not in item:
            raise BrwsimError(f"drafter {text!r}: {item!r} is not key=value")
        k, _, v = item.partition("=")
        k = k.strip()
        if k not in _KEYS[name]:
            allowed = ", ".join(sorted(_KEYS[name])) or "no keys"
            raise BrwsimError(f"drafter {text!r}: unknown key {k!r}; {name} takes {allowed}")
        if k in kv:
            raise BrwsimError(f"drafter {text!r}: key {k!r} given twice")
        kv[k] = v.strip()
    if name == "eagle":
        top_k = check_positive_int(f"drafter {text!r}: top_k", kv.get("top_k", "10"))
        depth = check_positive_int(f"drafter {text!r}: depth", kv.get("depth", "7"), minimum=0)
        return Drafter("eagle", top_k=top_k, depth=depth, text=text)
    if name == "static":
        if ("path" in kv) == ("k" in kv):
            raise BrwsimError(f"drafter {text!r}: give exactly one of path=FILE (rank-path list) or k=K (K-ary tree)")
        if "k" in kv:
            return Drafter("static", k=check_positive_int(f"drafter {text!r}: k", kv["k"]), text=text)
        load_paths(kv["path"])  # validate early
        return Drafter("static", path=kv["path"], text=text)
    if name == "sequoia":
        depth = check_positive_int(f"drafter {text!r}: depth", kv["depth"]) if "depth" in kv else None
        samples = check_positive_int(f"drafter {text!r}: samples", kv.get("samples", "4096"), minimum=2)
        return Drafter("sequoia", depth=depth, samples=samples, text=text)
    return Drafter(name, text=text)


@partial(jax.jit, static_argnames=("P", "K"))
def topq_batch(law, dlaw, tree_keys, P: int, K: int) -> DraftTree:
    return jax.vmap(lambda k: topq_one(law, dlaw, k, P, K))(tree_keys)


@partial(jax.jit, static_argnames=("P",))
def chain_batch(law, dlaw, tree_keys, P: int) -> DraftTree:
    return jax.vmap(lambda k: chain_one(law, dlaw, k, P))(tree_keys)


@partial(jax.jit, static_argnames=("P", "top_k", "depth"))
def eagle_batch(law, dlaw, tree_keys, P: int, top_k: int, depth: int) -> DraftTree:
    return jax.vmap(lambda k: eagle_one(law, dlaw, k, P, top_k, depth))(tree_keys)


@partial(jax.jit, static_argnames=("K",))
def static_batch(law, dlaw, tree_keys, parents, qranks, K: int) -> DraftTree:
    return jax.vmap(lambda k: static_one(law, dlaw, k, parents, qranks, K))(tree_keys)


def _static_paths(d: Drafter, law: Law, dlaw: DraftLaw, P: int, seed: int) -> list[tuple[int, ...]]:
    if d.name == "sequoia":
        return sequoia_paths(law, dlaw, P, d.depth, seed, d.samples)
    paths = kary_paths(d.k, P) if d.k is not None else load_paths(d.path)
    if len(paths) < P:
        raise BrwsimError(f"drafter {d.text!r}: the static tree has {len(paths)} nodes, fewer than P={P}")
    paths = paths[:P]
    too_deep = max(max(p) for p in paths)
    if too_deep >= law.vocab:
        raise BrwsimError(f"drafter {d.text!r}: a path uses rank {too_deep} but the vocabulary has {law.vocab} tokens")
    return paths


def draft_trees(d: Drafter, law: Law, dlaw: DraftLaw, keys, P: int, seed: int = 0) -> DraftTree:
    """The drafter's P-node trees on the trees with these keys (batch)."""
    from .tree import oracle_batch

    V = law.vocab
    if d.name == "oracle":
        return oracle_batch(law, keys, P=P, K=min(V, P))
    if d.name == "topq":
        return topq_batch(law, dlaw, keys, P=P, K=min(V, P))
    if d.name == "chain":
        return chain_batch(law, dlaw, keys, P=P)
    if d.name == "eagle":
        return eagle_batch(law, dlaw, keys, P=P, top_k=d.top_k, depth=d.depth)
    paths = _static_paths(d, law, dlaw, P, seed)
    par, qr = tree_arrays(paths)
    return static_batch(law, dlaw, keys, jnp.asarray(par), jnp.asarray(qr), K=min(V, max(max(p) for p in paths) + 1))


def _batch_size(d: Drafter, law: Law, P: int) -> int:
    V = law.vocab
    width = d.top_k if d.name == "eagle" else 1
    per_tree = 4 * (8 * V * width + 6 * (P + 1) * min(V, P)) + 64 * P
    if d.name == "eagle":
        per_tree += 64 * (d.top_k + d.depth * d.top_k**2)
    return int(max(1, min(512, 96 * 2**20 // per_tree)))


def drafter_values(
    drafter: str | Drafter,
    law: str | Law,
    draft_law: str | DraftLaw | None,
    P_list,
    trees: int,
    seed: int,
    batch: int | None = None,
) -> np.ndarray:
    """Per-tree values E[L(T) | U] of the drafter's tree at each budget: float64 ``[trees, len(P_list)]``.

    Tree n is the same realised tree the oracle sees for this seed (keys from
    :func:`brwsim.estimate.tree_keys`), so differences to the oracle are paired.
    """
    from .estimate import tree_keys
    from .tree import prefix_values

    d = parse_drafter(drafter)
    law = parse_law(law)
    dlaw = parse_draft_law(draft_law)
    dlaw.check(law)
    P_list = [int(p) for p in P_list]
    out = np.empty((trees, len(P_list)), np.float64)
    runs = [(max(P_list), list(range(len(P_list))))] if d.nested else [(p, [i]) for i, p in enumerate(P_list)]
    for P, cols in runs:
        B = min(batch or _batch_size(d, law, P), trees)
        for start in range(0, trees, B):
            n = min(B, trees - start)
            t = draft_trees(d, law, dlaw, tree_keys(seed, start, B), P, seed)
            pv = np.asarray(prefix_values(t), np.float64)[:n]
            for c in cols:
                out[start : start + n, c] = pv[:, P_list[c] - 1]
    return out


__all__ = [
    "Drafter",
    "acceptance_rates",
    "brute_force_best",
    "draft_trees",
    "drafter_values",
    "greedy_tree",
    "kary_paths",
    "load_paths",
    "parse_drafter",
    "sequoia_dp",
]


def simulate_values(
    drafter: str | Drafter,
    law: Law,
    draft_law: str | DraftLaw | None,
    P_list,
    trees: int,
    seed: int,
    batch: int | None = None,
    check: bool = False,
) -> tuple[np.ndarray, np.ndarray | None, dict]:
    """What :func:`brwsim.estimate.simulate` needs for a non-oracle drafter.

    Returns ``values`` (float64 ``[trees, max(P_list)]``; column ``P - 1``
    filled for each listed P), with ``check`` the accepted lengths of one
    sampled target continuation through the largest tree (int ``[trees]``),
    and a JSON-ready description of the drafter and its draft law (mean
    cross-entropy, KL and TV with standard errors).
    """
    from .draftlaws import draft_law_spec, draft_stats
    from .estimate import tree_keys
    from .tree import sample_accepted_batch

    d = parse_drafter(drafter)
    dlaw = parse_draft_law(draft_law)
    dlaw.check(law)
    P_list = sorted(int(p) for p in P_list)
    P_max = P_list[-1]
    vals = drafter_values(d, law, dlaw, P_list, trees, seed, batch)
    values = np.full((trees, P_max), np.nan)
    for i, p in enumerate(P_list):
        values[:, p - 1] = vals[:, i]
    accepted = None
    if check:
        accepted = np.empty((trees,), np.int64)
        B = min(batch or _batch_size(d, law, P_max), trees)
        for start in range(0, trees, B):
            n = min(B, trees - start)
            keys = tree_keys(seed, start, B)
            t = draft_trees(d, law, dlaw, keys, P_max, seed)
            acc = sample_accepted_batch(law, keys, t, tree_keys(seed, start, B, stream=1), K=law.vocab)
            accepted[start : start + n] = np.asarray(acc)[:n]
    st = draft_stats(law, dlaw, seed=seed)
    info = {"drafter": d.text, "draft_law": draft_law_spec(dlaw)}
    for name, s in st.items():
        info[name] = s.mean
        info[name + "_se"] = s.se
    return values, accepted, info
