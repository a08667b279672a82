"""Recompute the real-model claims of the docs and the report from the committed rows, without a model run.

    python tools/recompute_claims.py            # print every number the docs quote (sections 1-9)
    python tools/recompute_claims.py --write    # also rewrite the committed rows, tables and figures derived here
    python tools/recompute_claims.py --tokenize # also count, with the shipped tokenizer, the prompts longer than
                                                # the 384-token limit (the cut ones)

Reads results/real_model{,-gemma3-270m}_prompts.jsonl (one row per prompt and P: the oracle's E[X | prompt], the
prompt's mean H and M2 along its walks, its token count), results/real_model{,-gemma3-270m}.jsonl,
results/real_drafters_prompts.jsonl (one row per prompt x P x drafter x builder) and results/real_drafters.jsonl.
Every interval is a Student-t 95% interval over prompts (paired where two drafters are compared on the same
prompts); the surrogate's is its own Monte Carlo interval.

``--write`` (the experiments cannot score from these rows: their cache, which holds each prompt's walks, is not
committed): the real-model rows get mu and mu_2 as the mean of the per-prompt means (the estimator of
``brwsim.llm.measure._task.prompt_moments``, whose t interval the rows already carried), the closed forms
recomputed at those moments, and a ``prompts_cut`` row per task; then results/real_model*_entropy.csv,
figures/real_model*.{png,pdf}, the real-model rows of results/entropy_table.{csv,jsonl} and figures/entropy_table.*;
results/real_drafters.{csv,jsonl} get ``prompts_cut`` rows (the same prompts as the real-model run, checked by id)
and figures/real_drafters_table.md and figures/real_drafters.{png,pdf} are redrawn by the experiment's own code.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from brwsim._stats import mean_ci95, paired_ci95  # noqa: E402
from brwsim.theory import asymptotic, renewal, theorem1_leading  # noqa: E402

RESULTS = ROOT / "results"
CLOSED = {"renewal": renewal, "asymptotic": asymptotic, "theorem1_leading": theorem1_leading}
MODELS = {"smollm2-135m": "real_model", "gemma3-270m": "real_model-gemma3-270m"}
TASKS = ("humaneval", "pydoc", "sharegpt")


def load(name: str) -> list[dict]:
    with open(RESULTS / name) as f:
        return [json.loads(line) for line in f]


def prompts_of(stem: str) -> dict:
    """task -> {id: {"H", "M2", "tokens", "oracle": {P: value}}} from a real-model run's per-prompt rows."""
    out: dict = defaultdict(dict)
    for r in load(f"{stem}_prompts.jsonl"):
        p = out[r["task"]].setdefault(r["id"], {"H": r["H"], "M2": r["M2"], "tokens": r["prompt_tokens"], "oracle": {}})
        p["oracle"][r["P"]] = r["oracle"]
    return out


def drafter_values() -> dict:
    """(task, drafter, builder, P) -> {id: value}; (task, P) -> {id: oracle}."""
    vals: dict = defaultdict(dict)
    for r in load("real_drafters_prompts.jsonl"):
        vals[(r["task"], r["drafter"], r["builder"], r["P"])][r["id"]] = r["value"]
        vals[(r["task"], "oracle", None, r["P"])][r["id"]] = r["oracle"]
    return vals


def fmt(m, c) -> str:
    return f"{m:.3f} ± {c:.3f}"


# ---------------------------------------------------------------------------
# the sections


def check_against_fixed(summary, vals) -> None:
    print("\n[1] direct check (each prompt's best builder at P = 32) against the fixed builder's value there")
    for r in summary:
        if r["statistic"] != "check_accepted_per_call":
            continue
        fixed = next(x["builder"] for x in summary if x["statistic"] == "fixed" and x["drafter"] == r["drafter"])
        fv = mean_ci95(list(vals[(r["task"], r["drafter"], fixed, r["P"])].values()))
        print(f"  {r['task']:9} {r['drafter']:20} check {fmt(r['mean'], r['ci95'])} (value {r['value']:.3f}); "
              f"fixed {fixed} {fmt(*fv)}")  # fmt: skip


def paired(vals, task, a, ba, b, bb, P):
    x, y = vals[(task, a, ba, P)], vals[(task, b, bb, P)]
    ids = sorted(x)
    assert ids == sorted(y)
    return paired_ci95([x[i] for i in ids], [y[i] for i in ids])


def lowbit_vs_head(vals) -> None:
    print("\n[2] lowbit:bits=4 minus eagle-head-chat, E[X] at P = 64, paired over the 64 prompts, per builder")
    for task in TASKS:
        for b in ("topq", "eagle", "sequoia", "chain"):
            lo = mean_ci95(list(vals[(task, "lowbit:bits=4", b, 64)].values()))
            hd = mean_ci95(list(vals[(task, "eagle-head-chat", b, 64)].values()))
            d = paired(vals, task, "lowbit:bits=4", b, "eagle-head-chat", b, 64)
            print(f"  {task:9} {b:8} lowbit {fmt(*lo)}  head {fmt(*hd)}  difference {fmt(*d)}")


def first_token(prompts) -> None:
    print("\n[3] E[X] at P = 1 (the probability of the first token's most probable value), per prompt")
    for model, stem in MODELS.items():
        for task in TASKS:
            v = np.array([p["oracle"][1] for p in prompts[stem][task].values()])
            m, c = mean_ci95(v)
            print(f"  {model} {task:9}: mean {m:.4f} ± {c:.4f}, min {v.min():.4f}, {int((v < 0.995).sum())} of "
                  f"{len(v)} below 0.995")  # fmt: skip


def fractions(summary, vals) -> None:
    print("\n[4] fraction of the oracle, fixed builder (mean of per-prompt ratios), recomputed from the prompt rows")
    for r in summary:
        if r["statistic"] != "fraction_of_oracle" or r["P"] not in (8, 32, 64, 128):
            continue
        v, o = vals[(r["task"], r["drafter"], r["builder"], r["P"])], vals[(r["task"], "oracle", None, r["P"])]
        m, c = mean_ci95([v[i] / o[i] if o[i] > 0 else math.nan for i in sorted(v)])
        assert abs(m - r["mean"]) < 1e-12, (r, m)
        print(f"  {r['task']:9} {r['drafter']:20} P={r['P']:3}: {fmt(m, c)}")
    print("  best builder on the same prompts at P = 64 (context only):")
    for r in summary:
        if r["statistic"] == "best_same_prompts" and r["P"] == 64:
            print(f"    {r['task']:9} {r['drafter']:20} {r['builder']} {r['mean']:.3f}")


def moments(prompts, rows) -> dict:
    """The per-prompt-mean moments of each model and task (printed beside the committed pooled centre)."""
    print("\n[5] mu, mu_2: mean of per-prompt means ± t over the same means (committed centre: pooled over nodes)")
    out = {}
    for model, stem in MODELS.items():
        old = {(r["task"], r["statistic"]): r["mean"] for r in rows[stem] if r["statistic"] in ("mu", "mu2")}
        for task in TASKS:
            ps = list(prompts[stem][task].values())
            mu, mu2 = mean_ci95([p["H"] for p in ps]), mean_ci95([p["M2"] for p in ps])
            out[(model, task)] = (mu, mu2)
            forms = ", ".join(f"{k} P=64 {float(f(64, mu[0], mu2[0])):.4f}" for k, f in CLOSED.items())
            print(f"  {model} {task:9}: mu {mu[0]:.4f} ± {mu[1]:.4f} (was {old[(task, 'mu')]:.4f}), mu_2 "
                  f"{mu2[0]:.4f} ± {mu2[1]:.4f} (was {old[(task, 'mu2')]:.4f}); {forms}")  # fmt: skip
    return out


def verdicts(rows) -> None:
    from experiments.real_model import surrogate_verdict

    print("\n[6] i.i.d. surrogate against the real oracle (a verdict only when both 95% intervals separate)")
    for model, stem in MODELS.items():
        for task in TASKS:
            get = {(r["statistic"], r["P"]): r for r in rows[stem] if r.get("task") == task}
            cells = []
            for P in sorted(P for s, P in get if s == "surrogate"):
                o, s = get[("oracle", P)], get[("surrogate", P)]
                v = surrogate_verdict(o["mean"], o["ci95"], s["mean"], s["ci95"])
                cells.append(f"P={P} {v} ({s['mean']:.2f} ± {s['ci95']:.2f} vs {o['mean']:.2f} ± {o['ci95']:.2f})")
            print(f"  {model} {task}:\n    " + "\n    ".join(cells))


def cut(prompts, tokenize: bool) -> dict:
    from experiments.real_model import MAX_PROMPT_TOKENS

    print(f"\n[7] prompts at the {MAX_PROMPT_TOKENS}-token limit (cut to their last {MAX_PROMPT_TOKENS} tokens)")
    out = {}
    for model, stem in MODELS.items():
        for task in TASKS:
            ids = sorted(i for i, p in prompts[stem][task].items() if p["tokens"] >= MAX_PROMPT_TOKENS)
            out[(model, task)] = len(ids)
            print(f"  {model} {task:9}: {len(ids)} of {len(prompts[stem][task])} {ids}")
    if tokenize:
        from transformers import AutoTokenizer

        from brwsim.llm.sources import load_prompts

        tok = AutoTokenizer.from_pretrained(Path(os.environ.get("BRWSIM_CACHE", Path.home() / ".cache/brwsim"))
                                            / "models" / "smollm2-135m")  # fmt: skip
        for task in TASKS:
            ps = {p.id: p for p in load_prompts(task, 64)}
            mine = prompts["real_model"][task]
            same = sorted(ps) == sorted(mine)
            long = sorted(i for i in mine if i in ps and len(tok(ps[i].text)["input_ids"]) > MAX_PROMPT_TOKENS)
            print(f"  smollm2 tokenizer, {task}: {len(long)} prompts longer than {MAX_PROMPT_TOKENS} tokens {long}"
                  f"{'' if same else ' (the prompt set loaded here differs from the committed one)'}")  # fmt: skip
    return out


def predictions(summary) -> None:
    print("\n[8] imperfect-knowledge prediction (ik_lorden) against the real oracle's upper 95% end and the drafter")
    orc = {(r["task"], r["P"]): r for r in summary if r["statistic"] == "oracle"}
    fx = {(r["task"], r["drafter"], r["P"]): r for r in summary if r["statistic"] == "fixed"}
    by: dict = defaultdict(list)
    for r in summary:
        if r["statistic"] == "ik_lorden":
            o, f = orc[(r["task"], r["P"])], fx[(r["task"], r["drafter"], r["P"])]
            by[(r["task"], r["drafter"])].append((r["P"], r["mean"], o["mean"] + o["ci95"], f["mean"]))
    for (task, d), pts in by.items():
        below = [P for P, v, up, _ in pts if v <= up]
        err = [f"P={P} {v - m:+.2f}" for P, v, up, m in pts if v <= up and P in (8, 32, 128)]
        print(f"  {task:9} {d:20} below the oracle at P = {below or 'none'}; prediction - measured: {err}")


# ---------------------------------------------------------------------------
# --write


def new_real_model_rows(stem: str, prompts: dict, rows: list[dict]) -> list[dict]:
    from experiments import common
    from experiments.real_model import MAX_PROMPT_TOKENS, cut_prompts

    mom = {}
    for task, ps in prompts.items():
        mom[task] = {"mu": mean_ci95([p["H"] for p in ps.values()]), "mu2": mean_ci95([p["M2"] for p in ps.values()])}
    out = []
    for r in rows:
        task = r.get("task")
        if r["statistic"] in ("mu", "mu2"):
            m, c = mom[task][r["statistic"]]
            assert abs(c - r["ci95"]) < 1e-12  # the interval was already over the per-prompt means
            r = r | {"mean": m, "ci95": c}
        elif r["statistic"] in CLOSED:
            r = r | {"mean": float(CLOSED[r["statistic"]](r["P"], mom[task]["mu"][0], mom[task]["mu2"][0]))}
        elif r["statistic"] == "prompts_cut":
            continue
        out.append(r)
        if r["statistic"] == "mu2":
            n = cut_prompts(p["tokens"] for p in prompts[task].values())
            out.append(common.row(r["law"], None, "prompts_cut", n, 0.0, r["trees"], r["seed"],
                                  max_prompt_tokens=MAX_PROMPT_TOKENS, model=r["model"], task=task))  # fmt: skip
    return out


def write(prompts: dict, rows: dict) -> None:
    os.environ["BRWSIM_OUT"] = str(ROOT)
    from experiments import common, real_drafters, real_model

    for stem in MODELS.values():
        new = new_real_model_rows(stem, prompts[stem], rows[stem])
        common.write_rows(stem, new)
        real_model.write_entropy(new, stem)
        common.save_figure(real_model.figure(new), stem)
        print(f"wrote results/{stem}.{{csv,jsonl}}, results/{stem}_entropy.csv, figures/{stem}.{{png,pdf}}")
    _write_entropy_table()
    summary = [r for r in load("real_drafters.jsonl") if r["statistic"] != "prompts_cut"]
    at = next(i for i, r in enumerate(summary) if r["statistic"] == "model_phase_seconds")
    ids = {(r["task"], r["id"]) for r in load("real_drafters_prompts.jsonl")}
    cuts = []
    for task in TASKS:
        ps = prompts["real_model"][task]
        assert {i for t, i in ids if t == task} == set(ps)  # the same prompts as the real-model run
        n = real_model.cut_prompts(p["tokens"] for p in ps.values())
        cuts.append(common.row(f"smollm2-135m/{task}", None, "prompts_cut", n, 0.0, len(ps), 0,
                               max_prompt_tokens=real_model.MAX_PROMPT_TOKENS, drafter=None, task=task))  # fmt: skip
    summary[at:at] = cuts
    common.write_rows("real_drafters", summary)
    params = real_drafters.settings(False, 0)
    (ROOT / "figures" / "real_drafters_table.md").write_text(real_drafters.table(summary, params))
    common.save_figure(real_drafters.figure(summary), "real_drafters")
    print("wrote results/real_drafters.{csv,jsonl}, figures/real_drafters_table.md, figures/real_drafters.{png,pdf}")


def _write_entropy_table() -> None:
    """The entropy table: its law rows as committed (figures/entropy_table.json), the real-model rows from the
    rewritten results/real_model*_entropy.csv."""
    from experiments import entropy_table

    rows = json.loads((ROOT / "figures" / "entropy_table.json").read_text())
    laws = [r for r in rows if not r["spec"].startswith("real model")]
    entropy_table.write_outputs(laws + entropy_table.real_rows(), 0)
    print("wrote results/entropy_table.{csv,jsonl}, figures/entropy_table.{md,json}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the derived committed rows, tables and figures")
    ap.add_argument("--tokenize", action="store_true", help="count prompts over the limit with the tokenizer")
    args = ap.parse_args(argv)
    prompts = {stem: prompts_of(stem) for stem in MODELS.values()}
    rows = {stem: load(f"{stem}.jsonl") for stem in MODELS.values()}
    summary, vals = load("real_drafters.jsonl"), drafter_values()
    check_against_fixed(summary, vals)
    lowbit_vs_head(vals)
    first_token(prompts)
    fractions(summary, vals)
    moments(prompts, rows)
    verdicts(rows)
    cut(prompts, args.tokenize)
    predictions(summary)
    if args.write:
        write(prompts, rows)


if __name__ == "__main__":
    main()
