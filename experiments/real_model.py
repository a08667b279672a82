"""Real model: the real oracle tree vs the i.i.d. surrogate vs the bounds, on code, prose and chat.

For SmolLM2-135M-Instruct (the shipped model) on three tasks: HumanEval
prompts (code), English prose (``pydoc``: opening sentences of paragraphs of
the Python reference manual's topics, shipped with CPython) and chat
(``sharegpt``: first user turns of the ShareGPT evaluation split). Per task:
mu and mu_2 along the model's own sampled continuations; E[X] of the real
oracle tree T*_P (exact best-first search on the real token tree); the i.i.d.
surrogate (the same visited distributions as a ``pool`` law, simulated with
brwsim.simulate); the Theorem 1 leading term, ``renewal`` and ``asymptotic``
with the real mu, mu_2; the empirical ``splitting`` and ``dual`` bounds ((e)
of docs/theory.md). mu and mu_2 are the mean over prompts of each prompt's
mean, with the Student-t interval of those means; the surrogate is "above"
or "below" the oracle only where both 95% intervals separate. A prompt longer
than 384 tokens keeps its last 384 (counted per task: ``prompts_cut``).
Intervals over prompts are Student t. X = accepted draft tokens per verifier
call (tokens per call = X + 1).

Prompts: ``n`` per task, evenly spaced over the source, then measured in a
seeded random order, tasks interleaved, so that a run stopped by its time
budget (``--budget-seconds``) scores a random subset of the same size (+-1)
on every task; the real counts are in the rows.

Writes results/real_model.{csv,jsonl} (summaries), results/real_model_prompts.jsonl
(one row per prompt and P: the oracle value, the prompt's mean H and M2, its
model seconds per phase; written as the run goes), results/real_model_entropy.csv
(rows for the entropy table) and figures/real_model.{png,pdf}. ``--quick``: two
prompts per task, short walks, P <= 16.
"""

from __future__ import annotations

import csv
import json
import math
import sys

import numpy as np

import brwsim
from brwsim._stats import mean_ci95
from brwsim.errors import BrwsimError
from experiments import common

NAME = "real_model"
DEFAULT_MODEL = "smollm2-135m"
TASKS = ("humaneval", "pydoc", "sharegpt")
BOUNDS = ["theorem1_leading", "renewal", "asymptotic", "splitting", "dual"]
PHASES = ("open", "walks", "oracle")
MAX_PROMPT_TOKENS = 384  # load_source's default: a longer prompt keeps its last tokens (cut)


def cut_prompts(tokens) -> int:
    """How many prompts of these token counts were cut to their last ``MAX_PROMPT_TOKENS`` tokens (a prompt at
    the limit was; one of exactly that length is counted too, docs/llm.md)."""
    return int(sum(int(n) >= MAX_PROMPT_TOKENS for n in tokens))


def surrogate_verdict(oracle: float, oracle_ci: float, sur: float, sur_ci: float) -> str:
    """The i.i.d. surrogate against the real oracle: ``above`` or ``below`` only when their 95% intervals (each
    with its own half-width) do not overlap, else ``not resolved``."""
    oc, sc = (0.0 if c is None or math.isnan(c) else c for c in (oracle_ci, sur_ci))
    if sur - sc > oracle + oc:
        return "above"
    if sur + sc < oracle - oc:
        return "below"
    return "not resolved"


def stem(model: str) -> str:
    """File stem of a model's outputs: ``real_model`` for the shipped model, ``real_model-MODEL`` otherwise."""
    return NAME if model == DEFAULT_MODEL else f"{NAME}-{model}"


def settings(
    quick: bool, seed: int, n: int | None = None, budget: float | None = None, model: str = DEFAULT_MODEL
) -> dict:
    base = dict(model=model, tasks=list(TASKS), seed=seed, batch=4, dtype="float32", threads=1,
                budget_seconds=budget)  # fmt: skip
    if quick:
        return base | dict(n=n or 2, P=[1, 2, 4, 8, 16], walks=8, depth=12, trees=300)
    return base | dict(n=n or 64, P=[1, 2, 4, 8, 16, 32, 64], walks=8, depth=32, trees=2000, batch=8)


def _prompt_rows(r, P_list) -> list[dict]:
    """One row per P of one measured prompt (the re-analysable record)."""
    H, M2 = float(np.nanmean(r.walks.H)), float(np.nanmean(r.walks.M2))
    base = dict(task=r.prompt.task, id=r.prompt.id, prompt_tokens=r.n_tokens, H=H, M2=M2,
                seconds={k: round(v, 4) for k, v in r.phases.items()},
                host_seconds={k: round(v, 4) for k, v in r.host.items()},
                floor_seconds={k: round(v, 4) for k, v in r.floor.items()}, tokens=dict(r.tokens))  # fmt: skip
    return [base | dict(P=P, oracle=float(r.oracle.values[P - 1])) for P in P_list]


def point_key(params: dict, prompt) -> dict:
    """The cache key of one prompt's measurement (what fixes its numbers; not the batching or the workers)."""
    keys = ("model", "P", "walks", "depth", "seed", "batch", "dtype")
    return {k: params[k] for k in keys} | {"task": prompt.task, "id": prompt.id, "text": prompt.text,
                                          "version": brwsim.__version__}  # fmt: skip


_SOURCE: dict = {}


def _source(params: dict):
    key = (params["model"], params["dtype"], params["threads"])
    if key not in _SOURCE:
        from brwsim.llm.sources import load_source

        _SOURCE.clear()
        _SOURCE[key] = load_source(params["model"], dtype=params["dtype"], threads=params["threads"])
    return _SOURCE[key]


def measure(params: dict, order: list, budget: float | None, width: int, log) -> list:
    """The measured (cached) point of each prompt of ``order``, None where the budget left it unmeasured."""
    from brwsim.llm.drafters import DrafterSettings, measure_prompt_drafters

    st = DrafterSettings(walks=params["walks"], depth=params["depth"], seed=params["seed"], batch=params["batch"])

    def one(p):
        r, _ = measure_prompt_drafters(_source(params), [], p, max(params["P"]), st)  # the one pipeline, no drafter
        log(f"{p.task} {p.id}: {r.n_tokens} tokens, model {sum(r.phases.values()):.1f} s")
        return [r.to_dict()]

    key = lambda p: point_key(params, p)  # noqa: E731
    return common.measure_prompts(NAME, order, key, one, width, budget, prepare=lambda: _source(params))


def _phase_rows(label, rs, seed, extra) -> list[dict]:
    rows = []
    for ph in PHASES:
        m, c = mean_ci95([r.phases.get(ph, 0.0) for r in rs])
        rows.append(common.row(label, None, f"seconds_{ph}", m, c, len(rs), seed, **extra))
        for kind, acc in (("host_seconds", lambda r: r.host), ("floor_seconds", lambda r: r.floor),
                          ("tokens", lambda r: r.tokens)):  # fmt: skip
            if all(ph in acc(r) for r in rs):
                m, c = mean_ci95([acc(r)[ph] for r in rs])
                rows.append(common.row(label, None, f"{kind}_{ph}", m, c, len(rs), seed, **extra))
    return rows


def compute(params: dict, points: list, timing: dict | None = None) -> list[dict]:
    """The rows of the measured prompts (``points``: each a cached :meth:`PromptResult.to_dict`, or None);
    ``timing``: the run that measured them (:func:`experiments.common.run_timing`; None: not known)."""
    from brwsim.llm.measure import PromptResult, summarize_task

    rs = [PromptResult.from_dict(p[0]) for p in points if p is not None]
    by_task = {t: [r for r in rs if r.prompt.task == t] for t in params["tasks"]}
    results, _ = common.out_dirs()
    results.mkdir(parents=True, exist_ok=True)
    with open(results / f"{stem(params['model'])}_prompts.jsonl", "w") as f:
        for r in rs:
            f.writelines(json.dumps(row, allow_nan=False) + "\n" for row in _prompt_rows(r, params["P"]))
    rows, seed = [], params["seed"]
    for task, trs in by_task.items():
        if len(trs) < 2:
            continue
        t = summarize_task(task, trs, params["P"], surrogate_trees=params["trees"], seed=seed).to_dict()
        label, n, extra = f"{params['model']}/{task}", len(trs), dict(model=params["model"], task=task)
        rows.append(common.row(label, None, "mu", t["mu"], t["mu_ci95"], n, seed, **extra))
        rows.append(common.row(label, None, "mu2", t["mu2"], t["mu2_ci95"], n, seed, **extra))
        cut = cut_prompts(r.n_tokens for r in trs)
        rows.append(common.row(label, None, "prompts_cut", cut, 0.0, n, seed, max_prompt_tokens=MAX_PROMPT_TOKENS,
                               **extra))  # fmt: skip
        rows += _phase_rows(label, trs, seed, extra)
        for r in t["results"]:
            rows.append(common.row(label, r["P"], "oracle", r["mean"], r["ci95"], n, seed, **extra))
            sur, sur_ci = r["surrogate"], r["surrogate_ci95"]
            rows.append(common.row(label, r["P"], "surrogate", sur, sur_ci, params["trees"], seed, **extra))
            for b in BOUNDS:
                v = common.bound_value(r, b)
                if v is not None:
                    rows.append(common.row(label, r["P"], b, v, 0.0, n, seed, **extra))
    if not rows:  # only a time budget stops a task short of its (at least 2) prompts
        raise BrwsimError(
            f"no task had the 2 prompts a t interval needs within --budget-seconds {params['budget_seconds']}; "
            "give a larger budget"
        )
    model_s = sum(sum(r.phases.values()) for r in rs)
    host_s = sum(sum(r.host.values()) for r in rs)
    frac = model_s / (model_s + host_s) if model_s + host_s > 0 else None
    rows.append(common.row(params["model"], None, "forward_fraction", frac, 0.0, len(rs), seed,
                           model_phase_seconds=(timing or {}).get("wall_seconds"), forward_seconds=model_s,
                           host_seconds=host_s, timing=timing))  # fmt: skip
    return rows


def figure(rows: list[dict]):
    plt = common.setup_matplotlib()
    labels = sorted({r["law"] for r in rows if r["statistic"] == "oracle"})
    fig, axes = plt.subplots(1, len(labels), figsize=(5.2 * len(labels), 4.2), squeeze=False)
    for ax, label in zip(axes[0], labels, strict=True):
        sel = [r for r in rows if r["law"] == label and r["P"] is not None]

        def series(stat, sel=sel):
            pts = sorted((r["P"], r["mean"], r["ci95"]) for r in sel if r["statistic"] == stat)
            return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]

        P, m, ci = series("oracle")
        ax.errorbar(P, m, yerr=[0 if math.isnan(c) else c for c in ci], fmt="o-", color="k", label="real oracle T*_P")
        P, m, ci = series("surrogate")
        ax.errorbar(P, m, yerr=ci, fmt="s--", color=common.PALETTE[1], label="i.i.d. surrogate (pool)")
        for b in BOUNDS:
            P, m, _ = series(b)
            if P:
                ax.plot(P, m, color=common.PALETTE[2 + BOUNDS.index(b)], label=b, **common.BOUND_STYLES.get(b, {}))
        mu = next(r["mean"] for r in rows if r["law"] == label and r["statistic"] == "mu")
        ax.set_xscale("log", base=2)
        top = max(r["mean"] for r in sel if r["statistic"] in ("oracle", "surrogate"))
        ax.set_ylim(0, 1.6 * top + 0.5)
        n = next(r["trees"] for r in sel if r["statistic"] == "oracle")
        ax.set_title(f"{label}, {n} prompts (mu = {mu:.2f} nats)", fontsize=9)
        ax.set_xlabel("verifier budget P (draft tokens per call)")
        ax.set_ylabel("E[X], accepted draft tokens per call")
        ax.legend(loc="upper left")
    title = "Real token tree vs i.i.d. surrogate vs bounds (95% t intervals over prompts; tokens per call = X + 1)"
    fig.suptitle(title, fontsize=10)
    return fig


def write_entropy(rows: list[dict], name: str = NAME) -> None:
    results, _ = common.out_dirs()
    results.mkdir(parents=True, exist_ok=True)
    with open(results / f"{name}_entropy.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["label", "spec", "mu", "mu_ci95", "mu2", "mu2_ci95", "prompts"])
        w.writeheader()
        for label in sorted({r["law"] for r in rows if r["statistic"] == "mu"}):
            mu = next(r for r in rows if r["law"] == label and r["statistic"] == "mu")
            mu2 = next(r for r in rows if r["law"] == label and r["statistic"] == "mu2")
            spec = "real model, sampled continuations"
            w.writerow({"label": label, "spec": spec, "mu": mu["mean"], "mu_ci95": mu["ci95"],
                        "mu2": mu2["mean"], "mu2_ci95": mu2["ci95"], "prompts": mu["trees"]})  # fmt: skip


def main(argv=None) -> dict:
    ap = common.parser(NAME, __doc__.splitlines()[0])
    common.add_prompt_options(ap, "start no prompt after this many seconds (each process; 0: only cached ones)")
    help_model = f"target model (default {DEFAULT_MODEL}); another model's outputs are named real_model-MODEL"
    ap.add_argument("--model", default=DEFAULT_MODEL, help=help_model)
    args = ap.parse_args(argv)
    common.check_prompt_options(ap, args)
    if args.n is not None and args.n < 2:
        ap.error("--n must be at least 2")
    params = settings(args.quick, args.seed, args.n, args.budget_seconds, args.model) | {
        "prompt_batch": args.prompt_batch
    }
    name = stem(args.model)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    order = common.prompt_order(params["tasks"], params["n"], params["seed"])
    rates = common.floor_rates()
    if args.worker is not None:  # one worker's share, into the cache
        measure(params, common.share(order, args.worker), args.budget_seconds, args.prompt_batch, log)
        return {"name": name, "figures": [], "summary": []}
    n_workers = args.workers or (1 if args.quick or args.budget_seconds == 0 else common.default_workers())

    def run() -> dict:
        with common.workers(NAME, common.worker_argv(args) + ["--model", args.model], n_workers, log):
            measure(params, common.share(order, f"0/{n_workers}"), args.budget_seconds, args.prompt_batch, log)
        return dict(workers=n_workers, prompt_batch=args.prompt_batch, **rates)

    timing = common.run_timing(NAME, order, lambda p: point_key(params, p), run, label=name)
    points = measure(params, order, 0.0, 1, log)  # every prompt measured by any process (the cache)
    skipped = sum(p is None for p in points)
    if skipped:
        log(f"time budget reached: {len(points) - skipped} of {len(points)} prompts measured")
    rows = compute(params, points, timing)
    common.write_rows(name, rows)
    write_entropy(rows, name)
    png = common.save_figure(figure(rows), name)
    return {"name": name, "figures": [png], "rows": len(rows), "summary": summary_lines(rows)}


def summary_lines(rows: list[dict]) -> list[str]:
    """The report's lines: mu, mu_2 (mean of per-prompt means, t interval over the same means), the values at
    P = 1, 8, 64, the prompts cut per task, and the surrogate against the oracle at every P."""
    lines = []
    for r in rows:
        if r["statistic"] == "prompts_cut":
            lines.append(f"{r['law']}: {r['mean']} of {r['trees']} prompts cut to their last "
                         f"{r['max_prompt_tokens']} tokens")  # fmt: skip
        elif r["statistic"] in ("mu", "mu2", "forward_fraction") or r["P"] in (1, 8, 64):
            lines.append(f"{r['law']} P={r['P']} {r['statistic']}: {r['mean']:.4f} +- {r['ci95']:.4f} (n={r['trees']})")
    for label in dict.fromkeys(r["law"] for r in rows if r["statistic"] == "surrogate"):
        get = {(r["statistic"], r["P"]): r for r in rows if r["law"] == label}
        cells = []
        for P in sorted(P for st, P in get if st == "surrogate"):
            o, s = get[("oracle", P)], get[("surrogate", P)]
            cells.append(f"P={P} {surrogate_verdict(o['mean'], o['ci95'], s['mean'], s['ci95'])}")
        lines.append(f"{label} i.i.d. surrogate vs real oracle (separate 95% intervals, else not resolved): "
                     + ", ".join(cells))  # fmt: skip
    return lines


if __name__ == "__main__":
    info = main()
    print("\n".join(info["summary"]))
    if info["figures"]:  # (a worker process writes no figure)
        print(f"wrote {info['figures'][0]}")
