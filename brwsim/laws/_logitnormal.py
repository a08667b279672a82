"""``logitnormal``: p = softmax(z) with z_i i.i.d. N(0, sigma^2)."""

from __future__ import annotations

import jax

from .._spec import Spec, number
from ._base import Law, register


@register("logitnormal")
class LogitNormal(Law):
    """p = softmax(z), z_i i.i.d. N(0, sigma^2), i = 1..V.

    SPEC: ``logitnormal:V=32000,sigma=3``. Its moments are Monte Carlo
    estimates; its spine steps read the whole distribution (O(V)).
    """

    V: int = 2
    sigma: float = 1.0

    spec_keys = ({"V", "sigma"}, set())

    @classmethod
    def from_spec(cls, spec: Spec) -> LogitNormal:
        return cls(V=number(spec, "V", integer=True, lo=1), sigma=number(spec, "sigma", lo=0, lo_open=True))

    def spec(self) -> str:
        return f"logitnormal:V={self.V},sigma={self.sigma:g}"

    @property
    def vocab(self) -> int:
        return self.V

    def full_logp(self, key, state):
        z = self.sigma * jax.random.normal(key, (self.V,))
        return z - jax.nn.logsumexp(z)
