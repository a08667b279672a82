"""Walks: continuations sampled from the model itself, and one prompt's measurement (walks + the oracle)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..sources import Context, LogitsSource, NodeQuery, Prompt
from ..sources.rounds import Accounts, attributed, phase
from ._search import OracleTree, oracle_tree


@dataclasses.dataclass
class Walks:
    """Sampled continuations of one prompt; arrays ``[walks, depth]``, NaN after the end."""

    xi: np.ndarray
    H: np.ndarray
    M2: np.ndarray
    pool_logp: np.ndarray  # [nodes, K] top-K log-probs of every visited node
    tokens: list  # the sampled token ids of each walk


def sample_walks(ctx: Context, walks: int, depth: int, rng, K: int, eos=frozenset()) -> Walks:
    """``walks`` continuations of ``depth`` tokens, decoded in parallel; each node asked as one
    :class:`~brwsim.llm.sources.NodeQuery` (its top-K, H, M2 and one sampled token: no whole row)."""
    xi = np.full((walks, depth), np.nan)
    H = np.full((walks, depth), np.nan)
    M2 = np.full((walks, depth), np.nan)
    pool = []
    tokens = [[] for _ in range(walks)]
    alive = list(range(walks))
    if depth < 1 or K < 1:
        raise ValueError(f"sample_walks needs depth >= 1 and K >= 1, got depth {depth}, K {K}")
    q = NodeQuery(K=K, moments=True)
    root = ctx.query([()], dataclasses.replace(q, u=rng.random(walks), u_rows=np.zeros(walks, np.int64)))
    a = dataclasses.replace(root, logp=np.repeat(root.logp, walks, axis=0), H=np.repeat(root.H, walks),
                            M2=np.repeat(root.M2, walks))  # every walk starts at the root  # fmt: skip
    walker = ctx.walker(walks)
    for d in range(depth):
        tok = a.sample
        for j, w in enumerate(alive):
            xi[w, d] = -float(a.sample_logp[j])
            H[w, d], M2[w, d] = a.H[j], a.M2[j]
            tokens[w].append(int(tok[j]))
        pool.append(a.logp)
        if d == depth - 1:
            break
        keep = [j for j in range(len(alive)) if int(tok[j]) not in eos]
        if not keep:
            break
        if len(keep) < len(alive):
            walker.keep(keep)
            alive = [alive[j] for j in keep]
            tok = tok[keep]
        a = walker.query([int(t) for t in tok], dataclasses.replace(q, u=rng.random(len(alive))))
    return Walks(xi=xi, H=H, M2=M2, pool_logp=np.concatenate(pool), tokens=tokens)


def _enc(a) -> dict:
    """An array as strict JSON: its shape and its values, non-finite ones as null."""
    a = np.asarray(a, np.float64)
    return {"shape": list(a.shape), "data": [x if math.isfinite(x) else None for x in a.ravel().tolist()]}


def _dec(d: dict, missing: float) -> np.ndarray:
    """The array of :func:`_enc` (null as ``missing``: NaN after a walk's end, -inf for log 0)."""
    return np.array([missing if x is None else x for x in d["data"]], np.float64).reshape(d["shape"])


@dataclasses.dataclass
class PromptResult:
    prompt: Prompt
    n_tokens: int
    walks: Walks
    oracle: OracleTree
    seconds: float  # wall seconds (measured beside other prompts: including the time it waited for them)
    phases: dict = dataclasses.field(default_factory=dict)  # phase -> model seconds (its share of the passes)
    host: dict = dataclasses.field(default_factory=dict)  # phase -> host CPU seconds (searches, statistics)
    tokens: dict = dataclasses.field(default_factory=dict)  # phase -> tokens through the models
    floor: dict = dataclasses.field(default_factory=dict)  # phase -> floor seconds (empty: rates not set)
    host_bytes: int = 0  # bytes the target's context moved from the model's device to the host
    host_nodes: int = 0  # the node answers (rows or query answers) they carried

    @classmethod
    def timed(cls, prompt, n_tokens, walks, oracle, seconds, a: Accounts) -> PromptResult:
        """A result whose per-phase accounts are :func:`brwsim.llm.sources.rounds.attributed`'s."""
        return cls(prompt, n_tokens, walks, oracle, seconds, a.model, a.host, a.tokens, a.floor)

    def to_dict(self) -> dict:
        """Everything measured, as strict JSON (:meth:`from_dict` reads it back; tests check the round trip)."""
        w, o = self.walks, self.oracle
        walks = None
        if w is not None:
            walks = {"xi": _enc(w.xi), "H": _enc(w.H), "M2": _enc(w.M2), "pool_logp": _enc(w.pool_logp),
                     "tokens": [[int(t) for t in ts] for ts in w.tokens]}  # fmt: skip
        oracle = {"values": _enc(o.values), "logP": _enc(o.logP), "depth": [int(x) for x in o.depth],
                  "prefixes": [[int(t) for t in p] for p in o.prefixes], "evaluated": int(o.evaluated),
                  "passes": int(o.passes)}  # fmt: skip
        prompt = {"task": self.prompt.task, "id": self.prompt.id, "text": self.prompt.text}
        return {"prompt": prompt, "n_tokens": int(self.n_tokens), "walks": walks, "oracle": oracle,
                "seconds": float(self.seconds), "phases": dict(self.phases), "host": dict(self.host),
                "tokens": dict(self.tokens), "floor": dict(self.floor), "host_bytes": int(self.host_bytes),
                "host_nodes": int(self.host_nodes)}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> PromptResult:
        w, o = d["walks"], d["oracle"]
        walks = None
        if w is not None:
            walks = Walks(_dec(w["xi"], np.nan), _dec(w["H"], np.nan), _dec(w["M2"], np.nan),
                          _dec(w["pool_logp"], -np.inf).astype(np.float32), [list(t) for t in w["tokens"]])  # fmt: skip
        oracle = OracleTree(_dec(o["values"], np.nan), _dec(o["logP"], -np.inf), np.array(o["depth"], np.int64),
                            [tuple(p) for p in o["prefixes"]], o["evaluated"], o["passes"])  # fmt: skip
        return cls(Prompt(**d["prompt"]), d["n_tokens"], walks, oracle, d["seconds"], d["phases"], d["host"],
                   d.get("tokens", {}), d.get("floor", {}), d.get("host_bytes", 0), d.get("host_nodes", 0))  # fmt: skip


@dataclasses.dataclass
class Opened:
    """One prompt opened, walked and searched (:func:`open_walks_oracle`): its token ids, the target's context,
    the walks (None without), the oracle tree, the prompt's random stream (drawn on by what follows) and the
    context the walks ran on (``ctx`` itself unless a ``walk_ctx`` was given)."""

    ids: list[int]
    ctx: Context
    walks: Walks | None
    oracle: OracleTree
    rng: np.random.Generator
    walked_on: Context

    def result(self, prompt: Prompt, seconds: float) -> PromptResult:
        """The :class:`PromptResult`, with this thread's accounts since the measurement began (then reset) and
        what the target's context moved to the host."""
        r = PromptResult.timed(prompt, len(self.ids), self.walks, self.oracle, seconds, attributed(reset=True))
        moved = self.ctx.transfer()
        return r if moved is None else dataclasses.replace(r, host_bytes=moved.bytes, host_nodes=moved.nodes)


def open_walks_oracle(source: LogitsSource, prompt: Prompt, P_max: int, walks: int, depth: int, seed: int,
                      batch: int, K: int | None = None, walk_ctx=None) -> Opened:  # fmt: skip
    """The one opening of a prompt's measurement: the context (phase ``open``), ``walks`` continuations of
    ``depth`` tokens sampled from the prompt's seeded stream (phase ``walks``; on ``walk_ctx(ctx)`` where given,
    a context that also records what the walks ask) and the oracle tree up to ``P_max`` (phase ``oracle``)."""
    with phase("open"):
        ids = source.encode(prompt.text)
        ctx = source.open(ids)
    rng = prompt_rng(seed, prompt)
    wctx = walk_ctx(ctx) if walk_ctx is not None else ctx
    with phase("walks"):
        w = sample_walks(wctx, walks, depth, rng, max(K or 0, P_max), source.eos_ids) if walks > 0 else None
    with phase("oracle"):
        o = oracle_tree(ctx, P_max, batch=batch, eos=source.eos_ids)
    return Opened(list(ids), ctx, w, o, rng, wctx)


def prompt_rng(seed: int, prompt: Prompt) -> np.random.Generator:
    # a stable per-prompt stream (str hash is salted per process, so use the bytes)
    tag = int.from_bytes((prompt.task + "\0" + prompt.id).encode()[:16].ljust(16, b"\0"), "little")
    return np.random.default_rng([seed, tag & 0xFFFFFFFF, tag >> 32 & 0xFFFFFFFF, tag >> 64])
