"""Laws of node distributions (THEORY.md section 3).

A *law* says how the target's next-token distribution ``p_u`` arises at each
node ``u`` of the infinite token tree. Every law here is a small frozen
dataclass registered as a JAX pytree: arrays are data leaves, sizes are static
metadata, so a jitted driver recompiles only when a size changes.

The realised tree is a pure function of one PRNG key (see :mod:`brwsim.tree`):
the node ``u`` owns a key ``k_u``; its distribution is ``law.full_logp(k_u, s_u)``
and its hidden state ``s_u`` was drawn by ``law.child_state`` from its
parent's state and its own rank. Because nothing depends on the order in which
nodes are visited, every drafter and every reference implementation sees the
same tree.

Interface (all methods are jittable and work on a single node; vmap for more):

``full_logp(key, state) -> f32[V]``
    log-probabilities of the whole distribution, in no particular order
    (``-inf`` where a probability is zero; padded with ``-inf`` up to ``V``).
``node_logp(key, state, K) -> f32[K]``
    the ``K`` largest log-probabilities, sorted in decreasing order; entries
    past the vocabulary are ``-inf``. Only these ever enter a P-node tree
    when ``K = min(V, P)``.
``init_state(key) -> i32``, ``child_state(key, parent_state, rank) -> i32``
    the hidden-state dynamics (always 0 for i.i.d. laws).

Indexed laws (``indexed = True``: ``fixed``, ``pool``, a ``markov`` law whose
states are all indexed) draw every node's distribution from a fixed table:
``row_table(K) -> f32[N, K]`` (sorted rows) and ``node_row(key, state) -> i32``
with ``node_logp(key, state, K) == row_table(K)[node_row(key, state)]``, bit
for bit. The oracle then stores one row index per node instead of ``K``
log-probabilities.

Families: ``fixed``, ``dirichlet``, ``logitnormal``, ``zipf``, ``pool`` (an
empirical set of distributions read from a file) and ``markov`` (hidden
states, a law per state, a kernel on the child's rank). Build one from a SPEC
string with :func:`parse_law`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tomllib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .errors import BrwsimError

PROB_TOL = 1e-6  # how far from 1 a user-given distribution may sum

_LAWS: dict[str, type] = {}


def registrar(registry: dict[str, type]):
    """Decorator factory: make a class a frozen dataclass registered as a JAX pytree.

    Fields declared with ``_data()`` are array leaves; the rest are static
    metadata (a change recompiles). The class is entered in ``registry`` under
    its SPEC family name.
    """

    def register(family: str):
        def wrap(cls):
            cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
            data = [f.name for f in dataclasses.fields(cls) if f.metadata.get("data")]
            meta = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("data")]
            jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
            cls.family = family
            registry[family] = cls
            return cls

        return wrap

    return register


_register = registrar(_LAWS)


def _data(**kw):
    return dataclasses.field(metadata={"data": True}, **kw)


def topk_sorted(logp: jax.Array, K: int) -> jax.Array:
    """The K largest entries of ``logp`` in decreasing order, padded with -inf."""
    V = logp.shape[-1]
    if K <= V:
        return jax.lax.top_k(logp, K)[0]
    top = jax.lax.top_k(logp, V)[0]
    pad = jnp.full(top.shape[:-1] + (K - V,), -jnp.inf, top.dtype)
    return jnp.concatenate([top, pad], axis=-1)


def log_moments(logp: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Entropy H = sum p (-log p) and second log-moment M2 = sum p (log p)^2.

    Zero-probability entries (``-inf``) contribute nothing.
    """
    p = jnp.exp(logp)
    safe = jnp.where(p > 0, logp, 0.0)
    return -jnp.sum(p * safe, axis=-1), jnp.sum(p * safe * safe, axis=-1)


class Law:
    """Base class: i.i.d. laws have a single hidden state 0."""

    family = "law"
    n_states = 1
    indexed = False  # True when node distributions are rows of row_table(K), see node_row

    def row_table(self, K: int):  # pragma: no cover - overridden by indexed laws
        raise NotImplementedError

    def node_row(self, key, state):  # pragma: no cover - overridden by indexed laws
        raise NotImplementedError

    @property
    def vocab(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def full_logp(self, key, state):  # pragma: no cover - overridden
        raise NotImplementedError

    def node_logp(self, key, state, K: int):
        return topk_sorted(self.full_logp(key, state), K)

    def init_state(self, key):
        return jnp.int32(0)

    def child_state(self, key, parent_state, rank):
        return jnp.int32(0)

    @property
    def deterministic(self) -> bool:
        """True when every node has the same distribution (exact enumeration)."""
        return False

    @property
    def is_iid(self) -> bool:
        return True

    def exact_moments(self) -> tuple[float, float] | None:
        """(mu, mu_2) in closed form, or None when only Monte Carlo is known."""
        return None

    def state_names(self) -> list[str]:
        return ["iid"]


# ---------------------------------------------------------------------------
# i.i.d. families


@_register("fixed")
class Fixed(Law):
    """The same distribution at every node: a deterministic tree.

    SPEC: ``fixed:probs=0.6/0.3/0.1`` (probabilities separated by ``/``; they
    must be >= 0 and sum to 1 within 1e-6).
    """

    logp: jax.Array = _data()

    @property
    def vocab(self) -> int:
        return int(self.logp.shape[-1])

    def full_logp(self, key, state):
        return self.logp

    def node_logp(self, key, state, K: int):
        return topk_sorted(self.logp, K)

    indexed = True

    def row_table(self, K: int):
        return topk_sorted(self.logp, K)[None]

    def node_row(self, key, state):
        return jnp.int32(0)

    @property
    def deterministic(self) -> bool:
        return True

    def exact_moments(self):
        lp = np.asarray(self.logp, np.float64)
        p = np.exp(lp)
        safe = np.where(p > 0, lp, 0.0)
        return float(-(p * safe).sum()), float((p * safe * safe).sum())


@_register("dirichlet")
class Dirichlet(Law):
    """p ~ Dirichlet(alpha, ..., alpha) on V symbols.

    SPEC: ``dirichlet:V=32000,alpha=0.05``. Sampled as normalised Gamma(alpha)
    variables, in log space: Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha),
    with Gamma(alpha + 1) from Marsaglia and Tsang's squeeze (exact; the
    rejection loop runs over the whole vector until every entry is accepted).
    """

    V: int = 2
    alpha: float = 1.0

    @property
    def vocab(self) -> int:
        return self.V

    def full_logp(self, key, state):
        lg = log_gamma_variates(key, self.alpha, (self.V,))
        return lg - jax.nn.logsumexp(lg)

    def exact_moments(self):
        return dirichlet_moments(self.V, self.alpha)


@_register("logitnormal")
class LogitNormal(Law):
    """p = softmax(z), z_i i.i.d. N(0, sigma^2), i = 1..V.

    SPEC: ``logitnormal:V=32000,sigma=3``.
    """

    V: int = 2
    sigma: float = 1.0

    @property
    def vocab(self) -> int:
        return self.V

    def full_logp(self, key, state):
        z = self.sigma * jax.random.normal(key, (self.V,))
        return z - jax.nn.logsumexp(z)


@_register("zipf")
class Zipf(Law):
    """p_i proportional to i^(-s), i = 1..V; optionally a random exponent per node.

    SPEC: ``zipf:V=32000,s=1.1`` (deterministic tree) or
    ``zipf:V=32000,s=1.1,s_sd=0.3``: each node draws its own exponent
    s_u = s * exp(s_sd * N(0, 1)) (log-normal with median s).
    """

    V: int = 2
    s: float = 1.0
    s_sd: float = 0.0

    @property
    def vocab(self) -> int:
        return self.V

    def full_logp(self, key, state):
        s = self.s
        if self.s_sd > 0:
            s = s * jnp.exp(self.s_sd * jax.random.normal(key, ()))
        z = -s * jnp.log(jnp.arange(1, self.V + 1, dtype=jnp.float32))
        return z - jax.nn.logsumexp(z)

    def node_logp(self, key, state, K: int):
        # already sorted: no top_k needed
        lp = self.full_logp(key, state)
        if K <= self.V:
            return lp[:K]
        return jnp.concatenate([lp, jnp.full((K - self.V,), -jnp.inf, lp.dtype)])

    @property
    def deterministic(self) -> bool:
        return self.s_sd == 0

    def exact_moments(self):
        if self.s_sd > 0:
            return None
        i = np.arange(1, self.V + 1, dtype=np.float64)
        lz = -self.s * np.log(i)
        lz -= np.logaddexp.reduce(lz)
        p = np.exp(lz)
        return float(-(p * lz).sum()), float((p * lz * lz).sum())


@_register("pool")
class Pool(Law):
    """An empirical set of N distributions; each node draws one uniformly.

    SPEC: ``pool:path=FILE`` (or just a path ending in ``.npz``). The file is
    a NumPy ``.npz`` with ``logp`` (N x K float log-probabilities of each
    distribution, any order) or ``probs`` (N x K probabilities); or a JSON
    list of probability lists. Each row must be a whole distribution (sum 1
    within 1e-6) unless the file also gives ``entropy`` and ``m2`` (N
    floats, the full rows' moments): then rows may be the top-K entries of
    larger distributions, and asking for more than K children of a node is
    an error, never a silent truncation.
    """

    logp: jax.Array = _data()  # [N, K] sorted decreasing
    entropy: jax.Array = _data()  # [N]
    m2: jax.Array = _data()  # [N]
    truncated: bool = False
    path: str = ""

    @property
    def vocab(self) -> int:
        return int(self.logp.shape[-1])

    @property
    def size(self) -> int:
        return int(self.logp.shape[0])

    def _row(self, key):
        return jax.random.randint(key, (), 0, self.logp.shape[0])

    def full_logp(self, key, state):
        return self.logp[self._row(key)]

    def node_logp(self, key, state, K: int):
        return self.row_table(K)[self._row(key)]

    indexed = True

    def row_table(self, K: int):
        n, k = self.logp.shape
        if K <= k:
            return self.logp[:, :K]
        if self.truncated:
            raise BrwsimError(
                f"pool {self.path!r} keeps only the top {k} entries per row but "
                f"{K} children per node are needed; save more entries per row or lower P"
            )
        return jnp.concatenate([self.logp, jnp.full((n, K - k), -jnp.inf, self.logp.dtype)], axis=1)

    def node_row(self, key, state):
        return self._row(key).astype(jnp.int32)

    def exact_moments(self):
        return float(np.mean(np.asarray(self.entropy, np.float64))), float(np.mean(np.asarray(self.m2, np.float64)))


# ---------------------------------------------------------------------------
# Markov-dependent laws


@_register("markov")
class Markov(Law):
    """Hidden states; a law per state; a kernel on the child's rank.

    The state of node ``ui`` (child of ``u`` of rank ``i`` in ``p_u``, 0-based)
    is drawn from ``kernel[s_u, min(i, R - 1)]``; its distribution from the
    law of its state. The root's state is drawn from ``initial``.

    SPEC: ``markov:path=FILE`` (or a path ending in ``.json`` / ``.toml``). The
    file holds ``states`` (name -> law SPEC), ``initial`` (a state name or a
    name -> probability table) and ``kernel`` (name -> list of rows, row r
    being the next-state probabilities, in the order of ``states``, of the
    child of rank r; the last row serves all larger ranks). See
    ``examples/two_state.json``.
    """

    laws: tuple = _data()
    log_kernel: jax.Array = _data()  # [S, R, S]
    log_init: jax.Array = _data()  # [S]
    names: tuple = ()
    path: str = ""

    @property
    def n_states(self) -> int:  # type: ignore[override]
        return len(self.names)

    @property
    def vocab(self) -> int:
        return max(law.vocab for law in self.laws)

    @property
    def is_iid(self) -> bool:
        return False

    def state_names(self):
        return list(self.names)

    def _pad(self, lp):
        V = self.vocab
        if lp.shape[-1] == V:
            return lp
        return jnp.concatenate([lp, jnp.full((V - lp.shape[-1],), -jnp.inf, lp.dtype)])

    def full_logp(self, key, state):
        branches = [lambda k, law=law: self._pad(law.full_logp(k, 0)) for law in self.laws]
        return jax.lax.switch(state, branches, key)

    def node_logp(self, key, state, K: int):
        branches = [lambda k, law=law: law.node_logp(k, 0, K) for law in self.laws]
        return jax.lax.switch(state, branches, key)

    @property
    def indexed(self) -> bool:  # type: ignore[override]
        return all(law.indexed for law in self.laws)

    def row_table(self, K: int):
        return jnp.concatenate([law.row_table(K) for law in self.laws], axis=0)

    def node_row(self, key, state):
        offsets = np.cumsum([0] + [law.row_table(1).shape[0] for law in self.laws])[:-1]
        pairs = zip(self.laws, offsets.tolist(), strict=True)
        branches = [lambda k, law=law, o=o: law.node_row(k, 0) + o for law, o in pairs]
        return jax.lax.switch(state, branches, key)

    def init_state(self, key):
        return jax.random.categorical(key, self.log_init).astype(jnp.int32)

    def child_state(self, key, parent_state, rank):
        R = self.log_kernel.shape[1]
        row = self.log_kernel[parent_state, jnp.minimum(rank, R - 1)]
        return jax.random.categorical(key, row).astype(jnp.int32)


# ---------------------------------------------------------------------------
# sampling helpers


def log_gamma_variates(key, alpha: float, shape) -> jax.Array:
    """log of i.i.d. Gamma(alpha, 1) variates, exact, stable for small alpha.

    Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha) (Marsaglia and Tsang 2000,
    section 6); Gamma(a), a >= 1, by their squeeze method: d = a - 1/3,
    c = 1/sqrt(9d), v = (1 + c Z)^3, accept when log U < Z^2/2 + d - d v +
    d log v. The loop redraws rejected entries until all are accepted.
    """
    a = alpha + 1.0 if alpha < 1 else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    kloop, kpow = jax.random.split(key)

    def body(st):
        i, x, done = st
        kn, ku = jax.random.split(jax.random.fold_in(kloop, i))
        z = jax.random.normal(kn, shape)
        u = jax.random.uniform(ku, shape)
        v = 1.0 + c * z
        v = v * v * v
        logv = jnp.log(jnp.where(v > 0, v, 1.0))
        ok = (v > 0) & (jnp.log(u) < 0.5 * z * z + d - d * v + d * logv)
        x = jnp.where(done, x, math.log(d) + logv)
        return i + 1, x, done | ok

    init = (jnp.int32(0), jnp.zeros(shape), jnp.zeros(shape, bool))
    _, x, _ = jax.lax.while_loop(lambda s: ~jnp.all(s[2]), body, init)
    if alpha < 1:
        u = jax.random.uniform(kpow, shape, minval=jnp.finfo(jnp.float32).tiny)
        x = x + jnp.log(u) / alpha
    return x


def dirichlet_moments(V: int, alpha: float) -> tuple[float, float]:
    """Exact E[H(p)] and E[sum p (log p)^2] for p ~ Dirichlet(alpha 1_V).

    With A = V alpha, p_1 ~ Beta(alpha, A - alpha), and by symmetry
    E[H] = V E[-p_1 log p_1], E[M2] = V E[p_1 (log p_1)^2]. Size-biasing a
    Beta(a, b) by p gives Beta(a + 1, b), whose log has mean
    psi(a + 1) - psi(a + b + 1) and variance psi'(a + 1) - psi'(a + b + 1).
    Since E[p_1] = 1/V:
      mu   = psi(A + 1) - psi(alpha + 1),
      mu_2 = (psi(alpha + 1) - psi(A + 1))^2 + psi'(alpha + 1) - psi'(A + 1).
    """
    from scipy.special import polygamma, psi

    A = V * alpha
    m = float(psi(alpha + 1) - psi(A + 1))
    var = float(polygamma(1, alpha + 1) - polygamma(1, A + 1))
    return -m, m * m + var


# ---------------------------------------------------------------------------
# SPEC parsing and validation


_SPEC_KEYS = {
    "fixed": ({"probs"}, set()),
    "dirichlet": ({"V", "alpha"}, set()),
    "logitnormal": ({"V", "sigma"}, set()),
    "zipf": ({"V", "s"}, {"s_sd"}),
    "pool": ({"path"}, set()),
    "markov": ({"path"}, set()),
}


def _number(spec: str, key: str, value: str, *, integer=False, positive=True) -> float | int:
    try:
        x = int(value) if integer else float(value)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise BrwsimError(f"law {spec!r}: {key} must be {kind}, got {value!r}") from None
    if not math.isfinite(x):
        raise BrwsimError(f"law {spec!r}: {key} must be finite, got {value!r}")
    if integer and x < 1:
        raise BrwsimError(f"law {spec!r}: {key} must be >= 1, got {x}")
    if positive and not integer and x <= 0:
        raise BrwsimError(f"law {spec!r}: {key} must be > 0, got {x}")
    return x


def check_distribution(probs, what: str) -> np.ndarray:
    """Validate one probability vector; return it as float64."""
    p = np.asarray(probs, dtype=np.float64)
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


def fixed_law(probs) -> Fixed:
    p = check_distribution(probs, "fixed law")
    p = np.sort(p)[::-1]
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    return Fixed(logp=jnp.asarray(lp, jnp.float32))


def parse_key_values(rest: str, where: str, kv: dict[str, str] | None = None) -> dict[str, str]:
    """``key=value,...`` of a SPEC into a dict (added to ``kv`` if given).

    ``where`` starts each error message, e.g. ``law 'dirichlet:V=3'``.
    """
    kv = {} if kv is None else kv
    for item in filter(None, (x.strip() for x in rest.split(","))):
        if "=" not in item:
            raise BrwsimError(f"{where}: {item!r} is not key=value")
        k, _, v = item.partition("=")
        k = k.strip()
        if k in kv:
            raise BrwsimError(f"{where}: key {k!r} given twice")
        kv[k] = v.strip()
    return kv


def parse_law(spec: str | Law) -> Law:
    """Build a law from ``family:key=value,...`` (see the module docstring).

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
        if lower.endswith((".json", ".toml")):
            return load_markov(spec)
        if lower.endswith(".npz"):
            return load_pool(spec)
        raise BrwsimError(
            f"law {spec!r}: expected family:key=value,... with family one of "
            f"{', '.join(sorted(_SPEC_KEYS))} (e.g. dirichlet:V=1000,alpha=0.1)"
        )
    family, _, rest = spec.partition(":")
    family = family.strip().lower()
    if family not in _SPEC_KEYS:
        raise BrwsimError(f"law {spec!r}: unknown family {family!r}; use one of {', '.join(sorted(_SPEC_KEYS))}")
    kv = parse_key_values(rest, f"law {spec!r}")
    required, optional = _SPEC_KEYS[family]
    missing = required - kv.keys()
    if missing:
        raise BrwsimError(f"law {spec!r}: missing key(s) {', '.join(sorted(missing))} for family {family}")
    extra = kv.keys() - required - optional
    if extra:
        allowed = ", ".join(sorted(required | optional))
        raise BrwsimError(f"law {spec!r}: unknown key(s) {', '.join(sorted(extra))}; {family} takes {allowed}")

    if family == "fixed":
        try:
            probs = [float(x) for x in kv["probs"].split("/")]
        except ValueError:
            raise BrwsimError(f"law {spec!r}: probs must be numbers separated by '/', e.g. 0.6/0.3/0.1") from None
        return fixed_law(probs)
    if family == "dirichlet":
        return Dirichlet(V=_number(spec, "V", kv["V"], integer=True), alpha=_number(spec, "alpha", kv["alpha"]))
    if family == "logitnormal":
        return LogitNormal(V=_number(spec, "V", kv["V"], integer=True), sigma=_number(spec, "sigma", kv["sigma"]))
    if family == "zipf":
        s_sd = _number(spec, "s_sd", kv["s_sd"], positive=False) if "s_sd" in kv else 0.0
        if s_sd < 0:
            raise BrwsimError(f"law {spec!r}: s_sd must be >= 0, got {s_sd}")
        return Zipf(V=_number(spec, "V", kv["V"], integer=True), s=_number(spec, "s", kv["s"]), s_sd=s_sd)
    if family == "pool":
        return load_pool(kv["path"])
    return load_markov(kv["path"])


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(os.path.expanduser(path), "rb") as f:
            return f.read()
    except OSError as e:
        raise BrwsimError(f"{what} file {path!r} cannot be read: {e.strerror or e}") from None


def load_pool(path: str) -> Pool:
    """Read an empirical pool (see :class:`Pool` for the format)."""
    raw = _read_file(path, "pool")
    entropy = m2 = None
    if path.lower().endswith(".json"):
        try:
            rows = json.loads(raw)
            probs = np.asarray(rows, dtype=np.float64)
        except (ValueError, TypeError):
            raise BrwsimError(f"pool file {path!r}: expected a JSON list of equal-length probability lists") from None
        with np.errstate(divide="ignore"):
            logp = np.log(probs)
    else:
        import io

        try:
            z = np.load(io.BytesIO(raw), allow_pickle=False)
        except Exception:
            raise BrwsimError(f"pool file {path!r} is not a readable .npz archive") from None
        if "logp" in z:
            logp = np.asarray(z["logp"], np.float64)
        elif "probs" in z:
            with np.errstate(divide="ignore"):
                logp = np.log(np.asarray(z["probs"], np.float64))
        else:
            raise BrwsimError(f"pool file {path!r} needs an array 'logp' or 'probs' (N x K)")
        if "entropy" in z or "m2" in z:
            if not ("entropy" in z and "m2" in z):
                raise BrwsimError(f"pool file {path!r}: give both 'entropy' and 'm2', or neither")
            entropy = np.asarray(z["entropy"], np.float64)
            m2 = np.asarray(z["m2"], np.float64)
    if logp.ndim != 2 or logp.shape[0] < 1 or logp.shape[1] < 1:
        raise BrwsimError(f"pool file {path!r}: expected an N x K array of distributions, got shape {logp.shape}")
    if np.any(np.isnan(logp)) or np.any(logp > 1e-6):
        raise BrwsimError(f"pool file {path!r}: probabilities must be in [0, 1] with no NaN")
    sums = np.exp(logp).sum(axis=1)
    truncated = bool(np.any(np.abs(sums - 1) > PROB_TOL))
    if truncated:
        if entropy is None:
            bad = int(np.argmax(np.abs(sums - 1)))
            raise BrwsimError(
                f"pool file {path!r}: row {bad} sums to {sums[bad]:.9g}, not 1; normalise the rows, "
                "or add 'entropy' and 'm2' arrays if they are top-K rows of larger distributions"
            )
        if np.any(sums > 1 + PROB_TOL):
            raise BrwsimError(f"pool file {path!r}: a row sums to more than 1")
    if entropy is None:
        p = np.exp(logp)
        safe = np.where(p > 0, logp, 0.0)
        entropy = -(p * safe).sum(1)
        m2 = (p * safe * safe).sum(1)
    if entropy.shape != (logp.shape[0],) or m2.shape != (logp.shape[0],):
        raise BrwsimError(f"pool file {path!r}: 'entropy' and 'm2' must have one value per row")
    logp = -np.sort(-logp, axis=1)
    return Pool(
        logp=jnp.asarray(logp, jnp.float32),
        entropy=jnp.asarray(entropy, jnp.float32),
        m2=jnp.asarray(m2, jnp.float32),
        truncated=truncated,
        path=path,
    )


def load_markov(path: str) -> Markov:
    """Read a Markov law from JSON or TOML (see :class:`Markov`)."""
    raw = _read_file(path, "Markov law")
    try:
        if path.lower().endswith(".toml"):
            cfg = tomllib.loads(raw.decode())
        else:
            cfg = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BrwsimError(f"Markov law file {path!r} does not parse: {str(e).splitlines()[0]}") from None
    return markov_law(cfg, path)


def markov_law(cfg: dict[str, Any], path: str = "<dict>") -> Markov:
    """Build a Markov law from an already-parsed config dictionary."""
    where = f"Markov law {path!r}"
    if not isinstance(cfg, dict):
        raise BrwsimError(f"{where}: expected a table with keys states, initial, kernel")
    extra = set(cfg) - {"states", "initial", "kernel", "description"}
    if extra:
        raise BrwsimError(f"{where}: unknown key(s) {', '.join(sorted(extra))}; use states, initial, kernel")
    for k in ("states", "initial", "kernel"):
        if k not in cfg:
            raise BrwsimError(f"{where}: missing key {k!r}")
    states = cfg["states"]
    if not isinstance(states, dict) or not states:
        raise BrwsimError(f"{where}: 'states' must map state names to law SPECs")
    names = tuple(states)
    laws = []
    for n in names:
        sub = states[n]
        if not isinstance(sub, str):
            raise BrwsimError(f"{where}: state {n!r} must be a law SPEC string")
        law = parse_law(sub)
        if isinstance(law, Markov):
            raise BrwsimError(f"{where}: state {n!r} may not itself be a Markov law")
        laws.append(law)
    S = len(names)
    init = cfg["initial"]
    if isinstance(init, str):
        if init not in names:
            raise BrwsimError(f"{where}: initial state {init!r} is not one of {list(names)}")
        init_p = np.array([1.0 if n == init else 0.0 for n in names])
    elif isinstance(init, dict):
        unknown = set(init) - set(names)
        if unknown:
            raise BrwsimError(f"{where}: initial names unknown state(s) {sorted(unknown)}")
        init_p = check_distribution([float(init.get(n, 0.0)) for n in names], f"{where}: initial")
    else:
        raise BrwsimError(f"{where}: 'initial' must be a state name or a name -> probability table")
    kernel = cfg["kernel"]
    if not isinstance(kernel, dict) or set(kernel) != set(names):
        raise BrwsimError(f"{where}: 'kernel' must have one entry per state: {list(names)}")
    R = max(len(kernel[n]) if isinstance(kernel[n], list) else 0 for n in names)
    if R < 1:
        raise BrwsimError(f"{where}: each kernel entry must be a non-empty list of rows")
    K = np.zeros((S, R, S))
    for si, n in enumerate(names):
        rows = kernel[n]
        if not isinstance(rows, list) or not rows:
            raise BrwsimError(f"{where}: kernel[{n!r}] must be a non-empty list of rows")
        for r in range(R):
            row = rows[min(r, len(rows) - 1)]
            if not isinstance(row, list) or len(row) != S:
                raise BrwsimError(f"{where}: kernel[{n!r}] row {r} must list {S} probabilities (one per state)")
            K[si, r] = check_distribution(row, f"{where}: kernel[{n!r}] row {r}")
    with np.errstate(divide="ignore"):
        return Markov(
            laws=tuple(laws),
            log_kernel=jnp.asarray(np.log(K), jnp.float32),
            log_init=jnp.asarray(np.log(init_p), jnp.float32),
            names=names,
            path=path,
        )


def law_spec(law: Law) -> str:
    """A SPEC string for a law (round-trips through :func:`parse_law`)."""
    if isinstance(law, Fixed):
        p = np.exp(np.asarray(law.logp, np.float64))
        return "fixed:probs=" + "/".join(f"{x:.9g}" for x in p)
    if isinstance(law, Dirichlet):
        return f"dirichlet:V={law.V},alpha={law.alpha:g}"
    if isinstance(law, LogitNormal):
        return f"logitnormal:V={law.V},sigma={law.sigma:g}"
    if isinstance(law, Zipf):
        extra = f",s_sd={law.s_sd:g}" if law.s_sd else ""
        return f"zipf:V={law.V},s={law.s:g}{extra}"
    if isinstance(law, Pool):
        return f"pool:path={law.path}"
    if isinstance(law, Markov):
        return f"markov:path={law.path}"
    raise TypeError(type(law))
