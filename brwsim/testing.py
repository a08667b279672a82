"""Reference implementations the tests and benchmarks check brwsim against.

Independent of brwsim's own algorithms, plain and slow on purpose:

* :func:`enumerate_fixed`: the exact oracle values of a deterministic tree (a
  float64 heap over path probabilities);
* :func:`oracle_heapq` / :func:`reference_batch`: a plain ``heapq`` best-first
  oracle, one tree at a time in pure Python, on a :class:`TableLaw`;
* :class:`TableLaw` (from :mod:`brwsim.laws`): node distributions read from a fixed table (the root's
  row from the tree key, a child's row a 32-bit hash of its parent's row and
  its rank, computed identically in JAX and Python), so that a reference
  outside JAX sees exactly brwsim's tree; :func:`stored_rows` presents the
  same law as a drawn one (the oracle then stores each node's entries);
* :func:`exact_pair_law`: the target's law of its first two tokens on one tree;
* :func:`returns_within`: a call that must end within a time limit (a guard
  against a loop that never ends, in the tests).

The heap reference pops equal keys in slot order, which is the oracle's
tie-break (earliest-taken parent), and sums path log-probabilities in float32
exactly as JAX does, so the trees agree bit for bit; ``dtype="float64"``
keeps float64 sums instead, to measure the float32 error.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading

import jax
import jax.numpy as jnp
import numpy as np

from ._keys import child_key, dist_key, state_key
from .laws import TableLaw, parse_law, topk_sorted  # TableLaw re-exported: it lives in brwsim.laws
from .laws._table import child_row  # noqa: F401  (re-exported)


def enumerate_fixed(probs, P):
    """Values of the oracle trees T*_1..T*_P of the tree with ``probs`` at every node.

    A float64 heap over (path probability, path): entry ``n - 1`` is the sum of
    the ``n`` largest path probabilities. Zero probabilities are skipped.
    """
    probs = [p for p in probs if p > 0]
    heap = [(-p, (i,)) for i, p in enumerate(probs)]
    heapq.heapify(heap)
    out = []
    while len(out) < P:
        negq, path = heapq.heappop(heap)
        out.append(-negq)
        for i, p in enumerate(probs):
            heapq.heappush(heap, (negq * p, path + (i,)))
    return np.cumsum(out)


def exact_pair_law(law, tree_key) -> np.ndarray:
    """Target's law of its first two tokens (target ranks) on one tree: ``[V, V]`` probabilities."""
    law = parse_law(law)
    V = law.vocab
    s0 = law.init_state(state_key(tree_key))
    lp0 = topk_sorted(law.full_logp(dist_key(tree_key), s0), V)
    out = np.zeros((V, V))
    for a in range(V):
        kc = child_key(tree_key, a)
        sc = law.child_state(state_key(kc), s0, a)
        lp1 = topk_sorted(law.full_logp(dist_key(kc), sc), V)
        out[a] = np.exp(np.asarray(lp0[a], np.float64) + np.asarray(lp1, np.float64))
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class StoredTableLaw(TableLaw):
    """The same law, presented as a drawn one: the oracle stores each node's sorted entries (as for Dirichlet)."""

    indexed = False


jax.tree_util.register_dataclass(StoredTableLaw, data_fields=["logp"], meta_fields=[])


def stored_rows(law: TableLaw) -> StoredTableLaw:
    return StoredTableLaw(logp=law.logp)


def table_law(V: int, n_rows: int = 1024, alpha: float = 0.1, seed: int = 0) -> TableLaw:
    """A TableLaw whose rows are Dirichlet(alpha) distributions on V symbols (float32 logs, sorted)."""
    rng = np.random.default_rng(seed)
    g = rng.gamma(alpha, size=(n_rows, V)) + 1e-300
    lp = np.log(g) - np.log(g.sum(1, keepdims=True))
    lp = -np.sort(-lp, axis=1)
    return TableLaw(logp=jnp.asarray(lp, jnp.float32))


def root_rows(law: TableLaw, tree_keys) -> np.ndarray:
    """Root rows of a batch of trees (one vectorised JAX call, the same draw as the oracle)."""
    return np.asarray(jax.vmap(lambda k: law.init_state(state_key(k)))(tree_keys))


def oracle_heapq(rows: list, root_row: int, P: int, K: int, dtype: str = "float32"):
    """Best-first oracle of one tree. ``rows``: list of per-row Python float lists (sorted).

    Returns (logP, parent, rank) as lists of length P, in the order taken.
    """
    n_rows = len(rows)
    K = min(K, len(rows[0]))
    f32 = np.float32 if dtype == "float32" else float
    slot_lp = [0.0]
    slot_row = [root_row]
    ptr = [0]
    heap = [(-rows[root_row][0], 0)]
    out_lp, out_par, out_rank = [], [], []
    push, pop = heapq.heappush, heapq.heappop
    for i in range(P):
        if not heap:  # only -inf left: the oracle fills with -inf nodes
            out_lp.append(-np.inf)
            out_par.append(-1)
            out_rank.append(0)
            continue
        c, j = pop(heap)
        lp = -c
        r = ptr[j]
        ptr[j] = r + 1
        if r + 1 < K:
            push(heap, (-float(f32(slot_lp[j] + rows[slot_row[j]][r + 1])), j))
        row = child_row(slot_row[j], r, n_rows)
        slot_lp.append(lp)
        slot_row.append(row)
        ptr.append(0)
        push(heap, (-float(f32(lp + rows[row][0])), i + 1))
        out_lp.append(lp)
        out_par.append(j - 1)
        out_rank.append(r)
    return out_lp, out_par, out_rank


def table_rows(law: TableLaw) -> list:
    """The table as Python lists of floats (exact float32 values), as the reference reads it."""
    return np.asarray(law.logp, np.float32).astype(np.float64).tolist()


def reference_batch(rows: list, roots, P: int, K: int, dtype: str = "float32"):
    """Reference trees for trees with these root rows: float64 logP [B, P], int parent and rank [B, P]."""
    res = [oracle_heapq(rows, int(r), P, K, dtype) for r in roots]
    lp = np.array([x[0] for x in res], np.float64)
    par = np.array([x[1] for x in res], np.int64)
    rank = np.array([x[2] for x in res], np.int64)
    return lp, par, rank


def returns_within(seconds: float, f, *args):
    """``f(*args)`` (its JAX arrays ready), or a test failure if it has not returned within ``seconds``.

    The call runs in a daemon thread, so a loop that never ends fails the test instead of hanging it; an
    exception the call raises is raised again here.
    """
    out: list = []

    def call():
        try:
            out.append((True, jax.block_until_ready(f(*args))))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            out.append((False, e))

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"{getattr(f, '__name__', f)} did not return within {seconds} s"
    ok, value = out[0]
    if not ok:
        raise value
    return value
