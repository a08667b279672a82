"""Shared plumbing for the experiment scripts: cached result rows and figures.

Every experiment computes *points* (one law at one setting) through
:func:`cached`, which stores each point's rows under
``results/.cache/NAME/<hash of the parameters>.json``: a point already
computed with the same parameters and seed is read back, not recomputed
(:data:`COUNTERS` counts both cases). Cache files are written under unique
temporary names and renamed into place; a lock per point lets concurrent
runs into one directory share the work instead of repeating it. The tidy rows of a run go to
``results/NAME.csv`` and ``results/NAME.jsonl`` (one row per law x P x
statistic, with mean, ci95, trees, seed and the package version); figures to
``figures/NAME.png`` and ``.pdf``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

import brwsim

COUNTERS: Counter = Counter()  # "computed" / "cached" points, for tests and logs

# one colour per law label, shared by every figure (matplotlib's tab10 order)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
BOUND_STYLES = {
    "theorem1_leading": dict(ls=":", lw=1.2),
    "renewal": dict(ls="--", lw=1.2),
    "dual": dict(ls="-.", lw=1.2),
    "splitting": dict(ls=(0, (5, 1, 1, 1)), lw=1.0),
    "asymptotic": dict(ls=(0, (1, 1)), lw=1.5),
}


_MODE = {"quick": False}


def out_dirs() -> tuple[Path, Path]:
    """(results dir, figures dir); override the root with BRWSIM_OUT.

    ``--quick`` runs write below ``results/quick`` and ``figures/quick`` so that
    a first look never overwrites the committed full-size figures.
    """
    root = Path(os.environ.get("BRWSIM_OUT", "."))
    sub = Path("quick") if _MODE["quick"] else Path()
    return root / "results" / sub, root / "figures" / sub


class _Parser(argparse.ArgumentParser):
    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        _MODE["quick"] = bool(getattr(ns, "quick", False))
        return ns


def parser(name: str, doc: str | None = None) -> argparse.ArgumentParser:
    p = _Parser(prog=f"python -m experiments.{name}", description=doc)
    p.add_argument("--quick", action="store_true", help="small run (seconds), for tests and a first look")
    p.add_argument("--seed", type=int, default=0)
    brwsim.enable_compilation_cache()  # as the brwsim command: compiled programs kept in the user cache
    return p


# Bump when a change to brwsim changes some numbers on purpose (e.g. a random stream), so that no
# point cached before it is read back; the cache is per machine (results/.cache is not committed).
CACHE_EPOCH = 3  # 3: node distributions normalised with the maximum subtracted first (last-bit changes)


def _digest(params: dict) -> str:
    blob = json.dumps(params | {"cache_epoch": CACHE_EPOCH}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _read_point(path: Path) -> list[dict] | None:
    """The rows of a cached point, or None when it is absent or unreadable (then it is computed again)."""
    try:
        return json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary file of a unique name in its directory, renamed into place: a reader
    sees the whole old file or the whole new one, and concurrent writers never share a temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _point_lock(path: Path):
    """An exclusive lock on one point (``flock`` on ``<point>.lock``): a second run that needs the same point
    waits for the first and then reads its rows; the lock goes with its process, even a killed one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def cached(name: str, params: dict, compute: Callable[[], list[dict]]) -> list[dict]:
    """Rows of one point, computed once per (name, params) and then read back.

    Concurrent runs into one output directory compute each point once (:func:`_point_lock`); a point counts
    as ``computed`` once its rows are in the cache, so an interrupted run counts only finished points.
    """
    path = _point_path(name, params)
    rows = _read_point(path)
    if rows is None:
        with _point_lock(path):
            rows = _read_point(path)  # another run may have finished it while this one waited
            if rows is None:
                t0 = time.perf_counter()
                rows = compute()
                blob = {"params": params, "seconds": time.perf_counter() - t0, "rows": rows}
                write_atomic(path, json.dumps(blob).encode())
                COUNTERS["computed"] += 1
                return rows
    COUNTERS["cached"] += 1
    return rows


def _point_path(name: str, params: dict) -> Path:
    return out_dirs()[0] / ".cache" / name / f"{_digest(params)}.json"


def is_cached(name: str, params: dict) -> bool:
    """Whether the point (name, params) is in the cache (reading it then computes nothing)."""
    return _read_point(_point_path(name, params)) is not None


def bound_value(result_row: dict, name: str):
    """The value of a bound or closed form ``name`` in a result row's ``bounds``, ``predictions`` or ``iid_only``."""
    for group in ("bounds", "predictions", "iid_only"):
        if name in (result_row.get(group) or {}):
            return result_row[group][name]
    return None


def row(law: str, P: int | None, statistic: str, mean: float, ci95: float, trees: int, seed: int, **extra) -> dict:
    """One tidy result row (the format every experiment writes)."""
    d = {"law": law, "P": P, "statistic": statistic, "mean": mean, "ci95": ci95, "trees": trees, "seed": seed}
    d.update(extra)
    d["version"] = brwsim.__version__
    return d


def write_rows(name: str, rows: list[dict]) -> Path:
    """Write ``results/NAME.jsonl`` and ``results/NAME.csv``; return the CSV path."""
    results, _ = out_dirs()
    results.mkdir(parents=True, exist_ok=True)
    with open(results / f"{name}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    path = results / f"{name}.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return path


def save_figure(fig, name: str) -> Path:
    """Save ``figures/NAME.png`` (150 dpi) and ``figures/NAME.pdf``; close the figure."""
    import matplotlib.pyplot as plt

    _, figures = out_dirs()
    figures.mkdir(parents=True, exist_ok=True)
    png = figures / f"{name}.png"
    fig.savefig(png, dpi=150, bbox_inches="tight")
    fig.savefig(figures / f"{name}.pdf", bbox_inches="tight")
    plt.close(fig)
    return png


def setup_matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.figsize": (6.4, 4.4),
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "legend.fontsize": 8,
            "font.size": 10,
        }
    )
    return plt


def prompt_order(tasks, n: int, seed: int) -> list:
    """``n`` prompts per task (evenly spaced over each source), each task's in a seeded random order,
    interleaved task by task (so every prefix holds the tasks in equal numbers, +-1)."""
    from brwsim.llm.sources import load_prompts

    rng = np.random.default_rng([seed, 21])
    per = []
    for task in tasks:
        ps = load_prompts(task, n)
        per.append([ps[i] for i in rng.permutation(len(ps))])
    out = []
    for i in range(max(len(ps) for ps in per)):
        out += [ps[i] for ps in per if i < len(ps)]
    return out
