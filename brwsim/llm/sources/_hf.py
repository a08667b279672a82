"""Hugging Face ``transformers`` causal LMs as logits sources (needs the ``llm`` extra).

One :class:`HFContext` per prompt. The prompt is run once (``logits_to_keep=1``:
only its last position goes through the LM head) and its KV cache is kept.

Tree questions (:meth:`HFContext.logprobs`) share one growing KV cache: each
evaluated node of the token tree occupies one cache slot after the prompt,
and a batch of new nodes (each a child of the prompt, of an evaluated node or
of a node earlier in the same batch, so a whole chain fits) is run in ONE
forward pass of B query tokens with a 4D attention mask (each new token sees
the prompt, the slots of its own ancestors and itself) and
``position_ids = len(prompt) + depth - 1``. Every node's token therefore goes
through the model exactly once, and the answer equals full recomputation up
to float rounding (tests/llm/test_llm.py checks it).

Walks (:meth:`HFContext.walker`) copy the prompt cache ``n`` times along the
batch axis and decode the ``n`` continuations in lock-step; finished rows are
dropped from the cache.

A Llama-architecture model (SmolLM2 and every drafter made from it) is run by
the packed engine instead (:mod:`._packed`, :class:`PackedContext`): the same
tree of slots, but each question is a request that :mod:`.rounds` can pack
with other prompts' questions into one forward pass; walks are tree nodes
too. Other architectures take the path above, one prompt per pass.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import time
from collections.abc import Mapping, Sequence

import numpy as np

from ... import _processes as processes
from ...errors import BrwsimError
from .. import require_llm
from . import _packed, rounds
from ._base import Context, LogitsSource, Walker


def _torch():
    require_llm()
    import torch

    return torch


def additive_mask(allowed, dtype):
    """A boolean attention pattern ``allowed`` [queries, keys] as the additive mask transformers takes: 0 where a
    query may attend, the dtype's most negative finite value elsewhere."""
    torch = _torch()
    mask = torch.zeros(allowed.shape, dtype=dtype)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)


def torch_device(device: str = "auto") -> str:
    """The torch device to run on, checked: ``auto`` is the process's own GPU when torch sees one (in a
    multi-process run, GPU ``index % count``), else the CPU; any other name must be a device torch knows and has
    here (``cpu``, ``cuda``, ``cuda:1``, ``mps``), else a one-line :class:`BrwsimError`."""
    torch = _torch()
    if device == "auto":
        if torch.cuda.is_available():
            return f"cuda:{processes.index() % torch.cuda.device_count()}"
        return "cpu"
    try:
        dev = torch.device(str(device))
    except (RuntimeError, ValueError, TypeError):
        raise BrwsimError(f"--device {device!r} is not a torch device; use auto, cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0 or (dev.index is not None and dev.index >= n):
            raise BrwsimError(f"--device {device!r}: torch sees {n} CUDA device(s) here; use auto or cpu")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise BrwsimError(f"--device {device!r}: torch has no MPS device here; use auto or cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise BrwsimError(f"--device {device!r}: only cpu, cuda[:N] and mps are supported")
    return str(dev)


def check_threads(threads) -> int | None:
    """``threads`` as an int from 1 to the machine's CPU count (or None: torch's default); one-line error
    otherwise (torch would try to start every thread asked for, and fail deep inside its first matrix product)."""
    if threads is None:
        return None
    cores = os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise BrwsimError(f"--threads must be an integer >= 1, got {threads!r}")
    if threads > cores:
        raise BrwsimError(f"--threads {threads} is more than the {cores} CPU cores here: use 1 to {cores}")
    return threads


def check_max_prompt_tokens(n) -> int:
    """``max_prompt_tokens`` (the last N tokens of a prompt are kept) as an int >= 1; one-line error otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BrwsimError(f"--max-prompt-tokens must be an integer >= 1 (the last N prompt tokens kept), got {n!r}")
    return n


def synchronize(device: str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously): call before reading a clock."""
    if str(device).startswith("cuda"):
        _torch().cuda.synchronize(device)


@functools.cache
def _cache_keyword(cls) -> str:
    return _keyword_of(getattr(cls, "forward", None))


def _keyword_of(fn) -> str:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def with_cache(model, cache) -> dict:
    """The keyword argument passing a KV cache to ``model``'s forward: ``cache`` where this transformers version
    takes it (it deprecates ``past_key_values``), else ``past_key_values``."""
    key = _cache_keyword(type(model)) if hasattr(type(model), "forward") else _keyword_of(model)
    return {key: cache}


def returned_cache(out):
    """The KV cache a forward returned: ``out["cache"]`` in transformers versions that name it so, else
    ``out.past_key_values``."""
    if isinstance(out, Mapping):
        got = out.get("cache")
        return got if got is not None else out.get("past_key_values")
    got = getattr(out, "cache", None)
    return got if got is not None else getattr(out, "past_key_values", None)


def to_numpy(t) -> np.ndarray:
    """A tensor on any device as a NumPy array (detached, moved to the CPU first)."""
    return t.detach().cpu().numpy()


class HFSource(LogitsSource):
    """A ``transformers`` causal LM and its tokenizer.

    ``dtype`` is the compute dtype ("float32" or "bfloat16"); log-probabilities
    are always returned as float32. ``threads`` sets ``torch.set_num_threads``.
    ``max_prompt_tokens`` keeps only the last tokens of longer prompts.
    """

    def __init__(
        self,
        model,
        tokenizer,
        name: str = "hf",
        device: str = "auto",
        threads: int | None = None,
        max_prompt_tokens: int = 384,
    ):
        torch = _torch()
        device = torch_device(device)
        threads = check_threads(threads)
        max_prompt_tokens = check_max_prompt_tokens(max_prompt_tokens)
        if threads:
            torch.set_num_threads(threads)
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.name = name
        self.device = device
        self.max_prompt_tokens = max_prompt_tokens
        cfg = model.config
        cfg = getattr(cfg, "text_config", None) or cfg
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        eos = set()
        for src in (getattr(model, "generation_config", None), cfg, tokenizer):
            e = getattr(src, "eos_token_id", None) if src is not None else None
            if isinstance(e, int):
                eos.add(e)
            elif isinstance(e, (list, tuple)):
                eos.update(int(x) for x in e)
        self.eos_ids = frozenset(eos)
        self.dtype = next(model.parameters()).dtype
        self._seconds = 0.0  # wall time inside model forward passes (the generic path's)
        self._calls = 0
        self._tokens = 0
        self.max_pass_nodes = 256  # tree nodes per forward pass (bounds the [nodes, V] logits of one pass)
        self.engine = _packed.PackedLM(self.model) if _packed.supported(self.model) else None
        self.calls = _CallEngine(self)  # the generic path's passes, asked through the rounds too

    @property
    def forward_seconds(self) -> float:
        """Wall seconds inside forward passes (packed and generic)."""
        return self._seconds + (self.engine.seconds if self.engine is not None else 0.0)

    @property
    def forward_calls(self) -> int:
        return self._calls + (self.engine.passes if self.engine is not None else 0)

    @property
    def forward_tokens(self) -> int:
        return self._tokens + (self.engine.tokens_run if self.engine is not None else 0)

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        return list(ids)[-self.max_prompt_tokens :]

    def decode(self, ids):
        return self.tokenizer.decode([int(i) for i in ids])

    def tokenize(self, text: str) -> list[int]:
        """Ids of any text (no special tokens, no truncation): the :class:`~._base.Tokenizes` capability."""
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def forward(self, **kw):
        """``model(**kw)`` under ``inference_mode``, timed into ``forward_seconds`` (the device synchronised)."""
        torch = _torch()
        synchronize(self.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model(**kw, use_cache=True)
        synchronize(self.device)
        self._seconds += time.perf_counter() - t0
        self._calls += 1
        self._tokens += int(kw["input_ids"].numel())
        return out

    def ask_forward(self, **kw):
        """:meth:`forward` as a request of the current round (:mod:`.rounds`): one generic pass."""
        return rounds.ask(self.calls, _Call(lambda: self.forward(**kw), int(kw["input_ids"].numel())))

    def logp_rows(self, logits) -> np.ndarray:
        torch = _torch()
        with torch.inference_mode():
            return to_numpy(torch.log_softmax(logits.float(), dim=-1))

    def open(self, prompt_ids: Sequence[int]) -> Context:
        ids = [int(t) for t in prompt_ids]
        return PackedContext(self, ids) if self.engine is not None else HFContext(self, ids)


class _Call:
    def __init__(self, fn, tokens: int):
        self.fn, self.tokens = fn, tokens


class _CallEngine:
    """Generic forward passes as round requests: each runs alone (no packing), in request order."""

    def __init__(self, src: HFSource):
        self.src = src
        self.last_floor: float | None = None  # generic passes: no roofline of their own

    def run(self, requests):
        return [r.fn() for r in requests]

    def tokens(self, request) -> int:
        return request.tokens


class PackedContext(Context):
    """One prompt's tree on the packed engine: the prompt's keys and values, one slot per evaluated node, every
    answer kept unless :meth:`forget` drops it. ``passes`` counts the requests this context made (the prompt's
    included)."""

    def __init__(self, src: HFSource, prompt: list[int]):
        if not prompt:
            raise ValueError("empty prompt")
        self.src = src
        self.L = len(prompt)
        self.kv, self.root, _ = rounds.ask(src.engine, _packed.Open(prompt))
        self.passes = 1
        self.slots: dict[tuple[int, ...], int] = {}
        self.answers: dict[tuple[int, ...], np.ndarray] = {(): self.root}

    def _tree_step(self, nodes: list[tuple[int, ...]]) -> None:
        """Evaluate nodes in one request; each node's parent is evaluated or comes earlier in ``nodes``."""
        base = self.kv.used
        new = {n: base + i for i, n in enumerate(nodes)}  # (a node asked again takes its new slot)
        sees = [[new[a] if a in new else self.slots[a] for a in (n[:d] for d in range(1, len(n)))] for n in nodes]
        req = _packed.Extend(self.kv, [n[-1] for n in nodes], [self.L + len(n) - 1 for n in nodes], sees)
        rows = rounds.ask(self.src.engine, req)
        self.passes += 1
        for i, n in enumerate(nodes):
            self.slots[n] = base + i
            self.answers[n] = rows[i]

    def logprobs(self, prefixes):
        """Rows of any prefixes; missing nodes (and their missing ancestors) are evaluated parents first,
        up to ``max_pass_nodes`` per request (a whole chain in one pass). A forgotten row asked again is
        evaluated again (a new slot with the same keys and values)."""
        return _tree_logprobs(self, prefixes, self.slots)

    def known(self, prefix) -> bool:
        return tuple(prefix) in self.answers

    def forget(self, prefixes) -> None:
        """Drop the stored rows of these prefixes (their slots stay: their children cost nothing more)."""
        for p in prefixes:
            if p:
                self.answers.pop(tuple(p), None)


def _tree_logprobs(ctx, prefixes, evaluated=None) -> np.ndarray:
    """Rows of ``prefixes`` from ``ctx.answers``, the missing ones evaluated first (``evaluated``: the nodes that
    have a slot, whether or not their row is kept; default: those with a row)."""
    prefixes = [tuple(int(t) for t in p) for p in prefixes]
    evaluated = ctx.answers if evaluated is None else evaluated
    need = {p for p in prefixes if p not in ctx.answers}
    for p in prefixes:
        for d in range(1, len(p)):
            if p[:d] not in evaluated and p[:d] not in ctx.answers:
                need.add(p[:d])
    order = sorted(need, key=lambda n: (len(n), n))
    step = ctx.src.max_pass_nodes
    for i in range(0, len(order), step):
        ctx._tree_step(order[i : i + step])
    if not prefixes:
        return np.zeros((0, ctx.src.vocab_size), np.float32)
    return np.stack([ctx.answers[p] for p in prefixes])


class HFContext(Context):
    def __init__(self, src: HFSource, prompt: list[int]):
        torch = _torch()
        if not prompt:
            raise ValueError("empty prompt")
        self.src = src
        self.L = len(prompt)
        ids = torch.tensor([prompt], device=src.device)
        out = src.ask_forward(input_ids=ids, logits_to_keep=1)
        self.passes = 1
        self.prompt_cache = returned_cache(out)
        self.root = src.logp_rows(out.logits[0, -1:])[0]
        self.tree_cache = None
        self.slots: dict[tuple[int, ...], int] = {(): -1}
        self.answers: dict[tuple[int, ...], np.ndarray] = {(): self.root}

    def _tree_step(self, nodes: list[tuple[int, ...]]) -> None:
        """Evaluate nodes in one forward pass; each node's parent has a slot or comes earlier in ``nodes``."""
        torch = _torch()
        src = self.src
        if self.tree_cache is None:
            self.tree_cache = copy.deepcopy(self.prompt_cache)
        S = len(self.slots) - 1  # slots used so far
        B = len(nodes)
        slots = {n: S + i for i, n in enumerate(nodes)}
        allowed = torch.zeros((B, self.L + S + B), dtype=torch.bool)
        allowed[:, : self.L] = True
        rows, cols = [], []
        for i, node in enumerate(nodes):
            for d in range(1, len(node) + 1):
                a = node[:d]
                rows.append(i)
                cols.append(self.L + (self.slots[a] if a in self.slots else slots[a]))
        allowed[torch.tensor(rows), torch.tensor(cols)] = True
        mask = additive_mask(allowed, src.dtype)
        ids = torch.tensor([[n[-1] for n in nodes]], device=src.device)
        pos = torch.tensor([[self.L + len(n) - 1 for n in nodes]], device=src.device)
        out = src.ask_forward(
            input_ids=ids,
            position_ids=pos,
            attention_mask=mask[None, None].to(src.device),
            **with_cache(src.model, self.tree_cache),
        )
        self.passes += 1
        self.tree_cache = returned_cache(out)
        rows = src.logp_rows(out.logits[0])
        for i, n in enumerate(nodes):
            self.slots[n] = S + i
            self.answers[n] = rows[i]

    def known(self, prefix) -> bool:
        return tuple(prefix) in self.answers

    def logprobs(self, prefixes):
        """Rows of any prefixes; missing nodes (and their missing ancestors) are evaluated parents first,
        up to ``max_pass_nodes`` per forward pass (a whole chain in one pass)."""
        return _tree_logprobs(self, prefixes)

    def walker(self, n: int) -> HFWalker:
        return HFWalker(self, n)


class HFWalker(Walker):
    def __init__(self, ctx: HFContext, n: int):
        super().__init__(ctx, n)
        self.cache = copy.deepcopy(ctx.prompt_cache)
        if n > 1:
            self.cache.batch_repeat_interleave(n)
        self.depth = 0

    def step(self, tokens):
        torch = _torch()
        src = self.ctx.src
        if len(tokens) != len(self.prefixes):
            raise ValueError(f"walker has {len(self.prefixes)} rows, got {len(tokens)} tokens")
        self.prefixes = [p + (int(t),) for p, t in zip(self.prefixes, tokens, strict=True)]
        n = len(tokens)
        ids = torch.tensor([[int(t)] for t in tokens], device=src.device)
        pos = torch.full((n, 1), self.ctx.L + self.depth, device=src.device)
        out = src.ask_forward(input_ids=ids, position_ids=pos, **with_cache(src.model, self.cache))
        self.ctx.passes += 1
        self.cache = returned_cache(out)
        self.depth += 1
        return src.logp_rows(out.logits[:, -1])

    def keep(self, rows):
        torch = _torch()
        rows = list(rows)
        if rows != list(range(len(self.prefixes))):
            self.cache.batch_select_indices(torch.tensor(rows, dtype=torch.long, device=self.ctx.src.device))
        self.prefixes = [self.prefixes[i] for i in rows]
