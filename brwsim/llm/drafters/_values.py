"""A drafted tree's value under the target (the sum of its nodes' path probabilities) and the direct check (real
speculative decoding of one verifier call, many times)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..sources import Context, NodeQuery


@dataclasses.dataclass(frozen=True)
class PromptCheck:
    """The direct check on one prompt: ``samples`` speculative calls on the ``builder``'s tree at budget ``P``; the
    mean X, its exact standard error under the path probabilities (``se``) and the sample one, the tree's value."""

    builder: str
    P: int
    samples: int
    mean: float
    se: float
    value: float
    sample_se: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def target_logP(tctx: Context, nodes) -> np.ndarray:
    """log P(v) under the target of each node: the sum of its tokens' log-probabilities in its ancestors' rows
    (one query: only those log-probabilities cross to the host)."""
    need = sorted({p[:d] for p in nodes for d in range(len(p))})
    if not need:
        return np.zeros(len(nodes))
    row = {p: i for i, p in enumerate(need)}
    edges = sorted({(row[p[:d]], p[d]) for p in nodes for d in range(len(p))})
    lp = tctx.query(need, NodeQuery(at=np.array(edges, np.int64))).at_logp
    at = {e: float(x) for e, x in zip(edges, lp, strict=True)}
    return np.array([sum(at[row[p[:d]], p[d]] for d in range(len(p))) for p in nodes])


def prefix_values(tctx: Context, nodes, P_max: int) -> np.ndarray:
    """E[X | prompt] of the first P nodes, P = 1..P_max (a smaller tree keeps its total)."""
    v = np.cumsum(np.exp(target_logP(tctx, nodes))) if nodes else np.zeros(0)
    if len(v) < P_max:
        v = np.concatenate([v, np.full(P_max - len(v), v[-1] if len(v) else 0.0)])
    return v[:P_max]


def speculative_check(tctx: Context, nodes, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted draft tokens of ``samples`` independent verifier calls on one drafted tree.

    Each call samples the target's continuation token by token through an
    ordinary (non-tree) KV cache and accepts while the continuation so far is
    a node of the tree; returns X per call (float64 ``[samples]``). Calls
    whose accepted paths are the same share one row of the KV cache (its
    rows are the distinct accepted paths, at most the tree's nodes at that
    depth); every call draws its own token.
    """
    tree = set(nodes)
    X = np.zeros(samples)
    if not tree:
        return X
    walker = tctx.walker(1)
    alive = np.arange(samples)
    paths: list[tuple[int, ...]] = [()]  # the walker's rows: distinct accepted paths
    row_of = np.zeros(samples, dtype=np.int64)  # each live call's row
    tok = tctx.query([()], NodeQuery(u=rng.random(samples), u_rows=row_of)).sample
    while True:
        nxt = [paths[r] + (int(t),) for r, t in zip(row_of, tok, strict=True)]
        keep = [j for j, v in enumerate(nxt) if v in tree]
        if not keep:
            return X
        X[alive[keep]] += 1
        alive = alive[keep]
        new = list(dict.fromkeys(nxt[j] for j in keep))
        at = {v: i for i, v in enumerate(paths)}
        walker.keep([at[v[:-1]] for v in new])
        paths, at = new, {v: i for i, v in enumerate(new)}
        row_of = np.array([at[nxt[j]] for j in keep], dtype=np.int64)
        tok = walker.query([v[-1] for v in new], NodeQuery(u=rng.random(len(row_of)), u_rows=row_of)).sample


def warm_target(tctx: Context, trees) -> None:
    """Ask the target, in one call, for the rows every tree's values need (the ancestors of its nodes)."""
    need = sorted({v[:d] for nodes in trees for v in nodes for d in range(len(v))}, key=lambda n: (len(n), n))
    if need:
        tctx.query(need, NodeQuery())  # evaluated where the model runs; nothing asked back
