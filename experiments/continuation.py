"""E[X] along the target's own continuations: the drafters' values where a generation calls the target.

The real-drafters rows value each drafter's tree once, at the prompt's end.
A generation of N tokens calls the target at positions along its own
continuation, where the text is the model's, not the prompt's. Per prompt (the
first ``--n`` per task of the real-drafters run's order: the planner's
prompts, none of which experiments.end_to_end scores), one continuation is
sampled from the target at temperature 1 (seeded per prompt), and at one
offset drawn uniformly in each of STRATA equal strata of the first SPAN
positions (SPAN = 128, the end-to-end run's generation; seeded per prompt) the
text prompt + its first k continuation tokens is valued: the oracle tree T*_P
and each drafter's fixed builder (top-P-by-Q for a drafter with a q, the
lookup tree for a proposer; the builders of the real-drafters rows), E[X] at
P = 1..P_max exact from the target's rows. A prompt's value is the mean over
its strata, an unbiased estimate of its mean over the SPAN positions (the
offsets of one prompt share its text, so the prompt is the unit); rows: the
mean over prompts with its Student t 95% half-width, per task, drafter and P,
in the real-drafters rows' format (statistics ``oracle`` and ``fixed``), so
the planner (experiments.speedup) reads them the same way; rows
``fixed_stratum`` give each stratum's mean beside.

What it assumes: the loop's calls land on every position of the generation
as often (a call's position depends on the earlier calls' accepted tokens; the
end-to-end run measures what the loop gets).

Prompts are measured ``--prompt-batch`` at a time per process, their passes
packed, in ``--workers`` processes; every prompt is cached, so a stopped run
resumes; ``--budget-seconds S`` starts no new prompt after S seconds. Writes
results/continuation.{csv,jsonl} and figures/continuation_table.md. ``--quick``:
one prompt per task, P <= 4, two strata of the first 8 positions, layer
skipping and lookup only.
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path

import numpy as np

import brwsim
from brwsim._stats import mean_ci95
from experiments import common

NAME = "continuation"
MODEL = "smollm2-135m"
TASKS = ("humaneval", "pydoc", "sharegpt")
SPAN, STRATA = 128, 4  # the positions a generation of the end-to-end run calls the target at, in equal strata
# the real-drafters rows' drafters (layerskip:auto,n=8 chose layers 13-20 there: its rows' name)
DRAFTERS = ("layerskip:skip=14-17", "layerskip:skip=13-20", "lowbit:bits=4", "lowbit:bits=3", "lookup:n=3",
            "eagle-head:chat")  # fmt: skip


def settings(quick: bool, seed: int, n: int | None = None) -> dict:
    drafters = ["layerskip:skip=14-17", "lookup:n=3"] if quick else list(DRAFTERS)
    base = dict(model=MODEL, tasks=list(TASKS), seed=seed, batch=4, threads=1, T=1.0, drafters=drafters, sizes=True)
    if quick:
        return base | dict(n=n or 1, P_max=4, span=8, strata=2)
    return base | dict(n=n or 16, P_max=64, span=SPAN, strata=STRATA)


def offsets_of(params: dict, prompt) -> list[int]:
    """One offset drawn uniformly in each stratum of the first ``span`` positions (seeded per prompt)."""
    from brwsim.llm.measure import prompt_rng

    w = params["span"] // params["strata"]
    rng = np.random.default_rng([23, *prompt_rng(params["seed"], prompt).integers(0, 2**32, 2)])
    return [j * w + int(rng.integers(w)) for j in range(params["strata"])]


_OPEN: dict = {}


def _open(params: dict):
    """(target, drafters), opened once per process."""
    key = (params["model"], tuple(params["drafters"]))
    if key not in _OPEN:
        from brwsim.llm.drafters import open_drafter
        from brwsim.llm.sources import load_source

        _OPEN.clear()
        target = load_source(params["model"], threads=params["threads"])
        log = lambda m: print(m, flush=True)  # noqa: E731
        _OPEN[key] = (target, [open_drafter(s, target, log) for s in params["drafters"]])
    return _OPEN[key]


def continuation(ctx, n: int, rng: np.random.Generator) -> list[int]:
    """``n`` tokens sampled from the target at temperature 1 after the text of ``ctx`` (its rows, one a token)."""
    from brwsim.llm.specdec._verify import draw, probabilities

    out: list[int] = []
    for _ in range(n):
        (row,) = ctx.logprobs([tuple(out)])
        out.append(draw(probabilities(row, 1.0), rng))
    return out


def values_at(target, drafters, ids: list[int], P_max: int, batch: int) -> tuple[dict, dict]:
    """The oracle's and each drafter's fixed builder's E[X] at P = 1..P_max after the text ``ids``, and each
    drafter's tree size at P_max (a proposer's tree can be smaller: at a budget P it drafts min(P, size) nodes)."""
    from brwsim.llm.drafters import DraftView, Proposer, prefix_values, topq_nodes
    from brwsim.llm.drafters._values import warm_target
    from brwsim.llm.measure import oracle_tree
    from brwsim.llm.sources.rounds import fork

    eos = target.eos_ids
    tctx = target.open(ids)

    def job(d):
        def run():
            if isinstance(d, Proposer):
                return d.tree(ids, P_max)
            return topq_nodes(DraftView(d.context(ids), 1.0), P_max, batch, eos)[0]

        return run

    trees = fork([job(d) for d in drafters])
    oracle = oracle_tree(tctx, P_max, batch=batch, eos=eos).values
    warm_target(tctx, trees)
    out, sizes = {"oracle": [float(x) for x in oracle[:P_max]]}, {}
    for d, nodes in zip(drafters, trees, strict=True):
        out[d.name] = [float(x) for x in prefix_values(tctx, nodes, P_max)]
        sizes[d.name] = min(len(nodes), P_max)
    return out, sizes


def measure_one(params: dict, prompt) -> list[dict]:
    """One prompt's values at its offsets (one a stratum) of its sampled continuation."""
    from brwsim.llm.measure import prompt_rng

    target, drafters = _open(params)
    t0 = time.perf_counter()
    ids = list(target.encode(prompt.text))
    offsets = offsets_of(params, prompt)
    cont = continuation(target.open(ids), max(offsets), prompt_rng(params["seed"], prompt))
    at = [values_at(target, drafters, ids + cont[:k], params["P_max"], params["batch"]) for k in offsets]
    secs = time.perf_counter() - t0
    print(f"{prompt.task} {prompt.id}: {secs:.1f} s", flush=True)
    return [{"task": prompt.task, "id": prompt.id, "prompt_tokens": len(ids), "continuation": cont,
             "offsets": offsets, "values": {str(j): v for j, (v, _) in enumerate(at)},
             "sizes": {str(j): n for j, (_, n) in enumerate(at)}, "seconds": secs}]  # fmt: skip


def point_key(params: dict, prompt) -> dict:
    keys = ("model", "drafters", "P_max", "span", "strata", "seed", "batch", "T", "sizes")
    return {k: params[k] for k in keys} | {"task": prompt.task, "id": prompt.id, "text": prompt.text,
                                           "version": brwsim.__version__}  # fmt: skip


def measure(params: dict, order: list, budget: float | None, width: int) -> list:
    pts = common.measure_prompts(NAME, order, lambda p: point_key(params, p), lambda p: measure_one(params, p),
                                 width, budget, prepare=lambda: _open(params))  # fmt: skip
    return [None if p is None else p[0] for p in pts]


def order_of(params: dict) -> list:
    """The planner's prompts: the first ``n`` per task of the real-drafters run's order (its 64 a task)."""
    every = common.prompt_order(params["tasks"], 64, params["seed"])
    per: dict = {}
    for p in every:
        per.setdefault(p.task, []).append(p)
    return [p for p in every if per[p.task].index(p) < params["n"]]


def budgets(P_max: int) -> list[int]:
    """The budgets of the rows: powers of two up to ``P_max`` (the real-drafters rows' and the planner's grid)."""
    return [1 << i for i in range(P_max.bit_length()) if 1 << i <= P_max]


def aggregate(params: dict, points: list[dict]) -> list[dict]:
    """Rows in the real-drafters format: per task, ``oracle`` and each drafter's ``fixed`` value per P, the mean
    over prompts of each prompt's mean over its strata, with the Student t 95% half-width over prompts; the nodes
    each drafter drafts (``drafted_nodes``) and each stratum's mean (``fixed_stratum``) beside."""
    rows = []
    for task in params["tasks"]:
        pts = [p for p in points if p["task"] == task]
        if not pts:
            continue
        label = f"{params['model']}/{task}"
        strata = [str(j) for j in range(params["strata"])]
        names = list(pts[0]["values"]["0"])
        w = params["span"] // params["strata"]
        where = f"along the continuation: one offset a stratum of {w} of the first {params['span']} positions"
        for name in names:
            per = np.array([[p["values"][j][name] for j in strata] for p in pts])  # [n, strata, P]
            prompt_means = per.mean(axis=1)
            stat, drafter = ("oracle", None) if name == "oracle" else ("fixed", name)
            extra = dict(drafter=drafter, task=task, where=where)
            for P in budgets(params["P_max"]):
                m, c = mean_ci95(prompt_means[:, P - 1].tolist())
                rows.append(common.row(label, P, stat, float(m), None if len(pts) < 2 else float(c), len(pts),
                                       params["seed"], **extra))  # fmt: skip
                if name != "oracle":  # the nodes it drafts at P: min(P, its tree's size), over prompts and offsets
                    per_prompt = [[min(P, p["sizes"][j][name]) for j in strata] for p in pts]
                    n = [k for ks in per_prompt for k in ks]
                    counts = sorted(collections.Counter(n).items())
                    m, c = mean_ci95([float(np.mean(ks)) for ks in per_prompt])
                    rows.append(common.row(label, P, "drafted_nodes", float(m), None if len(pts) < 2 else float(c),
                                           len(pts), params["seed"], distribution=[[k, v / len(n)] for k, v in counts],
                                           **extra))  # fmt: skip
            for P in sorted({P for P in (8, 32, params["P_max"]) if P <= params["P_max"]}):  # by stratum
                for j in range(params["strata"]):
                    m, c = mean_ci95(per[:, j, P - 1].tolist())
                    rows.append(common.row(label, P, "fixed_stratum", float(m), None if len(pts) < 2 else float(c),
                                           len(pts), params["seed"], drafter=drafter, task=task, stratum=j,
                                           positions=[j * w, (j + 1) * w]))  # fmt: skip
    return rows


def _pm(r: dict) -> str:
    return f"{r['mean']:.3f}" + ("" if r["ci95"] is None else f" +- {r['ci95']:.3f}")


def table(rows: list[dict], params: dict) -> str:
    w = params["span"] // params["strata"]
    heads = [f"positions {j * w}-{(j + 1) * w - 1}" for j in range(params["strata"])]
    lines = ["| task | drafter | P | E[X] along the continuation | " + " | ".join(heads) + " | prompts |",
             "| --- | --- | ---: | ---: | " + " | ".join("---:" for _ in heads) + " | ---: |"]  # fmt: skip
    by = {(r["task"], r["drafter"], r["P"], r["stratum"]): r for r in rows if r["statistic"] == "fixed_stratum"}
    for r in rows:
        if r["statistic"] in ("fixed", "oracle") and (r["task"], r["drafter"], r["P"], 0) in by:
            cells = " | ".join(f"{by[(r['task'], r['drafter'], r['P'], j)]['mean']:.3f}" for j in range(len(heads)))
            name = r["drafter"] or "oracle"
            lines.append(f"| {r['task']} | {name} | {r['P']} | {_pm(r)} | {cells} | {r['trees']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap, args = common.prompt_args(NAME, __doc__.splitlines()[0], argv)
    params = settings(args.quick, args.seed, args.n)
    from brwsim.llm import require_llm

    require_llm()
    order = order_of(params)
    if args.worker is not None:
        measure(params, common.share(order, args.worker), args.budget_seconds, args.prompt_batch)
        return {"name": NAME, "figures": [], "tables": [], "summary": []}
    if args.budget_seconds != 0:
        n_workers = args.workers or (1 if args.quick else common.default_workers())
        _open(params)  # the head trained (or read) once before any worker starts
        with common.workers(NAME, common.worker_argv(args), n_workers):
            measure(params, common.share(order, f"0/{n_workers}"), args.budget_seconds, args.prompt_batch)
    points = [p for p in measure(params, order, 0.0, 1) if p is not None]
    if not points:
        ap.error("no prompt was measured within --budget-seconds and none is cached: give a larger budget")
    rows = aggregate(params, points)
    common.write_rows(NAME, rows)
    path = common.out_dirs()[1] / f"{NAME}_table.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table(rows, params))
    per = {t: sum(p["task"] == t for p in points) for t in params["tasks"]}
    secs = float(np.mean([p["seconds"] for p in points]))
    lines = [f"prompts per task: {json.dumps(per)} (of {params['n']}); {secs:.1f} s of wall time a prompt"]
    return {"name": NAME, "figures": [], "tables": [str(path)], "summary": lines}


if __name__ == "__main__":
    out = main()
    if out["tables"]:
        print(Path(out["tables"][0]).read_text())
        for line in out["summary"]:
            print(line)
