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
of docs/theory.md). Intervals over prompts are Student t. X = accepted draft
tokens per verifier call (tokens per call = X + 1).

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
import time

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
                seconds={k: round(v, 4) for k, v in r.phases.items()})  # fmt: skip
    return [base | dict(P=P, oracle=float(r.oracle.values[P - 1])) for P in P_list]


def measure(params: dict, log) -> tuple[dict, float, float]:
    """({task: [PromptResult]}, model seconds, forward seconds); stops starting prompts after the budget."""
    from brwsim.llm.measure import open_and_measure
    from brwsim.llm.sources import load_source

    items = common.prompt_order(params["tasks"], params["n"], params["seed"])
    source = load_source(params["model"], dtype=params["dtype"], threads=params["threads"])
    t0, f0, by_task = time.perf_counter(), source.forward_seconds, {t: [] for t in params["tasks"]}
    results, _ = common.out_dirs()
    results.mkdir(parents=True, exist_ok=True)
    with open(results / f"{stem(params['model'])}_prompts.jsonl", "w") as f:
        for i, p in enumerate(items):
            if params["budget_seconds"] is not None and time.perf_counter() - t0 > params["budget_seconds"]:
                log(f"time budget reached after {i} of {len(items)} prompts")
                break
            _, r = open_and_measure(source, p, max(params["P"]), params["walks"], params["depth"], params["seed"],
                                    params["batch"])  # fmt: skip
            by_task[p.task].append(r)
            for row in _prompt_rows(r, params["P"]):
                f.write(json.dumps(row) + "\n")
            f.flush()
            log(f"[{i + 1}/{len(items)}] {p.task} {p.id}: {r.n_tokens} tokens, {r.seconds:.1f} s")
    return by_task, time.perf_counter() - t0, source.forward_seconds - f0


def _phase_rows(label, rs, seed, extra) -> list[dict]:
    rows = []
    for ph in PHASES:
        m, c = mean_ci95([r.phases[ph] for r in rs])
        rows.append(common.row(label, None, f"seconds_{ph}", m, c, len(rs), seed, **extra))
    return rows


def compute(params: dict) -> list[dict]:
    from brwsim.llm.measure import summarize_task

    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    by_task, model_s, fwd_s = measure(params, log)
    rows, seed = [], params["seed"]
    for task, rs in by_task.items():
        if len(rs) < 2:
            continue
        t = summarize_task(task, rs, params["P"], surrogate_trees=params["trees"], seed=seed).to_dict()
        label, n, extra = f"{params['model']}/{task}", len(rs), dict(model=params["model"], task=task)
        rows.append(common.row(label, None, "mu", t["mu"], t["mu_ci95"], n, seed, **extra))
        rows.append(common.row(label, None, "mu2", t["mu2"], t["mu2_ci95"], n, seed, **extra))
        rows += _phase_rows(label, rs, seed, extra)
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
    prompts = sum(len(rs) for rs in by_task.values())
    frac = fwd_s / model_s if model_s > 0 else None
    rows.append(common.row(params["model"], None, "forward_fraction", frac, 0.0, prompts, seed,
                           model_phase_seconds=model_s, forward_seconds=fwd_s))  # fmt: skip
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
    ap.add_argument("--n", type=int, default=None, help="prompts per task (default 64; quick: 2)")
    ap.add_argument("--budget-seconds", type=float, default=None, help="start no prompt after this many seconds")
    help_model = f"target model (default {DEFAULT_MODEL}); another model's outputs are named real_model-MODEL"
    ap.add_argument("--model", default=DEFAULT_MODEL, help=help_model)
    args = ap.parse_args(argv)
    if args.n is not None and args.n < 2:
        ap.error("--n must be at least 2")
    params = settings(args.quick, args.seed, args.n, args.budget_seconds, args.model)
    name = stem(args.model)
    rows = common.cached(name, {**params, "version": brwsim.__version__}, lambda: compute(params))
    common.write_rows(name, rows)
    write_entropy(rows, name)
    png = common.save_figure(figure(rows), name)
    lines = []
    for r in rows:
        if r["statistic"] in ("mu", "mu2", "forward_fraction") or r["P"] in (1, 8, 64):
            lines.append(f"{r['law']} P={r['P']} {r['statistic']}: {r['mean']:.4f} +- {r['ci95']:.4f} (n={r['trees']})")
    return {"name": name, "figures": [png], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    info = main()
    print("\n".join(info["summary"]))
    print(f"wrote {info['figures'][0]}")
