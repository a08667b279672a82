"""Plain-text tables of results with labelled bound columns (shared by ``simulate``, ``laws`` and ``llm``)."""

from __future__ import annotations

import json
import math

from ..errors import BrwsimError

RIGOROUS_NOTE = (
    "rigorous upper bounds: dual and splitting are spine estimates + 1.96 se at the minimising s "
    "(one-sided upper 97.5% confidence values)"
)
RENEWAL_NOTE = "; renewal is a closed form, rigorous for i.i.d. laws"
GROUP_TITLES = {
    "bounds": ("rigorous upper bounds", "rigorous bounds"),
    "predictions": ("not bounds", "not bounds"),
    "iid_only": ("i.i.d.-only, not bounds", "i.i.d.-only"),
}
PREDICTION_NOTE = "not bounds: asymptotic is a large-P prediction, theorem1_leading the leading term of Theorem 1"
IID_ONLY_NOTE = (
    "i.i.d.-only: the closed forms at the long-run mu, mu_2 assume i.i.d. trees; for this law they are "
    "neither bounds nor predictions"
)


def fmt(x, width: int = 9) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return f"{'-':>{width}}"
    if x == math.inf:
        return f"{'inf':>{width}}"
    return f"{x:>{width}.4f}"


def bound_groups(rows: list[dict]) -> list[tuple[str, list[str]]]:
    """[(group key, column names)] of the bound groups present in result rows (``bounds``, ``predictions``
    or ``iid_only``), in that order."""
    out = []
    for group in ("bounds", "predictions", "iid_only"):
        names: list[str] = []
        for r in rows:
            names += [n for n in r.get(group) or {} if n not in names]
        if names:
            out.append((group, names))
    return out


def bound_header(groups) -> str:
    return "".join(f"  {n:>{max(9, len(n))}}" for _, names in groups for n in names)


def group_header(lead: int, groups) -> str:
    """A line naming each group of bound columns above its columns (``lead``: width of the columns before)."""
    line = " " * lead
    for g, names in groups:
        width = sum(2 + max(9, len(n)) for n in names) - 2
        long, short = GROUP_TITLES[g]
        title = f" {long} " if len(long) + 2 <= width else f" {short} "
        line += "  " + title.center(width, "-")
    return line


def bound_cells(row: dict, groups) -> str:
    return "".join("  " + fmt((row.get(g) or {}).get(n), max(9, len(n))) for g, names in groups for n in names)


def bound_notes(groups) -> list[str]:
    """What each group of columns is, in the order they are printed."""
    notes = {"bounds": RIGOROUS_NOTE, "predictions": PREDICTION_NOTE, "iid_only": IID_ONLY_NOTE}
    out = []
    for g, names in groups:
        note = notes[g] + (RENEWAL_NOTE if g == "bounds" and "renewal" in names else "")
        out.append(f"[{', '.join(names)}] {note}")
    return out


# JSON has no NaN or infinity. A non-finite number is written as null where it means "no value": a standard
# error or half-width of a single sample, a ratio to a zero, a closed form that is infinite (mu = 0). The
# numbers a result is about (E[X], a speedup, a time, mu, mu_2) must be finite: printing is refused otherwise.
REQUIRED_FINITE = ("mean", "check_mean", "ex", "speedup", "t_verify", "t_draft", "mu", "mu2")
EX_TOL = 1e-9  # relative rounding slack of a mean of values in [0, P]


def _json_safe(x, path: str):
    if isinstance(x, dict):
        return {k: _json_safe(v, f"{path}.{k}") for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v, f"{path}[{i}]") for i, v in enumerate(x)]
    if isinstance(x, float) and not math.isfinite(x):
        if path.rsplit(".", 1)[-1] not in REQUIRED_FINITE:
            return None
        raise BrwsimError(
            f"internal error: the result's {path.lstrip('.')} is {x}, not a finite number; "
            "nothing was printed (please report the command)"
        )
    return x


def check_expected_values(d, path: str = "") -> None:
    """Refuse any result row whose E[X] (``mean``, ``check_mean``, ``ex``) is not a finite number in [0, P]."""
    if isinstance(d, dict):
        P = d.get("P")
        if isinstance(P, int) and not isinstance(P, bool) and P >= 1:
            for key in ("mean", "check_mean", "ex"):
                v = d.get(key)
                if isinstance(v, float) and not (math.isfinite(v) and -EX_TOL * P <= v <= P * (1 + EX_TOL)):
                    raise BrwsimError(
                        f"internal error: E[X] = {v} at P = {P} ({path.lstrip('.')}.{key}) lies outside [0, P]; "
                        "nothing was printed (please report the command)"
                    )
        for k, v in d.items():
            check_expected_values(v, f"{path}.{k}")
    elif isinstance(d, (list, tuple)):
        for i, v in enumerate(d):
            check_expected_values(v, f"{path}[{i}]")


def strict_json(d: dict) -> str:
    """``d`` as strict JSON (no NaN or Infinity; see above), after :func:`check_expected_values`."""
    check_expected_values(d)
    return json.dumps(_json_safe(d, ""), allow_nan=False)
