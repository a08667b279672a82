"""What a real drafter is, and the registry that parses and opens them (docs/drafters.md, "Real drafters").

A drafter is a class registered under its SPEC family with :func:`register`:

- a :class:`DraftModel` has a q: ``context(prompt_ids) -> DraftContext``
  whose ``logprobs(prefixes)`` gives its next-token log-probabilities at
  temperature 1 after the prompt and each prefix (``()`` is the root) and
  whose ``passes`` counts its forward passes; the tree builders
  (top-P-by-Q, chain, EAGLE, Sequoia) run on it;
- a :class:`Proposer` has no q: ``tree(ids, P)`` and ``chain(ids, P)`` give
  token paths (prompt lookup).

Each class declares its SPEC keys (``spec_keys``: required, optional;
``flags``: bare words such as ``auto``; ``positional``: the key a bare value
fills, as in ``model:DIR``), checks their values in :meth:`Drafter.check`
(at parse time, before any model loads), says what it needs from the
target by capability (``needs``: protocols of :mod:`brwsim.llm.sources`,
never a class), and opens itself in :meth:`Drafter.open`. SPECs go through
the one SPEC parser, :func:`brwsim._spec.parse_spec`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from ..._spec import Spec, parse_spec
from ...errors import BrwsimError
from ..sources import NodeAnswer, NodeQuery

DRAFTERS: dict[str, type[Drafter]] = {}


@dataclasses.dataclass(frozen=True)
class PassFootprint:
    """What one pass of a model reads and computes for one new token after a context of L tokens.

    ``weights``: ``(parameter count, bits per parameter)`` groups read once per pass; bits ``None`` means the
    target's own weight dtype (a drafter served at the target's precision, or sharing its tensors).
    ``kv_values``: cached numbers per context token (keys and values of its ``layers``), read at the target's KV
    dtype. FLOPs: 2 per parameter of a matrix product, plus the attention's ``4 layers attn_dim (L + 1)``.
    An empty footprint (no weights, no layers) is a proposer with no model pass. Both the roofline time of a pass
    (:meth:`brwsim.speedup.RooflineCost.pass_time`) and a drafter's fraction of a target step
    (:meth:`Drafter.cost_fraction`) are derived from it; nothing else sets a drafter's cost.
    """

    weights: tuple[tuple[float, float | None], ...] = ()
    kv_values: int = 0
    layers: int = 0
    attn_dim: int = 0
    what: str = ""

    @property
    def params(self) -> float:
        return float(sum(n for n, _ in self.weights))

    @property
    def empty(self) -> bool:
        return not self.weights and not self.kv_values

    def weight_bytes(self, bytes_per_param: float) -> float:
        """Bytes of weights read, each group at its own bits (``bytes_per_param`` where it declares none)."""
        return float(sum(n * (bytes_per_param if b is None else b / 8.0) for n, b in self.weights))

    def nbytes(self, bytes_per_param: float, kv_bytes: float, context: int) -> float:
        """Bytes read and written for one new token after ``context``: its weights and its KV cache."""
        return self.weight_bytes(bytes_per_param) + self.kv_values * kv_bytes * (context + 1)

    def flops(self, context: int) -> float:
        return 2.0 * self.params + 4.0 * self.layers * self.attn_dim * (context + 1)

    def to_dict(self) -> dict:
        return {"weights": [list(w) for w in self.weights], "kv_values": self.kv_values, "layers": self.layers,
                "attn_dim": self.attn_dim, "what": self.what}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> PassFootprint:
        w = tuple((float(n), None if b is None else float(b)) for n, b in d["weights"])
        return cls(w, int(d["kv_values"]), int(d["layers"]), int(d["attn_dim"]), str(d.get("what", "")))


NO_PASS = PassFootprint(what="no model pass (proposals from the context)")


class DraftContext(Protocol):
    """A drafter's questions about its tree below one prompt: its rows, the node query (what a builder reads of
    them, answered where the drafter runs; :class:`~brwsim.llm.sources.NodeQuery`), its rows as a tensor on its
    device (None where they are on the host), whether a row is already computed (None: cannot tell), dropping
    rows the caller no longer needs, and the passes it took."""

    passes: int

    def logprobs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray: ...

    def query(self, prefixes: Sequence[tuple[int, ...]], q: NodeQuery) -> NodeAnswer: ...

    def device_rows(self, prefixes: Sequence[tuple[int, ...]]) -> Any: ...

    def known(self, prefix: tuple[int, ...]) -> bool | None: ...

    def forget(self, prefixes: Sequence[tuple[int, ...]]) -> None: ...


class Drafter(abc.ABC):
    """A real drafter (see the module docstring): ``name``, ``info``, and the class's declarations."""

    family: ClassVar[str] = ""
    spec_keys: ClassVar[tuple[set, set]] = (set(), set())
    flags: ClassVar[tuple[str, ...]] = ()
    positional: ClassVar[str | None] = None
    needs: ClassVar[tuple[type, ...]] = ()
    example: ClassVar[str] = ""

    name: str
    info: dict

    @classmethod
    def check(cls, spec: Spec) -> None:
        """Check the SPEC's values (one-line errors); called at parse time."""
        return None

    @classmethod
    @abc.abstractmethod
    def open(cls, spec: Spec, target, log=None) -> Drafter:
        """The drafter for a target source (which has every capability in ``needs``)."""

    target_footprint: PassFootprint | None = None  # the target's decoding step, set when the drafter opens
    target_bits: float = 32.0  # the target's weight dtype as loaded, in bits
    device: str = "cpu"  # where the drafter's passes run (its model's device; a proposer runs on the host)

    def footprint(self) -> PassFootprint | None:
        """What one drafter pass reads and computes (:class:`PassFootprint`); None: not declared."""
        return None

    def cost_fraction(self, context: int = 256, bytes_per_param: float | None = None) -> float | None:
        """One drafter pass as a fraction of one target decoding step after ``context`` tokens, derived from the
        two footprints: bytes read (weights at their own bits, the target's and every KV cache at
        ``bytes_per_param``; None: the target's dtype as loaded, ``target_bits``), what bounds a decoding step at
        batch 1. 0 for no model pass; None: unknown."""
        fp = self.footprint()
        if fp is not None and fp.empty:
            return 0.0
        tf = self.target_footprint
        if fp is None or tf is None:
            return None
        b = self.target_bits / 8.0 if bytes_per_param is None else float(bytes_per_param)
        return fp.nbytes(b, b, context) / tf.nbytes(b, b, context)

    def timing_source(self):
        """A logits source whose decoding step is this drafter's pass (to time it), or None."""
        return None

    def pass_timer(self, context: int, seed: int = 0):
        """A callable that runs one drafter pass for one new drafted token after ``context`` tokens (state set up
        once here), for timing; None: no pass of its own to time, or timed through :meth:`timing_source`."""
        return None


class DraftModel(Drafter):
    """A drafter with a q (see the module docstring)."""

    @abc.abstractmethod
    def context(self, prompt_ids: Sequence[int]) -> DraftContext:
        """The drafter's questions about the tree below one prompt."""

    def teacher_forced_rows(self, ids: Sequence[int]) -> np.ndarray | None:
        """Held-out rows after ``ids[:2]``, ..., ``ids[:-1]`` for a drafter that cannot open a context on one token
        (a head reading the target's features); None: calibrate through :meth:`context`."""
        return None


class Proposer(Drafter):
    """A drafter without a q: token paths only."""

    @abc.abstractmethod
    def tree(self, ids: Sequence[int], P: int) -> list[tuple[int, ...]]:
        """Up to P prefix-tree nodes after ``ids``, parents first (the first n are the tree at n)."""

    @abc.abstractmethod
    def chain(self, ids: Sequence[int], P: int) -> list[tuple[int, ...]]:
        """A single path of up to P nodes."""


def register(family: str):
    """Class decorator: the drafter class answers SPECs of ``family``."""

    def deco(cls):
        cls.family = family
        DRAFTERS[family] = cls
        return cls

    return deco


def examples() -> str:
    """One example SPEC per registered family (help texts and errors)."""
    return ", ".join(c.example or c.family for c in DRAFTERS.values())


def _normalise(text: str) -> str:
    """Bare words of a SPEC as keys: a declared flag ``auto`` -> ``auto=1``; ``model:DIR`` -> ``model:path=DIR``."""
    family, sep, rest = text.partition(":")
    cls = DRAFTERS.get(family.strip().lower())
    if cls is None or not sep:
        return text
    if cls.positional and rest.strip() and "=" not in rest:
        return f"{family}:{cls.positional}={rest.strip()}"
    items = [x.strip() for x in rest.split(",") if x.strip()]
    return f"{family}:" + ",".join(f"{x}=1" if x in cls.flags else x for x in items)


def parse_drafter(text) -> Spec:
    """A drafter SPEC -> :class:`brwsim._spec.Spec` (family and raw values), checked by its class."""
    text = text.strip() if isinstance(text, str) else ""
    fams = {name: cls.spec_keys for name, cls in DRAFTERS.items()}
    spec = parse_spec(_normalise(text), "drafter", fams, examples=examples())
    spec = Spec(spec.family, spec.params, text, "drafter")
    DRAFTERS[spec.family].check(spec)
    return spec


def open_drafter(spec: str | Spec, target, log=None) -> Drafter:
    """The drafter of a SPEC for a target source; one-line error when the target lacks a capability it needs."""
    spec = spec if isinstance(spec, Spec) else parse_drafter(spec)
    cls = DRAFTERS[spec.family]
    for need in cls.needs:
        if not isinstance(target, need):
            raise BrwsimError(
                f"drafter {spec.text!r} needs a target with {need.__name__} ({(need.__doc__ or '').strip()}); "
                f"{target.name!r} has not: use a model name, directory or .gguf, not a saved-logits file"
            )
    return cls.open(spec, target, log)
