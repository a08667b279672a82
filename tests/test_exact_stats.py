"""The statistics and the entropy moments against numbers computed by hand (no call compares the code with itself)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from brwsim._moments import Moments, StateMoments, entropy_moments
from brwsim._stats import MARGIN_Z, Z95, RunningStat, Stat, mean_ci95, paired_ci95, sample_chunks, t95

LN2 = math.log(2.0)


def test_z95_is_the_normal_975_quantile():
    assert Z95 == pytest.approx(sps.norm.ppf(0.975), abs=1e-12)
    assert MARGIN_Z == pytest.approx(sps.norm.ppf(0.975), abs=5e-3)  # the rounded 1.96, not 1.645 or 2.576


def test_stat_of_four_values():
    s = Stat.of([1.0, 2.0, 3.0, 4.0])  # mean 2.5, sample variance 5/3, se sqrt(5/12)
    assert (s.mean, s.n) == (2.5, 4)
    assert s.se == pytest.approx(math.sqrt(5 / 12), rel=1e-12)
    assert s.ci95 == pytest.approx(1.959963984540054 * math.sqrt(5 / 12), rel=1e-12)
    one = Stat.of([7.0])
    assert one.mean == 7.0 and one.n == 1 and math.isnan(one.se)


def test_stat_of_two_dimensional_samples_uses_the_first_axis():
    s = Stat.of(np.array([[0.0, 1.0], [2.0, 3.0]]))
    assert s.n == 2 and s.mean == 1.5


class _SmallBlock(RunningStat):
    BLOCK = 4  # folds every four values: the pairwise update runs several times on ten values


@pytest.mark.parametrize("cls", [RunningStat, _SmallBlock])
@pytest.mark.parametrize("pieces", [[10], [3, 3, 4], [1] * 10, [4, 4, 2], [5, 5]])
def test_running_stat_of_one_to_ten(cls, pieces):
    r, v = cls(), np.arange(1.0, 11.0)  # mean 5.5, sample variance 10 * 11 / 12
    i = 0
    for k in pieces:
        r.add(v[i : i + k] if k > 1 else float(v[i]))
        i += k
        assert r.n == i
    s = r.stat()
    assert (s.mean, s.n) == (5.5, 10)
    assert s.se == pytest.approx(math.sqrt(110 / 12 / 10), rel=1e-12)
    r.add([5.5])  # an eleventh value at the mean: squared deviations still 82.5, sample variance 82.5 / 10
    s = r.stat()
    assert (s.mean, s.n) == (5.5, 11)
    assert s.se == pytest.approx(math.sqrt(8.25 / 11), rel=1e-12)


def test_running_stat_one_and_none():
    r = _SmallBlock()
    r.add(3.0)
    s = r.stat()
    assert s.mean == 3.0 and s.n == 1 and math.isnan(s.se)
    r = _SmallBlock()
    r.add(np.arange(4.0))
    r.add(np.arange(4.0, 5.0))  # one full block folded, one value after it
    r.add(np.arange(5.0, 6.0))
    s = r.stat()  # 0..5: mean 2.5, sample variance 3.5
    assert (s.mean, s.n) == (2.5, 6) and s.se == pytest.approx(math.sqrt(3.5 / 6), rel=1e-12)


def test_running_stat_exactly_one_full_block():
    r = _SmallBlock()
    r.add([2.0, 4.0, 4.0, 6.0])  # mean 4, sample variance 8/3
    s = r.stat()
    assert (s.mean, s.n) == (4.0, 4) and s.se == pytest.approx(math.sqrt(8 / 3 / 4), rel=1e-12)
    s = r.stat()  # a second call gives the same
    assert (s.mean, s.n) == (4.0, 4) and s.se == pytest.approx(math.sqrt(8 / 3 / 4), rel=1e-12)


def test_mean_ci95_by_hand():
    m, h = mean_ci95([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and h == pytest.approx(sps.t.ppf(0.975, 3) * math.sqrt(5 / 12), rel=1e-9)  # Student t, 3 df
    m, h = mean_ci95([])
    assert math.isnan(m) and math.isnan(h)
    m, h = mean_ci95([9.0])
    assert m == 9.0 and math.isnan(h)


@pytest.mark.parametrize("width", [1, 2**22 // 3, 2**22])
def test_sample_chunks_item_i_gets_fold_in_of_i(width):
    base = jax.random.key(11)

    @jax.jit
    def f(keys):
        u = jax.vmap(lambda k: jax.random.uniform(k))(keys)
        return u, 2 * u

    u, v = sample_chunks(f, base, 7, width)
    want = np.array([float(jax.random.uniform(jax.random.fold_in(base, i))) for i in range(7)])
    assert u.shape == (7,) and u.dtype == np.float64
    np.testing.assert_allclose(u, want, rtol=1e-6)
    np.testing.assert_allclose(v, 2 * want, rtol=1e-6)
    (w,) = sample_chunks(jax.jit(lambda k: jax.vmap(jax.random.uniform)(k)), base, 7, width)  # a bare array
    np.testing.assert_allclose(w, want, rtol=1e-6)


# (H, M2) by hand: uniform on four, (1/2, 1/4, 1/4), a point mass, a zero-probability entry
CASES = [
    ([0.25] * 4, math.log(4), math.log(4) ** 2),
    ([0.5, 0.25, 0.25], 1.5 * LN2, 2.5 * LN2**2),
    ([1.0, 0.0, 0.0], 0.0, 0.0),
    ([0.5, 0.5, 0.0], LN2, LN2**2),
]


@pytest.mark.parametrize("probs,h,m2", CASES)
def test_entropy_moments_by_hand(probs, h, m2):
    with np.errstate(divide="ignore"):
        logp = np.log(np.array(probs))
    H, M2 = entropy_moments(logp)
    assert float(H) == pytest.approx(h, abs=1e-12) and float(M2) == pytest.approx(m2, abs=1e-12)
    Hj, M2j = entropy_moments(jnp.asarray(logp, jnp.float32))
    assert float(Hj) == pytest.approx(h, abs=1e-6) and float(M2j) == pytest.approx(m2, abs=1e-6)


def test_entropy_moments_rows_and_sum_dtype():
    logp = np.log(np.array([[0.25] * 4, [0.5, 0.25, 0.125, 0.125]], np.float32))
    H, M2 = entropy_moments(logp, sum_dtype=np.float64)
    assert H.dtype == np.float64 and M2.dtype == np.float64
    # row 2: H = 1.75 ln 2, M2 = (1/2 + 4/4 + 9/8 + 9/8) (ln 2)^2 = 3.75 (ln 2)^2
    np.testing.assert_allclose(H, [math.log(4), 1.75 * LN2], rtol=1e-6)
    np.testing.assert_allclose(M2, [math.log(4) ** 2, 3.75 * LN2**2], rtol=1e-6)


def test_moments_records():
    m = Moments(mu=1.0, mu2=2.0)
    assert (m.mu_se, m.mu2_se, m.exact, m.per_state) == (0.0, 0.0, True, None)
    s = StateMoments(fraction=0.25, fraction_se=0.01, mu=1.5, mu2=3.0, exact=False)
    assert s.to_dict() == {"fraction": 0.25, "fraction_se": 0.01, "mu": 1.5, "mu2": 3.0, "exact": False}


def test_float32_samples_are_summed_in_float64():
    x = np.float32([2**24, 1, 1, 1])  # the sum 2^24 + 3 is not a float32 (it would round to 2^24 + 4)
    assert Stat.of(x).mean == (2**24 + 3) / 4
    assert mean_ci95(x)[0] == (2**24 + 3) / 4


def test_mean_ci95_of_two_values():
    m, h = mean_ci95([1.0, 3.0])  # sample sd sqrt(2), se 1, Student t with 1 df: 12.706
    assert m == 2.0 and h == pytest.approx(sps.t.ppf(0.975, 1), rel=1e-9)


class _OneBlock(RunningStat):
    BLOCK = 1  # every value after the first is folded


def test_running_stat_folds_from_zero():
    r = _OneBlock()
    r.add([1.0, 3.0])
    s = r.stat()
    assert (s.mean, s.n) == (2.0, 2) and s.se == pytest.approx(1.0, rel=1e-12)
    r = _SmallBlock()
    r.add(np.array([1.0, 2.0, 3.0, 4.0, 5.0]) * 1e-20)  # a running mean that starts anywhere but 0 loses these
    s = r.stat()
    assert s.mean == pytest.approx(3e-20, rel=1e-12, abs=0)
    assert s.se == pytest.approx(math.sqrt(2.5 / 5) * 1e-20, rel=1e-9, abs=0)


def test_stat_of_two_values():
    s = Stat.of([1.0, 3.0])  # sample sd sqrt(2), se 1
    assert (s.mean, s.n) == (2.0, 2) and s.se == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("width,bound", [(2**22 // 3, 3), (2**22, 1), (2**20, 4)])
def test_sample_chunks_stay_within_their_memory_bound(width, bound):
    sizes = []
    g = jax.jit(jax.vmap(lambda k: jax.random.uniform(k)))

    def f(keys):
        sizes.append(keys.shape[0])
        return g(keys)

    (u,) = sample_chunks(f, jax.random.key(1), 7, width)
    assert u.shape == (7,) and set(sizes) == {bound}  # chunks of 2^22 // width items, all of one shape


# Student t, two-sided 95% (the 97.5% quantile), from a printed table: degrees of freedom -> quantile
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 9: 2.262, 63: 1.998}


@pytest.mark.parametrize("df,q", sorted(T_TABLE.items()))
def test_t95_against_the_printed_table(df, q):
    assert t95(df + 1) == pytest.approx(q, abs=6e-4)  # the table rounds to three decimals


def test_t95_needs_two_values():
    for n in (1, 0, -3):
        with pytest.raises(ValueError) as e:
            t95(n)
        assert str(e.value) == f"a t interval needs at least 2 values, got {n}"


def test_mean_ci95_of_three_values_by_hand():
    m, h = mean_ci95([2.0, 4.0, 9.0])  # mean 5, squared deviations 9 + 1 + 16 = 26, s^2 = 13
    assert m == 5.0 and h == pytest.approx(4.303 * math.sqrt(13 / 3), rel=2e-4)
    m, h = mean_ci95(np.arange(10.0))  # mean 4.5, s^2 = 55 / 6 (= 10 * 11 / 12)
    assert m == 4.5 and h == pytest.approx(2.262 * math.sqrt(55 / 6 / 10), rel=2e-4)


def test_paired_ci95_by_hand():
    m, h = paired_ci95([3.0, 5.0, 10.0], [1.0, 1.0, 1.0])  # differences 2, 4, 9
    assert m == 5.0 and h == pytest.approx(4.303 * math.sqrt(13 / 3), rel=2e-4)
    # large shared prompt-to-prompt variation, differences 1, 2, 1: mean 4/3, s^2 = 1/3, half-width t / 3
    m, h = paired_ci95(np.array([10.0, 20.0, 30.0]), np.array([9.0, 18.0, 29.0]))
    assert m == pytest.approx(4 / 3, rel=1e-12) and h == pytest.approx(4.303 / 3, rel=2e-4)
    m, h = paired_ci95([2.0], [0.5])
    assert m == 1.5 and math.isnan(h)
    with pytest.raises(ValueError) as e:
        paired_ci95([1.0, 2.0], [1.0, 2.0, 3.0])
    assert str(e.value) == "paired samples need the same shape, got (2,) and (3,)"


def test_running_stat_state_and_restore_by_hand():
    r = _SmallBlock()
    r.add(np.arange(6.0))  # 0..3 folded when the fifth value came: n 4, mean 1.5, squared deviations 5; 4, 5 kept
    s = r.state()
    assert set(s) == {"buf", "n", "mean", "m2"}
    np.testing.assert_array_equal(s["buf"], [4.0, 5.0])
    assert (s["n"], s["mean"], s["m2"]) == (4, 1.5, 5.0)
    r.add([6.0])
    np.testing.assert_array_equal(s["buf"], [4.0, 5.0])  # a copy: later values do not change it
    back = _SmallBlock.restore({"buf": [4.0, 5.0], "n": 4, "mean": 1.5, "m2": 5.0})
    assert type(back) is _SmallBlock and back.n == 6
    st = back.stat()  # 0..5: mean 2.5, sample variance 3.5
    assert (st.mean, st.n) == (2.5, 6) and st.se == pytest.approx(math.sqrt(3.5 / 6), rel=1e-12)
    back.add([6.0, 7.0, 8.0])  # 0..8: mean 4, sample variance 7.5
    st = back.stat()
    assert (st.mean, st.n) == (4.0, 9) and st.se == pytest.approx(math.sqrt(7.5 / 9), rel=1e-12)
    fresh = RunningStat.restore({"buf": np.array([1.0, 3.0]), "n": 0, "mean": 0.0, "m2": 0.0})
    assert fresh.n == 2 and fresh.stat().mean == 2.0 and fresh.stat().se == pytest.approx(1.0, rel=1e-12)


def test_restored_statistic_of_one_folded_value():
    r = RunningStat.restore({"buf": [], "n": 1, "mean": 3.0, "m2": 0.0})  # one value, already folded
    s = r.stat()
    assert (s.mean, s.n) == (3.0, 1) and math.isnan(s.se)  # like Stat.of of one value
    r.add([5.0])  # 3, 5: mean 4, sample variance 2
    s = r.stat()
    assert (s.mean, s.n) == (4.0, 2) and s.se == pytest.approx(1.0, rel=1e-12)
