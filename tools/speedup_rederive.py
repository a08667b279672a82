"""Drafter speedups re-derived from the committed rows under the footprint cost model, without rerunning the
experiment (provisional until ``taskset -c 1 python -m experiments.speedup`` is rerun on a quiet machine).

E[X] per P: results/real_drafters.jsonl (the fixed builder, 64 prompts per task). H100: the roofline of
``experiments.speedup`` (SmolLM2-135M's shape in bf16, L = 512), each drafter's pass derived from its footprint
(RooflineCost.pass_time). CPU: t_verify from results/speedup_cpu_cost.csv (the isotonic fit measured on
2026-11-27); each drafter's pass = its fraction of the target's step, timed here now, interleaved with the target's
step (brwsim.speedup.measure_draft_cost; an EAGLE head timed as the quick head), times that committed t_verify(0).
The fraction is a ratio of passes taken in the same rounds, so load hits both; the absolute times are not used.

    taskset -c 1 python tools/speedup_rederive.py [--repeats 9]
    python tools/speedup_rederive.py --targets   # only the H100 target-size curves (no model, no timing)

``--targets``: the oracle's curves of ``experiments.speedup`` panel (b) (Llama-shaped 1B, 8B in bf16, 70B with
8-bit weights, every KV cache in bf16) from results/real_model.jsonl, each grid grown until its best P is interior.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from brwsim.llm.drafters import open_drafter  # noqa: E402
from brwsim.llm.sources import load_source  # noqa: E402
from brwsim.speedup import DraftCost, TableCost, fixed_grid, measure_draft_cost, speedup_table, verify_cost  # noqa: E402
from experiments.speedup import KV_BYTES, MEASURED_UP_TO, TARGETS, _drafter_ex, _ex, _gpu_curve, timed_spec  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--targets", action="store_true", help="print only the H100 target-size curves' best budgets")
    args = ap.parse_args(argv)
    if args.targets:
        return target_curves()
    rows = [json.loads(x) for x in (ROOT / "results/real_drafters.jsonl").read_text().splitlines() if x.strip()]
    with open(ROOT / "results/speedup_cpu_cost.csv") as f:
        r = list(csv.reader(f))
    cpu = TableCost({int(x[0]): float(x[1]) for x in r[1:]}, "measured", "committed isotonic fit, 2026-11-27")
    src = load_source("smollm2-135m", threads=1)
    h100 = verify_cost("h100", source=src, context=512)
    names = list(dict.fromkeys(x["drafter"] for x in rows if x.get("drafter")))
    costs = {}
    for name in names:
        d = open_drafter(timed_spec(name), src)
        m = measure_draft_cost(d, src, context=256, repeats=args.repeats)
        frac = m.fraction if m else 0.0
        costs[name] = {
            "cpu": DraftCost(frac * cpu.t_verify(0), "P", f"{name}: {frac:.3f} of the step", "derived"),
            "h100": DraftCost(h100.pass_time(d.footprint()), "P", name, "derived"),
        }
        t = h100.pass_time(d.footprint())
        ci = f" +- {m.fraction_ci95:.3f}" if m and m.fraction_ci95 is not None else ""
        print(f"{name}: CPU fraction {frac:.3f}{ci} (mean over rounds of pass / step, Student t 95%); "
              f"H100 pass {1e3 * t:.4f} ms = {t / h100.t_verify(0):.3f} of the step")  # fmt: skip
    for label in dict.fromkeys(x["law"] for x in rows if x["statistic"] == "oracle"):
        task = label.split("/")[-1]
        for panel, cost in (("cpu", cpu), ("h100", h100)):
            tabs = [("oracle", speedup_table(_ex(rows, label, "oracle", P_max=64), cost))]
            for name in names:
                ex = _drafter_ex(rows, label, name, 64)
                if ex:
                    tabs.append((name, speedup_table(ex, cost, costs[name][panel], drafter=name)))
            for name, t in tabs:
                t = fixed_grid([t], MEASURED_UP_TO)[0]
                b = t.best
                print(f"{panel} {task} {name}: best {t.best_text()}, speedup {b.speedup:.2f} +- {b.speedup_ci95:.2f}")


def target_curves() -> None:
    """The best budget of each H100 target-size curve of ``experiments.speedup`` (its own code, committed rows)."""
    real = [json.loads(x) for x in (ROOT / "results/real_model.jsonl").read_text().splitlines() if x.strip()]
    for label in dict.fromkeys(r["law"] for r in real if r["statistic"] == "oracle"):
        ex = _ex(real, label, "oracle")
        for target, bpp in TARGETS:
            gpu = dataclasses.replace(verify_cost("h100", target=target, bytes_per_param=bpp, context=512),
                                      kv_bytes=KV_BYTES)  # fmt: skip
            t = _gpu_curve(ex, gpu)
            print(f"h100 {label} {target} ({8 * bpp:.0f}-bit weights, {8 * KV_BYTES:.0f}-bit KV cache): best "
                  f"{t.best_text()}, speedup {t.best.speedup:.2f} +- {t.best.speedup_ci95:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
