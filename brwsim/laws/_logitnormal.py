"""``logitnormal``: p = softmax(z) with z_i i.i.d. N(0, sigma^2)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .._registry import data_field
from .._spec import Spec, number
from ._base import Law, NativeDrawn, float32_scale, log_normalize, register, scale_from_log, scale_logits, vocab_size


@register("logitnormal")
class LogitNormal(Law):
    """p = softmax(z), z_i i.i.d. N(0, sigma^2), i = 1..V.

    SPEC: ``logitnormal:V=32000,sigma=3``. Its moments are Monte Carlo
    estimates; its spine steps read the whole distribution (O(V)). Any finite
    sigma > 0 works: the normals are centred on their maximum before scaling,
    so a huge sigma gives the point mass it tends to, a tiny one the uniform law.
    """

    V: int = 2
    sigma: float = 1.0
    scale: jax.Array | None = data_field(default=None)  # with_data_params: sigma in float32 as data (sigma then 0)

    spec_keys = ({"V", "sigma"}, set())

    @classmethod
    def from_spec(cls, spec: Spec) -> LogitNormal:
        return cls(V=vocab_size(spec), sigma=number(spec, "sigma", lo=0, lo_open=True))

    def spec(self) -> str:
        return f"logitnormal:V={self.V},sigma={self.sigma:g}"

    @property
    def vocab(self) -> int:
        return self.V

    def full_logp(self, key, state):
        z = jax.random.normal(key, (self.V,))
        return log_normalize(scale_logits(z - jnp.max(z), self.sigma if self.scale is None else self.scale))

    def with_data_params(self) -> LogitNormal:
        return LogitNormal(V=self.V, sigma=0.0, scale=jnp.float32(float32_scale(self.sigma)))

    def native_program(self) -> NativeDrawn:
        return NativeDrawn("logitnormal", scale=float32_scale(self.sigma))

    def tempered(self, log_inv_T: float) -> LogitNormal | None:
        # p^(1/T) of softmax(sigma z) is softmax((sigma / T) z)
        if self.scale is not None:
            return None
        return LogitNormal(V=self.V, sigma=scale_from_log(math.log(self.sigma) + log_inv_T))
