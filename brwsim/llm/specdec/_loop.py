"""The generation loops: speculative decoding (draft a tree, verify it in one pass, append) and plain decoding.

Both run on the same :class:`~._target.TargetSession` (plain decoding is a
verifier call with no drafted node), generate exactly ``new_tokens`` tokens
(an end-of-text token does not stop them, so every prompt gives the same
number of tokens) and time the generation only: the prompt's prefill (the
target's and the drafter's) is timed apart.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from ..sources._device import synchronize
from ._draft import DraftSession, reads_features
from ._target import TargetSession
from ._verify import verify_tree

# What a call of the loop does on the host, as a cache key: measured costs (the planner's per-call calibration, the
# end-to-end units) are kept per version, so a change to the loop's host work, which changes what a call costs,
# measures them again instead of mixing old and new. Raise it with such a change.
#   1: every draft and verifier row copied to the host whole
#   2: rows stay on the device; only the node query's answers and the walk's reads cross
LOOP_VERSION = 2


@dataclasses.dataclass
class Generation:
    """One prompt's generated tokens and what it took: ``accepted[i]`` draft tokens accepted in call i, ``drafted[i]``
    nodes drafted for it; seconds of the whole generation, of drafting and of verifying (prefill apart)."""

    tokens: list[int]
    accepted: list[int]
    drafted: list[int]
    seconds: float
    draft_seconds: float
    verify_seconds: float
    prefill_seconds: float
    draft_passes: int = 0  # the drafter's passes during the generation (its prefill of the prompt apart)
    draft_rows: int = 0  # new tokens those passes scored (0 where not counted)

    @property
    def calls(self) -> int:
        return len(self.accepted)

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d |= {"calls": self.calls, "tokens_per_second": self.tokens_per_second}
        return d


def _rng(rng, T: float):
    if T == 0 or isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def speculative_generate(
    target, drafter, prompt_ids: Sequence[int], new_tokens: int, P: int, T: float = 1.0, rng=0
) -> Generation:
    """``new_tokens`` tokens after the prompt by speculative decoding: each call the drafter's fixed builder drafts
    at most ``P`` nodes below the text, the target verifies them in one pass (greedy at ``T = 0``, exact
    recursive rejection sampling at ``T > 0``) and the accepted path and the target's last token are appended.
    ``target``: an HF source; ``drafter``: an opened :mod:`brwsim.llm.drafters` drafter."""
    rng = _rng(rng, T)
    t0 = time.perf_counter()
    ts = TargetSession(target, prompt_ids, features=reads_features(drafter))  # a head reads the target's features
    ds = DraftSession(drafter, target, prompt_ids, ts.prompt_features, target.eos_ids)
    synchronize(target.device)  # the prefills have finished on the device before the generation's clock starts
    g = Generation([], [], [], 0.0, 0.0, 0.0, time.perf_counter() - t0)
    passes0, rows0 = ds.passes, ds.rows
    t1 = time.perf_counter()
    try:
        while len(g.tokens) < new_tokens:
            a = time.perf_counter()
            nodes = ds.tree(int(P))
            b = time.perf_counter()
            rows = ts.verify(nodes)
            path, last = verify_tree(rows, nodes, T, rng)
            feats = ts.features(path) if ds.needs_features and P > 0 else None
            ts.commit(path, last)
            c = time.perf_counter()
            if P > 0:  # P = 0 is plain decoding: the drafter never drafts, so it does not follow the text
                ds.advance([*path, last], feats)
            g.draft_seconds += (b - a) + (time.perf_counter() - c)
            g.verify_seconds += c - b
            g.tokens += [*path, last]
            g.accepted.append(len(path))
            g.drafted.append(len(nodes))
    finally:
        ts.close()
    g.seconds = time.perf_counter() - t1
    g.tokens = g.tokens[:new_tokens]
    g.draft_passes, g.draft_rows = ds.passes - passes0, ds.rows - rows0
    return g


def plain_generate(target, prompt_ids: Sequence[int], new_tokens: int, T: float = 1.0, rng=0) -> Generation:
    """``new_tokens`` tokens by plain decoding on the same target session: one pass per token."""
    rng = _rng(rng, T)
    t0 = time.perf_counter()
    ts = TargetSession(target, prompt_ids)
    synchronize(target.device)
    g = Generation([], [], [], 0.0, 0.0, 0.0, time.perf_counter() - t0)
    t1 = time.perf_counter()
    while len(g.tokens) < new_tokens:
        rows = ts.verify([])
        _, last = verify_tree(rows, [], T, rng)
        ts.commit([], last)
        g.tokens.append(last)
        g.accepted.append(0)
        g.drafted.append(0)
    g.seconds = g.verify_seconds = time.perf_counter() - t1
    return g
