"""The spine curves, the splitting and dual bounds and the closed forms against hand computations.

The two-walk example: walk 0 steps 1, 1 (S = 1, 2), walk 1 steps 2 then ends (S = 2), both observed up
to 2.5. Every value below is written from the definitions C_i(s) = #{d : S_{i,d} <= s} and
N_i(s) = sum_d e^{S_{i,d}} 1{S_{i,d} <= s} (left limits s -> u^- at a point u), per walk, by hand.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from brwsim._stats import MARGIN_Z, Z95
from brwsim.errors import BrwsimError
from brwsim.laws import fixed_law
from brwsim.spine import SpineCurves, curves_from_xi, law_curves
from brwsim.theory import asymptotic, bounds_from_curves, law_spine_bounds, renewal, spine_bounds, theorem1_leading
from brwsim.theory._bounds import check_margin_z, check_P_values
from brwsim.theory._closed_forms import renewal_formula
from brwsim.theory._imperfect import lorden, threshold_bound, threshold_counts

E = math.e
LN2 = math.log(2)
NAN = math.nan
XI = [[1.0, 1.0], [2.0, NAN]]


def curves(**kw):
    return SpineCurves(np.array(XI), cover=np.array([2.5, 2.5]), **kw)


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
    c = SpineCurves(xi, cover=cover)
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


def sixteen_walks():
    return np.array(XI * 8)  # the two-walk example eight times: same means, se divided by sqrt(8)


def test_spine_bounds_from_sampled_continuations_by_hand():
    out = spine_bounds(sixteen_walks(), [4], margin_z=MARGIN_Z)
    # observed to S = 2 (walk 0's last sum; walk 1 ended): candidates 1^- and 2^- only
    se2 = pop_se([1, 0] * 8)
    split = min([(4 / E, 0.0, 1.0), (0.5 + 4 * math.exp(-2), se2, 2.0)], key=lambda c: c[0] + MARGIN_Z * c[1])
    b = out[4]
    assert b.splitting.upper == pytest.approx(split[0] + MARGIN_Z * split[1]) and b.splitting.s == split[2]
    y = [1 - math.exp(-1), 0.0] * 8
    dual = min(
        [(4 / E, 0.0, 1.0), (np.mean(y) + 4 * math.exp(-2), pop_se(y), 2.0)], key=lambda c: c[0] + MARGIN_Z * c[1]
    )
    assert b.dual.upper == pytest.approx(dual[0] + MARGIN_Z * dual[1]) and b.dual.s == dual[2]
    assert spine_bounds(sixteen_walks(), [4], margin_z=0.0)[4].splitting.upper == pytest.approx(0.5 + 4 * math.exp(-2))
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
    out = spine_bounds(sixteen_walks(), [4], margin_z=0.0)[4]
    y = [1 - math.exp(-1), 0.0] * 8
    assert out.dual.upper == pytest.approx(min(4 / E, float(np.mean(y)) + 4 * math.exp(-2)))
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
    c = SpineCurves(np.array([[0.5], [0.5]]), cover=np.array([0.8, 0.8]))  # point 0.5, limit 0.8
    b = c.splitting(100.0, 0.0)  # 100 e^-0.5 = 60.7 against 1 + 100 e^-0.8 = 45.9: the limit wins
    assert b.s == 0.8 and b.estimate == pytest.approx(1 + 100 * math.exp(-0.8))
    c = SpineCurves(np.array([[0.5], [0.5]]), cover=np.array([0.3, 0.3]))  # no point below the limit
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
    got = SpineCurves(xi).splitting(6.0, z)
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
    c = SpineCurves(np.array([[0.5], [NAN]]), cover=np.array([0.5, 0.5]))
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
