"""Hugging Face ``transformers`` causal LMs as logits sources (needs the ``llm`` extra): :class:`HFSource` and its
generic call engine. Its contexts (the prompt's token tree, walks; the packed engine's for a Llama-architecture
model) are in :mod:`._contexts`, the torch and device helpers in :mod:`._device`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from . import _packed, rounds
from ._base import Context, LogitsSource
from ._contexts import HFContext, PackedContext
from ._device import _torch, check_max_prompt_tokens, check_threads, synchronize, torch_device


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

    def logp_tensor(self, logits):
        """``log_softmax`` of logits rows, float32, a tensor on the logits' device."""
        torch = _torch()
        with torch.inference_mode():
            return torch.log_softmax(logits.float(), dim=-1)

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
