"""The one exception type brwsim raises for bad input.

Every user-facing check raises :class:`BrwsimError` with a single-line message
that says what is wrong and how to fix it. The command line prints it as
``brwsim: error: <message>`` and exits with status 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


class BrwsimError(ValueError):
    """Bad input: the message is one line, names the problem and the fix."""


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise if it is not an integer >= minimum."""
    try:
        iv = int(value)
    except (TypeError, ValueError):
        raise BrwsimError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if iv != value and not (isinstance(value, str) and str(iv) == value.strip()):
        if not (isinstance(value, float) and value.is_integer()):
            raise BrwsimError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if iv < minimum:
        raise BrwsimError(f"{name} must be an integer >= {minimum}, got {iv}")
    return iv


def check_P_list(P: int | Iterable[int]) -> list[int]:
    """Normalise a verifier budget or list of budgets to a sorted unique list."""
    if isinstance(P, (int, float, str)):
        P = [P]
    out = sorted({check_positive_int("P", p) for p in P})
    if not out:
        raise BrwsimError("P must list at least one budget, e.g. --P 1,4,16")
    return out


def check_finite(name: str, value: float) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise BrwsimError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(f):
        raise BrwsimError(f"{name} must be finite, got {value!r}")
    return f
