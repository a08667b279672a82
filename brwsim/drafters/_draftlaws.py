"""Draft laws: the drafter's distribution ``q_u`` at each node of the realised tree (docs/drafters.md).

A draft law says how a drafter's next-token distribution ``q_u`` arises at a
node ``u`` whose target distribution is ``p_u``. It is a pure function of the
node: ``q_u = dlaw.logq(draft_key(k_u), lp_u)`` with ``lp_u =
law.full_logp(dist_key(k_u), s_u)`` the target's whole log-distribution in the
law's own token order (a token of target rank ``i`` leads to the child with
key ``child_key(k_u, i)``; :func:`brwsim.laws.rank_of` gives the rank). So
every drafter, every sampling scheme and every reference implementation sees
the same ``q`` at the same node.

Families (SPEC ``family:key=value,...``): ``exact`` (q = p), ``noise:sigma=S``
(logit noise), ``temp:T=T`` (temperature mismatch), ``mix:w=W,law=SPEC``
(mixture with a randomly permuted draw of a second law; ``law=`` last).
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._keys import Stream, dist_key, draft_key, state_key, stream_key
from .._registry import data_field, registrar
from .._spec import Spec, number, parse_spec
from .._stats import Stat, sample_chunks
from ..errors import BrwsimError
from ..laws import Law, parse_law

DRAFT_LAWS: dict[str, type] = {}  # SPEC family -> draft-law class
register = registrar(DRAFT_LAWS)
EXAMPLES = "exact, noise:sigma=0.5, temp:T=1.5, mix:w=0.3,law=dirichlet:V=1000,alpha=0.1"


NOISE_MAX = 1e30  # noise past it: q is the point mass on the largest N(0, 1) variate, as at 1e30, in float32
TEMP_MAX = float(np.finfo(np.float32).max)  # above it the uniform law on the support, as at float32's largest


def _normalise(lq):
    return lq - jax.nn.logsumexp(lq)


class DraftLaw:
    """Base class. ``logq(key, lp) -> f32[V]``: the drafter's log-probs over the same tokens as ``lp``."""

    family: ClassVar[str] = "draftlaw"
    spec_keys: ClassVar[tuple[set[str], set[str]]] = (set(), set())
    deterministic: ClassVar[bool] = False  # q is a function of p alone (no randomness of its own)

    @classmethod
    def from_spec(cls, spec: Spec) -> DraftLaw:  # pragma: no cover - overridden
        raise NotImplementedError

    def spec(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def logq(self, key, lp):  # pragma: no cover - overridden
        raise NotImplementedError

    def check(self, law: Law) -> None:
        """Raise BrwsimError if this draft law cannot serve the target law."""


@register("exact")
class Exact(DraftLaw):
    """q = p."""

    deterministic = True

    @classmethod
    def from_spec(cls, spec: Spec) -> Exact:
        return cls()

    def spec(self) -> str:
        return "exact"

    def logq(self, key, lp):
        return lp


@register("noise")
class Noise(DraftLaw):
    """log q = log p + sigma * N(0, 1) per token, renormalised."""

    sigma: float = data_field(default=0.5)  # at most NOISE_MAX (past it q is the same point mass in float32)
    given: float | None = None  # the SPEC's sigma, when it was above NOISE_MAX

    spec_keys = ({"sigma"}, set())

    @classmethod
    def from_spec(cls, spec: Spec) -> Noise:
        sigma = number(spec, "sigma", lo=0)
        return cls(sigma=min(sigma, NOISE_MAX), given=sigma if sigma > NOISE_MAX else None)

    def spec(self) -> str:
        return f"noise:sigma={self.sigma if self.given is None else self.given:g}"

    def logq(self, key, lp):
        z = jax.random.normal(key, lp.shape, lp.dtype)
        return _normalise(jnp.where(jnp.isfinite(lp), lp + self.sigma * z, -jnp.inf))


@register("temp")
class Temp(DraftLaw):
    """q proportional to p^(1/T)."""

    T: float = data_field(default=1.0)  # at most float32's largest (past it q is the same uniform law in float32)
    given: float | None = None  # the SPEC's T, when it was above that

    spec_keys = ({"T"}, set())
    deterministic = True

    @classmethod
    def from_spec(cls, spec: Spec) -> Temp:
        T = number(spec, "T", lo=0, lo_open=True)
        return cls(T=min(T, TEMP_MAX), given=T if T > TEMP_MAX else None)

    def spec(self) -> str:
        return f"temp:T={self.T if self.given is None else self.given:g}"

    def logq(self, key, lp):
        # centred first, the largest entries kept at 0: a T that rounds to 0 in float32 gives the point mass on the
        # most likely token (split among ties), the limit of p^(1/T), not 0 / 0
        y = lp - jnp.max(lp)
        return _normalise(jnp.where(jnp.isfinite(lp), jnp.where(y < 0, y / self.T, 0.0), -jnp.inf))


@register("mix")
class Mix(DraftLaw):
    """q = (1 - w) p + w r, r a randomly permuted draw of a second law (no knowledge of p)."""

    w: float = data_field(default=0.5)
    law: Law = data_field(default=None)
    law_text: str = ""
    # (log(1 - w), log w) from the float64 w, so a w within 2^-24 of 1 keeps its 1 - w (None: from w in float32)
    log_weights: jax.Array | None = data_field(default=None)

    spec_keys = ({"w", "law"}, set())

    @classmethod
    def from_spec(cls, spec: Spec) -> Mix:
        w = number(spec, "w", lo=0, hi=1, hi_open=True)
        text = spec.params["law"]
        if not text:
            raise BrwsimError(f"{spec.where}: law= needs a law SPEC, e.g. law=dirichlet:V=1000,alpha=0.1")
        second = parse_law(text)
        if not second.is_iid:
            raise BrwsimError(f"{spec.where}: the second law of a mixture must be i.i.d., not Markov")
        with np.errstate(divide="ignore"):  # w = 0: log w = -inf, q = p
            weights = np.array([math.log1p(-w), np.log(w)], np.float32)
        return cls(w=w, law=second, law_text=text, log_weights=jnp.asarray(weights))

    def spec(self) -> str:
        w = float(self.w)
        return f"mix:w={w:g},law={self.law_text}" if float(f"{w:g}") == w else f"mix:w={w!r},law={self.law_text}"

    def logq(self, key, lp):
        kr, kp = jax.random.split(key)
        V = lp.shape[-1]
        lr = self.law.full_logp(kr, 0)
        if lr.shape[-1] < V:
            lr = jnp.concatenate([lr, jnp.full((V - lr.shape[-1],), -jnp.inf, lr.dtype)])
        lr = jax.random.permutation(kp, lr)
        # <= 0 like every log-probability (log1p(-w) + log w terms can round above 0 where both laws put all
        # their mass on one token; a positive log q would let a child outscore its parent in a drafter's search)
        lk, lw = (jnp.log1p(-self.w), jnp.log(self.w)) if self.log_weights is None else self.log_weights
        return jnp.minimum(jnp.logaddexp(lk + lp, lw + lr), 0.0)

    def check(self, law: Law) -> None:
        if self.law.vocab > law.vocab:
            raise BrwsimError(
                f"draft law mix: the second law has V={self.law.vocab} tokens but the target law has "
                f"{law.vocab}; use a second law with V <= {law.vocab}"
            )


def parse_draft_law(spec: str | DraftLaw | None) -> DraftLaw:
    """Build a draft law from a SPEC (see the module docstring); None is ``exact``."""
    if spec is None:
        return Exact()
    if isinstance(spec, DraftLaw):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise BrwsimError(f"draft law SPEC must be a non-empty string like 'noise:sigma=0.5', got {spec!r}")
    families = {name: cls.spec_keys for name, cls in DRAFT_LAWS.items()}
    parsed = parse_spec(spec.strip(), "draft law", families, tail_key="law", examples=EXAMPLES)
    return DRAFT_LAWS[parsed.family].from_spec(parsed)


def node_pq(law: Law, dlaw: DraftLaw, node_key, state):
    """(lp, lq): the target's whole log-distribution at a node and the drafter's, on the same tokens (``f32[V]``)."""
    lp = law.full_logp(dist_key(node_key), state)
    return lp, dlaw.logq(draft_key(node_key), lp)


def divergences(lp, lq):
    """(H(p), H(p, q), KL(p || q), TV(p, q)) of one node; zero-probability entries contribute nothing."""
    p = jnp.exp(lp)
    q = jnp.exp(lq)
    pos = p > 0
    h = -jnp.sum(jnp.where(pos, p * lp, 0.0))
    ce = -jnp.sum(jnp.where(pos, p * lq, 0.0))
    return h, ce, ce - h, 0.5 * jnp.sum(jnp.abs(p - q))


class DraftStats(NamedTuple):
    """Mean entropy E[H(p)], cross-entropy E[H(p, q)], KL(p || q) and TV(p, q) (nats; TV in [0, 1])."""

    entropy: Stat
    cross_entropy: Stat
    kl: Stat
    tv: Stat


def draft_stats(key, law: Law | str, dlaw: DraftLaw | str, samples: int = 4096) -> DraftStats:
    """:class:`DraftStats` by Monte Carlo over the roots of ``samples`` independent trees (stream ``DRAFT_STATS``).

    For an i.i.d. law every node is distributed like a root; for a Markov law
    these are the root state's values.
    """
    law = parse_law(law)
    dlaw = parse_draft_law(dlaw)
    dlaw.check(law)
    if law.deterministic and dlaw.deterministic:
        samples = 2  # every node is the same
    f = jax.jit(jax.vmap(lambda k: divergences(*node_pq(law, dlaw, k, law.init_state(state_key(k))))))
    cols = sample_chunks(f, stream_key(key, Stream.DRAFT_STATS), samples, law.vocab)
    return DraftStats(*(Stat.of(c) for c in cols))
