"""The laws' sampling parameters against facts of the distributions, computed independently of the code.

Each statistical check has a fixed seed and a tolerance of four standard errors of its own estimator.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import polygamma, psi

from brwsim.errors import BrwsimError
from brwsim.laws import (
    Dirichlet,
    LogitNormal,
    Temp,
    Zipf,
    check_distribution,
    dirichlet_moments,
    fixed_law,
    load_pool,
    log_gamma_variates,
    markov_law,
    rank_of,
    topk_sorted,
)
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


@pytest.mark.parametrize("alpha", [0.3, 2.5])
def test_log_gamma_variates_have_the_gamma_log_moments(alpha):
    x = np.asarray(log_gamma_variates(jax.random.key(3), alpha, (20000,)), np.float64)
    # log G, G ~ Gamma(alpha): mean psi(alpha), variance psi'(alpha); E[G] = Var[G] = alpha
    close(x.mean(), psi(alpha), math.sqrt(polygamma(1, alpha) / x.size))
    close(np.var(x, ddof=1), polygamma(1, alpha), 0.05 * polygamma(1, alpha))
    g = np.exp(x)
    close(g.mean(), alpha, math.sqrt(alpha / g.size))


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
    law = Temp(law=Dirichlet(V=V, alpha=alpha), T=1.0)  # T = 1: a Dirichlet law the code has no closed form for
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
