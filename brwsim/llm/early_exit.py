"""A real drafter on real token trees: early-exit self-speculation (docs/llm.md, "A real drafter").

The drafter ``q`` is the target model cut after its first ``k`` decoder layers,
through the model's own final norm and LM head; the target ``p`` is the whole
model. Both come out of ONE forward pass: a forward hook on decoder layer
``k`` keeps its output hidden state, and ``lm_head(norm(h_k))`` gives the
early-exit logits at the positions whose full logits are computed. Because
the first ``k`` layers of the full model *are* the early-exit model (same
weights, same KV cache), these are exactly the cut model's log-probabilities
(tests/test_real_drafter.py checks them against a separately truncated model).

Plumbing. :class:`DualHFSource` is an :class:`~brwsim.llm.hf.HFSource` whose
forward passes return logits stacked as ``[..., 1 + len(ks), V]`` (row 0 the
target, row ``1 + j`` the exit after ``ks[j]`` layers); everything else of
:mod:`brwsim.llm.hf` (the prompt's KV cache, batched tree passes with a 4D
mask, lock-step walks) is reused unchanged, so every node of the tree goes
through the model once and carries all the distributions.
:class:`EarlyExitSource` wraps it as an ordinary logits source (root,
``logprobs`` and walks give the target's rows, so every measurement of
:mod:`brwsim.llm.measure` runs on it unchanged) whose contexts also answer
:meth:`DualContext.both` and give drafter views (:meth:`DualContext.view`).

Measured per prompt (:func:`measure_prompt_with_drafter`):

- along the target's own sampled continuations (the walks of
  :func:`brwsim.llm.measure.sample_walks`, every visited node): the
  cross-entropy ``H(p, q) = -sum p log q``, ``KL(p || q) = H(p, q) - H(p)``,
  ``TV(p, q)`` (1 - TV is the acceptance probability of speculative
  sampling) and whether the drafter's top token is the target's;
- the real oracle tree T*_P (best-first by the target's path probability);
- the top-P-by-Q tree: the same exact best-first search run on the drafter's
  distributions (ranked by the drafter's path log-probability Q(v)), valued
  by the target: E[X | prompt] = sum over its nodes of P(v);
- the chain: the drafter's greedy continuation, P tokens, valued the same way.

X = accepted draft tokens per verifier call (tokens per call = X + 1).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import numpy as np

from .._moments import entropy_moments
from .._stats import mean_ci95
from ..errors import BrwsimError
from .hf import HFSource, _torch
from .measure import OracleTree, PromptResult, open_and_measure, oracle_tree
from .prompts import Prompt
from .source import Context, LogitsSource, Walker

NAME = "early-exit"
STATS = ("cross_entropy", "kl", "tv", "top1_agree", "target_entropy")


# ---------------------------------------------------------------------------
# the drafter spec


def parse_early_exit(spec: str) -> list[int]:
    """``early-exit:k=12`` or ``early-exit:k=6/12/18`` -> sorted unique exit layers."""
    text = (spec or "").strip()
    name, _, rest = text.partition(":")
    if name.strip() != NAME:
        raise BrwsimError(f"unknown LLM drafter {text!r}; use {NAME}:k=K (K = layers kept, e.g. {NAME}:k=12)")
    ks: list[int] = []
    for item in [x for x in rest.split(",") if x.strip()]:
        key, eq, val = item.partition("=")
        if key.strip() != "k" or not eq:
            raise BrwsimError(
                f"drafter {text!r}: unknown key {item.strip()!r}; the only key is k (e.g. k=12 or k=6/12)"
            )
        for v in val.split("/"):
            try:
                k = int(v)
            except ValueError:
                raise BrwsimError(f"drafter {text!r}: k must be a positive integer (or a /-list), got {v!r}") from None
            if k < 1:
                raise BrwsimError(f"drafter {text!r}: k must be >= 1, got {k}")
            ks.append(k)
    if not ks:
        raise BrwsimError(f"drafter {text!r} needs k, the number of layers kept, e.g. {NAME}:k=12")
    return sorted(set(ks))


# ---------------------------------------------------------------------------
# one forward pass, target + early exits


def _parts(model):
    """(decoder layers, final norm, LM head) of a transformers causal LM."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    norm = getattr(inner, "norm", None)
    head = model.get_output_embeddings()
    if layers is None or norm is None or head is None:
        raise BrwsimError(
            f"early exit needs a decoder-only model with model.layers, model.norm and an LM head; "
            f"{type(model).__name__} has not"
        )
    return layers, norm, head


class DualHFSource(HFSource):
    """An :class:`HFSource` whose logits rows are ``[1 + len(ks), V]``: the target, then each early exit."""

    def __init__(self, model, tokenizer, ks: Sequence[int], **kw):
        super().__init__(model, tokenizer, **kw)
        self.layers, self.norm, self.head = _parts(self.model)
        n = len(self.layers)
        self.n_layers = n
        bad = [k for k in ks if not 1 <= int(k) <= n]
        if bad:
            raise BrwsimError(f"early-exit k must be in 1..{n} (the model has {n} layers), got {bad[0]}")
        self.ks = [int(k) for k in ks]
        cfg = getattr(self.model.config, "text_config", None) or self.model.config
        self.softcap = getattr(cfg, "final_logit_softcapping", None)

    def forward(self, **kw):
        torch = _torch()
        kept: dict[int, object] = {}

        def hook(i):
            def f(_mod, _inp, out):
                kept[i] = out[0] if isinstance(out, tuple) else out

            return f

        handles = [self.layers[k - 1].register_forward_hook(hook(k)) for k in self.ks]
        try:
            out = super().forward(**kw)
        finally:
            for h in handles:
                h.remove()
        t0 = time.perf_counter()
        with torch.inference_mode():
            T = out.logits.shape[1]  # positions whose logits were asked (logits_to_keep)
            rows = [out.logits]
            for k in self.ks:
                x = self.head(self.norm(kept[k][:, -T:]))
                if self.softcap:
                    x = torch.tanh(x / self.softcap) * self.softcap
                rows.append(x)
            out.logits = torch.stack(rows, dim=-2)
        self.forward_seconds += time.perf_counter() - t0
        return out


class EarlyExitSource(LogitsSource):
    """A logits source answering with the target's rows whose contexts also carry the early exits.

    ``inner`` is an :class:`HFSource` (e.g. from :func:`brwsim.llm.models.load_source`);
    its model is shared, not copied.
    """

    def __init__(self, inner, ks: Sequence[int]):
        if not isinstance(inner, HFSource):
            raise BrwsimError(
                f"the {NAME} drafter needs a transformers model (a model name, directory or .gguf), "
                f"not {getattr(inner, 'name', type(inner).__name__)!r}"
            )
        self.dual = DualHFSource(
            inner.model,
            inner.tokenizer,
            ks,
            name=inner.name,
            device=inner.device,
            threads=None,
            max_prompt_tokens=inner.max_prompt_tokens,
        )
        self.inner = inner
        self.ks = self.dual.ks
        self.n_layers = self.dual.n_layers
        self.name = inner.name
        self.vocab_size = inner.vocab_size
        self.eos_ids = inner.eos_ids
        self.load_seconds = getattr(inner, "load_seconds", 0.0)

    @property
    def forward_seconds(self) -> float:
        return self.dual.forward_seconds

    def encode(self, text):
        return self.dual.encode(text)

    def decode(self, ids):
        return self.dual.decode(ids)

    def open(self, prompt_ids) -> DualContext:
        return DualContext(self, self.dual.open(prompt_ids))


def divergences(rows: np.ndarray) -> np.ndarray:
    """Per row of ``rows [n, 1 + K, V]`` (log-probs, target first): ``[n, K, 5]`` of :data:`STATS`."""
    rows = np.asarray(rows, np.float64)
    lp, lq = rows[:, :1], rows[:, 1:]
    p = np.exp(lp)
    H = entropy_moments(lp)[0]  # [n, 1]
    ce = -(p * lq).sum(-1)  # [n, K]
    tv = 0.5 * np.abs(p - np.exp(lq)).sum(-1)
    top = (np.argmax(lq, -1) == np.argmax(lp, -1)).astype(np.float64)
    return np.stack([ce, ce - H, tv, top, np.broadcast_to(H, ce.shape)], axis=-1)


class DualContext(Context):
    """One prompt: the target's rows (the protocol), plus :meth:`both` and :meth:`view`.

    Every walk step records :func:`divergences` of the visited nodes in
    ``walk_stats`` (the root once per walk, then each step's rows), i.e. along
    exactly the nodes :func:`~brwsim.llm.measure.sample_walks` visits.
    """

    def __init__(self, src: EarlyExitSource, inner):
        self.src = src
        self.inner = inner
        self.root_both = inner.root  # [1 + K, V]
        self.root = self.root_both[0]
        self.walk_stats: list[np.ndarray] = []

    def both(self, prefixes) -> np.ndarray:
        """``[B, 1 + K, V]``: the target's and every exit's log-probs (cached per node)."""
        return self.inner.logprobs(prefixes)

    def logprobs(self, prefixes):
        return self.both(prefixes)[:, 0]

    def view(self, j: int) -> Context:
        """The context seen by row ``j`` (0 = target, 1 + i = exit after ``ks[i]`` layers)."""
        return _View(self, j)

    def walker(self, n: int) -> Walker:
        return _DualWalker(self, n)


class _View(Context):
    def __init__(self, ctx: DualContext, j: int):
        self.ctx, self.j = ctx, j
        self.root = ctx.root_both[j]

    def logprobs(self, prefixes):
        return self.ctx.both(prefixes)[:, self.j]


class _DualWalker(Walker):
    def __init__(self, ctx: DualContext, n: int):
        super().__init__(ctx, n)
        self.inner = ctx.inner.walker(n)
        ctx.walk_stats.append(np.repeat(divergences(ctx.root_both[None]), n, axis=0))

    def step(self, tokens):
        rows = self.inner.step(tokens)  # [n, 1 + K, V]
        self.prefixes = [p + (int(t),) for p, t in zip(self.prefixes, tokens, strict=True)]
        self.ctx.walk_stats.append(divergences(rows))
        return rows[:, 0]

    def keep(self, rows):
        self.inner.keep(rows)
        self.prefixes = [self.prefixes[i] for i in rows]


# ---------------------------------------------------------------------------
# drafter trees valued by the target


def target_logP(ctx: DualContext, prefixes) -> np.ndarray:
    """log P(v) of each node under the target (its ancestors' rows; cached after a search)."""
    out = np.zeros(len(prefixes))
    need = sorted({p[:d] for p in prefixes for d in range(len(p))})
    rows = dict(zip(need, ctx.logprobs(need), strict=True)) if need else {}
    for i, p in enumerate(prefixes):
        out[i] = sum(float(rows[p[:d]][p[d]]) for d in range(len(p)))
    return out


def _values(ctx: DualContext, prefixes, P_max: int) -> np.ndarray:
    v = np.cumsum(np.exp(target_logP(ctx, prefixes))) if prefixes else np.zeros(0)
    if len(v) < P_max:  # a tree smaller than P_max (end tokens everywhere)
        v = np.concatenate([v, np.full(P_max - len(v), v[-1] if len(v) else 0.0)])
    return v[:P_max]


def topq_tree(ctx: DualContext, j: int, P_max: int, batch: int = 4, eos=frozenset()) -> tuple[np.ndarray, OracleTree]:
    """Top-P-by-Q: exact best-first search by the drafter's path probability, valued by the target.

    Returns (E[X | prompt] at P = 1..P_max, the search on the drafter's view).
    """
    o = oracle_tree(ctx.view(j), P_max, batch=batch, eos=eos)
    return _values(ctx, [tuple(p) for p in o.prefixes], P_max), o


def chains(ctx: DualContext, js: Sequence[int], P_max: int, eos=frozenset()) -> dict[int, np.ndarray]:
    """Greedy-by-q chains of P_max tokens for several drafter rows at once (one pass per depth)."""
    tips: dict[int, tuple[int, ...]] = {j: () for j in js}
    paths: dict[int, list[tuple[int, ...]]] = {j: [] for j in js}
    rows = {(): ctx.root_both}
    for _ in range(P_max):
        live = [j for j in js if not (tips[j] and tips[j][-1] in eos)]
        if not live:
            break
        ask = sorted({tips[j] for j in live} - set(rows))
        if ask:
            rows.update(zip(ask, ctx.both(ask), strict=True))
        for j in live:
            t = int(np.argmax(rows[tips[j]][j]))
            tips[j] = tips[j] + (t,)
            paths[j].append(tips[j])
    return {j: _values(ctx, paths[j], P_max) for j in js}


@dataclasses.dataclass
class DrafterResult:
    """One prompt's drafter measurements (``ks[i]`` <-> index ``i``)."""

    ks: list
    walk_stats: np.ndarray  # [visited nodes, K, len(STATS)]
    oracle: np.ndarray  # [P_max]
    topq: np.ndarray  # [K, P_max]
    chain: np.ndarray  # [K, P_max]
    topq_evaluated: list
    seconds: float


def measure_prompt_with_drafter(
    source: EarlyExitSource,
    prompt: Prompt,
    P_max: int,
    walks: int = 16,
    depth: int = 48,
    seed: int = 0,
    batch: int = 4,
) -> tuple[PromptResult, DrafterResult]:
    """:func:`brwsim.llm.measure.measure_prompt` (same walks, same oracle) plus the drafters, one context."""
    if not isinstance(source, EarlyExitSource):
        raise BrwsimError("measure_prompt_with_drafter needs an EarlyExitSource")
    t0 = time.perf_counter()
    ctx, pr = open_and_measure(source, prompt, P_max, walks, depth, seed, batch)
    o = pr.oracle
    js = [1 + i for i in range(len(source.ks))]
    topq, ev = [], []
    for j in js:
        v, oq = topq_tree(ctx, j, P_max, batch=batch, eos=source.eos_ids)
        topq.append(v)
        ev.append(oq.evaluated)
    ch = chains(ctx, js, P_max, eos=source.eos_ids)
    stats = np.concatenate(ctx.walk_stats) if ctx.walk_stats else np.zeros((0, len(js), len(STATS)))
    t2 = time.perf_counter()
    dr = DrafterResult(
        ks=list(source.ks),
        walk_stats=stats,
        oracle=o.values,
        topq=np.stack(topq),
        chain=np.stack([ch[j] for j in js]),
        topq_evaluated=ev,
        seconds=t2 - t0,
    )
    return pr, dr


def summarize_drafter(results: list[DrafterResult], P_list: Sequence[int], n_layers: int | None = None) -> dict:
    """The ``drafter`` object of ``brwsim llm --drafter`` for one task (means, 95% CI over prompts)."""
    if not results:
        return {}
    ks = results[0].ks
    P_list = sorted(set(int(P) for P in P_list))
    out: dict = {"name": NAME, "layers": n_layers, "ks": ks, "prompts": len(results), "per_k": []}
    for i, k in enumerate(ks):
        d: dict = {"k": k}
        for s, name in enumerate(STATS):
            per = [float(np.mean(r.walk_stats[:, i, s])) for r in results if r.walk_stats.shape[0]]
            d[name], d[name + "_ci95"] = mean_ci95(per)
        d["visited_nodes"] = int(sum(r.walk_stats.shape[0] for r in results))
        rows = []
        for P in P_list:
            tq = mean_ci95([r.topq[i, P - 1] for r in results])
            ch = mean_ci95([r.chain[i, P - 1] for r in results])
            orc = [r.oracle[P - 1] for r in results]
            frac = mean_ci95([r.topq[i, P - 1] / o if o > 0 else math.nan for r, o in zip(results, orc, strict=True)])
            rows.append(
                {
                    "P": P,
                    "topq": tq[0],
                    "topq_ci95": tq[1],
                    "chain": ch[0],
                    "chain_ci95": ch[1],
                    "topq_over_oracle": frac[0],
                }
            )
        d["results"] = rows
        d["topq_evaluated_nodes"] = int(sum(r.topq_evaluated[i] for r in results))
        out["per_k"].append(d)
    return out


def print_drafter(t: dict, out) -> None:
    """Table lines for one task's ``drafter`` object (under ``brwsim llm``'s own table)."""
    d = t.get("drafter")
    if not d:
        return
    print(f"  drafter {d['name']} ({d['layers']} layers; q = first k layers + final norm + LM head):", file=out)
    for e in d["per_k"]:
        print(
            f"  k={e['k']:>3}: H(p,q) = {e['cross_entropy']:.3f} +- {e['cross_entropy_ci95']:.3f}, "
            f"KL(p||q) = {e['kl']:.3f} +- {e['kl_ci95']:.3f}, TV = {e['tv']:.3f}, "
            f"top-1 agreement {e['top1_agree']:.3f} (nats, {e['visited_nodes']} visited nodes)",
            file=out,
        )
    oracle = {r["P"]: r["mean"] for r in t["results"]}
    head = " ".join(f"{'topq k=' + str(e['k']):>12} {'chain k=' + str(e['k']):>12}" for e in d["per_k"])
    print(f"{'P':>5} {'oracle':>9} {head}", file=out)
    for i, P in enumerate(r["P"] for r in d["per_k"][0]["results"]):
        cells = " ".join(f"{e['results'][i]['topq']:>12.3f} {e['results'][i]['chain']:>12.3f}" for e in d["per_k"])
        print(f"{P:>5} {oracle[P]:>9.3f} {cells}", file=out)
