"""Drafter distributions ``q_u`` on the realised tree (THEORY.md section 6).

A *draft law* says how a drafter's next-token distribution ``q_u`` arises at a
node ``u`` whose target distribution is ``p_u``. It is a pure function of the
node: ``q_u = dlaw.logq(draft_key(k_u), lp_u)`` where ``lp_u =
law.full_logp(dist_key(k_u), s_u)`` is the target's whole log-distribution at
``u`` (in the law's own token order; a token of target rank ``i`` is the child
with key ``child_key(k_u, i)``, see :mod:`brwsim.tree` and
:func:`target_rank`). So every drafter, every sampling scheme and every
reference implementation sees the same ``q`` at the same node.

Why not ``fold_in(k_u, 7)``: the children of ``u`` own ``fold_in(k_u, 2 + i)``,
so tag 7 is the key of the child of rank 5 and would correlate ``q_u`` with
that child's subtree. The draft tag is ``DRAFT_TAG = 2**32 - 8``, above every
child tag (the vocabulary is far below 2**32 - 10).

Families (SPEC ``family:key=value,...``):

``exact``
    ``q = p`` (perfect knowledge).
``noise:sigma=S``
    logit noise: ``log q = log p + S Z - logsumexp``, ``Z_i`` i.i.d. N(0, 1)
    per node and token. ``S = 0`` is ``exact``.
``temp:T=T``
    temperature mismatch: ``q proportional to p^(1/T)`` (``T > 1`` flatter,
    ``T < 1`` sharper). Deterministic given ``p``.
``mix:w=W,law=SPEC``
    mixture with a second law: ``q = (1 - W) p + W r``, where ``r`` is drawn
    at the node from the law ``SPEC`` (any :func:`brwsim.laws.parse_law` SPEC
    of the same vocabulary size) and its entries are randomly permuted over
    the tokens, so ``r`` carries no knowledge of ``p``. ``law=`` must be the
    last key: everything after it is the second law's SPEC, commas included,
    e.g. ``mix:w=0.3,law=dirichlet:V=1000,alpha=0.1``.

:func:`draft_stats` reports ``E[H(p, q)]`` (cross-entropy), ``KL(p || q)``
and ``E[TV(p, q)]`` of a draft law by Monte Carlo over independent nodes.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from .errors import BrwsimError
from .laws import Law, parse_key_values, parse_law, registrar
from .tree import dist_key, state_key

DRAFT_TAG = 2**32 - 8

_DLAWS: dict[str, type] = {}


def draft_key(node_key):
    """The key of a node's drafter randomness (disjoint from its children's keys)."""
    return jax.random.fold_in(node_key, DRAFT_TAG)


_register = registrar(_DLAWS)


def _normalise(lq):
    return lq - jax.nn.logsumexp(lq)


class DraftLaw:
    """Base class. ``logq(key, lp) -> f32[V]``: drafter log-probs over the same tokens."""

    family = "draftlaw"

    def logq(self, key, lp):  # pragma: no cover - overridden
        raise NotImplementedError

    def check(self, law: Law) -> None:
        """Raise BrwsimError if this draft law cannot serve the target law."""

    @property
    def is_exact(self) -> bool:
        return False


@_register("exact")
class Exact(DraftLaw):
    """q = p."""

    def logq(self, key, lp):
        return lp

    @property
    def is_exact(self) -> bool:
        return True


@_register("noise")
class Noise(DraftLaw):
    """log q = log p + sigma * N(0, 1) per token, renormalised."""

    sigma: float = dataclasses.field(default=0.5, metadata={"data": True})

    def logq(self, key, lp):
        z = jax.random.normal(key, lp.shape, lp.dtype)
        return _normalise(jnp.where(jnp.isfinite(lp), lp + self.sigma * z, -jnp.inf))

    @property
    def is_exact(self) -> bool:
        return self.sigma == 0


@_register("temp")
class Temp(DraftLaw):
    """q proportional to p^(1/T)."""

    T: float = dataclasses.field(default=1.0, metadata={"data": True})

    def logq(self, key, lp):
        return _normalise(jnp.where(jnp.isfinite(lp), lp / self.T, -jnp.inf))

    @property
    def is_exact(self) -> bool:
        return self.T == 1


@_register("mix")
class Mix(DraftLaw):
    """q = (1 - w) p + w r, r a randomly permuted draw of a second law."""

    w: float = dataclasses.field(default=0.5, metadata={"data": True})
    law: Law = dataclasses.field(default=None, metadata={"data": True})
    law_text: str = ""

    def logq(self, key, lp):
        kr, kp = jax.random.split(key)
        V = lp.shape[-1]
        lr = self.law.full_logp(kr, 0)
        if lr.shape[-1] < V:
            lr = jnp.concatenate([lr, jnp.full((V - lr.shape[-1],), -jnp.inf, lr.dtype)])
        lr = jax.random.permutation(kp, lr)
        a = jnp.log1p(-self.w) + lp
        b = jnp.log(self.w) + lr
        return jnp.logaddexp(a, b)

    def check(self, law: Law) -> None:
        if self.law.vocab > law.vocab:
            raise BrwsimError(
                f"draft law mix: the second law has V={self.law.vocab} tokens but the target law has "
                f"{law.vocab}; use a second law with V <= {law.vocab}"
            )

    @property
    def is_exact(self) -> bool:
        return self.w == 0


_KEYS = {"exact": set(), "noise": {"sigma"}, "temp": {"T"}, "mix": {"w", "law"}}
EXAMPLES = "exact, noise:sigma=0.5, temp:T=1.5, mix:w=0.3,law=dirichlet:V=1000,alpha=0.1"


def _num(spec, key, text, lo, lo_open, hi=None, hi_open=False):
    try:
        x = float(text)
    except ValueError:
        raise BrwsimError(f"draft law {spec!r}: {key} must be a number, got {text!r}") from None
    bad = not math.isfinite(x) or (x <= lo if lo_open else x < lo)
    if hi is not None:
        bad = bad or (x >= hi if hi_open else x > hi)
    if bad:
        rng = f"{'(' if lo_open else '['}{lo:g}, {'inf)' if hi is None else f'{hi:g}' + (')' if hi_open else ']')}"
        raise BrwsimError(f"draft law {spec!r}: {key} must be in {rng}, got {text!r}")
    return x


def parse_draft_law(spec: str | DraftLaw | None) -> DraftLaw:
    """Build a draft law from a SPEC (see the module docstring); None is ``exact``."""
    if spec is None:
        return Exact()
    if isinstance(spec, DraftLaw):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise BrwsimError(f"draft law SPEC must be a non-empty string like 'noise:sigma=0.5', got {spec!r}")
    spec = spec.strip()
    family, _, rest = spec.partition(":")
    family = family.strip().lower()
    if family not in _KEYS:
        raise BrwsimError(f"draft law {spec!r}: unknown family {family!r}; examples: {EXAMPLES}")
    kv: dict[str, str] = {}
    head, sep, law_text = rest.partition("law=")
    if sep and family == "mix":
        if head.strip() and not head.rstrip().endswith(","):
            raise BrwsimError(f"draft law {spec!r}: write law= as its own key, last, e.g. mix:w=0.3,law=SPEC")
        kv["law"] = law_text.strip()
        rest = head
    parse_key_values(rest, f"draft law {spec!r}", kv)
    need = _KEYS[family]
    if kv.keys() != need:
        missing, extra = need - kv.keys(), kv.keys() - need
        what = f"missing {', '.join(sorted(missing))}" if missing else f"unknown key(s) {', '.join(sorted(extra))}"
        takes = ", ".join(sorted(need)) or "no keys"
        raise BrwsimError(f"draft law {spec!r}: {what}; {family} takes {takes}")
    if family == "exact":
        return Exact()
    if family == "noise":
        return Noise(sigma=_num(spec, "sigma", kv["sigma"], 0.0, False))
    if family == "temp":
        return Temp(T=_num(spec, "T", kv["T"], 0.0, True))
    w = _num(spec, "w", kv["w"], 0.0, False, 1.0, True)
    if not kv["law"]:
        raise BrwsimError(f"draft law {spec!r}: law= needs a law SPEC, e.g. law=dirichlet:V=1000,alpha=0.1")
    second = parse_law(kv["law"])
    if not second.is_iid:
        raise BrwsimError(f"draft law {spec!r}: the second law of a mixture must be i.i.d., not Markov")
    return Mix(w=w, law=second, law_text=kv["law"])


def draft_law_spec(d: DraftLaw) -> str:
    """A SPEC string that round-trips through :func:`parse_draft_law`."""
    if isinstance(d, Exact):
        return "exact"
    if isinstance(d, Noise):
        return f"noise:sigma={d.sigma:g}"
    if isinstance(d, Temp):
        return f"temp:T={d.T:g}"
    if isinstance(d, Mix):
        return f"mix:w={d.w:g},law={d.law_text}"
    raise TypeError(type(d))


def node_pq(law: Law, dlaw: DraftLaw, node_key, state):
    """(lp, lq): the target's whole log-distribution at a node and the drafter's, on the same tokens.

    Tokens are in the law's own order (``law.full_logp``, a pure function of
    the node); :func:`target_rank` gives a token's rank under ``p``, which
    names the child (``child_key(node_key, rank)``). Shapes ``f32[V]``.
    """
    lp = law.full_logp(dist_key(node_key), state)
    return lp, dlaw.logq(draft_key(node_key), lp)


def target_rank(lp, token):
    """Rank of ``token`` in ``p`` (0 = most likely; ties to the smaller index, as ``lax.top_k``)."""
    x = lp[token]
    idx = jnp.arange(lp.shape[-1])
    return (jnp.sum(lp > x) + jnp.sum((lp == x) & (idx < token))).astype(jnp.int32)


def divergences(lp, lq):
    """(H(p), H(p, q), KL(p || q), TV(p, q)) of one node; zero-probability entries contribute nothing."""
    p = jnp.exp(lp)
    q = jnp.exp(lq)
    pos = p > 0
    h = -jnp.sum(jnp.where(pos, p * lp, 0.0))
    ce = -jnp.sum(jnp.where(pos, p * lq, 0.0))
    return h, ce, ce - h, 0.5 * jnp.sum(jnp.abs(p - q))


def draft_stats(law: Law | str, dlaw: DraftLaw | str, samples: int = 4096, seed: int = 0) -> dict:
    """Mean entropy, cross-entropy E[H(p, q)], KL(p || q) and TV(p, q), with standard errors.

    Monte Carlo over the roots of ``samples`` independent trees (for an i.i.d.
    law every node is distributed like a root; for a Markov law these are the
    root state's values). Returns ``{name: Stat}`` (nats; TV in [0, 1]).
    """
    from .estimate import Stat, tree_keys
    from .laws import Fixed

    law = parse_law(law)
    dlaw = parse_draft_law(dlaw)
    dlaw.check(law)
    if isinstance(law, Fixed) and isinstance(dlaw, (Exact, Temp)):
        samples = 2  # deterministic: every node is the same
    f = jax.jit(jax.vmap(lambda k: divergences(*node_pq(law, dlaw, k, law.init_state(state_key(k))))))
    chunk = max(1, min(samples, 2**22 // max(law.vocab, 1)))
    cols = [[], [], [], []]
    for start in range(0, samples, chunk):
        n = min(chunk, samples - start)
        out = f(tree_keys(seed, start, chunk, stream=5))
        for c, o in zip(cols, out, strict=True):
            c.append(np.asarray(o, np.float64)[:n])
    names = ("entropy", "cross_entropy", "kl", "tv")
    return {nm: Stat.of(np.concatenate(c)) for nm, c in zip(names, cols, strict=True)}
