"""Markov-dependent trees against i.i.d. trees with the same mu.

For each Markov law, its i.i.d. twin draws every node's state independently
from the spine's stationary state frequencies, so both have the same mu
along the target's continuation. E[X] against P for both, with the bounds that
need no independence (``splitting``, ``dual``: rigorous for both) and the
closed-form ``renewal`` fed with the spine's stationary moments (rigorous only
for the i.i.d. twin; it can fail for the Markov law).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax

import brwsim
from brwsim import laws, theory
from experiments import common

NAME = "iid_vs_markov"
ROOT = Path(__file__).resolve().parents[1]
MARKOV = {
    "two-state (examples/two_state.json)": str(ROOT / "examples" / "two_state.json"),
    "rank-sticky (examples/rank_sticky.json)": str(ROOT / "examples" / "rank_sticky.json"),
}
FULL = dict(P=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], trees=400)
QUICK = dict(P=[1, 2, 4, 8, 16, 32], trees=48)
BOUNDS = ("splitting", "dual", "renewal")


def iid_twin(markov_path: str, seed: int):
    """The Markov law with every kernel row replaced by the spine's state frequencies."""
    cfg = json.loads(Path(markov_path).read_text())
    law = laws.load_markov(markov_path)

    def compute():
        mom = theory.moments(jax.random.key(seed), law)
        return [{"state": n, "fraction": mom.per_state[n].fraction} for n in law.names]

    rows = common.cached(NAME + "_twin", {"file": Path(markov_path).read_text(), "seed": seed}, compute)
    freq = [max(r["fraction"], 0.0) for r in rows]
    tot = sum(freq)
    freq = [f / tot for f in freq]
    twin = {
        "description": f"i.i.d. twin of {Path(markov_path).name}",
        "states": cfg["states"],
        "initial": {n: f for n, f in zip(law.names, freq, strict=True)},
        "kernel": {n: [freq] for n in law.names},
    }
    return twin


def points(label: str, spec: str, P, trees, seed) -> list[dict]:
    def compute():
        res = brwsim.simulate(spec, P=P, trees=trees, seed=seed, progress=False)
        rows = [
            common.row(spec, None, "mu", res.mu, 1.96 * res.mu_se, trees, seed, label=label),
            common.row(spec, None, "mu2", res.mu2, 1.96 * res.mu2_se, trees, seed, label=label),
        ]
        for r in res.results:
            rows.append(common.row(spec, r.P, "E[X]", r.stat.mean, r.stat.ci95, trees, seed, label=label))
            for b, v in (r.bounds.values() if r.bounds else {}).items():
                rows.append(common.row(spec, r.P, b, v, 0.0, trees, seed, label=label))
        return rows

    key = {"spec": spec, "P": P, "trees": trees, "seed": seed, "v": brwsim.__version__}
    if spec.startswith("markov:"):
        key["file"] = Path(spec.split("=", 1)[1]).read_text()
    return common.cached(NAME, key, compute)


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    cfg = QUICK if args.quick else FULL
    results, _ = common.out_dirs()
    rows = []
    pairs = []
    for label, path in MARKOV.items():
        twin = iid_twin(path, args.seed)
        twin_path = results / f"iid_twin_{Path(path).stem}.json"
        twin_path.parent.mkdir(parents=True, exist_ok=True)
        twin_path.write_text(json.dumps(twin, indent=1))
        m_spec, t_spec = f"markov:path={path}", f"markov:path={twin_path}"
        rows += points(label, m_spec, cfg["P"], cfg["trees"], args.seed)
        rows += points(label + " i.i.d. twin", t_spec, cfg["P"], cfg["trees"], args.seed)
        pairs.append((label, m_spec, t_spec))
    common.write_rows(NAME, rows)

    plt = common.setup_matplotlib()
    fig, axes = plt.subplots(1, len(pairs), figsize=(6.2 * len(pairs), 4.8))
    summary = []
    for ax, (label, m_spec, t_spec) in zip(axes, pairs, strict=True):
        for spec, color, name in ((m_spec, common.PALETTE[3], "Markov"), (t_spec, common.PALETTE[0], "i.i.d. twin")):
            sel = sorted((r for r in rows if r["law"] == spec and r["statistic"] == "E[X]"), key=lambda r: r["P"])
            P = [r["P"] for r in sel]
            m = [r["mean"] for r in sel]
            c = [r["ci95"] for r in sel]
            mu = next(r["mean"] for r in rows if r["law"] == spec and r["statistic"] == "mu")
            ax.plot(P, m, "o-", color=color, ms=3, lw=1.6, label=f"{name} oracle E[X] (spine mu={mu:.2f})")
            ax.fill_between(
                P,
                [a - b for a, b in zip(m, c, strict=True)],
                [a + b for a, b in zip(m, c, strict=True)],
                color=color,
                alpha=0.3,
                lw=0,
            )
            for b in BOUNDS:
                bs = sorted((r for r in rows if r["law"] == spec and r["statistic"] == b), key=lambda r: r["P"])
                pts = [(r["P"], r["mean"]) for r in bs if math.isfinite(r["mean"])]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True), color=color, alpha=0.8, label=f"{name}: {b}", **common.BOUND_STYLES[b]
                    )
            worst = None
            for r in sel:
                ren = next(
                    (x["mean"] for x in rows if x["law"] == spec and x["statistic"] == "renewal" and x["P"] == r["P"]),
                    None,
                )
                if ren is not None:
                    gap = (r["mean"] - ren) / max(r["ci95"] / 1.96, 1e-12)
                    worst = gap if worst is None else max(worst, gap)
            summary.append(
                f"{label} {name}: E[X] = {m[-1]:.3f} +- {c[-1]:.3f} at P={P[-1]}"
                + (f"; max (E[X] - renewal)/se = {worst:+.1f}" if worst is not None else "")
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("verifier budget P (draft tokens per call)")
        ax.set_ylabel("E[X] (accepted draft tokens per call)")
        ax.set_title(label, fontsize=9)
        ax.legend(frameon=False, fontsize=7)
    fig.suptitle("Dependence along the tree: Markov laws vs i.i.d. twins with the same spine mu (bands: 95% CI)")
    fig.tight_layout()
    png = common.save_figure(fig, NAME)
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": summary}


if __name__ == "__main__":
    main()
