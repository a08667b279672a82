"""The real token tree's best-first search (the oracle T*_P, and top-P-by-Q on a drafter's rows).

This is :func:`brwsim.oracle.best_first_one`'s search (the same commit order:
exact best-first, ties shallow-first) for a tree whose node distributions
come from a model, not a law: rows are asked lazily and in batches of
``batch`` nodes per forward pass, and end-of-sequence tokens have no
children. It is the one search of the real-model side: the oracle
(:func:`oracle_tree` on the target's context) and every drafter's
top-P-by-Q tree (on the drafter's view) run it. tests/llm/measure/test_measure.py
checks it against :func:`brwsim.oracle.oracle_one` on a synthetic law.
"""

from __future__ import annotations

import dataclasses
import heapq
import math

import numpy as np

from ...errors import BrwsimError
from ..sources import Context, NodeQuery, answer_rows
from ..sources._query import inverse_cdf


def row_stats(logp: np.ndarray, K: int):
    """Per row of ``logp [B, V]`` on the host: top-K (ids, log-probs) sorted decreasing, H, M2 (a context answers
    the same as a :class:`~brwsim.llm.sources.NodeQuery`)."""
    a = answer_rows(logp, NodeQuery(K=K, moments=True))
    return a.ids, a.logp, a.H, a.M2


def sample_rows(logp: np.ndarray, rng: np.random.Generator, index=None) -> np.ndarray:
    """One token per row of ``logp [B, V]`` (inverse-CDF sampling in float64); with ``index``, one token per
    entry, from row ``index[i]`` (the same draws as sampling ``logp[index]``, each distinct row summed once)."""
    n = logp.shape[0] if index is None else len(index)
    return inverse_cdf(logp, rng.random(n), index)


@dataclasses.dataclass
class OracleTree:
    """The real oracle tree: nodes in best-first order (T*_P = the first P)."""

    values: np.ndarray  # [P_max] E[X | prompt] of T*_1 .. T*_Pmax
    logP: np.ndarray  # [P_max] log path probability of each committed node
    depth: np.ndarray  # [P_max]
    prefixes: list  # token ids of each committed node
    evaluated: int  # nodes whose distribution was computed (forward-pass tokens)
    passes: int  # batched calls


class _RealTree:
    """The part of a real token tree seen so far: node prefixes, path log-probs, each evaluated node's top-K."""

    def __init__(self, ctx: Context, K: int, batch: int, eos):
        self.ctx, self.K, self.batch, self.eos = ctx, K, batch, eos
        self.prefix: list[tuple[int, ...]] = [()]  # node 0 = root
        self.logP = [0.0]
        self.tops: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.child_id: dict[tuple[int, int], int] = {}
        self.heap: list = []
        self.seq = 0
        self.passes = self.evaluated = 0
        a = ctx.query([()], NodeQuery(K=K))
        self.K = a.ids.shape[1]  # K, or the vocabulary when smaller
        self.tops[0] = (a.ids[0], a.logp[0].astype(np.float64))

    def push_child(self, parent: int, rank: int):
        """The child of given rank enters the heap as a candidate (if its probability is positive)."""
        lp = self.logP[parent] + float(self.tops[parent][1][rank])
        if math.isfinite(lp):
            heapq.heappush(self.heap, (-lp, len(self.prefix[parent]) + 1, 1, self.seq, parent, rank))
            self.seq += 1

    def push_expand(self, v: int):
        """Node v's expansion enters the heap, keyed by its own log P (an upper bound for its children)."""
        heapq.heappush(self.heap, (-self.logP[v], len(self.prefix[v]) + 1, 0, self.seq, v, -1))
        self.seq += 1

    def node_of(self, parent: int, rank: int) -> int:
        key = (parent, rank)
        if key not in self.child_id:
            self.child_id[key] = len(self.prefix)
            self.prefix.append(self.prefix[parent] + (int(self.tops[parent][0][rank]),))
            self.logP.append(self.logP[parent] + float(self.tops[parent][1][rank]))
        return self.child_id[key]

    def evaluate(self, v: int) -> None:
        """Node v's distribution, with up to ``batch - 1`` nodes from the top of the heap in the same pass."""
        group = [v]
        for e in heapq.nsmallest(4 * self.batch, self.heap):
            if len(group) >= self.batch:
                break
            n = e[4] if e[5] < 0 else self.node_of(e[4], e[5])
            if n not in self.tops and n not in group and self.prefix[n][-1] not in self.eos:
                group.append(n)
        a = self.ctx.query([self.prefix[n] for n in group], NodeQuery(K=self.K))
        for j, n in enumerate(group):
            self.tops[n] = (a.ids[j], a.logp[j].astype(np.float64))
        self.passes += 1
        self.evaluated += len(group)

    def step(self, committed: list) -> None:
        """Pop the heap: commit a candidate child, or expand a committed node."""
        _, _, kind, _, a, b = heapq.heappop(self.heap)
        if kind == 1:  # a candidate child: commit it
            n = self.node_of(a, b)
            committed.append(n)
            if b + 1 < self.K:
                self.push_child(a, b + 1)
            if self.prefix[n][-1] not in self.eos:
                self.push_expand(n)
        else:  # expansion of committed node a
            if a not in self.tops:
                self.evaluate(a)
            self.push_child(a, 0)


def oracle_tree(ctx: Context, P_max: int, batch: int = 4, eos=frozenset(), K: int | None = None) -> OracleTree:
    """Exact best-first expansion of the real token tree.

    The heap holds candidate children (known path log-probability; siblings
    enter one at a time, in rank order, since only the best unchosen sibling
    can be next) and *expansions* of committed nodes, keyed by the node's own
    log-probability, an upper bound for all its children. Popping an
    expansion whose distribution is unknown evaluates it together with up to
    ``batch - 1`` other nodes taken from the top of the heap (the ones most
    likely to be needed next) in one call. Commit order is exact best-first,
    ties shallow-first; evaluating extra nodes only costs time. Nodes ending
    in an end-of-sequence token have no children.
    """
    if P_max < 1:
        raise BrwsimError(f"P must be >= 1, got {P_max}")
    t = _RealTree(ctx, K or P_max, batch, eos)
    t.push_child(0, 0)
    committed: list[int] = []
    while len(committed) < P_max and t.heap:
        t.step(committed)
    lp = np.array([t.logP[n] for n in committed])
    vals = np.cumsum(np.exp(lp))
    if len(committed) < P_max:  # the whole tree is smaller than P_max
        vals = np.concatenate([vals, np.full(P_max - len(committed), vals[-1] if len(vals) else 0.0)])
        lp = np.concatenate([lp, np.full(P_max - len(committed), -np.inf)])
    return OracleTree(
        values=vals,
        logP=lp,
        depth=np.array([len(t.prefix[n]) for n in committed]),
        prefixes=[t.prefix[n] for n in committed],
        evaluated=t.evaluated,
        passes=t.passes,
    )
