"""Figure (c): the drafter's gap to the oracle against its cross-entropy.

For draft laws of three kinds (logit noise, temperature mismatch, mixture with
an independent draw of the same law) on one i.i.d. law: the mean
cross-entropy E[H(p, q)] (and KL(p || q)) by Monte Carlo, and the paired gap
E[X(oracle)] - E[X(top-P by Q)] on the same trees at two budgets P.
X = accepted draft tokens per verifier call.
"""

from __future__ import annotations

import jax
import numpy as np

import brwsim
from brwsim import Stat
from brwsim.drafters import draft_stats, drafter_values
from experiments import common

NAME = "drafter_gap"
LAW = "logitnormal:V=256,sigma=4"
FULL_LAWS = (
    [f"noise:sigma={s}" for s in (0.25, 0.5, 1, 1.5, 2, 3)]
    + [f"temp:T={t}" for t in (0.5, 0.75, 1.5, 2, 3)]
    + [f"mix:w={w},law={LAW}" for w in (0.1, 0.3, 0.5, 0.7, 0.9)]
)
QUICK_LAWS = ["noise:sigma=1", f"mix:w=0.5,law={LAW}"]
FULL = dict(P=[16, 64], trees=300, samples=4096)
QUICK = dict(P=[8], trees=12, samples=256)


def point(dl: str, P: list[int], trees: int, samples: int, seed: int) -> list[dict]:
    def compute():
        key = jax.random.key(seed)
        st = draft_stats(key, LAW, dl, samples=samples)._asdict()
        rows = [
            common.row(LAW, None, nm, st[nm].mean, st[nm].ci95, samples, seed, draft_law=dl)
            for nm in ("entropy", "cross_entropy", "kl", "tv")
        ]
        o = drafter_values(key, "oracle", LAW, None, P, trees)
        q = drafter_values(key, "topq", LAW, dl, P, trees)
        for i, p in enumerate(P):
            g = Stat.of(o[:, i] - q[:, i])
            s = Stat.of(q[:, i])
            rows.append(common.row(LAW, p, "gap", g.mean, g.ci95, trees, seed, draft_law=dl))
            rows.append(common.row(LAW, p, "E[X] topq", s.mean, s.ci95, trees, seed, draft_law=dl))
        return rows

    params = {"law": LAW, "draft_law": dl, "P": P, "trees": trees, "samples": samples, "seed": seed}
    params["v"] = brwsim.__version__
    return common.cached(NAME, params, compute)


def family(dl: str) -> str:
    return dl.split(":")[0]


def plot(rows, P):
    plt = common.setup_matplotlib()
    fig, ax = plt.subplots()
    markers = {"noise": "o", "temp": "s", "mix": "^"}
    H = np.mean([r["mean"] for r in rows if r["statistic"] == "entropy"])
    for j, p in enumerate(P):
        for fam, mk in markers.items():
            pts = []
            for r in rows:
                if r["statistic"] == "gap" and r["P"] == p and family(r["draft_law"]) == fam:
                    ce = next(x for x in rows if x["statistic"] == "cross_entropy" and x["draft_law"] == r["draft_law"])
                    pts.append((ce["mean"], r["mean"], r["ci95"], ce["ci95"]))
            if not pts:
                continue
            pts.sort()
            x, y, c, cx = (np.array(t) for t in zip(*pts, strict=True))
            ax.errorbar(x, y, yerr=c, xerr=cx, fmt=mk + "-", ms=4, capsize=2, color=common.PALETTE[j],
                        label=f"{fam}, P={p}", alpha=0.85)  # fmt: skip
    ax.axvline(H, color="k", lw=0.8, ls=":", label=f"E[H(p)] = {H:.2f} (q = p)")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("drafter cross-entropy E[H(p, q)] (nats)")
    ax.set_ylabel("gap E[X oracle] - E[X top-P by Q]")
    ax.set_title(f"Gap to the oracle on {LAW} (95% CIs, paired)", fontsize=9)
    ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return common.save_figure(fig, NAME)


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    cfg = QUICK if args.quick else FULL
    laws = QUICK_LAWS if args.quick else FULL_LAWS
    rows = []
    for dl in laws:
        rows += point(dl, cfg["P"], cfg["trees"], cfg["samples"], args.seed)
    common.write_rows(NAME, rows)
    png = plot(rows, cfg["P"])
    lines = []
    for dl in laws:
        ce = next(r for r in rows if r["statistic"] == "cross_entropy" and r["draft_law"] == dl)
        gaps = ", ".join(
            f"gap at P={r['P']} {r['mean']:.3f}+-{r['ci95']:.3f}"
            for r in rows
            if r["statistic"] == "gap" and r["draft_law"] == dl
        )
        lines.append(f"{dl}: H(p,q) = {ce['mean']:.3f}, {gaps}")
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    for line in main()["summary"]:
        print(line)
