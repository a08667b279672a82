"""``brwsim plan``: from tokens per call to tokens per second: the speedup at each budget P and the best P.

``brwsim plan --law SPEC | --model M | --from-json FILE --hardware H [--params N | --target SHAPE] [--json]``

E[X](P) comes from a synthetic law (``--law``, simulated: seconds), a real
model (``--model``, measured with small budgets: minutes), or a saved
``brwsim simulate --json`` / ``brwsim llm --json`` output (``--from-json``).
H is an accelerator preset (h100, h200, a100, l4: the roofline with its
datasheet numbers), ``custom:bw=B,flops=F[,overhead=S]``, ``csv:FILE`` (rows
``P,seconds``), ``cpu-measured`` (the real model's tree-verification pass
timed here) or ``cpu-roofline`` (this machine's measured bandwidth and FLOP/s) or
``cpu-achieved`` (the roofline with this machine's measured kernel FLOP/s per matrix shape).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

from .._cache import check_path_name
from ..drafters._sequoia import sequoia_budgets
from ..errors import BrwsimError
from ..estimate import simulate
from ..llm.drafters import parse_drafter
from ..llm.drafters.model_dir import check_dir
from ..llm.results import run_from_dict
from ..llm.run import RunOptions, open_drafters, run_llm
from ..llm.sources import load_prompts, load_source
from ..speedup import (
    MEANING,
    MEASURED,
    P_CAP,
    DraftCost,
    RooflineCost,
    SpeedupTable,
    acceptance_vector,
    derived_draft_cost,
    drafter_names,
    fixed_grid,
    from_llm,
    from_simulation,
    grown_table,
    hardware_names,
    measure_draft_calls,
    model_names,
    parse_custom,
    preset,
    read_cost_csv,
    speedup_table,
    target_names,
    verify_cost,
)
from ._args import P_list, emit

COST_WORD = {"measured": "measured here", "modelled": "modelled", "table": "user table"}
SAVED = "E[X] was saved up to P = {P}: run with larger budgets to find the best"
MEASURED_UP_TO = "E[X] was measured up to P = {P}: give larger budgets (--P) to find the best"


def print_plan(tables: list[SpeedupTable], out=None) -> None:
    out = out or sys.stdout
    cost = tables[0].cost
    print(f"t_verify: {COST_WORD.get(cost.kind, cost.kind)} ({cost.label})", file=out)
    print(MEANING, file=out)
    print("E[X] and speedup are estimates; +- is the 95% CI of E[X]'s Monte Carlo error carried through", file=out)
    for t in tables:
        print(f"\n{t.drafter}: E[X] from {t.source}; draft cost: {t.draft.label}", file=out)
        spread = any(r.spread for r in t.rows)
        head = f"{'P':>5} {'E[X]':>8} {'+-95%':>7} {'t_verify ms':>12}" + (f" {'min..max':>15}" if spread else "")
        print(head + f" {'t_draft ms':>10} {'speedup':>8} {'+-95%':>7}", file=out)
        for r in t.rows:
            line = f"{r.P:>5} {r.ex:>8.4f} {r.ex_ci95:>7.4f} {1e3 * r.t_verify:>12.3f}"
            if spread:
                s = f"{1e3 * r.spread[0]:.1f}..{1e3 * r.spread[1]:.1f}" if r.spread else "-"
                line += f" {s:>15}"
            print(line + f" {1e3 * r.t_draft:>10.3f} {r.speedup:>8.3f} {r.speedup_ci95:>7.3f}", file=out)
        b = t.best
        near = ", ".join(str(p) for p in t.near_best())
        print(
            f"best {t.best_text()}: speedup {b.speedup:.3f} +- {b.speedup_ci95:.3f} (estimate); "
            f"budgets whose 95% CI reaches the best's: {near}",
            file=out,
        )
        print(t.recommended_text(), file=out)


def _from_json(path: str, cost_kw: dict, args) -> list[SpeedupTable]:
    check_path_name(path, "--from-json")
    p = Path(path).expanduser()
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise BrwsimError(f"--from-json {path!r} {what}; give the file a brwsim simulate/llm --json run wrote")
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise BrwsimError(f"--from-json {path!r} cannot be read ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BrwsimError(f"--from-json {path!r} is not JSON ({e}); give a brwsim simulate/llm --json output") from None
    try:
        if isinstance(d, dict) and "tasks" in d:
            for t in d["tasks"]:
                _check_rows(t["results"], path)
            cost = verify_cost(args.hardware, P=_Ps(d["tasks"][0]["results"]), **cost_kw)
            run = run_from_dict(d)
            tables = from_llm(run, cost, task=args.task, bytes_per_param=args.bytes_per_param, context=args.context)
            return fixed_grid(tables, SAVED)
        if isinstance(d, dict) and "results" in d:
            ex = _check_rows(d["results"], path)
            cost = verify_cost(args.hardware, P=_Ps(d["results"]), **cost_kw)
            src = f"{path} ({d.get('law', '?')}, {d.get('trees', '?')} trees)"
            return fixed_grid([speedup_table(ex, cost, drafter=d.get("drafter", "oracle"), source=src)], SAVED)
    except (KeyError, TypeError, IndexError, ValueError) as e:
        if isinstance(e, BrwsimError):
            raise
        what = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        msg = f"--from-json {path!r}: cannot read its result rows ({what}); give a brwsim --json output"
        raise BrwsimError(msg) from None
    raise BrwsimError(f"--from-json {path!r} is neither a brwsim simulate nor a brwsim llm --json output")


def _check_rows(rows, path: str) -> list[tuple[int, float, float]]:
    """(P, mean, ci95) of saved result rows: P an integer >= 1, E[X] a finite number in [0, P], ci95 finite >= 0
    (null or NaN, one sample's undefined half-width, reads as 0)."""
    out = []
    for i, r in enumerate(rows):
        P, m, c = r["P"], r["mean"], r.get("ci95")
        c = math.nan if c is None else c
        if isinstance(P, bool) or not isinstance(P, int) or P < 1:
            raise BrwsimError(f"--from-json {path!r}: row {i} has P = {P!r}; P must be an integer >= 1")
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not (math.isfinite(m) and 0 <= m <= P):
            raise BrwsimError(f"--from-json {path!r}: row {i} (P = {P}) has E[X] = {m!r}; it must be finite, in [0, P]")
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not (math.isnan(c) or 0 <= c < math.inf):
            raise BrwsimError(f"--from-json {path!r}: row {i} (P = {P}) has ci95 = {c!r}; it must be finite, >= 0")
        out.append((P, float(m), float(c)))
    return out


def _Ps(rows) -> list[int]:
    return [int(r["P"]) for r in rows]


def _user_draft(args, name: str) -> DraftCost:
    """The draft cost given on the command line: ``--draft-pass-seconds`` per pass, one pass per drafted token or
    ``--draft-passes`` per tree."""
    passes = "P" if args.draft_passes is None else args.draft_passes
    per = "drafted token" if passes == "P" else f"tree ({passes} passes)"
    label = f"{name}: {1e3 * args.draft_pass_seconds:g} ms per pass, one pass per {per}"
    return DraftCost(args.draft_pass_seconds, passes, label, "user" if args.draft_pass_seconds else "none")


def _law_tables(args, P, cost) -> list[SpeedupTable]:
    """The oracle's table (the speed of light) and, with ``--drafter``, the simulated drafter's beside it; each
    grid grown until its best P is interior (:func:`brwsim.speedup.grown_table`)."""
    kw = dict(trees=args.trees, seed=args.seed, progress=False)
    out = [grown_table(lambda Ps: from_simulation(simulate(args.law, P=Ps, **kw), cost), P, cost, args.P_max)]
    drafter = args.drafter[-1] if args.drafter else None
    if drafter and drafter != "oracle":
        draft = _user_draft(args, drafter)
        sim = lambda Ps: simulate(args.law, P=Ps, drafter=drafter, draft_law=args.draft_law, **kw)  # noqa: E731
        out.append(grown_table(lambda Ps: from_simulation(sim(Ps), cost, draft), P, cost, args.P_max))
    return out


def _acceptance_tables(args, P, cost) -> tuple[list[SpeedupTable], list[dict]]:
    """Sequoia's static tree under a raw acceptance vector (``--acceptance``): its exact value X per budget
    (:func:`brwsim.drafters._sequoia.sequoia_budgets`, no Monte Carlo error), the grid grown until the best P is
    interior; the trees of every budget tried."""
    a = acceptance_vector(args.acceptance)
    trees: dict[int, dict] = {}

    def make(Ps):
        for r in sequoia_budgets(a, [p for p in Ps if p not in trees], args.tree_depth):
            trees[r["P"]] = r
        src = f"Sequoia's tree under the acceptance vector {args.acceptance!r} ({len(a)} ranks)"
        ex = [(p, trees[p]["X"], 0.0) for p in Ps]
        return speedup_table(ex, cost, _user_draft(args, "sequoia"), drafter="sequoia (acceptance vector)", source=src)

    t = grown_table(make, P, cost, args.P_max)
    return [t], [trees[r.P] for r in t.rows[1:]]


def tables_for(args) -> list[SpeedupTable]:
    P = P_list(args.P)
    cost_kw = dict(
        params=args.params, target=args.target, bytes_per_param=args.bytes_per_param, context=args.context,
        overhead=args.overhead, repeats=args.repeats, model=args.verifier,
    )  # fmt: skip
    if args.hardware is None:
        raise BrwsimError(f"give --hardware: {hardware_names()}")
    if args.from_json:
        return _from_json(args.from_json, cost_kw, args)
    if args.law:
        return _law_tables(args, P, verify_cost(args.hardware, P=P, **cost_kw))  # hardware errors first
    if args.acceptance:
        raise BrwsimError("internal: --acceptance goes through _acceptance_tables")  # pragma: no cover
    return _model_tables(args, P, cost_kw)


def _model_tables(args, P, cost_kw) -> list[SpeedupTable]:
    """The oracle's table and, with ``--drafter SPEC`` (repeatable), every real drafter's with its draft cost
    (measured here on ``cpu-measured``, else modelled from its size)."""
    hw = args.hardware.strip()
    if hw.startswith("csv:"):  # bad hardware: one line before the slow model load
        read_cost_csv(hw[4:])
    elif hw.startswith("custom"):
        parse_custom(hw)
    elif hw not in MEASURED:
        preset(hw.lower())
    for spec in args.drafter or ():  # a missing model:DIR is one line before the slow model load too
        parsed = parse_drafter(spec)
        if parsed.family == "model":
            check_dir(parsed)
    opts = RunOptions(model=args.model, prompts=args.prompts, n=args.n, P=tuple(P), walks=args.walks,
                      depth=args.depth, seed=args.seed, trees=args.surrogate_trees, threads=1,
                      drafters=tuple(args.drafter or ())).checked()  # fmt: skip
    source = load_source(args.model, threads=1)
    cost = verify_cost(hw, P=P, source=source, **(cost_kw | {"model": args.model}))
    drafters, cal = open_drafters(source, opts.drafters, opts.temperature, None, opts.heldout_tokens)
    run = run_llm(opts, source=source, opened=(drafters, cal))
    draft = {d.name: _drafting(args, d, source, cost, P, opts) for d in drafters}
    return fixed_grid(from_llm(run, cost, task=args.task, draft_costs=draft), MEASURED_UP_TO)


def _drafting(args, d, source, cost, P, opts) -> DraftCost:
    """A real drafter's cost per target call as its fixed builder spends it: speculative decoding run here on the
    first prompts of the run (``--draft-prompts``, ``--draft-tokens`` each) at every budget. On cpu-measured, its
    drafting seconds per call over the plain step around it, times the table's step; on a roofline, its measured
    passes per call at the roofline's pass time for its footprint; on another cost model (a csv table, no
    footprint), its one pass per node derived from its size."""
    fp = d.footprint()
    if args.hardware.strip() != "cpu-measured" and not (isinstance(cost, RooflineCost) and fp is not None):
        return derived_draft_cost(cost, d, args.bytes_per_param, args.context)
    prompts = load_prompts(opts.prompts, opts.n)[: args.draft_prompts]
    ids = [source.encode(p.text) for p in prompts]
    print(f"plan: {d.name}: drafting per call in speculative decoding on {len(ids)} prompts", file=sys.stderr)
    calls = measure_draft_calls(d, source, ids, P, args.draft_tokens, 1.0, args.seed, d.name)
    t0 = cost.t_verify(0)
    if args.hardware.strip() == "cpu-measured":
        return calls.cost(t0)
    dc = calls.roofline_cost(cost, fp)
    return dataclasses.replace(dc, fraction=dc.t_pass / t0)


def _cmd(args) -> int:
    if sum(x is not None for x in (args.law, args.model, args.from_json, args.acceptance)) != 1:
        raise BrwsimError("give exactly one of --law SPEC, --model M, --from-json FILE or --acceptance VECTOR")
    if args.tree_depth is not None and (args.acceptance is None or args.tree_depth < 1):
        raise BrwsimError("--tree-depth D (>= 1) goes with --acceptance: draft levels below the root")
    if args.P_max < 1:
        raise BrwsimError(f"--P-max must be >= 1, got {args.P_max}")
    for name in ("params", "bytes_per_param", "overhead", "draft_pass_seconds"):  # argparse reads --x=-- as []
        v = getattr(args, name)
        if v is not None and not isinstance(v, (int, float)):
            raise BrwsimError(f"--{name.replace('_', '-')} needs a number, got {v!r}")
    if not 0 <= args.draft_pass_seconds < math.inf or args.draft_passes is not None and args.draft_passes < 1:
        raise BrwsimError("--draft-pass-seconds must be a finite number >= 0 and --draft-passes >= 1")
    if args.draft_prompts < 1 or args.draft_tokens < 1:
        got = f"{args.draft_prompts}, {args.draft_tokens}"
        raise BrwsimError(f"--draft-prompts and --draft-tokens must be >= 1, got {got}")
    if args.acceptance is not None:
        return _acceptance_cmd(args)
    tables = tables_for(args)
    return emit(args, {"tables": [t.to_dict() for t in tables]}, lambda _: print_plan(tables))


def _acceptance_cmd(args) -> int:
    """``--acceptance``: the speedup table of Sequoia's tree, and each budget's tree and value in Sequoia's terms."""
    if args.hardware is None:
        raise BrwsimError(f"give --hardware: {hardware_names()}")
    P = P_list(args.P)
    a = acceptance_vector(args.acceptance)  # bad vectors: one line before any timing
    cost_kw = dict(params=args.params, target=args.target, bytes_per_param=args.bytes_per_param, context=args.context,
                   overhead=args.overhead, repeats=args.repeats, model=args.verifier)  # fmt: skip
    cost = verify_cost(args.hardware, P=P, **cost_kw)
    tables, trees = _acceptance_tables(args, P, cost)

    def show(_):
        print(f"acceptance rates a[rank 1..{len(a)}]: {', '.join(f'{x:.4g}' for x in a)}")
        print("Sequoia's terms: its budget m = P + 1 counts the root; tau = X + 1; max_depth = tree depth + 1")
        print(f"{'P':>5} {'m':>5} {'X':>9} {'tau':>9} {'depth':>5}")
        for r in trees:
            print(f"{r['P']:>5} {r['m']:>5} {r['X']:>9.5f} {r['tau']:>9.5f} {r['depth']:>5}")
        print()
        print_plan(tables)
        b = tables[0].best
        if b.P:
            paths = next(r for r in trees if r["P"] == b.P)["paths"]
            width = [sum(len(p) == d for p in paths) for d in range(1, max(map(len, paths)) + 1)]
            levels = str(width) if len(width) <= 32 else f"{str(width[:16])[:-1]}, ... ({len(width)} levels)]"
            print(f"tree at P = {b.P}: nodes per level {levels} (--json lists every budget's rank paths)")

    return emit(args, {"tables": [t.to_dict() for t in tables], "sequoia": trees}, show)


def add_parser(sub) -> None:
    s = sub.add_parser("plan", help="speedup (tokens per second) at each budget P on given hardware, and the best P")
    s.add_argument("--law", default=None, help="E[X] from a simulated law SPEC (fast)")
    s.add_argument("--model", default=None, help=f"E[X] from a real model run here ({model_names()}, a directory ...)")
    s.add_argument("--from-json", default=None, help="E[X] from a saved brwsim simulate/llm --json output")
    s.add_argument(
        "--acceptance",
        default=None,
        help="E[X] of Sequoia's static tree under positional acceptance rates: a comma list (rank 1 first) or "
        "Sequoia's saved vector (.pt or a text file of its numbers)",
    )
    s.add_argument("--tree-depth", type=int, default=None, help="with --acceptance: at most D levels below the root")
    s.add_argument("--P-max", type=int, default=P_CAP, help=f"the grid grows to at most this P (default {P_CAP})")
    s.add_argument("--hardware", default=None, help=hardware_names())
    s.add_argument("--params", type=float, default=None, help="target parameter count for the roofline, e.g. 8e9")
    s.add_argument("--target", default=None, help=f"target shape preset for the roofline: {target_names()}")
    s.add_argument(
        "--bytes-per-param",
        type=float,
        default=2.0,
        help="the target's weight and KV bytes per value (default 2: bf16); on a csv: or measured cost, the width a "
        "real drafter's share of the step is derived at",
    )
    s.add_argument("--context", type=int, default=512, help="context length L before the tree (default 512)")
    s.add_argument("--overhead", type=float, default=None, help="fixed seconds per target call (roofline)")
    s.add_argument("--repeats", type=int, default=5, help="timed repeats per P for cpu-measured (default 5)")
    s.add_argument(
        "--verifier", default="smollm2-135m", help="model timed by cpu-measured/-roofline/-achieved with --law"
    )
    s.add_argument("--P", default="1,2,4,8,16,32,64", help="verifier budgets (default 1,2,4,...,64)")
    s.add_argument("--trees", type=int, default=1000, help="simulated trees with --law (default 1000)")
    s.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    d = s.add_argument_group("a drafter beside the oracle")
    d.add_argument(
        "--drafter",
        action="append",
        default=None,
        help="with --law: topq, eagle, chain, ... (brwsim simulate's); with --model (repeatable): a real drafter, "
        f"{drafter_names()} (draft cost measured here with cpu-measured, else modelled from its size)",
    )
    d.add_argument("--draft-law", default=None, help="with --law: the drafter's q (brwsim simulate's --draft-law)")
    d.add_argument("--draft-pass-seconds", type=float, default=0.0, help="with --law: seconds per drafter pass")
    d.add_argument("--draft-passes", type=int, default=None, help="with --law: passes per tree (default P)")
    g = s.add_argument_group("--model: the real-model run (brwsim llm's options, small defaults)")
    g.add_argument(
        "--prompts", default="humaneval", help="humaneval, pydoc, sharegpt or a .jsonl file (default humaneval)"
    )
    g.add_argument("--n", type=int, default=2, help="prompts per task (default 2)")
    g.add_argument("--walks", type=int, default=8, help="sampled continuations per prompt (default 8)")
    g.add_argument("--depth", type=int, default=16, help="tokens per continuation (default 16)")
    g.add_argument("--surrogate-trees", type=int, default=300, help="i.i.d. surrogate trees (default 300)")
    g.add_argument("--task", default=None, help="only this task of a real-model result")
    g.add_argument("--draft-prompts", type=int, default=2, help="with --drafter: prompts the drafting per call is "
                   "measured on in speculative decoding (default 2)")  # fmt: skip
    g.add_argument("--draft-tokens", type=int, default=16, help="with --drafter: tokens per such run (default 16)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.set_defaults(func=_cmd)
