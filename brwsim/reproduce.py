"""``brwsim reproduce``: run every experiment and write ``figures/REPORT.md``.

Each experiment is a module ``experiments.NAME`` with ``main(argv) -> dict``
(keys ``name``, ``figures``, optional ``tables`` and ``summary``: lines of
measured numbers). Finished points are cached, so a second run recomputes
nothing. The report embeds every figure and table, with the experiment's own
description and what was measured.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import platform
import subprocess
import sys
import time
from pathlib import Path

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
    "real_drafter",
]


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "brwsim", "experiments"], capture_output=True, text=True
        ).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _available(names):
    out = []
    for n in names:
        if importlib.util.find_spec(f"experiments.{n}") is not None:
            out.append(n)
    return out


def run(quick: bool = False, only: list[str] | None = None, seed: int = 0, log=sys.stderr) -> Path:
    """Run the experiments (all, or ``only``) and write the report; return its path."""
    from experiments import common

    from .errors import BrwsimError

    names = _available(EXPERIMENTS)
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise BrwsimError(f"unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(names)}")
        names = [n for n in names if n in only]
    argv = ["--seed", str(seed)] + (["--quick"] if quick else [])
    done = []
    t_all = time.perf_counter()
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name} ...", file=log, flush=True)
        mod = importlib.import_module(f"experiments.{name}")
        before = dict(common.COUNTERS)
        t0 = time.perf_counter()
        info = mod.main(argv) or {}
        dt = time.perf_counter() - t0
        computed = common.COUNTERS["computed"] - before.get("computed", 0)
        cached = common.COUNTERS["cached"] - before.get("cached", 0)
        print(
            f"[{i}/{len(names)}] {name}: {dt:.1f} s ({computed} points computed, {cached} from cache)",
            file=log,
            flush=True,
        )
        done.append((name, mod, info, dt, computed, cached))
    total = time.perf_counter() - t_all
    return write_report(done, quick, seed, total)


def write_report(done, quick: bool, seed: int, total: float) -> Path:
    from experiments import common

    common._MODE["quick"] = quick
    _, figures = common.out_dirs()
    figures.mkdir(parents=True, exist_ok=True)
    lines = [
        "# brwsim: reproduced figures and tables",
        "",
        f"Mode: {'quick (small runs)' if quick else 'full'}; seed {seed}; commit {_commit()}; "
        f"{datetime.date.today().isoformat()}; {platform.machine()}, {platform.system()}; "
        f"total wall time {total:.0f} s (points already cached are not recomputed: see the per-experiment counts).",
        "",
        "Convention everywhere: X = accepted draft tokens per verifier call (tokens per call = X + 1). "
        "Every ± and every band is a 95% confidence interval.",
        "",
    ]
    for name, mod, info, dt, computed, cached in done:
        doc = (mod.__doc__ or name).strip().split("\n\n")
        title = doc[0].replace("\n", " ")
        lines += [f"## {name}: {title}", ""]
        if len(doc) > 1:
            lines += [" ".join(p.replace("\n", " ") for p in doc[1:]), ""]
        lines.append(
            f"*Run: {dt:.1f} s, {computed} points computed, {cached} read from cache; rows in `results/{name}.csv`.*"
        )
        lines.append("")
        for fig in info.get("figures", []) or []:
            fig = Path(fig)
            lines += [f"![{name}]({fig.name})", ""]
        for tab in info.get("tables", []) or []:
            lines += [Path(tab).read_text().strip(), ""]
        summary = info.get("summary") or []
        if summary:
            lines.append("Measured:")
            lines.append("")
            lines += [f"- {s}" for s in summary]
            lines.append("")
    path = figures / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _cmd(args) -> int:
    only = [x.strip() for x in args.only.split(",")] if args.only else None
    path = run(quick=args.quick, only=only, seed=args.seed)
    print(f"wrote {path}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("reproduce", help="run every experiment and write figures/REPORT.md")
    p.add_argument("--quick", action="store_true", help="small runs (a few minutes in all)")
    p.add_argument("--only", default=None, help="comma-separated experiment names")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd)
