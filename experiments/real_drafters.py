"""Real drafters on the real model: how far is a practical drafter from the speed of light (SmolLM2-135M).

Per task (HumanEval code prompts, pydoc prose) and per drafter (layer skipping,
low-bit copies, prompt lookup, and the trained EAGLE-style head when the build
has it): E[X] against P for the real oracle tree T*_P, the drafter's best tree
builder (top-P-by-Q, greedy chain, EAGLE-2/3 dynamic tree, Sequoia), the
rigorous empirical bound (dual) and the imperfect-knowledge prediction for
the top-P-by-Q tree from the drafter's cross-entropy and its second moment
(docs/theory.md, "Imperfect knowledge"), with 95%
intervals over prompts; a table of each drafter's fraction of the oracle at
P = 8, 32, 64, 128, its KL and cross-entropy along the target's walks, and its
accepted tokens per call measured by real speculative decoding (the direct
check). X = accepted draft tokens per verifier call; published acceptance
lengths tau count the verifier's own token too: tau = X + 1.

Writes results/real_drafters.{csv,jsonl}, figures/real_drafters.{png,pdf} and
figures/real_drafters_table.md. ``--quick``: one prompt per task, P <= 8,
short walks, no EAGLE head unless its quick version is available.
"""

from __future__ import annotations

import importlib.util
import math
import time

import numpy as np

import brwsim
from brwsim._stats import mean_ci95
from experiments import common

NAME = "real_drafters"
TABLE_P = (8, 32, 64, 128)
# Published acceptance lengths (tau = accepted draft tokens + 1, chat / MT-bench, temperature 0), for context only:
# they are for 7B-70B targets with trained heads, not for this 135M model.
PUBLISHED = [  # (what, tau, source); EAGLE-3 rows from its Table 1 (T = 0, batch 1, dynamic draft tree)
    ("EAGLE (Li et al. 2024), Vicuna-7B, MT-bench, T=0", 3.94, "arXiv:2401.15077, as quoted by a 2026 survey"),
    ("EAGLE-3 (Li et al. 2025), Vicuna-13B, MT-bench, T=0", 6.65, "arXiv:2503.01840, Table 1"),
    ("EAGLE-3 (Li et al. 2025), Vicuna-13B, HumanEval, T=0", 7.54, "arXiv:2503.01840, Table 1"),
    ("EAGLE-3 (Li et al. 2025), LLaMA-3.1-Instruct-8B, MT-bench, T=0", 6.13, "arXiv:2503.01840, Table 1"),
    ("EAGLE-3 (Li et al. 2025), LLaMA-3.1-Instruct-8B, HumanEval, T=0", 6.74, "arXiv:2503.01840, Table 1"),
]


def settings(quick: bool, seed: int) -> dict:
    drafters = ["layerskip:skip=14-17", "lowbit:bits=4", "lookup:n=3"]
    if not quick:
        drafters[1:1] = ["layerskip:auto,n=8"]
        drafters[3:3] = ["lowbit:bits=3"]
    head = None
    if importlib.util.find_spec("brwsim.llm.drafters.eagle_head") is not None:
        from brwsim.llm.drafters import eagle_head

        drafters.append("eagle-head:quick" if quick else "eagle-head")
        head = (eagle_head.QUICK if quick else eagle_head.FULL).to_dict()  # a new head config: new points
    base = dict(model="smollm2-135m", prompts="humaneval,pydoc", seed=seed, batch=4, threads=1, drafters=drafters,
                head=head)  # fmt: skip
    if quick:
        return base | dict(n=1, P=[1, 2, 4, 8], walks=8, depth=8, check_samples=40, check_P=4, heldout=48)
    return base | dict(n=4, P=[1, 2, 4, 8, 16, 32, 64, 128], walks=8, depth=32, check_samples=150, check_P=32,
                       heldout=256)  # fmt: skip


_OPEN: dict = {}


def _open(params: dict):
    """(target, drafters, calibrations), opened once per process."""
    key = (params["model"], tuple(params["drafters"]), params["heldout"])
    if key not in _OPEN:
        from brwsim.llm.run import open_drafters
        from brwsim.llm.sources import load_source

        _OPEN.clear()
        target = load_source(params["model"], threads=params["threads"])
        log = lambda m: print(m, flush=True)  # noqa: E731
        _OPEN[key] = (target, *open_drafters(target, params["drafters"], 1.0, log, params["heldout"]))
    return _OPEN[key]


def _point_rows(prompt, pr, drs, secs) -> dict:
    return {
        "task": prompt.task,
        "id": prompt.id,
        "oracle": pr.oracle.values.tolist(),
        "xi": pr.walks.xi.tolist(),
        "H": float(np.nanmean(pr.walks.H)),
        "M2": float(np.nanmean(pr.walks.M2)),
        "drafters": [
            {
                "name": d.name,
                "values": {b: [None if not math.isfinite(x) else float(x) for x in v] for b, v in d.values.items()},
                "stats": None if d.walk_stats is None else d.walk_stats.mean(0).tolist(),
                "xi_q": None if d.xi_q is None else d.xi_q.tolist(),
                "s_P": None if d.s_P is None else [float(x) for x in d.s_P],
                "check": d.check.to_dict() if d.check else {},
                "passes": d.passes,
            }
            for d in drs
        ],
        "seconds": secs,
    }


def prompt_point(params: dict, prompt) -> dict:
    """One prompt's raw measurements (cached per prompt)."""

    def compute():
        from brwsim.llm.drafters import DrafterSettings, measure_prompt_drafters

        target, drafters, cal = _open(params)
        st = DrafterSettings(1.0, params["walks"], params["depth"], params["seed"], params["batch"])
        st.check_samples, st.check_P = params["check_samples"], params["check_P"]
        t0 = time.perf_counter()
        rates = [c.rates if c else None for c in cal]
        pr, drs = measure_prompt_drafters(target, drafters, prompt, max(params["P"]), st, rates)
        secs = time.perf_counter() - t0
        print(f"{prompt.task} {prompt.id}: {secs:.1f} s", flush=True)
        return [_point_rows(prompt, pr, drs, secs)]

    keys = ("model", "drafters", "head", "P", "walks", "depth", "seed", "batch", "check_samples", "check_P", "heldout")
    spec = {k: params[k] for k in keys} | {"task": prompt.task, "id": prompt.id, "text": prompt.text}
    return common.cached(NAME, spec | {"version": brwsim.__version__}, compute)[0]


def _calibration(params: dict) -> dict:
    """Held-out statistics per drafter (cached)."""

    def compute():
        _, drafters, cal = _open(params)
        return [
            {"name": d.name, "info": {k: v for k, v in d.info.items() if k != "rates"}} | (c.to_dict() if c else {})
            for d, c in zip(drafters, cal, strict=True)
        ]

    keys = ("model", "drafters", "head", "heldout")
    return {r["name"]: r for r in common.cached(NAME + "_cal", {k: params[k] for k in keys}, compute)}


def _task_rows(params, task, pts, cal) -> list[dict]:
    from brwsim.spine import curves_from_xi
    from brwsim.theory import bounds_from_curves, lorden, threshold_bound

    label, n, seed = f"{params['model']}/{task}", len(pts), params["seed"]
    rows = []
    xi = np.concatenate([np.asarray(p["xi"], float) for p in pts])
    mu, mu2 = float(np.mean([p["H"] for p in pts])), float(np.mean([p["M2"] for p in pts]))
    curves = curves_from_xi(xi, P_max=max(params["P"]))
    bounds = {b.P: b for b in bounds_from_curves(curves, params["P"], mu, mu2, iid=False)}
    for P in params["P"]:
        m, c = mean_ci95([p["oracle"][P - 1] for p in pts])
        rows.append(common.row(label, P, "oracle", m, c, n, seed, drafter=None, task=task))
        dual = bounds[P].to_dict().get("bounds", {}).get("dual")
        rows.append(common.row(label, P, "dual_bound", dual, 0.0, n, seed, drafter=None, task=task))
    for j, name in enumerate(d["name"] for d in pts[0]["drafters"]):
        ds = [p["drafters"][j] for p in pts]
        extra = dict(drafter=name, task=task)
        if ds[0]["stats"] is not None:
            for s, stat in enumerate(("cross_entropy", "kl", "tv", "top1_agree", "target_entropy")):
                m, c = mean_ci95([d["stats"][s] for d in ds])
                rows.append(common.row(label, None, stat, m, c, n, seed, **extra))
            x = np.concatenate([np.asarray(d["xi_q"], float).ravel() for d in ds])
            x = x[np.isfinite(x)]
            mu_q, mu2_q = float(x.mean()), float((x**2).mean())
        for k in ("kl", "top1_agree", "cross_entropy"):
            if k in cal.get(name, {}):
                rows.append(common.row(label, None, "heldout_" + k, cal[name][k], 0.0, cal[name]["positions"], seed,
                                       **extra))  # fmt: skip
        for P in params["P"]:
            best, bm, bc = None, -1.0, 0.0
            for b in ds[0]["values"]:
                vals = [d["values"][b][P - 1] for d in ds]
                if any(v is None for v in vals):
                    continue
                m, c = mean_ci95(vals)
                rows.append(common.row(label, P, b, m, c, n, seed, **extra))
                if m > bm:
                    best, bm, bc = b, m, c
            rows.append(common.row(label, P, "best", bm, bc, n, seed, builder=best, **extra))
            fr = [d["values"][best][P - 1] / p["oracle"][P - 1] for d, p in zip(ds, pts, strict=True)]
            m, c = mean_ci95(fr)
            rows.append(common.row(label, P, "fraction_of_oracle", m, c, n, seed, builder=best, **extra))
            if ds[0]["s_P"] is not None:
                tb = threshold_bound([(np.asarray(d["xi_q"], float), d["s_P"][P - 1]) for d in ds])
                rows.append(common.row(label, P, "ik_bound", tb["upper"], 0.0, n, seed, point=tb["point"], se=tb["se"],
                                       truncated_walks=tb["truncated_walks"], **extra))  # fmt: skip
                s = float(np.mean([d["s_P"][P - 1] for d in ds]))
                rows.append(common.row(label, P, "ik_lorden", lorden(s, mu_q, mu2_q), 0.0, n, seed, s_P=s, **extra))
        ch = [d["check"] for d in ds if d["check"]]
        se = math.sqrt(sum(c["se"] ** 2 for c in ch)) / len(ch)
        xm, vm = float(np.mean([c["mean"] for c in ch])), float(np.mean([c["value"] for c in ch]))
        calls, z = sum(c["samples"] for c in ch), (xm - vm) / se if se > 0 else 0.0
        rows.append(common.row(label, ch[0]["P"], "check_accepted_per_call", xm, 1.96 * se, calls, seed, value=vm, z=z,
                               **extra))  # fmt: skip
    return rows


def aggregate(params: dict, points: list[dict], cal: dict) -> list[dict]:
    rows = []
    for task in dict.fromkeys(p["task"] for p in points):
        rows += _task_rows(params, task, [p for p in points if p["task"] == task], cal)
    secs = sum(p["seconds"] for p in points)
    rows.append(common.row(params["model"], None, "model_phase_seconds", secs, 0.0, len(points), params["seed"]))
    return rows


def figure(rows: list[dict]):
    plt = common.setup_matplotlib()
    labels = list(dict.fromkeys(r["law"] for r in rows if r["statistic"] == "oracle"))
    fig, axes = plt.subplots(1, len(labels), figsize=(6.2 * len(labels), 4.8), squeeze=False)
    for ax, label in zip(axes[0], labels, strict=True):
        sel = [r for r in rows if r["law"] == label]

        def series(stat, drafter=None, sel=sel):
            pts = sorted(
                (r["P"], r["mean"], r["ci95"]) for r in sel if r["statistic"] == stat and r["drafter"] == drafter
            )
            return [p[0] for p in pts], [p[1] for p in pts], [0.0 if not math.isfinite(p[2]) else p[2] for p in pts]

        P, m, ci = series("oracle")
        ax.errorbar(P, m, yerr=ci, fmt="o-", color="k", lw=2, label="real oracle T*_P (speed of light)", zorder=5)
        P, m, _ = series("dual_bound")
        ax.plot(P, m, "-.", color="k", lw=1, label="dual bound (rigorous, upper 97.5%)")
        names = list(dict.fromkeys(r["drafter"] for r in sel if r["statistic"] == "best"))
        for c, name in enumerate(names):
            col = common.PALETTE[(c + 1) % len(common.PALETTE)]
            P, m, ci = series("best", name)
            kl = [r["mean"] for r in sel if r["statistic"] == "kl" and r["drafter"] == name]
            tag = f" (KL {kl[0]:.2f})" if kl else ""
            ax.errorbar(P, m, yerr=ci, fmt="s-", color=col, ms=3, label=f"{name}: best builder{tag}")
            P, m, _ = series("ik_lorden", name)
            if P:
                ax.plot(P, m, ":", color=col, lw=1.3)
        ik = "dotted: imperfect-knowledge prediction s_P/mu_q + mu_2q/mu_q^2 - 1"
        ax.plot([], [], ":", color="grey", lw=1.3, label=ik)
        ax.set_xscale("log", base=2)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("verifier budget P (draft tokens per call)")
        ax.set_ylabel("E[X], accepted draft tokens per call")
        ax.legend(loc="upper left", fontsize=6.3)
    fig.suptitle("Real drafters vs the real oracle on SmolLM2-135M (T = 1); tokens per call = X + 1", fontsize=10)
    return fig


def table(rows: list[dict], params: dict) -> str:
    Ps = [P for P in TABLE_P if P in params["P"]] or [max(params["P"])]
    head = "| task | drafter | " + " | ".join(f"frac. of oracle P={P}" for P in Ps)
    head += " | KL (nats) | H(p,q) (nats) | held-out KL | direct check X/call (P) | path-prob. value |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    get = {(r["law"], r["drafter"], r["statistic"], r["P"]): r for r in rows if "drafter" in r}
    for label in dict.fromkeys(r["law"] for r in rows if r["statistic"] == "oracle"):
        for name in dict.fromkeys(r["drafter"] for r in rows if r["law"] == label and r["statistic"] == "best"):
            cells = []
            for P in Ps:
                r = get.get((label, name, "fraction_of_oracle", P))
                cells.append(f"{r['mean']:.2f} ± {r['ci95']:.2f} ({r['builder']})" if r else "")
            kl, ce = (get.get((label, name, k, None)) for k in ("kl", "cross_entropy"))
            hk = get.get((label, name, "heldout_kl", None))
            ck = next(
                r
                for r in rows
                if r.get("drafter") == name and r["law"] == label and r["statistic"] == "check_accepted_per_call"
            )
            fmt = lambda r: f"{r['mean']:.2f} ± {r['ci95']:.2f}" if r else "n/a (no q)"  # noqa: E731
            cells += [fmt(kl), fmt(ce), f"{hk['mean']:.2f}" if hk else "n/a"]
            cells += [f"{ck['mean']:.3f} ± {ck['ci95']:.3f} (P={ck['P']})", f"{ck['value']:.3f} (z = {ck['z']:+.2f})"]
            lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "X = accepted draft tokens per verifier call; published acceptance lengths tau = X + 1.",
              "Published (context only; large targets with trained heads, T = 0):"]  # fmt: skip
    lines += [f"- {what}: tau = {tau:.2f}, i.e. X = {tau - 1:.2f} ({src})" for what, tau, src in PUBLISHED]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__.splitlines()[0]).parse_args(argv)
    params = settings(args.quick, args.seed)
    from brwsim.llm import require_llm
    from brwsim.llm.sources import load_prompts

    require_llm()
    points = [prompt_point(params, p) for p in load_prompts(params["prompts"], params["n"])]
    rows = aggregate(params, points, _calibration(params))
    common.write_rows(NAME, rows)
    png = common.save_figure(figure(rows), NAME)
    tab = table(rows, params)
    path = common.out_dirs()[1] / f"{NAME}_table.md"
    path.write_text(tab)
    lines = [ln for ln in tab.splitlines() if ln.startswith("| ") and "task" not in ln]
    return {"name": NAME, "figures": [png], "tables": [str(path)], "summary": lines}


if __name__ == "__main__":
    out = main()
    for line in out["summary"]:
        print(line)
    print(f"wrote {out['figures'][0]}")
