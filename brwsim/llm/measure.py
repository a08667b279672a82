"""Measurements on a real model's token tree (docs/llm.md, "What is measured").

Per prompt:

- **walks**: ``walks`` continuations sampled from the model itself (the spine
  of docs/theory.md, "The spine"), ``depth`` tokens each, stopped at an end-of-sequence token.
  Along them: the surprisal ``xi`` of every step, and the entropy ``H`` and
  second log-moment ``M2`` of every visited node's whole distribution
  (arrays ``[walks, depth]``, NaN after a walk ends). mu and mu_2 are the
  means of H and M2 over the visited nodes (the analogue of the paper's
  Table 1). The visited nodes' top-K rows with their H and M2 form the
  i.i.d. surrogate's ``pool`` law.
- **the real oracle tree** T*_P: the P nodes of largest path probability,
  found by exact best-first search (:func:`oracle_tree`); E[X | prompt] at
  every P <= P_max is the sum of the first P path probabilities.

Per task (a set of prompts): the mean oracle value with its 95% interval over
prompts; the i.i.d. surrogate (the task's pool simulated with
:func:`brwsim.simulate`); the closed forms of :mod:`brwsim.theory` with the
task's mu and mu_2; and, when :mod:`brwsim.theory` provides
``spine_bounds``, the empirical splitting and dual bounds (docs/theory.md, "Bounds" (e)) from
all the task's walks. X counts accepted draft tokens per verifier call
(tokens per call = X + 1).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import tempfile
import time

import numpy as np

from .._moments import entropy_moments
from .._stats import MARGIN_Z, mean_ci95
from ..errors import BrwsimError
from ..estimate import simulate
from ..spine import curves_from_xi
from ..theory import bounds_from_curves, check_walks
from .prompts import Prompt
from .source import Context, LogitsSource


def row_stats(logp: np.ndarray, K: int):
    """Per row of ``logp [B, V]``: top-K (ids, log-probs) sorted decreasing, H, M2."""
    logp = np.asarray(logp, np.float32)
    B, V = logp.shape
    K = min(K, V)
    if K < V:
        part = np.argpartition(-logp, K - 1, axis=1)[:, :K]
    else:
        part = np.broadcast_to(np.arange(V), (B, V))
    vals = np.take_along_axis(logp, part, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    ids = np.take_along_axis(part, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    H, M2 = entropy_moments(logp, sum_dtype=np.float64)
    return ids, vals, H, M2


def sample_rows(logp: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``logp [B, V]`` (inverse-CDF sampling in float64)."""
    p = np.exp(np.asarray(logp, np.float64))
    cdf = np.cumsum(p, axis=1)
    u = rng.random(p.shape[0]) * cdf[:, -1]
    tok = np.array([np.searchsorted(cdf[i], u[i], side="right") for i in range(p.shape[0])])
    return np.minimum(tok, p.shape[1] - 1)


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
        ids, vals, _, _ = row_stats(ctx.root[None], K)
        self.tops[0] = (ids[0], vals[0].astype(np.float64))

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
        ids, vals, _, _ = row_stats(self.ctx.logprobs([self.prefix[n] for n in group]), self.K)
        for j, n in enumerate(group):
            self.tops[n] = (ids[j], vals[j].astype(np.float64))
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
    t = _RealTree(ctx, min(K or P_max, ctx.root.shape[0]), batch, eos)
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


@dataclasses.dataclass
class PromptResult:
    prompt: Prompt
    n_tokens: int
    walks: Walks
    oracle: OracleTree
    seconds: float


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
    rng = _rng(seed, prompt)
    w = sample_walks(ctx, walks, depth, rng, K, source.eos_ids) if walks > 0 else None
    o = oracle_tree(ctx, P_max, batch=batch, eos=source.eos_ids)
    return ctx, PromptResult(prompt, len(ids), w, o, time.perf_counter() - t0)


def _rng(seed: int, prompt: Prompt) -> np.random.Generator:
    # a stable per-prompt stream (str hash is salted per process, so use the bytes)
    tag = int.from_bytes((prompt.task + "\0" + prompt.id).encode()[:16].ljust(16, b"\0"), "little")
    return np.random.default_rng([seed, tag & 0xFFFFFFFF, tag >> 32 & 0xFFFFFFFF, tag >> 64])


def save_pool(path: str, results: list[PromptResult]) -> tuple[float, float]:
    """Write the task's i.i.d. surrogate pool (see :class:`brwsim.laws.Pool`); return (mu, mu2)."""
    logp = np.concatenate([r.walks.pool_logp for r in results])
    H = np.concatenate([r.walks.H[np.isfinite(r.walks.H)] for r in results])
    M2 = np.concatenate([r.walks.M2[np.isfinite(r.walks.M2)] for r in results])
    if logp.shape[0] != H.shape[0]:  # pragma: no cover - bookkeeping invariant
        raise RuntimeError("pool rows and moments disagree")
    np.savez(path, logp=np.maximum(logp, -1e30).astype(np.float32), entropy=H, m2=M2)
    return float(H.mean()), float(M2.mean())


def _pool_and_surrogate(task, results, P_list, surrogate_trees, seed, pool_path):
    """(mu, mu2, {P: (surrogate mean, ci95)}): the task's i.i.d. surrogate pool, simulated (kept if ``pool_path``)."""
    tmpdir = None
    if pool_path is None:
        tmpdir = tempfile.mkdtemp(prefix="brwsim-pool-")
        path = os.path.join(tmpdir, f"{task}.npz")
    else:
        path = pool_path
    mu, mu2 = save_pool(path, results)
    sim = simulate(path, P=P_list, trees=surrogate_trees, seed=seed, bounds=False, progress=False)
    if tmpdir is not None:
        os.remove(path)
        os.rmdir(tmpdir)
    return mu, mu2, {res.P: (res.stat.mean, res.stat.ci95) for res in sim.results}


def summarize_task(
    task: str,
    results: list[PromptResult],
    P_list: list[int],
    surrogate_trees: int = 2000,
    seed: int = 0,
    pool_path: str | None = None,
    margin_z: float = MARGIN_Z,
) -> dict:
    """The per-task JSON object of ``brwsim llm`` (see docs/llm.md).

    Per P: the real oracle's mean over prompts with its 95% CI, the i.i.d.
    surrogate, and the :class:`brwsim.theory.Bounds` of the task's walks (a
    real model is not i.i.d.: only ``dual`` and ``splitting`` are bounds; the
    closed forms are reported as ``iid_only``).
    """
    P_list = sorted(set(P_list))
    out: dict = {"task": task, "prompts": len(results)}
    have_walks = all(r.walks is not None for r in results)
    bounds = {}
    if have_walks:
        mu, mu2, surrogate = _pool_and_surrogate(task, results, P_list, surrogate_trees, seed, pool_path)
        out["mu"], out["mu2"] = mu, mu2
        out["mu_ci95"] = mean_ci95([np.nanmean(r.walks.H) for r in results])[1]
        out["mu2_ci95"] = mean_ci95([np.nanmean(r.walks.M2) for r in results])[1]
        out["spine_nodes"] = int(sum(np.isfinite(r.walks.H).sum() for r in results))
        out["walks"] = int(sum(r.walks.xi.shape[0] for r in results))
        if pool_path is not None:
            out["pool"] = pool_path
        xi = np.concatenate([r.walks.xi for r in results])
        check_walks(xi.shape[0])
        curves = curves_from_xi(xi, P_max=max(P_list))
        bounds = {b.P: b for b in bounds_from_curves(curves, P_list, mu, mu2, iid=False, margin_z=margin_z)}
    rows = []
    for P in P_list:
        mean, ci = mean_ci95([r.oracle.values[P - 1] for r in results])
        d = {"P": P, "mean": mean, "ci95": ci}
        if have_walks:
            d["surrogate"], d["surrogate_ci95"] = surrogate[P]
        if P in bounds:
            d |= bounds[P].to_dict()
        rows.append(d)
    out["results"] = rows
    out["oracle_evaluated_nodes"] = int(sum(r.oracle.evaluated for r in results))
    out["oracle_passes"] = int(sum(r.oracle.passes for r in results))
    return out
