"""``temp``: an i.i.d. law at sampling temperature T (every node's log-probabilities through log_softmax(logp / T)).

SPEC: ``temp:T=0.7,law=dirichlet:V=1000,alpha=0.1`` (``law=`` last; the inner
law must be i.i.d.). The synthetic counterpart of ``brwsim llm
--temperature T``: the same transform on every node (docs/llm.md,
"Temperature"). Moments are by Monte Carlo.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._registry import data_field
from .._spec import Spec, number
from ..errors import BrwsimError
from ._base import Law, NativeDrawn, compose_scale, log_normalize, parse_law, register, scale_logits


@register("temp")
class Temp(Law):
    """``law`` with every node's distribution p replaced by p^(1/T) / sum p^(1/T).

    Any finite T > 0 works: a T so small that 1/T overflows float32 gives the
    point mass on the most likely token, a T so large that 1/T underflows the
    uniform law on the support."""

    law: Law = data_field(default=None)
    T: float = 1.0
    law_text: str = ""
    inv: jax.Array | None = data_field(default=None)  # with_data_params: 1/T in float32 as data (T then 1)

    spec_keys = ({"T", "law"}, set())

    @classmethod
    def from_spec(cls, spec: Spec) -> Temp:
        T = number(spec, "T", lo=0, lo_open=True)
        text = spec.params["law"]
        if not text:
            raise BrwsimError(f"{spec.where}: law= needs a law SPEC, e.g. temp:T=0.7,law=dirichlet:V=1000,alpha=0.1")
        inner = parse_law(text)
        if not inner.is_iid:
            raise BrwsimError(f"{spec.where}: the inner law must be i.i.d. (temperature of a Markov law is not built)")
        return cls(law=inner, T=float(T), law_text=text)

    def spec(self) -> str:
        return f"temp:T={self.T:g},law={self.law_text or self.law.spec()}"

    @property
    def vocab(self) -> int:
        return self.law.vocab

    def full_logp(self, key, state):
        lp = self.law.full_logp(key, state)
        return log_normalize(scale_logits(lp - jnp.max(lp), 1.0 / self.T if self.inv is None else self.inv))

    def with_data_params(self) -> Temp:
        # 1/T rounded to float32 as scale_logits rounds a Python number (past float32's largest: inf, a point mass)
        c = 1.0 / self.T
        c32 = np.float32(np.inf) if c > float(np.finfo(np.float32).max) else np.float32(c)
        return Temp(law=self.law.with_data_params(), T=1.0, inv=jnp.asarray(c32, jnp.float32))

    def native_program(self) -> NativeDrawn | None:
        inner = self.law.native_program()
        if not isinstance(inner, NativeDrawn):
            return None
        return inner._replace(scale=compose_scale(inner.scale, 1.0 / self.T))

    @property
    def deterministic(self) -> bool:
        return self.law.deterministic

    def check_budget(self, P: int) -> None:
        self.law.check_budget(P)
