"""Model time per prompt and phase against this CPU's forward-pass floor (docs/llm.md, "Where the time goes").

Runs the real_model experiment's measurement (experiments/real_model.py, full
settings: 8 walks of 32 tokens, the oracle tree to P = 64, 8 nodes per pass)
on ``--n`` prompts per task and records every forward pass of the target:
its query tokens and the KV-cache length it reads. Per phase (``open``: the
prompt's own pass; ``walks``; ``oracle``) it prints the wall seconds per
prompt, the seconds inside the model's forward passes, the passes and tokens,
and the **floor**: for every pass, max(bytes / bandwidth, FLOPs / peak) with
this machine's copy bandwidth and float32 matmul rate measured in the same
process (brwsim.speedup machine_peaks, one thread), the weights read once per
pass, the KV cache read and written, 2 x params FLOPs per token plus the
attention's (the roofline of docs/speedup.md at each pass's own shape). The
floor is a lower bound for a one-thread implementation of the same passes;
the ratio wall / floor says how much of the time is above it (small passes
are memory-bound: the weights are read once per pass whatever its size).

Usage::

    PYTHONPATH=. python tools/forward_floor.py --n 3 [--tasks humaneval,pydoc,sharegpt] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from brwsim._stats import mean_ci95
from brwsim.llm.measure import oracle_tree, prompt_rng, sample_walks
from brwsim.llm.sources import load_source
from brwsim.speedup import Hardware, RooflineCost, shape_of_hf
from brwsim.speedup._timing import machine_peaks
from experiments import common
from experiments.real_model import settings

PHASES = ("open", "walks", "oracle")


class PassLog:
    """Wraps ``source.forward``: every pass's (phase, query tokens, cached tokens before it, seconds)."""

    def __init__(self, source):
        self.source, self.phase, self.rows = source, None, []
        inner = source.forward

        def forward(**kw):
            past = kw.get("cache", kw.get("past_key_values"))
            cached = int(past.get_seq_length()) if past is not None else 0
            f0 = source.forward_seconds
            out = inner(**kw)
            self.rows.append((self.phase, int(kw["input_ids"].numel()), cached, source.forward_seconds - f0))
            return out

        source.forward = forward


def floor_seconds(cost_of, tokens: int, cached: int) -> float:
    """The roofline time of one pass of ``tokens`` query tokens after ``cached`` cached ones."""
    return cost_of(cached).t_verify(tokens - 1)


def measure(params: dict, n: int, tasks: list[str], log) -> tuple[list[dict], dict]:
    source = load_source(params["model"], dtype=params["dtype"], threads=1)
    peaks = machine_peaks()
    hw = Hardware("this machine, 1 thread", peaks.bandwidth, peaks.flops, 0.0, "measured here")
    shape = shape_of_hf(source.model, source.name)
    bpp = float(next(source.model.parameters()).element_size())
    costs: dict[int, RooflineCost] = {}

    def cost_of(cached: int) -> RooflineCost:
        if cached not in costs:
            costs[cached] = RooflineCost(hw, shape, bpp, cached)
        return costs[cached]

    plog = PassLog(source)
    rows = []
    for p in common.prompt_order(tasks, n, params["seed"]):
        start = len(plog.rows)
        plog.phase, t0 = "open", time.perf_counter()
        ids = source.encode(p.text)
        ctx = source.open(ids)
        plog.phase, t1 = "walks", time.perf_counter()
        K = max(params["P"])
        sample_walks(ctx, params["walks"], params["depth"], prompt_rng(params["seed"], p), K, source.eos_ids)
        plog.phase, t2 = "oracle", time.perf_counter()
        oracle_tree(ctx, K, batch=params["batch"], eos=source.eos_ids)
        t3 = time.perf_counter()
        wall = {"open": t1 - t0, "walks": t2 - t1, "oracle": t3 - t2}
        row = {"task": p.task, "id": p.id, "prompt_tokens": len(ids)}
        for ph in PHASES:
            mine = [r for r in plog.rows[start:] if r[0] == ph]
            row[ph] = {
                "wall": wall[ph],
                "forward": sum(r[3] for r in mine),
                "passes": len(mine),
                "tokens": sum(r[1] for r in mine),
                "floor": sum(floor_seconds(cost_of, r[1], r[2]) for r in mine),
            }
        rows.append(row)
        done = ", ".join(f"{ph} {row[ph]['wall']:.2f} s (floor {row[ph]['floor']:.2f})" for ph in PHASES)
        log(f"{p.task} {p.id}: {done}")
    return rows, {"bandwidth": peaks.bandwidth, "flops": peaks.flops, "params": shape.params, "bytes_per_param": bpp}


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for ph in PHASES:
        s = {"phase": ph}
        for k in ("wall", "forward", "passes", "tokens", "floor"):
            m, c = mean_ci95([r[ph][k] for r in rows])
            s[k], s[k + "_ci95"] = m, c
        s["wall_over_floor"] = float(np.sum([r[ph]["wall"] for r in rows]) / np.sum([r[ph]["floor"] for r in rows]))
        out.append(s)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3, help="prompts per task (default 3)")
    ap.add_argument("--tasks", default="humaneval,pydoc,sharegpt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the per-prompt rows and the summary here (JSON)")
    args = ap.parse_args(argv)
    if args.n < 2:
        ap.error("--n must be at least 2 (intervals over prompts)")
    params = settings(False, args.seed)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    rows, machine = measure(params, args.n, args.tasks.split(","), log)
    summ = summary(rows)
    bw, fl = machine["bandwidth"] / 1e9, machine["flops"] / 1e9
    print(f"machine (one thread, measured): copy bandwidth {bw:.2f} GB/s, matmul {fl:.1f} GFLOP/s; "
          f"{len(rows)} prompts; means per prompt, 95% t intervals")  # fmt: skip
    print(f"{'phase':8} {'wall s':>16} {'forward s':>10} {'passes':>7} {'tokens':>7} {'floor s':>8} {'wall/floor':>10}")
    for s in summ:
        print(f"{s['phase']:8} {s['wall']:8.3f} +- {s['wall_ci95']:5.3f} {s['forward']:10.3f} {s['passes']:7.1f} "
              f"{s['tokens']:7.1f} {s['floor']:8.3f} {s['wall_over_floor']:10.1f}")  # fmt: skip
    result = {"settings": params, "machine": machine, "summary": summ, "prompts": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, allow_nan=False)
    return result


if __name__ == "__main__":
    main()
