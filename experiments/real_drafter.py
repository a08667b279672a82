"""A real drafter on real token trees: SmolLM2-135M cut after k of its 30 layers (early-exit self-speculation).

The drafter q is the shipped model's first k decoder layers followed by its
own final norm and LM head (no training, the "logit lens"); the target p is
the whole model: the ``early-exit:k=K`` real drafter
(brwsim.llm.drafters.early_exit), measured by the same pipeline as every
other real drafter (brwsim.llm.drafters.measure_prompt_drafters). Per task (HumanEval code prompts, pydoc prose) and
per k: the mean cross-entropy E[H(p, q)], KL(p || q), TV(p, q) and top-1
agreement along the target's own sampled continuations; E[X] of the real
oracle tree T*_P, of the top-P-by-Q tree (exact best-first search by the
drafter's path probability, valued by the target's path probabilities) and of
the drafter's greedy chain, with 95% intervals over prompts. k = 30 is the
target itself (top-P-by-Q = oracle, a built-in check; its chain is greedy
decoding by p). X = accepted draft tokens per verifier call (tokens per call
= X + 1).

Writes results/real_drafter.{csv,jsonl} and figures/real_drafter.{png,pdf}.
``--quick``: one prompt per task, P <= 8, short walks (seconds once the model
conversion is cached).
"""

from __future__ import annotations

import math
import time

import brwsim
from brwsim._stats import mean_ci95
from experiments import common

NAME = "real_drafter"
STATS = ("cross_entropy", "kl", "tv", "top1_agree", "target_entropy")


def settings(quick: bool, seed: int) -> dict:
    if quick:
        return dict(model="smollm2-135m", prompts="humaneval,pydoc", n=1, P=[1, 2, 4, 8], walks=2, depth=8,
                    ks=[6, 12, 18, 24, 29, 30], seed=seed, batch=4, threads=1)  # fmt: skip
    return dict(model="smollm2-135m", prompts="humaneval,pydoc", n=8, P=[1, 2, 4, 8, 16, 32], walks=8, depth=32,
                ks=[6, 12, 18, 24, 29, 30], seed=seed, batch=4, threads=1)  # fmt: skip


_OPEN: dict = {}


def _open(params: dict):
    """(target, one ``early-exit:k=K`` drafter per k), opened once per process."""
    key = (params["model"], tuple(params["ks"]), params["threads"])
    if key not in _OPEN:
        from brwsim.llm.drafters import open_drafter
        from brwsim.llm.sources import load_source

        _OPEN.clear()
        target = load_source(params["model"], threads=params["threads"])
        _OPEN[key] = (target, [open_drafter(f"early-exit:k={k}", target) for k in params["ks"]])
    return _OPEN[key]


def prompt_point(params: dict, prompt) -> dict:
    """One prompt's raw measurements (cached per prompt): the general real-drafter pipeline, one drafter per k."""

    def compute():
        from brwsim.llm.drafters import DrafterSettings, measure_prompt_drafters

        target, drafters = _open(params)
        st = DrafterSettings(1.0, params["walks"], params["depth"], params["seed"], params["batch"], check_samples=0)
        f0, t0 = target.forward_seconds, time.perf_counter()
        pr, drs = measure_prompt_drafters(target, drafters, prompt, max(params["P"]), st)
        secs = time.perf_counter() - t0
        print(f"{prompt.task} {prompt.id}: {secs:.1f} s", flush=True)
        return [
            {
                "task": prompt.task,
                "id": prompt.id,
                "ks": list(params["ks"]),
                "layers": drafters[0].info["layers"],
                "oracle": pr.oracle.values.tolist(),
                "topq": [d.values["topq"].tolist() for d in drs],
                "chain": [d.values["chain"].tolist() for d in drs],
                "stats": [d.walk_stats.mean(0).tolist() for d in drs],  # [K, len(STATS)], mean over visited nodes
                "visited": int(drs[0].walk_stats.shape[0]),
                "seconds": secs,
                "forward_seconds": target.forward_seconds - f0,
            }
        ]

    keys = ("model", "ks", "P", "walks", "depth", "seed", "batch")
    spec = {k: params[k] for k in keys} | {"task": prompt.task, "id": prompt.id, "text": prompt.text}
    return common.cached(NAME, spec | {"version": brwsim.__version__, "pipeline": "drafters"}, compute)[0]


def aggregate(params: dict, points: list[dict]) -> list[dict]:
    rows = []
    seed = params["seed"]
    for task in dict.fromkeys(p["task"] for p in points):
        pts = [p for p in points if p["task"] == task]
        label, n = f"{params['model']}/{task}", len(pts)
        extra = dict(model=params["model"], task=task)
        for P in params["P"]:
            m, c = mean_ci95([p["oracle"][P - 1] for p in pts])
            rows.append(common.row(label, P, "oracle", m, c, n, seed, k=None, **extra))
        for i, k in enumerate(pts[0]["ks"]):
            for s, name in enumerate(STATS):
                m, c = mean_ci95([p["stats"][i][s] for p in pts])
                rows.append(common.row(label, None, name, m, c, n, seed, k=k, **extra))
            for P in params["P"]:
                for kind in ("topq", "chain"):
                    m, c = mean_ci95([p[kind][i][P - 1] for p in pts])
                    rows.append(common.row(label, P, kind, m, c, n, seed, k=k, **extra))
                m, c = mean_ci95([p["topq"][i][P - 1] / p["oracle"][P - 1] for p in pts])
                rows.append(common.row(label, P, "topq_over_oracle", m, c, n, seed, k=k, **extra))
    secs = sum(p["seconds"] for p in points)
    fwd = sum(p["forward_seconds"] for p in points)
    rows.append(
        common.row(params["model"], None, "forward_fraction", fwd / secs if secs else math.nan, 0.0, len(points),
                   seed, k=None, model_phase_seconds=secs, forward_seconds=fwd)
    )  # fmt: skip
    return rows


def figure(rows: list[dict], layers: int):
    plt = common.setup_matplotlib()
    labels = list(dict.fromkeys(r["law"] for r in rows if r["statistic"] == "oracle"))
    fig, axes = plt.subplots(1, len(labels), figsize=(5.6 * len(labels), 4.6), squeeze=False)
    for ax, label in zip(axes[0], labels, strict=True):
        sel = [r for r in rows if r["law"] == label]

        def series(stat, k=None, sel=sel):
            pts = sorted((r["P"], r["mean"], r["ci95"]) for r in sel if r["statistic"] == stat and r["k"] == k)
            return [p[0] for p in pts], [p[1] for p in pts], [0.0 if math.isnan(p[2]) else p[2] for p in pts]

        P, m, ci = series("oracle")
        ax.errorbar(P, m, yerr=ci, fmt="o-", color="k", lw=2, label="real oracle T*_P", zorder=5)
        ks = sorted({r["k"] for r in sel if r["statistic"] == "topq"})
        for c, k in enumerate(ks):
            if k == layers:  # q == p: top-P-by-Q is the oracle; keep its chain (greedy decoding by p)
                P, m, ci = series("chain", k)
                ax.errorbar(P, m, yerr=ci, fmt="x--", color="k", lw=1, label=f"chain, greedy by p (k = {k})")
                continue
            kl = next(r["mean"] for r in sel if r["statistic"] == "kl" and r["k"] == k)
            col = common.PALETTE[(c + 1) % len(common.PALETTE)]
            P, m, ci = series("topq", k)
            ax.errorbar(P, m, yerr=ci, fmt="s-", color=col, label=f"top-P-by-Q, k = {k} (KL {kl:.1f} nats)")
            P, m, _ = series("chain", k)
            ax.plot(P, m, ":", color=col, lw=1.4)
        ax.plot([], [], ":", color="grey", lw=1.4, label="dotted: chain, greedy by q (colour = k)")
        mu = next(r["mean"] for r in sel if r["statistic"] == "target_entropy")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{label}: early exit after k of {layers} layers (H(p) = {mu:.2f} nats)", fontsize=9)
        ax.set_xlabel("verifier budget P (draft tokens per call)")
        ax.set_ylabel("E[X], accepted draft tokens per call")
        ax.legend(loc="best", fontsize=6.5)
    fig.suptitle("Real drafter (early-exit self-speculation) vs real oracle; tokens per call = X + 1", fontsize=10)
    return fig


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__.splitlines()[0]).parse_args(argv)
    params = settings(args.quick, args.seed)
    from brwsim.llm import require_llm
    from brwsim.llm.sources import load_prompts

    require_llm()
    points = [prompt_point(params, p) for p in load_prompts(params["prompts"], params["n"])]
    rows = aggregate(params, points)
    common.write_rows(NAME, rows)
    layers = points[0]["layers"]
    png = common.save_figure(figure(rows, layers), NAME)
    lines = []
    for label in dict.fromkeys(r["law"] for r in rows if r["statistic"] == "oracle"):
        sel = [r for r in rows if r["law"] == label]
        get = {(r["statistic"], r["k"], r["P"]): r for r in sel}
        Ps = [P for P in params["P"] if P in (1, 8, 32) or P == max(params["P"])]
        orc = ", ".join(f"P={P} {get['oracle', None, P]['mean']:.3f}" for P in Ps)
        lines.append(f"{label}: oracle E[X] {orc}")
        for k in params["ks"]:
            ce, kl = get["cross_entropy", k, None], get["kl", k, None]
            tq = ", ".join(f"P={P} {get['topq', k, P]['mean']:.3f}" for P in Ps)
            ch = ", ".join(f"P={P} {get['chain', k, P]['mean']:.3f}" for P in Ps)
            lines.append(
                f"{label} k={k}: H(p,q) {ce['mean']:.2f}+-{ce['ci95']:.2f}, KL {kl['mean']:.2f}+-{kl['ci95']:.2f}, "
                f"top-1 agree {get['top1_agree', k, None]['mean']:.2f}; top-P-by-Q {tq}; chain {ch}"
            )
    ff = next(r for r in rows if r["statistic"] == "forward_fraction")
    lines.append(f"forward fraction {ff['mean']:.3f} of {ff['model_phase_seconds']:.0f} s")
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    out = main()
    for line in out["summary"]:
        print(line)
    print(f"wrote {out['figures'][0]}")
