"""Compare two sets of result rows bit for bit (timings excepted).

    python tools/compare_results.py OLD_RESULTS_DIR NEW_RESULTS_DIR [--rtol 0] [--paths OLD=NEW ...]

Reads every ``*.jsonl`` (one tidy row per line) and ``*.json`` file of both
directories, e.g. the ``results/quick`` folders of two runs of
``brwsim reproduce --quick`` with ``BRWSIM_OUT`` pointing at two places, and
reports every row that differs. Timing fields (``seconds``,
``model_phase_seconds``, ``forward_seconds``, host and per-phase seconds,
the run's wall seconds and its batching, and the ``forward_fraction`` and
per-phase seconds rows) are skipped: they are timings, not results. Exit status 0 when every
row is equal (within ``--rtol`` for floats, default exact), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

TIMING_KEYS = {"seconds", "model_phase_seconds", "forward_seconds", "total_seconds", "host_seconds", "host",
               "phases", "wall_seconds", "prompts_measured", "workers", "prompt_batch", "floor", "floor_seconds",
               "bandwidth", "flops", "timing"}  # fmt: skip
TIMING_STATISTICS = {"forward_fraction", "model_phase_seconds", "seconds_per_prompt", "host_seconds_per_prompt",
                     "floor_seconds_per_prompt"}  # fmt: skip


def _timing_statistic(name) -> bool:
    return isinstance(name, str) and (
        name in TIMING_STATISTICS or name.startswith(("seconds_", "host_seconds_", "floor_seconds"))
    )


def _rows(path: Path) -> list:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(path.read_text())]


def _strip(x, paths=()):
    if isinstance(x, str):
        for old, new in paths:
            x = x.replace(old, new)
        return x
    if isinstance(x, dict):
        if _timing_statistic(x.get("statistic")):
            return {"statistic": x["statistic"]}
        return {k: _strip(v, paths) for k, v in x.items() if k not in TIMING_KEYS}
    if isinstance(x, list):
        return [_strip(v, paths) for v in x]
    return x


def _diff(a, b, rtol: float, where: str, out: list) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append((where + "." + k, "missing on one side", math.inf))
            else:
                _diff(a[k], b[k], rtol, where + "." + k, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((where, f"length {len(a)} != {len(b)}", math.inf))
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _diff(x, y, rtol, f"{where}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return
        rel = abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) > 0 else math.inf
        if rel > rtol:
            out.append((where, f"{a!r} != {b!r}", rel))
    elif a != b:
        out.append((where, f"{a!r} != {b!r}", math.inf))


def compare(old: Path, new: Path, rtol: float = 0.0, paths: tuple = ()) -> list:
    """All differences ``(where, what, relative difference)`` between two results folders."""
    out: list = []
    names = sorted({p.name for d in (old, new) for p in d.glob("*.json*")})
    for name in names:
        a, b = old / name, new / name
        if not (a.exists() and b.exists()):
            out.append((name, "only in " + (str(old) if a.exists() else str(new)), math.inf))
            continue
        _diff(_strip(_rows(a), paths), _strip(_rows(b)), rtol, name, out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rtol", type=float, default=0.0, help="relative tolerance for floats (default 0: bit for bit)")
    ap.add_argument(
        "--paths", action="append", default=[], help="OLD=NEW: read OLD as NEW in the old rows' paths (repeatable)"
    )
    args = ap.parse_args(argv)
    paths = sorted((tuple(p.split("=", 1)) for p in args.paths), key=lambda p: -len(p[0]))
    diffs = compare(args.old, args.new, args.rtol, paths)
    n_files = len({p.name for d in (args.old, args.new) for p in d.glob("*.json*")})
    for where, what, _ in diffs[:50]:
        print(f"{where}: {what}")
    if len(diffs) > 50:
        print(f"... and {len(diffs) - 50} more")
    worst = max((r for _, _, r in diffs), default=0.0)
    tail = f", largest relative difference {worst:.3g}" if diffs else ""
    print(f"{n_files} files, {len(diffs)} differences{tail}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
