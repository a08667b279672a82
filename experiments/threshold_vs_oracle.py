"""The spine's threshold-tree curve against exact oracle trees, up to P = 10^6 for the spine.

The threshold tree {v : V(v) <= t} holds the nodes of path probability at
least e^-t. By the many-to-one lemma (docs/theory.md, "The spine") its mean size is
E[N(t)] = sum_d E[e^(S_d) 1{S_d <= t}] and its mean value is E[tau_t] - 1,
both estimated from spine walks (the target's own sampled continuations) at
the cost of a few thousand walks, whatever the size. Plotted against its mean
size, the curve should run through the exact oracle's E[X] at P = E[N(t)]
where both are computed (the oracle tree is the threshold tree with the size
fixed at P instead of random).
"""

from __future__ import annotations

import jax
import numpy as np

import brwsim
from brwsim import laws, spine, theory
from experiments import common, scaling_in_P
from experiments.laws_default import IID_LAWS

NAME = "threshold_vs_oracle"
FULL = dict(P_max=1e6, walks=8192)
QUICK = dict(P_max=1e4, walks=1024)


def curve_points(spec: str, P_max: float, walks: int, seed: int) -> list[dict]:
    def compute():
        law = laws.parse_law(spec)
        key = jax.random.key(seed)
        mu = theory.moments(key, law).mu
        cur = spine.law_curves(key, law, P_max=P_max, walks=walks, mu_hint=mu)
        t = np.linspace(0.0, min(cur.limit, cur.coverage) * (1 - 1e-9), 400)
        N, N_se, val, val_se = cur.threshold_curve(t)
        rows = []
        for ti, n, ns, v, vs in zip(t, N, N_se, val, val_se, strict=True):
            if n <= 0:
                continue
            rows.append(
                common.row(
                    spec,
                    None,
                    "threshold",
                    float(v),
                    1.96 * float(vs),
                    walks,
                    seed,
                    t=float(ti),
                    size=float(n),
                    size_ci95=1.96 * float(ns),
                )
            )
            if n > P_max:
                break
        return rows

    return common.cached(
        NAME, {"law": spec, "P_max": P_max, "walks": walks, "seed": seed, "v": brwsim.__version__}, compute
    )


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    cfg = QUICK if args.quick else FULL
    oracle_rows = scaling_in_P.collect(args.quick, args.seed)  # cached points of scaling_in_P
    rows = []
    plt = common.setup_matplotlib()
    fig, ax = plt.subplots(figsize=(7.4, 5.0))
    summary = []
    for i, (label, spec) in enumerate(IID_LAWS.items()):
        color = common.PALETTE[i]
        pts = curve_points(spec, cfg["P_max"], cfg["walks"], args.seed)
        rows += pts
        size = np.array([r["size"] for r in pts])
        val = np.array([r["mean"] for r in pts])
        ci = np.array([r["ci95"] for r in pts])
        ax.plot(size, val, "-", color=color, lw=1.4, label=f"{label}: threshold tree (spine)")
        ax.fill_between(size, val - ci, val + ci, color=color, alpha=0.25, lw=0)
        P, m, c = scaling_in_P.series(oracle_rows, spec, "E[X]")
        ax.errorbar(P, m, yerr=c, fmt="o", ms=3.5, color=color, mec="k", mew=0.4)
        for p, mv, cv in zip(P, m, c, strict=True):
            rows.append(common.row(spec, p, "oracle E[X]", mv, cv, None, args.seed))
        # the threshold curve at the largest oracle P, for the summary
        if size.size and P:
            j = int(np.searchsorted(size, P[-1]))
            if 0 < j < size.size:
                summary.append(
                    f"{label}: oracle E[X] at P={P[-1]}: {m[-1]:.3f} +- {c[-1]:.3f}; threshold tree of "
                    f"mean size {size[j]:.0f}: {val[j]:.3f} +- {ci[j]:.3f}; at mean size "
                    f"{size[-1]:.3g}: {val[-1]:.3f} +- {ci[-1]:.3f}"
                )
    ax.errorbar([], [], yerr=[], fmt="o", color="gray", mec="k", mew=0.4, label="exact oracle E[X] at P (trees)")
    ax.set_xscale("log")
    ax.set_xlim(left=0.7)
    ax.set_xlabel("tree size: P for the oracle, E[N(t)] for the threshold tree")
    ax.set_ylabel("E[X] (accepted draft tokens per call)")
    ax.set_title("Threshold trees from spine walks vs exact oracle trees (bands: 95% CI)")
    ax.legend(frameon=False, fontsize=7, loc="upper left")
    fig.tight_layout()
    png = common.save_figure(fig, NAME)
    common.write_rows(NAME, rows)
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": summary}


if __name__ == "__main__":
    main()
