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
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

import brwsim

COUNTERS: Counter = Counter()  # "computed" / "cached" points, for tests and logs
_COUNTERS_LOCK = threading.Lock()  # points may be computed in several threads at once (measure_prompts)

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


_CHECKED_ROOTS: dict[str, Path] = {}


def check_out_root() -> Path:
    """The output root (``$BRWSIM_OUT``, default the current directory), checked once per value to be a
    directory this process can write in (or can make): a file, or a directory that refuses writes, is a
    one-line :class:`brwsim.errors.BrwsimError` before any point is computed."""
    from brwsim._cache import check_writable_dir

    value = os.environ.get("BRWSIM_OUT") or "."
    if value not in _CHECKED_ROOTS:
        _CHECKED_ROOTS[value] = check_writable_dir(value, "BRWSIM_OUT")
    return _CHECKED_ROOTS[value]


def out_dirs() -> tuple[Path, Path]:
    """(results dir, figures dir); override the root with BRWSIM_OUT (checked: :func:`check_out_root`).

    ``--quick`` runs write below ``results/quick`` and ``figures/quick`` so that
    a first look never overwrites the committed full-size figures.
    """
    root = check_out_root()
    sub = Path("quick") if _MODE["quick"] else Path()
    return root / "results" / sub, root / "figures" / sub


class _Parser(argparse.ArgumentParser):
    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        _MODE["quick"] = bool(getattr(ns, "quick", False))
        from brwsim.errors import BrwsimError

        try:
            check_out_root()  # before any work
        except BrwsimError as e:
            if args is not None:  # called by a program (brwsim reproduce): its own one-line error
                raise
            sys.stderr.write(f"{self.prog}: error: {e}\n")
            sys.exit(2)
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
                with _COUNTERS_LOCK:
                    COUNTERS["computed"] += 1
                return rows
    with _COUNTERS_LOCK:
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


# ---------------------------------------------------------------------------
# prompts of the real-model experiments: measured together, their passes packed, over several processes


def default_workers() -> int:
    """Processes that measure prompts side by side: one per CPU core (at most 4) on a CPU machine, one when torch
    sees a GPU (a GPU's passes are packed within one process)."""
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            return 1
    return max(1, min(4, len(os.sched_getaffinity(0))))


def add_prompt_options(ap: argparse.ArgumentParser, budget_help: str) -> None:
    """The options of an experiment that measures prompts (``--n``, ``--budget-seconds``, the batching)."""
    ap.add_argument("--n", type=int, default=None, help="prompts per task (default 64)")
    ap.add_argument("--budget-seconds", type=float, default=None, help=budget_help)
    ap.add_argument("--prompt-batch", type=int, default=8,
                    help="prompts each process measures at once, their model passes packed (default 8)")  # fmt: skip
    ap.add_argument("--workers", type=int, default=None,
                    help="processes measuring prompts side by side, one torch thread each (default: one per core, "
                         "at most 4; 1 on a GPU)")  # fmt: skip
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # K/N: this process measures share K of N


BUDGET_HELP = "measure no new prompt after this many seconds (each process; 0: score only the prompts already measured)"


def prompt_args(name: str, doc: str, argv, budget_help: str = BUDGET_HELP) -> tuple[argparse.ArgumentParser, object]:
    """(parser, checked arguments) of an experiment that measures prompts: :func:`parser` with
    :func:`add_prompt_options`, parsed from ``argv`` and checked by :func:`check_prompt_options`."""
    ap = parser(name, doc)
    add_prompt_options(ap, budget_help)
    args = ap.parse_args(argv)
    check_prompt_options(ap, args)
    return ap, args


def check_prompt_options(ap: argparse.ArgumentParser, args) -> None:
    if args.n is not None and args.n < 1:
        ap.error("--n must be at least 1")
    if args.budget_seconds is not None and not args.budget_seconds >= 0:
        ap.error("--budget-seconds must be a number >= 0")
    if args.prompt_batch < 1:
        ap.error("--prompt-batch must be at least 1")
    if args.workers is not None and args.workers < 1:
        ap.error("--workers must be at least 1")
    if args.worker is not None:
        k, _, n = args.worker.partition("/")
        if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
            ap.error(f"--worker must be K/N with 0 <= K < N, got {args.worker!r}")


def share(order: list, worker: str | None) -> list:
    """The prompts of ``order`` this process measures: every N-th from the K-th (``worker`` = ``K/N``)."""
    if worker is None:
        return list(order)
    k, n = (int(x) for x in worker.split("/"))
    return list(order)[k::n]


def measure_prompts(name: str, order: list, key, measure, width: int, budget: float | None, prepare=None) -> list:
    """Each prompt's cached point (``key(prompt)``: its cache parameters; ``measure(prompt)``: its rows): prompts
    not in the cache are measured ``width`` at a time in this process, their model passes packed
    (:func:`brwsim.llm.sources.rounds.run_concurrently`; the numbers do not depend on ``width``). After
    ``budget`` seconds no new prompt is started: its entry is None. Each finished prompt is in the cache at
    once, so an interrupted run keeps it. ``prepare()`` (loading the models) runs first, in this thread, when
    some prompt is to be measured."""
    from brwsim.llm.sources.rounds import run_concurrently

    t0 = time.perf_counter()
    if prepare is not None and budget != 0 and not all(is_cached(name, key(p)) for p in order):
        prepare()

    def job(p):
        def run():
            if budget is not None and time.perf_counter() - t0 > budget and not is_cached(name, key(p)):
                return None
            return cached(name, key(p), lambda: measure(p))

        return run

    return run_concurrently([job(p) for p in order], width)


def run_timing(name: str, order: list, key, run, label: str | None = None) -> dict | None:
    """Measure the prompts of ``order`` not yet cached (points of experiment ``name``) with ``run()`` and time it:
    the run's wall seconds, the prompts it measured, and what ``run()`` returns (its settings). When nothing was
    left to measure, the timing of the last run that measured them (kept in the cache under ``label``, default
    ``name``; None if none is known)."""
    path = out_dirs()[0] / ".cache" / (label or name) / "timing.json"
    before = sum(is_cached(name, key(p)) for p in order)
    t0 = time.perf_counter()
    info = run()
    wall = time.perf_counter() - t0
    new = sum(is_cached(name, key(p)) for p in order) - before
    if new == 0:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None
    timing = {"wall_seconds": wall, "prompts_measured": new, **(info or {}),
              "date": time.strftime("%Y-%m-%d", time.gmtime())}  # fmt: skip
    write_atomic(path, json.dumps(timing).encode())
    return timing


RATES_ENV = "BRWSIM_FLOOR_RATES"  # "BANDWIDTH,FLOPS": the rates a worker's floors use (its parent's)


def floor_rates() -> dict:
    """This machine's copy bandwidth and float32 matmul rate with one torch thread, as every pass's floor uses
    them (:func:`brwsim.llm.sources._packed.set_rates`): measured here (about two seconds), or a worker's
    parent's (the environment variable ``BRWSIM_FLOOR_RATES``), so that all processes of a run share them."""
    from brwsim.llm.sources._packed import set_rates

    if os.environ.get(RATES_ENV):
        bw, fl = (float(x) for x in os.environ[RATES_ENV].split(","))
    else:
        import torch

        from brwsim.speedup._timing import machine_peaks

        torch.set_num_threads(1)
        peaks = machine_peaks()
        bw, fl = peaks.bandwidth, peaks.flops
        os.environ[RATES_ENV] = f"{bw!r},{fl!r}"  # the workers started from here inherit them
    set_rates(bw, fl)
    return {"bandwidth": bw, "flops": fl}


@contextlib.contextmanager
def workers(module: str, argv: list[str], n: int, log=print, program: list[str] | None = None):
    """Run ``python -m experiments.MODULE *argv --worker K/N`` for K = 1 .. N - 1 beside this process (which is
    worker 0) while the block runs; then wait for them. Each worker leads its own process group, and every group
    is ended, children included, whatever happens (an error, Ctrl-C); a worker that fails is a one-line error
    naming it. ``program``: what follows the interpreter instead of ``-m experiments.MODULE``."""
    procs = []
    program = program or ["-m", f"experiments.{module}"]
    try:
        for k in range(1, n):
            cmd = [sys.executable, *program, *argv, "--worker", f"{k}/{n}"]
            procs.append(subprocess.Popen(cmd, start_new_session=True))
        if n > 1:
            log(f"{n} processes measure the prompts (this one and {n - 1} worker(s))")
        yield
        failed = [(k, p.wait()) for k, p in enumerate(procs, 1)]
        failed = [(k, rc) for k, rc in failed if rc != 0]
        if failed:
            from brwsim.errors import BrwsimError

            k, rc = failed[0]
            raise BrwsimError(f"worker {k} of {n} ({module}) failed with exit status {rc}; its messages are above")
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def worker_argv(args, names=("seed", "n", "budget_seconds", "prompt_batch")) -> list[str]:
    """The command-line options a worker process gets from its parent's ``args``."""
    out = ["--quick"] if getattr(args, "quick", False) else []
    for k in names:
        v = getattr(args, k, None)
        if v is not None:
            out += [f"--{k.replace('_', '-')}", str(v)]
    return out
