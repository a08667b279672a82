"""``brwsim simulate``: E[X] of the optimal (or another drafter's) P-node tree, with CIs and labelled bounds."""

from __future__ import annotations

import sys

from .. import _interrupts as interrupts
from ..estimate import simulate
from ._args import P_list
from ._table import bound_cells, bound_groups, bound_header, bound_notes, fmt, group_header, strict_json


def print_table(d: dict, out=None) -> None:
    """A human-readable rendering of a simulate result dictionary."""
    out = out or sys.stdout
    mu_s = f"mu = {d['mu']:.4f}" + (f" +- {1.96 * d['mu_se']:.4f}" if d.get("mu_se") else " (exact)")
    mu2_s = f"mu_2 = {d['mu2']:.4f}" + (f" +- {1.96 * d['mu2_se']:.4f}" if d.get("mu2_se") else " (exact)")
    kind = "i.i.d. law" if d.get("iid", True) else "Markov law: mu, mu_2 are the spine's long-run values"
    print(f"law {d['law']}   drafter {d.get('drafter', 'oracle')}   ({kind})", file=out)
    done = f" (interrupted: {d['trees']} of {d['trees_requested']} finished)" if d.get("interrupted") else ""
    print(f"{mu_s} nats, {mu2_s} nats^2   trees {d['trees']}{done}, seed {d['seed']}", file=out)
    print(f"{d['convention']}; +- is the 95% confidence half-width of the estimate", file=out)
    rows = d["results"]
    groups = bound_groups(rows)
    has_check = any("check_mean" in r for r in rows)
    head = f"{'P':>7}  {'E[X]':>9} {'+-95%':>8}" + (f"  {'check':>9} {'+-95%':>8}" if has_check else "")
    if groups:
        print(group_header(len(head), groups), file=out)
    print(head + bound_header(groups), file=out)
    for r in rows:
        line = f"{r['P']:>7}  {fmt(r['mean'])} {r['ci95']:>8.4f}"
        if "check_mean" in r:
            line += f"  {fmt(r['check_mean'])} {r['check_ci95']:>8.4f}"
        elif has_check:
            line += " " * 19
        print(line + bound_cells(r, groups), file=out)
    for note in bound_notes(groups):
        print(note, file=out)


def _cmd(args) -> int:
    res = simulate(
        args.law,
        P=P_list(args.P),
        trees=args.trees,
        seed=args.seed,
        batch=args.batch,
        check=args.check,
        progress=None,  # a bar on a terminal, else a line a minute once a run is slow (stderr: --json stays clean)
        drafter=args.drafter,
        draft_law=args.draft_law,
        devices=args.devices,
        checkpoint=args.checkpoint,
        round_trees=args.round_trees,
        kernel=args.kernel,
    )
    d = res.to_dict()
    if args.json:
        print(strict_json(d))
    else:
        print_table(d)
        print(f"({res.seconds:.1f} s)")
    if res.interrupted:
        kept = (
            f"; the finished rounds are kept in {res.checkpoint}: rerun the same command to resume"
            if res.checkpoint
            else "; run with --checkpoint DIR to keep finished rounds for a rerun"
        )
        sys.stderr.write(
            f"brwsim: interrupted{interrupted_by()} after {res.trees} of {res.trees_requested} trees: the estimates "
            f"above use the finished trees; no bounds were computed{kept}\n"
        )
        return interrupts.exit_status()
    return 0


def interrupted_by() -> str:
    """`` by SIGTERM`` (and `` to process 1`` in a multi-process run stopped by another process's signal)."""
    sig = interrupts.received()
    if sig is None:
        return ""
    by = interrupts.by()
    return f" by {interrupts.name(sig)}" + ("" if by is None else f" (sent to process {by})")


def add_parser(sub) -> None:
    s = sub.add_parser("simulate", help="E[X] of the optimal P-node draft tree, with 95%% CIs and bounds")
    s.add_argument("--law", required=True, help="law SPEC, e.g. dirichlet:V=1000,alpha=0.1 or a .json Markov law")
    s.add_argument("--P", default="1,4,16,64", help="comma-separated verifier budgets (default 1,4,16,64)")
    s.add_argument("--trees", type=int, default=1000, help="independent trees (default 1000)")
    s.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
    s.add_argument("--batch", type=int, default=None, help="trees per jitted step (results do not depend on it)")
    s.add_argument("--check", action="store_true", help="also simulate the target's sampled continuation")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="keep the running sums of every finished round in DIR; the same command again resumes there",
    )
    s.add_argument(
        "--round-trees",
        type=int,
        default=None,
        help="trees per process in a round, kept by --checkpoint (default and at most 65536; same results)",
    )
    s.add_argument("--devices", default=None, help="shard the oracle's trees over 'all' devices or N (same results)")
    s.add_argument(
        "--kernel",
        default="auto",
        choices=("auto", "jax", "native"),
        help="oracle kernel: auto (default) runs native C++ on CPU for fixed, pool and table laws (the JAX "
        "kernel's numbers bit for bit), JAX elsewhere; native also draws dirichlet, logitnormal, zipf, temp "
        "of them and Markov laws of them and fixed (faster) from its own random stream: the same law, other numbers",
    )
    s.add_argument(
        "--drafter",
        default=None,
        help="oracle (default), topq, eagle[:top_k=10,depth=7], chain, static:path=FILE|k=K, sequoia[:depth=D]",
    )
    s.add_argument("--draft-law", default=None, help="drafter's q: exact, noise:sigma=S, temp:T=T, mix:w=W,law=SPEC")
    s.set_defaults(func=_cmd)
