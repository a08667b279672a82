"""Tree builders from a drafter's q alone (each returns the tree's nodes as token paths, parents first; the first P
are the tree at P): top-P-by-Q, the greedy chain, EAGLE-2's dynamic tree, Sequoia's static trees."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ...drafters import sequoia_dp
from ..measure import oracle_tree
from ._view import DraftView
from .lookup import LookupProposer

EAGLE_TOP_K, EAGLE_DEPTH = 10, 7


def chain_nodes(view: DraftView, P: int, eos=frozenset(), guess=None, ahead: int = 4) -> list[tuple[int, ...]]:
    """The drafter's greedy path of P tokens (shorter if it ends in an end token).

    ``guess(tip, k)``: up to k guessed next tokens of the path below ``tip``; where the tip's row is not yet
    computed, the tip and its guessed continuation are asked together (one pass of a chain), and every guess
    that matches the drafter's own choice saves a pass. The path is the same with or without guesses."""
    out, tip = [], ()
    for _ in range(P):
        if tip and tip[-1] in eos:
            break
        if guess is not None and view.known(tip) is False:
            g = guess(tip, min(ahead, P - len(out) - 1))
            view.logprobs([tip + tuple(g[:i]) for i in range(len(g) + 1)])
        tip = tip + (int(view.tops([tip])[0][0][0]),)
        out.append(tip)
    return out


class ChainGuess:
    """Guessed greedy continuations for :func:`chain_nodes`: the next token after a prefix as first seen in
    earlier paths (other drafters' chains, the oracle tree's first children), else the context's own
    continuation after the last occurrence of its final tokens (prompt lookup)."""

    def __init__(self, ids, n: int = 3):
        self.ids, self.lookup, self.next = [int(t) for t in ids], LookupProposer(n), {}

    def add(self, nodes) -> None:
        for v in nodes:
            self.next.setdefault(tuple(v[:-1]), int(v[-1]))

    def __call__(self, tip: tuple[int, ...], k: int) -> list[int]:
        out, p = [], tuple(tip)
        while len(out) < k:
            if p not in self.next:
                conts = self.lookup.continuations(self.ids + list(p), k - len(out))
                return out + list(conts[0]) if conts else out
            out.append(self.next[p])
            p = p + (out[-1],)
        return out


def topq_nodes(view: DraftView, P: int, batch: int = 4, eos=frozenset()) -> tuple[list, np.ndarray]:
    """Top-P-by-Q: exact best-first search on the drafter's q; (nodes, their log Q)."""
    o = oracle_tree(view, P, batch=batch, eos=eos)
    return [tuple(p) for p in o.prefixes], o.logP[: len(o.prefixes)]


def eagle_nodes(view: DraftView, P: int, top_k: int = EAGLE_TOP_K, depth: int = EAGLE_DEPTH, eos=frozenset()):
    """EAGLE-2's ``topK_genrate`` on the real tree: a beam of ``top_k`` nodes by cumulative log q expanded
    ``depth`` times into ``top_k`` children each; the best P candidates by score (ties shallow first)."""
    cands = []  # (-score, depth, path)
    ids, vals = view.tops([()])[0]
    frontier = [(float(vals[i]), (int(ids[i]),)) for i in range(min(top_k, len(ids))) if np.isfinite(vals[i])]
    cands += [(-s, 1, p) for s, p in frontier]
    for d in range(depth):
        live = [(s, p) for s, p in frontier if p[-1] not in eos]
        if not live:
            break
        new = []
        for (s, p), (ci, cv) in zip(live, view.tops([p for _, p in live]), strict=True):
            new += [(s + float(cv[i]), p + (int(ci[i]),)) for i in range(min(top_k, len(ci))) if np.isfinite(cv[i])]
        cands += [(-s, d + 2, p) for s, p in new]
        frontier = sorted(new, key=lambda x: -x[0])[:top_k]
    cands.sort()
    return [p for _, _, p in cands[:P]]


def realize_rank_paths(view: DraftView, paths: Sequence[tuple[int, ...]], eos=frozenset()) -> list[tuple[int, ...]]:
    """Token paths of drafter-rank paths (rank 0 = the drafter's top child), parents first; paths below an
    end token, or past the drafter's K ranks, are dropped."""
    tok: dict[tuple[int, ...], tuple[int, ...]] = {(): ()}
    for depth in sorted({len(r) for r in paths}):
        level = [r for r in paths if len(r) == depth and r[:-1] in tok]
        parents = [tok[r[:-1]] for r in level]
        for r, par, (ci, _) in zip(level, parents, view.tops(parents), strict=True):
            if (par and par[-1] in eos) or r[-1] >= len(ci):
                continue
            tok[r] = par + (int(ci[r[-1]]),)
    return [tok[r] for r in paths if r in tok]


def sequoia_nodes(view: DraftView, rates, P: int, eos=frozenset()) -> list[tuple[int, ...]]:
    """Sequoia's best static tree of P nodes for positional acceptance rates ``rates`` (no depth limit)."""
    return realize_rank_paths(view, list(_sequoia_paths(np.asarray(rates, np.float64)[:P].tobytes(), P)), eos)


@functools.lru_cache(maxsize=256)
def _sequoia_paths(rates: bytes, P: int) -> tuple[tuple[int, ...], ...]:
    """Sequoia's rank paths at P for the float64 rates given as bytes: its dynamic program depends on the
    drafter's rates alone (one per drafter, the same on every prompt), so it runs once per drafter and P."""
    return tuple(sequoia_dp(np.frombuffer(rates, np.float64), P, None)[1])


def sequoia_trees(view: DraftView, rates, P_max: int, P_check: int, eos=frozenset()) -> dict:
    """P -> Sequoia's tree at P, for P a power of two or P_max (its trees are not nested) and the check's
    budget; the drafter's rows of all of them asked together, level by level."""
    Ps = sorted({P for P in range(1, P_max + 1) if P & (P - 1) == 0 or P == P_max} | {P_check})
    rates = np.asarray(rates, np.float64)
    paths = {P: list(_sequoia_paths(rates[:P].tobytes(), P)) for P in Ps}
    realize_rank_paths(view, list(dict.fromkeys(r for P in Ps for r in paths[P])), eos)  # rows, in few passes
    return {P: realize_rank_paths(view, paths[P], eos) for P in Ps}
