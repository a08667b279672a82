"""Figure (a): E[X] against P for the oracle and practical drafters.

One i.i.d. law, two levels of drafter logit noise (q = softmax(log p + sigma Z)).
Drafters: the oracle T*_P (perfect knowledge), top-P by Q, EAGLE-2/3's dynamic
tree (top_k 10, depth 7, total_tokens = P), Sequoia's DP tree (positional rates
estimated from the law), a greedy chain and a static binary tree; all on the
same realised trees (paired), beside the theorem1_leading and renewal bounds.
X = accepted draft tokens per verifier call (tokens per call = X + 1).
"""

from __future__ import annotations

import jax
import numpy as np

import brwsim
from brwsim import Stat, theory
from brwsim.drafters import draft_stats, drafter_values
from brwsim.laws import parse_law
from experiments import common

NAME = "drafters"
LAW = "logitnormal:V=256,sigma=4"
DRAFT_LAWS = ["noise:sigma=0.5", "noise:sigma=1.5"]
DRAFTERS = {
    "oracle": "oracle",
    "top-P by Q": "topq",
    "EAGLE-2/3 (10, 7)": "eagle",
    "Sequoia DP": "sequoia",
    "chain": "chain",
    "binary tree": "static:k=2",
}
FULL = dict(P=[1, 2, 4, 8, 16, 32, 64], trees=400, samples=4096)
QUICK = dict(P=[4], trees=8, samples=256)


def points(dl: str, P: list[int], trees: int, seed: int, samples: int) -> list[dict]:
    def compute():
        rows = []
        key = jax.random.key(seed)
        st = draft_stats(key, LAW, dl, samples=samples)._asdict()
        for nm in ("cross_entropy", "kl", "tv"):
            rows.append(common.row(LAW, None, nm, st[nm].mean, st[nm].ci95, trees, seed, draft_law=dl))
        oracle = drafter_values(key, "oracle", LAW, None, P, trees)
        for label, spec in DRAFTERS.items():
            if spec == "sequoia":
                spec = f"sequoia:samples={samples}"
            v = oracle if spec == "oracle" else drafter_values(key, spec, LAW, dl, P, trees)
            for i, p in enumerate(P):
                s = Stat.of(v[:, i])
                g = Stat.of(oracle[:, i] - v[:, i])
                rows.append(common.row(LAW, p, "E[X]", s.mean, s.ci95, trees, seed, draft_law=dl, drafter=label))
                rows.append(common.row(LAW, p, "gap", g.mean, g.ci95, trees, seed, draft_law=dl, drafter=label))
        return rows

    params = {"law": LAW, "draft_law": dl, "P": P, "trees": trees, "seed": seed, "samples": samples}
    params["v"] = brwsim.__version__
    return common.cached(NAME, params, compute)


def bound_rows(P, seed):
    m = theory.moments(jax.random.key(seed), parse_law(LAW))
    rows = [common.row(LAW, None, "mu", m.mu, 1.96 * m.mu_se, 0, seed)]
    for p in P:
        for b in ("theorem1_leading", "renewal"):
            rows.append(common.row(LAW, p, b, theory.CLOSED_FORM[b](p, m.mu, m.mu2), 0.0, 0, seed))
    return rows


def plot(rows, P):
    plt = common.setup_matplotlib()
    fig, axes = plt.subplots(1, len(DRAFT_LAWS), figsize=(11, 4.4), sharey=True)
    for ax, dl in zip(np.atleast_1d(axes), DRAFT_LAWS, strict=True):
        for i, label in enumerate(DRAFTERS):
            pts = sorted(
                (r["P"], r["mean"], r["ci95"])
                for r in rows
                if r.get("draft_law") == dl and r.get("drafter") == label and r["statistic"] == "E[X]"
            )
            x, m, c = (np.array(t) for t in zip(*pts, strict=True))
            ax.plot(x, m, "o-", ms=3, color=common.PALETTE[i], label=label)
            ax.fill_between(x, m - c, m + c, color=common.PALETTE[i], alpha=0.25, lw=0)
        for b in ("theorem1_leading", "renewal"):
            pts = sorted((r["P"], r["mean"]) for r in rows if r["statistic"] == b)
            ax.plot(*zip(*pts, strict=True), color="k", label=b, **common.BOUND_STYLES[b])
        ce = next(r for r in rows if r.get("draft_law") == dl and r["statistic"] == "cross_entropy")
        kl = next(r for r in rows if r.get("draft_law") == dl and r["statistic"] == "kl")
        ax.set_title(f"{dl}: H(p,q) = {ce['mean']:.2f}, KL = {kl['mean']:.2f} nats", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("verifier budget P")
        top = max(r["mean"] for r in rows if r["statistic"] == "E[X]")
        ax.set_ylim(0, top * 1.6)
    np.atleast_1d(axes)[0].set_ylabel("E[X] (accepted draft tokens per call)")
    np.atleast_1d(axes)[0].legend(frameon=False, loc="upper left")
    fig.suptitle(f"Drafters on {LAW} (bands: 95% CI; X excludes the bonus token)")
    fig.tight_layout()
    return common.save_figure(fig, NAME)


def main(argv=None) -> dict:
    args = common.parser(NAME, __doc__).parse_args(argv)
    cfg = QUICK if args.quick else FULL
    rows = bound_rows(cfg["P"], args.seed)
    for dl in DRAFT_LAWS:
        rows += points(dl, cfg["P"], cfg["trees"], args.seed, cfg["samples"])
    common.write_rows(NAME, rows)
    png = plot(rows, cfg["P"])
    lines = []
    for dl in DRAFT_LAWS:
        for P in (8, 64):
            got = [r for r in rows if r.get("draft_law") == dl and r["P"] == P and r["statistic"] == "E[X]"]
            if got:
                txt = ", ".join(f"{r['drafter']} {r['mean']:.3f}+-{r['ci95']:.3f}" for r in got)
                lines.append(f"{dl}, P={P}: {txt}")
    return {"name": NAME, "figures": [png], "rows": len(rows), "summary": lines}


if __name__ == "__main__":
    for line in main()["summary"]:
        print(line)
