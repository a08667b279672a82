"""``brwsim laws --law SPEC [--json]``: a law's moments, spine statistics and bounds, no trees.

Prints mu and mu_2 (exact where a closed form exists, else Monte Carlo with
its standard error; for Markov laws the spine's long-run values and every
state's own), the spine's threshold-tree curve t -> (E[N(t)], E[tau_t] - 1)
and, for each P, the rigorous bounds and (labelled apart) the predictions or
i.i.d.-only closed forms. All values count X = accepted draft tokens per call
(tokens per call = X + 1).
"""

from __future__ import annotations

import math

import jax
import numpy as np

from .._devices import available_memory
from .._stats import CONVENTION, MARGIN_Z
from ..errors import BrwsimError, check_P_list, check_positive_int
from ..estimate import check_spine, check_tables
from ..laws import parse_law
from ..spine import SpineCurves, law_curves
from ..spine._walks import POINTS_MAX
from ..theory import KINDS, bounds_from_curves, moments
from ._args import P_list, emit
from ._table import bound_cells, bound_groups, bound_header, bound_notes, group_header


def _curve(curves: SpineCurves, walks: int) -> dict:
    hi = min(curves.limit, curves.coverage) * (1 - 1e-9)
    spine: dict = {"walks": walks, "coverage": curves.coverage}
    if hi > 0:
        t = np.linspace(0.0, hi, 9)[1:]
        N, N_se, val, val_se = curves.threshold_curve(t)
        spine["curve"] = [
            {"t": float(a), "N": float(b), "N_se": float(c), "value": float(d), "value_se": float(e)}
            for a, b, c, d, e in zip(t, N, N_se, val, val_se, strict=True)
        ]
    return spine


WALK_STEP_BYTES = 64  # per walk and step: xi, H, M2 (float64) and the state while walking, then stacked and summed
MAX_STEPS = 4000  # law_curves' cap on a walk's steps (and POINTS_MAX // walks, when fewer)
WALKS_MAX = 2**32 - 1  # walk indices are uint32
SEED_MAX = 2**63 - 1  # jax.random.key takes a signed 64-bit seed


def check_walks_memory(law, walks: int, P_max: int, mu: float) -> None:
    """Refuse ``walks`` whose spine arrays cannot fit in the memory available, naming the need and the max.

    Steps per walk: about twice the mean depth ``s_max / mu`` the walks run to (all stop within 64 steps of
    a zero-entropy law), at most :data:`MAX_STEPS`; an O(V) step holds a few float32 rows per walk too.
    """
    s_max = max(math.log(max(mu, 1e-300) * P_max), 0.0) + 3.0 if mu > 0 else 0.0
    steps = min(
        MAX_STEPS, max(64, POINTS_MAX // walks), 64 + (math.ceil(min(2 * s_max / mu, MAX_STEPS)) if mu > 0 else 0)
    )
    costly = any(sub.costly_spine_step(law.spine_needs_rank) for sub in law.sub_laws())
    per_walk = WALK_STEP_BYTES * steps + (12 * law.vocab if costly else 0)
    avail = available_memory()
    if avail is None or walks * per_walk <= 0.8 * avail:
        if walks > WALKS_MAX:
            raise BrwsimError(f"--walks must be at most {WALKS_MAX} (walk indices are 32-bit), got {walks}")
        return
    fit = min(max(int(0.8 * avail // per_walk), 0), WALKS_MAX)
    raise BrwsimError(
        f"--walks {walks} needs about {walks * per_walk / 1e9:.3g} GB (up to {steps} steps of {WALK_STEP_BYTES} bytes "
        f"per walk{', plus O(V) rows' if costly else ''}), more than the {0.8 * avail / 1e9:.3g} GB a run may use "
        f"here (80% of the memory available): the largest that fits is about --walks {fit}"
    )


def laws_summary(spec, P_list, walks: int = 8192, seed: int = 0, margin_z: float = MARGIN_Z) -> dict:
    """The JSON object of ``brwsim laws``."""
    law = parse_law(spec)
    P_list = check_P_list(P_list)
    walks = check_positive_int("walks", walks, minimum=2)
    seed = check_positive_int("seed", seed, minimum=0)
    if seed > SEED_MAX:
        raise BrwsimError(f"seed must be an integer in [0, {SEED_MAX}] (a 64-bit PRNG seed), got {seed}")
    check_tables(law)  # every size planned before any slow work
    check_spine(law, walks, "brwsim laws")
    key = jax.random.key(seed)
    mom = moments(key, law)
    check_walks_memory(law, walks, max(P_list), mom.mu)
    out: dict = {
        "law": spec if isinstance(spec, str) else law.spec(),
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
        out["states"] = {name: s.to_dict() for name, s in mom.per_state.items()}
    curves = law_curves(key, law, max(P_list), walks=walks, mu_hint=mom.mu)
    out["spine"] = _curve(curves, walks)
    bounds = bounds_from_curves(curves, P_list, mom.mu, mom.mu2, law.is_iid, margin_z)
    out["results"] = [{"P": b.P} | b.to_dict() for b in bounds]
    out["kinds"] = KINDS
    return out


def print_summary(d: dict) -> None:
    def pm(v, se):
        return f"{v:.4f}" + (f" +- {1.96 * se:.4f}" if se else " (exact)")

    kind = "i.i.d." if d["iid"] else "Markov (mu, mu_2: the spine's long-run values)"
    print(f"law {d['law']}   {kind}, V = {d['vocab']}")
    print(f"mu = {pm(d['mu'], d['mu_se'])} nats, mu_2 = {pm(d['mu2'], d['mu2_se'])} nats^2")
    for name, s in (d.get("states") or {}).items():
        print(f"  state {name}: long-run fraction {s['fraction']:.4f}, mu = {s['mu']:.4f}, mu_2 = {s['mu2']:.4f}")
    sp = d["spine"]
    print(f"spine: {sp['walks']} walks, observed up to S = {sp['coverage']:.3f}")
    if "curve" in sp:
        print(f"{'t':>8} {'E[N(t)]':>12} {'E[tau_t]-1':>11}   (threshold tree {{V <= t}}: size, value)")
        for r in sp["curve"]:
            print(f"{r['t']:>8.3f} {r['N']:>12.2f} {r['value']:>11.4f}")
    print(d["convention"])
    groups = bound_groups(d["results"])
    if groups:
        print(group_header(7, groups))
    print(f"{'P':>7}" + bound_header(groups) + f"  {'dual est +- se':>18}")
    for r in d["results"]:
        print(f"{r['P']:>7}" + bound_cells(r, groups) + f"  {r['dual_estimate']:>9.4f} +- {r['dual_se']:.4f}")
    for note in bound_notes(groups):
        print(note)


def _cmd(args) -> int:
    d = laws_summary(args.law, P_list(args.P), walks=args.walks, seed=args.seed)
    return emit(args, d, print_summary)


def add_parser(sub) -> None:
    s = sub.add_parser("laws", help="a law's entropy moments and spine statistics (no trees)")
    s.add_argument("--law", required=True, help="law SPEC, e.g. dirichlet:V=1000,alpha=0.1 or examples/two_state.json")
    s.add_argument("--P", default="1,4,16,64,1024", help="budgets for the bounds (default 1,4,16,64,1024)")
    s.add_argument("--walks", type=int, default=8192, help="spine walks (default 8192)")
    s.add_argument("--seed", type=int, default=0, help="PRNG seed (default 0)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.set_defaults(func=_cmd)
