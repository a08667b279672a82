"""E[X] of the optimal P-node tree against P, with the bounds (paper's speed-vs-P figure).

For each default i.i.d. law, the exact oracle E[X] (accepted draft tokens per
verifier call) at P = 1 .. 4096 with 95% confidence bands, beside the bounds
theorem1_leading, renewal, dual and the asymptotic prediction, on a log axis
in P.
"""

from __future__ import annotations

import math

import brwsim
from experiments import common
from experiments.laws_default import IID_LAWS

NAME = "scaling_in_P"
FULL = dict(P=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], trees=400)
QUICK = dict(P=[1, 2, 4, 8, 16, 32, 64], trees=48)


def law_points(spec: str, P: list[int], trees: int, seed: int) -> list[dict]:
    """Rows for one law: E[X] per P, every bound per P, and the law's mu, mu_2."""

    def compute():
        res = brwsim.simulate(spec, P=P, trees=trees, seed=seed, progress=False)
        rows = [
            common.row(spec, None, "mu", res.mu, 1.96 * res.mu_se, trees, seed),
            common.row(spec, None, "mu2", res.mu2, 1.96 * res.mu2_se, trees, seed),
        ]
        for r in res.results:
            rows.append(common.row(spec, r.P, "E[X]", r.stat.mean, r.stat.ci95, trees, seed))
            for b, v in (r.bounds.values() if r.bounds else {}).items():
                rows.append(common.row(spec, r.P, b, v, 0.0, trees, seed))
        return rows

    return common.cached(NAME, {"law": spec, "P": P, "trees": trees, "seed": seed, "v": brwsim.__version__}, compute)


def collect(quick: bool, seed: int) -> list[dict]:
    cfg = QUICK if quick else FULL
    rows = []
    for spec in IID_LAWS.values():
        rows += law_points(spec, cfg["P"], cfg["trees"], seed)
    return rows


def series(rows, spec, stat):
    pts = sorted((r["P"], r["mean"], r["ci95"]) for r in rows if r["law"] == spec and r["statistic"] == stat)
    return [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]


def scalar(rows, spec, stat) -> float:
    return next(r["mean"] for r in rows if r["law"] == spec and r["statistic"] == stat)


BOUNDS = ("theorem1_leading", "renewal", "dual", "asymptotic")
BOUND_LABELS = {
    "theorem1_leading": "Theorem 1 leading term",
    "renewal": "renewal bound",
    "dual": "dual bound",
    "asymptotic": "asymptotic prediction",
}


def plot(rows):
    """One panel per law (E[X] with its 95% band and the bounds), plus all laws together."""
    plt = common.setup_matplotlib()
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharex=True)
    axes = axes.ravel()
    for i, (label, spec) in enumerate(IID_LAWS.items()):
        color = common.PALETTE[i]
        P, m, c = series(rows, spec, "E[X]")
        mu, mu2 = scalar(rows, spec, "mu"), scalar(rows, spec, "mu2")
        lo = [a - b for a, b in zip(m, c, strict=True)]
        hi = [a + b for a, b in zip(m, c, strict=True)]
        for ax in (axes[i], axes[-1]):
            ax.plot(P, m, "o-", color=color, ms=3, lw=1.6, label="oracle E[X]" if ax is axes[i] else label)
            ax.fill_between(P, lo, hi, color=color, alpha=0.3, lw=0)
        ax = axes[i]
        for b in BOUNDS:
            Pb, vb, _ = series(rows, spec, b)
            keep = [(p, v) for p, v in zip(Pb, vb, strict=True) if math.isfinite(v)]
            if keep:
                ax.plot(
                    *zip(*keep, strict=True), color="k", alpha=0.75, label=BOUND_LABELS[b], **common.BOUND_STYLES[b]
                )
        ax.set_ylim(0, max(hi) * 1.5 + 0.05)
        ax.set_title(f"{label}\nmu = {mu:.2f} nats, mu_2 = {mu2:.2f}", fontsize=9)
        if i == 0:
            ax.legend(loc="upper left", frameon=False)
    axes[-1].set_title("all laws: oracle E[X]", fontsize=9)
    axes[-1].legend(loc="upper left", frameon=False, fontsize=7)
    for ax in axes:
        ax.set_xscale("log", base=2)
    for ax in axes[3:]:
        ax.set_xlabel("verifier budget P (draft tokens per call)")
    for ax in axes[::3]:
        ax.set_ylabel("E[X] (accepted draft tokens per call)")
    fig.suptitle("Optimal P-node draft tree: E[X] against P (bands: 95% CI; X excludes the bonus token)")
    fig.tight_layout()
    return common.save_figure(fig, NAME)


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    rows = collect(args.quick, args.seed)
    common.write_rows(NAME, rows)
    png = plot(rows)
    lines = []
    for label, spec in IID_LAWS.items():
        P, m, c = series(rows, spec, "E[X]")
        lines.append(f"{label}: E[X] = {m[0]:.3f} +- {c[0]:.3f} at P={P[0]}, {m[-1]:.3f} +- {c[-1]:.3f} at P={P[-1]}")
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    main()
