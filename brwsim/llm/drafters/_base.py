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
from collections.abc import Sequence
from typing import ClassVar, Protocol

import numpy as np

from ..._spec import Spec, parse_spec
from ...errors import BrwsimError

DRAFTERS: dict[str, type[Drafter]] = {}


class DraftContext(Protocol):
    passes: int

    def logprobs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray: ...


class Drafter(abc.ABC):
    """A real drafter (see the module docstring): ``name``, ``info``, and the class's declarations."""

    family: ClassVar[str] = ""
    spec_keys: ClassVar[tuple[set, set]] = (set(), set())
    flags: ClassVar[tuple[str, ...]] = ()
    positional: ClassVar[str | None] = None
    needs: ClassVar[tuple[type, ...]] = ()
    has_q: ClassVar[bool] = True
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

    def cost_fraction(self) -> float | None:
        """One drafter pass's cost as a fraction of one target decoding step (a model; None: unknown)."""
        return None

    def timing_source(self):
        """A logits source whose decoding step is this drafter's pass (to time it), or None."""
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

    has_q: ClassVar[bool] = False

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
