"""Defaults and pass-through of the theory and spine-curve entry points, against hand values.

Each test pins what a caller gets without naming an argument (a sample count, a walk count, a state) or
what a named argument changes, on laws whose walks are known by hand: the binary law steps ln 2 at
every depth, so a walk's sums are d ln 2 and its cover is the first d ln 2 past s_max.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from brwsim._keys import Stream, stream_key
from brwsim.errors import BrwsimError
from brwsim.laws import Dirichlet, Temp, fixed_law, markov_law
from brwsim.spine import SpineCurves, law_curves, sample_walks
from brwsim.theory import law_spine_bounds, moments, sample_moments, theorem1_leading

LN2 = math.log(2)

# a temperature one ulp above 1: a tempered Dirichlet law has no closed form in the code (moments by Monte Carlo),
# and its 1/T is 1 in float32, so it draws Dirichlet(alpha)'s rows (a temperature of exactly 1 is the law itself)
NEXT_ABOVE_1 = 1.0 + 2**-52


def test_law_curves_default_to_8192_walks():
    # the documented default walk count, read back from the curves (a fixed law: cheap walks of a few steps)
    assert law_curves(jax.random.key(0), fixed_law([0.5, 0.5]), 1).walks == 8192


def test_law_spine_bounds_pass_walks_and_the_mu_hint_on():
    law = fixed_law([0.5, 0.5])
    with pytest.raises(BrwsimError, match=r"^walks must be >= 2, got 1$"):  # the named count reaches the walks
        law_spine_bounds(jax.random.key(0), law, [8], walks=1)
    # hint 0.001, P = 16: s_max = max(ln 0.016, 0) + 3 = 3, so each walk stops at d = 5 (5 ln 2 = 3.47 > 3), and
    # the 30 nodes below that level are at least P (without the hint the walks reach d = 9). The bounds are those
    # of these curves. (Not the value itself: were the walks too short for P, they would be run further, so a
    # hint no longer changes the bound, only the work.)
    out = law_spine_bounds(jax.random.key(0), law, [16], walks=16, margin_z=0.0, mu_hint=0.001)[16]
    c = law_curves(jax.random.key(0), law, 16, walks=16, mu_hint=0.001)
    assert c.limit == pytest.approx(5 * math.log(2), rel=1e-6)
    assert out.splitting == c.splitting(16, 0.0) and out.dual == c.dual(16, 0.0)


def test_law_spine_bounds_default_to_8192_walks():
    # a random law, so the bound depends on which walks were drawn: the default equals 8192 walks named
    law = fixed_law([0.5, 0.25, 0.25])
    a = law_spine_bounds(jax.random.key(1), law, [8], margin_z=1.0)[8].splitting
    b = law_spine_bounds(jax.random.key(1), law, [8], walks=8192, margin_z=1.0)[8].splitting
    assert (a.estimate, a.se, a.s) == (b.estimate, b.se, b.s)


def test_sample_moments_default_to_the_initial_state():
    law = markov_law(
        {
            "states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.75/0.25"},
            "initial": "a",
            "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
        }
    )
    h, m2 = sample_moments(jax.random.key(0), law, 4)  # state 0 (a): H = ln 2, M2 = (ln 2)^2 at every draw
    assert h.tolist() == pytest.approx([LN2] * 4, rel=1e-5)
    assert m2.tolist() == pytest.approx([LN2**2] * 4, rel=1e-5)


def test_moments_default_to_4096_samples():
    # a law without a closed form (Monte Carlo): the default draws the same 4096 distributions as naming them
    law = Temp(law=Dirichlet(V=4, alpha=0.5), T=NEXT_ABOVE_1)
    a, b = moments(jax.random.key(4), law), moments(jax.random.key(4), law, samples=4096)
    assert (a.mu, a.mu2, a.mu_se, a.mu2_se) == (b.mu, b.mu2, b.mu_se, b.mu2_se)


def test_law_curves_keep_each_walks_own_cover():
    # steps ln 2, ln(10/3), ln 5: the walks stop at different depths, each at its first sum past
    # s_max = ln 1 + 3 = 3 (P = 1, no hint), and that sum is where the walk is observed up to. The coverage is
    # the smallest such sum, read here from the steps themselves (the walks of the same key and stream)
    law = fixed_law([0.5, 0.3, 0.2])
    w = sample_walks(jax.random.key(3), law, 16, s_max=3.0)
    stop = np.nansum(w.xi, axis=1)
    assert np.all(stop > 3.0)
    # the walk that sets the coverage stopped before the deepest one: a cover recomputed from the last
    # column would call it ended (+inf) and miss it
    assert np.isnan(w.xi[np.argmin(stop), -1])
    assert law_curves(jax.random.key(3), law, 1, walks=16).coverage == pytest.approx(stop.min(), rel=1e-12)


def test_splitting_takes_the_left_limit_at_the_first_point_of_an_atom():
    # walk 0: one point at 1 (then ended); walk 1: points 0.5 and 1; both observed up to 1.5.
    # Candidates (left limits): u = 0.5 with C = (0, 0); u = 1 with C = (0, 1); the limit 1.5 with C = (1, 2).
    # With P = 6, z = 2 (se = sqrt(population variance of C / 2 walks)):
    #   u = 0.5: 6 e^-0.5 = 3.639;  u = 1: 0.5 + 6/e + 2 sqrt(0.25 / 2) = 3.414;
    #   u = 1.5: 1.5 + 6 e^-1.5 + 0.707 = 3.546.
    # Counting walk 0's point at 1 but not walk 1's (inside the atom at 1, not a left limit) would give
    # C = (1, 1), 1 + 6/e = 3.207 with se 0: lower, and wrong.
    c = SpineCurves(np.array([[1.0, np.nan], [0.5, 0.5]]), cover=np.array([1.5, 1.5]), min_walks_below=0)
    b = c.splitting(6.0, 2.0)
    assert b.s == 1.0 and b.se == pytest.approx(math.sqrt(0.125), rel=1e-12)
    assert b.upper == pytest.approx(0.5 + 6 / math.e + 2 * math.sqrt(0.125), rel=1e-12)


def test_moments_standard_errors_use_the_sample_standard_deviation():
    # 8 Monte Carlo distributions (stream MOMENTS of the run key): mu = mean H, se = std(ddof = 1) / sqrt(8),
    # the usual unbiased-variance standard error (ddof = 2 would be sqrt(7/6) = 1.08 times smaller)
    law = Temp(law=Dirichlet(V=4, alpha=0.5), T=NEXT_ABOVE_1)
    h, m2 = sample_moments(stream_key(jax.random.key(4), Stream.MOMENTS), law, 8)
    m = moments(jax.random.key(4), law, samples=8)
    assert m.mu == pytest.approx(h.mean(), rel=1e-12) and m.mu2 == pytest.approx(m2.mean(), rel=1e-12)
    assert m.mu_se == pytest.approx(math.sqrt(((h - h.mean()) ** 2).sum() / 7 / 8), rel=1e-5)
    assert m.mu2_se == pytest.approx(math.sqrt(((m2 - m2.mean()) ** 2).sum() / 7 / 8), rel=1e-5)


def test_jensen_check_accepts_mu2_exactly_at_its_tolerance():
    # mu_2 is refused only strictly below mu^2 (1 - JENSEN_RTOL) - 1e-12; at mu = 0 that edge is -1e-12 exactly
    # (0 * 0 * (1 - JENSEN_RTOL) = 0 in floating point), so mu_2 = -1e-12 passes and mu = 0 gives the infinite term
    assert theorem1_leading(2.0, 0.0, -1e-12) == math.inf
    with pytest.raises(BrwsimError, match="Jensen"):
        theorem1_leading(2.0, 0.0, -2e-12)


def test_a_candidate_that_only_ties_the_trivial_bound_leaves_s_at_zero():
    # one point at u = 1e-17 in each walk: exp(-1e-17) rounds to 1, so its left limit gives 0 + P e^-u = P,
    # exactly the trivial bound (s -> 0^-); the limit 1 gives 1 + e^-1 > 1. Only a strictly smaller value
    # replaces the trivial bound, so s stays 0
    c = SpineCurves(np.array([[1e-17], [1e-17]]), cover=np.array([1.0, 1.0]))
    b = c.splitting(1.0, 0.0)
    assert (b.upper, b.estimate, b.se, b.s) == (1.0, 1.0, 0.0, 0.0)
