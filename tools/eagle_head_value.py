"""The trained draft head's tree value against the real oracle (docs/drafters.md, "A trained draft head").

Per prompt of the development set (brwsim/llm/sources/_devset.py: per task,
prompts that no experiment scores; HumanEval's by default, ``--prompts
code,prose,chat`` for more tasks), the only prompts on which heads and their
settings are compared (a scored prompt is refused):

- the real oracle T*_P (exact best-first search by the target's path probability);
- top-P-by-Q: the same exact best-first search run on the head's distributions
  (ranked by the head's path log-probability), valued by the target,
  E[X | prompt] = sum over its nodes of the target's path probability P(v);
- the head's greedy chain of P tokens, valued the same way;
- along ``--walks`` continuations sampled from the target, the head's KL(p || q)
  and top-1 agreement at every visited node (walk depth 0 = the root, whose
  draft is the head's first step).

X = accepted draft tokens per verifier call (tokens per call = X + 1). Means
over prompts with 95% CIs. Usage::

    PYTHONPATH=. python tools/eagle_head_value.py --prompts code --n 8 --P 64 [--chat] [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from brwsim._stats import mean_ci95
from brwsim.llm.drafters import eagle_head, target_logP
from brwsim.llm.measure import oracle_tree
from brwsim.llm.sources import load_source
from brwsim.llm.sources._devset import check_unscored, load_dev_prompts

P_SHOW = (1, 4, 8, 16, 32, 64, 128)


def valued(ctx_p, prefixes, P_max: int) -> np.ndarray:
    """E[X] of the first 1..P_max nodes of a drafted node list, valued by the target."""
    v = np.cumsum(np.exp(target_logP(ctx_p, prefixes))) if prefixes else np.zeros(1)
    return np.concatenate([v, np.full(max(P_max - len(v), 0), v[-1])])[:P_max]


def chain(ctx_q, P_max: int, eos) -> list:
    tip, out = (), []
    for _ in range(P_max):
        if tip and tip[-1] in eos:
            break
        tip = tip + (int(np.argmax(ctx_q.logprobs([tip])[0])),)
        out.append(tip)
    return out


def walk_stats(ctx_p, ctx_q, walks: int, depth: int, rng, eos) -> list:
    """[(walk depth, KL(p || q), top-1 agreement)] at every node the target's own walks visit."""
    tips, rows = [() for _ in range(walks)], []
    for d in range(depth):
        tips = [t for t in tips if not (t and t[-1] in eos)]
        if not tips:
            break
        lp = ctx_p.logprobs(tips).astype(np.float64)
        lq = ctx_q.logprobs(tips).astype(np.float64)
        p = np.exp(lp)
        kl = (p * (lp - lq)).sum(-1)
        top = np.argmax(lp, -1) == np.argmax(lq, -1)
        rows += [(d, float(k), float(t)) for k, t in zip(kl, top, strict=True)]
        cdf = np.cumsum(p, -1)
        nxt = [
            int(np.searchsorted(c, u * c[-1], side="right")) for c, u in zip(cdf, rng.random(len(tips)), strict=True)
        ]
        tips = [t + (min(x, p.shape[1] - 1),) for t, x in zip(tips, nxt, strict=True)]
    return rows


def one_prompt(src, dm, prompt, P_max: int, walks: int, depth: int, seed: int) -> dict:
    t0 = time.perf_counter()
    ids = src.encode(prompt.text)
    ctx_p, ctx_q = src.open(ids), dm.context(ids)
    oracle = oracle_tree(ctx_p, P_max, batch=4, eos=src.eos_ids)
    tq = oracle_tree(ctx_q, P_max, batch=4, eos=src.eos_ids)
    topq = valued(ctx_p, [tuple(p) for p in tq.prefixes], P_max)
    ch = valued(ctx_p, chain(ctx_q, P_max, src.eos_ids), P_max)
    ws = walk_stats(ctx_p, ctx_q, walks, depth, np.random.default_rng([seed, len(ids)]), src.eos_ids)
    return {
        "id": prompt.id,
        "tokens": len(ids),
        "oracle": oracle.values.tolist(),
        "topq": topq.tolist(),
        "chain": ch.tolist(),
        "walk": ws,
        "head_passes": ctx_q.passes,
        "head_nodes": ctx_q.nodes,
        "seconds": time.perf_counter() - t0,
    }


def summary(rows: list, P_max: int) -> dict:
    out = {"prompts": len(rows), "per_P": []}
    for P in [P for P in P_SHOW if P <= P_max]:
        d = {"P": P}
        for k in ("oracle", "topq", "chain"):
            d[k], d[k + "_ci95"] = mean_ci95([r[k][P - 1] for r in rows])
        d["topq_over_oracle"], d["topq_over_oracle_ci95"] = mean_ci95(
            [r["topq"][P - 1] / r["oracle"][P - 1] for r in rows]
        )
        d["chain_over_oracle"], _ = mean_ci95([r["chain"][P - 1] / r["oracle"][P - 1] for r in rows])
        out["per_P"].append(d)
    for name, lo, hi in (("root", 0, 0), ("depth_1_3", 1, 3), ("depth_4_plus", 4, 10**9)):
        per = [[(k, t) for d, k, t in r["walk"] if lo <= d <= hi] for r in rows]
        per = [np.array(x) for x in per if x]
        if per:
            out[f"walk_kl_{name}"] = mean_ci95([x[:, 0].mean() for x in per])
            out[f"walk_top1_{name}"] = mean_ci95([x[:, 1].mean() for x in per])
    return out


def overrides(items: list) -> dict:
    """``["unroll=2", "lr=3e-3"]`` -> ``{"unroll": 2, "lr": 0.003}`` (integers stay integers)."""
    out = {}
    for item in items:
        k, eq, v = item.partition("=")
        if not eq:
            raise SystemExit(f"--config takes FIELD=VALUE, got {item!r}")
        out[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else float(v)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="code", help="tasks of the development set: code, prose, chat (comma list)")
    ap.add_argument("--n", type=int, default=None, help="development prompts per task (default all 8)")
    ap.add_argument("--P", type=int, default=64)
    ap.add_argument("--walks", type=int, default=4)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="the quick head (tests, reproduce --quick)")
    ap.add_argument("--chat", action="store_true", help="the head trained on ShareGPT (eagle-head:chat)")
    ap.add_argument("--config", action="append", default=[], metavar="FIELD=VALUE",
                    help="a HeadConfig field replaced (unroll=2, lr=3e-3): the head is trained so")  # fmt: skip
    ap.add_argument("--out", default=None, help="write every prompt's curves and the summary as JSON")
    a = ap.parse_args(argv)
    prompts = load_dev_prompts(a.prompts, a.n)
    check_unscored(prompts)
    src = load_source("smollm2-135m")
    cfg = eagle_head.config_from(a.quick, corpus="sharegpt" if a.chat else "stdlib", **overrides(a.config))
    dm = eagle_head.open_drafter(src, log=lambda m: print(m, file=sys.stderr), config=cfg)
    rows = []
    for pr in prompts:
        rows.append(one_prompt(src, dm, pr, a.P, a.walks, a.depth, a.seed))
        r = rows[-1]
        vals = f"oracle {r['oracle'][-1]:.3f} topq {r['topq'][-1]:.3f} chain {r['chain'][-1]:.3f}"
        print(f"{pr.id}: {vals} ({r['seconds']:.0f} s)", flush=True)
    s = summary(rows, a.P)
    s["head"] = {"name": dm.name, "sha256": dm.meta["sha256"], "config": dm.meta["config"]}
    s["prompt_set"] = {"set": "development", "tasks": a.prompts, "ids": [r["id"] for r in rows]}
    print(json.dumps({k: v for k, v in s.items() if k != "head"}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"summary": s, "prompts": rows}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
