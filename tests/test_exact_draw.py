"""The spine's inverse-CDF draw in double-float arithmetic (brwsim/laws/_draw.py): exact comparisons at the
boundaries, exact products, exact prefix sums, and tokens far below float32's resolution drawn at their rate."""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brwsim.laws import fixed_law
from brwsim.laws._draw import block_sums, count_at_most, draw_at, draw_index, prefix_sums, times, two_sum, uniform46


def test_two_sum_keeps_the_rounding_error():
    # 1 + 2^-30 rounds to 1 in float32: the error term holds 2^-30 exactly (XLA must not simplify TwoSum away)
    s, e = jax.jit(two_sum)(jnp.float32(1.0), jnp.float32(2.0**-30))
    assert float(s) == 1.0 and float(e) == 2.0**-30


def test_prefix_and_block_sums_are_exact_where_float32_drifts():
    # entries that are multiples of 2^-40 in [0, 1): their float64 prefix sums are exact; the float32 cumsum
    # drifts by many ulps over 20,000 terms, the double-float sums stay within 2^-45 of the total
    rng = np.random.default_rng(3)
    p = np.floor(rng.random(20_480) ** 8 * 2.0**40) / 2.0**40
    p[rng.random(p.size) < 0.1] = 0.0
    p = p.astype(np.float32).astype(np.float64)  # what float32 holds
    want = np.cumsum(p)
    x = jnp.asarray(p, jnp.float32)
    assert np.max(np.abs(np.asarray(jax.jit(jnp.cumsum)(x), np.float64) - want)) > 2.0**-30 * want[-1]
    s, lo = jax.jit(prefix_sums)(x)
    assert np.max(np.abs(np.asarray(s, np.float64) + np.asarray(lo, np.float64) - want)) <= 2.0**-45 * want[-1]
    bh, bl = jax.jit(block_sums, static_argnums=1)(x, 512)
    blocks = p.reshape(-1, 512).sum(axis=1)
    assert np.max(np.abs(np.asarray(bh, np.float64) + np.asarray(bl, np.float64) - blocks)) <= 2.0**-45 * want[-1]


def test_count_at_most_is_exact_at_every_boundary():
    # exact prefix sums S_j (multiples of 2^-20, zeros included: equal neighbours), targets S_j and S_j +- 2^-36
    # (2^-44.7 of the total) as double-floats: the count of S_i <= t is numpy's searchsorted(side="right") on the
    # exact values
    rng = np.random.default_rng(4)
    p = np.floor(rng.random(997) * 2.0**20) / 2.0**20
    p[rng.random(p.size) < 0.2] = 0.0
    S = np.cumsum(p)
    s, lo = jax.jit(prefix_sums)(jnp.asarray(p, jnp.float32))
    targets = np.concatenate([S, S + 2.0**-36, S - 2.0**-36, [0.0, -1.0, S[-1] + 1]])
    assert 2.0**-36 < 2.0**-44 * S[-1]
    th = targets.astype(np.float32)
    tl = (targets - th.astype(np.float64)).astype(np.float32)
    assert np.all(th.astype(np.float64) + tl.astype(np.float64) == targets)  # exact double-floats
    got = jax.jit(jax.vmap(lambda a, b: count_at_most(s, lo, (a, b))))(jnp.asarray(th), jnp.asarray(tl))
    np.testing.assert_array_equal(np.asarray(got), np.searchsorted(S, targets, side="right"))


def test_uniform_times_total_is_exact():
    rng = np.random.default_rng(5)
    keys = jax.random.split(jax.random.key(6), 300)
    u1, u2 = jax.vmap(uniform46)(keys)
    t = (rng.random(300) * 10.0 ** rng.integers(-3, 8, 300)).astype(np.float32)
    tl = (t.astype(np.float64) * rng.uniform(-(2**-25), 2**-25, 300)).astype(np.float32)
    hi, lo = jax.jit(jax.vmap(lambda a, b, c, d: times((a, b), (c, d))))(u1, u2, jnp.asarray(t), jnp.asarray(tl))
    for i in range(300):
        exact = (Fraction(float(u1[i])) + Fraction(float(u2[i]))) * (Fraction(float(t[i])) + Fraction(float(tl[i])))
        got = Fraction(float(hi[i])) + Fraction(float(lo[i]))
        # what a draw needs: the target exact to a tiny fraction of the total (the boundaries' scale)
        assert abs(got - exact) <= Fraction(2) ** -46 * Fraction(float(t[i]))
    # the uniform: its first part is what a plain float32 draw from the key gives, the second below its last bit
    np.testing.assert_array_equal(np.asarray(u1), np.asarray(jax.vmap(jax.random.uniform)(keys)))
    assert np.all((np.asarray(u2) >= 0) & (np.asarray(u2) < 2.0**-23))


def _tail_parity(draw, n: int) -> tuple[int, float]:
    """(tail draws, fraction of them at an odd tail index) of ``n`` draws from a law of one token of probability
    1 - 2^-8 and 2^16 tail tokens of 2^-24 each: half a float32 uniform's step, so a 23-bit uniform reaches only
    every other tail token."""
    idx = np.asarray(draw(jax.random.split(jax.random.key(7), n)))
    tail = idx[idx > 0] - 1
    return tail.size, float(np.mean(tail % 2))


@pytest.mark.parametrize("path", ["drawn", "deterministic"])
def test_tokens_below_float32_resolution_are_drawn_at_their_rate(path):
    n = 120_000
    if path == "drawn":  # the O(V) step of a drawn law: unnormalised float32 probabilities, max 1
        p = jnp.asarray(np.concatenate([[1.0], np.full(2**16, 2.0**-24 / (1 - 2.0**-8))]), jnp.float32)
        f = jax.jit(jax.vmap(draw_index, in_axes=(None, 0)))  # p an argument: XLA would fold it as a constant
        draw = lambda keys: f(p, keys)  # noqa: E731
    else:  # a deterministic law's table, normalised in float64
        law = fixed_law(np.concatenate([[1 - 2.0**-8], np.full(2**16, 2.0**-24)]))
        tables = law.spine_tables()
        draw = jax.jit(jax.vmap(lambda k: law.spine_step(tables, k, True, False, (0.0, 0.0))[1]))
    m, odd = _tail_parity(draw, n)
    # tail draws ~ Binomial(n, 2^-8): 469 expected; the odd fraction ~ 1/2 with sd 0.023 (a 23-bit uniform: 0 or 1)
    assert abs(m - n * 2.0**-8) < 5 * math.sqrt(n * 2.0**-8)
    assert abs(odd - 0.5) < 5 * 0.5 / math.sqrt(m)


def test_the_largest_uniform_never_draws_a_token_of_probability_zero():
    # u = 1 - 2^-46 times the total can round up to the total; with the last block all zeros (a tail that
    # underflowed) the draw must still be a token of positive probability: the last one of the last block with mass
    rng = np.random.default_rng(9)
    p = np.zeros((20_000, 64), np.float32)
    p[:, :32] = rng.random((20_000, 32)) ** 3
    u = (jnp.float32(1 - 2.0**-23), jnp.float32((1 - 2.0**-23) * 2.0**-23))
    got = np.asarray(jax.jit(jax.vmap(draw_at, in_axes=(0, None)))(jnp.asarray(p), u))
    assert np.all(p[np.arange(p.shape[0]), got] > 0)
