"""The planner checked against real speculative decoding: measured tokens per second against predicted speedups.

For every practical drafter (layer skipping, a 4-bit copy, prompt lookup, the
EAGLE-style head, and a ``model:DIR`` drafter: the layer-skipping model of
experiments/real_drafters.py's ``layerskip:auto,n=8`` choice, layers 13-20
skipped, saved as its own transformers directory) and every task (HumanEval
code, pydoc prose, ShareGPT chat), at two budgets: the P the planner picks for
that drafter and task (the best P of its speedup table on this CPU,
experiments/speedup.py's ``drafter_tables``: E[X] of the builder fixed in
advance along the target's own continuations of the planner's prompts
(experiments.continuation; else at the prompts' end, the real-drafters rows),
t_verify measured here at the nodes it drafts, and the drafter's
drafting per call measured here in speculative decoding at every budget of the
grid, on calibration prompts of the real-drafters run: its passes per call at
their own row counts and its host work, as a fraction of the plain step) and
one other P: 8 when the pick is P = 0 (do not speculate: its run is
plain decoding beside the drafter's prefill, a check of the loop's overhead),
32 when the pick is 1..8, else 4.

Per prompt (``--n`` per task, default 16, held out from the planner: none of
the 64 a task whose E[X] the planner reads; ``held_out_order``), on the
shipped model at temperature 1 (the temperature of the real-drafters E[X]):
``--new-tokens`` tokens (default 128; an end token
does not stop generation) by real speculative decoding (brwsim.llm.specdec:
the drafter's fixed builder drafts a tree of at most P nodes, the target
verifies it in one pass with a tree attention mask, exact recursive rejection
sampling) for every (drafter, P), each drafter's two budgets between two
plain-decoding runs of the same target code (a unit cached on its own, so a
run resumes, and a drafter measured later joins the others' units). A
configuration's speedup on a prompt is its tokens per second over the mean
tokens per second of the two plain runs around it (paired, on the same
prompt); measured = the mean of these ratios over prompts, with its Student t
95% half-width. The prefill of the prompt (the target's and the drafter's) is
not timed. Predicted = the planner's speedup at the same drafter, task and P,
and its 95% half-width (E[X]'s over the planner's prompts; timing
spreads).

Run it alone on one pinned core: ``taskset -c 1 python -m experiments.end_to_end``
(torch uses one thread). Every prompt's measurements are cached, so a run
stopped early resumes; ``--budget-seconds S`` starts no new prompt after S
seconds and reports the prompts measured. Writes results/end_to_end.csv (task,
drafter, P, predicted, predicted_ci95, measured, measured_ci95, prompts,
new_tokens), results/end_to_end_detail.csv (accepted tokens per call measured
and predicted, seconds per call verifying and drafting, drafter passes and
drafted nodes per call),
results/end_to_end_prompts.jsonl, figures/end_to_end.{png,pdf} and
figures/end_to_end_table.md. ``--quick``: 2 prompts per task, 32 tokens.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time

import numpy as np

import brwsim
from brwsim._stats import mean_ci95
from experiments import common
from experiments import speedup as planner

NAME = "end_to_end"
MODEL = "smollm2-135m"
TASKS = ("humaneval", "pydoc", "sharegpt")
MODEL_DIR_LAYERS = "13-20"  # the model:DIR drafter: the target with these layers skipped, saved as a directory
MODEL_DIR_ROWS = f"layerskip:skip={MODEL_DIR_LAYERS}"  # ... whose E[X] rows and draft cost are this drafter's
PLANNER_PROMPTS = 64  # prompts a task of the real-drafters run: the planner's E[X]; the runs here score others


def settings(
    quick: bool,
    seed: int,
    n: int | None = None,
    new_tokens: int | None = None,
    device: str = "cpu",
    drafters: list[str] | None = None,
) -> dict:
    head = "eagle-head:quick" if quick else "eagle-head:chat"
    every = ["layerskip:skip=14-17", "lowbit:bits=4", "lookup:n=3", head, "model:DIR"]
    if drafters:
        unknown = [d for d in drafters if d not in every]
        if unknown:
            raise SystemExit(f"end_to_end: error: --drafters {','.join(unknown)}: choose from {','.join(every)}")
        every = [d for d in every if d in drafters]
    n, new_tokens = n or (2 if quick else 16), new_tokens or (32 if quick else 128)
    out = dict(model=MODEL, tasks=list(TASKS), n=n, new_tokens=new_tokens, T=1.0, seed=seed, drafters=every,
               version=brwsim.__version__, loop=planner._loop_version())  # fmt: skip
    return out | ({} if device == "cpu" else {"device": device})


def other_Ps(table) -> list[int]:
    """The budget measured beside the planner's pick: 8 when the pick is P = 0 (the planner says: do not speculate;
    8 is the oracle's best budget on this CPU), 32 when the pick is 1..8, else 4; moved to the nearest budget (in
    ln P) of the planner's grid, where it has a prediction."""
    best = table.best.P
    grid = sorted(r.P for r in table.rows if r.P > 0 and r.P != best)
    want = [8 if best == 0 else 32 if best <= 8 else 4]
    return list(dict.fromkeys(min(grid, key=lambda P: abs(math.log(P / w))) for w in want)) if grid else []


# ---------------------------------------------------------------------------
# the planner's predictions (experiments/speedup.py, this CPU's panel)


def predictions(quick: bool, seed: int, device: str = "cpu", names: list[str] | None = None) -> dict:
    """{(task, drafter name): SpeedupTable} of the planner on this CPU (or with the target's step and the drafters'
    drafting per call timed on ``device``); ``names``: only these drafters of the rows (default: every one, timed
    once for experiments.speedup too)."""
    params = planner.settings(quick, seed) | {"device": device}
    cpu = planner.cpu_cost(params, params["P"])
    costs = planner.all_costs(params) if names is None else planner.drafter_costs(params, names)
    calls = planner.drafter_calls(params, names or planner.row_drafters())
    tables = planner.drafter_tables(params, cpu, costs, calls)
    return {(task, name): t for panel, task, name, t in tables if panel == "cpu"}


def predicted_at(table, P: int) -> tuple[float, float, float]:
    """(speedup, its 95% half-width, E[X]) of a planner table at P (NaN when P is not in its grid)."""
    for r in table.rows:
        if r.P == P:
            return r.speedup, r.speedup_ci95, r.ex
    return math.nan, math.nan, math.nan


# ---------------------------------------------------------------------------
# models, opened once per process

_OPEN: dict = {}


def model_dir(target) -> str:
    """The ``model:DIR`` drafter's directory (made once per machine in the user cache)."""
    from brwsim._cache import user_cache_dir
    from brwsim.llm.drafters._hf import layer_subset, n_layers

    path = user_cache_dir() / "end-to-end" / f"{MODEL}-skip{MODEL_DIR_LAYERS}"
    if not (path / "config.json").exists():
        a, b = (int(x) for x in MODEL_DIR_LAYERS.split("-"))
        keep = [i for i in range(n_layers(target.model)) if not a <= i + 1 <= b]
        tmp = path.with_name(path.name + f".tmp{time.time_ns()}")
        layer_subset(target.model, keep).save_pretrained(tmp)
        target.tokenizer.save_pretrained(tmp)
        tmp.rename(path)
    return str(path)


def opened(params: dict):
    """(target, {SPEC: (drafter, name the planner's rows use)})."""
    key = (params["model"], tuple(params["drafters"]))
    if key not in _OPEN:
        from brwsim.llm.drafters import open_drafter
        from brwsim.llm.sources import load_source

        _OPEN.clear()
        target = load_source(params["model"], threads=1, device=params.get("device", "cpu"))
        out = {}
        for spec in params["drafters"]:
            if spec == "model:DIR":
                d = open_drafter(f"model:{model_dir(target)}", target)
                out[spec] = (d, MODEL_DIR_ROWS)
            else:
                d = open_drafter(spec, target, log=lambda m: print(m, flush=True))
                out[spec] = (d, d.name)
        _OPEN[key] = (target, out)
    return _OPEN[key]


# ---------------------------------------------------------------------------
# one prompt


def configs(params: dict, names: dict, tables: dict, task: str) -> list[tuple[str, int]]:
    """(drafter SPEC, P) measured on a prompt of ``task``: the planner's pick and one other budget per drafter."""
    out = []
    for spec in params["drafters"]:
        t = tables.get((task, names[spec]))
        if t is not None:
            out += [(spec, P) for P in [t.best.P, *other_Ps(t)]]
        else:
            print(f"{spec} on {task}: no planner rows for {names[spec]!r} (run experiments.real_drafters); skipped")
    return out


def measure_prompt(params: dict, prompt, plan: list) -> list[dict]:
    """One prompt's runs for one drafter's budgets, plain decoding interleaved: plain, two configurations, plain."""
    from brwsim.llm.specdec import plain_generate, speculative_generate

    target, drafters = opened(params)
    ids = target.encode(prompt.text)
    N, T = params["new_tokens"], params["T"]
    seed = [params["seed"], len(prompt.id), sum(map(ord, prompt.id))]
    rows = [{"kind": "plain", **plain_generate(target, ids, N, T, np.random.default_rng(seed)).to_dict()}]
    for i, (spec, P) in enumerate(plan):
        j = params["drafters"].index(spec)  # the drafter's own streams, whichever drafters this run measures
        rng = np.random.default_rng(seed + [j + 1, P])
        g = speculative_generate(target, drafters[spec][0], ids, N, P, T, rng)
        rows.append({"kind": "speculative", "drafter": spec, "P": P, **g.to_dict()})
        if i % 2 == 1 or i == len(plan) - 1:
            rows.append({"kind": "plain", **plain_generate(target, ids, N, T, np.random.default_rng(seed)).to_dict()})
    for r in rows:
        r.pop("tokens")
    return [{"task": prompt.task, "id": prompt.id, "prompt_tokens": len(ids), "runs": rows}]


def ratios(runs: list[dict]) -> list[tuple[str, int, float, dict]]:
    """(drafter, P, speedup over the mean of the plain runs around it, the run) per speculative run."""
    out, plains = [], [i for i, r in enumerate(runs) if r["kind"] == "plain"]
    for i, r in enumerate(runs):
        if r["kind"] == "speculative":
            before = max(j for j in plains if j < i)
            after = min(j for j in plains if j > i)
            base = 0.5 * (runs[before]["tokens_per_second"] + runs[after]["tokens_per_second"])
            out.append((r["drafter"], r["P"], r["tokens_per_second"] / base, r))
    return out


# ---------------------------------------------------------------------------
# summary


def summarize(points: list[dict], tables: dict, names: dict, N: int) -> tuple[list[dict], list[dict]]:
    """Rows of results/end_to_end.csv and of the detail file, per (task, drafter, P)."""
    per: dict = {}
    for pt in points:
        for spec, P, s, r in ratios(pt["runs"]):
            per.setdefault((pt["task"], spec, P), []).append((s, r))
    main, detail = [], []
    for (task, spec, P), got in per.items():
        pred, pred_ci, ex = predicted_at(tables[(task, names[spec])], P)
        m, ci = mean_ci95([s for s, _ in got])
        label = spec if spec != "model:DIR" else f"model:DIR ({MODEL_DIR_ROWS} saved)"
        main.append(dict(task=task, drafter=label, P=P, predicted=pred, predicted_ci95=pred_ci, measured=m,
                         measured_ci95=ci, prompts=len(got), new_tokens=N))  # fmt: skip
        runs = [r for _, r in got]
        x, x_ci = mean_ci95([sum(r["accepted"]) / r["calls"] for r in runs])
        detail.append(dict(task=task, drafter=label, P=P, ex_predicted=ex, ex_measured=x, ex_measured_ci95=x_ci,
                           verify_ms_per_call=1e3 * np.mean([r["verify_seconds"] / r["calls"] for r in runs]),
                           draft_ms_per_call=1e3 * np.mean([r["draft_seconds"] / r["calls"] for r in runs]),
                           draft_passes_per_call=np.mean([r["draft_passes"] / r["calls"] for r in runs]),
                           drafted_per_call=np.mean([np.mean(r["drafted"]) for r in runs]),
                           prompts=len(got)))  # fmt: skip
    key = lambda r: (TASKS.index(r["task"]), r["drafter"], r["P"])  # noqa: E731
    return sorted(main, key=key), sorted(detail, key=key)


def _finite(x):
    return x if isinstance(x, (int, str)) or math.isfinite(x) else None


def write_csv(path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["task"])
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if _finite(v) is None else (f"{v:.6g}" if isinstance(v, float) else v))
                        for k, v in r.items()})  # fmt: skip


def table_md(rows: list[dict], plain_tps: float) -> str:
    lines = [
        "| task | drafter | P | predicted speedup | measured speedup | measured / predicted | prompts |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        ratio = r["measured"] / r["predicted"] if r["predicted"] else math.nan
        inside = abs(r["measured"] - r["predicted"]) <= r["predicted_ci95"] or abs(ratio - 1) <= 0.10
        lines.append(f"| {r['task']} | {r['drafter']} | {r['P']} | {r['predicted']:.3f} +- {r['predicted_ci95']:.3f} "
                     f"| {r['measured']:.3f} +- {r['measured_ci95']:.3f} | {ratio:.3f}{'' if inside else ' (off)'} "
                     f"| {r['prompts']} |")  # fmt: skip
    lines.append("")
    lines.append(f"Plain decoding: {plain_tps:.1f} tokens/s (mean over prompts). Speedups: tokens per second over "
                 "plain decoding's on the same prompt (mean of per-prompt ratios +- Student t 95% half-width); "
                 "predicted: the planner's (brwsim.speedup, experiments/speedup.py) +- its 95% half-width. (off): "
                 "measured outside the prediction's interval and more than 10% from it.")  # fmt: skip
    return "\n".join(lines) + "\n"


def figure(rows: list[dict]):
    plt = common.setup_matplotlib()
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    names = list(dict.fromkeys(r["drafter"] for r in rows))
    marks = {"humaneval": "o", "pydoc": "s", "sharegpt": "^"}
    for r in rows:
        ax.errorbar(r["predicted"], r["measured"], xerr=r["predicted_ci95"], yerr=r["measured_ci95"],
                    fmt=marks.get(r["task"], "o"), ms=5, lw=0.8, capsize=2,
                    color=common.PALETTE[names.index(r["drafter"]) % len(common.PALETTE)])  # fmt: skip
    vals = [v for r in rows for v in (r["predicted"], r["measured"]) if math.isfinite(v)] or [1.0]
    lo, hi = min(vals + [1.0]) * 0.9, max(vals + [1.0]) * 1.1
    ax.plot([lo, hi], [lo, hi], color="k", lw=0.8, label="measured = predicted")
    ax.fill_between([lo, hi], [0.9 * lo, 0.9 * hi], [1.1 * lo, 1.1 * hi], color="grey", alpha=0.15, label="+-10%")
    for i, n in enumerate(names):
        ax.plot([], [], "o", color=common.PALETTE[i % len(common.PALETTE)], label=n)
    for t, m in marks.items():
        ax.plot([], [], m, color="k", mfc="none", label=t)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted speedup (planner, 95% CI)")
    ax.set_ylabel("measured speedup (real speculative decoding, 95% t CI)")
    ax.set_title("Planner vs real speculative decoding (SmolLM2-135M, 1 CPU core)", fontsize=9)
    ax.legend(fontsize=6, loc="upper left")
    return fig


def main(argv=None) -> dict:
    ap = common.parser(NAME, __doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=None, help="prompts per task (default 16; --quick 2)")
    ap.add_argument("--new-tokens", type=int, default=None, help="tokens generated per run (default 128; --quick 32)")
    ap.add_argument("--budget-seconds", type=float, default=None, help="start no new prompt after this many seconds")
    ap.add_argument("--device", default="cpu", help="torch device of the target and drafters (cpu, cuda, ...); the "
                    "planner's step and drafter passes are timed there too")  # fmt: skip
    ap.add_argument("--drafters", default=None, help="comma-separated subset of the drafters (default: all five)")
    ap.add_argument("--prompts-from", default=None, help="a .jsonl of {task, id, text} rows (as --dump-prompts "
                    "writes): these prompts instead of the tasks' sources, for a machine without them")  # fmt: skip
    ap.add_argument("--dump-prompts", default=None, help="write the prompts of this run's order to this .jsonl, exit")
    args = ap.parse_args(argv)
    drafters = args.drafters.split(",") if args.drafters else None
    params = settings(args.quick, args.seed, args.n, args.new_tokens, args.device, drafters)
    order = _prompts(params, args.prompts_from)
    if args.dump_prompts:
        with open(args.dump_prompts, "w") as f:
            for p in order:
                f.write(json.dumps({"task": p.task, "id": p.id, "text": p.text}) + "\n")
        return {
            "name": NAME,
            "figures": [],
            "rows": 0,
            "summary": [f"wrote {len(order)} prompts to {args.dump_prompts}"],
        }
    subset = sorted(set(_names(params).values())) if drafters else None
    tables = predictions(args.quick, args.seed, args.device, subset)
    t0 = time.perf_counter()
    points = []
    for prompt in order:
        got = _point(params, prompt, tables, t0, args.budget_seconds)
        if got is not None:
            points += got
    if not points:  # keep the rows already written rather than replace them with an empty table
        why = (
            (
                "no prompt finished within --budget-seconds and none is cached for this code's loop (version "
                f"{params['loop']}): give more --budget-seconds"
            )
            if tables
            else "the planner has no rows to predict"
        )
        ap.error(f"nothing measured ({why}); the results already written were kept")  # fmt: skip
    return report(params, points, tables)


def held_out_order(tasks, n: int, seed: int, planner_n: int = PLANNER_PROMPTS) -> list:
    """``n`` prompts per task that the planner never saw and no setting was chosen on: each task's source without
    the ``planner_n`` prompts the real-drafters run measured E[X] on (and the per-call draft cost was calibrated
    on), ``n`` evenly spaced over the rest, in a seeded random order, without the task's development prompts
    (brwsim.llm.sources._devset; the evenly spaced prompts of the rest that are not development prompts replace
    them at the end), interleaved task by task."""
    from brwsim.llm.sources import load_prompts
    from brwsim.llm.sources._devset import dev_prompts
    from brwsim.llm.sources._prompts import spread

    rng = np.random.default_rng([seed, 22])
    per = []
    for task in tasks:
        every = load_prompts(task)
        planner = {p.id for p in spread(every, planner_n)}
        dev = {p.id for p in dev_prompts(task)}
        outside = [p for p in every if p.id not in planner]
        pool = [p for p in outside if p.id not in dev]
        if len(pool) < n:
            raise SystemExit(f"end_to_end: error: {task} has {len(pool)} prompts outside the planner's {planner_n} "
                             "and the development prompts")  # fmt: skip
        first = spread(outside, n)
        order = [p for p in (first[i] for i in rng.permutation(len(first))) if p.id not in dev]
        taken = {p.id for p in order}
        order += spread([p for p in pool if p.id not in taken], n - len(order))
        per.append(order)
    return [ps[i] for i in range(n) for ps in per]


def _prompts(params: dict, path: str | None) -> list:
    """This run's prompts: ``n`` per task held out from the planner's (:func:`held_out_order`), or read back from a
    file that --dump-prompts wrote (the same prompts on a machine that lacks their sources)."""
    if not path:
        return held_out_order(params["tasks"], params["n"], params["seed"])
    from brwsim.llm.sources._prompts import Prompt

    rows = [json.loads(line) for line in open(path) if line.strip()]
    out, seen = [], dict.fromkeys(params["tasks"], 0)
    for r in rows:
        if r["task"] in seen and seen[r["task"]] < params["n"]:
            seen[r["task"]] += 1
            out.append(Prompt(r["task"], r["id"], r["text"]))
    return out


def _point(params: dict, prompt, tables: dict, t0: float, budget: float | None):
    """One prompt's cached rows, one unit per drafter (plain, its two budgets, plain: measured when absent and the
    budget allows; a drafter's unit is kept whatever other drafters a run measures); None when none is there."""
    names = _names(params)
    plan = configs(params, names, tables, prompt.task)
    if not plan:
        return None
    runs, tokens = [], None
    for spec in params["drafters"]:
        mine = [(s, P) for s, P in plan if s == spec]
        if not mine:
            continue
        key = {k: v for k, v in params.items() if k not in ("tasks", "n", "drafters")}
        key |= {"task": prompt.task, "id": prompt.id, "drafter": spec, "plan": mine, "unit": "drafter"}
        if not common.is_cached(NAME, key) and budget is not None and time.perf_counter() - t0 > budget:
            continue
        got = common.cached(NAME, key, lambda mine=mine: measure_prompt(params, prompt, mine))
        runs, tokens = runs + got[0]["runs"], got[0]["prompt_tokens"]
        print(f"{prompt.task} {prompt.id} {spec}: done", flush=True)
    if not runs:
        return None
    return [{"task": prompt.task, "id": prompt.id, "prompt_tokens": tokens, "runs": runs}]


def _names(params: dict) -> dict:
    """{SPEC: the drafter name of the planner's rows} without opening any model."""
    out = {}
    for spec in params["drafters"]:
        if spec == "model:DIR":
            out[spec] = MODEL_DIR_ROWS
        elif spec.startswith("eagle-head"):
            out[spec] = "eagle-head" + ("-quick" if "quick" in spec else "") + ("-chat" if "chat" in spec else "")
        else:
            out[spec] = spec
    return out


def report(params: dict, points: list[dict], tables: dict) -> dict:
    names = _names(params)
    main_rows, detail = summarize(points, tables, names, params["new_tokens"])
    results, figures = common.out_dirs()
    write_csv(results / f"{NAME}.csv", main_rows)
    write_csv(results / f"{NAME}_detail.csv", detail)
    with open(results / f"{NAME}_prompts.jsonl", "w") as f:
        for pt in points:
            f.write(json.dumps(pt, allow_nan=False) + "\n")
    plain = [r["tokens_per_second"] for pt in points for r in pt["runs"] if r["kind"] == "plain"]
    md = table_md(main_rows, float(np.mean(plain)) if plain else math.nan)
    figures.mkdir(parents=True, exist_ok=True)
    (figures / f"{NAME}_table.md").write_text(md)
    png = common.save_figure(figure(main_rows), NAME) if main_rows else None
    counts = {t: sum(pt["task"] == t for pt in points) for t in params["tasks"]}
    summary = [f"prompts measured per task: {counts}; {params['new_tokens']} new tokens each, T = {params['T']}", md]
    return {"name": NAME, "figures": [png] if png else [], "rows": len(main_rows), "summary": summary}


if __name__ == "__main__":
    info = main(sys.argv[1:])
    print("\n".join(info["summary"]))
    for f in info["figures"]:
        print(f"wrote {f}")
