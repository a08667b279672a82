"""The laws' sampling parameters against facts of the distributions, computed independently of the code.

Each statistical check has a fixed seed and a tolerance of four standard errors of its own estimator.
"""

from __future__ import annotations

import math
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import polygamma, psi

from brwsim.errors import BrwsimError
from brwsim.laws import (
    Dirichlet,
    LogitNormal,
    Temp,
    Zipf,
    _base,
    check_distribution,
    dirichlet_moments,
    fixed_law,
    load_pool,
    log_gamma_variates,
    markov_law,
    parse_law,
    rank_of,
    topk_sorted,
)
from brwsim.laws._draw import uniform46
from brwsim.testing import returns_within
from brwsim.theory import moments, sample_moments

N = 4000


def keys(n, seed=0):
    return jax.random.split(jax.random.key(seed), n)


def full(law, n=N, seed=0):
    return np.asarray(jax.jit(jax.vmap(lambda k: law.full_logp(k, 0)))(keys(n, seed)), np.float64)


def steps(law, n=N, need_rank=True, seed=1):
    """(xi, rank, H, M2) of n spine steps of a fresh node, as float64 arrays."""
    tables, ex = law.spine_tables(), law.exact_moments()
    exact = None if ex is None else (float(ex[0]), float(ex[1]))
    f = jax.jit(jax.vmap(lambda k: law.spine_step(tables, k, need_rank, True, exact)))
    return [np.asarray(a, np.float64) for a in f(keys(n, seed))]


def close(x, want, se, k=4.0):
    assert abs(x - want) <= k * se, (x, want, se)


def check_freq(hits, p):
    """A frequency against its probability, within four binomial standard errors."""
    close(np.mean(hits), p, math.sqrt(p * (1 - p) / np.size(hits)) + 1e-12)


def check_var(x, var):
    """A sample variance against the true one: SE of s^2 is about var sqrt(2 / (n - 1)) for a normal sample."""
    close(np.var(x, ddof=1), var, var * math.sqrt(2 / (len(x) - 1)))


@pytest.mark.parametrize("sigma", [1.5])
def test_logitnormal_log_odds_are_normal_with_variance_two_sigma_squared(sigma):
    lp = full(LogitNormal(V=3, sigma=sigma))
    np.testing.assert_allclose(np.logaddexp.reduce(lp, axis=1), 0.0, atol=1e-5)  # normalised
    d = lp[:, 0] - lp[:, 2]  # z_0 - z_2 ~ N(0, 2 sigma^2): softmax keeps differences
    close(d.mean(), 0.0, math.sqrt(2 * sigma**2 / N))
    check_var(d, 2 * sigma**2)


@pytest.mark.parametrize("s,s_sd", [(0.6, 0.5)])
def test_zipf_random_exponent_is_lognormal_with_median_s(s, s_sd):
    lp = full(Zipf(V=5, s=s, s_sd=s_sd))
    s_u = (lp[:, 0] - lp[:, 1]) / math.log(2)  # p_1 / p_2 = 2^s_u
    np.testing.assert_allclose((lp[:, 0] - lp[:, 3]) / math.log(4), s_u, rtol=1e-4)  # p_1 / p_4 = 4^s_u
    log_s = np.log(s_u)
    close(log_s.mean(), math.log(s), s_sd / math.sqrt(N))
    check_var(log_s, s_sd**2)


def test_zipf_deterministic_by_hand():
    z = Zipf(V=3, s=1.0)
    p = np.array([6, 3, 2]) / 11  # 1, 1/2, 1/3 over 11/6
    np.testing.assert_allclose(np.exp(np.asarray(z.full_logp(None, 0))), p, rtol=1e-6)
    np.testing.assert_allclose(np.exp(np.asarray(z.node_logp(None, 0, 2))), p[:2], rtol=1e-6)
    padded = np.asarray(z.node_logp(None, 0, 5))
    np.testing.assert_allclose(np.exp(padded[:3]), p, rtol=1e-6)
    assert np.all(np.isneginf(padded[3:]))
    h, m2 = Zipf(V=2, s=1.0).exact_moments()  # p = (2/3, 1/3)
    L = math.log
    assert h == pytest.approx(2 / 3 * L(1.5) + 1 / 3 * L(3), rel=1e-12)
    assert m2 == pytest.approx(2 / 3 * L(1.5) ** 2 + 1 / 3 * L(3) ** 2, rel=1e-12)
    assert z.deterministic and not Zipf(V=3, s=1.0, s_sd=0.2).deterministic
    assert Zipf(V=3, s=1.0, s_sd=0.2).exact_moments() is None
    assert Zipf(V=3, s=1.0, s_sd=0.2).spec() == "zipf:V=3,s=1,s_sd=0.2" and z.spec() == "zipf:V=3,s=1"


def test_zipf_deterministic_spine_steps():
    z = Zipf(V=3, s=1.0)
    p = np.array([6, 3, 2]) / 11
    xi, r, h, m2 = steps(z)
    for c in range(3):
        check_freq(r == c, p[c])
    np.testing.assert_allclose(xi, -np.log(p[r.astype(int)]), rtol=1e-5)
    ex = z.exact_moments()
    np.testing.assert_allclose(h, ex[0], rtol=1e-6)
    np.testing.assert_allclose(m2, ex[1], rtol=1e-6)
    assert not z.costly_spine_step(True) and Zipf(V=3, s=1.0, s_sd=0.2).costly_spine_step(False)


def test_zipf_random_exponent_spine_picks_the_top_child_with_its_mean_probability():
    s, s_sd, V = 1.0, 0.5, 3
    x, w = np.polynomial.hermite_e.hermegauss(60)  # E over s_u = s exp(s_sd Z), Z ~ N(0, 1), by quadrature
    s_u = s * np.exp(s_sd * x)
    p0 = 1 / sum(i ** (-s_u) for i in range(1, V + 1))
    p_top = float((w * p0).sum() / w.sum())
    xi, r, h, _ = steps(Zipf(V=V, s=s, s_sd=s_sd), need_rank=True)
    check_freq(r == 0, p_top)
    assert np.all(h > 0) and np.all(xi >= 0)


def _pool(tmp_path, probs, **extra):
    np.savez(tmp_path / "pool.npz", probs=np.array(probs), **extra)
    return load_pool(str(tmp_path / "pool.npz"))


def test_pool_spine_walk_draws_a_row_uniformly_then_a_child(tmp_path):
    pool = _pool(tmp_path, [[0.7, 0.2, 0.1], [0.2, 0.4, 0.4]])
    xi, r, h, m2 = steps(pool, n=8000)
    H = [
        -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)),
        -(0.2 * math.log(0.2) + 0.8 * math.log(0.4)),
    ]
    row = np.where(np.abs(h - H[0]) < 1e-4, 0, 1)
    np.testing.assert_allclose(h, np.array(H)[row], rtol=1e-5)
    sorted_rows = np.array([[0.7, 0.2, 0.1], [0.4, 0.4, 0.2]])
    for i in range(2):
        for c in range(3):
            check_freq((row == i) & (r == c), sorted_rows[i, c] / 2)
    np.testing.assert_allclose(xi, -np.log(sorted_rows[row, r.astype(int)]), rtol=1e-5)
    lp = full(pool, n=N)  # each node's distribution: one of the two rows, each half the time
    check_freq(np.abs(lp[:, 0] - math.log(0.7)) < 1e-5, 0.5)


def test_truncated_pool_steps_into_the_tail(tmp_path):
    pool = _pool(tmp_path, [[0.5, 0.3], [0.85, 0.05]], entropy=np.array([1.0, 2.0]), m2=np.array([3.0, 5.0]))
    assert pool.truncated and pool.exact_moments() == pytest.approx((1.5, 4.0))
    tail = np.asarray(pool.spine_tables()["tail"])
    # -log of the tail mass, but at least -log of the last kept probability
    np.testing.assert_allclose(tail, [-math.log(0.2), -math.log(0.05)], rtol=1e-5)
    xi, r, h, _ = steps(pool, n=8000)
    row = (h > 1.5).astype(int)
    joint = np.array([[0.5, 0.3, 0.2], [0.85, 0.05, 0.1]]) / 2  # rank 2 = the tail
    for i in range(2):
        for c in range(3):
            check_freq((row == i) & (r == c), joint[i, c])
    in_tail = r == 2
    np.testing.assert_allclose(xi[in_tail], tail[row[in_tail]], rtol=1e-6)
    with pytest.raises(BrwsimError):
        pool.check_budget(3)
    pool.check_budget(2)


def _squeeze_by_hand(key, alpha, n):
    """log Gamma(alpha) variates by Marsaglia and Tsang's method, written out in float64 from the same draws.

    With kloop, kpow the halves of the key and a = alpha (alpha + 1 below 1): d = a - 1/3, c = 1/sqrt(9d);
    pass i = 0, 1, ... draws (Z, U) from the halves of split(fold_in(kloop, i)), v = (1 + cZ)^3, and an entry
    keeps log(d v) from the first pass with v > 0 and log U < Z^2/2 + d - d v + d log v. Below 1 it then adds
    log(U') / alpha, U' uniform on [tiny, 1) from kpow (Gamma(alpha) = Gamma(alpha + 1) U'^(1/alpha)).
    Returns the variates and the number of passes.
    """
    kloop, kpow = jax.random.split(key)
    a = alpha + 1.0 if alpha < 1 else alpha
    d = a - 1 / 3
    c = 1 / math.sqrt(9 * d)
    x = np.full(n, np.nan)
    i = 0
    while np.isnan(x).any():
        kn, ku = jax.random.split(jax.random.fold_in(kloop, i))
        z = np.asarray(jax.random.normal(kn, (n,)), np.float64)
        u = np.asarray(jax.random.uniform(ku, (n,)), np.float64)
        v = (1 + c * z) ** 3
        logv = np.log(np.where(v > 0, v, 1.0))
        ok = (v > 0) & (np.log(u) < 0.5 * z * z + d - d * v + d * logv)
        x = np.where(np.isnan(x) & ok, math.log(d) + logv, x)
        i += 1
    if alpha < 1:
        tiny = np.finfo(np.float32).tiny
        x = x + np.log(np.asarray(jax.random.uniform(kpow, (n,), minval=tiny), np.float64)) / alpha
    return x, i


@pytest.mark.parametrize("alpha", [0.3, 1.0, 1.2, 2.5])
def test_log_gamma_variates_have_the_gamma_law(alpha):
    # the rejection loop ends: every entry is accepted within a few passes
    x = np.asarray(returns_within(15, log_gamma_variates, jax.random.key(3), alpha, (20000,)), np.float64)
    # draw by draw, the squeeze method written out by hand (several passes: some entries were rejected)
    want, passes = _squeeze_by_hand(jax.random.key(3), alpha, 20000)
    assert passes >= 2
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-6)
    # log G, G ~ Gamma(alpha): mean psi(alpha), variance psi'(alpha); E[G] = Var[G] = alpha
    close(x.mean(), psi(alpha), math.sqrt(polygamma(1, alpha) / x.size))
    close(np.var(x, ddof=1), polygamma(1, alpha), 0.05 * polygamma(1, alpha))
    g = np.exp(x)
    close(g.mean(), alpha, math.sqrt(alpha / g.size))
    # and the whole law: the Kolmogorov-Smirnov distance to the Gamma(alpha) CDF (far inside its 1e-3 value here)
    assert stats.kstest(g, stats.gamma(alpha).cdf).pvalue > 1e-3


def test_dirichlet_marginal_is_beta():
    V, alpha = 3, 0.5
    A = V * alpha
    p0 = np.exp(full(Dirichlet(V=V, alpha=alpha))[:, 0])  # Beta(alpha, A - alpha)
    var = alpha * (A - alpha) / (A * A * (A + 1))
    close(p0.mean(), 1 / V, math.sqrt(var / N))
    close(np.var(p0, ddof=1), var, 0.1 * var)


def test_dirichlet_spine_step_is_the_size_biased_beta():
    V, alpha = 4, 0.3
    a, b = alpha + 1, (V - 1) * alpha  # the chosen child's probability ~ Beta(alpha + 1, (V - 1) alpha)
    xi, r, h, m2 = steps(Dirichlet(V=V, alpha=alpha), need_rank=False, n=8000)
    close(xi.mean(), psi(a + b) - psi(a), math.sqrt((polygamma(1, a) - polygamma(1, a + b)) / xi.size))
    assert np.all(r == 0)


def test_dirichlet_moments_for_the_uniform_simplex():
    # V = 2, alpha = 1: p_1 uniform; E[H] = 2 int -p log p = 1/2, E[M2] = 2 int p (log p)^2 = 1/2
    assert dirichlet_moments(2, 1.0) == pytest.approx((0.5, 0.5), rel=1e-12)
    assert Dirichlet(V=2, alpha=1.0).exact_moments() == pytest.approx((0.5, 0.5), rel=1e-12)


def test_temperature_by_hand():
    law = Temp(law=fixed_law([0.5, 0.25, 0.25]), T=0.5)  # p^2 / sum p^2 = (2/3, 1/6, 1/6)
    np.testing.assert_allclose(np.exp(np.asarray(law.full_logp(None, 0))), [2 / 3, 1 / 6, 1 / 6], rtol=1e-6)
    assert law.deterministic and law.vocab == 3


def test_fixed_law_by_hand():
    f = fixed_law([0.25, 0.5, 0.25])
    np.testing.assert_allclose(np.exp(np.asarray(f.logp)), [0.5, 0.25, 0.25], rtol=1e-7)  # sorted decreasing
    assert f.exact_moments() == pytest.approx((1.5 * math.log(2), 2.5 * math.log(2) ** 2), rel=1e-6)
    xi, r, h, _ = steps(f)
    check_freq(r == 0, 0.5)
    np.testing.assert_allclose(xi, np.where(r == 0, math.log(2), math.log(4)), rtol=1e-6)


def test_rank_ties_go_to_the_smaller_index_and_topk_pads():
    lp = jnp.array([0.1, 0.3, 0.3, 0.3, -1.0])
    assert [int(rank_of(lp, t)) for t in range(5)] == [3, 0, 1, 2, 4]
    np.testing.assert_array_equal(np.asarray(topk_sorted(lp, 2)), np.float32([0.3, 0.3]))
    t = np.asarray(topk_sorted(lp, 7))
    np.testing.assert_allclose(t[:5], [0.3, 0.3, 0.3, 0.1, -1.0])
    assert np.all(np.isneginf(t[5:]))


@pytest.mark.parametrize("bad", [[], [0.5, np.nan], [1.5, -0.5], [0.5, 0.4]])
def test_check_distribution_refuses(bad):
    with pytest.raises(BrwsimError):
        check_distribution(bad, "test")
    assert check_distribution([0.5, 0.5 + 5e-7], "ok").dtype == np.float64


def test_monte_carlo_moments_of_a_law_without_a_closed_form():
    V, alpha = 4, 0.5
    # one ulp above T = 1: a tempered Dirichlet has no closed form in the code, and 1/T is 1 in float32 (the law
    # draws exactly Dirichlet(alpha)'s rows)
    law = Temp(law=Dirichlet(V=V, alpha=alpha), T=1.0 + 2**-52)
    A = V * alpha
    mu = psi(A + 1) - psi(alpha + 1)  # E[H] and E[M2] of Dirichlet(alpha 1_V), from the Beta marginals
    mu2 = (psi(alpha + 1) - psi(A + 1)) ** 2 + polygamma(1, alpha + 1) - polygamma(1, A + 1)
    m = moments(jax.random.key(4), law, samples=4000)
    assert m.exact is False and m.mu_se > 0 and m.mu2_se > 0
    close(m.mu, mu, m.mu_se)
    close(m.mu2, mu2, m.mu2_se)
    small = moments(jax.random.key(4), law, samples=1000)  # a quarter of the samples: twice the se
    assert 1.7 < small.mu_se / m.mu_se < 2.3 and 1.7 < small.mu2_se / m.mu2_se < 2.3
    h, m2 = sample_moments(jax.random.key(4), law, 8)
    assert h.shape == (8,) and m2.shape == (8,) and np.all(m2 >= h**2 - 1e-5)
    exact = moments(jax.random.key(4), fixed_law([0.5, 0.5]))
    assert exact.exact and (exact.mu, exact.mu2, exact.mu_se) == pytest.approx((math.log(2), math.log(2) ** 2, 0))


def test_moments_of_a_markov_law_and_of_one_state():
    law = markov_law(
        {
            "states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.75/0.25"},
            "initial": "a",
            "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
        }
    )
    h, m2 = sample_moments(jax.random.key(0), law, 4, state=1)  # state b's own distribution, at every draw
    hb = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    np.testing.assert_allclose(h, hb, rtol=1e-5)
    np.testing.assert_allclose(m2, 0.75 * math.log(0.75) ** 2 + 0.25 * math.log(0.25) ** 2, rtol=1e-5)
    # the spine moves to a or b with probability 1/2 whatever the rank: long-run mu = (ln 2 + H_b) / 2
    m = moments(jax.random.key(0), law)
    assert m.mu == pytest.approx((math.log(2) + hb) / 2, abs=4 * m.mu_se + 1e-6)


# -- the shared helpers of every law: top-K, normalisation, scaling, validation, the SPEC parser


def test_topk_sorted_pads_every_row_of_a_batch():
    lp = jnp.array([[-1.0, 0.0, -2.0], [-0.5, -3.0, -0.1]])
    np.testing.assert_array_equal(np.asarray(topk_sorted(lp, 2)), np.float32([[0.0, -1.0], [-0.1, -0.5]]))
    np.testing.assert_array_equal(np.asarray(topk_sorted(lp, 3)), np.float32([[0, -1, -2], [-0.1, -0.5, -3]]))
    t = np.asarray(topk_sorted(lp, 5))
    assert t.shape == (2, 5) and t.dtype == np.float32 and np.all(np.isneginf(t[:, 3:]))
    np.testing.assert_array_equal(t[:, :3], np.float32([[0, -1, -2], [-0.1, -0.5, -3]]))


def test_log_normalize_and_scale_logits_by_hand():
    L2, L3 = math.log(2), math.log(3)
    log_normalize, scale_logits = jax.jit(_base.log_normalize), jax.jit(_base.scale_logits, static_argnums=1)
    # rows of any scale: (1/3, 2/3) and (e, 1) / (1 + e), each along the last axis; a row of -inf stays -inf
    z = jnp.array([[0.0, L2], [1e6 + 1, 1e6], [-jnp.inf, -jnp.inf]])
    out = np.asarray(log_normalize(z), np.float64)
    e = math.e
    np.testing.assert_allclose(np.exp(out[:2]), [[1 / 3, 2 / 3], [e / (1 + e), 1 / (1 + e)]], rtol=1e-6)
    assert np.all(out[:2] <= 0) and np.all(np.isneginf(out[2]))
    y = jnp.array([[0.0, -L2, -jnp.inf], [-L3, 0.0, -1.0]])
    np.testing.assert_allclose(np.asarray(scale_logits(y, 2.0)), [[0, -2 * L2, -np.inf], [-2 * L3, 0, -2]], rtol=1e-6)
    # c = inf: every entry below the largest becomes -inf; the largest stays 0
    pm = np.asarray(scale_logits(y, math.inf))
    np.testing.assert_array_equal(pm, [[0, -np.inf, -np.inf], [-np.inf, 0, -np.inf]])
    # c = float32's largest finite value is finite: no entry in (-1, 0) becomes -inf
    big = np.asarray(scale_logits(jnp.array([0.0, -0.5]), float(np.finfo(np.float32).max)))
    assert big[0] == 0 and np.isfinite(big[1]) and big[1] < -1e38
    # c above float32's range (1e39) is the point mass, silently (no overflow warning from the float32 cast)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(np.asarray(_base.scale_logits(y, 1e39)), pm)


def test_check_distribution_messages_and_edges():
    for bad, msg in [
        ([], "at least one probability"),
        ([[0.5, 0.5]], "must be numbers, found \\[0.5, 0.5\\]"),
        ([0.5, np.nan], "finite"),
        ([1.5, -0.5], ">= 0"),
        ([0.5, 0.4], "sum to"),
    ]:
        with pytest.raises(BrwsimError, match=msg):
            check_distribution(bad, "test")
    with pytest.raises(BrwsimError, match="^fixed law: probabilities sum to 0.9,"):
        fixed_law([0.5, 0.4])
    near = np.exp(np.asarray(fixed_law([0.5, 0.5 + 9e-7]).logp, np.float64))  # within 1e-6: renormalised
    np.testing.assert_allclose(near, [(0.5 + 9e-7) / (1 + 9e-7), 0.5 / (1 + 9e-7)], rtol=2e-7)
    one = check_distribution([1], "one")  # V = 1, an integer probability: float64
    assert one.dtype == np.float64 and one.tolist() == [1.0]
    np.testing.assert_array_equal(check_distribution([1.0, 0.0], "a zero"), [1.0, 0.0])


def test_parse_law_families_and_keys():
    law = parse_law("dirichlet:V=1,alpha=0.5")
    assert isinstance(law, Dirichlet) and law.V == 1 and type(law.V) is int and law.alpha == 0.5
    assert parse_law(f"dirichlet:V={2**31 - 1},alpha=1").V == 2**31 - 1
    ln = parse_law("logitnormal:V=7,sigma=0.5")
    assert isinstance(ln, LogitNormal) and (ln.V, ln.sigma) == (7, 0.5)
    z = parse_law("zipf:V=4,s=0.5")
    assert isinstance(z, Zipf) and (z.V, z.s, z.s_sd) == (4, 0.5, 0.0) and z.deterministic
    assert parse_law("zipf:V=4,s=0.5,s_sd=0.25").s_sd == 0.25
    f = parse_law("fixed:probs=0.25/0.5/0.25")
    np.testing.assert_allclose(np.exp(np.asarray(f.logp)), [0.5, 0.25, 0.25], rtol=1e-7)
    t = parse_law("temp:T=0.5,law=zipf:V=3,s=1")  # the inner SPEC keeps its commas
    assert isinstance(t, Temp) and t.T == 0.5 and isinstance(t.law, Zipf) and t.law.V == 3
    assert t.spec() == "temp:T=0.5,law=zipf:V=3,s=1"
    t2 = parse_law("temp:T=2,law=fixed:probs=0.25/0.5/0.25")  # spec() keeps the inner text as given
    assert t2.spec() == "temp:T=2,law=fixed:probs=0.25/0.5/0.25"
    inner = fixed_law([0.25, 0.5, 0.25])
    assert Temp(law=inner, T=0.5).spec() == "temp:T=0.5,law=" + inner.spec()
    text = inner.spec()  # sorted, and read back to the same law
    assert text.startswith("fixed:probs=") and len(text.split("/")) == 3
    np.testing.assert_allclose([float(x) for x in text[12:].split("/")], [0.5, 0.25, 0.25], rtol=1e-8)
    np.testing.assert_array_equal(np.asarray(parse_law(text).logp), np.asarray(inner.logp))
    assert parse_law(law) is law


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("dirichlet:V=0,alpha=1", "V must be >= 1"),
        ("dirichlet:V=2.5,alpha=1", "V must be an integer"),
        (f"dirichlet:V={2**31},alpha=1", "V must be <= "),
        ("dirichlet:V=2,alpha=0", "alpha must be > 0"),
        ("dirichlet:V=2,alpha=-1", "alpha must be > 0"),
        ("dirichlet:V=2,alpha=1e21", "alpha must be <= "),
        ("logitnormal:V=2,sigma=0", "sigma must be > 0"),
        ("logitnormal:V=2,sigma=-1", "sigma must be > 0"),
        ("zipf:V=2,s=0", "s must be > 0"),
        ("zipf:V=2,s=-1", "s must be > 0"),
        ("zipf:V=2,s=1,s_sd=-1", "s_sd must be >= 0"),
        ("zipf:V=2,s=1,s_sd=1e31", "s_sd must be <= "),
        ("temp:T=0,law=zipf:V=2,s=1", "T must be > 0"),
        ("temp:T=-1,law=zipf:V=2,s=1", "T must be > 0"),
        ("temp:T=1,law=", "law= needs a law SPEC"),
        ("fixed:probs=a/b", "probs must be numbers separated by '/'"),
        ("bogus:V=1", "^law 'bogus:V=1': unknown family"),
        ("fixed:", "^law 'fixed:': missing key"),
        ("   ", "non-empty string"),
        (5, "non-empty string"),
        ("fixed.txt", "expected family:key=value,... with family one of dirichlet, fixed, logitnormal, markov"),
    ],
)
def test_parse_law_refuses_with_a_message(spec, msg):
    with pytest.raises(BrwsimError, match=msg):
        parse_law(spec)


def test_parse_law_accepts_the_edges_of_each_range():
    assert parse_law("dirichlet:V=2,alpha=1e20").alpha == 1e20
    assert parse_law("zipf:V=2,s=1,s_sd=1e30").s_sd == 1e30
    assert parse_law("zipf:V=2,s=0.25").s == 0.25 and parse_law("temp:T=0.25,law=zipf:V=2,s=1").T == 0.25


def _two_state_cfg(b="fixed:probs=0.75/0.25"):
    return {
        "states": {"a": "fixed:probs=0.5/0.5", "b": b},
        "initial": "a",
        "kernel": {"a": [[0.5, 0.5]], "b": [[1, 0]]},
    }


def test_parse_law_reads_bare_paths_by_their_ending(tmp_path):
    import json

    d = tmp_path / "a:b"  # a colon in the directory: still a bare path
    d.mkdir()
    (d / "law.json").write_text(json.dumps(_two_state_cfg()))
    m = parse_law(str(d / "law.json"))
    assert m.state_names() == ["a", "b"] and m.spec() == f"markov:path={d / 'law.json'}"
    (tmp_path / "LAW.TOML").write_text(
        'initial = "a"\n[states]\na = "fixed:probs=0.5/0.5"\nb = "fixed:probs=0.75/0.25"\n'
        "[kernel]\na = [[0.5, 0.5]]\nb = [[1.0, 0.0]]\n"
    )
    assert parse_law(str(tmp_path / "LAW.TOML")).state_names() == ["a", "b"]
    np.savez(tmp_path / "p.npz", probs=np.array([[0.5, 0.5]]))
    p = parse_law(str(tmp_path / "p.npz"))
    assert p.size == 1 and p.spec() == f"pool:path={tmp_path / 'p.npz'}"
    with open(d / "P.NPZ", "wb") as f:  # a pool too may sit under a colon, its ending in any case
        np.savez(f, probs=np.array([[0.25, 0.75]]))
    assert parse_law(str(d / "P.NPZ")).spec() == f"pool:path={d / 'P.NPZ'}"
    assert parse_law(f"pool:path={tmp_path / 'p.npz'}").size == 1
    with pytest.raises(BrwsimError, match="cannot be read"):
        parse_law(f"markov:path={tmp_path / 'missing.json'}")


# -- the i.i.d. interface, the temperature law, extreme parameters


def test_an_iid_law_has_one_state_zero():
    law = Temp(law=fixed_law([0.5, 0.25, 0.25]), T=0.5)
    k = jax.random.key(0)
    assert int(law.init_state(k)) == 0 and int(law.child_state(k, jnp.int32(0), jnp.int32(3))) == 0
    assert law.state_names() == ["iid"] and law.sub_laws() == (law,) and law.costly_spine_step(False)
    assert law.state_kernel().shape == (1, 1, 1) and law.state_kernel()[0, 0, 0] == 1
    assert law.initial_probs().tolist() == [1.0] and law.exact_moments() is None
    np.testing.assert_allclose(np.exp(np.asarray(law.node_logp(k, 0, 2))), [2 / 3, 1 / 6], rtol=1e-6)


def test_a_fixed_laws_zero_probability_is_minus_infinity_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        law = fixed_law([0.75, 0.0, 0.25])
    np.testing.assert_array_equal(np.asarray(law.logp), np.float32([math.log(0.75), math.log(0.25), -np.inf]))


def test_base_node_logp_is_the_top_k_of_the_states_own_row():
    # the base class's node_logp is the K largest entries of full_logp(key, state), sorted: for a law whose
    # rows are its states, state 1's row (0.2, 0.7, 0.1) gives (0.7, 0.2), not state 0's (0.5, 0.3)
    from brwsim.testing import TableLaw

    class ViaFull(TableLaw):
        node_logp = _base.Law.node_logp

    law = ViaFull(logp=jnp.log(jnp.array([[0.5, 0.3, 0.2], [0.2, 0.7, 0.1]], jnp.float32)))
    np.testing.assert_allclose(np.exp(np.asarray(law.node_logp(None, 1, 2))), [0.7, 0.2], rtol=1e-6)
    np.testing.assert_allclose(np.exp(np.asarray(law.node_logp(None, 0, 2))), [0.5, 0.3], rtol=1e-6)


def test_base_spine_step_walks_the_state_zero_row_of_a_one_row_table():
    # a one-row TableLaw is an i.i.d. law: every node has the row (0.5, 0.3, 0.2), read as state 0; the base
    # class's inverse-CDF step picks child c with probability p_c, xi = -log p_c, rank c (the row is sorted)
    from brwsim.testing import TableLaw

    p = np.array([0.5, 0.3, 0.2])
    law = TableLaw(logp=jnp.asarray(np.log(p)[None], jnp.float32))
    xi, r, h, m2 = steps(law, need_rank=True)
    assert xi.shape == r.shape == h.shape == m2.shape == (N,)
    for c in range(3):
        check_freq(r == c, p[c])
    np.testing.assert_allclose(xi, -np.log(p[r.astype(int)]), rtol=1e-6)
    np.testing.assert_allclose(h, -(p * np.log(p)).sum(), rtol=1e-6)
    np.testing.assert_allclose(m2, (p * np.log(p) ** 2).sum(), rtol=1e-6)


def test_temperature_spine_steps_by_hand():
    # p^2 / sum p^2 = (2/3, 1/6, 1/6); ranks: the tie between tokens 1 and 2 goes to token 1
    law = Temp(law=fixed_law([0.5, 0.25, 0.25]), T=0.5)
    xi, r, h, m2 = steps(law, need_rank=True)
    p = np.array([2 / 3, 1 / 6, 1 / 6])
    for c in range(3):
        check_freq(r == c, p[c])
    np.testing.assert_allclose(xi, -np.log(p[r.astype(int)]), rtol=1e-5)
    np.testing.assert_allclose(h, -(p * np.log(p)).sum(), rtol=1e-5)
    np.testing.assert_allclose(m2, (p * np.log(p) ** 2).sum(), rtol=1e-5)
    tables = law.spine_tables()
    f = jax.jit(jax.vmap(lambda k: law.spine_step(tables, k, False, False, None)))
    xi0, r0, h0, m20 = [np.asarray(a) for a in f(keys(2000, 5))]
    assert np.all(r0 == 0) and np.all(np.isnan(h0)) and np.all(np.isnan(m20))
    check_freq(np.isclose(xi0, math.log(1.5), rtol=1e-5), 2 / 3)


def test_temperature_keeps_zeros_and_reaches_its_limits():
    np.testing.assert_array_equal(  # a zero stays a zero
        np.isneginf(np.asarray(Temp(law=fixed_law([0.5, 0.5, 0.0]), T=0.5).full_logp(None, 0))), [False, False, True]
    )
    for T in (1 / 3e38, 1e-40):  # 1/T just inside float32, and past it: the point mass on the most likely token
        lp = np.asarray(Temp(law=fixed_law([0.5, 0.25, 0.25]), T=T).full_logp(None, 0))
        np.testing.assert_array_equal(np.exp(lp), [1.0, 0.0, 0.0])
    lp = np.asarray(Temp(law=fixed_law([0.5, 0.25, 0.25]), T=1e40).full_logp(None, 0))  # 1/T -> 0: uniform
    np.testing.assert_allclose(np.exp(lp), [1 / 3] * 3, rtol=1e-6)


def test_temperature_folds_into_the_law_scale_in_float64():
    """temp of a law with a scale of its own is that law with the scale times 1/T, multiplied in float64 and
    rounded to float32 once: zipf at T is zipf of exponent s / T (its exact moments and deterministic tree),
    logit-normal sigma / T, nested temperatures multiply; a scale and a temperature at opposite float32 limits
    give their true product (the float32 of s / T, from exact rational arithmetic), not 0 * inf."""
    from fractions import Fraction

    from brwsim.laws._base import float32_scale

    t = parse_law("temp:T=0.5,law=zipf:V=30,s=1")
    z = parse_law("zipf:V=30,s=2")
    assert t.exact_moments() == z.exact_moments() and t.deterministic
    key = jax.random.key(1)
    np.testing.assert_array_equal(np.asarray(t.node_logp(key, 0, 8)), np.asarray(z.node_logp(key, 0, 8)))
    ln = parse_law("temp:T=4,law=temp:T=0.5,law=logitnormal:V=50,sigma=3")
    np.testing.assert_array_equal(
        np.asarray(ln.full_logp(key, 0)), np.asarray(parse_law("logitnormal:V=50,sigma=1.5").full_logp(key, 0))
    )
    for s in (1e-60, 1e-30, 0.7, 1e30, 1e60):
        for T in (1e-300, 1e-40, 1e-3, 1.0, 1e3, 1e40, 1e300):
            law = parse_law(f"temp:T={T!r},law=zipf:V=5,s={s!r}")
            got = float32_scale(law.effective()[0].exponent)
            ratio = Fraction(s) / Fraction(T)
            want = math.inf if ratio > Fraction(sys.float_info.max) else float32_scale(float(ratio))
            assert got == want or got == pytest.approx(want, rel=2e-7), (s, T, got, want)
            p = np.exp(np.asarray(law.full_logp(None, 0), np.float64))
            if want == math.inf:
                assert p.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0], (s, T)
            elif want == 0.0:
                np.testing.assert_allclose(p, 0.2, rtol=1e-6)
    # nested: the true product, whatever each factor's float32 (1/T = 1e300 alone is inf, 1e-300 alone 0)
    nested = parse_law("temp:T=1e-300,law=temp:T=1e300,law=fixed:probs=0.5/0.3/0.2")
    np.testing.assert_allclose(np.exp(np.asarray(nested.full_logp(None, 0))), [0.5, 0.3, 0.2], rtol=1e-6)
    assert nested.effective()[1] == 0.0  # the factors cancel in float64: the fixed law itself


def test_temperature_on_a_random_zipf_exponent_past_float64():
    """zipf s = 1e100, s_sd = 1000 at T = 1e-300: log(s / T) = 921 is kept exactly (s / T itself is past float64),
    so a node is a point mass when its float32 exponent exp(921 + 1000 Z) overflows, Z > (log(float32 max) - 921)
    / 1000, with probability 0.797 (0.733 if log s were held at float64's largest), in both kernels."""
    from scipy.stats import norm

    from brwsim import tree_keys
    from brwsim.oracle import _native

    law = parse_law("temp:T=1e-300,law=zipf:V=30,s=1e100,s_sd=1000")
    assert law.native_program().a == pytest.approx(math.log(1e100) + math.log(1e300), rel=1e-15)
    want = norm.sf((math.log(float(np.finfo(np.float32).max)) - math.log(1e100) - math.log(1e300)) / 1000)
    n = 4000
    keys = tree_keys(jax.random.key(5), 0, n)
    rows = {
        "jax": np.asarray(jax.vmap(lambda k: law.node_logp(k, 0, 2))(keys)),
        "native": np.asarray(_native.draw_rows(law, keys, 2)) if _native.available() else None,
    }
    for kernel, r in rows.items():
        if r is not None:
            frac = float(np.mean(np.isneginf(r[:, 1])))
            assert abs(frac - want) < 4 * math.sqrt(want * (1 - want) / n), (kernel, frac, want)


def test_scale_logits_splits_ties_only_when_asked():
    """c = inf: the point mass on the first largest entry (a drawn row's ties are float32 rounding), or split among
    the entries tied at 0 for explicit rows (the limit of p^c)."""
    from brwsim.laws._base import scale_logits

    y = jnp.asarray([-1.0, 0.0, 0.0, -jnp.inf])
    assert np.isneginf(np.asarray(scale_logits(y, math.inf))).tolist() == [True, False, True, True]
    assert np.isneginf(np.asarray(scale_logits(y, math.inf, split_ties=True))).tolist() == [True, False, False, True]
    assert np.asarray(scale_logits(y, 0.0)).tolist() == [0.0, 0.0, 0.0, -math.inf]


def test_temperature_one_on_an_indexed_law_stays_on_the_jax_kernel():
    """A temperature that comes to 1 on a fixed law is that law's rows, served by the JAX kernel (its table is not
    the temperature's); a folded zipf keeps the memory check of its O(V) tables."""
    law = parse_law("temp:T=2,law=temp:T=0.5,law=fixed:probs=0.5/0.3/0.2")
    assert law.effective()[1] == 0.0 and law.kernels == ("jax",) and law.native_program() is None
    assert parse_law("temp:T=0.5,law=zipf:V=1000,s=1").table_bytes() == parse_law("zipf:V=1000,s=1").table_bytes() > 0


def test_huge_sigma_logitnormal_is_a_uniformly_placed_point_mass():
    V = 4
    lp = full(LogitNormal(V=V, sigma=3e38), n=N)
    p = np.exp(lp)
    assert np.all(p.max(axis=1) == 1.0) and np.all(np.isclose(p.sum(axis=1), 1.0))
    for i in range(V):
        check_freq(p.argmax(axis=1) == i, 1 / V)


def test_huge_s_sd_zipf_is_a_point_mass_or_uniform_with_probability_one_half():
    lp = full(Zipf(V=3, s=1.0, s_sd=1e30), n=N)  # s_u = exp(1e30 Z): inf for Z > 0, 0 for Z < 0
    p = np.exp(lp)
    point = np.all(p == [1.0, 0.0, 0.0], axis=1)
    flat = np.all(np.isclose(p, 1 / 3, rtol=1e-6), axis=1)
    assert np.all(point | flat)
    check_freq(point, 0.5)


def test_tiny_alpha_dirichlet_is_a_uniformly_placed_point_mass():
    V = 4
    p = np.exp(full(Dirichlet(V=V, alpha=3e-39), n=N))  # 1/alpha: just inside float32
    assert np.all(p.max(axis=1) == 1.0) and np.all(np.isclose(p.sum(axis=1), 1.0))
    for i in range(V):
        check_freq(p.argmax(axis=1) == i, 1 / V)


def test_alpha_scaled_sampler_is_alpha_times_the_plain_one():
    """The scaled sampler of a tiny alpha makes the plain sampler's draws (same key use), times alpha, so the
    point mass of a tiny alpha sits where the largest Gamma variate of the same key would be."""
    from brwsim.laws._dirichlet import alpha_scaled_log_gamma

    for i, a in enumerate((0.5, 0.05, 1e-3)):
        k = jax.random.key(30 + i)
        want = a * np.asarray(log_gamma_variates(k, a, (64,)), np.float64)
        got = np.asarray(alpha_scaled_log_gamma(k, a, (64,)), np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_zero_entropy_is_positive_zero():
    for law in (fixed_law([1.0]), Zipf(V=1, s=1.0)):
        h, m2 = law.exact_moments()
        assert (h, m2) == (0.0, 0.0) and math.copysign(1.0, h) == 1.0


def test_fixed_law_spec_prints_its_float32_log_probabilities_in_float64():
    # p = (1/2, 1/4, 1/4): the law keeps float32(log p); its SPEC prints exp of those in float64 to 9 digits
    # (float32's exp would print 0.5 / 0.25, a different number than the law holds)
    f = fixed_law([0.5, 0.25, 0.25])
    lp = np.float32(np.log([0.5, 0.25, 0.25]))
    np.testing.assert_array_equal(np.asarray(f.logp), lp)
    assert f.spec() == "fixed:probs=" + "/".join(f"{math.exp(float(x)):.9g}" for x in lp)
    assert f.spec() != "fixed:probs=0.5/0.25/0.25"


def test_fixed_law_tables_by_hand():
    f = fixed_law([0.25, 0.5, 0.25])
    assert int(f.node_row(None, 0)) == 0 and not f.costly_spine_step(True) and f.deterministic
    np.testing.assert_allclose(np.exp(np.asarray(f.node_logp(None, 0, 2))), [0.5, 0.25], rtol=1e-7)
    t = np.asarray(f.row_table(5))
    assert t.shape == (1, 5) and np.all(np.isneginf(t[0, 3:]))
    np.testing.assert_allclose(np.exp(t[0, :3]), [0.5, 0.25, 0.25], rtol=1e-7)
    tab = f.spine_tables()
    np.testing.assert_allclose(np.asarray(tab["cdf"]), [0.5, 0.75, 1.0], rtol=1e-7)
    np.testing.assert_allclose(np.exp(np.asarray(tab["lp"])), [0.5, 0.25, 0.25], rtol=1e-7)
    # a long Zipf table's cumulative probabilities are summed in float64: the last is 1 to float32 precision
    cdf = np.asarray(Zipf(V=2000, s=1.0).spine_tables()["cdf"], np.float64)
    assert abs(cdf[-1] - 1.0) < 2e-7


# -- the pool: its files, its tables, its truncated rows


def test_pool_file_formats_read_the_same_rows(tmp_path):
    import json

    rows = [[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]]
    want = np.log([[0.5, 0.3, 0.2], [0.8, 0.1, 0.1]])  # each row sorted decreasing
    (tmp_path / "p.json").write_text(json.dumps(rows))
    np.savez(tmp_path / "lp.npz", logp=np.log(rows))
    for name in ("p.json", "lp.npz"):
        pool = load_pool(str(tmp_path / name))
        np.testing.assert_allclose(np.asarray(pool.logp), want, rtol=1e-6)
        assert pool.size == 2 and pool.vocab == 3 and not pool.truncated
        h = -(np.exp(want) * want).sum(axis=1)
        np.testing.assert_allclose(np.asarray(pool.entropy), h, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(pool.m2), (np.exp(want) * want**2).sum(axis=1), rtol=1e-6)
        assert pool.exact_moments() == pytest.approx((h.mean(), (np.exp(want) * want**2).sum(axis=1).mean()))
    np.savez(tmp_path / "un.npz", probs=np.array([[9e-7, 0.5, 0.5]]))  # within 1e-6 of 1: renormalised
    un = np.exp(np.asarray(load_pool(str(tmp_path / "un.npz")).logp, np.float64))
    np.testing.assert_allclose(un[0], [0.5 / (1 + 9e-7), 0.5 / (1 + 9e-7), 9e-7 / (1 + 9e-7)], rtol=3e-7)
    np.savez(tmp_path / "z.npz", probs=np.array([[0.5, 0.5, 0.0]]))  # a zero probability is -inf, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = load_pool(str(tmp_path / "z.npz"))
    assert np.isneginf(np.asarray(z.logp)[0, 2])
    np.savez(tmp_path / "one.npz", probs=np.array([[1.0]]))
    assert load_pool(str(tmp_path / "one.npz")).vocab == 1


@pytest.mark.parametrize(
    "arrays,msg",
    [
        ({}, "needs an array 'logp' or 'probs'"),
        ({"probs": np.array([0.5, 0.5])}, "expected an N x K array"),
        ({"probs": np.zeros((0, 2))}, "expected an N x K array"),
        ({"probs": np.zeros((2, 0))}, "expected an N x K array"),
        ({"probs": np.array([[0.5, np.nan]])}, r"in \[0, 1\] with no NaN"),
        ({"logp": np.array([[0.1, -3.0]])}, r"in \[0, 1\] with no NaN"),
        ({"probs": np.array([[0.5, 0.5], [0.0, 0.0]])}, "row 1 has no positive probability"),
        (
            {"probs": np.array([[0.5, 0.5], [0.5, 0.4]])},
            "row 1 sums to 0.9, not 1; normalise the rows, or add 'entropy' and 'm2' arrays if they are top-K rows",
        ),
        # the row farthest from 1 is named, above 1 as below
        ({"probs": np.array([[0.6, 0.5], [0.5, 0.45]])}, "row 0 sums to 1.1, not 1"),
        # a log-probability of 1e-6 is inside the range check's tolerance: the row's sum e^(1e-6) is the complaint
        ({"logp": np.array([[1e-6]])}, "row 0 sums to 1.000001, not 1"),
        ({"probs": np.array([[0.5, 0.4]]), "entropy": np.ones(1)}, "give both 'entropy' and 'm2'"),
        ({"probs": np.array([[0.5, 0.4]]), "m2": np.ones(1)}, "give both 'entropy' and 'm2'"),
        ({"probs": np.array([[0.6, 0.5]]), "entropy": np.ones(1), "m2": np.ones(1)}, "sums to more than 1"),
        ({"probs": np.array([[0.5, 0.4]]), "entropy": np.ones(2), "m2": np.ones(1)}, "one value per row"),
        ({"probs": np.array([[0.5, 0.4]]), "entropy": np.ones(1), "m2": np.ones(2)}, "one value per row"),
        ({"probs": np.array([[0.5, 0.4]]), "entropy": -np.ones(1), "m2": np.ones(1)}, "finite numbers >= 0"),
        ({"probs": np.array([[0.5, 0.4]]), "entropy": np.ones(1), "m2": -np.ones(1)}, "finite numbers >= 0"),
        ({"probs": np.array([[0.5, 0.4]]), "entropy": np.full(1, np.inf), "m2": np.ones(1)}, "finite numbers"),
        ({"probs": np.array([[0.5, 0.4]]), "entropy": np.ones(1), "m2": np.full(1, np.nan)}, "finite numbers"),
        ({"probs": np.array([["a", "b"]])}, "array 'probs' has dtype <U1; it must hold real numbers"),
        ({"logp": np.array([[True, False]])}, "array 'logp' has dtype bool"),
        ({"probs": np.array([[0.5, 0.5]]), "entropy": np.array(["x"]), "m2": np.ones(1)}, "array 'entropy' has"),
        ({"probs": np.array([[0.5, 0.5]]), "entropy": np.ones(1), "m2": np.array(["x"])}, "array 'm2' has"),
    ],
)
def test_pool_file_errors(tmp_path, arrays, msg):
    path = str(tmp_path / "p.npz")
    np.savez(path, **arrays)
    with pytest.raises(BrwsimError, match=msg) as err:
        load_pool(path)
    assert str(err.value).startswith(f"pool file {path!r}")  # every complaint names the file


def test_pool_unreadable_files(tmp_path):
    np.save(tmp_path / "single.npy", np.array([[0.5, 0.5]]))
    import os

    os.rename(tmp_path / "single.npy", tmp_path / "single.npz")
    for name, content, msg in [
        ("single.npz", None, "is a single .npy array"),
        ("junk.npz", b"not an archive", "is not a readable .npz archive"),
        ("bad.json", b"{not json", "expected a JSON list of equal-length probability lists"),
        ("ragged.json", b"[[0.5, 0.5], [1.0]]", "expected a JSON list"),
    ]:
        if content is not None:
            (tmp_path / name).write_bytes(content)
        with pytest.raises(BrwsimError, match=msg):
            load_pool(str(tmp_path / name))
    np.savez(tmp_path / "obj.npz", probs=np.array([[0.5, 0.5]], dtype=object))
    with pytest.raises(BrwsimError, match="not a plain numeric array"):
        load_pool(str(tmp_path / "obj.npz"))
    with pytest.raises(BrwsimError, match=r"^pool file .*missing\.npz' cannot be read: No such file"):
        load_pool(str(tmp_path / "missing.npz"))


def test_pool_tables_rows_and_budget(tmp_path):
    pool = _pool(tmp_path, [[0.7, 0.2, 0.1], [0.2, 0.4, 0.4], [1.0, 0.0, 0.0]])
    t2, t3, t5 = (np.asarray(pool.row_table(k)) for k in (2, 3, 5))
    rows = np.array([[0.7, 0.2, 0.1], [0.4, 0.4, 0.2], [1.0, 0.0, 0.0]])
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(t3, np.log(rows), rtol=1e-6)
    np.testing.assert_array_equal(t2, t3[:, :2])
    assert t5.shape == (3, 5) and np.all(np.isneginf(t5[:, 3:])) and np.array_equal(t5[:, :3], t3)
    pool.check_budget(10)  # whole rows: any budget
    assert not pool.costly_spine_step(True)
    f = jax.jit(jax.vmap(lambda k: (pool.node_row(k, 0), pool.node_logp(k, 0, 2), pool.full_logp(k, 0))))
    r, nl, fl = (np.asarray(a) for a in f(keys(3000, 7)))
    assert r.dtype == np.int32
    for i in range(3):
        check_freq(r == i, 1 / 3)
    np.testing.assert_array_equal(nl, t2[r])  # node_logp is row_table's row node_row, bit for bit
    np.testing.assert_array_equal(fl, t3[r])


def test_truncated_pool_tail_of_longer_rows(tmp_path):
    # the tail's surprisal: -log(tail mass), but at least -log(last kept probability)
    pool = _pool(tmp_path, [[0.4, 0.3, 0.25], [0.6, 0.25, 0.05]], entropy=np.ones(2), m2=np.ones(2))
    np.testing.assert_allclose(np.asarray(pool.spine_tables()["tail"]), [-math.log(0.05)] * 2, rtol=1e-5)
    with pytest.raises(BrwsimError, match="keeps only the top 3 entries per row, but a tree of P=4"):
        pool.row_table(4)
    with pytest.raises(BrwsimError, match="P=4"):
        Temp(law=pool, T=2.0).check_budget(4)
    Temp(law=pool, T=2.0).check_budget(3)


def test_pool_moments_are_float64_means_of_the_rows(tmp_path):
    # entropies 1 and 1 + 2^-23, m2 2 and 2 + 2^-22 (all float32 numbers): their means 1 + 2^-24 and 2 + 2^-23
    # are float64 numbers; a float32 mean would round the sums 2 + 2^-23 and 4 + 2^-22 (ties) down to 2 and 4
    e, m2 = np.array([1.0, 1 + 2.0**-23]), np.array([2.0, 2 + 2.0**-22])
    pool = _pool(tmp_path, [[0.5], [0.25]], entropy=e, m2=m2)
    assert pool.exact_moments() == (1 + 2.0**-24, 2 + 2.0**-23)


def test_pool_cdf_is_summed_in_float64(tmp_path):
    # one row of 2000 entries, p_i = (1/i) / sum_j 1/j. Each float32 log-probability is within half an ulp,
    # 2^-24 |log p_i|, of the truth, so each cumulative probability summed in float64 and rounded once to
    # float32 is within 2^-24 (sum_{j <= i} p_j |log p_j| + cdf_i) of the exact one (with room: the float32
    # roundings have both signs); a running sum in float32 drifts past that
    inv = 1 / np.arange(1, 2001)
    p = inv / inv.sum()
    pool = _pool(tmp_path, [p])
    cdf = np.asarray(pool.spine_tables()["cdf"], np.float64)[0]
    want = np.cumsum(p)
    assert np.all(np.abs(cdf - want) <= 2.0**-24 * (np.cumsum(-p * np.log(p)) + want))


def test_pool_tail_of_a_whole_row_is_infinite_without_warnings(tmp_path):
    # a whole row has no tail: its tail mass 1 - cdf_K is 0 (one entry of probability 1), or slightly negative
    # by float32 rounding (seven entries of 1/7: float32(log 1/7) rounds up, they sum to 1 + 5e-8); either way
    # it is clipped to 0 and the tail's surprisal is +inf, with no NumPy warning on the way
    for row in ([1.0], [1 / 7] * 7):
        pool = _pool(tmp_path, [row])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tail = np.asarray(pool.spine_tables()["tail"])
        assert tail.dtype == np.float32 and np.all(np.isposinf(tail))
    assert np.exp(np.asarray(pool.logp, np.float64)).sum() > 1  # the seven-entry row is the one above 1


def _floor_uK(keys, K: int, which: int) -> np.ndarray:
    """floor(u K) for the 46-bit uniform a spine step draws from key ``which`` of each key's split (exact in
    float64: u has 46 bits, K 16)."""
    u1, u2 = jax.vmap(lambda k: uniform46(jax.random.split(k)[which]))(keys)
    uK = (np.asarray(u1, np.float64) + np.asarray(u2, np.float64)) * K
    assert np.all(uK - np.floor(uK) > 0)  # no uniform on a boundary: floor is the answer
    return np.floor(uK).astype(np.int64)


def test_pool_spine_step_is_the_inverse_cdf_of_a_whole_row(tmp_path):
    # one whole row of K = 61387 entries 1/K: float32(log 1/K) rounds down by nearly half an ulp, so the float32
    # probabilities sum to 1 - 8 * 2^-24; the row is the law, normalised in float64: every entry 1/K again, and
    # the step (a 46-bit uniform u against the double-float cumulative sums) takes child floor(u K), exactly
    K = 61387
    pool = _pool(tmp_path, [np.full(K, 1 / K)])
    assert np.float32(np.exp(np.asarray(pool.logp, np.float64)).sum()) == np.float32(1 - 8 * 2.0**-24)
    tables = pool.spine_tables()
    assert np.asarray(tables["cdf"])[0, -1] == 1.0 and np.asarray(tables["cdf_lo"])[0, -1] == 0.0
    keys = jax.random.split(jax.random.key(11), 4000)
    xi, r, h, _ = jax.jit(jax.vmap(lambda k: pool.spine_step(tables, k, True, True, None)))(keys)
    assert r.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(r), _floor_uK(keys, K, 1))
    np.testing.assert_allclose(np.asarray(xi), math.log(K), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(h), math.log(K), rtol=1e-5)


def test_deterministic_spine_step_is_the_inverse_cdf_of_the_normalised_row():
    # the same row as a fixed law: its step takes child floor(u K) for the 46-bit uniform of its first key
    K = 61387
    law = fixed_law(np.full(K, 1 / K))
    tables = law.spine_tables()
    keys = jax.random.split(jax.random.key(12), 4000)
    f = jax.jit(jax.vmap(lambda k: law.spine_step(tables, k, True, True, (1.0, 2.0))))
    np.testing.assert_array_equal(np.asarray(f(keys)[1]), _floor_uK(keys, K, 0))


def test_truncated_pool_may_hold_whole_rows_up_to_one_plus_the_tolerance(tmp_path):
    # row 0 has log-probabilities (log(1 + 1e-6), -inf): its sum is the float64 number 1 + 1e-6 itself, the
    # largest sum allowed; row 1 is a top-2 row (sum 0.8), so the pool is truncated and row 0's entry is
    # clipped to probability 1
    x = math.log(1 + 1e-6)
    assert np.exp(x) == 1 + 1e-6
    np.savez(
        tmp_path / "w.npz", logp=np.array([[x, -np.inf], [math.log(0.5), math.log(0.3)]]), entropy=[0, 1], m2=[0, 1]
    )
    pool = load_pool(str(tmp_path / "w.npz"))
    assert pool.truncated
    np.testing.assert_array_equal(np.asarray(pool.logp)[0], [0.0, -np.inf])


def test_pool_rows_are_read_in_float64_whatever_the_file_holds(tmp_path):
    # 1000 equal float32 entries (1/1000 in float32, their sum 1 + 5e-8): each is probability 1/1000, so the pool
    # holds float32(-log 1000), entropy float32(log 1000) and m2 float32((log 1000)^2), exactly, when normalised
    # in float64 (in float32 the normaliser's rounding moves them by ulps)
    np.savez(tmp_path / "f.npz", probs=np.full((1, 1000), 1 / 1000, np.float32))
    pool = load_pool(str(tmp_path / "f.npz"))
    L = math.log(1000)
    np.testing.assert_array_equal(np.asarray(pool.logp), np.full((1, 1000), np.float32(-L)))
    assert pool.entropy.tolist() == [np.float32(L)] and pool.m2.tolist() == [np.float32(L * L)]


def test_json_pool_edges(tmp_path):
    import json

    # a zero probability is -inf, with no NumPy warning; a null entry is a NaN, refused with a one-line error
    (tmp_path / "z.json").write_text(json.dumps([[1.0, 0.0]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pool = load_pool(str(tmp_path / "z.json"))
    np.testing.assert_array_equal(np.asarray(pool.logp), [[0.0, -np.inf]])
    (tmp_path / "n.json").write_text("[[0.5, null]]")
    with pytest.raises(BrwsimError, match=r"in \[0, 1\] with no NaN"):
        load_pool(str(tmp_path / "n.json"))


# -- the Markov law: files, states, the kernel on the child's rank


def _markov(tmp_path, **over):
    np.savez(tmp_path / "mp.npz", probs=np.array([[0.7, 0.2, 0.1], [0.2, 0.4, 0.4], [1.0, 0.0, 0.0]]))
    cfg = {
        "description": "a test law",
        "states": {"a": "fixed:probs=0.75/0.25", "b": f"pool:path={tmp_path / 'mp.npz'}"},
        "initial": {"a": 0.25, "b": 0.75},
        # three rows for a (rank 0, 1, 2+), one for b (every rank)
        "kernel": {"a": [[1.0, 0.0], [0.2, 0.8], [0.0, 1.0]], "b": [[0.6, 0.4]]},
    }
    return markov_law(cfg | over)


def test_markov_states_rows_and_kernel_by_hand(tmp_path):
    with warnings.catch_warnings():  # the kernel's zeros become -inf log-probabilities silently
        warnings.simplefilter("error")
        m = _markov(tmp_path, initial="a")
    np.testing.assert_array_equal(np.asarray(m.log_init), [0.0, -np.inf])
    m = _markov(tmp_path)
    assert m.state_names() == ["a", "b"] and m.n_states == 2 and m.vocab == 3 and not m.is_iid
    assert len(m.sub_laws()) == 2 and m.sub_laws()[0].vocab == 2 and m.indexed
    K = m.state_kernel()
    np.testing.assert_allclose(K[0], [[1, 0], [0.2, 0.8], [0, 1]], rtol=1e-6, atol=0)
    np.testing.assert_allclose(K[1], [[0.6, 0.4]] * 3, rtol=1e-6)  # b's one row serves every rank
    np.testing.assert_allclose(m.initial_probs(), [0.25, 0.75], rtol=1e-6)
    a = np.asarray(jax.jit(m.full_logp)(jax.random.key(0), 0))  # state a's two tokens, padded to the vocabulary
    np.testing.assert_allclose(np.exp(a[:2]), [0.75, 0.25], rtol=1e-6)
    assert a.shape == (3,) and np.isneginf(a[2])
    table = np.asarray(m.row_table(2))
    assert table.shape == (4, 2)  # a's one row, then b's three
    np.testing.assert_allclose(np.exp(table), [[0.75, 0.25], [0.7, 0.2], [0.4, 0.4], [1.0, 0.0]], rtol=1e-6)
    n = 3000

    def draw(k):
        k1, k2, k3 = jax.random.split(k, 3)
        rows = m.node_row(k1, 0), m.node_row(k1, 1)
        lps = m.node_logp(k1, 0, 2), m.node_logp(k1, 1, 2), m.full_logp(k1, 1)
        ch = [m.child_state(k2, jnp.int32(s), jnp.int32(r)) for s, r in ((0, 0), (0, 1), (0, 2), (0, 7), (1, 0))]
        return rows, lps, m.init_state(k3), jnp.stack(ch)

    (r0, r1), (lp0, lp1, f1), init, ch = jax.jit(jax.vmap(draw))(keys(n, 11))
    r0, r1, init, ch = (np.asarray(x) for x in (r0, r1, init, ch))
    assert np.all(r0 == 0) and set(np.unique(r1)) == {1, 2, 3}
    for i in (1, 2, 3):
        check_freq(r1 == i, 1 / 3)
    np.testing.assert_array_equal(np.asarray(lp0), table[r0])
    np.testing.assert_array_equal(np.asarray(lp1), table[r1])  # node_logp is row r of row_table, bit for bit
    np.testing.assert_array_equal(np.asarray(f1)[:, :2], table[r1])
    check_freq(init == 1, 0.75)
    assert init.dtype == np.int32 and ch.dtype == np.int32  # states are int32 indices
    for j, p_b in enumerate([0.0, 0.8, 1.0, 1.0, 0.4]):  # P(child in b) for (a, 0), (a, 1), (a, 2), (a, 7), (b, 0)
        check_freq(ch[:, j] == 1, p_b)
    with pytest.raises(BrwsimError, match="P=5"):  # a truncated pool state bounds every budget
        np.savez(tmp_path / "tr.npz", probs=np.array([[0.5, 0.3]]), entropy=np.ones(1), m2=np.ones(1))
        _markov(tmp_path, states={"a": "fixed:probs=1", "b": f"pool:path={tmp_path / 'tr.npz'}"}).check_budget(5)


@pytest.mark.parametrize(
    "over,msg",
    [
        ({"extra": 1}, "unknown key.s. extra; use states, initial, kernel"),
        ({"extra": 1, "more": 2}, "unknown key.s. extra, more; use states, initial, kernel"),
        ({"states": {}}, "'states' must map state names to law SPECs"),
        ({"states": ["a", "b"]}, "'states' must map state names to law SPECs"),
        ({"states": {"a": 1, "b": "fixed:probs=1"}}, "state 'a' must be a law SPEC string"),
        ({"initial": "c"}, "initial state 'c' is not one of"),
        ({"initial": {"c": 1.0}}, r"initial names unknown state\(s\) \['c'\]"),
        ({"initial": {"a": 0.5}}, "initial: probabilities sum to 0.5"),
        ({"initial": 3}, "'initial' must be a state name or a name -> probability table"),
        ({"kernel": {"a": [[1.0, 0.0]]}}, "'kernel' must have one entry per state"),
        ({"kernel": [[1.0, 0.0]]}, "'kernel' must have one entry per state"),
        ({"kernel": {"a": 3, "b": []}}, "each kernel entry must be a non-empty list of rows"),
        ({"kernel": {"a": 3, "b": [[1.0, 0.0]]}}, r"kernel\['a'\] must be a non-empty list of rows"),
        ({"kernel": {"a": [], "b": []}}, "each kernel entry must be a non-empty list of rows"),
        ({"kernel": {"a": [[1.0, 0.0]], "b": []}}, r"kernel\['b'\] must be a non-empty list of rows"),
        ({"kernel": {"a": [[1.0, 0.0]], "b": [[1.0]]}}, r"kernel\['b'\] row 0 must list 2 probabilities"),
        ({"kernel": {"a": [[1.0, 0.0], [0.5, 0.4]], "b": [[1.0, 0.0]]}}, r"kernel\['a'\] row 1: probabilities sum"),
    ],
)
def test_markov_config_errors(tmp_path, over, msg):
    with pytest.raises(BrwsimError, match=msg) as err:
        _markov(tmp_path, **over)
    assert str(err.value).startswith("Markov law '<dict>': ")  # every complaint names the law (a dict here)


def test_markov_missing_keys_and_bad_files(tmp_path):
    cfg = _two_state_cfg()
    np.testing.assert_allclose(markov_law(cfg).initial_probs(), [1.0, 0.0])  # the root's state by name
    np.testing.assert_allclose(markov_law(cfg | {"initial": {"b": 1.0}}).initial_probs(), [0.0, 1.0])
    for k in ("states", "initial", "kernel"):
        with pytest.raises(BrwsimError, match=f"^Markov law '<dict>': missing key '{k}'"):
            markov_law({x: v for x, v in cfg.items() if x != k})
    with pytest.raises(BrwsimError, match="expected a table with keys states, initial, kernel"):
        markov_law([1, 2])
    (tmp_path / "m.json").write_text('{"initial": "a",')
    with pytest.raises(BrwsimError, match=r"^Markov law file '.*m\.json' does not parse: Expecting"):
        parse_law(f"markov:path={tmp_path / 'm.json'}")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BrwsimError, match="does not parse: nested too deeply$"):
        parse_law(str(tmp_path / "deep.json"))
    (tmp_path / "m.toml").write_text("initial = ")
    with pytest.raises(BrwsimError, match=r"m\.toml' does not parse"):
        parse_law(str(tmp_path / "m.toml"))
    (tmp_path / "a:b").mkdir()  # a bare path with a colon and no '=' is still a path, by its suffix (any case)
    (tmp_path / "a:b" / "m.TOML").write_text("initial = ")
    with pytest.raises(BrwsimError, match=r"^Markov law file '.*a:b/m\.TOML' does not parse"):
        parse_law(str(tmp_path / "a:b" / "m.TOML"))
    with pytest.raises(BrwsimError, match=r"^Markov law file '.*none\.json' cannot be read"):
        parse_law(str(tmp_path / "none.json"))
    import json

    (tmp_path / "self.json").write_text(json.dumps(_two_state_cfg(b=str(tmp_path / "self.json"))))
    with pytest.raises(BrwsimError, match=r"refers to itself \(self\.json -> self\.json\)"):
        parse_law(str(tmp_path / "self.json"))
    (tmp_path / "x.json").write_text(json.dumps(_two_state_cfg(b=str(tmp_path / "y.json"))))
    (tmp_path / "y.json").write_text(json.dumps(_two_state_cfg()))
    with pytest.raises(BrwsimError, match="state 'b' may not itself be a Markov law"):
        parse_law(str(tmp_path / "x.json"))
    with pytest.raises(BrwsimError, match="the inner law must be i.i.d."):
        parse_law(f"temp:T=1,law={tmp_path / 'y.json'}")


def test_markov_long_run_entropy_with_a_rank_dependent_kernel():
    # a: (1/2, 1/2), b: (3/4, 1/4). The spine takes rank 0 with probability 1/2 from a and 3/4 from b;
    # rank 0 leads to a, rank 1 to b. So P(a -> a) = 1/2, P(b -> a) = 3/4: pi_a = 3/5, pi_b = 2/5.
    law = markov_law(
        {
            "states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.75/0.25"},
            "initial": "b",
            "kernel": {"a": [[1, 0], [0, 1]], "b": [[1, 0], [0, 1]]},
        }
    )
    hb = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    m = moments(jax.random.key(1), law)
    assert m.mu == pytest.approx(0.6 * math.log(2) + 0.4 * hb, abs=4 * m.mu_se + 1e-6)


# -- Dirichlet: the ranked spine step, V = 1 and V = 2, the Gamma sampler against the Gamma law


def test_dirichlet_on_two_symbols_by_hand():
    # V = 2, alpha = 1: p_1 uniform. The child taken is the larger one with probability E[max] = 3/4, and its
    # surprisal has mean E[H] = 1/2 (both ranked and size-biased: Beta(2, 1), E[-log p] = psi(3) - psi(2))
    law = Dirichlet(V=2, alpha=1.0)
    n = N
    xi, r, h, m2 = steps(law, n=n, need_rank=True)
    check_freq(r == 0, 0.75)
    close(xi.mean(), 0.5, xi.std() / math.sqrt(n))
    close(h.mean(), 0.5, h.std() / math.sqrt(n))
    xi2, r2, h2, m22 = steps(law, n=n, need_rank=False)
    close(xi2.mean(), 0.5, xi2.std() / math.sqrt(n))
    assert np.all(r2 == 0) and np.allclose(h2, 0.5) and np.allclose(m22, 0.5)
    p0 = np.exp(full(law)[:, 0])  # uniform on [0, 1]: variance 1/12
    check_var(p0, 1 / 12)
    xi1, r1, h1, _ = steps(Dirichlet(V=1, alpha=1.0), n=16, need_rank=False)
    assert np.all(xi1 == 0) and np.all(r1 == 0) and np.all(h1 == 0)


def test_markov_rows_of_a_many_row_state_then_a_one_column_truncated_pool(tmp_path):
    # state a: a whole pool of three rows; state b: a truncated pool of two rows of one entry each. The
    # Markov table is a's three rows, then b's two: b's rows are 3 and 4, whatever the budget b allows
    np.savez(tmp_path / "a.npz", probs=np.array([[0.7, 0.2, 0.1], [0.2, 0.4, 0.4], [1.0, 0.0, 0.0]]))
    np.savez(tmp_path / "b.npz", probs=np.array([[0.5], [0.25]]), entropy=np.ones(2), m2=np.ones(2))
    m = markov_law(
        {
            "states": {"a": f"pool:path={tmp_path / 'a.npz'}", "b": f"pool:path={tmp_path / 'b.npz'}"},
            "initial": "a",
            "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
        }
    )
    np.testing.assert_allclose(np.exp(np.asarray(m.row_table(1))[:, 0]), [0.7, 0.4, 1.0, 0.5, 0.25], rtol=1e-6)
    rows = np.asarray(jax.jit(jax.vmap(lambda k: jnp.stack([m.node_row(k, 0), m.node_row(k, 1)])))(keys(400, 2)))
    assert set(np.unique(rows[:, 0])) == {0, 1, 2} and set(np.unique(rows[:, 1])) == {3, 4}


def test_zipf_moments_and_node_tops_by_hand():
    # V = 3, s = 1: p = (6, 3, 2) / 11 (unlike V = 2, not a permutation of p_i ~ i^(+s) = (1, 2, 3) / 6)
    p = np.array([6, 3, 2]) / 11
    h, m2 = Zipf(V=3, s=1.0).exact_moments()
    assert h == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)
    assert m2 == pytest.approx((p * np.log(p) ** 2).sum(), rel=1e-12)
    # a random exponent: node_logp(key) is the top of the key's own distribution, p_1 / p_i = i^(s_u)
    z = Zipf(V=3, s=1.0, s_sd=0.5)
    k = jax.random.key(5)
    lp = np.asarray(z.full_logp(k, 0), np.float64)
    assert (lp[0] - lp[2]) / math.log(3) == pytest.approx((lp[0] - lp[1]) / math.log(2), rel=1e-5)
    np.testing.assert_array_equal(np.asarray(z.node_logp(k, 0, 2)), np.float32(lp[:2]))
    padded = np.asarray(z.node_logp(k, 0, 5))
    assert padded.shape == (5,) and np.all(np.isneginf(padded[3:]))
    np.testing.assert_array_equal(padded[:3], np.float32(lp))
    # and s_u = s exp(s_sd Z) with Z the key's own standard normal draw: a seed names one tree
    zk = float(jax.random.normal(k, ()))
    assert abs(zk) > 0.01 and (lp[0] - lp[1]) / math.log(2) == pytest.approx(math.exp(0.5 * zk), rel=1e-5)
    assert np.asarray(Zipf(V=3, s=1.0).node_logp(None, 0, 5)).shape == (5,)


def test_dirichlet_unranked_spine_step_reports_the_exact_moments():
    # V = 3, alpha = 1 (A = 3): mu = psi(4) - psi(2) = 1/2 + 1/3 = 5/6 and
    # mu_2 = mu^2 + psi'(2) - psi'(4) = 25/36 + 1/4 + 1/9 = 19/18 (docs/theory.md, "Moments"); an unranked step
    # reports these means as its H and M2
    law = Dirichlet(V=3, alpha=1.0)
    assert law.exact_moments() == pytest.approx((5 / 6, 19 / 18), rel=1e-12)
    _, r, h, m2 = steps(law, n=16, need_rank=False)
    np.testing.assert_allclose(h, 5 / 6, rtol=1e-6)
    np.testing.assert_allclose(m2, 19 / 18, rtol=1e-6)
    assert np.all(r == 0)


def test_markov_kernel_and_initial_law_are_float64_exps_of_their_float32_logs(tmp_path):
    # the law keeps float32 log-probabilities; its kernel and initial law are their exps in float64 (an exp in
    # float32 is a different number, e.g. for 0.2 and 0.75)
    m = _markov(tmp_path)

    def f64(p):
        with np.errstate(divide="ignore"):
            return np.exp(np.float64(np.float32(np.log(np.array(p, np.float64)))))

    got = m.initial_probs()
    assert got.dtype == np.float64 and np.array_equal(got, f64([0.25, 0.75]))
    K = m.state_kernel()
    want = f64([[[1, 0], [0.2, 0.8], [0, 1]], [[0.6, 0.4]] * 3])
    assert K.dtype == np.float64 and np.array_equal(K, want)
