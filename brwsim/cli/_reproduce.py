"""``brwsim reproduce [--quick] [--only NAME,...] [--budget-seconds S]``: every experiment, figure, table, report."""

from __future__ import annotations

import sys

from experiments import common

from ..reproduce import run


def interrupted_message(computed: int, cached: int) -> str:
    """What an interrupted run tells: how many points it finished (each one is in the cache) and how to go on."""
    if computed + cached == 0:
        return "brwsim: interrupted before any point finished; nothing was cached"
    results, _ = common.out_dirs()
    return (
        f"brwsim: interrupted: {computed} point(s) computed and cached in this run, {cached} read from the cache "
        f"(under {results / '.cache'}); rerun the same command to go on from them"
    )


def _cmd(args) -> int:
    only = args.only.split(",") if args.only is not None else None
    before = dict(common.COUNTERS)
    try:
        path = run(quick=args.quick, only=only, seed=args.seed, budget_seconds=args.budget_seconds)
    except KeyboardInterrupt:
        computed = common.COUNTERS["computed"] - before.get("computed", 0)
        cached = common.COUNTERS["cached"] - before.get("cached", 0)
        sys.stderr.write(interrupted_message(computed, cached) + "\n")
        return 130
    print(f"wrote {path}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("reproduce", help="run every experiment and write figures/REPORT.md")
    p.add_argument("--quick", action="store_true", help="small runs (a few minutes in all)")
    p.add_argument("--only", default=None, help="comma-separated experiment names")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--budget-seconds",
        type=float,
        default=None,
        help="each real-model experiment starts no new prompt after this many seconds (0: score only the prompts "
        "already measured and cached); the rows and report carry the prompt counts scored",
    )
    p.set_defaults(func=_cmd)
