"""The logits-source interface: :class:`LogitsSource`, :class:`Context`, :class:`Walker`, and the capabilities.

A *logits source* is any model that, given a prompt, answers next-token
questions about the token tree below it. Every source subclasses
:class:`LogitsSource` (HF transformers, GGUF through transformers, a
saved-logits file, the tiny test model, a temperature or recording wrapper):

``source.encode(text) -> list[int]``
    token ids of a prompt.
``source.open(prompt_ids) -> Context``
    processes the prompt once; the context reuses that work (the prompt's KV
    cache, for a transformer) for every question about the same tree.
``context.root -> f32[V]``
    log-probabilities of the first continuation token.
``context.logprobs(prefixes) -> f32[B, V]``
    for a batch of continuations (tuples of token ids after the prompt), the
    log-probabilities of the next token over the whole vocabulary. Any
    prefixes may be asked, in any order; sources may cache earlier answers.
``context.query(prefixes, NodeQuery) -> NodeAnswer``
    what a measurement reads of those nodes (top-K children, entropy
    moments, a sampled token, the whole rows when asked), computed next to
    the model where the context runs one (:mod:`._query`); the default
    answers from :meth:`Context.logprobs` on the host.
``context.walker(n) -> Walker``
    ``n`` parallel continuations decoded token by token:
    ``walker.step(tokens[n]) -> f32[n, V]`` appends one token to each and
    returns the next-token log-probabilities; ``walker.query(tokens[n], q)``
    appends them and answers ``q`` for the new nodes instead;
    ``walker.keep(rows)`` drops the other rows (finished continuations). The
    default walker asks its context with the whole prefixes.

Attributes: ``name``, ``vocab_size``, ``eos_ids`` (tokens that end a
continuation: the tree has no nodes below them), and the bookkeeping every
source has (zero unless it runs a model): ``load_seconds``,
``forward_seconds``, ``forward_calls``.

*Capabilities* are what a drafter may need from its target beyond the
protocol, declared as :class:`typing.Protocol` classes and checked in one
place (:func:`brwsim.llm.drafters.open_drafter`):

- :class:`TransformersModel`: the weights (``model``), ``tokenizer``,
  ``device`` and ``max_prompt_tokens`` of a transformers causal LM (layer
  skipping, early exit, low-bit copies, a trained head read them);
- :class:`Tokenizes`: ``tokenize(text) -> ids`` without a prompt's special
  tokens (held-out text for calibration).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._query import HostQuery, NodeAnswer, NodeQuery, Transfer, answer_rows


class Walker:
    """``n`` continuations decoded in parallel on top of one context."""

    def __init__(self, ctx: Context, n: int):
        self.ctx = ctx
        self.prefixes: list[tuple[int, ...]] = [() for _ in range(n)]

    def _append(self, tokens: Sequence[int]) -> None:
        if len(tokens) != len(self.prefixes):
            raise ValueError(f"walker has {len(self.prefixes)} rows, got {len(tokens)} tokens")
        self.prefixes = [p + (int(t),) for p, t in zip(self.prefixes, tokens, strict=True)]

    def step(self, tokens: Sequence[int]) -> np.ndarray:
        self._append(tokens)
        return self.ctx.logprobs(self.prefixes)

    def query(self, tokens: Sequence[int], q: NodeQuery) -> NodeAnswer:
        """Append one token to each continuation and answer ``q`` for the new nodes."""
        self._append(tokens)
        return self.ctx.query(self.prefixes, q)

    def device_step(self, tokens: Sequence[int]):
        """Append one token to each continuation and return the new rows as a tensor on the model's device; None
        (nothing appended) where this walker's rows are on the host."""
        rows = self.ctx.device_rows([p + (int(t),) for p, t in zip(self.prefixes, tokens, strict=True)])
        if rows is not None:
            self._append(tokens)
        return rows

    def keep(self, rows: Sequence[int]) -> None:
        self.prefixes = [self.prefixes[i] for i in rows]


class WrappedWalker(Walker):
    """A walker over another context's walker whose rows pass through :meth:`rows` (wrappers override it)."""

    def __init__(self, ctx: Context, inner: Walker):
        super().__init__(ctx, len(inner.prefixes))
        self.inner = inner

    def rows(self, rows: np.ndarray) -> np.ndarray:
        return rows

    def step(self, tokens):
        out = self.inner.step(tokens)
        self._append(tokens)
        return self.rows(out)

    def query(self, tokens, q):
        """Answered on the host from :meth:`step`'s rows (a wrapper transforms whole rows)."""
        return answer_rows(self.step(tokens), q)

    def device_step(self, tokens):
        return None  # a wrapper transforms whole rows on the host unless it says otherwise

    def keep(self, rows):
        self.inner.keep(rows)
        self.prefixes = [self.prefixes[i] for i in rows]


class Context(HostQuery, abc.ABC):
    """Questions about the token tree below one prompt (see the module docstring); by default the node query is
    answered from :meth:`logprobs` on the host and there are no device rows (:class:`HostQuery`)."""

    root: np.ndarray

    @abc.abstractmethod
    def logprobs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
        """``f32[len(prefixes), V]``: next-token log-probabilities after the prompt and each prefix."""

    def walker(self, n: int) -> Walker:
        return Walker(self, n)

    def transfer(self) -> Transfer | None:
        """What crossed from the model's device to the host for this context (None: its rows are on the host,
        nothing crosses; a wrapper reports its inner context's)."""
        return None

    def known(self, prefix: tuple[int, ...]) -> bool | None:
        """Whether the prefix's row is already computed (asking for it costs no pass); None: cannot tell."""
        return None

    def forget(self, prefixes: Sequence[tuple[int, ...]]) -> None:
        """Drop the stored rows of these prefixes, if the context stores rows (asked again, they are computed
        again); a context that stores none ignores it."""
        return None


class LogitsSource(abc.ABC):
    """Base class of logits sources (see the module docstring)."""

    name: str = "source"
    vocab_size: int = 0
    eos_ids: frozenset[int] = frozenset()
    load_seconds: float = 0.0
    forward_seconds: float = 0.0
    forward_calls: int = 0

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt."""

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(str(int(i)) for i in ids)

    @abc.abstractmethod
    def open(self, prompt_ids: Sequence[int]) -> Context:
        """The context of one prompt."""


class Wrapper(LogitsSource):
    """A source over another one (temperature, recording): same name, vocabulary, end tokens and bookkeeping."""

    def __init__(self, inner: LogitsSource):
        self.inner = inner
        self.name, self.vocab_size, self.eos_ids = inner.name, inner.vocab_size, inner.eos_ids

    @property
    def load_seconds(self) -> float:
        return self.inner.load_seconds

    @property
    def forward_seconds(self) -> float:
        return self.inner.forward_seconds

    @property
    def forward_calls(self) -> int:
        return self.inner.forward_calls

    def encode(self, text):
        return self.inner.encode(text)

    def decode(self, ids):
        return self.inner.decode(ids)


@runtime_checkable
class TransformersModel(Protocol):
    """Capability: a transformers causal LM's weights, tokenizer and device (``HFSource`` has it); ``engine``:
    the packed engine that answers its passes as requests of the current round (None: the model's own forward,
    one pass at a time)."""

    model: Any
    tokenizer: Any
    device: str
    max_prompt_tokens: int
    engine: Any


@runtime_checkable
class Tokenizes(Protocol):
    """Capability: ``tokenize(text)``, the ids of any text without a prompt's special tokens or truncation."""

    def tokenize(self, text: str) -> list[int]: ...


__all__ = [
    "Context",
    "LogitsSource",
    "NodeAnswer",
    "NodeQuery",
    "Tokenizes",
    "TransformersModel",
    "Walker",
    "Wrapper",
    "WrappedWalker",
]
