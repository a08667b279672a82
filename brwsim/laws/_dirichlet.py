"""``dirichlet``: p ~ Dirichlet(alpha, ..., alpha) on V symbols, its exact sampler and exact moments."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import polygamma, psi

from .._registry import data_field
from .._spec import Spec, number
from ._base import (
    Law,
    NativeDrawn,
    float32_scale,
    log_normalize,
    register,
    scale_from_log,
    scale_logits,
    vocab_size,
)

ALPHA_MAX = 1e20  # (V - 1) alpha stays far inside float32 in the Gamma sampler (the law is uniform long before)
ALPHA_TINY = 1e-30  # below it log(U) / alpha may overflow float32: the scaled sampler (Dirichlet.full_logp)


@register("dirichlet")
class Dirichlet(Law):
    """p ~ Dirichlet(alpha, ..., alpha) on V symbols.

    SPEC: ``dirichlet:V=32000,alpha=0.05``. Sampled as normalised Gamma(alpha)
    variables, in log space (:func:`log_gamma_variates`). Any alpha in
    (0, 1e20] works; below 1e-30 the weights log G_i = (alpha x_i + log U_i) / alpha
    are centred before the division, so a tiny alpha gives the point mass at one
    uniformly random symbol that the law tends to.
    """

    V: int = 2
    alpha: float = 1.0
    # with_data_params: alpha's float32 constants as data (None: from the static alpha); alpha is then a stand-in
    # with the same branches (tiny, below 1, (V - 1) alpha below 1)
    consts: jax.Array | None = data_field(default=None)
    # at temperature T (Law.tempered): -log T, its 1/T folded into the weights' scale (0: the law itself); in a
    # data form 1.0 stands for any T, whose scale is then the last of ``consts``
    log_inv_T: float = 0.0

    spec_keys = ({"V", "alpha"}, set())

    @classmethod
    def from_spec(cls, spec: Spec) -> Dirichlet:
        alpha = number(spec, "alpha", lo=0, lo_open=True, hi=ALPHA_MAX)
        return cls(V=vocab_size(spec), alpha=alpha)

    def spec(self) -> str:
        base = f"dirichlet:V={self.V},alpha={self.alpha:g}"
        return f"temp:T={scale_from_log(-self.log_inv_T)!r},law={base}" if self.log_inv_T else base

    @property
    def vocab(self) -> int:
        return self.V

    def full_logp(self, key, state):
        k = self.consts
        if self.alpha < ALPHA_TINY:
            # Gamma(alpha) = Gamma(alpha + 1) U^(1/alpha): log G = w / alpha with w = alpha x + log U
            w = alpha_scaled_log_gamma(key, self.alpha, (self.V,), None if k is None else (k[0], (k[2], k[3], k[4])))
            return log_normalize(scale_logits(w - jnp.max(w), self._tiny_scale() if k is None else k[1]))
        lg = log_gamma_variates(key, self.alpha, (self.V,), None if k is None else (k[0], _at(k, 2)))
        if not self.log_inv_T:
            return log_normalize(lg)
        return log_normalize(scale_logits(lg - jnp.max(lg), scale_from_log(self.log_inv_T) if k is None else k[-1]))

    def _tiny_scale(self) -> float:
        """The weights' scale below alpha = 1 in float64: 1/alpha, at temperature T 1/(alpha T)."""
        if not self.log_inv_T:
            return 1.0 / self.alpha
        return scale_from_log(self.log_inv_T - math.log(self.alpha))

    def tempered(self, log_inv_T: float) -> Dirichlet | None:
        # p^(1/T) with p = G / sum G: softmax(log G / T), the Gamma draws' log-weights scaled by 1/T
        if self.consts is not None:
            return None
        return Dirichlet(V=self.V, alpha=self.alpha, log_inv_T=self.log_inv_T + log_inv_T)

    def with_data_params(self) -> Dirichlet:
        a, V = self.alpha, self.V
        small2 = (V - 1) * a < 1
        stand_in = ALPHA_TINY / 10 if a < ALPHA_TINY else (ALPHA_TINY if small2 else 0.5) if a < 1 else 1.0
        a2 = (V - 1) * a
        consts = [np.float32(a), float32_scale(self._tiny_scale())]
        consts += _gamma_consts(a + 1.0 if a < 1 else a) + _gamma_consts(a + 1.0)
        consts += [np.float32(a2)] + _gamma_consts(a2 + 1.0 if a2 < 1 else a2) if V > 1 else [0.0] * 4
        if self.log_inv_T:
            consts.append(float32_scale(scale_from_log(self.log_inv_T)))
        return Dirichlet(
            V=V, alpha=stand_in, consts=jnp.asarray(np.array(consts, np.float32)), log_inv_T=float(bool(self.log_inv_T))
        )

    def native_program(self) -> NativeDrawn:
        scale = self._tiny_scale() if self.alpha < 1 else scale_from_log(self.log_inv_T)
        return NativeDrawn("dirichlet", a=self.alpha, scale=float32_scale(scale))

    def exact_moments(self):
        return None if self.log_inv_T else dirichlet_moments(self.V, self.alpha)

    def costly_spine_step(self, need_rank: bool) -> bool:
        return need_rank or bool(self.log_inv_T)

    def spine_step(self, tables, key, need_rank, need_H, exact):
        """Without ranks, O(1): the chosen child's probability is Beta(alpha + 1, (V - 1) alpha) (the
        size-biased pick, docs/theory.md "Moments"), and H, M2 are replaced by their means mu, mu_2."""
        if need_rank or self.log_inv_T:
            return super().spine_step(tables, key, need_rank, need_H, exact)
        k1, k2 = jax.random.split(key)
        k = self.consts
        lg1 = log_gamma_variates(k1, self.alpha + 1.0, (), None if k is None else (k[0] + 1.0, _at(k, 5)))
        if self.V > 1:
            lg2 = log_gamma_variates(k2, (self.V - 1) * self.alpha, (), None if k is None else (k[8], _at(k, 9)))
            xi = jnp.logaddexp(lg1, lg2) - lg1
        else:
            xi = jnp.float32(0.0)
        return xi, jnp.int32(0), jnp.float32(exact[0]), jnp.float32(exact[1])


def _gamma_consts(a: float) -> list:
    """The squeeze method's float64 constants for Gamma(a), a >= 1, as the float32 values its code uses: d, c,
    log d (:func:`_log_gamma_at_least_one`)."""
    d = a - 1.0 / 3.0
    return [np.float32(d), np.float32(1.0 / math.sqrt(9.0 * d)), np.float32(math.log(d))]


def _at(k, i: int) -> tuple:
    """(d, c, log d) from ``Dirichlet.consts`` at ``i``."""
    return k[i], k[i + 1], k[i + 2]


def log_gamma_variates(key, alpha: float, shape, data=None) -> jax.Array:
    """log of i.i.d. Gamma(alpha, 1) variates, exact, stable for small alpha.

    Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha) (Marsaglia and Tsang 2000,
    section 6); Gamma(a), a >= 1, by their squeeze method: d = a - 1/3,
    c = 1/sqrt(9d), v = (1 + c Z)^3, accept when log U < Z^2/2 + d - d v +
    d log v. The loop redraws rejected entries until all are accepted.

    ``data`` (a law's parameters as arrays, :meth:`Dirichlet.with_data_params`): ``(alpha, (d, c, log d))`` in
    float32, the same values the code below computes from ``alpha``; ``alpha`` then only picks the branch.
    """
    kloop, kpow = jax.random.split(key)
    a = (alpha + 1.0 if alpha < 1 else alpha) if data is None else data[1]
    x = _log_gamma_at_least_one(kloop, a, shape)
    if alpha < 1:
        u = jax.random.uniform(kpow, shape, minval=jnp.finfo(jnp.float32).tiny)
        x = x + jnp.log(u) / (alpha if data is None else data[0])
    return x


# A round accepts each entry with probability above 0.95 (a >= 1), so an entry still rejected after 64 rounds has
# probability below 0.05^64 < 1e-83: the cap never acts, and the loop ends whatever happens inside it.
MAX_ROUNDS = 64


def _log_gamma_at_least_one(kloop, a, shape) -> jax.Array:
    """log Gamma(a) variates for a >= 1 (the squeeze method of :func:`log_gamma_variates`); ``a`` a float, or
    its constants ``(d, c, log d)`` as float32 arrays (:func:`_gamma_consts`)."""
    if isinstance(a, tuple):
        d, c, log_d = a
    else:
        d = a - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * d)
        log_d = math.log(d)

    def body(st):
        i, x, done = st
        kn, ku = jax.random.split(jax.random.fold_in(kloop, i))
        z = jax.random.normal(kn, shape)
        u = jax.random.uniform(ku, shape)
        v = 1.0 + c * z
        v = v * v * v
        logv = jnp.log(jnp.where(v > 0, v, 1.0))
        ok = (v > 0) & (jnp.log(u) < 0.5 * z * z + d - d * v + d * logv)
        x = jnp.where(done, x, log_d + logv)
        return i + 1, x, done | ok

    def going(st):
        i, _, done = st
        return jnp.logical_and(~jnp.all(done), i < MAX_ROUNDS)

    init = (jnp.int32(0), jnp.zeros(shape), jnp.zeros(shape, bool))
    return jax.lax.while_loop(going, body, init)[1]


def alpha_scaled_log_gamma(key, alpha: float, shape, data=None) -> jax.Array:
    """``alpha log G`` for G ~ Gamma(alpha), alpha < 1: ``alpha log Gamma(alpha + 1) + log U``, finite for any alpha.

    The same draws as :func:`log_gamma_variates` (same key use, same ``data``), multiplied by alpha before float32
    overflows.
    """
    kloop, kpow = jax.random.split(key)
    x = _log_gamma_at_least_one(kloop, alpha + 1.0 if data is None else data[1], shape)
    u = jax.random.uniform(kpow, shape, minval=jnp.finfo(jnp.float32).tiny)
    return (jnp.float32(alpha) if data is None else data[0]) * x + jnp.log(u)


def dirichlet_moments(V: int, alpha: float) -> tuple[float, float]:
    """Exact E[H(p)] and E[sum p (log p)^2] for p ~ Dirichlet(alpha 1_V) (docs/theory.md, "Moments").

    With A = V alpha, p_1 ~ Beta(alpha, A - alpha), and by symmetry
    E[H] = V E[-p_1 log p_1], E[M2] = V E[p_1 (log p_1)^2]. Size-biasing a
    Beta(a, b) by p gives Beta(a + 1, b), whose log has mean
    psi(a + 1) - psi(a + b + 1) and variance psi'(a + 1) - psi'(a + b + 1).
    Since E[p_1] = 1/V:
      mu   = psi(A + 1) - psi(alpha + 1),
      mu_2 = (psi(alpha + 1) - psi(A + 1))^2 + psi'(alpha + 1) - psi'(A + 1).
    """
    A = V * alpha
    m = float(psi(alpha + 1) - psi(A + 1))
    var = float(polygamma(1, alpha + 1) - polygamma(1, A + 1))
    return 0.0 - m, m * m + var  # 0.0 - m: no -0.0 when alpha -> 0
