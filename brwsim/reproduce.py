"""``brwsim reproduce``: run every experiment and write ``figures/REPORT.md``.

Each experiment is a module ``experiments.NAME`` with ``main(argv) -> dict``
(keys ``name``, ``figures``, optional ``tables`` and ``summary``: lines of
measured numbers). Finished points are cached, so a second run recomputes
nothing. The report embeds every figure and table, with the experiment's own
description and what was measured. A run with ``--only`` replaces those
experiments' sections of an existing report and keeps the others (each
section says when it was run).
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import math
import platform
import sys
import time
from functools import partial
from pathlib import Path

from experiments import common

from . import _processes as processes
from .errors import BrwsimError, check_positive_int

EXPERIMENTS = [  # in running order: entropy_table reads the real-model rows real_model writes
    "scaling_in_P",
    "collapse",
    "iid_vs_markov",
    "threshold_vs_oracle",
    "real_model",
    "entropy_table",
    "drafters",
    "spec_sampling",
    "drafter_gap",
    "real_drafters",
    "continuation",
    "speedup",  # reads the rows real_model, real_drafters and continuation write
]
SEED_MAX = 2**32 - 1  # the experiments' runs take seeds of 32 bits (brwsim.simulate's range)
# the experiments whose work grows with prompts: they take --budget-seconds (no prompt started after it; the rows
# carry the prompt counts actually scored)
BUDGETED = ("real_model", "real_drafters", "continuation")


def _available(names):
    out = []
    for n in names:
        if importlib.util.find_spec(f"experiments.{n}") is not None:
            out.append(n)
    return out


def run(
    quick: bool = False,
    only: list[str] | None = None,
    seed: int = 0,
    log=sys.stderr,
    budget_seconds: float | None = None,
) -> Path:
    """Run the experiments (all, or ``only``: a non-empty list of names) and write the report; return its path.

    ``budget_seconds``: handed to each experiment of :data:`BUDGETED` (each starts no new prompt after that
    many seconds of its own; 0 scores only the prompts already measured and cached)."""
    seed = check_positive_int("--seed", seed, minimum=0)  # every argument is checked before any experiment starts
    if seed > SEED_MAX:
        raise BrwsimError(f"--seed must be an integer from 0 to {SEED_MAX} (a run key holds 32 bits), got {seed}")
    if budget_seconds is not None and not (math.isfinite(budget_seconds) and budget_seconds >= 0):
        raise BrwsimError(f"--budget-seconds must be a finite number >= 0, got {budget_seconds}")
    common.check_out_root()  # BRWSIM_OUT: a file or a folder that refuses writes is one line before any experiment
    names = _available(EXPERIMENTS)
    if only is not None:
        only = [n.strip() for n in only if n.strip()]
        if not only:
            raise BrwsimError(f"--only names no experiment; give one or more of {', '.join(names)}, comma-separated")
        unknown = [n for n in only if n not in names]
        if unknown:
            raise BrwsimError(f"unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(names)}")
        names = [n for n in names if n in only]
    base = ["--seed", str(seed)] + (["--quick"] if quick else [])
    budget = ["--budget-seconds", repr(float(budget_seconds))] if budget_seconds is not None else []
    argv = {n: base + (budget if n in BUDGETED else []) for n in names}
    report = partial(write_report, quick=quick, seed=seed, keep_others=only is not None, budget_seconds=budget_seconds)
    if processes.count() > 1:
        return _run_shared(names, argv, log, report)
    t_all = time.perf_counter()
    done = [_run_one(name, argv[name], f"[{i}/{len(names)}]", log) for i, name in enumerate(names, 1)]
    return report(done, total=time.perf_counter() - t_all)


def _run_one(name: str, argv: list[str], tag: str, log) -> tuple:
    """(name, module, info, seconds, points computed, points read from cache) of one experiment."""
    print(f"{tag} {name} ...", file=log, flush=True)
    mod = importlib.import_module(f"experiments.{name}")
    before = dict(common.COUNTERS)
    t0 = time.perf_counter()
    info = mod.main(argv) or {}
    dt = time.perf_counter() - t0
    computed = common.COUNTERS["computed"] - before.get("computed", 0)
    cached = common.COUNTERS["cached"] - before.get("cached", 0)
    print(f"{tag} {name}: {dt:.1f} s ({computed} points computed, {cached} from cache)", file=log, flush=True)
    return name, mod, info, dt, computed, cached


def _cache_files() -> dict[str, Path]:
    root = common.out_dirs()[0] / ".cache"
    return {str(p.relative_to(root)): p for p in root.rglob("*.json")} if root.exists() else {}


def _run_shared(names: list[str], argv: dict[str, list[str]], log, report) -> Path | None:
    """A multi-process run: each process computes every ``count()``-th experiment's points into the cache;
    the new cache entries are exchanged; process 0 then assembles every experiment from the cache and
    writes the report (with each experiment's first run time)."""
    t_all = time.perf_counter()
    before, first, mine, me = set(_cache_files()), {}, processes.share(names), processes.index()
    with processes.alone():
        for name in mine:
            _, _, _, dt, computed, cached = _run_one(name, argv[name], f"[process {me}]", log)
            first[name] = (dt, computed, cached)
    new = {k: p.read_bytes() for k, p in _cache_files().items() if k not in before}
    root = common.out_dirs()[0] / ".cache"
    for timings, files in processes.gather((first, new)):
        first |= timings
        for rel, blob in files.items():
            if not (root / rel).exists():
                common.write_atomic(root / rel, blob)
    path = None
    if processes.is_main():
        with processes.alone():
            done = [_run_one(n, argv[n], f"[{i}/{len(names)}]", log)[:3] + first[n] for i, n in enumerate(names, 1)]
            path = report(done, total=time.perf_counter() - t_all)
    processes.barrier("reproduce-report")
    return path


def _sections(text: str) -> dict[str, str]:
    """A report's sections by experiment name (``## NAME: ...`` up to the next ``## ``), in order."""
    out: dict[str, str] = {}
    name = None
    for line in text.splitlines(keepends=True):
        if line.startswith("## ") and ":" in line:
            name = line[3:].split(":", 1)[0].strip()
            out[name] = ""
        if name is not None:
            out[name] += line
    return out


def _section(name, mod, info, dt, computed, cached) -> list[str]:
    doc = (mod.__doc__ or name).strip().split("\n\n")
    title = doc[0].replace("\n", " ")
    lines = [f"## {name}: {title}", ""]
    if len(doc) > 1:
        lines += [" ".join(p.replace("\n", " ") for p in doc[1:]), ""]
    lines.append(
        f"*Run {datetime.date.today().isoformat()}: {dt:.1f} s, {computed} points computed, {cached} read from cache; "
        f"rows in `results/{name}.csv`.*"
    )
    lines.append("")
    for fig in info.get("figures", []) or []:
        lines += [f"![{name}]({Path(fig).name})", ""]
    for tab in info.get("tables", []) or []:
        lines += [Path(tab).read_text().strip(), ""]
    summary = info.get("summary") or []
    if summary:
        lines += ["Measured:", ""] + [f"- {s}" for s in summary] + [""]
    return lines


def write_report(
    done, quick: bool, seed: int, total: float, keep_others: bool = False, budget_seconds: float | None = None
) -> Path:
    """Write REPORT.md for the experiments ``done``; ``keep_others``: keep the other sections of an existing report
    (a run with ``--only``), in their order, the new ones replacing theirs or appended. ``budget_seconds``: the
    run's ``--budget-seconds``, named in the header's command."""
    common._MODE["quick"] = quick
    _, figures = common.out_dirs()
    figures.mkdir(parents=True, exist_ok=True)
    path = figures / "REPORT.md"
    old = _sections(path.read_text()) if keep_others and path.exists() else {}
    new = {d[0]: "\n".join(_section(*d)) + "\n" for d in done}
    kept = [n for n in old if n not in new]
    command = (
        "brwsim reproduce"
        + (" --quick" if quick else "")
        + (f" --only {','.join(new)}" if kept else "")
        + (f" --budget-seconds {budget_seconds:g}" if budget_seconds is not None else "")
    )
    lines = [
        "# brwsim: reproduced figures and tables",
        "",
        f"Mode: {'quick (small runs)' if quick else 'full'}; seed {seed}; "
        f"command `{command}`; "
        f"{datetime.date.today().isoformat()}; {platform.machine()}, {platform.system()}; "
        f"total wall time {total:.0f} s (points already cached are not recomputed: see the per-experiment counts).",
        "",
        "Convention everywhere: X = accepted draft tokens per verifier call (tokens per call = X + 1). "
        "Every ± and every band is a 95% confidence interval.",
        "",
    ]
    if kept:
        lines += [f"Sections kept from the earlier report in this directory (not rerun): {', '.join(kept)}.", ""]
    body = "".join(new.get(n) or old[n] for n in [*old, *(n for n in new if n not in old)])
    path.write_text("\n".join(lines) + "\n" + body)
    return path
