"""``brwsim laws --law SPEC [--json]``: a law's moments and spine statistics, no trees.

Prints mu and mu_2 (exact where a closed form exists, else Monte Carlo with
its standard error; for Markov laws the spine's long-run values and every
state's own), the spine's threshold-tree curve t -> (E[N(t)], E[tau_t] - 1)
and, for each P, the closed-form bounds and the spine's splitting and dual
bounds. All values count X = accepted draft tokens per call (tokens per
call = X + 1).
"""

from __future__ import annotations

import json
import math

import numpy as np

from .errors import check_positive_int


def laws_summary(spec: str, P_list, walks: int = 8192, seed: int = 0, margin_z: float = 1.96) -> dict:
    """The JSON object of ``brwsim laws``."""
    from . import theory
    from .errors import check_P_list
    from .estimate import CONVENTION
    from .laws import law_spec, parse_law
    from .spine import law_curves

    law = parse_law(spec)
    P_list = check_P_list(P_list)
    walks = check_positive_int("walks", walks, minimum=2)
    seed = check_positive_int("seed", seed, minimum=0)
    mom = theory.moments(law, seed=seed)
    out: dict = {
        "law": spec if isinstance(spec, str) else law_spec(law),
        "convention": CONVENTION,
        "iid": law.is_iid,
        "vocab": law.vocab,
        "mu": mom.mu,
        "mu2": mom.mu2,
        "mu_se": mom.mu_se,
        "mu2_se": mom.mu2_se,
        "exact": mom.exact,
    }
    if mom.per_state:
        out["states"] = mom.per_state
    curves = law_curves(law, max(P_list), walks=walks, seed=seed, mu_hint=mom.mu)
    hi = min(curves.limit, curves.coverage) * (1 - 1e-9)
    spine = {"walks": walks, "coverage": curves.coverage}
    if hi > 0:
        t = np.linspace(0.0, hi, 9)[1:]
        N, N_se, val, val_se = curves.threshold_curve(t)
        spine["curve"] = [
            {"t": float(a), "N": float(b), "N_se": float(c), "value": float(d), "value_se": float(e)}
            for a, b, c, d, e in zip(t, N, N_se, val, val_se, strict=True)
        ]
    out["spine"] = spine
    rows = []
    for P in P_list:
        b = {name: f(P, mom.mu, mom.mu2) for name, f in theory.CLOSED_FORM.items()}
        sp, du = curves.splitting(P, margin_z), curves.dual(P, margin_z)
        b["splitting"], b["dual"] = sp.upper, du.upper
        rows.append(
            {
                "P": P,
                "bounds": b,
                "dual_estimate": du.estimate,
                "dual_se": du.se,
                "dual_s": du.s,
                "splitting_s": sp.s,
            }
        )
    out["results"] = rows
    return out


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == math.inf:
        return "inf"
    return f"{x:.4f}"


def print_summary(d: dict) -> None:
    def pm(v, se):
        return f"{v:.4f}" + (f" +- {1.96 * se:.4f}" if se else " (exact)")

    print(f"law {d['law']}   {'i.i.d.' if d['iid'] else 'Markov'}, V = {d['vocab']}")
    print(f"mu = {pm(d['mu'], d['mu_se'])} nats, mu_2 = {pm(d['mu2'], d['mu2_se'])} nats^2")
    for name, s in (d.get("states") or {}).items():
        print(f"  state {name}: long-run fraction {s['fraction']:.4f}, mu = {s['mu']:.4f}, mu_2 = {s['mu2']:.4f}")
    sp = d["spine"]
    print(f"spine: {sp['walks']} walks, observed up to S = {sp['coverage']:.3f}")
    if "curve" in sp:
        print(f"{'t':>8} {'E[N(t)]':>12} {'E[tau_t]-1':>11}   (threshold tree {{V <= t}}: size, value)")
        for r in sp["curve"]:
            print(f"{r['t']:>8.3f} {r['N']:>12.2f} {r['value']:>11.4f}")
    print(f"{d['convention']}; splitting/dual are upper 95% values")
    names = list(d["results"][0]["bounds"]) if d["results"] else []
    print(f"{'P':>7}  " + "  ".join(f"{n:>16}" for n in names) + f"  {'dual est +- se':>18}")
    for r in d["results"]:
        cells = "  ".join(f"{_fmt(r['bounds'][n]):>16}" for n in names)
        print(f"{r['P']:>7}  {cells}  {r['dual_estimate']:>9.4f} +- {r['dual_se']:.4f}")


def _cmd_laws(args) -> int:
    from .cli import _P_list

    d = laws_summary(args.law, _P_list(args.P), walks=args.walks, seed=args.seed)
    if args.json:
        print(json.dumps(d))
    else:
        print_summary(d)
    return 0


def add_parser(subparsers) -> None:
    s = subparsers.add_parser("laws", help="a law's entropy moments and spine statistics (no trees)")
    s.add_argument("--law", required=True, help="law SPEC, e.g. dirichlet:V=1000,alpha=0.1 or examples/two_state.json")
    s.add_argument("--P", default="1,4,16,64,1024", help="budgets for the bounds (default 1,4,16,64,1024)")
    s.add_argument("--walks", type=int, default=8192, help="spine walks (default 8192)")
    s.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.set_defaults(func=_cmd_laws)
