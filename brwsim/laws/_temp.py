"""``temp``: an i.i.d. law at sampling temperature T (every node's log-probabilities through log_softmax(logp / T)).

SPEC: ``temp:T=0.7,law=dirichlet:V=1000,alpha=0.1`` (``law=`` last; the inner
law must be i.i.d.). The synthetic counterpart of ``brwsim llm
--temperature T``: the same transform on every node (docs/llm.md,
"Temperature"). A law with a scale of its own (zipf's exponent, logit-normal's
sigma, Dirichlet's weights) takes 1/T into it in float64, so a zipf or Dirichlet
law at a temperature keeps its own sampler and, where the law has them, its
exact moments; any other law's rows are scaled (moments by Monte Carlo).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .._registry import data_field
from .._spec import Spec, number
from ..errors import BrwsimError
from ._base import (
    Law,
    NativeDrawn,
    float32_scale,
    log_normalize,
    parse_law,
    register,
    scale_from_log,
    scale_logits,
)


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

    def effective(self) -> tuple[Law, float | None]:
        """``(law, log_inv_T)``: the law this temperature comes to and the log of the inverse temperature still to
        apply to its rows. Nested temperatures add their -log T; a law with a scale of its own absorbs the sum
        (:meth:`Law.tempered`, in float64, rounded to float32 once), leaving 0.0. None for the data form (its
        factor is data)."""
        if self.inv is not None:
            return self.law, None
        law, log_inv_T = self.law, -math.log(self.T)
        while isinstance(law, Temp) and law.inv is None:
            law, log_inv_T = law.law, log_inv_T - math.log(law.T)
        if log_inv_T == 0.0:
            return law, 0.0
        folded = law.tempered(log_inv_T)
        return (law, log_inv_T) if folded is None else (folded, 0.0)

    def full_logp(self, key, state):
        # rows of a law with no scale of its own (fixed, pool: explicit rows, whose ties are real) scaled: a 1/T past
        # float32 splits the point mass among the tied largest entries
        if self.inv is not None:  # the data form: the factor as data
            lp = self.law.full_logp(key, state)
            return log_normalize(scale_logits(lp - jnp.max(lp), self.inv, split_ties=True))
        law, log_inv_T = self.effective()
        if log_inv_T == 0.0:
            return law.full_logp(key, state)
        lp = law.full_logp(key, state)
        return log_normalize(scale_logits(lp - jnp.max(lp), scale_from_log(log_inv_T), split_ties=True))

    @property
    def folded(self) -> Law | None:
        """The law this temperature comes to when nothing is left to scale its rows by (at T = 1, or folded into
        the law's own scale), else None."""
        law, log_inv_T = self.effective()
        return law if log_inv_T == 0.0 else None

    def node_logp(self, key, state, K: int):
        law = self.folded
        return super().node_logp(key, state, K) if law is None else law.node_logp(key, state, K)

    def with_data_params(self) -> Law:
        law, log_inv_T = self.effective()
        if log_inv_T == 0.0:
            return law.with_data_params()
        # the factor rounded to float32 as scale_logits rounds a Python number
        inv = jnp.asarray(float32_scale(scale_from_log(log_inv_T)), jnp.float32)
        return Temp(law=law.with_data_params(), T=1.0, inv=inv)

    def native_program(self) -> NativeDrawn | None:
        # a drawn law's program (the temperature folded into it); an indexed law's rows are not this law's table
        law = self.folded
        prog = None if law is None else law.native_program()
        return prog if isinstance(prog, NativeDrawn) else None

    def table_bytes(self) -> int:
        law = self.folded
        return 0 if law is None else law.table_bytes()

    def exact_moments(self):
        law = self.folded
        return None if law is None else law.exact_moments()

    def spine_tables(self) -> dict:
        law = self.folded
        return {} if law is None else law.spine_tables()

    def costly_spine_step(self, need_rank: bool) -> bool:
        law = self.folded
        return True if law is None else law.costly_spine_step(need_rank)

    def spine_step(self, tables, key, need_rank, need_H, exact):
        law = self.folded
        if law is None:
            return super().spine_step(tables, key, need_rank, need_H, exact)
        return law.spine_step(tables, key, need_rank, need_H, exact)

    @property
    def deterministic(self) -> bool:
        return self.law.deterministic

    def check_budget(self, P: int) -> None:
        self.law.check_budget(P)
