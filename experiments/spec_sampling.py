"""Figure (b): accepted against drafted tokens under exact stochastic verification.

The analogue of Kobus and Gunduz's figure 3 on a simulated tree. Per verifier
call, with k drafted tokens: speculative sampling along one chain (sequence),
Yin et al.'s batch of min(4, k) chains, a SpecInfer-style tree of i.i.d.
candidates (all verified by recursive rejection sampling), and exponential
races with the optimal drafting tree for the measured law of R (plus the race
chain), beside the deterministic top-k-by-Q tree (the target samples and the
tree is matched). Every scheme outputs exactly the target's distribution.
Also: the measured rejection count over T tokens next to the summed TV along
the output (Yin et al.'s identity). X = accepted draft tokens per call.
"""

from __future__ import annotations

import jax
import numpy as np

import brwsim
from brwsim import Stat
from brwsim import specsampling as ss
from brwsim.drafters import draft_stats, drafter_values
from brwsim.laws import parse_law
from experiments import common

NAME = "spec_sampling"
LAW = "logitnormal:V=256,sigma=4"
DRAFT_LAW = "noise:sigma=0.5"
FULL = dict(k=[1, 2, 4, 8, 16, 32], runs=4000, samples=20000, T=16)
QUICK = dict(k=[2], runs=200, samples=1000, T=3)
SCHEMES = ["sequence", "batch", "tree", "race optimal tree", "race chain", "deterministic top-k by Q"]


def points(k: int, runs: int, samples: int, seed: int) -> list[dict]:
    def compute():
        rows = []
        key = jax.random.key(seed)
        for scheme in ("sequence", "batch", "tree"):
            x = ss.call_accepted(key, LAW, DRAFT_LAW, ss.shape(scheme, k), runs)
            s = Stat.of(x)
            rows.append(common.row(LAW, k, "E[X]", s.mean, s.ci95, runs, seed, scheme=scheme))
        pi, H, H_se = ss.race_rank_law(key, LAW, DRAFT_LAW, samples=samples)
        for scheme, paths in (
            ("race optimal tree", ss.optimal_race_tree(pi, k)),
            ("race chain", [(0,) * d for d in range(1, k + 1)]),
        ):
            s = Stat.of(ss.race(key, LAW, DRAFT_LAW, paths, runs).X)
            rows.append(common.row(LAW, k, "E[X]", s.mean, s.ci95, runs, seed, scheme=scheme))
        s = Stat.of(drafter_values(key, "topq", LAW, DRAFT_LAW, [k], runs)[:, 0])
        rows.append(common.row(LAW, k, "E[X]", s.mean, s.ci95, runs, seed, scheme="deterministic top-k by Q"))
        V = parse_law(LAW).vocab
        rows.append(common.row(LAW, k, "H[R]", H, 1.96 * H_se, samples, seed))
        rows.append(common.row(LAW, k, "kobus_bound_X", ss.kobus_bound(V, k, H) - 1, 0.0, samples, seed))
        return rows

    params = {"law": LAW, "draft_law": DRAFT_LAW, "k": k, "runs": runs, "samples": samples, "seed": seed}
    params["v"] = brwsim.__version__
    return common.cached(NAME, params, compute)


def identity_points(T: int, runs: int, seed: int) -> list[dict]:
    def compute():
        rows = []
        key = jax.random.key(seed)
        for label, widths in (("sequence, chain >= T", (1,) * T), ("batch of 4 chains", (4,) + (1,) * (T - 1))):
            d = ss.rejection_identity(key, LAW, DRAFT_LAW, widths, T, runs)
            for nm, st in d._asdict().items():
                rows.append(common.row(LAW, None, nm, st.mean, st.ci95, runs, seed, scheme=label, T=T))
        st = draft_stats(key, LAW, DRAFT_LAW)
        rows.append(common.row(LAW, None, "mean_tv", st.tv.mean, st.tv.ci95, 4096, seed))
        return rows

    params = {"law": LAW, "draft_law": DRAFT_LAW, "T": T, "runs": runs, "seed": seed, "v": brwsim.__version__}
    return common.cached(NAME + "_identity", params, compute)


def plot(rows):
    plt = common.setup_matplotlib()
    fig, ax = plt.subplots()
    for i, scheme in enumerate(SCHEMES):
        pts = sorted((r["P"], r["mean"], r["ci95"]) for r in rows if r.get("scheme") == scheme)
        k, m, c = (np.array(t) for t in zip(*pts, strict=True))
        ax.errorbar(k, m, yerr=c, fmt="o-", ms=3, capsize=2, color=common.PALETTE[i], label=scheme)
    pts = sorted((r["P"], r["mean"]) for r in rows if r["statistic"] == "kobus_bound_X")
    ax.plot(*zip(*pts, strict=True), "k--", lw=1.2, label="Kobus-Gunduz bound (log V + log(k+1))/H[R] - 1")
    top = max(r["mean"] for r in rows if r["statistic"] == "E[X]")
    ax.set_ylim(0, top * 1.5)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("drafted tokens per call k")
    ax.set_ylabel("E[X] (accepted draft tokens per call)")
    ax.set_title(f"{LAW}, drafter {DRAFT_LAW}; exact output for every scheme", fontsize=9)
    ax.legend(frameon=False, fontsize=7, loc="upper left")
    fig.tight_layout()
    return common.save_figure(fig, NAME)


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    cfg = QUICK if args.quick else FULL
    rows = []
    for k in cfg["k"]:
        rows += points(k, cfg["runs"], cfg["samples"], args.seed)
    rows += identity_points(cfg["T"], cfg["runs"], args.seed)
    common.write_rows(NAME, rows)
    png = plot(rows)
    lines = []
    for k in (1, 4, 16):
        got = [r for r in rows if r["P"] == k and r["statistic"] == "E[X]"]
        if got:
            lines.append(f"k={k}: " + ", ".join(f"{r['scheme']} {r['mean']:.3f}+-{r['ci95']:.3f}" for r in got))
    for scheme in ("sequence, chain >= T", "batch of 4 chains"):
        d = {r["statistic"]: r for r in rows if r.get("scheme") == scheme}
        lines.append(
            f"{scheme}, T={cfg['T']}: rejections {d['rejections']['mean']:.4f}+-{d['rejections']['ci95']:.4f}, "
            f"summed TV at verified positions {d['tv_verified']['mean']:.4f}+-{d['tv_verified']['ci95']:.4f}, "
            f"paired difference {d['difference']['mean']:.4f}+-{d['difference']['ci95']:.4f}"
        )
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    for line in main()["summary"]:
        print(line)
