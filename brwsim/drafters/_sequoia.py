"""Sequoia's static tree: positional acceptance rates and the dynamic program; the greedy (Tunstall) tree."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .._keys import Stream, stream_key
from .._stats import sample_chunks
from ..errors import BrwsimError
from ..laws import Law
from ._builders import node_qtable, root_state
from ._draftlaws import DraftLaw


def acceptance_rates(key, law: Law, dlaw: DraftLaw, K: int, samples: int = 4096):
    """``a[k] = E[p_u(x_k)]``, x_k the drafter's k-th ranked token, k < K; Monte Carlo over tree roots.

    Returns (mean [K], standard error [K]) as float64 arrays (stream ``ACCEPTANCE`` of the run key).
    """
    f = jax.jit(jax.vmap(lambda kk: jnp.exp(node_qtable(law, dlaw, kk, root_state(law, kk), K)[1])))
    (x,) = sample_chunks(f, stream_key(key, Stream.ACCEPTANCE), samples, law.vocab)
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
    stack = [(L, n, ())]  # (levels left, nodes to place, prefix): an explicit stack, a chain may be 4096 deep
    while stack:
        lev, m, prefix = stack.pop()
        for k in range(K):
            if m == 0:
                break
            j = int(choice[lev, k, m])
            if j > 0:
                node = prefix + (k,)
                paths.append(node)
                stack.append((lev if depth is None else lev - 1, j - 1, node))
                m -= j
    return float(Vt[L, n]), sorted(paths, key=lambda t: (len(t), t))


def greedy_tree(a, n: int) -> tuple[float, list[tuple[int, ...]]]:
    """The n rank paths of largest prod a[rank] (best-first with a heap, O(n log n)); prefix-closed when a is
    non-increasing. Kobus and Gunduz build their optimal drafting tree this way (Tunstall's rule)."""
    a = np.asarray(a, np.float64)
    order = np.argsort(-a, kind="stable")
    heap = [(-a[order[0]], (int(order[0]),), 0)]
    out, total = [], 0.0
    for _ in range(n):  # one path a step; every step pushes its first child, so the heap is never empty
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


def sequoia_paths(key, law: Law, dlaw: DraftLaw, P: int, depth: int | None, samples: int = 4096):
    """Sequoia's P-node static tree for a law and draft law (its rates from the run key ``key``)."""
    a, _ = acceptance_rates(key, law, dlaw, min(law.vocab, P), samples=samples)
    return sequoia_dp(a, P, depth)[1]


def _floats(text: str, where: str) -> list[float]:
    """Numbers separated by commas or white space (brackets and a ``tensor(...)`` wrapper ignored)."""
    body = text.replace("tensor(", " ").replace("[", " ").replace("]", " ").replace(")", " ")
    try:
        return [float(x) for x in body.replace(",", " ").split()]
    except ValueError as e:
        raise BrwsimError(f"{where}: cannot read the acceptance rates as numbers ({e})") from None


def _sequoia_layout(v: list[float], where: str) -> list[float]:
    """Sequoia's saved vector [0, a_1, ..., a_w, r] -> [a_1, ..., a_w]: its leading 0 and its last entry (the share
    of calls with no child accepted, which tree_search.py drops) removed; the whole must sum to 1."""
    if len(v) < 3 or v[0] != 0.0 or abs(sum(v) - 1.0) > 1e-4:
        raise BrwsimError(
            f"{where} is not Sequoia's saved acceptance vector [0, a_1, ..., a_w, r] (a leading 0, summing to 1; "
            f"got {len(v)} entries, first {v[0] if v else None!r}, sum {sum(v):.6g}); or give a comma list of rates"
        )
    return v[1:-1]


def _looked_up(path: Path, test: str) -> bool:
    """``path.exists()`` or ``path.is_file()``, False where the OS will not look the name up (a long comma list
    of rates is a name too long for a file, not an error)."""
    try:
        return getattr(path, test)()
    except (OSError, ValueError):
        return False


def read_acceptance(text: str, load_tensor: Callable[[Path], list] | None = None) -> np.ndarray:
    """Positional acceptance rates ``a[k]`` (k = 0: the drafter's top-ranked child) from a comma list
    (``0.63,0.11,0.06``) or from Sequoia's saved vector: a torch ``.pt`` file, or a text file of its numbers.
    Sequoia (tests/test_accept.py) saves [0, a_1, ..., a_w, r]: a leading 0, the rates of ranks 1..w, and the
    share r of calls where no child was accepted (the entries sum to 1); its tree_search.py drops r and indexes
    ranks from 1, so the rates read are the entries between. Every rate must be finite in [0, 1] and their sum at
    most 1 (each is the probability of a different event: the accepted child has that rank). ``load_tensor(path)``
    reads a ``.pt`` file's 1-D tensor as numbers (torch's; :func:`brwsim.speedup.acceptance_vector` passes it)."""
    if not isinstance(text, str) or not text.strip():
        raise BrwsimError("give an acceptance vector: a comma list of rates (0.63,0.11,...) or Sequoia's saved file")
    text = text.strip()
    where = f"acceptance vector {text!r}"
    path = Path(text).expanduser()
    if path.suffix == ".pt" or _looked_up(path, "exists"):
        if not _looked_up(path, "is_file"):
            raise BrwsimError(f"{where}: no such file (a .pt or text file of Sequoia's acceptance vector)")
        if path.suffix == ".pt":
            if load_tensor is None:
                raise BrwsimError(f"{where}: a .pt file needs torch's loader (brwsim.speedup.acceptance_vector)")
            v = [float(x) for x in load_tensor(path)]
        else:
            try:
                v = _floats(path.read_text(), where)
            except UnicodeDecodeError:
                raise BrwsimError(f"{where} is not a text file of numbers (a torch file ends in .pt)") from None
        a = _sequoia_layout(v, where)
    else:
        a = _floats(text, where)
    a = np.asarray(a, np.float64)
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1) or a.sum() > 1 + 1e-6:
        raise BrwsimError(f"{where}: rates must be finite numbers in [0, 1] summing to at most 1, got {a.tolist()}")
    return a


def sequoia_budgets(a, P_list, depth: int | None = None) -> list[dict]:
    """Per budget P of ``P_list``: the best static tree of at most P draft nodes under the rates ``a``
    (:func:`sequoia_dp`, which may skip ranks), its value X (expected accepted draft tokens) and its rank paths,
    with Sequoia's conventions beside: its budget m = P + 1 counts the root, its value tau = X + 1 counts the
    bonus token, its max_depth = depth + 1 counts the root's level."""
    a = np.asarray(a, np.float64)
    out = []
    for P in sorted({int(p) for p in P_list}):
        value, paths = sequoia_dp(a, P, depth)
        deepest = max((len(p) for p in paths), default=0)
        out.append({"P": P, "X": value, "m": P + 1, "tau": value + 1.0, "depth": deepest, "nodes": len(paths),
                    "paths": [list(p) for p in paths]})  # fmt: skip
    return out
