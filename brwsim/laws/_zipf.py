"""``zipf``: p_i proportional to i^(-s), optionally with a random exponent per node."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._moments import entropy_moments
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
from ._fixed import cdf_step, cdf_tables

S_SD_MAX = 1e30  # s_sd * N(0, 1) stays finite in float32


@register("zipf")
class Zipf(Law):
    """p_i proportional to i^(-s), i = 1..V; optionally a random exponent per node.

    SPEC: ``zipf:V=32000,s=1.1`` (deterministic tree) or
    ``zipf:V=32000,s=1.1,s_sd=0.3``: each node draws its own exponent
    s_u = s * exp(s_sd * N(0, 1)) (log-normal with median s).
    """

    V: int = 2
    s: float = 1.0
    s_sd: float = 0.0
    # with_data_params of a random exponent: float32 (log s, s_sd) as data (s, s_sd then stand-ins 1, 1)
    params: jax.Array | None = data_field(default=None)
    # with_data_params of a fixed exponent: s in float32 as data, rounded as scale_logits rounds it (s then 1)
    s32: jax.Array | None = data_field(default=None)
    # at a temperature (Law.tempered): log(s / T) in float64, which may pass float64's range where s (then held at
    # its nearest finite value) cannot; the random exponent exp(log s + s_sd Z) is drawn from it
    log_s: float | None = None

    spec_keys = ({"V", "s"}, {"s_sd"})

    @classmethod
    def from_spec(cls, spec: Spec) -> Zipf:
        s_sd = number(spec, "s_sd", lo=0, hi=S_SD_MAX, default="0") if "s_sd" in spec.params else 0.0
        return cls(V=vocab_size(spec), s=number(spec, "s", lo=0, lo_open=True), s_sd=s_sd)

    @property
    def exponent(self) -> float:
        """s: the static field, or for the data form of a fixed exponent its float32 value."""
        return self.s if self.s32 is None else float(self.s32)

    def spec(self) -> str:
        extra = f",s_sd={self.s_sd:g}" if self.s_sd else ""
        return f"zipf:V={self.V},s={self.exponent:g}{extra}"

    @property
    def vocab(self) -> int:
        return self.V

    def full_logp(self, key, state):
        s = self.s if self.s32 is None else self.s32
        if self.s_sd > 0:  # in log space: no s * inf or 0 * inf, whatever the draw
            log_s, sd = (self.log_exponent, self.s_sd) if self.params is None else (self.params[0], self.params[1])
            s = jnp.exp(log_s + sd * jax.random.normal(key, ()))
        return log_normalize(scale_logits(-jnp.log(jnp.arange(1, self.V + 1, dtype=jnp.float32)), s))

    def with_data_params(self) -> Zipf:
        if self.s_sd == 0:  # deterministic: s as data (its spine tables and exact moments stay the law's own)
            return Zipf(V=self.V, s=1.0, s_sd=0.0, s32=jnp.asarray(float32_scale(self.s), jnp.float32))
        return Zipf(V=self.V, s=1.0, s_sd=1.0, params=jnp.asarray(np.array([self.log_exponent, self.s_sd], np.float32)))

    def node_logp(self, key, state, K: int):
        # already sorted: no top_k needed
        lp = self.full_logp(key, state)
        if K <= self.V:
            return lp[:K]
        return jnp.concatenate([lp, jnp.full((K - self.V,), -jnp.inf, lp.dtype)])

    def native_program(self) -> NativeDrawn:
        return NativeDrawn("zipf", a=self.log_exponent, b=self.s_sd)

    @property
    def log_exponent(self) -> float:
        """log s in float64 (-inf for an exponent of 0)."""
        if self.log_s is not None:
            return self.log_s
        s = self.exponent
        return math.log(s) if s > 0 else -math.inf

    def tempered(self, log_inv_T: float) -> Zipf | None:
        # p^(1/T) of a Zipf law is the Zipf law of exponent s / T (a node's random exponent s_u / T: the same s_sd)
        if self.s32 is not None or self.params is not None:
            return None
        log_s = self.log_exponent + log_inv_T
        return Zipf(V=self.V, s=scale_from_log(log_s), s_sd=self.s_sd, log_s=log_s)

    @property
    def deterministic(self) -> bool:
        return self.s_sd == 0

    def table_bytes(self) -> int:
        # exact moments: float64 log-weights and two temporaries (40 bytes a token); spine tables: float64
        # cumulatives normalised and split into two float32 ones (58 bytes a token at their peak, measured)
        return 64 * self.V if self.deterministic else 0

    def exact_moments(self):
        if self.s_sd > 0:
            return None
        with np.errstate(over="ignore"):  # an exponent near float64's largest: -inf past rank 1, a point mass
            lz = -self.exponent * np.log(np.arange(1, self.V + 1, dtype=np.float64))
        lz -= np.logaddexp.reduce(lz)
        h, m2 = entropy_moments(lz)
        return float(h) + 0.0, float(m2)  # + 0.0: a zero entropy is 0.0, not -0.0

    def spine_tables(self) -> dict:
        return cdf_tables(self) if self.deterministic else {}

    def costly_spine_step(self, need_rank: bool) -> bool:
        return not self.deterministic

    def spine_step(self, tables, key, need_rank, need_H, exact):
        if self.deterministic:
            return cdf_step(tables, key, exact)
        return super().spine_step(tables, key, need_rank, need_H, exact)
