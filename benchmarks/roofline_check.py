"""Benchmark: the roofline cost model against the measured tree-verification pass of the shipped model.

    python benchmarks/roofline_check.py [--P 0,1,2,4,8,16,32,64,128] [--context 256] [--repeats 5] [--json]

Measures, in rounds interleaved with everything else below (so that load
from other processes hits all alike), this machine's memory bandwidth (a
256 MiB tensor copy, read + write) and float32 FLOP/s (a 2048 x 2048 matrix
product) with one torch thread (the real-model path's default), and the
measured t_verify(P) (median of rounds of the one-pass tree verification,
:func:`brwsim.speedup._timing.verify_times`). Two models are compared with it:

- the plain roofline (:class:`brwsim.speedup.RooflineCost`) with those peaks
  and SmolLM2-135M's own shape (4 bytes per parameter, fp32), also with a
  fitted constant overhead (fit A) and a fitted overhead plus a fitted
  achieved FLOP/s (fit B);
- the achieved roofline (:class:`brwsim.speedup.AchievedRooflineCost`): the
  same bytes and FLOPs per weight matrix and for the attention, but at the
  FLOP/s the kernel reaches at that shape and row count P + 1 (measured:
  :func:`brwsim.speedup._timing.gemm_throughput`, ``attention_throughput``),
  plus the rest of the pass timed with those kernels stubbed out
  (:class:`brwsim.speedup._timing.stubbed_kernels`); with max(memory, compute)
  per operation (a roofline) and with memory + compute (no overlap).

Also printed, to say where the time goes: the model's linear layers alone
(every weight matrix applied to P + 1 rows) and the FLOP/s they achieve.
The target is a ratio measured / model within 20% (0.8 .. 1.2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import numpy as np

from brwsim.llm.sources import load_source
from brwsim.speedup import AchievedRooflineCost, Hardware, cpu_roofline, shape_of_hf
from brwsim.speedup._timing import (
    Peaks,
    attention_throughput,
    gemm_throughput,
    linear_shapes,
    machine_peaks,
    stubbed_kernels,
    verify_times,
)


def linear_times(model, P_list, repeats: int) -> dict[int, float]:
    """Median seconds of applying every linear layer (LM head included) of ``model`` to P + 1 random rows."""
    import torch

    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    out = {}
    with torch.inference_mode():
        for P in P_list:
            xs = {w.shape[1]: torch.randn(P + 1, w.shape[1]) for w in weights}
            ts = []
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                for w in weights:
                    torch.nn.functional.linear(xs[w.shape[1]], w)
                ts.append(time.perf_counter() - t0)
            out[P] = statistics.median(ts[1:])
    return out, float(sum(w.numel() for w in weights))


def fit_overhead(measured: np.ndarray, model: np.ndarray) -> float:
    """The constant o >= 0 minimising sum ((model + o) / measured - 1)^2."""
    w = 1.0 / measured**2
    return max(0.0, float(np.sum((measured - model) * w) / np.sum(w)))


def fit_overhead_and_flops(roof, P_list, measured: np.ndarray) -> tuple[float, float, np.ndarray]:
    """A fitted overhead and achieved FLOP/s (grid over 2% .. 100% of the peak): the smallest worst relative error."""
    best = None
    for frac in np.geomspace(0.02, 1.0, 200):
        b = [roof.breakdown(P) for P in P_list]
        mod = np.array([max(x["t_memory"], x["flops"] / (frac * roof.hardware.flops)) for x in b])
        o = fit_overhead(measured, mod)
        err = np.max(np.abs((mod + o) / measured - 1))
        if best is None or err < best[0]:
            best = (err, o, frac * roof.hardware.flops, mod + o)
    return best[1], best[2], best[3]


def _median_dicts(ds: list[dict]) -> dict:
    """Per key, the median over rounds (nested one level for the matrix shapes)."""
    if isinstance(next(iter(ds[0].values())), dict):
        return {k: _median_dicts([d[k] for d in ds]) for k in ds[0]}
    return {k: float(np.median([d[k] for d in ds])) for k in ds[0]}


def measure_interleaved(src, P_list, context: int, repeats: int):
    """In rounds (so that load from other processes hits all alike): the copy bandwidth and matmul FLOP/s, the
    real pass at every P, each weight shape's and the attention's achieved FLOP/s at every P + 1, and the pass with
    those kernels stubbed out. Returns the peaks, the measured times, the plain and the achieved roofline, and the
    rest of the pass at each P."""
    Ps = sorted({0, *P_list})
    rows = [P + 1 for P in Ps]
    gemms = tuple(linear_shapes(src.model))
    shape = shape_of_hf(src.model, "smollm2-135m")
    heads = shape.attn_dim // shape.head_dim
    times: dict[int, list[float]] = {P: [] for P in Ps}
    rest: dict[int, list[float]] = {P: [] for P in Ps}
    gf, af, pk = [], [], []
    for r in range(repeats):
        pk.append(machine_peaks(copy_mb=256, repeats=2))
        for P, ts in verify_times(src, Ps, context=context, repeats=1, warmup=int(r == 0), seed=r).items():
            times[P] += ts
        gf.append(gemm_throughput(gemms, rows, repeats=1, seed=r))
        af.append(attention_throughput(heads, shape.head_dim, context, rows, repeats=1, seed=r))
        with stubbed_kernels():
            for P, ts in verify_times(src, Ps, context=context, repeats=1, warmup=int(r == 0), seed=r).items():
                rest[P] += ts
    bw, fl = [p.bandwidth for p in pk], [p.flops for p in pk]
    peaks = Peaks(float(np.median(bw)), float(np.median(fl)), (min(bw), max(bw)), (min(fl), max(fl)))
    roof = cpu_roofline(src, context=context, peaks=peaks)
    rest_med = {P: statistics.median(ts) for P, ts in rest.items()}
    slope, icpt = np.polyfit([P + 1 for P in Ps], [rest_med[P] for P in Ps], 1)
    hw = Hardware("this machine", roof.hardware.bandwidth, roof.hardware.flops, max(0.0, icpt), "measured here")
    ach = AchievedRooflineCost(
        hw, roof.shape, gemms, _median_dicts(gf), _median_dicts(af), roof.bytes_per_param, context, max(0.0, slope),
        rest={P + 1: t for P, t in rest_med.items()},
    )  # fmt: skip
    return peaks, times, roof, ach, rest_med


def run(P_list, context: int, repeats: int) -> dict:
    load_before = os.getloadavg()[0]
    src = load_source("smollm2-135m", threads=1)
    peaks, times, roof, ach, rest = measure_interleaved(src, P_list, context, repeats)
    seq = dataclasses.replace(ach, overlap=False)
    lin, lin_params = linear_times(src.model, P_list, repeats)
    meas = np.array([statistics.median(times[P]) for P in P_list])
    model = np.array([roof.t_verify(P) for P in P_list])
    o = fit_overhead(meas, model)
    o2, f2, fit2 = fit_overhead_and_flops(roof, P_list, meas)
    rows = []
    for i, P in enumerate(P_list):
        b = roof.breakdown(P)
        rows.append({
            "P": P, "measured_s": meas[i], "min_s": min(times[P]), "max_s": max(times[P]),
            "roofline_s": model[i], "bound": b["bound"], "ratio": meas[i] / model[i],
            "ratio_fitted_overhead": meas[i] / (model[i] + o), "ratio_fitted_overhead_flops": meas[i] / fit2[i],
            "linear_layers_s": lin[P], "linear_layers_flops": 2 * lin_params * (P + 1) / lin[P],
            "achieved_s": ach.t_verify(P), "achieved_ratio": meas[i] / ach.t_verify(P),
            "achieved_breakdown": ach.breakdown(P), "rest_measured_s": rest[P],
            "no_overlap_s": seq.t_verify(P), "no_overlap_ratio": meas[i] / seq.t_verify(P),
        })  # fmt: skip
    return {
        "model": "smollm2-135m", "params": roof.shape.params, "bytes_per_param": roof.bytes_per_param,
        "context": context, "repeats": repeats, "peaks": peaks.to_dict(), "ridge_P": roof.ridge_P(),
        "achieved_overhead_s": ach.hardware.overhead, "achieved_per_token_s": ach.per_token,
        "achieved_cost": ach.to_dict(), "fitted_overhead_s": o, "fit2_overhead_s": o2, "fit2_flops": f2, "rows": rows,
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip


def print_table(d: dict, out) -> None:
    pk = d["peaks"]
    print(
        f"smollm2-135m: {d['params']:.4g} params x {d['bytes_per_param']:g} B, context {d['context']}; measured here "
        f"(1 thread, median of rounds): bandwidth {pk['bandwidth'] / 1e9:.2f} GB/s (256 MiB copy; "
        f"{pk['bandwidth_range'][0] / 1e9:.2f}..{pk['bandwidth_range'][1] / 1e9:.2f}), {pk['flops'] / 1e9:.1f} "
        f"GFLOP/s (2048^2 matmul; {pk['flops_range'][0] / 1e9:.1f}..{pk['flops_range'][1] / 1e9:.1f}); "
        f"ridge P = {d['ridge_P']:.1f}; load average {d['load_average_1min'][0]:.1f} .. "
        f"{d['load_average_1min'][1]:.1f} ({d['date']})",
        file=out,
    )
    print(
        f"fit A: overhead {1e3 * d['fitted_overhead_s']:.1f} ms; fit B: overhead {1e3 * d['fit2_overhead_s']:.1f} ms "
        f"and achieved {d['fit2_flops'] / 1e9:.1f} GFLOP/s",
        file=out,
    )
    print(
        f"achieved roofline: rest of the pass (GEMMs and attention stubbed) = {1e3 * d['achieved_overhead_s']:.1f} ms "
        f"+ {1e3 * d['achieved_per_token_s']:.2f} ms per query token (least squares over P; the model uses the "
        "time measured at each P)",
        file=out,
    )
    print(f"{'P':>4} {'measured ms':>11} {'min..max':>13} {'roofline ms':>11} {'bound':>7} {'ratio':>6} "
          f"{'fit A':>6} {'fit B':>6} {'linear ms':>9} {'GFLOP/s':>7} {'achieved ms':>11} {'gemm':>6} {'attn':>5} "
          f"{'rest':>5} {'ratio':>6} {'no-overlap ms':>13} {'ratio':>6}", file=out)  # fmt: skip
    for r in d["rows"]:
        span = f"{1e3 * r['min_s']:.1f}..{1e3 * r['max_s']:.1f}"
        print(
            f"{r['P']:>4} {1e3 * r['measured_s']:>11.1f} {span:>13} "
            f"{1e3 * r['roofline_s']:>11.1f} {r['bound']:>7} {r['ratio']:>6.2f} {r['ratio_fitted_overhead']:>6.2f} "
            f"{r['ratio_fitted_overhead_flops']:>6.2f} {1e3 * r['linear_layers_s']:>9.1f} "
            f"{r['linear_layers_flops'] / 1e9:>7.1f} {1e3 * r['achieved_s']:>11.1f} "
            f"{1e3 * r['achieved_breakdown']['t_gemm']:>6.1f} {1e3 * r['achieved_breakdown']['t_attention']:>5.1f} "
            f"{1e3 * r['achieved_breakdown']['t_rest']:>5.1f} {r['achieved_ratio']:>6.2f} "
            f"{1e3 * r['no_overlap_s']:>13.1f} {r['no_overlap_ratio']:>6.2f}",
            file=out,
        )
    print("ratio = measured / roofline (target 0.8 .. 1.2); fit A: + fitted overhead; fit B: + fitted overhead and "
          "achieved FLOP/s; linear = the model's weight matrices alone on P + 1 rows; achieved = the achieved roofline "
          "(measured kernel FLOP/s per matrix shape and row count, not the peak) = gemm + attn + rest, and its "
          "ratio measured / achieved; no-overlap = the same with memory + compute per operation instead of the max",
          file=out)  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--P", default="0,1,2,4,8,16,32,64,128")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    d = run([int(x) for x in a.P.split(",")], a.context, a.repeats)
    print_table(d, sys.stderr if a.json else sys.stdout)
    if a.json:
        print(json.dumps(d, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
