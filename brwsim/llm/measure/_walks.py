"""Walks: continuations sampled from the model itself, and one prompt's measurement (walks + the oracle)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..sources import Context, LogitsSource, Prompt
from ._search import OracleTree, oracle_tree, row_stats, sample_rows


@dataclasses.dataclass
class Walks:
    """Sampled continuations of one prompt; arrays ``[walks, depth]``, NaN after the end."""

    xi: np.ndarray
    H: np.ndarray
    M2: np.ndarray
    pool_logp: np.ndarray  # [nodes, K] top-K log-probs of every visited node
    tokens: list  # the sampled token ids of each walk


def sample_walks(ctx: Context, walks: int, depth: int, rng, K: int, eos=frozenset()) -> Walks:
    """``walks`` continuations of ``depth`` tokens, decoded in parallel."""
    xi = np.full((walks, depth), np.nan)
    H = np.full((walks, depth), np.nan)
    M2 = np.full((walks, depth), np.nan)
    pool = []
    tokens = [[] for _ in range(walks)]
    alive = list(range(walks))
    rows = np.broadcast_to(ctx.root, (walks, ctx.root.shape[0]))
    walker = ctx.walker(walks)
    for d in range(depth):
        _, top, h, m2 = row_stats(rows, K)
        tok = sample_rows(rows, rng)
        for j, w in enumerate(alive):
            xi[w, d] = -float(rows[j, tok[j]])
            H[w, d], M2[w, d] = h[j], m2[j]
            tokens[w].append(int(tok[j]))
        pool.append(top)
        if d == depth - 1:
            break
        keep = [j for j in range(len(alive)) if int(tok[j]) not in eos]
        if not keep:
            break
        if len(keep) < len(alive):
            walker.keep(keep)
            alive = [alive[j] for j in keep]
            tok = tok[keep]
        rows = walker.step([int(t) for t in tok])
    return Walks(xi=xi, H=H, M2=M2, pool_logp=np.concatenate(pool), tokens=tokens)


@dataclasses.dataclass
class PromptResult:
    prompt: Prompt
    n_tokens: int
    walks: Walks
    oracle: OracleTree
    seconds: float
    phases: dict = dataclasses.field(default_factory=dict)  # phase -> model seconds (open, walks, oracle, ...)


def measure_prompt(source: LogitsSource, prompt: Prompt, P_max: int, **kw) -> PromptResult:
    """Walks and the oracle tree of one prompt (one KV-cached context); ``kw`` as :func:`open_and_measure`."""
    return open_and_measure(source, prompt, P_max, **kw)[1]


def open_and_measure(
    source: LogitsSource,
    prompt: Prompt,
    P_max: int,
    walks: int = 16,
    depth: int = 48,
    seed: int = 0,
    batch: int = 4,
    K: int | None = None,
) -> tuple:
    """(context, :class:`PromptResult`): ``walks`` sampled continuations of ``depth`` tokens (seeded per
    prompt) and the oracle tree up to ``P_max`` (``batch`` nodes per forward pass), keeping the context open."""
    t0 = time.perf_counter()
    ids = source.encode(prompt.text)
    ctx = source.open(ids)
    K = max(K or 0, P_max)
    rng = prompt_rng(seed, prompt)
    t1 = time.perf_counter()
    w = sample_walks(ctx, walks, depth, rng, K, source.eos_ids) if walks > 0 else None
    t2 = time.perf_counter()
    o = oracle_tree(ctx, P_max, batch=batch, eos=source.eos_ids)
    t3 = time.perf_counter()
    phases = {"open": t1 - t0, "walks": t2 - t1, "oracle": t3 - t2}
    return ctx, PromptResult(prompt, len(ids), w, o, t3 - t0, phases)


def prompt_rng(seed: int, prompt: Prompt) -> np.random.Generator:
    # a stable per-prompt stream (str hash is salted per process, so use the bytes)
    tag = int.from_bytes((prompt.task + "\0" + prompt.id).encode()[:16].ljust(16, b"\0"), "little")
    return np.random.default_rng([seed, tag & 0xFFFFFFFF, tag >> 32 & 0xFFFFFFFF, tag >> 64])
