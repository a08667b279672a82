"""Theory: entropy moments and the closed-form bounds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from jax.random import key

import brwsim
from brwsim import laws, spine, theory
from brwsim.errors import BrwsimError
from brwsim.testing import enumerate_fixed

# a small Markov law where the spine's stationary moments make `renewal` fail
SMALL_MARKOV = {
    "states": {"c": "fixed:probs=0.97/0.02/0.01", "u": "dirichlet:V=8,alpha=0.5"},
    "initial": "c",
    "kernel": {"c": [[0.97, 0.03], [0.1, 0.9]], "u": [[0.3, 0.7], [0.05, 0.95]]},
}


def test_closed_forms_values():
    mu, mu2 = 1.0, 2.0
    P = 100
    assert theory.theorem1_leading(P, mu, mu2) == pytest.approx(3 * math.log(100))
    assert theory.renewal(P, mu, mu2) == pytest.approx(math.log(100) + 1 + 2 - 1)
    assert theory.asymptotic(P, mu, mu2) == pytest.approx(math.log(100) + 1 - 1)
    # renewal is capped by the trivial bound P, and is P when mu P < 1
    assert theory.renewal(2, 1.0, 5.0) == 2.0
    assert theory.renewal(3, 0.2, 0.1) == 3.0


@pytest.mark.parametrize(
    "args",
    [
        (0, 1.0, 2.0),
        (0.5, 1.0, 2.0),
        (-3, 1.0, 2.0),
        (10, -0.1, 1.0),
        (10, 1.0, 0.5),
        (10, math.nan, 1.0),
        (10, 1.0, math.inf),
        (math.inf, 1.0, 2.0),
        ("10", 1.0, 2.0),
    ],
)
@pytest.mark.parametrize("f", [theory.theorem1_leading, theory.renewal, theory.asymptotic])
def test_bad_arguments_raise(f, args):
    with pytest.raises(BrwsimError) as e:
        f(*args)
    assert "\n" not in str(e.value)


def test_spine_bound_bad_arguments_raise():
    xi = np.ones((4, 3))
    for bad in ([0], [0.5], [], ["x"]):
        with pytest.raises(BrwsimError):
            theory.spine_bounds(xi, bad)
    with pytest.raises(BrwsimError):
        theory.spine_bounds(xi, [4], margin_z=-1)
    with pytest.raises(BrwsimError):
        theory.spine_bounds(np.ones(5), [4])  # not [walks, depth]
    with pytest.raises(BrwsimError):
        theory.spine_bounds(-np.ones((4, 3)), [4])  # negative surprisal


def test_zero_entropy_is_infinite_not_a_division():
    assert theory.theorem1_leading(16, 0.0, 0.0) == math.inf
    assert theory.asymptotic(16, 0.0, 0.0) == math.inf
    assert theory.renewal_formula(16, 0.0, 0.0) == math.inf
    assert theory.renewal(16, 0.0, 0.0) == 16.0  # min(P, +inf)
    law = laws.parse_law("fixed:probs=1")
    res = brwsim.simulate(law, P=[1, 8], trees=2, seed=0)
    for r in res.results:
        assert r.stat.mean == pytest.approx(r.P)  # a chain of certain tokens
        assert r.bounds.theorem1_leading == math.inf
        assert r.bounds.asymptotic == math.inf
        assert r.bounds.splitting.upper == r.P and r.bounds.dual.upper == r.P


def test_dirichlet_closed_form_vs_monte_carlo():
    law = laws.parse_law("dirichlet:V=20,alpha=0.3")
    mu, mu2 = law.exact_moments()
    mc = theory.moments(key(0), laws.LogitNormal(V=2, sigma=1.0))  # warm path check: MC has a reported SE
    assert mc.mu_se > 0 and not mc.exact
    h, m = theory.sample_moments(key(7), law, 20000)
    se_h, se_m = h.std(ddof=1) / math.sqrt(h.size), m.std(ddof=1) / math.sqrt(m.size)
    assert abs(h.mean() - mu) < 4 * se_h
    assert abs(m.mean() - mu2) < 4 * se_m


def test_fixed_and_zipf_closed_forms():
    p = np.array([0.5, 0.25, 0.125, 0.125])
    mom = theory.moments(key(0), laws.fixed_law(p))
    assert mom.exact and mom.mu_se == 0
    assert mom.mu == pytest.approx(-(p * np.log(p)).sum())
    assert mom.mu2 == pytest.approx((p * np.log(p) ** 2).sum())
    z = laws.parse_law("zipf:V=50,s=1.3")
    q = np.arange(1, 51.0) ** -1.3
    q /= q.sum()
    assert theory.moments(key(0), z).mu == pytest.approx(-(q * np.log(q)).sum(), rel=1e-9)


def test_markov_stationary_moments_match_walks():
    law = laws.markov_law(SMALL_MARKOV)
    mom = theory.moments(key(0), law)
    assert set(mom.per_state) == {"c", "u"}
    # each state's values are its own law's moments
    for name, sub in zip(["c", "u"], law.laws, strict=True):
        mu_s, mu2_s = sub.exact_moments()
        assert mom.per_state[name].mu == pytest.approx(mu_s)
        assert mom.per_state[name].mu2 == pytest.approx(mu2_s)
    mu_w, mu_w_se, mu2_w, mu2_w_se, frac = spine.spine_moments_walks(key(1), law, walks=256, depth=40, burn=12)
    assert abs(mu_w - mom.mu) < 4 * math.hypot(mu_w_se, mom.mu_se)
    assert abs(mu2_w - mom.mu2) < 4 * math.hypot(mu2_w_se, mom.mu2_se)
    # a walk's fraction of time in "c" lies in [0, 1], so its variance is at most f (1 - f):
    # sqrt(f (1 - f) / walks) bounds the standard error of the mean over the 256 walks
    f = frac[0]
    assert abs(f - mom.per_state["c"].fraction) < 4 * math.sqrt(f * (1 - f) / 256) + 1e-9


def test_simulate_carries_all_five_bounds():
    res = brwsim.simulate("dirichlet:V=6,alpha=0.5", P=[1, 4], trees=50, seed=0)
    d = res.to_dict()
    assert d["mu_se"] == 0 and d["mu2_se"] == 0
    for r in d["results"]:
        assert set(r["bounds"]) == {"dual", "splitting", "renewal"}  # rigorous for an i.i.d. law
        assert set(r["predictions"]) == {"asymptotic", "theorem1_leading"}
        assert r["mean"] <= r["bounds"]["dual"] + 4 * r["se"]


def test_renewal_fails_for_a_markov_law():
    """The warning of docs/theory.md (c): fed with the spine's stationary moments, renewal is not a bound."""
    law = laws.markov_law(SMALL_MARKOV)
    res = brwsim.simulate(law, P=[16], trees=300, seed=0)
    r = res.results[0]
    assert r.stat.mean > r.bounds.renewal + 4 * r.stat.se  # renewal fails
    assert r.stat.mean <= r.bounds.dual.upper + 4 * r.stat.se  # the spine bounds hold
    assert r.stat.mean <= r.bounds.splitting.upper + 4 * r.stat.se


REL = 2e-7  # a law stores its log-probabilities in float32


def _markov(states: dict, initial, kernel: dict, order: list[str]):
    """The same Markov law with its states listed in ``order``."""
    idx = [list(states).index(n) for n in order]
    return laws.markov_law(
        {
            "states": {n: states[n] for n in order},
            "initial": initial if isinstance(initial, str) else {n: initial[n] for n in order},
            "kernel": {n: [[row[i] for i in idx] for row in kernel[n]] for n in order},
        }
    )


def _entropy(p) -> float:
    p = np.asarray(p, np.float64)
    return float(-(p * np.log(p)).sum())


def test_absorbing_states_give_the_starting_states_entropy_in_every_order():
    """Two absorbing states, started in the first: the walk never leaves it, so mu = its own entropy."""
    states = {"a": "fixed:probs=0.6/0.3/0.1", "b": "fixed:probs=0.25/0.25/0.25/0.25"}
    kernel = {"a": [[1.0, 0.0]], "b": [[0.0, 1.0]]}
    for order in (["a", "b"], ["b", "a"]):
        mom = theory.moments(key(0), _markov(states, "a", kernel, order))
        assert mom.mu == pytest.approx(_entropy([0.6, 0.3, 0.1]), rel=REL)
        m2 = float((np.array([0.6, 0.3, 0.1]) * np.log([0.6, 0.3, 0.1]) ** 2).sum())
        assert mom.mu2 == pytest.approx(m2, rel=REL)
        assert mom.per_state["a"].fraction == pytest.approx(1.0) and mom.per_state["b"].fraction == 0.0


def test_reducible_law_long_run_moments_do_not_depend_on_the_state_order():
    """A transient start splits between two absorbing states by the rank of its first child: the long-run
    law is the absorption probabilities (0.7 into a, 0.3 into b), computed here by hand, in all 6 orders."""
    states = {"t": "fixed:probs=0.7/0.3", "a": "fixed:probs=0.6/0.3/0.1", "b": "fixed:probs=0.25/0.25/0.25/0.25"}
    kernel = {"t": [[0, 1, 0], [0, 0, 1]], "a": [[0, 1, 0]], "b": [[0, 0, 1]]}
    want_mu = 0.7 * _entropy([0.6, 0.3, 0.1]) + 0.3 * math.log(4)
    want_mu2 = 0.7 * float((np.array([0.6, 0.3, 0.1]) * np.log([0.6, 0.3, 0.1]) ** 2).sum()) + 0.3 * math.log(4) ** 2
    for order in itertools.permutations(states):
        mom = theory.moments(key(0), _markov(states, "t", kernel, list(order)))
        assert mom.mu == pytest.approx(want_mu, rel=REL), order
        assert mom.mu2 == pytest.approx(want_mu2, rel=REL), order


def test_periodic_law_long_run_moments():
    """A chain that alternates deterministically between two states spends half its time in each."""
    states = {"a": "fixed:probs=0.6/0.3/0.1", "b": "fixed:probs=0.5/0.5"}
    kernel = {"a": [[0.0, 1.0]], "b": [[1.0, 0.0]]}
    for order in (["a", "b"], ["b", "a"]):
        mom = theory.moments(key(0), _markov(states, "a", kernel, order))
        assert mom.mu == pytest.approx(0.5 * _entropy([0.6, 0.3, 0.1]) + 0.5 * math.log(2), rel=REL)


# ---------------------------------------------------------------------------
# closed forms at values other than mu = 1, against expressions computed here


CASES = [(0.4, 0.5, 37), (0.8979457, 1.1216207, 64), (1.7, 4.0, 256), (5.0339, 26.7637, 1000), (2.5, 7.0, 10**6)]


@pytest.mark.parametrize("mu,mu2,P", CASES)
def test_renewal_is_the_wald_lorden_bound_minimised_over_s(mu, mu2, P):
    """renewal = min(P, min over s of [s/mu + mu_2/mu^2 - 1 + P e^-s]): Wald and Lorden's E[tau_s] bound put
    in the splitting bound, minimised numerically here, not by the closed form's s = ln(mu P)."""
    s = np.linspace(0.0, math.log(mu * P) + 20, 400001)
    numeric = float(np.min(s / mu + mu2 / mu**2 - 1 + P * np.exp(-s)))
    assert theory.renewal(P, mu, mu2) == pytest.approx(min(P, numeric), rel=1e-8, abs=1e-8)


@pytest.mark.parametrize("mu,mu2,P", CASES)
def test_theorem1_leading_and_asymptotic_values(mu, mu2, P):
    a = 1 / mu + mu2 / mu**2  # the paper's slope a = (mu + mu_2) / mu^2
    assert theory.theorem1_leading(P, mu, mu2) == pytest.approx(a * math.log(P), rel=1e-12)
    # the renewal theorem: E[tau_t] = t/mu + mu_2/(2 mu^2) + o(1) at the oracle's threshold t = ln(mu P)
    t = math.log(P) + math.log(mu)
    assert theory.asymptotic(P, mu, mu2) == pytest.approx(t / mu + 0.5 * mu2 / mu**2 - 1, rel=1e-12)


def test_zipf_closed_form_moments():
    V, s = 50, 1.3
    w = np.arange(1, V + 1.0) ** -s
    p = w / w.sum()
    mu, mu2 = laws.parse_law(f"zipf:V={V},s={s}").exact_moments()
    assert mu == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-9)
    assert mu2 == pytest.approx(float((p * np.log(p) ** 2).sum()), rel=1e-9)
    assert mu2 > mu**2


# ---------------------------------------------------------------------------
# the asymptotic prediction against the exact oracle at large P


def _threshold_residual(probs, t_lo: float, t_hi: float):
    """r(t) = [U(t) - t/mu - mu_2/(2 mu^2)] - [N(t) e^-t - 1/mu] on [t_lo, t_hi] for the deterministic tree
    of ``probs``, from its nodes (U(t) = 1 + the mass of the non-root nodes with V <= t, N(t) their number);
    returns max |r| over the jump points (both sides) and a fine grid (docs/theory.md, bound (d))."""
    p = np.asarray(probs, np.float64)
    lp = np.log(p)
    mu, mu2 = float(-(p * lp).sum()), float((p * lp**2).sum())
    V, frontier = [], np.zeros(1)
    while frontier.size:  # every node with V <= t_hi, breadth first
        nxt = np.add.outer(np.asarray(frontier), -lp).ravel()
        nxt = nxt[nxt <= t_hi]
        V.append(nxt)
        frontier = nxt
    v = np.sort(np.concatenate(V))
    t = np.unique(np.concatenate([np.linspace(t_lo, t_hi, 20001), v[(v >= t_lo) & (v <= t_hi)]]))
    count = np.searchsorted(v, t, side="right").astype(np.float64)
    mass = np.concatenate([[0.0], np.cumsum(np.exp(-v))])[count.astype(int)]
    r_right = (1 + mass - t / mu - mu2 / (2 * mu**2)) - (count * np.exp(-t) - 1 / mu)
    cl = np.searchsorted(v, t, side="left")
    massl = np.concatenate([[0.0], np.cumsum(np.exp(-v))])[cl]
    r_left = (1 + massl - t / mu - mu2 / (2 * mu**2)) - (cl * np.exp(-t) - 1 / mu)
    return float(max(np.abs(r_right).max(), np.abs(r_left).max())), mu, mu2


@pytest.mark.parametrize("probs", [[0.6, 0.3, 0.1], [0.5, 0.3, 0.2]])
def test_asymptotic_prediction_converges_to_the_exact_oracle(probs):
    """On a deterministic non-lattice law the oracle is its dual bound exactly, so
    |oracle(P) - asymptotic(P)| <= max |r| within one nat of ln(mu P) (the tolerance docs/theory.md derives);
    that residual vanishes as P grows (the renewal theorem), so a wrong formula cannot hide in it."""
    P_max = 2**16
    exact = enumerate_fixed(probs, P_max)
    for P in (2**10, 2**13, 2**16):
        R, mu, mu2 = _threshold_residual(probs, math.log(mu_of(probs) * P) - 1, math.log(mu_of(probs) * P) + 1)
        assert R < 0.02
        assert abs(exact[P - 1] - theory.asymptotic(P, mu, mu2)) <= R + 1e-6, P


def mu_of(probs) -> float:
    p = np.asarray(probs, np.float64)
    return float(-(p * np.log(p)).sum())
