"""The one SPEC parser: ``family:key=value,...`` for laws, draft laws and drafters.

A SPEC names a family (a law, a draft law, a drafter) and its parameters,
e.g. ``dirichlet:V=1000,alpha=0.1``, ``noise:sigma=0.5``, ``eagle:top_k=10``.
:func:`parse_spec` splits it and checks the keys against what the family
takes; the family's own ``from_spec`` converts the values with
:func:`number`. Every error is one line naming the SPEC and the fix.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from .errors import BrwsimError


@dataclasses.dataclass(frozen=True)
class Spec:
    """A parsed SPEC: the family name, its ``key -> value`` strings, and the text it came from."""

    family: str
    params: dict[str, str]
    text: str
    what: str = "SPEC"

    @property
    def where(self) -> str:
        """How error messages name this SPEC, e.g. ``law 'dirichlet:V=0,alpha=1'``."""
        return f"{self.what} {self.text!r}"


def parse_key_values(rest: str, where: str, kv: dict[str, str] | None = None) -> dict[str, str]:
    """``key=value,...`` into a dict (added to ``kv`` if given); ``where`` starts every error message."""
    kv = {} if kv is None else kv
    for item in filter(None, (x.strip() for x in rest.split(","))):
        if "=" not in item:
            raise BrwsimError(f"{where}: {item!r} is not key=value")
        k, _, v = item.partition("=")
        k = k.strip()
        if k in kv:
            raise BrwsimError(f"{where}: key {k!r} given twice")
        kv[k] = v.strip()
    return kv


def parse_spec(
    text: str,
    what: str,
    families: Mapping[str, tuple[set[str], set[str]]],
    *,
    kind: str = "family",
    tail_key: str | None = None,
    examples: str | None = None,
) -> Spec:
    """Split ``family[:key=value,...]`` and check its keys.

    ``families`` maps each family to its (required, optional) keys; ``what``
    ("law", "draft law", "drafter") and ``kind`` ("family", "name") word the
    errors. ``tail_key``: a key whose value is the rest of the string, commas
    included (it must come last), for a SPEC inside a SPEC such as
    ``mix:w=0.3,law=dirichlet:V=8,alpha=1``.
    """
    name, _, rest = text.partition(":")
    family = name.strip().lower()
    where = f"{what} {text!r}"
    if family not in families:
        hint = f"examples: {examples}" if examples else f"use one of {', '.join(sorted(families))}"
        raise BrwsimError(f"{where}: unknown {kind} {family!r}; {hint}")
    required, optional = families[family]
    kv: dict[str, str] = {}
    if tail_key is not None and tail_key in required | optional:
        head, sep, tail = rest.partition(f"{tail_key}=")
        if sep:
            if head.strip() and not head.rstrip().endswith(","):
                raise BrwsimError(f"{where}: write {tail_key}= as its own key, last, e.g. {family}:...,{tail_key}=SPEC")
            kv[tail_key] = tail.strip()
            rest = head
    parse_key_values(rest, where, kv)
    missing = required - kv.keys()
    extra = kv.keys() - required - optional
    if extra:
        takes = ", ".join(sorted(required | optional)) or "no keys"
        raise BrwsimError(f"{where}: unknown key(s) {', '.join(sorted(extra))}; {family} takes {takes}")
    if missing:
        raise BrwsimError(f"{where}: missing key(s) {', '.join(sorted(missing))} for {family}")
    return Spec(family, kv, text, what)


def number(
    spec: Spec | str,
    key: str,
    *,
    integer: bool = False,
    lo: float | None = None,
    lo_open: bool = False,
    hi: float | None = None,
    hi_open: bool = False,
    default: str | None = None,
) -> float | int:
    """The value of ``key`` in a SPEC as a finite number (``integer``: an int) within [lo, hi]."""
    if isinstance(spec, Spec):
        where, text = spec.where, spec.params.get(key, default)
    else:
        where, text = spec, default
    if text is None:
        raise BrwsimError(f"{where}: missing key {key}")
    try:
        x = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise BrwsimError(f"{where}: {key} must be {kind}, got {text!r}") from None
    if not math.isfinite(x):
        raise BrwsimError(f"{where}: {key} must be finite, got {text!r}")
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise BrwsimError(f"{where}: {key} must be {'>' if lo_open else '>='} {lo:g}, got {x:g}")
    if hi is not None and (x >= hi if hi_open else x > hi):
        raise BrwsimError(f"{where}: {key} must be {'<' if hi_open else '<='} {hi:g}, got {x:g}")
    return x
