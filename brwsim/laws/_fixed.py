"""``fixed``: the same distribution at every node, a deterministic tree with exact answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._moments import entropy_moments
from .._registry import data_field
from .._spec import Spec
from ..errors import BrwsimError
from ._base import Law, NativeIndexed, check_distribution, register, topk_sorted
from ._draw import count_at_most, host_cdf, uniform46


@register("fixed")
class Fixed(Law):
    """The same distribution at every node: a deterministic tree.

    SPEC: ``fixed:probs=0.6/0.3/0.1`` (probabilities separated by ``/``; they
    must be >= 0 and sum to 1 within 1e-6).
    """

    logp: jax.Array = data_field()  # [V] sorted decreasing

    spec_keys = ({"probs"}, set())
    indexed = True

    @classmethod
    def from_spec(cls, spec: Spec) -> Fixed:
        try:
            probs = [float(x) for x in spec.params["probs"].split("/")]
        except ValueError:
            raise BrwsimError(f"{spec.where}: probs must be numbers separated by '/', e.g. 0.6/0.3/0.1") from None
        return fixed_law(probs)

    def spec(self) -> str:
        p = np.exp(np.asarray(self.logp, np.float64))
        return "fixed:probs=" + "/".join(f"{x:.9g}" for x in p)

    @property
    def vocab(self) -> int:
        return int(self.logp.shape[-1])

    def full_logp(self, key, state):
        return self.logp

    def node_logp(self, key, state, K: int):
        return topk_sorted(self.logp, K)

    def row_table(self, K: int):
        return topk_sorted(self.logp, K)[None]

    def node_row(self, key, state):
        return jnp.int32(0)

    def padded(self, V: int) -> Fixed:
        if V <= self.vocab:
            return self
        return Fixed(logp=jnp.concatenate([self.logp, jnp.full((V - self.vocab,), -jnp.inf, self.logp.dtype)]))

    def native_program(self) -> NativeIndexed:
        return NativeIndexed(init=0, child=0, row=0)

    @property
    def deterministic(self) -> bool:
        return True

    def exact_moments(self):
        h, m2 = entropy_moments(np.asarray(self.logp, np.float64))
        return float(h) + 0.0, float(m2)  # + 0.0: a zero entropy is 0.0, not -0.0

    def spine_tables(self) -> dict:
        return cdf_tables(self)

    def costly_spine_step(self, need_rank: bool) -> bool:
        return False

    def spine_step(self, tables, key, need_rank, need_H, exact):
        return cdf_step(tables, key, exact)


def fixed_law(probs) -> Fixed:
    """A :class:`Fixed` law from a probability vector (validated: >= 0, sums to 1)."""
    p = check_distribution(probs, "fixed law")
    p = np.sort(p / p.sum())[::-1]  # exactly normalised: no log-probability above 0
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    return Fixed(logp=jnp.asarray(lp, jnp.float32))


def cdf_tables(law: Law) -> dict:
    """The sorted log-probabilities of a deterministic law's one distribution and its cumulative probabilities,
    normalised in float64 and kept as float32 double-floats ``cdf + cdf_lo`` (exact to 2^-48: brwsim.laws._draw)."""
    lp = np.asarray(law.node_logp(None, 0, law.vocab), np.float64)
    last = int(np.count_nonzero(lp > -np.inf)) - 1  # the least likely token of positive probability
    cdf, cdf_lo = host_cdf(np.exp(lp), normalise=True)
    return {"lp": jnp.asarray(lp, jnp.float32), "cdf": cdf, "cdf_lo": cdf_lo, "last": jnp.int32(max(last, 0))}


def cdf_step(tables: dict, key, exact):
    """A spine step of a deterministic law: the child by inverse CDF with a 46-bit uniform, O(log V); H and M2 are
    the exact ones."""
    k1, _ = jax.random.split(key)
    r = jnp.minimum(count_at_most(tables["cdf"], tables["cdf_lo"], uniform46(k1)), tables["last"])
    return -tables["lp"][r], r.astype(jnp.int32), jnp.float32(exact[0]), jnp.float32(exact[1])
