"""Data collapse: the asymptotic law E[X] ~ ln(mu P)/mu + mu_2/(2 mu^2) - 1 puts every law on one line.

With y = mu * (E[X] + 1 - mu_2/(2 mu^2)) and x = ln(mu P), the asymptotic prediction (d) of docs/theory.md predicts
y = x + o(1) for every i.i.d. law with non-lattice steps: the points of all
laws of ``scaling_in_P`` fall on the identity line as P grows. The left panel
shows the raw mu * E[X] against ln(mu P), whose slope-1 lines differ only by
the law's offset mu_2/(2 mu) - mu.
"""

from __future__ import annotations

import math

from experiments import common, scaling_in_P
from experiments.laws_default import IID_LAWS

NAME = "collapse"


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    rows = scaling_in_P.collect(args.quick, args.seed)  # cached points: no recomputation
    out = []
    plt = common.setup_matplotlib()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.6))
    xs_all = []
    for i, (label, spec) in enumerate(IID_LAWS.items()):
        mu = scaling_in_P.scalar(rows, spec, "mu")
        mu2 = scaling_in_P.scalar(rows, spec, "mu2")
        P, m, c = scaling_in_P.series(rows, spec, "E[X]")
        x = [math.log(mu * p) for p in P]
        y_raw = [mu * v for v in m]
        off = 1 - mu2 / (2 * mu * mu)
        y = [mu * (v + off) for v in m]
        err = [mu * e for e in c]
        color = common.PALETTE[i]
        ax0.errorbar(x, y_raw, yerr=err, fmt="o-", ms=3, lw=1, color=color, label=label)
        ax1.errorbar(x, y, yerr=err, fmt="o", ms=3.5, color=color, label=f"{label} (mu={mu:.2f})")
        xs_all += x
        for p, xv, yv, e in zip(P, x, y, err, strict=True):
            out.append(common.row(spec, p, "x=ln(mu P)", xv, 0.0, None, args.seed))
            out.append(common.row(spec, p, "y=mu(E[X]+1-mu2/(2mu^2))", yv, e, None, args.seed))
    lo, hi = min(xs_all), max(xs_all)
    ax1.plot([lo, hi], [lo, hi], "k--", lw=1.2, label="y = x (asymptotic law)")
    ax0.set_xlabel("ln(mu P)")
    ax0.set_ylabel("mu * E[X]  (nats)")
    ax0.set_title("raw: slope 1, law-dependent offsets")
    ax1.set_xlabel("ln(mu P)")
    ax1.set_ylabel("mu * (E[X] + 1 - mu_2 / (2 mu^2))  (nats)")
    ax1.set_title("collapsed: the asymptotic prediction is the identity line")
    ax0.legend(frameon=False, fontsize=7)
    ax1.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    png = common.save_figure(fig, NAME)
    common.write_rows(NAME, out)
    # distance to the line at the largest P of each law
    lines = []
    for label, spec in IID_LAWS.items():
        pts = [r for r in out if r["law"] == spec]
        x_last, y_last = pts[-2]["mean"], pts[-1]
        lines.append(f"{label}: at P={y_last['P']}, y - x = {y_last['mean'] - x_last:+.3f} +- {y_last['ci95']:.3f}")
    return {"name": NAME, "figures": [png], "rows": len(out), "summary": lines}


if __name__ == "__main__":
    main()
