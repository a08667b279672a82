"""Speed-of-light speedup against the budget P: the shipped model's real token trees on this CPU and on an H100.

speedup(P) = (E[X](P) + 1) t_verify(0) / (t_verify(P) + t_draft(P)): tokens
per second with speculation over tokens per second of plain decoding
(brwsim.speedup, docs/speedup.md). E[X](P) is the real oracle tree's of
SmolLM2-135M-Instruct on HumanEval (code) and pydoc (prose) prompts, read from
the real-model experiment's rows (the full run's when they exist, else this
mode's, else the committed ones); its 95% CI is carried into the speedup. (a) t_verify measured here:
the shipped model's one-pass tree verification on this CPU (fp32, one torch
thread, context 256, median of repeats); the early-exit drafter of the
real-drafter experiment beside the oracle, its best exit layer k, with its
pass timed here (interleaved with the target's decoding step).
(b) t_verify from the roofline of an H100 SXM (datasheet 3.35 TB/s, 989
TFLOP/s dense BF16; context 512, no fixed overhead) for Llama-shaped 1B and
8B targets in bf16 and a 70B target with weight-only 8-bit weights (bf16
would not fit one 80 GB H100): a what-if on the cost side only, the curves
reuse the 135M model's E[X], extrapolated past its largest measured budget
along its slope in ln P (a prediction; dotted). The best P of each curve is
marked. On this CPU t_verify is the median of repeats taken in interleaved
rounds over every P, fitted non-decreasing in P (a dip at a larger P is timing
noise), and the best P of the oracle is reported as a set: the budgets whose
speedup the data do not tell apart from the best (a paired bootstrap over the
real-model run's prompts and the timing repeats; brwsim.speedup.best_P_set),
the smallest of them named. Every real drafter is charged what its fixed
builder spends per target call, measured here in real speculative decoding at
every budget (brwsim.speedup.measure_draft_calls: three calibration prompts of
the real-drafters run, each budget's drafting seconds per call over the plain
step around it, Student t interval over the prompts; rows
``draft_call_fraction`` with the passes per call and rows per pass), and on
the H100 roofline those measured passes per call, each the roofline's pass
for its footprint (its weight bytes at its own bits, the target's in bf16,
its KV cache, its FLOPs) at its measured rows per pass
(RooflineCost.pass_time). One pass timed alone (brwsim.speedup.measure_draft_cost,
interleaved with the target's step) is kept in rows ``draft_pass_seconds``
for comparison and for the early-exit drafters. Where the best P is the largest
budget whose E[X] was measured, the row says "at least P, still rising".
The real drafters' tables (and the oracle's beside them) read E[X] along the
target's own continuations (experiments.continuation: each drafter's fixed
builder valued at one offset in each quarter of the first 128 positions of a
sampled continuation of the planner's prompts, where a generation calls the
target) when those rows exist,
else the real-drafters rows at the prompts' end; the verifier is charged at
the nodes a drafter drafts per call (a proposer's tree is often smaller than
P: the weighted mean of t_verify over those counts). On this CPU, where the
calibration kept the verifying seconds per call of the loop (the target's
pass on the drafted nodes and the tree's verification on the host), the
drafters' tables charge that, averaged over the model drafters (which draft
P nodes a call), instead of the pass timed alone; the oracle keeps the pass
timed alone (a verifier with no host work).
Writes results/speedup.{csv,jsonl}, results/speedup_cpu_cost.csv and
figures/speedup.{png,pdf}. ``--quick``: fewer budgets and repeats for the CPU
timing (seconds).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import platform
import statistics
import sys
from pathlib import Path

import brwsim
from brwsim.errors import BrwsimError
from brwsim.speedup import (
    DraftCost,
    RooflineCost,
    TableCost,
    best_P_set,
    fixed_grid,
    grown_table,
    measured_cost,
    model_shape,
    preset,
    speedup_table,
    verify_cost,
)
from experiments import common

NAME = "speedup"
MODEL = "smollm2-135m"
LAYERS = 30
GPU = "h100"
GPU_CONTEXT = 512  # the roofline panel's context before the tree
# (shape, weight bytes per parameter): 70B in bf16 (141 GB) does not fit one 80 GB H100; weight-only 8-bit does
# (the KV cache stays in bf16: KV_BYTES for every target)
TARGETS = (("llama-1b", 2.0), ("llama-8b", 2.0), ("llama-70b", 1.0))
KV_BYTES = 2.0
COMMITTED = Path(__file__).resolve().parents[1] / "results"
GPU_P_START = 4096  # E[X] past the measured budgets: extrapolated (a prediction), dotted in the figure; the grid
GPU_P_CAP = 2**20  # doubles from GPU_P_START until the best P is interior (brwsim.speedup.grown_table)
MEASURED_UP_TO = "E[X] measured up to P = {P}"


TASKS = ("humaneval", "pydoc", "sharegpt")  # the real-drafters run's tasks, in its prompt order


def settings(quick: bool, seed: int) -> dict:
    # calls: calibration prompts (the first of the real-drafters run's order, 1 or 2 a task) and tokens per run
    # of the per-call draft cost measured in speculative decoding (:func:`drafter_calls`)
    if quick:
        return dict(P=[1, 2, 4, 8, 16], context=256, repeats=3, seed=seed, replicates=200, quick=True,
                    calls_prompts=3, calls_tokens=8)  # fmt: skip
    return dict(P=[1, 2, 4, 8, 16, 32, 64], context=256, repeats=9, seed=seed, replicates=2000, quick=False,
                calls_prompts=3, calls_tokens=12)  # fmt: skip


def _read(name: str) -> list[dict]:
    """Rows another experiment wrote: the full run's when present, else this mode's (quick) ones, else the rows
    committed with the repository."""
    results, _ = common.out_dirs()
    full = results.parent if results.name == "quick" else results
    for path in dict.fromkeys([full / f"{name}.jsonl", results / f"{name}.jsonl", COMMITTED / f"{name}.jsonl"]):
        if path.exists():
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return []


def device_of(params: dict) -> str:
    """The torch device the measured panel times (``cpu``: this CPU, one thread; else a GPU, e.g. ``cuda``)."""
    return params.get("device", "cpu")


def _device_key(params: dict) -> dict:
    """The device's part of a timing's cache key (none for the CPU, so CPU timings cached before stay valid)."""
    return {} if device_of(params) == "cpu" else {"device": device_of(params)}


def cpu_cost(params: dict, P_list: list[int]) -> TableCost:
    """The measured t_verify of the shipped model on this CPU (or on ``params["device"]``): medians of the repeats,
    fitted non-decreasing in P."""
    times = cpu_times(params, P_list)
    dev = device_of(params)
    return measured_cost(times, f"measured here: {MODEL}, fp32, " + ("1 thread" if dev == "cpu" else dev))


def cpu_times(params: dict, P_list: list[int]) -> dict[int, list[float]]:
    """The repeats of t_verify of the shipped model on this CPU, taken in interleaved rounds (cached per machine)."""

    def compute():
        from brwsim.llm.sources import load_source
        from brwsim.speedup._timing import verify_times

        src = load_source(MODEL, threads=1, device=device_of(params))
        times = verify_times(src, P_list, context=params["context"], repeats=params["repeats"], seed=params["seed"])
        return [{"P": P, "times": ts} for P, ts in sorted(times.items())]

    key = {"what": "cpu_cost", "P": P_list, "machine": platform.machine(), "node": platform.node()}
    key |= _device_key(params)
    key |= {k: params[k] for k in ("context", "repeats", "seed")} | {"version": brwsim.__version__}
    return {r["P"]: r["times"] for r in common.cached(NAME, key, compute)}


def best_sets(params: dict) -> list[tuple[str, object]]:
    """(task, :class:`brwsim.speedup.BestP`) of the oracle on this CPU per task: bootstrap over the real-model run's
    prompts (results/real_model_prompts.jsonl) and the timing repeats, t_verify fitted non-decreasing in P."""
    per = _read("real_model_prompts")
    times = cpu_times(params, params["P"])
    out = []
    for task in dict.fromkeys(r["task"] for r in per):
        ex: dict[int, list[float]] = {}
        for r in per:
            if r["task"] == task and r["P"] in times:
                ex.setdefault(r["P"], []).append(r["oracle"])
        if ex and len(set(map(len, ex.values()))) == 1:
            out.append((task, best_P_set(ex, times, replicates=params["replicates"], seed=params["seed"])))
    return out


def _ex(rows: list[dict], label: str, stat: str, k=None, P_max: int = 10**9) -> list[tuple]:
    return sorted(
        (r["P"], r["mean"], r["ci95"])
        for r in rows
        if r["law"] == label and r["statistic"] == stat and r.get("k") == k and r["P"] and r["P"] <= P_max
    )


def extrapolate(ex: list[tuple], P_to: int) -> list[tuple]:
    """E[X] past the largest measured budget, doubling P up to ``P_to``, along the slope in ln P of the last two
    measured points (a prediction: E[X] grows like ln P / mu at large P, docs/theory.md); the CI of the last
    measured point is carried, not widened."""
    (P1, m1, _), (P2, m2, c2) = ex[-2], ex[-1]
    slope = (m2 - m1) / math.log(P2 / P1)
    out, P = list(ex), 2 * P2
    while P <= P_to:
        out.append((P, m2 + slope * math.log(P / P2), c2))
        P *= 2
    return out


def tables(params: dict, costs: dict) -> list[tuple[str, str, object, int]]:
    """(panel, curve label, SpeedupTable, largest measured P) of every curve; ``costs``: :func:`drafter_costs`."""
    real = _read("real_model")
    if not real:
        raise BrwsimError("experiments.speedup needs the real-model rows: run python -m experiments.real_model first")
    labels = list(dict.fromkeys(r["law"] for r in real if r["statistic"] == "oracle"))
    P_max = max(params["P"])
    cpu = cpu_cost(params, params["P"])
    out = []
    for label in labels:
        task = label.split("/")[-1]
        out.append(("cpu", f"oracle, {task}", speedup_table(_ex(real, label, "oracle", P_max=P_max), cpu), P_max))
        drafted = _best_drafter(_read("real_drafter"), label, cpu, P_max, costs)
        if drafted:
            out.append(("cpu", f"{drafted.drafter} (early exit), {task}", drafted, P_max))
        ex = _ex(real, label, "oracle")
        for target, bpp in TARGETS:
            gpu = dataclasses.replace(verify_cost(GPU, target=target, bytes_per_param=bpp, context=GPU_CONTEXT),
                                      kv_bytes=KV_BYTES)  # fmt: skip
            name = f"{target} ({8 * bpp:.0f}-bit weights), {task}"
            out.append((GPU, name, _gpu_curve(ex, gpu), ex[-1][0]))
    return out


def _gpu_curve(ex: list[tuple], gpu):
    """The h100 curve with E[X] extrapolated past its measured budgets, its grid doubled until the best P is
    interior."""
    return grown_table(lambda Ps: speedup_table(extrapolate(ex, Ps[-1]), gpu), [GPU_P_START], gpu, GPU_P_CAP)


def early_exit_names(rows: list[dict]) -> list[str]:
    """The early-exit drafters of the real-drafter rows (k < all layers), as drafter SPECs."""
    ks = {r["k"] for r in rows if r["statistic"] == "topq" and r.get("k") is not None} - {LAYERS}
    return [f"early-exit:k={k}" for k in sorted(ks)]


def _best_drafter(rows: list[dict], label: str, cost, P_max: int, costs: dict):
    """The early-exit drafter's top-P-by-Q table at the exit layer k (k < all layers) with the largest speedup at
    some P >= 1, its pass timed here (``costs``), or None."""
    best, top = None, -math.inf
    for k in sorted({r["k"] for r in rows if r["law"] == label and r["statistic"] == "topq"} - {None, LAYERS}):
        ex = _ex(rows, label, "topq", k, P_max)
        if ex:
            dc = _draft_cost(costs[f"early-exit:k={k}"], "cpu", cost.t_verify(0))
            t = speedup_table(ex, cost, dc, drafter=f"top-P-by-Q k={k}")
            s = max(r.speedup for r in t.rows[1:])
            best, top = (t, s) if s > top else (best, top)
    return best


def _drafter_ex(rows: list[dict], label: str, name: str, P_max: int) -> list[tuple]:
    """The drafter's E[X] per P with the builder fixed in advance (rows written before that rule: its ``topq`` or
    ``lookup_tree`` builder, the same fixed choice)."""
    for stat in ("fixed", "topq", "lookup_tree"):
        sel = [r for r in rows if r["law"] == label and r.get("drafter") == name and r["statistic"] == stat]
        ex = sorted((r["P"], r["mean"], r["ci95"] or 0.0) for r in sel if r["P"] and r["P"] <= P_max)
        if ex:
            return ex
    return []


def timed_spec(name: str) -> str:
    """The drafter SPEC whose pass is timed for a drafter of the rows: an EAGLE head as the quick head (the same
    architecture, so the same pass: one decoder layer, the fc map, the target's LM head; it trains in seconds)."""
    return "eagle-head:quick" if name.startswith("eagle-head") else name


def drafter_costs(params: dict, names: list[str]) -> dict:
    """Per real drafter: one pass timed on this CPU (brwsim.speedup.measure_draft_cost: interleaved with the
    target's decoding step, median and Student t interval over the repeats), its footprint, and its pass derived on
    the h100 roofline from that footprint (the target in bf16); and the h100 roofline t_verify with the target's
    shapes (cached per machine)."""

    def compute():
        from brwsim.llm.drafters import open_drafter
        from brwsim.llm.sources import load_source
        from brwsim.speedup import measure_draft_cost

        src = load_source(MODEL, threads=1, device=device_of(params))
        h100 = verify_cost(GPU, source=src, context=GPU_CONTEXT)
        out = [{"name": "h100", "points": {str(P): h100.t_verify(P) for P in [0, *params["P"]]}}]
        for name in names:
            d = open_drafter(timed_spec(name), src)
            fp = d.footprint()
            dc = measure_draft_cost(d, src, context=params["context"], repeats=params["repeats"], seed=params["seed"])
            out.append({"name": name, "timed": timed_spec(name), "footprint": fp.to_dict(),
                        "h100_pass": h100.pass_time(fp),
                        "fraction_by_bytes": d.cost_fraction(params["context"]),
                        **({"t_pass": dc.t_pass, "t_pass_ci95": dc.t_pass_ci95, "t_step": dc.t_step,
                            "fraction": dc.fraction, "fraction_ci95": dc.fraction_ci95,
                            "repeats": dc.repeats} if dc else {"t_pass": None})})  # fmt: skip
        return out

    key = {"what": "drafter_costs", "names": names, "P": params["P"], "node": platform.node()} | _device_key(params)
    key |= {k: params[k] for k in ("context", "repeats", "seed")} | {"version": brwsim.__version__}
    key |= {"timer": 2}  # 2: a head's timed pass sends nothing to the host, as the target's timed step
    return {r["name"]: r for r in common.cached(NAME, key, compute)}


def call_spec(name: str, quick: bool) -> str:
    """The drafter SPEC run in speculative decoding for a drafter of the rows: the drafter itself (its passes per
    call depend on its own q), an EAGLE head as the head the rows measured (``eagle-head-chat`` is
    ``eagle-head:chat``; the quick head in --quick mode, which trains in seconds)."""
    if name.startswith("eagle-head"):
        return "eagle-head:quick" if quick or "quick" in name else "eagle-head:" + name[len("eagle-head-") :]
    return name


def calibration_prompts(params: dict) -> list:
    """The prompts the per-call draft cost is measured on: the first ``calls_prompts`` of the real-drafters run's
    order (its 64 a task; experiments.end_to_end scores prompts outside them)."""
    return common.prompt_order(TASKS, 64, params["seed"])[: params["calls_prompts"]]


def drafter_calls(params: dict, names: list[str]) -> dict:
    """Per real drafter of the rows (on the measured device): its drafting per target call in real speculative
    decoding at every budget of the grid (brwsim.speedup.measure_draft_calls: seconds, passes and rows per call,
    as a fraction of the plain step around it), on :func:`calibration_prompts` (cached per machine and drafter,
    so a stopped run keeps the drafters it finished)."""
    out = {}
    for name in names:
        spec = call_spec(name, params["quick"])
        if spec.startswith("layerskip:auto"):
            continue
        key = {"what": "drafter_calls", "name": name, "P": params["P"], "node": platform.node()}
        key |= _device_key(params) | {k: params[k] for k in ("seed", "calls_prompts", "calls_tokens", "quick")}
        key |= {"version": brwsim.__version__, "verify": True}  # the loop's verifying seconds kept per call
        key |= {"loop": _loop_version()}  # measured with the loop's host work of this version
        (out[name],) = common.cached(NAME, key, lambda name=name, spec=spec: [_calls_of(params, name, spec)])
    return out


def _loop_version() -> int:
    from brwsim.llm.specdec import LOOP_VERSION

    return LOOP_VERSION


@functools.lru_cache(maxsize=1)
def _target(device: str):
    """The shipped model on ``device``, loaded once for every drafter's calibration."""
    from brwsim.llm.sources import load_source

    return load_source(MODEL, threads=1, device=device)


def _calls_of(params: dict, name: str, spec: str) -> dict:
    from brwsim.llm.drafters import open_drafter
    from brwsim.speedup import measure_draft_calls

    src = _target(device_of(params))
    ids = [src.encode(p.text) for p in calibration_prompts(params)]
    d = open_drafter(spec, src, log=lambda m: print(m, flush=True))
    print(f"speedup: {name}: drafting per call in speculative decoding, P = {params['P']}", flush=True)
    dc = measure_draft_calls(d, src, ids, params["P"], params["calls_tokens"], 1.0, params["seed"], name)
    return {"name": name, "spec": spec, **dc.to_dict()}


def _draft_cost(c: dict, where: str, t0: float = 0.0, calls: dict | None = None) -> DraftCost:
    """A drafter's cost. With ``calls`` (:func:`drafter_calls`' row of the drafter): per call, as the builder
    spends it in speculative decoding: on the CPU (or the measured device) its measured fraction of the plain step
    at each budget times ``t0``, the t_verify(0) of the table it enters; on the h100 roofline its measured passes
    per call, each its footprint's one-row pass on the roofline scaled to its measured rows per pass
    (RooflineCost.pass_time: the weights read once, each row's KV values and FLOPs). Without: one pass per drafted
    node, the pass on the CPU its measured fraction of the target's step (pass / step, both timed in the same
    interleaved rounds) times ``t0``, on the h100 roofline derived from its footprint (None t_pass: no pass)."""
    if calls is not None:
        from brwsim.llm.drafters._base import PassFootprint
        from brwsim.speedup import DraftCalls

        dc = DraftCalls.from_dict({k: v for k, v in calls.items() if k != "spec"})
        if where == "cpu":
            return dc.cost(t0)
        fp = PassFootprint.from_dict(c["footprint"])
        roof = RooflineCost(preset(GPU), model_shape(params=1.0), 2.0, GPU_CONTEXT)  # pass_time reads no shape
        one = roof.pass_time(fp)
        return dc.pass_cost(lambda r: c["h100_pass"] * (roof.pass_time(fp, r) / one if one else 0.0), "on the roofline")
    if where == "cpu":
        if c["t_pass"] is None:
            return DraftCost(0.0, "P", f"{c['name']}: no model pass", "none")
        f, fc = c["fraction"], c.get("fraction_ci95")
        label = f"{c['name']}: {f:.3g}" + (f" +- {fc:.2g}" if fc is not None else "")
        label += f" of the target's step per pass, measured here ({c['timed']}, interleaved with the step)"
        return DraftCost(f * t0, "P", label, "measured", None, t0, f, c["repeats"], fc)
    if not c["h100_pass"]:
        return DraftCost(0.0, "P", f"{c['name']}: no model pass", "none")
    label = f"{c['name']}: {1e3 * c['h100_pass']:.3g} ms per pass on the roofline, from its footprint"
    return DraftCost(c["h100_pass"], "P", label, "derived")


def drafter_tables(params: dict, cpu, costs: dict, calls: dict | None = None) -> list[tuple[str, str, str, object]]:
    """(panel, task, drafter, SpeedupTable) for the oracle and every real drafter of the real-drafters rows (the
    same prompts), with each drafter's draft cost (``costs``: :func:`all_costs`; ``calls``: :func:`drafter_calls`,
    per call as the builder spends it, where given): measured here on the CPU, derived on the h100 roofline; where
    the best is the largest P measured, at least that P."""
    rows, along = _read("real_drafters"), _read("continuation")
    names = list(dict.fromkeys(r["drafter"] for r in rows if r.get("drafter")))
    if not names:
        return []
    h100 = TableCost({int(P): t for P, t in costs["h100"]["points"].items()}, "roofline", f"{GPU} roofline, L=512")
    P_max, out = max(params["P"]), []
    for label in dict.fromkeys(r["law"] for r in rows if r["statistic"] == "oracle"):
        task = label.split("/")[-1]
        src, where = ex_source(rows, along, label)
        oracle = _ex(src, label, "oracle", P_max=P_max)
        for panel, cost in (("cpu", cpu), (GPU, h100)):
            oracle_t = speedup_table(oracle, cost, source=where(None))
            out.append((panel, task, "oracle (speed of light)", fixed_grid([oracle_t], MEASURED_UP_TO)[0]))
            vcost = (loop_verify_cost(calls, cost.t_verify(0)) if panel == "cpu" else None) or cost
            for name in names:
                if name not in costs:  # a caller that timed only some drafters (experiments.end_to_end --drafters)
                    continue
                ex = _drafter_ex(src, label, name, P_max)
                if ex:
                    dc = _draft_cost(costs[name], panel, cost.t_verify(0), (calls or {}).get(name))
                    nodes = drafted(src, label, name)
                    t = speedup_table(ex, vcost, dc, drafter=name, source=where(name), drafted=nodes)
                    out.append((panel, task, name, fixed_grid([t], MEASURED_UP_TO)[0]))
    return out


def _full_trees(r) -> bool:
    """Whether a calibration's drafter drafted P nodes a call at every budget (a model drafter does)."""
    return all(abs(d - P) < 0.5 for P, d in zip(r.P, r.drafted, strict=True))


def loop_verify_cost(calls: dict | None, t0: float):
    """t_verify(n) as the generation loop spends it on n drafted nodes (the target's pass and the tree's
    verification on the host), in a table whose plain step is ``t0``: at each budget, the mean over the model
    drafters' calibrations (:func:`drafter_calls`; they draft exactly P nodes a call) of the verifying seconds per
    call over the plain step; None when no calibration kept it (the pass timed alone is then charged)."""
    from brwsim.speedup import DraftCalls, TableCost

    recs = [DraftCalls.from_dict({k: v for k, v in c.items() if k != "spec"}) for c in (calls or {}).values()]
    full = [r for r in recs if r.verify is not None and r.drafted is not None and _full_trees(r)]
    if not full:
        return None
    Ps = sorted(set.intersection(*(set(r.P) for r in full)))
    tables = [r.verify_cost(t0) for r in full]
    pts = {0: t0} | {P: statistics.fmean(t.t_verify(P) for t in tables) for P in Ps}
    return TableCost(pts, "measured", f"verifying per call in speculative decoding here ({len(full)} drafters' loops)")


def ex_source(rows: list[dict], along: list[dict], label: str):
    """(the rows E[X] is read from, ``where(drafter)``: a line saying where): the values along the target's own
    continuations (experiments.continuation: where a generation calls the target) when they cover this task,
    else the values at the prompts' end (experiments.real_drafters)."""
    sel = [r for r in along if r["law"] == label]
    if sel:
        n = max(r["trees"] for r in sel)
        return sel, lambda name: f"E[X] {sel[0].get('where', 'along the continuation')}, {n} prompts"
    n = max((r["trees"] for r in rows if r["law"] == label and r["statistic"] == "oracle"), default=0)
    return rows, lambda name: f"E[X] at the prompts' end, {n} prompts"


def drafted(rows: list[dict], label: str, name: str) -> dict | None:
    """{P: ((nodes, weight), ...)}: the nodes the drafter drafts per call at each budget, where the rows have them
    (the continuation rows' ``drafted_nodes``: a proposer's tree can be smaller than P), else None."""
    sel = [r for r in rows if r["law"] == label and r.get("drafter") == name and r["statistic"] == "drafted_nodes"]
    return {r["P"]: tuple((int(n), float(w)) for n, w in r["distribution"]) for r in sel} or None


def row_drafters() -> list[str]:
    """The drafters of the real-drafters rows, in their order."""
    return list(dict.fromkeys(r["drafter"] for r in _read("real_drafters") if r.get("drafter")))


def all_costs(params: dict) -> dict:
    """:func:`drafter_costs` of every drafter of the real-drafters rows and every early exit of the real-drafter
    rows, in one cached measurement."""
    rows = _read("real_drafters")
    names = list(dict.fromkeys(r["drafter"] for r in rows if r.get("drafter")))
    return drafter_costs(params, names + early_exit_names(_read("real_drafter")))


def drafter_figure(dt):
    """Drafters ranked by their best speedup (bars), per panel and task; the oracle is the speed of light."""
    plt = common.setup_matplotlib()
    keys = list(dict.fromkeys((p, t) for p, t, _, _ in dt))
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.8), squeeze=False)
    for ax, (panel, task) in zip(axes[0], keys, strict=True):
        sel = sorted(((n, t.best) for p, k, n, t in dt if (p, k) == (panel, task)), key=lambda x: x[1].speedup)
        y = range(len(sel))
        ax.barh(list(y), [b.speedup for _, b in sel], xerr=[b.speedup_ci95 for _, b in sel], color=[
            "k" if n.startswith("oracle") else common.PALETTE[1] for n, _ in sel])  # fmt: skip
        ax.set_yticks(list(y), [f"{n} (P={b.P})" for n, b in sel], fontsize=7)
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set_title(f"{task}, {'this CPU (measured)' if panel == 'cpu' else 'H100 roofline'}", fontsize=9)
        ax.set_xlabel("best speedup over plain decoding (estimate)")
    fig.suptitle("Real drafters ranked by planned speedup (fixed builder; draft cost included)", fontsize=10)
    fig.tight_layout()
    return fig


def _colour(name: str) -> str:
    """One colour per drafter (panel a) or target size (panel b); the task is the line style."""
    keys = ["oracle", "early exit", *(t for t, _ in TARGETS)]
    return common.PALETTE[next(i for i, k in enumerate(keys) if k in name) % len(common.PALETTE)]


def figure(curves):
    plt = common.setup_matplotlib()
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.4))
    titles = {"cpu": "(a) this CPU, measured t_verify (SmolLM2-135M, fp32, 1 thread)",
              GPU: "(b) H100 roofline (L=512), E[X] of the 135M model; dotted: E[X] extrapolated"}  # fmt: skip
    for ax, panel in zip(axes, ("cpu", GPU), strict=True):
        for _, name, t, P_meas in (c for c in curves if c[0] == panel):
            rows = t.rows[1:]
            P = [r.P for r in rows]
            s = [r.speedup for r in rows]
            ci = [r.speedup_ci95 for r in rows]
            col = _colour(name)
            n = sum(p <= P_meas for p in P)
            ax.plot(P[:n], s[:n], "--" if "pydoc" in name else "-", marker="o", ms=3, color=col, label=name)
            ax.plot(P[n - 1 :], s[n - 1 :], ":", color=col, lw=1.2)
            ax.fill_between(P, [a - b for a, b in zip(s, ci, strict=True)], [a + b for a, b in zip(s, ci, strict=True)],
                            color=col, alpha=0.15)  # fmt: skip
            b = t.best
            ax.plot([b.P], [b.speedup], "*", ms=13, color=col, mec="k", zorder=6)
        ax.axhline(1.0, color="grey", lw=0.8)
        if panel == GPU:
            ax.text(0.02, 0.97, "1B and 8B coincide: the same bytes per FLOP, memory-bound up to P ~ 300",
                    transform=ax.transAxes, fontsize=7, va="top")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_title(titles[panel], fontsize=9)
        ax.set_xlabel("verifier budget P (draft tokens per call)")
        ax.set_ylabel("speedup over plain decoding (estimate, 95% band)")
        ax.legend(fontsize=7, loc="lower left" if panel == "cpu" else "lower center")
    fig.suptitle(
        "Speedup at the speed of light (oracle tree, no draft cost), an early-exit drafter beside it (a); "
        "stars: the best P; solid: code, dashed: prose",
        fontsize=10,
    )
    return fig


def write_cpu_cost(cost, times: dict) -> Path:
    """The measured t_verify per P: its isotonic fit (the value used), the raw median of the repeats, min, max."""
    results, _ = common.out_dirs()
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{NAME}_cpu_cost.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["P", "seconds_isotonic_fit", "seconds_median_raw", "seconds_min", "seconds_max"])
        for P in sorted(cost.points):
            w.writerow([P, cost.points[P], statistics.median(times[P]), *cost.spread(P)])
    return path


def cost_rows(costs: dict, params: dict) -> list[dict]:
    """One row per drafter and panel: ``draft_pass_seconds`` (cpu: the mean of the timed passes, with the Student t
    half-width of that mean; h100: derived from the footprint), with the fraction of the target's step (cpu: the
    mean over rounds of pass / step, ``fraction_ci95`` its Student t half-width)."""
    out = []
    for name, c in costs.items():
        if name == "h100":
            continue
        out.append(common.row(name, 0, "draft_pass_seconds", c["t_pass"], c.get("t_pass_ci95"), c.get("repeats", 0),
                              params["seed"], panel="cpu", draft_cost="measured" if c["t_pass"] else "none",
                              timed=c["timed"], t_step=c.get("t_step"), fraction=c.get("fraction"),
                              fraction_ci95=c.get("fraction_ci95"),
                              fraction_by_bytes=c["fraction_by_bytes"]))  # fmt: skip
        out.append(common.row(name, 0, "draft_pass_seconds", c["h100_pass"], 0.0, 0, params["seed"], panel=GPU,
                              draft_cost="derived (roofline of its footprint)", footprint=c["footprint"]))  # fmt: skip
    return out


def call_rows(calls: dict, params: dict) -> list[dict]:
    """Per drafter and budget, the per-call draft cost measured in speculative decoding: ``draft_call_fraction``
    (mean over the calibration prompts of drafting seconds per call over the plain step around it, Student t
    half-width), with the seconds, passes and rows per pass behind it."""
    out = []
    for name, c in calls.items():
        for i, P in enumerate(c["P"]):
            out.append(common.row(name, P, "draft_call_fraction", c["fraction"][i], c["fraction_ci95"][i],
                                  c["prompts"], params["seed"], panel="cpu", spec=c["spec"],
                                  seconds_per_call=c["seconds"][i], passes_per_call=c["passes"][i],
                                  rows_per_pass=c["rows"][i], t_step=c["t_step"],
                                  new_tokens=c["new_tokens"]))  # fmt: skip
    return out


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__.splitlines()[0]).parse_args(argv)
    params = settings(args.quick, args.seed)
    costs = all_costs(params)
    curves = tables(params, costs)
    rows, lines = [], []
    for panel, name, t, P_meas in curves:
        for r in t.rows:
            extra = dict(panel=panel, cost=t.cost.kind, t_verify=r.t_verify, t_draft=r.t_draft, ex=r.ex)
            extra["ex_source"] = "measured" if r.P <= P_meas else "extrapolated (prediction)"
            rows.append(common.row(name, r.P, "speedup", r.speedup, r.speedup_ci95, 0, params["seed"], **extra))
        b = t.best
        edge = " (E[X] extrapolated there)" if b.P > P_meas else ""
        lines.append(
            f"{panel} {name}: best {t.best_text()}{edge}, speedup {b.speedup:.2f} +- {b.speedup_ci95:.2f} (estimate; "
            "E[X] over the real-model run's prompts)"
        )
    for task, b in best_sets(params):
        rows.append(common.row(f"{MODEL}/{task}", b.smallest, "best_P_set", b.speedup[b.smallest], None, b.replicates,
                               params["seed"], near_best=b.near_best, P_hat=b.P_hat, argmax_share=b.argmax_share,
                               panel="cpu", cost="measured, isotonic fit", at_edge=b.at_edge))  # fmt: skip
        edge = ", the largest P measured: at least that P, still rising" if b.at_edge else ""
        lines.append(f"cpu oracle, {task}: best P set {b.near_best} (bootstrap over prompts and repeats), smallest "
                     f"{b.smallest}; point best {b.P_hat}{edge}")  # fmt: skip
    cost = next(c[2].cost for c in curves if c[0] == "cpu")
    calls = drafter_calls(params, row_drafters())
    dt = drafter_tables(params, cost, costs, calls)
    for panel, task, name, t in dt:
        b = t.best
        rows.append(common.row(f"{MODEL}/{task}", b.P, "drafter_best_speedup", b.speedup, b.speedup_ci95, 0,
                               params["seed"], panel=panel, drafter=name, t_pass=t.draft.t_pass,
                               t_draft=b.t_draft, draft_cost=t.draft.kind, ex=b.ex, at_edge=t.at_edge(),
                               best=t.best_text(), ex_source=t.source, t_verify=b.t_verify,
                               recommended_P=t.recommended()))  # fmt: skip
        lines.append(
            f"{panel} {task} {name}: best {t.best_text()}, speedup {b.speedup:.2f} +- {b.speedup_ci95:.2f} "
            f"(estimate; drafting {1e3 * b.t_draft:.3g} ms a call there, {t.draft.kind}; {t.source}); "
            f"{t.recommended_text()}"
        )
    rows += cost_rows(costs, params) + call_rows(calls, params)
    figs = [common.save_figure(drafter_figure(dt), NAME + "_drafters")] if dt else []
    common.write_rows(NAME, rows)
    write_cpu_cost(cost, cpu_times(params, params["P"]))
    ms = ", ".join(f"P={P} {1e3 * s:.0f}" for P, s in sorted(cost.points.items()))
    lines.append(f"measured t_verify here (ms, median of {params['repeats']} interleaved rounds, isotonic fit): {ms}")
    png = common.save_figure(figure(curves), NAME)
    return {"name": NAME, "figures": [png, *figs], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    info = main(sys.argv[1:])
    print("\n".join(info["summary"]))
    print(f"wrote {info['figures'][0]}")
