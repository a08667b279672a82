"""A drafted tree's value under the target (the sum of its nodes' path probabilities) and the direct check (real
speculative decoding of one verifier call, many times)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..measure import sample_rows
from ..sources import Context


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
    """log P(v) under the target (its ancestors' rows) of each node."""
    need = sorted({p[:d] for p in nodes for d in range(len(p))})
    rows = dict(zip(need, tctx.logprobs(need), strict=True)) if need else {}
    return np.array([sum(float(rows[p[:d]][p[d]]) for d in range(len(p))) for p in nodes])


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
    rows = tctx.root[None]
    while True:
        tok = sample_rows(rows, rng, row_of)
        nxt = [paths[r] + (int(t),) for r, t in zip(row_of, tok, strict=True)]
        keep = [j for j, v in enumerate(nxt) if v in tree]
        if not keep:
            return X
        X[alive[keep]] += 1
        alive = alive[keep]
        new = list(dict.fromkeys(nxt[j] for j in keep))
        at = {v: i for i, v in enumerate(paths)}
        walker.keep([at[v[:-1]] for v in new])
        rows = walker.step([v[-1] for v in new])
        paths, at = new, {v: i for i, v in enumerate(new)}
        row_of = np.array([at[nxt[j]] for j in keep], dtype=np.int64)


def warm_target(tctx: Context, trees) -> None:
    """Ask the target, in one call, for the rows every tree's values need (the ancestors of its nodes)."""
    need = sorted({v[:d] for nodes in trees for v in nodes for d in range(len(v))}, key=lambda n: (len(n), n))
    if need:
        tctx.logprobs(need)
