"""The spine curves, the splitting and dual bounds and the closed forms against hand computations.

The two-walk example: walk 0 steps 1, 1 (S = 1, 2), walk 1 steps 2 then ends (S = 2), both observed up
to 2.5. Every value below is written from the definitions C_i(s) = #{d : S_{i,d} <= s} and
N_i(s) = sum_d e^{S_{i,d}} 1{S_{i,d} <= s} (left limits s -> u^- at a point u), per walk, by hand.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import numpy as np
import pytest
from scipy import integrate, stats

from brwsim._keys import Stream, stream_key
from brwsim._stats import MARGIN_Z, Z95
from brwsim.errors import BrwsimError
from brwsim.laws import LogitNormal, Temp, Zipf, fixed_law, markov_law
from brwsim.spine import (
    SpineCurves,
    curves_from_xi,
    law_curves,
    sample_walks,
    spine_batch,
    spine_moments,
    spine_moments_walks,
    stationary,
)
from brwsim.spine._stationary import _closed_classes, _stationary_pi, long_run_law
from brwsim.spine._walks import _bucket, _Stepper
from brwsim.theory import asymptotic, bounds_from_curves, law_spine_bounds, renewal, spine_bounds, theorem1_leading
from brwsim.theory._bounds import check_margin_z, check_P_values
from brwsim.theory._closed_forms import renewal_formula
from brwsim.theory._imperfect import lorden, threshold_bound, threshold_counts

E = math.e
LN2 = math.log(2)
NAN = math.nan
XI = [[1.0, 1.0], [2.0, NAN]]


def curves(**kw):
    # two walks check the estimator's arithmetic, so every threshold is a candidate here (min_walks_below=0);
    # the rule that keeps only thresholds with enough walks below them is tested on its own
    return SpineCurves(np.array(XI), cover=np.array([2.5, 2.5]), **{"min_walks_below": 0, **kw})


def pop_se(values):
    """Standard error of a mean over walks from the population variance, as the curves define it."""
    v = np.asarray(values, np.float64)
    return math.sqrt(v.var() / v.size)


def test_tau_and_N_by_hand():
    c = curves()
    assert c.coverage == 2.5 and c.walks == 2
    tau, se = c.tau(np.array([0.5, 1.0, 1.5, 2.0, 2.4]))
    # C per walk: t < 1: (0, 0); 1 <= t < 2: (1, 0); t >= 2: (2, 1)
    np.testing.assert_allclose(tau, [1.0, 1.5, 1.5, 2.5, 2.5], rtol=1e-12)
    np.testing.assert_allclose(se, [0, pop_se([1, 0]), pop_se([1, 0]), pop_se([2, 1]), pop_se([2, 1])], rtol=1e-12)
    N, se = c.N(np.array([0.5, 1.0, 2.0]))
    np.testing.assert_allclose(N, [0.0, E / 2, (E + 2 * E**2) / 2], rtol=1e-12)
    np.testing.assert_allclose(se, [0.0, pop_se([E, 0]), pop_se([E + E**2, E**2])], rtol=1e-12)
    n, n_se, value, value_se = c.threshold_curve(np.array([1.0]))
    assert n[0] == pytest.approx(E / 2) and n_se[0] == pytest.approx(pop_se([E, 0]))
    assert value[0] == pytest.approx(0.5) and value_se[0] == pytest.approx(pop_se([1, 0]))


def test_t_at_or_past_coverage_is_refused():
    with pytest.raises(BrwsimError):
        curves().tau(np.array([2.5]))
    with pytest.raises(BrwsimError):
        curves().N(np.array([3.0]))
    capped = curves(s_cap=1.5)
    assert capped.limit == 1.5
    assert capped.tau(np.array([1.5]))[0][0] == 1.5
    with pytest.raises(BrwsimError):
        capped.tau(np.array([1.7]))


def test_default_cover_is_the_last_sum_or_inf_for_an_ended_walk():
    c = SpineCurves(np.array(XI))  # walk 0 observed up to S = 2, walk 1 ended
    assert c.coverage == 2.0
    c = SpineCurves(np.array([[1.0, NAN], [0.5, NAN]]))
    assert c.coverage == math.inf


@pytest.mark.parametrize("bad", [[[1.0, 1.0]], [[-1.0], [1.0]], [[math.inf], [1.0]]])
def test_bad_walks_are_refused(bad):
    with pytest.raises(BrwsimError):
        SpineCurves(np.array(bad))


def splitting_candidates(P):
    """(s, estimate, se) at the left limits 1^-, 2^- and the limit 2.5^-: C per walk (0,0), (1,0), (2,1)."""
    return [
        (1.0, P * math.exp(-1), 0.0),
        (2.0, 0.5 + P * math.exp(-2), pop_se([1, 0])),
        (2.5, 1.5 + P * math.exp(-2.5), pop_se([2, 1])),
    ]


def dual_candidates(P):
    """Per walk Y_i = C_i - e^-s N_i at the same left limits; estimate mean(Y) + e^-s P."""
    y1 = [0.0, 0.0]
    y2 = [1 - math.exp(-2) * E, 0.0]
    y3 = [2 - math.exp(-2.5) * (E + E**2), 1 - math.exp(-2.5) * E**2]
    return [(s, float(np.mean(y)) + math.exp(-s) * P, pop_se(y)) for s, y in ((1.0, y1), (2.0, y2), (2.5, y3))]


def best(cands, P, z):
    s, est, se = min(cands, key=lambda c: c[1] + z * c[2])
    return (P, P, 0.0, 0.0) if est + z * se >= P else (est + z * se, est, se, s)


@pytest.mark.parametrize("P", [1.0, 4.0, 30.0])
@pytest.mark.parametrize("z", [0.0, 1.0, MARGIN_Z, 3.0])
def test_splitting_and_dual_by_hand(P, z):
    c = curves()
    for got, cands in ((c.splitting(P, z), splitting_candidates(P)), (c.dual(P, z), dual_candidates(P))):
        upper, est, se, s = best(cands, P, z)
        assert (got.upper, got.estimate, got.se, got.s) == pytest.approx((upper, est, se, s), rel=1e-12, abs=1e-15)


def test_the_margin_changes_the_chosen_s():
    c = curves()
    assert c.splitting(4.0, 0.0).s == 2.0 and c.splitting(4.0, MARGIN_Z).s == 1.0
    assert c.splitting(4.0, MARGIN_Z).upper == pytest.approx(4 / E)
    assert c.dual(4.0, MARGIN_Z).s == 2.0
    assert c.splitting(4.0).upper == c.splitting(4.0, MARGIN_Z).upper  # the default margin is MARGIN_Z


def test_no_candidate_leaves_the_trivial_bound():
    c = SpineCurves(np.array(XI), cover=np.array([0.0, 0.0]))
    for b in (c.splitting(7.0), c.dual(7.0)):
        assert (b.upper, b.estimate, b.se, b.s) == (7.0, 7.0, 0.0, 0.0)


def brute_estimate(xi, cover, s, P, kind):
    """E[C(s)] + P e^-s (splitting) or E[C(s) - e^-s N(s)] + e^-s P (dual) at every s, from the definitions."""
    total = np.zeros_like(s)
    for row, cov in zip(xi, cover, strict=True):
        S = np.cumsum(row[: np.argmax(np.isnan(row))] if np.isnan(row).any() else row)
        S = S[S <= cov]
        below = S[None, :] <= s[:, None]
        total += below.sum(axis=1) - (np.exp(-s) * (below * np.exp(S)[None, :]).sum(axis=1) if kind == "dual" else 0)
    return total / len(xi) + P * np.exp(-s)


@pytest.mark.parametrize("kind", ["splitting", "dual"])
def test_estimate_minimum_matches_a_brute_force_grid(kind):
    rng = np.random.default_rng(7)
    xi = np.round(rng.exponential(0.8, size=(6, 5)) * 16) / 16  # dyadic steps: exact sums
    xi[2, 3:] = NAN
    cover = np.full(6, 3.0)
    P = 12.0
    c = SpineCurves(xi, cover=cover, min_walks_below=0)
    got = getattr(c, kind)(P, 0.0)
    brute = brute_estimate(xi, cover, np.linspace(1e-9, 3.0 - 1e-9, 30001), P, kind).min()
    assert got.estimate == pytest.approx(brute, abs=2e-3 * P)  # grid step 1e-4: P e^-s moves by < 1e-4 P
    assert got.estimate <= brute + 1e-12


def test_curves_from_xi_caps_at_ln_P_plus_60():
    xi = np.full((2, 3), 30.0)  # S = 30, 60, 90: observed to 90
    assert curves_from_xi(xi).limit == 90.0
    assert curves_from_xi(xi, P_max=1.0).limit == pytest.approx(60.0)
    assert curves_from_xi(xi, P_max=0.5).limit == pytest.approx(60.0)
    assert curves_from_xi(xi, P_max=E**3).limit == pytest.approx(63.0)


def thirty_two_walks():
    return np.array(XI * 16)  # the two-walk example sixteen times: same means, se divided by 4


def test_spine_bounds_from_sampled_continuations_by_hand():
    out = spine_bounds(thirty_two_walks(), [4], margin_z=MARGIN_Z)
    # observed to S = 2 (walk 0's last sum; walk 1 ended): candidates 1^- and 2^-. No walk lies below 1, so
    # only 2^- (16 walks below it) is kept. rel 1e-5: the steps are taken as float32 values, lowered by
    # 4 float32 ulps before the bounds are computed
    b = out[4]
    se2 = pop_se([1, 0] * 16)
    assert b.splitting.upper == pytest.approx(0.5 + 4 * math.exp(-2) + MARGIN_Z * se2, rel=1e-5)
    assert b.splitting.s == 2.0
    y = [1 - math.exp(-1), 0.0] * 16
    assert b.dual.upper == pytest.approx(np.mean(y) + 4 * math.exp(-2) + MARGIN_Z * pop_se(y), rel=1e-5)
    assert b.dual.s == 2.0
    no_margin = spine_bounds(thirty_two_walks(), [4], margin_z=0.0)[4].splitting.upper
    assert no_margin == pytest.approx(0.5 + 4 * math.exp(-2), rel=1e-5)
    with pytest.raises(BrwsimError):
        spine_bounds(np.array(XI * 7), [4])  # 14 walks: too few for a margin


@pytest.mark.parametrize("iid", [True, False])
def test_bounds_are_labelled_by_what_they_are(iid):
    (b,) = bounds_from_curves(curves(), [4], mu=0.5, mu2=0.5, iid=iid, margin_z=1.0)
    assert b.P == 4 and b.iid == iid
    split, dual = best(splitting_candidates(4.0), 4.0, 1.0), best(dual_candidates(4.0), 4.0, 1.0)
    assert b.splitting.upper == pytest.approx(split[0]) and b.dual.upper == pytest.approx(dual[0])
    assert split[0] != pytest.approx(dual[0])  # the two are told apart
    ren = (math.log(2) + 1) / 0.5 + 0.5 / 0.25 - 1  # renewal at mu P = 2, below P = 4
    asy, th1 = math.log(2) / 0.5 + 0.5 / 0.5 - 1, 1.0 * math.log(4) / 0.25
    assert (b.renewal, b.asymptotic, b.theorem1_leading) == pytest.approx((min(4, ren), asy, th1))
    assert b.values() == pytest.approx(
        {"theorem1_leading": th1, "renewal": min(4, ren), "asymptotic": asy, "splitting": split[0], "dual": dual[0]}
    )
    d = b.to_dict()
    assert (d["dual_estimate"], d["dual_se"], d["dual_s"]) == pytest.approx(dual[1:])
    assert (d["splitting_estimate"], d["splitting_se"], d["splitting_s"]) == pytest.approx(split[1:])
    if iid:
        assert b.rigorous == pytest.approx({"dual": dual[0], "splitting": split[0], "renewal": min(4, ren)})
        assert b.predictions == pytest.approx({"asymptotic": asy, "theorem1_leading": th1}) and b.iid_only == {}
        assert d["bounds"] == b.rigorous and d["predictions"] == b.predictions and "iid_only" not in d
    else:
        assert b.rigorous == pytest.approx({"dual": dual[0], "splitting": split[0]}) and b.predictions == {}
        assert b.iid_only == pytest.approx({"renewal": min(4, ren), "asymptotic": asy, "theorem1_leading": th1})
        assert d["iid_only"] == b.iid_only and "predictions" not in d


def test_closed_forms_by_hand():
    L = math.log
    assert theorem1_leading(100, 1.0, 2.0) == pytest.approx(3 * L(100))
    assert renewal_formula(100, 1.0, 2.0) == pytest.approx(L(100) + 1 + 2 - 1)
    assert renewal(10, 0.5, 0.5) == pytest.approx(2 * (L(5) + 1) + 2 - 1)
    assert renewal(3, 0.5, 0.5) == 3.0  # the formula, 2 (ln 1.5 + 1) + 1 = 3.81, is capped at P
    assert asymptotic(10, 0.5, 0.5) == pytest.approx(2 * L(5) + 1 - 1)
    assert asymptotic(100, 1.0, 2.0) == pytest.approx(L(100) + 1 - 1)
    assert renewal_formula(10, 0.05, 0.01) == math.inf and renewal(10, 0.05, 0.01) == 10.0  # mu P < 1
    assert renewal_formula(10, 0.1, 0.01) == pytest.approx(10 * (0 + 1) + 1 - 1)  # mu P = 1: ln 1 = 0
    for f in (theorem1_leading, asymptotic, renewal_formula):
        assert f(10, 0.0, 0.0) == math.inf
    with pytest.raises(BrwsimError):
        renewal(10, 1.0, 0.5)  # mu_2 < mu^2


def test_threshold_counts_and_bound_by_hand():
    a = np.array([[1.0, 1.0, NAN], [0.5, 0.5, 0.5]])  # S: 1, 2 (ended) and 0.5, 1, 1.5 (still below 1.5)
    c, t = threshold_counts(a, 1.5)
    np.testing.assert_array_equal(c, [1, 3])
    np.testing.assert_array_equal(t, [False, True])
    b = np.array([[2.0], [0.25]])  # at s = 1: counts 0 and 1, the second truncated
    out = threshold_bound([(a, 1.5), (b, 1.0)])
    se = math.sqrt(2 / 2 + 0.5 / 2) / 2  # sample variances 2 and 0.5 over two walks each, two prompts
    assert out["point"] == pytest.approx(1.25) and out["se"] == pytest.approx(se)
    assert out["upper"] == pytest.approx(1.25 + Z95 * se) and out["truncated_walks"] == 2


def test_lorden_by_hand():
    assert lorden(3.0, 0.5, 0.5) == pytest.approx(6 + 2 - 1)
    assert lorden(0.0, 2.0, 3.0) == 0.0  # 0.75 - 1 < 0: clipped
    assert lorden(0.4, 2.0, 4.0) == pytest.approx(0.2)
    assert lorden(1.0, 0.0, 1.0) == math.inf


def test_threshold_counts_edges():
    c, t = threshold_counts(np.array([[0.5, NAN, NAN], [2.0, NAN, NAN]]), 1.0)  # ended walks count no more
    np.testing.assert_array_equal(c, [1, 0])
    np.testing.assert_array_equal(t, [False, False])
    c, t = threshold_counts(np.zeros((2, 0)), 1.0)  # no steps sampled: nothing counted, nothing truncated
    np.testing.assert_array_equal(c, [0, 0])
    np.testing.assert_array_equal(t, [False, False])
    assert t.dtype == bool


def test_spine_bounds_margin_reaches_both_bounds_and_too_few_walks_say_so():
    out = spine_bounds(thirty_two_walks(), [4], margin_z=0.0)[4]
    y = [1 - math.exp(-1), 0.0] * 16
    assert out.dual.upper == pytest.approx(float(np.mean(y)) + 4 * math.exp(-2), rel=1e-5)
    assert out.dual.se == pytest.approx(pop_se(y))
    with pytest.raises(BrwsimError, match="at least 16 sampled continuations.*got 14"):
        spine_bounds(np.array(XI * 7), [4])
    with pytest.raises(BrwsimError, match="got 0"):
        spine_bounds(np.ones(20), [4])  # not a [walks, depth] array


@pytest.mark.parametrize(
    "args,message",
    [
        ((True, 1.0, 1.0), "P must be a number >= 1, got True"),
        (("3", 1.0, 1.0), "P must be a number >= 1, got '3'"),
        ((0.5, 1.0, 1.0), "P must be >= 1, got 0.5"),
        ((math.inf, 1.0, 1.0), "P must be >= 1, got inf"),
        ((4, "x", 1.0), "mu and mu_2 must be numbers, got mu='x', mu_2=1.0"),
        ((4, math.inf, 1.0), "mu and mu_2 must be finite, got mu=inf, mu_2=1.0"),
        ((4, 1.0, math.nan), "mu and mu_2 must be finite, got mu=1.0, mu_2=nan"),
        ((4, -0.5, 1.0), "mu must be >= 0 (an entropy; 0 only for a zero-entropy law), got -0.5"),
        ((4, 1.0, 0.5), "mu_2 must be >= mu^2 (Jensen), got mu=1.0, mu_2=0.5"),
    ],
)
def test_closed_form_inputs_are_refused_with_their_message(args, message):
    with pytest.raises(BrwsimError) as e:
        theorem1_leading(*args)
    assert str(e.value) == message


def test_margin_and_budget_lists_are_checked():
    assert check_margin_z(0) == 0.0 and check_margin_z("1.5") == 1.5
    for bad, message in [
        ("a", "margin_z must be a number >= 0, got 'a'"),
        (-1, "margin_z must be a finite number >= 0, got -1"),
        (math.inf, "margin_z must be a finite number >= 0, got inf"),
    ]:
        with pytest.raises(BrwsimError) as e:
            check_margin_z(bad)
        assert str(e.value) == message
    out = check_P_values([2.0, 2.5, 4])
    assert out == [2, 2.5, 4] and [type(x) for x in out] == [int, float, int]
    assert check_P_values(4) == [4] and check_P_values(np.float64(3.0)) == [3]
    with pytest.raises(BrwsimError) as e:
        check_P_values([])
    assert str(e.value) == "P_list must hold at least one budget P >= 1"


def test_sampled_continuations_are_capped_at_ln_P_plus_60():
    xi = np.array([[0.1, 99.9]] * 16)  # S = 0.1, then 100: the best s is the last one observed
    b = spine_bounds(xi, [4], margin_z=0.0)[4].splitting
    assert b.s == pytest.approx(math.log(4) + 60) and b.estimate == pytest.approx(1.0)


def test_law_spine_bounds_on_the_binary_tree():
    out = law_spine_bounds(jax.random.key(2), fixed_law([0.5, 0.5]), [1, 2, 3], walks=32, margin_z=0.0)
    for P in (1, 2, 3):  # S_d = d ln 2 on every walk: min_d (d - 1) + P 2^-d and min_d (d - 2) + (P + 2) 2^-d
        assert out[P].splitting.estimate == pytest.approx(min((d - 1) + P * 2.0**-d for d in range(1, 6)), rel=1e-5)
        assert out[P].dual.estimate == pytest.approx(min((d - 2) + (P + 2) * 2.0**-d for d in range(1, 6)), rel=1e-5)
    out = law_spine_bounds(jax.random.key(2), fixed_law([0.5, 0.25, 0.25]), [8], walks=64, margin_z=2.0)[8]
    for b in (out.splitting, out.dual):
        assert b.se > 0 and b.upper == pytest.approx(b.estimate + 2.0 * b.se, rel=1e-12)


def test_t_messages_and_cover_passed_through():
    with pytest.raises(BrwsimError, match=r"^t must be below the walks' coverage 2.5 \(sample longer walks\)$"):
        curves().tau(np.array([2.5]))
    with pytest.raises(BrwsimError, match=r"^t must be <= 1.5, the cap these curves were built with$"):
        curves(s_cap=1.5).N(np.array([1.7]))
    assert curves_from_xi(np.array(XI), cover=np.array([2.5, 2.5])).coverage == 2.5


def test_the_limit_is_a_candidate_below_one_and_with_no_point():
    c = SpineCurves(np.array([[0.5], [0.5]]), cover=np.array([0.8, 0.8]), min_walks_below=0)  # point 0.5, limit 0.8
    b = c.splitting(100.0, 0.0)  # 100 e^-0.5 = 60.7 against 1 + 100 e^-0.8 = 45.9: the limit wins
    assert b.s == 0.8 and b.estimate == pytest.approx(1 + 100 * math.exp(-0.8))
    c = SpineCurves(np.array([[0.5], [0.5]]), cover=np.array([0.3, 0.3]), min_walks_below=0)  # no point below the limit
    assert c.splitting(4.0).s == 0.3 and c.splitting(4.0).estimate == pytest.approx(4 * math.exp(-0.3))
    assert c.dual(4.0).s == 0.3


def left_limit_minimum(xi, P, z):
    """min over the distinct positive points u (left limits) and the limit of mean C(u-) + P e^-u + z se."""
    S = [np.cumsum(r) for r in xi]
    limit = min(s[-1] for s in S)
    us = sorted({float(x) for s in S for x in s if 0 < x <= limit} | {limit})
    vals = []
    for u in us:
        c = np.array([np.sum(s < u) for s in S], np.float64)
        vals.append((c.mean() + P * math.exp(-u) + z * pop_se(c), u))
    return min(vals + [(P, 0.0)])


@pytest.mark.parametrize("z", [0.0, 1.0, 50.0])
def test_splitting_minimum_over_left_limits_by_brute_force(z):
    rng = np.random.default_rng(3)
    xi = rng.choice([0.0, 0.25, 0.5, 1.0], size=(8, 6))  # many ties and zero steps
    xi[:, -1] = 4.0  # every walk observed past the points that matter
    got = SpineCurves(xi, min_walks_below=0).splitting(6.0, z)
    want, s = left_limit_minimum(xi, 6.0, z)
    assert got.upper == pytest.approx(want, rel=1e-12) and got.s == s


@pytest.mark.parametrize("hint,P,cover", [(2.0, 8, 9), (0.5, 8, 7), (None, 8, 8), (None, 1, 5), (0.25, 2, 5)])
def test_law_curves_walk_until_ln_mu_P_plus_3(hint, P, cover):
    # every step is ln 2: the walks stop at the first d ln 2 above max(ln(mu P), 0) + 3 (mu = 1 without a hint)
    c = law_curves(jax.random.key(0), fixed_law([0.5, 0.5]), P, walks=16, mu_hint=hint)
    assert c.coverage == pytest.approx(cover * LN2, rel=1e-6)


def test_float32_steps_are_summed_in_float64():
    c = SpineCurves(np.full((2, 10), np.float32(0.1)))
    assert c.coverage == pytest.approx(10 * float(np.float32(0.1)), rel=1e-15)


def test_one_point_exactly_at_the_limit():
    c = SpineCurves(np.array([[0.5], [NAN]]), cover=np.array([0.5, 0.5]), min_walks_below=0)
    b = c.splitting(4.0, 0.0)
    assert b.s == 0.5 and b.estimate == pytest.approx(4 * math.exp(-0.5))


@pytest.mark.parametrize(
    "bad,message",
    [
        ([[1.0, 1.0]], "xi must be a [walks, depth] array with at least 2 walks, got shape (1, 2)"),
        ([[-1.0], [1.0]], "xi must hold surprisals -log p >= 0 (NaN for 'walk ended')"),
        ([[math.inf], [1.0]], "xi must be finite surprisals or NaN (a probability-0 step cannot be sampled)"),
    ],
)
def test_bad_walks_messages(bad, message):
    with pytest.raises(BrwsimError) as e:
        SpineCurves(np.array(bad))
    assert str(e.value) == message


def test_default_cover_reads_the_last_step():
    assert SpineCurves(np.zeros((2, 0))).coverage == 0.0  # nothing observed
    c = SpineCurves(np.array([[1.0, 1.0, NAN], [1.0, 1.0, 1.0]]))  # walk 0 ended after two steps
    assert c.coverage == 3.0


def test_a_point_exactly_at_the_cap_counts():
    c = curves(s_cap=2.0)  # both walks have a point at S = 2, the cap
    assert c.tau(np.array([2.0]))[0][0] == 2.5


# -- spine walks on hand-made laws: i.i.d. fixed laws (S_d = sum of -log p of the chosen ranks) and two-state
# Markov laws whose kernels are 0/1 on the child's rank, so that every state sequence is readable from the walk

F2 = float(np.float32(LN2))  # a step of fixed_law([0.5, 0.5]) in float32
# state b's distribution (3/4, 1/4): entropy and second log-moment
HB = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
M2B = 0.75 * math.log(0.75) ** 2 + 0.25 * math.log(0.25) ** 2


def two_state(ka, kb, initial="a", pb=(0.75, 0.25)):
    """States a: fixed (1/2, 1/2) and b: ``pb`` under a temperature one ulp above 1 (the O(V) step, which reads the
    rank; 1/T is 1 in float32, so its rows are ``pb``'s; a temperature of exactly 1 is the fixed law itself).

    ``ka``, ``kb``: the next-state rows [Pr(a), Pr(b)] of the child of rank 0 and of rank >= 1.
    Every law built here has one structure (one compilation of the walk step per state).
    """
    law = markov_law(
        {
            "states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.5/0.5"},
            "initial": initial,
            "kernel": {"a": ka, "b": kb},
        }
    )
    return dataclasses.replace(law, laws=(fixed_law([0.5, 0.5]), Temp(law=fixed_law(list(pb)), T=1.0 + 2**-52)))


TO_A, TO_B = [1.0, 0.0], [0.0, 1.0]  # kernel rows: the child's state is a, or b


def rank_law():
    """a: rank 0 stays in a, rank 1 goes to b; b: rank 0 stays in b, rank 1 goes to a (built in the test, not at
    import: the exact tests create no JAX array before mutmut forks)."""
    return two_state([TO_A, TO_B], [TO_B, TO_A])


def alternate_law():
    """a, b, a, b, ... whatever the ranks."""
    return two_state([TO_B, TO_B], [TO_A, TO_A])


WALKS = 16


def test_bucket_by_hand():
    # walks / 8^k, shrinking while the next size still holds n and 128
    assert _bucket(1, 8192) == 128 and _bucket(128, 1024) == 128 and _bucket(129, 1024) == 1024
    assert _bucket(200, 8192) == 1024 and _bucket(1, 1000) == 1000 and _bucket(1, 1024) == 128
    assert _bucket(1, 1023) == 1023 and _bucket(16, 16) == 16
    assert type(_bucket(1, 8192)) is int  # a batch size (np.zeros refuses a float)


def test_walks_need_two_walks():
    with pytest.raises(BrwsimError) as e:
        sample_walks(jax.random.key(0), fixed_law([0.5, 0.5]), 1)
    assert str(e.value) == "walks must be >= 2, got 1"
    assert sample_walks(jax.random.key(0), fixed_law([0.5, 0.5]), 2, depth=0).xi.shape == (2, 0)  # two will do


def test_walks_stop_past_s_max_and_at_depth():
    law = fixed_law([0.5, 0.5])  # S_d = d ln 2 on every walk
    w = sample_walks(jax.random.key(0), law, WALKS, s_max=2 * F2)  # S = 2 ln 2 is not past s_max: a third step
    assert w.xi.shape == (WALKS, 3) and np.all(w.xi == F2) and np.all(w.cover == 3 * F2)
    assert np.all(w.state == 0) and np.all(w.H == pytest.approx(LN2)) and np.all(w.M2 == pytest.approx(LN2**2))
    w = sample_walks(jax.random.key(0), law, WALKS, depth=5)
    assert w.xi.shape == (WALKS, 5) and np.all(w.cover == 5 * F2)
    w = sample_walks(jax.random.key(0), law, WALKS, depth=0)  # no step at all
    assert w.xi.shape == w.H.shape == w.M2.shape == w.state.shape == (WALKS, 0)
    assert w.state.dtype == np.int32 and np.all(w.cover == 0.0)


def test_walks_stop_after_64_steps_without_a_move():
    # a, then b forever; b is the point mass (1, 0): every walk moves once by ln 2, then 64 steps of 0
    law = two_state([TO_B, TO_B], [TO_B, TO_B], pb=(1.0, 0.0))
    w = sample_walks(jax.random.key(0), law, WALKS, need_H=True)
    assert w.xi.shape == (WALKS, 65)
    np.testing.assert_array_equal(w.xi, np.tile([F2] + [0.0] * 64, (WALKS, 1)))
    np.testing.assert_array_equal(w.state, np.tile([0] + [1] * 64, (WALKS, 1)))
    np.testing.assert_allclose(w.H, np.tile([LN2] + [0.0] * 64, (WALKS, 1)), atol=1e-7)
    assert np.all(w.cover == F2)


def test_walks_follow_the_kernel_of_the_childs_rank():
    w = sample_walks(jax.random.key(3), rank_law(), WALKS, depth=8, need_H=True)
    st, xi = w.state, w.xi
    assert st.shape == (WALKS, 8) and np.all(st[:, 0] == 0)  # the root is in a
    in_a, in_b = st[:, :-1] == 0, st[:, :-1] == 1
    top = np.isclose(xi[:, :-1], -math.log(0.75), rtol=1e-6)  # in b: rank 0 iff the step is -ln 3/4
    assert np.all(np.isclose(xi[st == 0], LN2, rtol=1e-6))
    assert np.all(np.isclose(xi[st == 1], -math.log(0.75), rtol=1e-6) | np.isclose(xi[st == 1], LN2 * 2, rtol=1e-6))
    assert np.all(st[:, 1:][in_b] == np.where(top, 1, 0)[in_b])  # b: rank 0 -> b, rank 1 -> a
    assert in_b.sum() > 10 and (in_b & ~top).sum() > 3 and (in_a & (st[:, 1:] == 1)).sum() > 3
    np.testing.assert_allclose(w.H, np.where(st == 0, LN2, HB), rtol=1e-6)
    np.testing.assert_allclose(w.M2, np.where(st == 0, LN2**2, M2B), rtol=1e-6)
    np.testing.assert_allclose(w.cover, xi.sum(1), rtol=1e-12)


def test_each_walk_stops_at_its_own_first_sum_past_s_max():
    w = sample_walks(jax.random.key(4), rank_law(), WALKS, s_max=1.5, need_H=True)  # steps ln 2, -ln 3/4, ln 4
    for xi, H, st, cover in zip(w.xi, w.H, w.state, w.cover, strict=True):
        n = int(np.sum(~np.isnan(xi)))  # steps taken
        S = np.cumsum(xi[:n])
        assert np.all(S[:-1] <= 1.5) and S[-1] > 1.5 and cover == pytest.approx(S[-1], rel=1e-12)
        assert np.all(np.isnan(xi[n:])) and np.all(np.isnan(H[n:])) and np.all(st[n:] == -1) and np.all(st[:n] >= 0)
    lengths = (~np.isnan(w.xi)).sum(1)
    assert lengths.min() < lengths.max() == w.xi.shape[1]  # walks of several lengths


def test_walks_without_H_leave_it_unknown_where_no_closed_form():
    w = sample_walks(jax.random.key(3), LogitNormal(V=2, sigma=1.0), WALKS, depth=2)  # O(V) steps, no closed form
    assert w.xi.shape == (WALKS, 2) and np.all(np.isnan(w.H)) and np.all(np.isnan(w.M2)) and np.all(w.state == 0)
    assert np.all((w.xi > 0) & (w.xi < 40)) and np.all(w.cover == w.xi.sum(1))


def test_long_run_moments_along_alternating_walks():
    # depths burn .. depth - 1 alternate a, b: every walk sees the same H sequence (standard errors 0)
    m = spine_moments_walks(jax.random.key(0), alternate_law(), walks=WALKS, depth=7, burn=2)  # a b a b a
    assert m.fractions == pytest.approx([0.6, 0.4])
    assert m.mu == pytest.approx((3 * LN2 + 2 * HB) / 5, rel=1e-6)
    assert m.mu2 == pytest.approx((3 * LN2**2 + 2 * M2B) / 5, rel=1e-6)
    assert m.mu_se == pytest.approx(0.0, abs=1e-9) and m.mu2_se == pytest.approx(0.0, abs=1e-9)
    m = spine_moments_walks(jax.random.key(0), alternate_law(), walks=WALKS, depth=8, burn=3)  # b a b a b
    assert m.fractions == pytest.approx([0.4, 0.6]) and m.mu == pytest.approx((2 * LN2 + 3 * HB) / 5, rel=1e-6)
    m = spine_moments_walks(jax.random.key(0), alternate_law(), walks=WALKS)  # depths 16 .. 47: sixteen of each
    assert m.fractions == pytest.approx([0.5, 0.5]) and m.mu == pytest.approx((LN2 + HB) / 2, rel=1e-6)


def test_long_run_moments_standard_error_over_walks():
    # initial a or b with probability 1/2, each state keeps itself: walk averages are ln 2 or H_b
    law = two_state([TO_A, TO_A], [TO_B, TO_B], initial={"a": 0.5, "b": 0.5})
    m = spine_moments_walks(jax.random.key(1), law, walks=WALKS, depth=4, burn=1)
    n, k = WALKS, round(m.fractions[0] * WALKS)
    assert 0 < k < n and m.fractions[0] + m.fractions[1] == pytest.approx(1.0)
    assert m.mu == pytest.approx((k * LN2 + (n - k) * HB) / n, rel=1e-6)
    sd = math.sqrt(k * (n - k) / (n * (n - 1)))  # sample sd of k ones and n - k zeros
    assert m.mu_se == pytest.approx(sd * (LN2 - HB) / math.sqrt(n), rel=1e-5)
    assert m.mu2_se == pytest.approx(sd * abs(LN2**2 - M2B) / math.sqrt(n), rel=1e-5)
    # these are the walks of stream SPINE_DIRECT (the bounds' walks use SPINE: another draw of the initial states)
    w = sample_walks(jax.random.key(1), law, WALKS, depth=1, stream=Stream.SPINE_DIRECT, need_H=True)
    assert np.sum(w.state[:, 0] == 0) == k
    # the defaults: 2048 walks, depths 16 .. 47 (32 nodes a walk), so a's share is k 32 / (2048 * 32) = k / 2048
    m = spine_moments_walks(jax.random.key(1), law)
    n, k = 2048, m.fractions[0] * 2048
    assert k == pytest.approx(round(k), abs=1e-9) and 0 < k < n  # a whole number of walks
    assert m.mu == pytest.approx((k * LN2 + (n - k) * HB) / n, rel=1e-6)
    sd = math.sqrt(k * (n - k) / (n * (n - 1)))
    assert m.mu_se == pytest.approx(sd * (LN2 - HB) / math.sqrt(n), rel=1e-5)


# -- the state chain: Q[s] = sum_r E_s[p_(r)] K[s, r]; for rank_law(), Q = [[1/2, 1/2], [1/4, 3/4]], pi = (1/3, 2/3)


def test_stationary_chain_of_fixed_states_by_hand():
    st = stationary(jax.random.key(0), rank_law(), samples=8, boot=4)
    np.testing.assert_allclose(st.Q, [[0.5, 0.5], [0.25, 0.75]], rtol=1e-6)
    np.testing.assert_allclose(st.pi, [1 / 3, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(st.mu_s, [LN2, HB], rtol=1e-6)
    np.testing.assert_allclose(st.mu2_s, [LN2**2, M2B], rtol=1e-6)
    assert st.mu == pytest.approx((LN2 + 2 * HB) / 3, rel=1e-6)
    assert st.mu2 == pytest.approx((LN2**2 + 2 * M2B) / 3, rel=1e-6)
    assert np.all(np.abs(st.pi_se) < 1e-9) and abs(st.mu_se) < 1e-9 and abs(st.mu2_se) < 1e-9  # exact rows
    m = spine_moments(jax.random.key(0), rank_law())
    assert (m.mu, m.mu2, m.exact) == (pytest.approx(st.mu, rel=1e-6), pytest.approx(st.mu2, rel=1e-6), False)
    a, b = m.per_state["a"], m.per_state["b"]
    assert (a.fraction, a.mu, a.mu2, a.exact) == (pytest.approx(1 / 3), pytest.approx(LN2), pytest.approx(LN2**2), True)
    assert (b.fraction, b.mu, b.mu2, b.exact) == (pytest.approx(2 / 3), pytest.approx(HB), pytest.approx(M2B), False)
    assert abs(a.fraction_se) < 1e-9 and list(m.per_state) == ["a", "b"]


def test_stationary_pi_of_two_and_three_states():
    np.testing.assert_allclose(_stationary_pi(np.array([[0.5, 0.5], [0.25, 0.75]])), [1 / 3, 2 / 3], rtol=1e-12)
    np.testing.assert_allclose(_stationary_pi(np.array([[0.0, 1.0], [1.0, 0.0]])), [0.5, 0.5], rtol=1e-12)
    Q = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]])  # pi = (1, 2, 2) / 5
    np.testing.assert_allclose(_stationary_pi(Q), [0.2, 0.4, 0.4], rtol=1e-12)


def test_closed_classes_by_hand():
    Q = np.array(
        [
            [0.5, 0.3, 0.2, 0.0],  # 0: transient, into {1} and {2, 3}
            [0.0, 1.0, 0.0, 0.0],  # 1: absorbing
            [0.0, 0.0, 0.0, 1.0],  # 2 <-> 3: a closed periodic class
            [0.0, 0.0, 1.0, 0.0],
        ]
    )
    assert [c.tolist() for c in _closed_classes(Q)] == [[1], [2, 3]]
    assert [c.tolist() for c in _closed_classes(np.array([[0.5, 0.5], [0.25, 0.75]]))] == [[0, 1]]
    assert [c.tolist() for c in _closed_classes(np.array([[1.0, 0.0], [0.5, 0.5]]))] == [[0]]
    assert [c.tolist() for c in _closed_classes(np.eye(3))] == [[0], [1], [2]]


def test_long_run_law_of_a_reducible_chain_by_hand():
    Q = np.array(
        [
            [0.5, 0.3, 0.2, 0.0],  # from 0: absorbed in {1} w.p. 0.3 / 0.5 = 0.6, in {2, 3} w.p. 0.4
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
            [0.0, 0.0, 1.0, 0.0],
        ]
    )
    np.testing.assert_allclose(long_run_law(Q, np.array([1.0, 0, 0, 0])), [0, 0.6, 0.2, 0.2], atol=1e-12)
    np.testing.assert_allclose(long_run_law(Q, np.array([0.5, 0, 0.5, 0])), [0, 0.3, 0.35, 0.35], atol=1e-12)
    np.testing.assert_allclose(long_run_law(Q, np.array([0, 1.0, 0, 0])), [0, 1, 0, 0], atol=1e-12)
    # two transient states: 0 -> 1 w.p. 1/2, else {2}; 1 -> 0 w.p. 1/2, else {3}. From 0: a = 2/3 in {2}
    Q = np.array([[0, 0.5, 0.5, 0], [0.5, 0, 0, 0.5], [0, 0, 1.0, 0], [0, 0, 0, 1.0]])
    np.testing.assert_allclose(long_run_law(Q, np.array([1.0, 0, 0, 0])), [0, 0, 2 / 3, 1 / 3], atol=1e-12)
    np.testing.assert_allclose(long_run_law(np.eye(2), np.array([0.25, 0.75])), [0.25, 0.75], atol=1e-12)
    np.testing.assert_allclose(long_run_law(np.array([[0.5, 0.5], [0.25, 0.75]]), np.array([1.0, 0])), [1 / 3, 2 / 3])


def entropy(lp):
    p = np.exp(lp)
    return float(-(p * np.where(p > 0, lp, 0)).sum()), float((p * np.where(p > 0, lp, 0) ** 2).sum())


def test_coupled_spine_reads_the_trees_own_nodes():
    # a: fixed (1/2, 1/2); b: a fresh logit-normal draw on three tokens at every node, from the node's key
    law = dataclasses.replace(rank_law(), laws=(fixed_law([0.5, 0.5]), LogitNormal(V=3, sigma=1.0)))
    tree_keys = jax.random.split(jax.random.key(5), 6)
    walk_keys = jax.random.split(jax.random.key(6), 6)
    sp = spine_batch(law, tree_keys, walk_keys, 5)
    xi, H, M2, rank, st = (np.asarray(x, np.float64) for x in sp)
    assert xi.shape == rank.shape == st.shape == (6, 5) and np.all(st[:, 0] == 0)
    # the kernel by hand: a -> a on rank 0, b on rank >= 1; b -> b on rank 0, a on rank >= 1
    np.testing.assert_array_equal(st[:, 1:], np.where(st[:, :-1] == 0, rank[:, :-1] > 0, rank[:, :-1] == 0))
    assert (st == 1).sum() >= 5 and (st == 0).sum() >= 5
    dist = jax.jit(lambda k: law.laws[1].full_logp(k, 0))
    for i in range(6):
        k = tree_keys[i]  # node keys (docs/theory.md, "Node keys"): distribution fold_in(k, 0), child of rank r 2 + r
        for d in range(5):
            if st[i, d] == 0:
                assert (xi[i, d], H[i, d], M2[i, d]) == pytest.approx((LN2, LN2, LN2**2), rel=1e-6)
            else:
                lp = np.sort(np.asarray(dist(jax.random.fold_in(k, 0)), np.float64))[::-1]
                assert xi[i, d] == pytest.approx(-lp[int(rank[i, d])], rel=1e-5)
                assert (H[i, d], M2[i, d]) == pytest.approx(entropy(lp), rel=1e-5)
            k = jax.random.fold_in(k, 2 + int(rank[i, d]))


def ent2(p):
    """Entropy of (p, 1 - p)."""
    return -(p * math.log(p) + (1 - p) * math.log1p(-p)) if p < 1 else 0.0


def m2_2(p):
    """Second log-moment of (p, 1 - p)."""
    return p * math.log(p) ** 2 + (1 - p) * math.log1p(-p) ** 2 if p < 1 else 0.0


def logitnormal2(g):
    """E[g(p_max)] for p = softmax(z), z two i.i.d. N(0, 1): p_max = sigmoid(|z_1 - z_2|), |z_1 - z_2| ~ sqrt(2) |N|."""
    return integrate.quad(lambda x: g(1 / (1 + math.exp(-math.sqrt(2) * x))) * 2 * stats.norm.pdf(x), 0, 40)[0]


def test_stationary_chain_of_random_states():
    # a: logit-normal on two tokens (no closed form in the code: its H, M2 are averaged per sample); every rank
    # goes to a or b with probability 1/2. b: Dirichlet(2, 2): p_max = max(U, 1 - U), U ~ Beta(2, 2), mean 11/16,
    # variance 0.4875 - (11/16)^2; mu = psi(5) - psi(3) = 7/12, mu_2 = mu^2 + psi'(3) - psi'(5) = 37/72; rank 0
    # stays in b, ranks 1 and >= 2 go to a. Q = [[1/2, 1/2], [q, 1 - q]], q = 5/16: pi_a = q / (q + 1/2) = 5/13
    law = markov_law(
        {
            "states": {"a": "logitnormal:V=2,sigma=1", "b": "dirichlet:V=2,alpha=2"},
            "initial": "b",
            "kernel": {"a": [[0.5, 0.5]], "b": [TO_B, TO_A, TO_A]},
        }
    )
    n = 2048
    st = stationary(jax.random.key(0), law, samples=n)
    h_a, m2_a = logitnormal2(ent2), logitnormal2(m2_2)
    sd_h = math.sqrt(logitnormal2(lambda p: ent2(p) ** 2) - h_a**2)
    sd_m2 = math.sqrt(logitnormal2(lambda p: m2_2(p) ** 2) - m2_a**2)
    se_q = math.sqrt(0.4875 - (11 / 16) ** 2) / math.sqrt(n)
    np.testing.assert_allclose(st.Q, [[0.5, 0.5], [5 / 16, 11 / 16]], atol=4 * se_q)
    np.testing.assert_allclose(st.Q[0], [0.5, 0.5], rtol=1e-6)
    pi_se = 128 / 169 * se_q  # d pi_a / d q = (1/2) / (q + 1/2)^2 = 128 / 169
    np.testing.assert_allclose(st.pi, [5 / 13, 8 / 13], atol=4 * pi_se)
    assert st.mu_s[0] == pytest.approx(h_a, abs=4 * sd_h / math.sqrt(n))
    assert st.mu2_s[0] == pytest.approx(m2_a, abs=4 * sd_m2 / math.sqrt(n))
    assert (st.mu_s[1], st.mu2_s[1]) == pytest.approx((7 / 12, 37 / 72), rel=1e-6)
    # the bootstrap standard errors against the delta method (200 resamples: about 5% apart)
    mu_se = math.sqrt(((h_a - 7 / 12) * pi_se) ** 2 + (5 / 13 * sd_h) ** 2 / n)
    mu2_se = math.sqrt(((m2_a - 37 / 72) * pi_se) ** 2 + (5 / 13 * sd_m2) ** 2 / n)
    assert st.pi_se == pytest.approx([pi_se, pi_se], rel=0.25)
    assert (st.mu_se, st.mu2_se) == pytest.approx((mu_se, mu2_se), rel=0.25)
    assert st.mu == pytest.approx(5 / 13 * h_a + 8 / 13 * 7 / 12, abs=4 * mu_se)
    assert st.mu2 == pytest.approx(5 / 13 * m2_a + 8 / 13 * 37 / 72, abs=4 * mu2_se)


def test_spine_moments_of_a_drawn_law_carry_the_sample_count_and_standard_errors():
    # an i.i.d. logit-normal law on two tokens (one state, no closed form in the code): mu and mu_2 are the means
    # of H and M2 over `samples` drawn distributions, their standard errors sd / sqrt(samples) by the bootstrap.
    # By quadrature: E[H] = 0.53950, sd(H) = 0.15284, kurtosis 3.137; E[M2] = 0.51527, sd(M2) = 0.042306,
    # kurtosis 14.84. A bootstrap SE is the sample sd / sqrt(n) up to the resampling error 1/sqrt(2 * 200) = 0.05
    # (relative); the sample sd of n draws is off by sqrt((kurtosis - 1) / (4 n)) (relative). With n = 256:
    # 0.046 for H, 0.116 for M2, so 4 standard errors are 4 * sqrt(0.046^2 + 0.05^2) = 0.27 and 0.51.
    law = LogitNormal(V=2, sigma=1.0)
    n = 256
    m = spine_moments(jax.random.key(0), law, samples=n)
    h, sd_h, m2, sd_m2 = 0.5395000617, 0.1528397355, 0.5152671493, 0.0423055417
    assert m.mu == pytest.approx(h, abs=4 * sd_h / math.sqrt(n))
    assert m.mu2 == pytest.approx(m2, abs=4 * sd_m2 / math.sqrt(n))
    assert m.mu_se == pytest.approx(sd_h / math.sqrt(n), rel=0.27)  # 2048 draws would give a third of it
    assert m.mu2_se == pytest.approx(sd_m2 / math.sqrt(n), rel=0.51)
    assert m.exact is False and m.per_state["iid"].fraction == 1.0 and m.per_state["iid"].exact is False
    # the default: 2048 draws, the chain's own default (relative error of the SE: 4 * sqrt(0.016^2 + 0.05^2) = 0.21)
    m, st = spine_moments(jax.random.key(0), law), stationary(jax.random.key(0), law)
    assert (m.mu, m.mu2, m.mu_se, m.mu2_se) == (st.mu, st.mu2, st.mu_se, st.mu2_se)
    assert m.mu_se == pytest.approx(sd_h / math.sqrt(2048), rel=0.21)
    # two bootstrap resamples: the standard error is |mu_1 - mu_2| / sqrt(2) (a sample sd of two values), finite,
    # and below 4 standard errors of a mean of n draws (mu_1 - mu_2 ~ N(0, 2 se^2)) but for probability 6e-5
    st = stationary(jax.random.key(0), law, samples=n, boot=2)
    assert 0 < st.mu_se < 4 * sd_h / math.sqrt(n) and 0 < st.mu2_se < 4 * sd_m2 / math.sqrt(n)


def test_stationary_chain_of_a_drawn_one_token_law():
    # one token: every drawn distribution is the point mass, H = M2 = 0, and the one state keeps itself
    st = stationary(jax.random.key(0), LogitNormal(V=1, sigma=1.0), samples=8, boot=4)
    assert st.Q.tolist() == [[1.0]] and st.pi.tolist() == [1.0]
    assert (st.mu, st.mu2, st.mu_se, st.mu2_se) == (0.0, 0.0, 0.0, 0.0)


def test_stationary_chain_of_a_reducible_law_by_hand():
    # each state keeps itself (Q = I, two closed classes): the long-run law is the initial one, in every bootstrap
    # resample too (the rows are exact: no spread)
    law = two_state([TO_A, TO_A], [TO_B, TO_B], initial={"a": 0.25, "b": 0.75})
    st = stationary(jax.random.key(0), law, samples=8, boot=4)
    np.testing.assert_allclose(st.Q, np.eye(2), atol=1e-7)
    np.testing.assert_allclose(st.pi, [0.25, 0.75], rtol=1e-6)  # the initial law, kept in float32
    assert st.mu == pytest.approx(0.25 * LN2 + 0.75 * HB, rel=1e-6)
    assert np.all(st.pi_se == 0) and st.mu_se == 0 and st.mu2_se == 0


def test_walk_states_are_int32_as_for_a_walk_of_no_step():
    w = sample_walks(jax.random.key(0), fixed_law([0.5, 0.5]), WALKS, depth=3)
    assert w.state.dtype == np.int32 and w.state.shape == (WALKS, 3) and np.all(w.state == 0)


def test_walk_indices_past_2_to_the_24_keep_their_own_keys():
    # walk i steps with item i of the stream: walks 2^24 and 2^24 + 1 take two independent logit-normal steps
    # (equal with probability 0). An index passed on as a float32 would round 2^24 + 1 to 2^24, a copy of the
    # walk before. Only these two walks are active: an O(V) step runs them in a small padded batch
    walks = 2**24 + 2
    step = _Stepper(LogitNormal(V=2, sigma=1.0), stream_key(jax.random.key(0), Stream.SPINE), walks, False)
    xi, _, _, s_d, _ = step(0, np.zeros(walks, np.int32), np.array([2**24, 2**24 + 1]))
    assert np.all(np.isfinite(xi[2**24 :])) and np.all(xi[2**24 :] > 0) and s_d[2**24 :].tolist() == [0, 0]
    assert xi[2**24] != xi[2**24 + 1]


def test_stationary_chain_of_a_deterministic_law_takes_its_closed_form():
    # zipf V = 2, s = 1: p = (2/3, 1/3), one state, pi = 1. The float64 closed form, not the moments of the law's
    # float32 log-probabilities (about 1e-8 off)
    h = math.log(3) - 2 / 3 * LN2
    m2 = 2 / 3 * math.log(1.5) ** 2 + 1 / 3 * math.log(3) ** 2
    st = stationary(jax.random.key(0), Zipf(V=2, s=1.0), samples=8, boot=4)
    assert st.pi.tolist() == [1.0] and st.mu_s.tolist() == pytest.approx([h], rel=1e-13)
    assert (st.mu, st.mu2) == pytest.approx((h, m2), rel=1e-13)


def test_long_run_law_of_an_irreducible_chain_is_its_stationary_law_from_any_start():
    # pi = (1/3, 2/3) whatever the initial law, one rounded to float32 included (float32 0.1 + 0.9 is 1 - 2.2e-8):
    # the fractions are not scaled by the initial law's total
    Q = np.array([[0.5, 0.5], [0.25, 0.75]])
    for initial in (np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.1, 0.9], np.float32)):
        np.testing.assert_allclose(long_run_law(Q, initial), [1 / 3, 2 / 3], rtol=1e-14)


def test_transient_states_have_no_long_run_share():
    # one closed class {2, 3} (pi = (1/3, 2/3) there) that does not hold every state: 0 and 1 are left for good,
    # so their long-run fraction is exactly 0 (the whole chain's eigenvector would leave rounding there)
    Q = np.array([[0.25, 0.25, 0.25, 0.25], [0.5, 0, 0, 0.5], [0, 0, 0.5, 0.5], [0, 0, 0.25, 0.75]])
    for initial in ([1.0, 0, 0, 0], [0, 0.5, 0.5, 0]):
        out = long_run_law(Q, np.array(initial))
        assert out[:2].tolist() == [0.0, 0.0]
        np.testing.assert_allclose(out[2:], [1 / 3, 2 / 3], rtol=1e-14)


def test_stationary_defaults_to_200_bootstrap_resamples():
    # a drawn law: the standard errors depend on how many resamples were drawn; the default is the documented 200
    law = LogitNormal(V=2, sigma=1.0)
    a = stationary(jax.random.key(0), law, samples=16)
    b = stationary(jax.random.key(0), law, samples=16, boot=200)
    assert a.mu_se > 0 and (a.mu_se, a.mu2_se) == (b.mu_se, b.mu2_se)


def test_one_bootstrap_resample_gives_no_standard_error():
    # the standard errors are sample standard deviations (ddof 1) over the resamples: undefined (NaN) for one
    # resample, not a population sd of 0 that would pass for an exact value; two equal resamples give 0
    law = fixed_law([0.5, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        st = stationary(jax.random.key(0), law, samples=8, boot=1)
    assert math.isnan(st.mu_se) and math.isnan(st.mu2_se) and np.isnan(st.pi_se).all()
    st = stationary(jax.random.key(0), law, samples=8, boot=2)
    assert (st.mu_se, st.mu2_se, st.pi_se.tolist()) == (0.0, 0.0, [0.0])
