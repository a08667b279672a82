"""Plain-text tables of results with labelled bound columns (shared by ``simulate``, ``laws`` and ``llm``)."""

from __future__ import annotations

import math

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
