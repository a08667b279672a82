"""The ``brwsim`` command.

``brwsim simulate --law SPEC --P LIST --trees N --seed S [--batch B] [--json]``
prints a readable table, or with ``--json`` exactly one JSON object (see
:meth:`brwsim.estimate.SimulationResult.to_dict`). Bad input: one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from .errors import BrwsimError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def _P_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BrwsimError(f"--P must be a comma-separated list of integers, e.g. 1,4,16; got {text!r}") from None


def _fmt(x: float, width: int = 9) -> str:
    if x is None:
        return " " * (width - 1) + "-"
    if x == float("inf"):
        return f"{'inf':>{width}}"
    return f"{x:>{width}.4f}"


def print_table(d: dict, out=None) -> None:
    """A human-readable rendering of a simulate result dictionary."""
    out = out or sys.stdout
    mu_s = f"mu = {d['mu']:.4f}" + (f" +- {1.96 * d['mu_se']:.4f}" if d.get("mu_se") else " (exact)")
    mu2_s = f"mu_2 = {d['mu2']:.4f}" + (f" +- {1.96 * d['mu2_se']:.4f}" if d.get("mu2_se") else " (exact)")
    print(f"law {d['law']}   drafter {d.get('drafter', 'oracle')}", file=out)
    print(f"{mu_s} nats, {mu2_s} nats^2   trees {d['trees']}, seed {d['seed']}", file=out)
    print(f"{d['convention']}; +- is the 95% confidence half-width", file=out)
    rows = d["results"]
    bound_names = list(rows[0].get("bounds", {}) or {}) if rows else []
    head = f"{'P':>7}  {'E[X]':>9} {'+-95%':>8}"
    if any("check_mean" in r for r in rows):
        head += f"  {'check':>9} {'+-95%':>8}"
    for b in bound_names:
        head += f"  {b:>{max(9, len(b))}}"
    print(head, file=out)
    for r in rows:
        line = f"{r['P']:>7}  {_fmt(r['mean'])} {r['ci95']:>8.4f}"
        if "check_mean" in r:
            line += f"  {_fmt(r['check_mean'])} {r['check_ci95']:>8.4f}"
        elif any("check_mean" in x for x in rows):
            line += " " * 19
        for b in bound_names:
            line += "  " + _fmt(r["bounds"].get(b), max(9, len(b)))
        print(line, file=out)


def _cmd_simulate(args) -> int:
    from .estimate import simulate

    res = simulate(
        args.law,
        P=_P_list(args.P),
        trees=args.trees,
        seed=args.seed,
        batch=args.batch,
        check=args.check,
        progress=None if not args.json else False,
        drafter=args.drafter,
        draft_law=args.draft_law,
        devices=args.devices,
    )
    d = res.to_dict()
    if args.json:
        print(json.dumps(d))
    else:
        print_table(d)
        print(f"({res.seconds:.1f} s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="brwsim", description="Monte Carlo speed-of-light for speculative decoding trees.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    s = sub.add_parser("simulate", help="E[X] of the optimal P-node draft tree, with 95%% CIs and bounds")
    s.add_argument("--law", required=True, help="law SPEC, e.g. dirichlet:V=1000,alpha=0.1 or a .json Markov law")
    s.add_argument("--P", default="1,4,16,64", help="comma-separated verifier budgets (default 1,4,16,64)")
    s.add_argument("--trees", type=int, default=1000, help="independent trees (default 1000)")
    s.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
    s.add_argument("--batch", type=int, default=None, help="trees per jitted step (results do not depend on it)")
    s.add_argument("--check", action="store_true", help="also simulate the target's sampled continuation")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.add_argument("--devices", default=None, help="shard the oracle's trees over 'all' devices or N (same results)")
    s.add_argument(
        "--drafter",
        default=None,
        help="oracle (default), topq, eagle[:top_k=10,depth=7], chain, static:path=FILE|k=K, sequoia[:depth=D]",
    )
    s.add_argument("--draft-law", default=None, help="drafter's q: exact, noise:sigma=S, temp:T=T, mix:w=W,law=SPEC")
    s.set_defaults(func=_cmd_simulate)
    # Further subcommands live beside the code they drive; each module has
    # add_parser(subparsers) and is skipped only if its optional extra is absent.
    import importlib

    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return p


_SUBCOMMAND_MODULES: list[str] = ["brwsim.reproduce", "brwsim.cli_llm", "brwsim.cli_laws"]


def _one_cpu_device_per_core() -> None:
    """Let XLA's CPU backend expose one device per core, before its backend starts.

    XLA runs one CPU computation on one core; with a device per core the
    oracle's batch of trees is sharded over all of them (identical results,
    about 1.8x faster on 2 cores: benchmarks/README.md). XLA reads the flag
    when the backend starts (the first ``jax.devices()``), not at ``import
    jax``, so importing brwsim first is fine. An explicit device count in
    XLA_FLAGS is left as it is.
    """
    import os

    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" in flags:
        return
    n = os.cpu_count() or 1
    if n > 1:
        os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={n}").strip()


def main(argv: list[str] | None = None) -> int:
    _one_cpu_device_per_core()
    parser = build_parser()
    args = parser.parse_args(argv)
    from .lowering import unrolled_threefry

    try:
        with unrolled_threefry():  # the whole run: same random bits, faster on CPU
            return args.func(args)
    except BrwsimError as e:
        sys.stderr.write(f"brwsim: error: {e}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
