"""Argument parsing shared by the subcommands."""

from __future__ import annotations

from ..errors import BrwsimError
from ._table import check_expected_values, strict_json


def P_list(text: str) -> list[int]:
    """``--P 1,4,16`` as a list of integers (checked to be >= 1 by the command that uses them)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except (ValueError, AttributeError):  # AttributeError: argparse reads --P=-- as []
        raise BrwsimError(f"--P must be a comma-separated list of integers, e.g. 1,4,16; got {text!r}") from None


def emit(args, d: dict, printer) -> int:
    """Print ``d`` as one strict JSON object with ``--json``, else with ``printer``; the command's exit status (0).

    Either way every E[X] in ``d`` is checked to lie in [0, P] first (a one-line error, nothing printed).
    """
    if args.json:
        print(strict_json(d))
    else:
        check_expected_values(d)
        printer(d)
    return 0
