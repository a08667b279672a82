"""``brwsim reproduce [--quick] [--only NAME,...]``: every experiment, figure and table, and the report."""

from __future__ import annotations

from ..reproduce import run


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
