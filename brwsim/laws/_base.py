"""The law interface, its registry, and the ordering of a node's children.

A *law* says how the target's next-token distribution ``p_u`` arises at each
node ``u`` of the infinite token tree (docs/theory.md, "Laws"). Node ``u`` owns
a key ``k_u``; its distribution is ``law.full_logp(dist_key(k_u), s_u)`` and its
hidden state ``s_u`` was drawn by ``law.child_state`` from its parent's state
and its own rank. Nothing depends on the order in which nodes are visited, so
every drafter and every reference implementation sees the same tree.

Children are ranked by decreasing probability; equal probabilities are
ranked by token index, smaller first (the order of ``lax.top_k``):
:func:`topk_sorted` and :func:`rank_of` implement that one convention.
"""

from __future__ import annotations

import math
import sys
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._moments import entropy_moments
from .._registry import registrar
from .._spec import Spec, number, parse_spec
from ..errors import BrwsimError
from ._draw import draw_index

PROB_TOL = 1e-6  # how far from 1 a user-given distribution may sum
VOCAB_MAX = 2**31 - 1  # token indices are int32
SMALLEST = 5e-324  # the smallest positive float64
LOG_SMALLEST = math.log(SMALLEST)

LAWS: dict[str, type] = {}  # SPEC family -> law class (read by parse_law)
register = registrar(LAWS)


class NativeIndexed(NamedTuple):
    """How the native CPU kernel finds an indexed law's nodes: integer arithmetic on threefry bits, so the JAX
    kernel's trees bit for bit (brwsim/data/oracle_native.cc).

    ``init``: the root's state, 0 or ``randint(n_init)`` from its state key (1); ``child``: a child's state, 0 or
    the table law's 32-bit hash of its parent's state and its rank modulo ``n_hash`` (1); ``row``: a node's row,
    0, its state (1) or ``randint(rows)`` from its draw key (2).
    """

    init: int
    child: int
    row: int
    n_init: int = 0
    n_hash: int = 0


class NativeDrawn(NamedTuple):
    """How the native CPU kernel draws a node of a drawn i.i.d. law: V variates from a stream of its own (not the
    JAX kernel's bits; the same law, brwsim/data/oracle_native.cc).

    ``family``: ``dirichlet`` (``a`` = alpha), ``logitnormal`` or ``zipf`` (``a`` = log s, exact in float64, ``b`` =
    s_sd); ``scale``: the factor c of log p = c (w - max w) - log-sum-exp (1/alpha for alpha < 1, sigma, times a
    temperature's 1/T; for zipf a factor on the node's exponent, 1: a temperature is folded into log s). ``inf``: the
    point mass, 0: the uniform law.
    """

    family: str
    a: float = 0.0
    b: float = 0.0
    scale: float = 1.0


class NativeMarkov(NamedTuple):
    """How the native CPU kernel draws a Markov law's nodes: each state's law (its :class:`NativeDrawn`, or
    ``NativeDrawn("fixed", a=i)`` for a state whose row is the same at every node: row i of the fixed rows), the
    hidden states by inverse CDF of a uniform of its own stream (not the JAX kernel's bits; the same law,
    brwsim/data/oracle_native.cc)."""

    states: tuple[NativeDrawn, ...]
    vocabs: tuple[int, ...]


def scale_from_log(log_c: float) -> float:
    """``exp(log_c)`` in float64, held inside the positive finite floats: past either end the nearest one, whose
    float32 is 0 (the uniform law over the support) or inf (a point mass), the limit of the scale."""
    if log_c < LOG_SMALLEST:
        return SMALLEST
    try:
        return math.exp(log_c)
    except OverflowError:
        return sys.float_info.max


def float32_scale(c: float) -> float:
    """A scale ``c > 0`` (a Python float) as float32, rounded as :func:`scale_logits` rounds it: past float32's
    largest, inf (a point mass); below its smallest, 0 (the uniform law)."""
    with np.errstate(over="ignore"):
        return float(np.float32(np.inf) if c > float(np.finfo(np.float32).max) else np.float32(c))


def topk_sorted(logp: jax.Array, K: int) -> jax.Array:
    """The K largest entries of ``logp`` in decreasing order, padded with -inf."""
    V = logp.shape[-1]
    if K <= V:
        return jax.lax.top_k(logp, K)[0]
    top = jax.lax.top_k(logp, V)[0]
    pad = jnp.full(top.shape[:-1] + (K - V,), -jnp.inf, top.dtype)
    return jnp.concatenate([top, pad], axis=-1)


def rank_of(logp: jax.Array, token) -> jax.Array:
    """Rank of ``token`` among the entries of ``logp`` (0 = most likely; ties to the smaller index, as top_k)."""
    x = logp[token]
    idx = jnp.arange(logp.shape[-1])
    return (jnp.sum(logp > x) + jnp.sum((logp == x) & (idx < token))).astype(jnp.int32)


def vocab_size(spec: Spec) -> int:
    """The SPEC's ``V``: an integer in [1, 2^31 - 1]."""
    return number(spec, "V", integer=True, lo=1, hi=VOCAB_MAX)


def log_normalize(z: jax.Array) -> jax.Array:
    """log-probabilities from logits ``z`` (last axis): <= 0 and summing to one in float32, for any finite scale.

    The largest entry is subtracted first, so it becomes exactly 0 and the
    sum of exponentials is >= 1; ``jax.nn.logsumexp`` written as
    ``z - logsumexp(z)`` does not guarantee this under XLA (at logits of
    ~1e6 it gives log-probabilities up to +0.12). All ``-inf`` rows stay
    ``-inf``; the final ``minimum`` pins the sign against any rounding.
    """
    m = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    y = z - jnp.where(jnp.isfinite(m), m, 0.0)
    out = jnp.minimum(y - jnp.log(jnp.sum(jnp.exp(y), axis=-1, keepdims=True)), 0.0)
    return jnp.where(m == -jnp.inf, -jnp.inf, out)  # a row of -inf stays -inf (not -inf - log 0 = NaN)


def scale_logits(y: jax.Array, c: float, split_ties: bool = False) -> jax.Array:
    """``c * y`` for log-weights ``y <= 0`` whose largest entry is 0, with the limits of ``c`` kept exact.

    ``c`` (a Python number or a traced float32 scalar) in float32 may round
    to 0 (all finite entries become 0: uniform over the support) or to inf
    (every entry below the largest becomes ``-inf``: a point mass on the first
    largest entry, or with ``split_ties`` split among the entries tied at 0, the
    limit of p^c for explicit rows, whose ties are real: a drawn row's largest
    entries tie only by float32 rounding); ``-inf`` entries stay ``-inf`` and 0
    stays 0, so no ``0 * inf`` or ``inf / inf`` can make a NaN.
    """
    if isinstance(c, (int, float)):
        c32 = np.float32(float32_scale(c))
    else:  # traced: float32 arithmetic already overflows to inf and underflows to 0
        c32 = jnp.asarray(c, jnp.float32)
    scaled = jnp.where(y == 0, 0.0, jnp.where(jnp.isneginf(y), -jnp.inf, y * c32))
    # c = inf is the point mass on the largest entry, found by argmax: under XLA a value computed in two fusions
    # (here the row's max and its entries) may differ in its last bits, so ``y == 0`` may hold nowhere; with
    # split_ties also on every entry tied at 0 (the limit of p^c / sum p^c)
    top = jnp.arange(y.shape[-1]) == jnp.argmax(y, axis=-1, keepdims=True)
    if split_ties:
        top = top | (y == 0)
    return jnp.where(jnp.isposinf(c32), jnp.where(top, 0.0, -jnp.inf), scaled)


def _short(x, n: int = 40) -> str:
    """``repr(x)`` cut to ``n`` characters, for one-line messages."""
    r = repr(x)
    return r if len(r) <= n else r[: n - 3] + "..."


def check_distribution(probs, what: str) -> np.ndarray:
    """Validate one probability vector; return it as float64."""
    if isinstance(probs, (list, tuple)):
        bad = [x for x in probs if isinstance(x, bool) or not isinstance(x, (int, float, np.number))]
        if bad:
            raise BrwsimError(f"{what}: probabilities must be numbers, found {_short(bad[0])}")
    try:
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise BrwsimError(f"{what}: probabilities must be finite numbers in a flat list, got {_short(probs)}") from None
    if p.ndim != 1 or p.size < 1:
        raise BrwsimError(f"{what}: needs at least one probability (V >= 1)")
    if not np.all(np.isfinite(p)):
        raise BrwsimError(f"{what}: probabilities must be finite numbers, found NaN or inf")
    if np.any(p < 0):
        raise BrwsimError(f"{what}: probabilities must be >= 0, found {p.min():g}")
    s = p.sum()
    if abs(s - 1.0) > PROB_TOL:
        raise BrwsimError(f"{what}: probabilities sum to {s:.9g}, not 1 (tolerance 1e-6); normalise them")
    return p


class Law:
    """Base class. An i.i.d. law has one hidden state, 0; Markov laws override the state methods.

    Node distributions (all jittable, one node; vmap for more):

    ``full_logp(key, state) -> f32[V]``
        the whole distribution's log-probabilities, in the law's own token order
        (``-inf`` where a probability is zero).
    ``node_logp(key, state, K) -> f32[K]``
        its ``K`` largest entries, decreasing, ``-inf`` past the vocabulary.
        Only these can enter a P-node tree when ``K = min(V, P)``.
    ``init_state(key)``, ``child_state(key, parent_state, rank)``
        the hidden-state dynamics.

    Indexed laws (``indexed``) draw every node's distribution from a fixed
    table: ``node_logp(key, s, K) == row_table(K)[node_row(key, s)]`` bit for
    bit, so the oracle keeps a row index per node.

    The spine (docs/theory.md, "The spine") asks the law for one step of the
    target's own continuation: :meth:`spine_step`, with host-side tables from
    :meth:`spine_tables`.
    """

    family: ClassVar[str] = "law"
    spec_keys: ClassVar[tuple[set[str], set[str]]] = (set(), set())  # (required, optional) SPEC keys
    n_states = 1
    indexed = False
    spine_needs_rank = False  # True when a spine walk must know the rank of each step's child

    def native_program(self) -> NativeIndexed | NativeDrawn | NativeMarkov | None:
        """How the native CPU kernel serves this law (:class:`NativeIndexed`, :class:`NativeDrawn`,
        :class:`NativeMarkov`), or None."""
        return None

    @property
    def kernels(self) -> tuple[str, ...]:
        """The oracle kernels that can serve this law, in the order ``--kernel auto`` prefers them: an indexed law
        with a native program ``("native", "jax")`` (the same trees), a drawn or Markov one ``("jax", "native")``
        (the native kernel's own stream is asked for by name), any other ``("jax",)``."""
        prog = self.native_program()
        if prog is None:
            return ("jax",)
        return ("native", "jax") if isinstance(prog, NativeIndexed) else ("jax", "native")

    @classmethod
    def from_spec(cls, spec: Spec) -> Law:  # pragma: no cover - overridden
        raise NotImplementedError

    def spec(self) -> str:  # pragma: no cover - overridden
        """A SPEC string that :func:`brwsim.laws.parse_law` turns back into this law."""
        raise NotImplementedError

    @property
    def vocab(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def full_logp(self, key, state):  # pragma: no cover - overridden
        raise NotImplementedError

    def node_logp(self, key, state, K: int):
        return topk_sorted(self.full_logp(key, state), K)

    def row_table(self, K: int):  # pragma: no cover - indexed laws
        raise NotImplementedError

    def node_row(self, key, state):  # pragma: no cover - indexed laws
        raise NotImplementedError

    def init_state(self, key):
        return jnp.int32(0)

    def child_state(self, key, parent_state, rank):
        return jnp.int32(0)

    @property
    def deterministic(self) -> bool:
        """True when every node has the same distribution (a deterministic tree: exact enumeration)."""
        return False

    @property
    def is_iid(self) -> bool:
        return True

    def exact_moments(self) -> tuple[float, float] | None:
        """(mu, mu_2) in closed form, or None when only Monte Carlo is known."""
        return None

    def state_names(self) -> list[str]:
        return ["iid"]

    def sub_laws(self) -> tuple:
        """The i.i.d. law of each hidden state (an i.i.d. law is its own one state)."""
        return (self,)

    def state_kernel(self) -> np.ndarray:
        """``[S, R, S]``: the law of a child's state given its parent's state and its rank (row R - 1: larger ranks)."""
        return np.ones((1, 1, 1))

    def initial_probs(self) -> np.ndarray:
        """``[S]``: the law of the root's hidden state."""
        return np.ones(1)

    def check_budget(self, P: int) -> None:
        """Raise a one-line error if a P-node tree may need more children of one node than the law holds."""

    def padded(self, V: int) -> Law:
        """The same law on ``V >= vocab`` tokens, the new ones of probability 0, with arrays of one shape for any
        of its kind (so a Markov law stacks its states into one kernel: :func:`stack_laws`); itself where the
        vocabulary is not an array's shape."""
        return self

    def with_data_params(self) -> Law:
        """The same law with its numeric parameters as float32 array leaves instead of static fields, so that
        laws of one family and shape that differ only in them are one kind of :func:`stack_laws` (one compiled
        branch for any number of Markov states); the same float32 arithmetic, so the same draws. Itself for a
        law with no such parameters."""
        return self

    def table_bytes(self) -> int:
        """Bytes of host memory the law's exact moments and spine tables take beyond the law itself (O(V) for a
        deterministic law given by a formula, 0 when there are none): sized before any is built."""
        return sum(sub.table_bytes() for sub in self.sub_laws()) if self.sub_laws() != (self,) else 0

    # -- the spine: one step of the target's own continuation from a fresh node of this (i.i.d.) law

    def tempered(self, log_inv_T: float) -> Law | None:
        """This law at temperature T (every node's p replaced by p^(1/T) / sum p^(1/T)), ``log_inv_T = -log T``,
        as a law of its own family whose scale absorbs 1/T in float64 (zipf's exponent, logit-normal's sigma, a
        Dirichlet's 1/alpha), rounded to float32 once: a scale and a temperature at opposite float32 limits then
        give their true product, as the law says. None for a law with no scale of its own (``temp`` then
        scales its rows)."""
        return None

    def spine_tables(self) -> dict:
        """Host-computed tables :meth:`spine_step` reads (cumulative probabilities); none by default."""
        return {}

    def costly_spine_step(self, need_rank: bool) -> bool:
        """True when a spine step needs the node's whole distribution (O(V))."""
        return True

    def spine_step(self, tables: dict, key, need_rank: bool, need_H: bool, exact):
        """(xi, rank, H, M2) of one step from a fresh node: the chosen child's surprisal -log p_c, its rank
        (0 unless ``need_rank``), and the node's entropy and second log-moment (NaN unless ``need_H``)."""
        k1, k2 = jax.random.split(key)
        lp = self.full_logp(k1, 0)
        # inverse-CDF draw of the child: one 46-bit uniform instead of V Gumbels, its prefix sums double-floats
        c = draw_index(jnp.exp(lp - jnp.max(lp)), k2)
        rank = rank_of(lp, c) if need_rank else jnp.int32(0)
        if need_H:
            h, m2 = entropy_moments(lp)
        else:
            h = m2 = jnp.float32(jnp.nan)
        return -lp[c], rank, h, m2


def pick(stacked, i):
    """Item ``i`` of laws (or tables) stacked along a leading axis by :func:`stack_laws`."""
    return jax.tree.map(lambda x: x[i], stacked)


def _signature(tree) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((tuple(x.shape), str(x.dtype)) for x in leaves)


def stack_laws(laws, extra=None) -> tuple[list, np.ndarray, np.ndarray]:
    """Laws of one kind stacked along a leading axis, so that any number of them is one kernel (a gather by
    index), not one compiled branch each: ``(stacked, group, pos)``, law ``i`` being ``pick(stacked[group[i]],
    pos[i])``. Laws of one class with the same static fields are one kind once padded (:meth:`Law.padded`) to
    the largest vocabulary of their class, and laws of one family and shape that differ only in numeric
    parameters are one kind as their :meth:`Law.with_data_params`; ``extra`` (one pytree a law, e.g. its spine
    tables, made from the padded law by ``extra(law)``) is stacked beside it and must match too: then each item
    is ``(law, extra)``."""
    V = {}
    for law in laws:
        V[type(law)] = max(V.get(type(law), 0), law.vocab)
    padded = [law.padded(V[type(law)]) for law in laws]
    # laws that differ only in numeric parameters: those as data (Law.with_data_params), one kind for all of them;
    # a law alone in its kind keeps its static form (its compiled code, bit for bit, as outside a Markov law)
    forms = [law.with_data_params() for law in padded]
    by_form: dict = {}
    for law, form in zip(padded, forms, strict=True):
        by_form.setdefault(_signature(form), set()).add(_signature(law))
    items = [form if len(by_form[_signature(form)]) > 1 else law for law, form in zip(padded, forms, strict=True)]
    if extra is not None:  # made from the law itself, not from its data form
        items = [(item, extra(law)) for item, law in zip(items, padded, strict=True)]
    kinds: dict = {}
    group = np.zeros(len(items), np.int32)
    pos = np.zeros(len(items), np.int32)
    for i, item in enumerate(items):
        members = kinds.setdefault(_signature(item), [])
        group[i], pos[i] = list(kinds).index(_signature(item)), len(members)
        members.append(item)
    stacked = [jax.tree.map(lambda *xs: jnp.stack(xs), *members) for members in kinds.values()]
    return stacked, group, pos


def parse_law(spec: str | Law) -> Law:
    """Build a law from ``family:key=value,...`` (the families of :data:`LAWS`), or return a law as it is.

    A bare path ending in ``.json``/``.toml`` is a Markov law, ``.npz`` a pool.
    Raises :class:`BrwsimError` with a one-line message on any bad SPEC.
    """
    if isinstance(spec, Law):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise BrwsimError(f"law SPEC must be a non-empty string like 'dirichlet:V=1000,alpha=0.1', got {spec!r}")
    spec = spec.strip()
    lower = spec.lower()
    if ":" not in spec or lower.endswith((".json", ".toml", ".npz")) and "=" not in spec:
        family = "markov" if lower.endswith((".json", ".toml")) else "pool" if lower.endswith(".npz") else None
        if family is None:
            raise BrwsimError(
                f"law {spec!r}: expected family:key=value,... with family one of "
                f"{', '.join(sorted(LAWS))} (e.g. dirichlet:V=1000,alpha=0.1)"
            )
        return LAWS[family].from_spec(Spec(family, {"path": spec}, spec, "law"))
    parsed = parse_spec(spec, "law", {name: cls.spec_keys for name, cls in LAWS.items()}, tail_key="law")
    return LAWS[parsed.family].from_spec(parsed)
