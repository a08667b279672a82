"""Inverse-CDF draws of one token from V, exact to about 2^-45 of the total in float32 arithmetic.

A spine step draws the child of a node by inverse CDF: a uniform ``u`` times
the total mass, and the first token whose cumulative probability exceeds it.
In plain float32 both halves are coarse: ``u`` has 2^-23 resolution, so a
token of probability below 2^-24 of the total is drawn at a rate set by where
the grid points fall (the last 2^-23 of the mass never), and a float32 prefix
sum over V terms is off by ulps that grow with V. Here every quantity is a
*double-float*, an unevaluated sum ``hi + lo`` of two float32 numbers
(Dekker 1971; Knuth's TwoSum for the exact error of one addition):

- the uniform has 46 bits (``u = u1 + u2 2^-23`` from two 23-bit uniforms,
  the first the one a plain float32 draw from the key gives);
- sums are double-float additions: a reduction per block of about sqrt(V)
  entries, then prefix sums over the blocks and inside the chosen block, each
  a float32 cumsum corrected by the cumsum of its own rounding errors (exact
  by TwoSum whatever order XLA adds in, and corrected once more): exact to
  about 2^-45 of the total;
- ``u`` times the total is formed from 12-bit halves (every partial product
  exact in float32);
- the search compares double-floats by the sign of their difference, its
  leading part exact; a target rounded up to the total takes the last token
  of positive mass.

The law drawn from is then the float32 probabilities themselves, each token's
rate within about 2^-44 of the total of its own (below any Monte Carlo
resolution), and the step costs a reduction over V, not a prefix sum. XLA does
not reassociate float arithmetic (no fast-math), which TwoSum relies on; the
tests check it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

_SCALE_LO = np.float32(2.0**-23)  # the second uniform's weight: below the first one's last bit
_HI12 = np.uint32(0xFFFFF000)  # float32 bits that keep the leading 12 significant bits (1 implicit + 11)


def two_sum(a, b):
    """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def uniform46(key):
    """A uniform on [0, 1) with 46 bits, as a double-float (u1, u2 2^-23): ``u1`` is ``jax.random.uniform(key)``
    (what a float32 draw from this key gives), ``u2`` an independent 23-bit uniform below its last bit."""
    return jax.random.uniform(key), jax.random.uniform(jax.random.fold_in(key, 1)) * _SCALE_LO


def _add(a, b):
    """Double-float addition, normalised (|lo| <= ulp(hi) / 2): exact to about 2^-47 of the sum."""
    s, e = two_sum(a[0], b[0])
    return _normalised(s, e + (a[1] + b[1]))


def _normalised(s, e):
    """The double-float ``s + e`` with ``|lo| <= ulp(hi) / 2`` (Dekker's fast TwoSum, ``|e|`` below ``|s|``)."""
    h = s + e
    return h, e - (h - s)


def _cumsum_and_errors(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(s, d): the float32 cumsum of ``x`` (last axis) and each step's rounding error, ``sum_{j <= i} d_j =
    (x_1 + ... + x_i) - s_i`` (telescoping ``d_i = s_{i-1} + x_i - s_i``, whatever order the cumsum added in),
    each ``d_i`` the float32 rounding of its exact value (TwoSum twice)."""
    s = jnp.cumsum(x, axis=-1)
    prev = jnp.concatenate([jnp.zeros_like(s[..., :1]), s[..., :-1]], axis=-1)
    a, ea = two_sum(prev, x)
    b, eb = two_sum(a, -s)
    return s, b + (ea + eb)


def prefix_sums(p: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The inclusive prefix sums of ``p`` (last axis, float32, >= 0) as normalised double-floats ``(s, lo)``:
    the float32 cumsum corrected by the cumsum of its rounding errors, itself corrected the same way once more
    (what is left is of order eps^3 times the length), all in parallel (cumsums, no sequential loop)."""
    s, d1 = _cumsum_and_errors(p)
    lo1, d2 = _cumsum_and_errors(d1)
    return _add((s, jnp.zeros_like(s)), (lo1, jnp.cumsum(d2, axis=-1)))


def block_sums(p: jax.Array, B: int) -> tuple[jax.Array, jax.Array]:
    """The double-float sums of ``p``'s consecutive blocks of ``B`` entries (last axis, a multiple of ``B``)."""
    x = p.reshape(*p.shape[:-1], p.shape[-1] // B, B)
    zero = jnp.float32(0.0)
    return jax.lax.reduce((x, jnp.zeros_like(x)), (zero, zero), _add, (x.ndim - 1,))


def _split12(x):
    hi = jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(x, jnp.uint32) & _HI12, jnp.float32)
    return hi, x - hi


def times(u, total):
    """The double-float ``u * total`` (``u = (u1, u2)`` from :func:`uniform46`, ``total = (t, tl)``), exact up to
    the rounding of the low-order terms (about 2^-46 of the product): ``u1 * t`` from 12-bit halves, each partial
    product exact, summed by TwoSum."""
    (u1, u2), (t, tl) = u, total
    a1, a2 = _split12(u1)
    b1, b2 = _split12(t)
    s, e1 = two_sum(a1 * b1, a1 * b2)
    s, e2 = two_sum(s, a2 * b1)
    s, e3 = two_sum(s, a2 * b2)
    return _normalised(s, ((e1 + e2) + e3) + (u2 * t + u1 * tl))


def count_at_most(s: jax.Array, lo: jax.Array, target) -> jax.Array:
    """How many of the non-decreasing double-floats ``s + lo`` (one axis) are <= the double-float ``target``:
    the index of the first one above it (``searchsorted(..., side="right")``), by binary search on the sign of
    each difference (its leading part exact by TwoSum, the rest rounded at about 2^-48 of the values)."""
    th, tl = target
    n = s.shape[-1]

    def above(i):
        a, ea = two_sum(s[i], -th)
        return a + (ea + (lo[i] - tl)) > 0

    def body(_, st):
        first, last = st  # the answer lies in [first, last]; found when they meet
        mid = (first + last) // 2
        up = above(jnp.minimum(mid, n - 1))
        go = first < last
        return jnp.where(go & ~up, mid + 1, first), jnp.where(go & up, mid, last)

    # a known few steps: unrolled on an accelerator (no loop of tiny kernels to launch), a loop on the CPU (half
    # the compile time); the same operations either way
    unroll = jax.default_backend() != "cpu"
    steps = max(1, int(n).bit_length())
    first, _ = jax.lax.fori_loop(0, steps, body, (jnp.int32(0), jnp.int32(n)), unroll=unroll)
    return first


def _block_prefix(q: jax.Array, B: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Inclusive double-float prefix sums of the block sums of ``q``, and the index of its last block of positive
    mass."""
    hi, lo = block_sums(q, B)
    s, s_lo = prefix_sums(hi)
    last = hi.shape[0] - 1 - jnp.argmax(hi[::-1] > 0)
    return *_add((s, s_lo), (jnp.cumsum(lo), jnp.zeros_like(lo))), last  # the lo parts: |lo| <= ulp(hi) / 2 each


def block_size(V: int) -> int:
    """Entries a block of :func:`draw_index`: a power of two near sqrt(V), 32 to 4096."""
    return int(min(4096, max(32, 1 << max(0, math.ceil(math.log2(max(V, 1)) / 2)))))


def draw_index(p: jax.Array, key) -> jax.Array:
    """A token of the unnormalised float32 probabilities ``p`` (one axis, >= 0, positive total), drawn with
    probability ``p_i / sum(p)`` to about 2^-45 of the total per token (module docstring), in two levels: the
    block of :func:`block_size` entries by its double-float sum (a reduction, O(V)), then the token inside it
    (a double-float prefix sum of that block alone); no prefix sum over all V entries."""
    return draw_at(p, uniform46(key))


def draw_at(p: jax.Array, u) -> jax.Array:
    """:func:`draw_index` at the double-float uniform ``u`` (from :func:`uniform46`)."""
    V = p.shape[-1]
    B = block_size(V)
    n = -(-V // B)
    q = jnp.pad(p, (0, n * B - V))
    c_hi, c_lo, last_block = _block_prefix(q, B)  # inclusive prefix sums of the block sums
    t = times(u, (c_hi[-1], c_lo[-1]))
    # u * total may round up to the total (u = 1 - 2^-46): then the last block that has mass, never a zero block
    b = jnp.minimum(count_at_most(c_hi, c_lo, t), last_block)
    # the target's offset inside block b: t minus the mass of the blocks before it
    before = (jnp.where(b > 0, c_hi[b - 1], 0.0), jnp.where(b > 0, c_lo[b - 1], 0.0))
    inner = _add(t, (-before[0], -before[1]))
    row = jax.lax.dynamic_slice(q, (b * B,), (B,))
    w_hi, w_lo = prefix_sums(row)
    j = count_at_most(w_hi, w_lo, inner)
    last = B - 1 - jnp.argmax(row[::-1] > 0)  # past the block's own total (a rounding): its last positive entry
    return jnp.minimum(b * B + jnp.minimum(j, last), V - 1)


def host_cdf(p64: np.ndarray, normalise: bool) -> tuple[jax.Array, jax.Array]:
    """Cumulative sums of float64 probabilities (last axis; divided by their last one when ``normalise``, which
    is then exactly 1) as float32 double-floats ``(hi, lo)``, exact to 2^-48: the table a deterministic law's
    spine step searches with :func:`count_at_most`."""
    c = np.cumsum(np.asarray(p64, np.float64), axis=-1)
    if normalise:
        c = c / c[..., -1:]
    hi = c.astype(np.float32)
    return jnp.asarray(hi), jnp.asarray((c - hi.astype(np.float64)).astype(np.float32))


__all__ = [
    "block_sums",
    "block_size",
    "count_at_most",
    "draw_at",
    "draw_index",
    "host_cdf",
    "prefix_sums",
    "times",
    "two_sum",
    "uniform46",
]
