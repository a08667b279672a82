"""Why the chat head is weaker on code: its KL by drafting depth and its training record (docs/drafters.md, "Real
drafters", "What limits it on code").

Writes ``results/eagle_head_depth.json`` with two parts:

- ``training`` (needs the trained chat head in the user cache; this tool never trains it): the head's cache
  key, weights sha256 and data spec, its training loss in 50-step means, its teacher-forced KL(p || q) and
  top-1 agreement at drafting depths 1-3 on its held-out and training windows (``meta.json``), and the same
  on the standard library's held-out windows (``--stdlib-windows`` of them, default 16: library source, the
  other corpus);
- ``walks`` (needs the points of ``python -m experiments.real_drafters`` in results/.cache; reads them, measures
  nothing): per task and drafter, the mean of log p(Y) - log q(Y) over the tokens Y the target sampled along
  its own walks (an estimate of KL(p || q) at the visited nodes), by walk depth 1 / 2-4 / 5-12 / 13-32, with a
  95% t interval over prompts; and the prompts' count.

Usage (after the head is trained and real_drafters has run)::

    PYTHONPATH=. python tools/eagle_head_depth.py [--out results/eagle_head_depth.json] [--skip-walks]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from brwsim._stats import mean_ci95

BINS = ((1, 1), (2, 4), (5, 12), (13, 32))  # walk depths (1 = the first sampled token, the root's draft)
LOSS_WINDOW = 50


def walk_kl(points: list[dict]) -> dict:
    """{task: {drafter: {"prompts": n, "bins": [{"depths": "a-b", "kl": m, "kl_ci95": c}, ...]}}} from real_drafters
    points: per prompt, the mean over walks and depths in the bin of xi_q - xi (= log p(Y) - log q(Y))."""
    out: dict = {}
    for p in points:
        xi = np.array(p["xi"], dtype=float)  # [walks, depth], NaN after a walk's end
        for d in p["drafters"]:
            if d.get("xi_q") is None:
                continue
            diff = np.array(d["xi_q"], dtype=float) - xi
            per = out.setdefault(p["task"], {}).setdefault(d["name"], [[] for _ in BINS])
            for k, (lo, hi) in enumerate(BINS):
                cell = diff[:, lo - 1 : hi]
                cell = cell[np.isfinite(cell)]
                if cell.size:
                    per[k].append(float(cell.mean()))
    res: dict = {}
    for task, drafters in out.items():
        for name, per in drafters.items():
            bins = []
            for (lo, hi), vals in zip(BINS, per, strict=True):
                m, c = mean_ci95(vals) if vals else (None, None)
                bins.append(
                    {"depths": f"{lo}-{hi}" if hi > lo else str(lo), "kl": m, "kl_ci95": c, "prompts": len(vals)}
                )
            res.setdefault(task, {})[name] = {"prompts": max(b["prompts"] for b in bins), "bins": bins}
    return res


def loss_means(loss: list[float], window: int = LOSS_WINDOW) -> list[dict]:
    """The training loss in consecutive ``window``-step means (steps a..b, 1-based)."""
    return [
        {"steps": f"{a + 1}-{min(a + window, len(loss))}", "mean": float(np.mean(loss[a : a + window]))}
        for a in range(0, len(loss), window)
    ]


def training_part(stdlib_windows: int) -> dict:
    """The chat head's record from its ``meta.json`` and its KL on the standard library's held-out windows."""
    from brwsim.errors import BrwsimError
    from brwsim.llm.drafters import eagle_head
    from brwsim.llm.drafters.eagle_head import _data
    from brwsim.llm.drafters.eagle_head._train import cpu_model, evaluate, load, locate, target_tables
    from brwsim.llm.sources import load_source

    src = load_source("smollm2-135m", threads=1)
    cfg = eagle_head.config_from(False, corpus="sharegpt")
    where = locate(src, cfg)
    model = cpu_model(src.model)
    got = load(model, where["dest"])
    if got is None:
        raise BrwsimError(
            f"no trained chat head at {where['dest']}: train it first (python -c 'from brwsim.llm.sources import "
            "load_source; from brwsim.llm.drafters import eagle_head; eagle_head.open_drafter(load_source("
            '"smollm2-135m", threads=1), config=eagle_head.config_from(False, corpus="sharegpt"))\')'
        )
    head, meta = got
    hid, _ = _data.chunks(src.tokenizer, stdlib_windows, cfg.seq_len, cfg.chunks_per_file, cfg.seed, True, "stdlib")
    f, _ = target_tables(model, hid, 1, "stdlib held-out features", progress=False)
    return {
        "key": meta["key"],
        "sha256": meta["sha256"],
        "config": meta["config"],
        "data": meta.get("data"),
        "train_files": meta["train_files"],
        "heldout_files": meta["heldout_files"],
        "seconds": meta["seconds"],
        "loss_means": loss_means(meta["loss"]),
        "heldout": meta["heldout"],
        "train_windows": meta["train_windows"],
        "stdlib_heldout": {"windows": len(hid), "depths": evaluate(head, model, f, hid)},
    }


def walks_part() -> dict:
    """Walk KL by depth from the real_drafters points already measured (none measured here)."""
    from experiments import common, real_drafters

    params = real_drafters.settings(False, 0)
    order = common.prompt_order(params["prompts"].split(","), params["n"], params["seed"])
    points = [p for p in real_drafters.measure(params, order, 0.0, 1) if p is not None]
    if not points:
        raise SystemExit("no real_drafters points in results/.cache: run python -m experiments.real_drafters first")
    return {"prompts": len(points), "of": len(order), "by_task": walk_kl(points)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/eagle_head_depth.json")
    ap.add_argument("--stdlib-windows", type=int, default=16)
    ap.add_argument("--skip-walks", action="store_true", help="the training part only")
    a = ap.parse_args(argv)
    out = {"training": training_part(a.stdlib_windows)}
    if not a.skip_walks:
        out["walks"] = walks_part()
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    t = out["training"]
    print(f"head {t['key']}: held-out KL " + " / ".join(f"{d['kl']:.2f}" for d in t["heldout"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
