"""Entropy moments of every law: mu, mu_2, mu_2/mu^2, and the two slopes in ln P.

The predicted slope of E[X] in ln P is 1/mu (docs/theory.md, bounds (c) and (d)); the paper's
Theorem 1 has (mu + mu_2)/mu^2 = 1/mu + mu_2/mu^2. Rows for real models join
the table from ``results/real_model_entropy.csv`` (the shipped model) and
``results/real_model-MODEL_entropy.csv`` (``python -m experiments.real_model
--model MODEL``), when they exist.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import jax

import brwsim
from brwsim import laws, theory
from experiments import common
from experiments.laws_default import IID_LAWS

NAME = "entropy_table"
MARKOV_EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "two_state.json")


def law_row(label: str, spec: str, seed: int) -> dict:
    def compute():
        m = theory.moments(jax.random.key(seed), laws.parse_law(spec))
        return [
            {
                "law": label,
                "spec": spec,
                "mu": m.mu,
                "mu_ci95": 1.96 * m.mu_se,
                "mu2": m.mu2,
                "mu2_ci95": 1.96 * m.mu2_se,
                "exact": m.exact,
            }
        ]

    r = common.cached(NAME, {"spec": spec, "seed": seed, "v": brwsim.__version__}, compute)[0]
    return finish(r)


def finish(r: dict) -> dict:
    mu, mu2 = float(r["mu"]), float(r["mu2"])
    r["mu2/mu^2"] = mu2 / mu**2 if mu > 0 else math.inf
    r["slope 1/mu"] = 1 / mu if mu > 0 else math.inf
    r["slope (mu+mu2)/mu^2"] = (mu + mu2) / mu**2 if mu > 0 else math.inf
    return r


def real_rows() -> list[dict]:
    results, _ = common.out_dirs()
    rows = []
    paths = sorted(results.glob("real_model*_entropy.csv"), key=lambda p: (p.name != "real_model_entropy.csv", p.name))
    for path in paths:  # the shipped model's first, then each real_model-MODEL's
        with open(path) as f:
            found = list(csv.DictReader(f))
        for r in found:
            n = f" ({r['prompts']} prompts)" if r.get("prompts") else ""
            rows.append(
                finish(
                    {
                        "law": (r.get("label") or r.get("law")) + n,
                        "spec": r.get("spec", "real model"),
                        "mu": r["mu"],
                        "mu_ci95": r.get("mu_ci95", ""),
                        "mu2": r["mu2"],
                        "mu2_ci95": r.get("mu2_ci95", ""),
                        "exact": False,
                    }
                )
            )
    return rows


def markdown(rows: list[dict]) -> str:
    def ci(v, c):
        c = float(c) if c not in ("", None) else 0.0
        return f"{float(v):.4f}" + (f" ± {c:.4f}" if c > 0 else "")

    out = [
        "| law | mu (nats) | mu_2 (nats^2) | mu_2/mu^2 | slope 1/mu | Theorem 1 slope (mu+mu_2)/mu^2 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r['law']} | {ci(r['mu'], r['mu_ci95'])} | {ci(r['mu2'], r['mu2_ci95'])} | "
            f"{r['mu2/mu^2']:.3f} | {r['slope 1/mu']:.3f} | {r['slope (mu+mu2)/mu^2']:.3f} |"
        )
    out.append("")
    out.append(
        "± is a 95% Monte Carlo half-width (none: closed form); real-model rows (MODEL/task, n prompts): a 95% "
        "Student-t interval over the prompts. Markov rows: moments along the spine."
    )
    return "\n".join(out)


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    rows = [law_row(label, spec, args.seed) for label, spec in IID_LAWS.items()]
    rows.append(law_row("two-state Markov (spine)", f"markov:path={MARKOV_EXAMPLE}", args.seed))
    rows += real_rows()
    return write_outputs(rows, args.seed)


def write_outputs(rows: list[dict], seed: int) -> dict:
    """results/entropy_table.{csv,jsonl}, figures/entropy_table.{md,json} from the table's rows (laws, then the
    real models' rows of :func:`real_rows`)."""
    tidy = []
    for r in rows:
        for stat in ("mu", "mu2"):
            tidy.append(
                common.row(
                    r["spec"],
                    None,
                    stat,
                    float(r[stat]),
                    float(r[f"{stat}_ci95"] or 0.0),
                    None,
                    seed,
                    label=r["law"],
                )
            )
        for stat in ("mu2/mu^2", "slope 1/mu", "slope (mu+mu2)/mu^2"):
            tidy.append(common.row(r["spec"], None, stat, r[stat], 0.0, None, seed, label=r["law"]))
    common.write_rows(NAME, tidy)
    md = markdown(rows)
    _, figures = common.out_dirs()
    figures.mkdir(parents=True, exist_ok=True)
    (figures / f"{NAME}.md").write_text(md + "\n")
    (figures / f"{NAME}.json").write_text(json.dumps(rows, indent=1, default=str))
    return {"name": NAME, "figures": [], "tables": [figures / f"{NAME}.md"], "rows": len(tidy), "summary": []}


if __name__ == "__main__":
    main()
