"""Real model: the real oracle tree vs the i.i.d. surrogate vs the bounds.

For SmolLM2-135M-Instruct (the shipped model) on HumanEval prompts (code) and
on English prose (``pydoc``: opening sentences of the Python reference
manual's topics, shipped with CPython), per task: mu and mu_2 along the
model's own sampled continuations; E[X] of the real oracle tree T*_P (exact
best-first search on the real token tree); the i.i.d. surrogate (the same
visited distributions as a ``pool`` law, simulated with brwsim.simulate);
the Theorem 1 leading term, ``renewal`` and ``asymptotic`` with the real
mu, mu_2; the empirical ``splitting`` and ``dual`` bounds ((e) of docs/theory.md) when
brwsim.theory provides them. X = accepted draft tokens per verifier call
(tokens per call = X + 1).

Writes results/real_model.{csv,jsonl}, results/real_model_entropy.csv (rows
for the entropy table) and figures/real_model.{png,pdf}. ``--quick``: two
prompts per task, short walks, P <= 16 (about two minutes here).
"""

from __future__ import annotations

import csv
import math
import sys

import brwsim
from brwsim.llm.run import run_llm
from experiments import common

NAME = "real_model"
BOUNDS = ["theorem1_leading", "renewal", "asymptotic", "splitting", "dual"]


def settings(quick: bool, seed: int) -> dict:
    if quick:
        return dict(model="smollm2-135m", prompts="humaneval,pydoc", n=2, P=[1, 2, 4, 8, 16], walks=8, depth=16,
                    trees=300, seed=seed, batch=4, dtype="float32", threads=1)  # fmt: skip
    return dict(model="smollm2-135m", prompts="humaneval,pydoc", n=8, P=[1, 2, 4, 8, 16, 32, 64, 128],
                walks=16, depth=48, trees=2000, seed=seed, batch=4, dtype="float32", threads=1)  # fmt: skip


def compute(params: dict) -> list[dict]:
    d = run_llm(**params, log=lambda m: print(m, file=sys.stderr, flush=True)).to_dict()
    rows = []
    tm = d["timing"]
    for t in d["tasks"]:
        label = f"{d['model']}/{t['task']}"
        n = t["prompts"]
        seed = params["seed"]
        rows.append(common.row(label, None, "mu", t["mu"], t["mu_ci95"], n, seed, model=d["model"], task=t["task"]))
        rows.append(common.row(label, None, "mu2", t["mu2"], t["mu2_ci95"], n, seed, model=d["model"], task=t["task"]))
        for r in t["results"]:
            extra = dict(model=d["model"], task=t["task"])
            rows.append(common.row(label, r["P"], "oracle", r["mean"], r["ci95"], n, seed, **extra))
            sur, sur_ci = r["surrogate"], r["surrogate_ci95"]
            rows.append(common.row(label, r["P"], "surrogate", sur, sur_ci, params["trees"], seed, **extra))
            for b in BOUNDS:
                v = common.bound_value(r, b)
                if v is not None:
                    rows.append(common.row(label, r["P"], b, v, 0.0, n, seed, **extra))
    rows.append(
        common.row(d["model"], None, "forward_fraction", tm["forward_fraction"], 0.0, 0, params["seed"],
                   model_phase_seconds=tm["model_phase_seconds"], forward_seconds=tm["forward_seconds"])
    )  # fmt: skip
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
        ax.set_title(f"{label} (mu = {mu:.2f} nats)", fontsize=9)
        ax.set_xlabel("verifier budget P (draft tokens per call)")
        ax.set_ylabel("E[X], accepted draft tokens per call")
        ax.legend(loc="upper left")
    fig.suptitle("Real token tree vs i.i.d. surrogate vs bounds (tokens per call = X + 1)", fontsize=10)
    return fig


def write_entropy(rows: list[dict]) -> None:
    results, _ = common.out_dirs()
    results.mkdir(parents=True, exist_ok=True)
    with open(results / f"{NAME}_entropy.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["label", "spec", "mu", "mu_ci95", "mu2", "mu2_ci95", "prompts"])
        w.writeheader()
        for label in sorted({r["law"] for r in rows if r["statistic"] == "mu"}):
            mu = next(r for r in rows if r["law"] == label and r["statistic"] == "mu")
            mu2 = next(r for r in rows if r["law"] == label and r["statistic"] == "mu2")
            spec = "real model, sampled continuations"
            w.writerow({"label": label, "spec": spec, "mu": mu["mean"], "mu_ci95": mu["ci95"],
                        "mu2": mu2["mean"], "mu2_ci95": mu2["ci95"], "prompts": mu["trees"]})  # fmt: skip


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__.splitlines()[0]).parse_args(argv)
    params = settings(args.quick, args.seed)
    rows = common.cached(NAME, {**params, "version": brwsim.__version__}, lambda: compute(params))
    common.write_rows(NAME, rows)
    write_entropy(rows)
    png = common.save_figure(figure(rows), NAME)
    lines = []
    for r in rows:
        if r["statistic"] in ("mu", "mu2", "forward_fraction") or r["P"] in (1, 8, 64):
            lines.append(f"{r['law']} P={r['P']} {r['statistic']}: {r['mean']:.4f} +- {r['ci95']:.4f}")
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    info = main()
    print("\n".join(info["summary"]))
    print(f"wrote {info['figures'][0]}")
