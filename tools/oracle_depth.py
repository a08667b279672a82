"""The depth of the real oracle tree T*_P per prompt (SmolLM2-135M, the real-model experiment's prompts).

    python tools/oracle_depth.py [--P 64] [--out results/oracle_depth.jsonl]

For each prompt of results/real_model_prompts.jsonl (64 per task: HumanEval, pydoc, ShareGPT; in the experiments'
seeded interleaved order, so a run stopped early holds the tasks in equal numbers) the exact
best-first search of the real-model experiment (brwsim.llm.measure.oracle_tree, batch 8, the same settings) is run
to ``--P`` nodes, and its deepest node's depth and its nodes' mean depth are written, one row per prompt, beside
the oracle's value, which must equal the committed row's (the same tree). No walks, so it takes about a second of
model time per prompt on a quiet machine. Prints, per task, the median depth over the prompts with its range.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "results" / "oracle_depth.jsonl"))
    ap.add_argument("--summarize", action="store_true", help="only summarize the rows already in --out")
    args = ap.parse_args(argv)
    from brwsim.llm.measure import oracle_tree
    from brwsim.llm.sources import load_source

    committed: dict = {}
    for line in open(ROOT / "results" / "real_model_prompts.jsonl"):
        r = json.loads(line)
        if r["P"] == args.P:
            committed[(r["task"], r["id"])] = r["oracle"]
    if args.summarize:
        summarize([json.loads(line) for line in open(args.out)])
        return
    from experiments.common import prompt_order

    src = load_source("smollm2-135m", dtype="float32", threads=1)
    rows = []
    with open(args.out, "w") as f:  # one row per prompt as it is measured: a stopped run keeps its prompts
        for p in prompt_order(["humaneval", "pydoc", "sharegpt"], 64, 0):  # the experiments' interleaved order
            if (p.task, p.id) not in committed:
                print(f"{p.task} {p.id}: not in the committed rows; skipped", flush=True)
                continue
            ctx = src.open(src.encode(p.text))
            o = oracle_tree(ctx, args.P, batch=8, eos=src.eos_ids)
            d = np.asarray(o.depth[: args.P])
            value, was = float(o.values[args.P - 1]), committed[(p.task, p.id)]
            rows.append(dict(task=p.task, id=p.id, P=args.P, max_depth=int(d.max()), mean_depth=float(d.mean()),
                             oracle=value, committed_oracle=was))  # fmt: skip
            f.write(json.dumps(rows[-1]) + "\n")
            f.flush()
            print(f"{p.task} {p.id}: depth {rows[-1]['max_depth']}, value {rows[-1]['oracle']:.5f} (committed "
                  f"{rows[-1]['committed_oracle']:.5f})", flush=True)  # fmt: skip
    summarize(rows)


def summarize(rows) -> None:
    """Per task: the deepest node's depth (median, range, mean ± t) and the nodes' mean depth (median, mean ± t)."""
    from brwsim._stats import mean_ci95

    for task in dict.fromkeys(r["task"] for r in rows):
        d = np.array([r["max_depth"] for r in rows if r["task"] == task])
        m = np.array([r["mean_depth"] for r in rows if r["task"] == task])
        dv = max(abs(r["oracle"] - r["committed_oracle"]) / max(r["committed_oracle"], 1e-12) for r in rows)
        (dm, dc), (mm, mc) = mean_ci95(d), mean_ci95(m)
        print(f"{task}: deepest node at P = {rows[0]['P']}: median {np.median(d):g} over {len(d)} prompts "
              f"(range {d.min()}-{d.max()}, mean {dm:.2f} ± {dc:.2f}); the nodes' mean depth: median "
              f"{np.median(m):.2f}, mean {mm:.2f} ± {mc:.2f}; largest relative difference from the committed oracle "
              f"value {dv:.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
