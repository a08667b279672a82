"""Real drafters on the real model: how far is a practical drafter from the speed of light (SmolLM2-135M).

Per task (HumanEval code prompts, pydoc prose, ShareGPT chat) and per drafter
(layer skipping, low-bit copies, prompt lookup, and the trained EAGLE-style
head when the build has it): E[X] against P for the real oracle tree T*_P and
the drafter's tree builder fixed in advance (top-P-by-Q for a drafter with a
q, the lookup tree for a proposer; docs/drafters.md, "Real drafters";
the other builders are reported beside, and the best of them on the
same prompts only for context), the rigorous empirical bound (dual) and the
imperfect-knowledge prediction for the top-P-by-Q tree from the drafter's
cross-entropy and its second moment (docs/theory.md, "Imperfect
knowledge"). Intervals over prompts are Student t; the drafter's gap to the
oracle and every drafter-vs-drafter difference are paired t intervals over
the same prompts. A table of each drafter's fraction of the oracle at P = 8,
32, 64, 128, its KL and cross-entropy along the target's walks, and its
accepted tokens per call measured by real speculative decoding (the direct
check, on each prompt's best builder at its P, beside the fixed builder's
value there). X = accepted draft tokens per verifier call; published acceptance
lengths tau count the verifier's own token too: tau = X + 1.

Prompts: ``--n`` per task (64), in the seeded interleaved order of
``experiments.common.prompt_order``; every prompt's measurements are cached,
so a run stopped early resumes; ``--budget-seconds S`` measures new prompts
for S seconds and scores every prompt measured so far. Writes results/real_drafters.{csv,jsonl},
results/real_drafters_prompts.jsonl (one row per prompt x P x drafter x
builder: value and oracle value), figures/real_drafters.{png,pdf} and
figures/real_drafters_table.md. ``--quick``: one prompt per task, P <= 8,
short walks, no EAGLE head unless its quick version is available.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np

import brwsim
from brwsim._stats import mean_ci95, paired_ci95
from brwsim.llm.drafters._report import fixed_builder
from experiments import common
from experiments.real_model import MAX_PROMPT_TOKENS, cut_prompts

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


def settings(quick: bool, seed: int, n: int | None = None) -> dict:
    drafters = ["layerskip:skip=14-17", "lowbit:bits=4", "lookup:n=3"]
    if not quick:
        drafters[1:1] = ["layerskip:auto,n=8"]
        drafters[3:3] = ["lowbit:bits=3"]
    head = None
    if importlib.util.find_spec("brwsim.llm.drafters.eagle_head") is not None:
        from brwsim.llm.drafters import eagle_head

        # the full run's head is trained the way EAGLE trains its heads: on ShareGPT training conversations
        drafters.append("eagle-head:quick" if quick else "eagle-head:chat")
        corpus = "stdlib" if quick else "sharegpt"
        head = eagle_head.config_from(quick, corpus=corpus).to_dict()  # a new head config: new points
        if head["corpus"] == "stdlib":  # the first corpus: points measured before the option keep their keys
            del head["corpus"]
    base = dict(model="smollm2-135m", prompts="humaneval,pydoc,sharegpt", seed=seed, batch=4, threads=1,
                drafters=drafters, head=head)  # fmt: skip
    if quick:
        return base | dict(n=n or 1, P=[1, 2, 4, 8], walks=8, depth=8, check_samples=40, check_P=4, heldout=48)
    return base | dict(n=n or 64, P=[1, 2, 4, 8, 16, 32, 64, 128], walks=8, depth=32, check_samples=150, check_P=32,
                       heldout=256)  # fmt: skip


_OPEN: dict = {}


def _finite(x):
    return None if x is None or not math.isfinite(x) else float(x)


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
        "prompt_tokens": int(pr.n_tokens),  # (at MAX_PROMPT_TOKENS: the prompt was cut to its last tokens)
        "oracle": pr.oracle.values.tolist(),
        "xi": [[_finite(x) for x in w] for w in pr.walks.xi.tolist()],  # null after a walk's end
        "H": float(np.nanmean(pr.walks.H)),
        "M2": float(np.nanmean(pr.walks.M2)),
        "drafters": [
            {
                "name": d.name,
                "values": {b: [None if not math.isfinite(x) else float(x) for x in v] for b, v in d.values.items()},
                "stats": None if d.walk_stats is None else d.walk_stats.mean(0).tolist(),
                "xi_q": None if d.xi_q is None else [[_finite(x) for x in w] for w in d.xi_q.tolist()],
                "s_P": None if d.s_P is None else [float(x) for x in d.s_P],
                "check": d.check.to_dict() if d.check else {},
                "passes": d.passes,
            }
            for d in drs
        ],
        "seconds": secs,
        "phases": {k: round(v, 4) for k, v in pr.phases.items()},
        "host": {k: round(v, 4) for k, v in pr.host.items()},
        "tokens": dict(pr.tokens),
        "floor": {k: round(v, 4) for k, v in pr.floor.items()},
    }


def measure_one(params: dict, prompt) -> list[dict]:
    """One prompt's raw measurements (the rows of its cached point)."""
    from brwsim.llm.drafters import DrafterSettings, measure_prompt_drafters

    target, drafters, cal = _open(params)
    st = DrafterSettings(1.0, params["walks"], params["depth"], params["seed"], params["batch"])
    st.check_samples, st.check_P = params["check_samples"], params["check_P"]
    t0 = time.perf_counter()
    rates = [c.rates if c else None for c in cal]
    pr, drs = measure_prompt_drafters(target, drafters, prompt, max(params["P"]), st, rates)
    secs = time.perf_counter() - t0
    print(f"{prompt.task} {prompt.id}: model {sum(pr.phases.values()):.1f} s, host {sum(pr.host.values()):.1f} s",
          flush=True)  # fmt: skip
    return [_point_rows(prompt, pr, drs, secs)]


def measure(params: dict, order: list, budget: float | None, width: int) -> list:
    """The cached point of each prompt of ``order`` (None: not measured within the budget)."""
    pts = common.measure_prompts(NAME, order, lambda p: point_key(params, p), lambda p: measure_one(params, p),
                                 width, budget, prepare=lambda: _open(params))  # fmt: skip
    return [None if p is None else p[0] for p in pts]


def point_key(params: dict, prompt) -> dict:
    """The cache key of one prompt's measurements."""
    keys = ("model", "drafters", "head", "P", "walks", "depth", "seed", "batch", "check_samples", "check_P", "heldout")
    spec = {k: params[k] for k in keys} | {"task": prompt.task, "id": prompt.id, "text": prompt.text}
    return spec | {"version": brwsim.__version__}


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


def _ci_row(label, P, stat, vals, n, seed, **extra) -> dict:
    m, c = mean_ci95(vals)
    return common.row(label, P, stat, _finite(m), _finite(c), n, seed, **extra)


def prompt_rows(params: dict, points: list[dict]) -> list[dict]:
    """One row per prompt x P x drafter x builder: the drafter's value and the oracle's (re-analysable)."""
    rows = []
    for p in points:
        for d in p["drafters"]:
            for b, vals in d["values"].items():
                for P in params["P"]:
                    rows.append(dict(task=p["task"], id=p["id"], P=P, drafter=d["name"], builder=b,
                                     fixed=b == fixed_builder(d["values"]), value=vals[P - 1],
                                     oracle=p["oracle"][P - 1]))  # fmt: skip
    return rows


def _oracle_rows(params, label, task, pts, seed) -> list[dict]:
    from brwsim.spine import curves_from_xi
    from brwsim.theory import bounds_from_curves

    n, rows = len(pts), []
    xi = np.concatenate([np.array(p["xi"], dtype=float) for p in pts])  # (null -> NaN after a walk's end)
    mu, mu2 = float(np.mean([p["H"] for p in pts])), float(np.mean([p["M2"] for p in pts]))
    curves = curves_from_xi(xi, P_max=max(params["P"]))
    bounds = {b.P: b for b in bounds_from_curves(curves, params["P"], mu, mu2, iid=False)}
    for P in params["P"]:
        rows.append(_ci_row(label, P, "oracle", [p["oracle"][P - 1] for p in pts], n, seed, drafter=None, task=task))
        dual = bounds[P].to_dict().get("bounds", {}).get("dual")
        rows.append(common.row(label, P, "dual_bound", dual, 0.0, n, seed, drafter=None, task=task))
    return rows


def _stat_rows(label, name, ds, cal, n, seed, extra) -> tuple[list[dict], tuple]:
    rows, mq = [], (None, None)
    if ds[0]["stats"] is not None:
        for s, stat in enumerate(("cross_entropy", "kl", "tv", "top1_agree", "target_entropy")):
            rows.append(_ci_row(label, None, stat, [d["stats"][s] for d in ds], n, seed, **extra))
        x = np.concatenate([np.asarray(d["xi_q"], float).ravel() for d in ds])
        x = x[np.isfinite(x)]
        mq = (float(x.mean()), float((x**2).mean()))
    for k in ("kl", "top1_agree", "cross_entropy"):
        if k in cal.get(name, {}):
            rows.append(common.row(label, None, "heldout_" + k, cal[name][k], 0.0, cal[name]["positions"], seed,
                                   **extra))  # fmt: skip
    return rows, mq


def _ik_rows(label, P, ds, mq, n, seed, extra) -> list[dict]:
    from brwsim.theory import lorden, threshold_bound

    if ds[0]["s_P"] is None:
        return []
    tb = threshold_bound([(np.asarray(d["xi_q"], float), d["s_P"][P - 1]) for d in ds])
    s = float(np.mean([d["s_P"][P - 1] for d in ds]))
    # C_q(s_P) equals the top-P-by-Q value up to ties: a consistency check of the valuation, not a bound
    return [
        common.row(label, P, "ik_identity", _finite(tb["upper"]), 0.0, n, seed, point=_finite(tb["point"]),
                   se=_finite(tb["se"]), truncated_walks=tb["truncated_walks"], **extra),
        common.row(label, P, "ik_lorden", lorden(s, *mq), 0.0, n, seed, s_P=s, **extra),
    ]  # fmt: skip


def _drafter_rows(params, label, pts, j, cal, seed) -> list[dict]:
    ds, n = [p["drafters"][j] for p in pts], len(pts)
    name = ds[0]["name"]
    extra = dict(drafter=name, task=pts[0]["task"])
    rows, mq = _stat_rows(label, name, ds, cal, n, seed, extra)
    fixed = fixed_builder(ds[0]["values"])
    for P in params["P"]:
        best, bm = None, -math.inf
        for b in ds[0]["values"]:
            vals = [d["values"][b][P - 1] for d in ds]
            if any(v is None for v in vals):
                continue
            rows.append(_ci_row(label, P, b, vals, n, seed, **extra))
            best, bm = (b, rows[-1]["mean"]) if rows[-1]["mean"] > bm else (best, bm)
        # the best builder on the scored prompts themselves: optimistic, context only
        rows.append(common.row(label, P, "best_same_prompts", bm, None, n, seed, builder=best, **extra))
        v = [d["values"][fixed][P - 1] for d in ds]
        o = [p["oracle"][P - 1] for p in pts]
        rows.append(_ci_row(label, P, "fixed", v, n, seed, builder=fixed, **extra))
        fr = [a / b if b > 0 else math.nan for a, b in zip(v, o, strict=True)]
        rows.append(_ci_row(label, P, "fraction_of_oracle", fr, n, seed, builder=fixed, **extra))
        m, c = paired_ci95(o, v)
        rows.append(common.row(label, P, "oracle_minus_drafter", _finite(m), _finite(c), n, seed, builder=fixed,
                               **extra))  # fmt: skip
        rows += _ik_rows(label, P, ds, mq, n, seed, extra)
    ch = [d["check"] for d in ds if d["check"]]
    se = math.sqrt(sum(c["se"] ** 2 for c in ch)) / len(ch)
    xm, vm = float(np.mean([c["mean"] for c in ch])), float(np.mean([c["value"] for c in ch]))
    calls, z = sum(c["samples"] for c in ch), (xm - vm) / se if se > 0 else 0.0
    # the check speculates on each prompt's best builder at its P (brwsim.llm.drafters._measure, _checked), which is not
    # always the fixed builder the fractions use: its builders are named, and the fixed builder's value beside
    used = sorted({c["builder"] for c in ch})
    fv = mean_ci95([d["values"][fixed][ch[0]["P"] - 1] for d in ds])
    rows.append(common.row(label, ch[0]["P"], "check_accepted_per_call", xm, 1.96 * se, calls, seed, value=vm, z=z,
                           builders=used, fixed_builder=fixed, fixed_value=fv[0], fixed_value_ci95=fv[1],
                           **extra))  # fmt: skip
    return rows


def _paired_rows(params, label, pts, seed) -> list[dict]:
    """Drafter a minus drafter b (fixed builders) per P, paired over the same prompts (t interval)."""
    rows, ds = [], list(zip(*[p["drafters"] for p in pts], strict=True))
    for i, j in itertools.combinations(range(len(ds)), 2):
        a, b = ds[i], ds[j]
        fa, fb = fixed_builder(a[0]["values"]), fixed_builder(b[0]["values"])
        for P in params["P"]:
            m, c = paired_ci95([x["values"][fa][P - 1] for x in a], [x["values"][fb][P - 1] for x in b])
            rows.append(common.row(label, P, "paired_difference", _finite(m), _finite(c), len(pts), seed,
                                   drafter=a[0]["name"], other=b[0]["name"], task=pts[0]["task"]))  # fmt: skip
    return rows


def _task_rows(params, task, pts, cal) -> list[dict]:
    label, seed = f"{params['model']}/{task}", params["seed"]
    rows = _oracle_rows(params, label, task, pts, seed)
    for j in range(len(pts[0]["drafters"])):
        rows += _drafter_rows(params, label, pts, j, cal, seed)
    return rows + _paired_rows(params, label, pts, seed)


def aggregate(params: dict, points: list[dict], cal: dict, timing: dict | None = None) -> list[dict]:
    """The summary rows of the measured prompts; ``timing``: the run's wall seconds, workers and batch (if
    it measured any prompt)."""
    rows = []
    for task in dict.fromkeys(p["task"] for p in points):
        pts = [p for p in points if p["task"] == task]
        rows += _task_rows(params, task, pts, cal)
        if all("prompt_tokens" in p for p in pts):  # (points measured before it was recorded lack it)
            cut = cut_prompts(p["prompt_tokens"] for p in pts)
            extra = dict(max_prompt_tokens=MAX_PROMPT_TOKENS, drafter=None, task=task)
            rows.append(common.row(f"{params['model']}/{task}", None, "prompts_cut", cut, 0.0, len(pts),
                                   params["seed"], **extra))  # fmt: skip
    model = sum(sum(p["phases"].values()) for p in points)
    rows.append(
        common.row(
            params["model"],
            None,
            "model_phase_seconds",
            model,
            0.0,
            len(points),
            params["seed"],
            host_seconds=sum(sum(p.get("host", {}).values()) for p in points),
            timing=timing,
        )
    )
    kinds = (("seconds_per_prompt", "phases"), ("host_seconds_per_prompt", "host"), ("tokens_per_prompt", "tokens"),
             ("floor_seconds_per_prompt", "floor"))  # fmt: skip
    for kind, key in kinds:
        for ph in sorted({k for p in points for k in p.get(key, {})}):
            vals = [p[key].get(ph, 0.0) for p in points]
            rows.append(_ci_row(params["model"], None, kind, vals, len(vals), params["seed"], phase=ph))
    return rows


def figure(rows: list[dict]):
    plt = common.setup_matplotlib()
    labels = list(dict.fromkeys(r["law"] for r in rows if r["statistic"] == "oracle"))
    fig, axes = plt.subplots(1, len(labels), figsize=(6.2 * len(labels), 6.2), squeeze=False)
    for ax, label in zip(axes[0], labels, strict=True):
        sel = [r for r in rows if r["law"] == label]

        def series(stat, drafter=None, sel=sel):
            pts = sorted(
                (r["P"], r["mean"], r["ci95"]) for r in sel if r["statistic"] == stat and r["drafter"] == drafter
            )
            return [p[0] for p in pts], [p[1] for p in pts], [0.0 if _finite(p[2]) is None else p[2] for p in pts]

        P, m, ci = series("oracle")
        ax.errorbar(P, m, yerr=ci, fmt="o-", color="k", lw=2, label="real oracle T*_P (speed of light)", zorder=5)
        light = {p: a + c for p, a, c in zip(P, m, ci, strict=True)}  # the oracle's upper 95% end
        P, m, _ = series("dual_bound")
        ax.plot(P, m, "-.", color="k", lw=1, label="dual bound (rigorous, upper 97.5%)")
        names = list(dict.fromkeys(r["drafter"] for r in sel if r["statistic"] == "fixed"))
        for c, name in enumerate(names):
            col = common.PALETTE[(c + 1) % len(common.PALETTE)]
            P, m, ci = series("fixed", name)
            kl = [r["mean"] for r in sel if r["statistic"] == "kl" and r["drafter"] == name]
            tag = f" (KL {kl[0]:.2f})" if kl else ""
            fixed = next(r["builder"] for r in sel if r["statistic"] == "fixed" and r["drafter"] == name)
            ax.errorbar(P, m, yerr=ci, fmt="s-", color=col, ms=3, label=f"{name}: {fixed}{tag}")
            P, m, _ = series("ik_lorden", name)
            low = [(p, v) for p, v in zip(P, m, strict=True) if v <= light.get(p, math.inf)]
            high = [(p, v) for p, v in zip(P, m, strict=True) if v > light.get(p, math.inf)]
            if low:
                ax.plot(*zip(*low, strict=True), ":", color=col, lw=1.3)
            if high:
                ax.plot(*zip(*high, strict=True), "x", color=col, ms=4, alpha=0.6)
        ax.plot([], [], ":", color="grey", lw=1.3, label="imperfect-knowledge prediction (dotted)")
        ax.plot([], [], "x", color="grey", ms=4, label="the prediction above the oracle (x)")
        ax.set_xscale("log", base=2)
        n = next(r["trees"] for r in sel if r["statistic"] == "oracle")
        ax.set_title(f"{label}, {n} prompts (95% t intervals)", fontsize=9)
        ax.set_xlabel("verifier budget P (draft tokens per call)")
        ax.set_ylabel("E[X], accepted draft tokens per call")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=6.3, ncol=2)
    fig.suptitle("Real drafters vs the real oracle on SmolLM2-135M (T = 1); tokens per call = X + 1", fontsize=10)
    note = (
        "Dotted: the imperfect-knowledge prediction s_P/mu_q + mu_2q/mu_q^2 - 1 for the drafter's top-P-by-Q "
        "tree (a prediction, not a bound), in the drafter's colour.\nx: the same prediction where it lies above the "
        "real oracle's 95% interval, i.e. above the speed of light, where it says nothing about the drafter."
    )
    fig.text(0.5, -0.17, note, ha="center", va="top", fontsize=8)
    return fig


def _pm3(r) -> str:
    """``mean ± ci95`` to three decimals; the mean alone where a single prompt gives no interval."""
    return f"{r['mean']:.3f} ± {r['ci95']:.3f}" if r.get("ci95") is not None else f"{r['mean']:.3f} (one prompt)"


def _pm(r) -> str:
    c = r["ci95"]
    return f"{r['mean']:.2f} ± {c:.2f}" if c is not None else f"{r['mean']:.2f}"


def table(rows: list[dict], params: dict) -> str:
    Ps = [P for P in TABLE_P if P in params["P"]] or [max(params["P"])]
    head = "| task | drafter | " + " | ".join(f"frac. of oracle P={P}" for P in Ps)
    head += (
        " | KL (nats) | H(p,q) (nats) | held-out KL | direct check X/call (P; its trees' builder) | "
        "their path-prob. value (z) | fixed builder's value at that P |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    get = {(r["law"], r["drafter"], r["statistic"], r["P"]): r for r in rows if "drafter" in r}
    for label in dict.fromkeys(r["law"] for r in rows if r["statistic"] == "oracle"):
        for name in dict.fromkeys(r["drafter"] for r in rows if r["law"] == label and r["statistic"] == "fixed"):
            cells = []
            for P in Ps:
                r = get.get((label, name, "fraction_of_oracle", P))
                cells.append(_pm(r) + f" ({r['builder']})" if r else "")
            kl, ce = (get.get((label, name, k, None)) for k in ("kl", "cross_entropy"))
            hk = get.get((label, name, "heldout_kl", None))
            ck = next(
                r
                for r in rows
                if r.get("drafter") == name and r["law"] == label and r["statistic"] == "check_accepted_per_call"
            )
            cells += [
                _pm(kl) if kl else "n/a (no q)",
                _pm(ce) if ce else "n/a (no q)",
                f"{hk['mean']:.2f}" if hk else "n/a",
            ]
            used = "/".join(ck["builders"]) if ck.get("builders") else "best per prompt"
            fx = get.get((label, name, "fixed", ck["P"]))
            cells += [f"{ck['mean']:.3f} ± {ck['ci95']:.3f} (P={ck['P']}; {used})",
                      f"{ck['value']:.3f} (z = {ck['z']:+.2f})",
                      f"{_pm3(fx)} ({fx['builder']})" if fx else "n/a"]  # fmt: skip
            lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "Fractions: the builder fixed in advance (topq for a drafter with a q, lookup_tree for a proposer), "
              "mean of per-prompt ratios with a 95% Student-t interval over the prompts.",
              "Direct check: real speculative calls on the tree of each prompt's builder with the largest value at "
              "the check's P on that prompt (best per prompt, not the fixed builder: chosen on the scored prompt, "
              "so its X/call is not comparable with the fractions), against the same trees' path-probability value "
              "(z with the exact standard error); the last column is the fixed builder's value at that P (mean over "
              "the prompts, 95% t interval), the tree the fractions score.",
              "X = accepted draft tokens per verifier call; published acceptance lengths tau = X + 1.",
              "Published (context only; large targets with trained heads, T = 0):"]  # fmt: skip
    lines += [f"- {what}: tau = {tau:.2f}, i.e. X = {tau - 1:.2f} ({src})" for what, tau, src in PUBLISHED]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap, args = common.prompt_args(NAME, __doc__.splitlines()[0], argv)
    params = settings(args.quick, args.seed, args.n)
    from brwsim.llm import require_llm

    require_llm()
    order = common.prompt_order(params["prompts"].split(","), params["n"], params["seed"])
    if args.worker is not None:  # one worker's share, into the cache
        common.floor_rates()
        measure(params, common.share(order, args.worker), args.budget_seconds, args.prompt_batch)
        return {"name": NAME, "figures": [], "tables": [], "summary": []}
    if args.budget_seconds != 0:  # (0: score only the prompts already measured, open nothing)
        n_workers = args.workers or (1 if args.quick else common.default_workers())
        _open(params)  # the drafters opened (the head trained once) before any worker starts
        rates = common.floor_rates()

        def run() -> dict:
            with common.workers(NAME, common.worker_argv(args), n_workers):
                measure(params, common.share(order, f"0/{n_workers}"), args.budget_seconds, args.prompt_batch)
            return dict(workers=n_workers, prompt_batch=args.prompt_batch, **rates)

        timing = common.run_timing(NAME, order, lambda p: point_key(params, p), run)
    else:
        timing = common.run_timing(NAME, order, lambda p: point_key(params, p), lambda: None)
    points = measure(params, order, 0.0, 1)  # every prompt measured by any process (the cache)
    scored: dict = {}
    for p in points:
        if p is not None:
            scored[p["task"]] = scored.get(p["task"], 0) + 1
    points = [p for p in points if p is not None]
    if not points:
        ap.error("no prompt was measured within --budget-seconds and none is cached: give a larger budget")
    if len(points) < len(order):
        print(f"time budget reached: {len(points)} of {len(order)} prompts scored, the rest left for a later run")
    cal = _calibration(params)
    rows = aggregate(params, points, cal, timing)
    common.write_rows(NAME, rows)
    with open(common.out_dirs()[0] / f"{NAME}_prompts.jsonl", "w") as f:
        f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in prompt_rows(params, points))
    png = common.save_figure(figure(rows), NAME)
    tab = table(rows, params)
    path = common.out_dirs()[1] / f"{NAME}_table.md"
    path.write_text(tab)
    counts = ", ".join(f"{task} {k}" for task, k in scored.items())
    lines = [f"prompts scored per task: {counts} (of {params['n']} each; table above, {path.name})"]
    cut = [f"{r['task']} {r['mean']}" for r in rows if r["statistic"] == "prompts_cut"]
    if cut:
        lines.append(f"prompts cut to their last {MAX_PROMPT_TOKENS} tokens: " + ", ".join(cut))
    per = {k: sum(sum(p.get(k, {}).values()) for p in points) / len(points) for k in ("phases", "floor", "host")}
    lines.append(f"per prompt: {per['phases']:.1f} s of model time (floor {per['floor']:.1f} s), {per['host']:.1f} s "
                 "of host time; by phase in results/real_drafters.jsonl (seconds_per_prompt)")  # fmt: skip
    if timing:
        lines.append(f"the run that measured them ({timing.get('date', '?')}): {timing['prompts_measured']} prompts in "
                     f"{timing['wall_seconds']:.0f} s of wall time, {timing.get('workers')} process(es) of one torch "
                     f"thread, {timing.get('prompt_batch')} prompts each at once")  # fmt: skip
    return {"name": NAME, "figures": [png], "tables": [str(path)], "summary": lines}


if __name__ == "__main__":
    out = main()
    if not out["figures"]:  # a worker process: its prompts are in the cache
        raise SystemExit(0)
    print(Path(out["tables"][0]).read_text())
    for line in out["summary"]:
        print(line)
    print(f"wrote {out['figures'][0]}")
