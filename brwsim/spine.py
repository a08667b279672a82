"""Spine walks and the spine estimator (THEORY.md sections 4, 5(b), 5(b'), 5(e)).

A spine walk starts at the root and, at every node, moves to a child drawn
from the node's whole distribution ``p_u``: it is the target sampling its own
continuation. Its cumulative surprisal ``S_d = xi_1 + ... + xi_d``
(``xi = -log p_u(child)``) is the random walk of the many-to-one lemma:

    E[ sum_{v != root, V(v) <= t} P(v) ]   = sum_d Pr(S_d <= t)              = E[tau_t] - 1,
    E[ #{v != root : V(v) <= t} ]          = sum_d E[e^{S_d} 1{S_d <= t}]  = E[N(t)].

Neither identity needs independence between nodes, so the same walks serve
i.i.d. and Markov laws, and the real-LLM adapter (sampled continuations of a
model) through the law-free :func:`curves_from_xi`.

Two samplers:

* :func:`spine_batch` walks the *same* nodes as the oracle (node keys of
  :mod:`brwsim.tree`: ``dist_key``, ``state_key``, ``child_key``), a fixed
  depth, computing the full distribution at every node. Use it to couple a
  walk with a tree.
* :func:`sample_walks` is the fast estimator's sampler: independent walks,
  each stopped once its surprisal passes ``s_max`` (so the cost is a few steps
  per walk), a step costing O(log V) for fixed laws and pools and O(1) for
  i.i.d. Dirichlet (the chosen child's probability is Beta(alpha + 1,
  (V - 1) alpha): the size-biased pick), O(V) otherwise. A Markov law
  dispatches each walk to the sampler of its current state's law.

:class:`SpineCurves` turns walks into the curves ``t -> E[tau_t]`` and
``t -> E[N(t)]`` with standard errors, and into the splitting and dual bounds
minimised over ``s`` (see :mod:`brwsim.theory` and docs/theory.md).
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .errors import BrwsimError
from .laws import Dirichlet, Fixed, Law, Markov, Pool, Zipf, log_gamma_variates, log_moments
from .lowering import with_unrolled_threefry
from .tree import child_key, dist_key, state_key

# ---------------------------------------------------------------------------
# walks on the oracle's own tree (node-key scheme of brwsim.tree)


class Spine(NamedTuple):
    """Spine walks, each field ``[walks, depth]``.

    xi:    surprisal of the step into depth d + 1, -log p_u(child).
    H:     entropy of the distribution at the node left by that step.
    M2:    second log-moment of that distribution.
    rank:  rank of the chosen child (0 = most likely).
    state: hidden state of the node left by that step.
    """

    xi: jax.Array
    H: jax.Array
    M2: jax.Array
    rank: jax.Array
    state: jax.Array


def spine_one(law: Law, tree_key, walk_key, depth: int) -> Spine:
    """One walk of ``depth`` steps from the root of the tree with ``tree_key``."""
    s0 = law.init_state(state_key(tree_key))

    def step(carry, d):
        k, s = carry
        lp = law.full_logp(dist_key(k), s)
        c = jax.random.categorical(jax.random.fold_in(walk_key, d), lp)
        xi = -lp[c]
        # rank among the children: entries strictly more likely, plus equal ones
        # of smaller index (the order top_k uses for ties)
        idx = jnp.arange(lp.shape[0])
        rank = jnp.sum(lp > lp[c]) + jnp.sum((lp == lp[c]) & (idx < c))
        h, m2 = log_moments(lp)
        kc = child_key(k, rank)
        sc = law.child_state(state_key(kc), s, rank)
        return (kc, sc), (xi, h, m2, rank.astype(jnp.int32), s)

    _, out = jax.lax.scan(step, (tree_key, s0), jnp.arange(depth))
    return Spine(*out)


@partial(jax.jit, static_argnames=("depth",))
def spine_batch(law: Law, tree_keys, walk_keys, depth: int) -> Spine:
    return jax.vmap(lambda tk, wk: spine_one(law, tk, wk, depth))(tree_keys, walk_keys)


# ---------------------------------------------------------------------------
# fast independent walks


def _sub_laws(law: Law) -> tuple:
    return tuple(law.laws) if isinstance(law, Markov) else (law,)


def _needs_rank(law: Law) -> bool:
    """The child's rank matters only to a Markov kernel with more than one row."""
    return isinstance(law, Markov) and int(law.log_kernel.shape[1]) > 1


def _aux(sub: Law):
    """Per-law tables computed once on the host (cumulative probabilities)."""
    if isinstance(sub, Fixed) or (isinstance(sub, Zipf) and sub.s_sd == 0):
        lp = np.asarray(sub.node_logp(None, 0, sub.vocab), np.float64)
        return {"lp": jnp.asarray(lp, jnp.float32), "cdf": jnp.asarray(np.cumsum(np.exp(lp)), jnp.float32)}
    if isinstance(sub, Pool):
        lp = np.asarray(sub.logp, np.float64)
        cdf = np.cumsum(np.exp(lp), axis=1)
        with np.errstate(divide="ignore"):
            tail = -np.log(np.clip(1.0 - cdf[:, -1], 0.0, None))
        # a step into the unknown tail of a truncated row has probability at most
        # min(p_K, tail mass): surprisal at least this (a conservative stand-in)
        tail = np.maximum(tail, -lp[:, -1])
        return {"cdf": jnp.asarray(cdf, jnp.float32), "tail": jnp.asarray(tail, jnp.float32)}
    return {}


def _node_step(sub: Law, aux: dict, key, need_rank: bool, need_H: bool, exact: tuple[float, float] | None):
    """(xi, rank, H, M2) of one step from a fresh node of the i.i.d. law ``sub``.

    H, M2 are the node's entropy and second log-moment (NaN unless ``need_H``
    or known exactly for the law); the rank is 0 unless ``need_rank``.
    """
    k1, k2 = jax.random.split(key)
    if isinstance(sub, Fixed) or (isinstance(sub, Zipf) and sub.s_sd == 0):
        cdf = aux["cdf"]
        u = jax.random.uniform(k1) * cdf[-1]
        r = jnp.minimum(jnp.searchsorted(cdf, u, side="right"), cdf.shape[0] - 1)
        return -aux["lp"][r], r.astype(jnp.int32), jnp.float32(exact[0]), jnp.float32(exact[1])
    if isinstance(sub, Pool):
        row = jax.random.randint(k1, (), 0, sub.logp.shape[0])
        cdf = aux["cdf"][row]
        K = cdf.shape[0]
        u = jax.random.uniform(k2)
        r = jnp.searchsorted(cdf, u, side="right")
        if not sub.truncated:
            r = jnp.minimum(r, K - 1)
        xi = jnp.where(r < K, -sub.logp[row, jnp.minimum(r, K - 1)], aux["tail"][row])
        return xi, r.astype(jnp.int32), sub.entropy[row], sub.m2[row]
    if isinstance(sub, Dirichlet) and not need_rank:
        # (the node's own H is then replaced by its expectation, the law's mu)
        # size-biased pick: p_c ~ Beta(alpha + 1, (V - 1) alpha)
        lg1 = log_gamma_variates(k1, sub.alpha + 1.0, ())
        if sub.V > 1:
            lg2 = log_gamma_variates(k2, (sub.V - 1) * sub.alpha, ())
            xi = jnp.logaddexp(lg1, lg2) - lg1
        else:
            xi = jnp.float32(0.0)
        return xi, jnp.int32(0), jnp.float32(exact[0]), jnp.float32(exact[1])
    lp = sub.full_logp(k1, 0)
    # inverse-CDF draw of the child: one uniform instead of V Gumbels
    cdf = jnp.cumsum(jnp.exp(lp - jnp.max(lp)))
    c = jnp.minimum(jnp.searchsorted(cdf, jax.random.uniform(k2) * cdf[-1], side="right"), lp.shape[0] - 1)
    if need_rank:
        idx = jnp.arange(lp.shape[0])
        rank = (jnp.sum(lp > lp[c]) + jnp.sum((lp == lp[c]) & (idx < c))).astype(jnp.int32)
    else:
        rank = jnp.int32(0)
    if need_H:
        h, m2 = log_moments(lp)
    else:
        h = m2 = jnp.float32(jnp.nan)
    return -lp[c], rank, h, m2


@partial(jax.jit, static_argnames=("state", "need_rank", "need_H", "exact"))
def _step_batch(law: Law, aux: dict, base_key, walk_idx, depth, state: int, need_rank: bool, need_H: bool, exact):
    """One step of the walks ``walk_idx`` (all in hidden ``state``) at ``depth``."""
    sub = _sub_laws(law)[state]

    def one(i):
        k = jax.random.fold_in(jax.random.fold_in(base_key, i), depth)
        xi, r, h, m2 = _node_step(sub, aux, jax.random.fold_in(k, 0), need_rank, need_H, exact)
        s_next = law.child_state(jax.random.fold_in(k, 1), jnp.int32(state), r)
        return xi, r, h, m2, s_next

    return jax.vmap(one)(walk_idx)


@jax.jit
def _init_states(law: Law, base_key, walk_idx):
    return jax.vmap(lambda i: law.init_state(jax.random.fold_in(jax.random.fold_in(base_key, i), 2**31 - 1)))(walk_idx)


def _is_generic(sub: Law, need_rank: bool) -> bool:
    """True when a step of ``sub`` needs the node's whole distribution (O(V))."""
    cheap = isinstance(sub, (Fixed, Pool)) or (isinstance(sub, Zipf) and sub.s_sd == 0)
    return not (cheap or (isinstance(sub, Dirichlet) and not need_rank))


def _bucket(n: int, walks: int) -> int:
    """Pad batch sizes to walks / 8^k (>= 128) so a run compiles a few shapes only."""
    b = walks
    while b // 8 >= max(n, 128):
        b //= 8
    return b


@dataclasses.dataclass
class Walks:
    """Independent spine walks, arrays ``[walks, depth]`` (NaN after a walk stops).

    xi, H, M2, state as in :class:`Spine`; ``cover`` [walks] is the surprisal
    up to which the walk is fully observed (its S at the last step; +inf for
    a walk that ended).
    """

    xi: np.ndarray
    H: np.ndarray
    M2: np.ndarray
    state: np.ndarray
    cover: np.ndarray


@with_unrolled_threefry
def sample_walks(
    law: Law,
    walks: int,
    seed: int = 0,
    s_max: float = math.inf,
    depth: int | None = None,
    max_depth: int = 4000,
    stream: int = 5,
    need_H: bool = False,
) -> Walks:
    """Sample ``walks`` independent spine walks.

    A walk stops once ``S_d > s_max`` or at ``depth`` steps (``max_depth`` when
    ``depth`` is None); all stop when none of the walks still going has moved
    for 64 steps. Walk ``i`` uses the key ``fold_in(fold_in(key(seed),
    stream), i)``, so the result does not depend on how walks are batched.
    Steps are dispatched per hidden state, so a Markov law costs one state's
    law per step, not all of them. With ``need_H`` every node's entropy and
    second log-moment are recorded too (else NaN where not known exactly).
    """
    if walks < 2:
        raise BrwsimError(f"walks must be >= 2, got {walks}")
    D = max_depth if depth is None else int(depth)
    base = jax.random.fold_in(jax.random.key(seed), stream)
    subs = _sub_laws(law)
    auxes = [_aux(s) for s in subs]
    exacts = []
    for s in subs:
        ex = s.exact_moments()
        exacts.append(None if ex is None else (float(ex[0]), float(ex[1])))
    need_rank = _needs_rank(law)
    idx_all = np.arange(walks, dtype=np.uint32)
    state = np.asarray(_init_states(law, base, jnp.asarray(idx_all)), np.int32)
    S = np.zeros(walks)
    cols_xi, cols_h, cols_m2, cols_s = [], [], [], []
    active = np.arange(walks)
    stalled = 0
    for d in range(D):
        if active.size == 0:
            break
        xi_d = np.full(walks, np.nan)
        h_d = np.full(walks, np.nan)
        m2_d = np.full(walks, np.nan)
        s_d = np.full(walks, -1, np.int32)
        new_state = state.copy()
        for si in np.unique(state[active]):
            sel = active[state[active] == si]
            # cheap samplers run at one fixed batch shape (one compilation);
            # O(V) samplers shrink with the number of walks still going
            B = _bucket(sel.size, walks) if _is_generic(subs[si], need_rank) else walks
            pad = np.zeros(B, np.uint32)
            pad[: sel.size] = sel
            out = _step_batch(law, auxes[si], base, jnp.asarray(pad), d, int(si), need_rank, need_H, exacts[si])
            xi, _, h, m2, sn = (np.asarray(o)[: sel.size] for o in out)
            xi_d[sel] = xi
            h_d[sel] = h
            m2_d[sel] = m2
            s_d[sel] = si
            new_state[sel] = sn
        cols_xi.append(xi_d)
        cols_h.append(h_d)
        cols_m2.append(m2_d)
        cols_s.append(s_d)
        S_before = S[active].copy()
        S[active] += xi_d[active]
        stalled = stalled + 1 if np.array_equal(S_before, S[active]) else 0
        state = new_state
        active = active[S[active] <= s_max]
        if stalled >= 64:
            # no active walk has moved for 64 steps (certain tokens, e.g. a
            # zero-entropy law): stop; the walks' coverage records where
            break
    cover = S.copy()
    return Walks(
        xi=np.stack(cols_xi, 1) if cols_xi else np.zeros((walks, 0)),
        H=np.stack(cols_h, 1) if cols_h else np.zeros((walks, 0)),
        M2=np.stack(cols_m2, 1) if cols_m2 else np.zeros((walks, 0)),
        state=np.stack(cols_s, 1) if cols_s else np.zeros((walks, 0), np.int32),
        cover=cover,
    )


# ---------------------------------------------------------------------------
# the curves t -> E[tau_t], E[N(t)] and the bounds minimised over s


@dataclasses.dataclass
class BoundResult:
    """A bound minimised over s: ``upper = estimate + z * se`` at the chosen s."""

    upper: float
    estimate: float
    se: float
    s: float


class SpineCurves:
    """Many-to-one curves from spine walks, exact step functions of t.

    Let ``C_i(t) = #{d >= 1 : S_{i,d} <= t}`` and ``N_i(t) = sum_d e^{S_{i,d}}
    1{S_{i,d} <= t}`` for walk ``i``. Then ``E[tau_t] - 1 = E[C(t)]`` and
    ``E[N(t)] = E[N_i(t)]``; both are estimated by means over walks, with
    standard errors from the spread over walks (walks are independent). A
    walk is observed up to ``cover_i``; the curves are valid for
    ``t < coverage = min_i cover_i``.

    Internally every point ``S_{i,d}`` carries the increments of ``C_i``,
    ``N_i``, ``C_i^2``, ``C_i N_i`` and ``N_i^2`` (a walk's points come in
    increasing order, so these depend only on the walk's own earlier points);
    cumulative sums over all points sorted by value give every mean and
    variance at once.
    """

    def __init__(self, xi, cover=None, s_cap: float | None = None):
        xi = np.asarray(xi, np.float64)
        if xi.ndim != 2 or xi.shape[0] < 2:
            raise BrwsimError(f"xi must be a [walks, depth] array with at least 2 walks, got shape {xi.shape}")
        if np.any(xi[np.isfinite(xi)] < 0):
            raise BrwsimError("xi must hold surprisals -log p >= 0 (NaN for 'walk ended')")
        if np.any(np.isinf(xi)):
            raise BrwsimError("xi must be finite surprisals or NaN (a probability-0 step cannot be sampled)")
        n, D = xi.shape
        ended = ~np.isfinite(xi)
        ended = np.cumsum(ended, axis=1) > 0  # NaN: the walk ended, all later steps too
        x = np.where(ended, 0.0, xi)
        S = np.cumsum(x, axis=1)
        if cover is None:
            cover = np.where(ended[:, -1], np.inf, S[:, -1]) if D else np.zeros(n)
        cover = np.asarray(cover, np.float64)
        self.walks = n
        self.coverage = float(cover.min()) if n else 0.0
        lim = self.coverage if s_cap is None else min(self.coverage, s_cap)
        self.limit = lim
        keep = ~ended & (S <= lim)
        d = np.broadcast_to(np.arange(1, D + 1, dtype=np.float64), S.shape)
        with np.errstate(over="ignore"):
            e = np.where(keep, np.exp(np.where(keep, S, 0.0)), 0.0)
        N_prev = np.cumsum(e, axis=1) - e
        v = S[keep]
        order = np.argsort(v, kind="stable")
        self._v = v[order]
        dC = np.ones_like(self._v)
        dN = e[keep][order]
        dC2 = (2 * d - 1)[keep][order]
        dCN = (N_prev + d * e)[keep][order]
        dN2 = (2 * N_prev * e + e * e)[keep][order]
        zero = np.zeros(1)
        self._cum = [np.concatenate([zero, np.cumsum(a)]) / n for a in (dC, dN, dC2, dCN, dN2)]

    # means and variances of C(t) and N(t) at given positions of the sorted points
    def _at(self, pos):
        C, N, C2, CN, N2 = (c[pos] for c in self._cum)
        return C, N, C2, CN, N2

    def _check_t(self, t):
        t = np.asarray(t, np.float64)
        if np.any(t >= self.coverage):
            raise BrwsimError(f"t must be below the walks' coverage {self.coverage:.4g} (sample longer walks)")
        if self.limit < self.coverage and np.any(t > self.limit):
            raise BrwsimError(f"t must be <= {self.limit:.4g}, the cap these curves were built with")
        return t

    def tau(self, t):
        """(E[tau_t], se) for an array of t (right-continuous in t)."""
        t = self._check_t(t)
        C, _, C2, _, _ = self._at(np.searchsorted(self._v, t, side="right"))
        return 1.0 + C, np.sqrt(np.maximum(C2 - C * C, 0.0) / self.walks)

    def N(self, t):
        """(E[N(t)], se): mean number of non-root nodes with V(v) <= t."""
        t = self._check_t(t)
        _, N, _, _, N2 = self._at(np.searchsorted(self._v, t, side="right"))
        return N, np.sqrt(np.maximum(N2 - N * N, 0.0) / self.walks)

    def threshold_curve(self, t):
        """The threshold tree {V <= t}: (E[N(t)], se, E[sum P(v) over it], se) per t.

        By the many-to-one lemma the second is E[tau_t] - 1. Reading the first
        against the second traces the value of threshold trees against their
        mean size, for sizes far beyond what a tree simulation can reach.
        """
        N, N_se = self.N(t)
        tau, tau_se = self.tau(t)
        return N, N_se, tau - 1.0, tau_se

    def _candidates(self):
        """Left limits at every distinct point value u in (0, limit], and at the limit itself.

        The cumulative sums up to ``pos`` (exclusive) are the left limits at
        ``u``. An infinite limit (every walk ended) contributes s = +inf.
        """
        v = self._v
        first = np.ones(v.size, bool)
        first[1:] = v[1:] != v[:-1]
        pos = np.nonzero(first & (v > 0))[0]
        u = v[pos]
        if self.limit > 0 and (v.size == 0 or self.limit > v[-1]):
            u = np.append(u, self.limit)
            pos = np.append(pos, np.searchsorted(v, self.limit, side="left"))
        return u, pos

    def splitting(self, P: float, z: float = 1.96) -> BoundResult:
        """THEORY 5(b): min over s of E[tau_s] - 1 + P e^-s, at left limits, + z se.

        g(s) jumps up at every atom of S and decreases in between, so its
        infimum over s is approached from the left of a point; s -> 0^-
        gives the trivial value P.
        """
        u, pos = self._candidates()
        C, _, C2, _, _ = self._at(pos)
        est = C + P * np.exp(-u)
        se = np.sqrt(np.maximum(C2 - C * C, 0.0) / self.walks)
        return self._pick(u, est, se, P, z)

    def dual(self, P: float, z: float = 1.96) -> BoundResult:
        """THEORY 5(b'): min over s of E[tau_s] - 1 + e^-s (P - E[N(s)]), + z se.

        Per walk the summand C_i(s) - e^-s N_i(s) + e^-s P is continuous in s
        (a point at u adds 1 to C_i and e^u to N_i) and monotone between
        points, so the minimum is attained at a point value: evaluating at
        left limits is exact, atoms included.
        """
        u, pos = self._candidates()
        C, N, C2, CN, N2 = self._at(pos)
        a = np.exp(-u)
        est = C - a * N + a * P
        var = (C2 - 2 * a * CN + a * a * N2) - (C - a * N) ** 2
        se = np.sqrt(np.maximum(var, 0.0) / self.walks)
        return self._pick(u, est, se, P, z)

    @staticmethod
    def _pick(u, est, se, P, z) -> BoundResult:
        best = BoundResult(upper=float(P), estimate=float(P), se=0.0, s=0.0)  # s -> 0^-: the trivial bound
        if u.size:
            up = est + z * se
            i = int(np.argmin(up))
            if up[i] < best.upper:
                best = BoundResult(upper=float(up[i]), estimate=float(est[i]), se=float(se[i]), s=float(u[i]))
        return best


def curves_from_xi(xi, cover=None, P_max: float | None = None) -> SpineCurves:
    """Law-free curves from per-step surprisals ``xi`` [walks, depth] (NaN = ended)."""
    cap = None if P_max is None else math.log(max(P_max, 1.0)) + 60.0
    return SpineCurves(xi, cover=cover, s_cap=cap)


def law_curves(law: Law, P_max: float, walks: int = 8192, seed: int = 0, mu_hint: float | None = None) -> SpineCurves:
    """Spine curves of a law, walks run until S > ln(mu P_max) + 3 (or 4000 steps).

    Both bounds are minimised near s = ln(mu P) (docs/theory.md), well inside.
    """
    mu = mu_hint if mu_hint and mu_hint > 0 else 1.0
    s_max = max(math.log(mu * P_max), 0.0) + 3.0
    w = sample_walks(law, walks, seed=seed, s_max=s_max)
    return SpineCurves(w.xi, cover=w.cover)


# ---------------------------------------------------------------------------
# Markov laws: stationary moments along the spine


def _state_samples(sub: Law, R: int, samples: int, key):
    """Per-sample rank masses [M, R] (ranks 0..R-2, then the rest), H [M], M2 [M] of law ``sub``.

    Deterministic laws give one exact row. Where the law has exact moments
    they replace the per-sample H and M2 (same mean, no variance).
    """
    ex = sub.exact_moments()
    K = max(R - 1, 1)
    if sub.deterministic:
        lp = np.asarray(sub.node_logp(key, 0, sub.vocab), np.float64)
        p = np.exp(lp)
        top = np.concatenate([p, np.zeros(max(0, K - p.size))])[: R - 1]
        safe = np.where(p > 0, lp, 0.0)
        h, m2 = ex if ex is not None else (float(-(p * safe).sum()), float((p * safe * safe).sum()))
        return np.concatenate([top, [max(0.0, 1 - top.sum())]])[None], np.array([h]), np.array([m2])
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(samples, dtype=jnp.uint32))

    def one(k):
        lp = sub.full_logp(k, 0)
        h, m2 = log_moments(lp)
        return jax.lax.top_k(lp, K)[0], h, m2

    top, h, m2 = (np.asarray(x, np.float64) for x in jax.jit(jax.vmap(one))(keys))
    top = np.exp(top)[:, : R - 1]
    masses = np.concatenate([top, np.clip(1 - top.sum(1, keepdims=True), 0, None)], axis=1)
    if ex is not None:
        h, m2 = np.full(samples, ex[0]), np.full(samples, ex[1])
    return masses, h, m2


def _stationary_pi(Q: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eig(Q.T)
    i = int(np.argmin(np.abs(vals - 1)))
    pi = np.abs(np.real(vecs[:, i]))
    return pi / pi.sum()


def stationary(law: Law, samples: int = 2048, seed: int = 0, boot: int = 200) -> dict:
    """The spine's hidden-state chain and its stationary (long-run) moments.

    Along the spine, the next child of a node in state s has rank r with
    probability p_(r) (its r-th largest entry), so the spine's states form a
    Markov chain with Q[s, s'] = sum_r E_s[p_(r)] K[s, r, s'] (ranks >= R - 1
    share the kernel's last row). A node's distribution is drawn afresh
    given its state, so the long-run mean of H along the spine is
    mu = sum_s pi_s mu_s (likewise mu_2), pi the stationary law of Q.
    E_s[p_(r)], mu_s, mu2_s come from ``samples`` draws per state (exact for
    deterministic laws and where closed forms exist); standard errors by a
    ``boot``-fold bootstrap over those draws.

    Returns ``{"Q", "pi", "pi_se", "mu", "mu2", "mu_se", "mu2_se",
    "mu_s", "mu2_s"}`` (arrays indexed by state).
    """
    subs = _sub_laws(law)
    if isinstance(law, Markov):
        Kern = np.exp(np.asarray(law.log_kernel, np.float64))  # [S, R, S]
    else:
        Kern = np.ones((1, 1, 1))
    S, R, _ = Kern.shape
    base = jax.random.fold_in(jax.random.key(seed), 6)
    data = [_state_samples(sub, R, samples, jax.random.fold_in(base, i)) for i, sub in enumerate(subs)]

    def solve(rows):
        Q = np.stack([rows[s][0] @ Kern[s] for s in range(S)])
        pi = _stationary_pi(Q)
        mus = np.array([r[1] for r in rows])
        mu2s = np.array([r[2] for r in rows])
        return Q, pi, float(pi @ mus), float(pi @ mu2s), mus, mu2s

    Q, pi, mu, mu2, mus, mu2s = solve([(m.mean(0), h.mean(), m2.mean()) for m, h, m2 in data])
    rng = np.random.default_rng(seed)
    bs = []
    for _ in range(boot):
        rows = []
        for m, h, m2 in data:
            j = rng.integers(0, h.size, h.size)
            rows.append((m[j].mean(0), h[j].mean(), m2[j].mean()))
        _, pb, mb, m2b, _, _ = solve(rows)
        bs.append(np.concatenate([pb, [mb, m2b]]))
    bs = np.array(bs)
    sd = bs.std(0, ddof=1)
    return {
        "Q": Q,
        "pi": pi,
        "pi_se": sd[:S],
        "mu": mu,
        "mu2": mu2,
        "mu_se": float(sd[S]),
        "mu2_se": float(sd[S + 1]),
        "mu_s": mus,
        "mu2_s": mu2s,
    }


def spine_moments(law: Law, seed: int = 0, samples: int = 2048):
    """Long-run (stationary) mean entropy and second log-moment along the spine.

    Computed through the spine's state chain (:func:`stationary`): cheap and
    with bootstrap standard errors. ``per_state`` gives, for every state, its
    long-run fraction along the spine and its own law's mu and mu_2.
    :func:`spine_moments_walks` is the direct (slower) estimate from walks;
    the tests check that the two agree.
    """
    from .theory import Moments

    st = stationary(law, samples=samples, seed=seed)
    per_state = {}
    for i, name in enumerate(law.state_names()):
        per_state[name] = {
            "fraction": float(st["pi"][i]),
            "fraction_se": float(st["pi_se"][i]),
            "mu": float(st["mu_s"][i]),
            "mu2": float(st["mu2_s"][i]),
            "exact": _sub_laws(law)[i].exact_moments() is not None,
        }
    return Moments(mu=st["mu"], mu2=st["mu2"], mu_se=st["mu_se"], mu2_se=st["mu2_se"], exact=False, per_state=per_state)


def spine_moments_walks(law: Law, seed: int = 0, walks: int = 2048, depth: int = 48, burn: int = 16):
    """Long-run mean H and M2 along ``walks`` spine walks, depths ``burn .. depth - 1``.

    The standard error treats each walk's average as one observation.
    Returns (mu, mu_se, mu2, mu2_se, state fractions).
    """
    w = sample_walks(law, walks, seed=seed, depth=depth, stream=3, need_H=True)
    H, M2, st = w.H[:, burn:], w.M2[:, burn:], w.state[:, burn:]
    h_w, m_w = H.mean(1), M2.mean(1)
    frac = np.array([(st == i).mean() for i in range(law.n_states)])
    n = math.sqrt(walks)
    return float(h_w.mean()), float(h_w.std(ddof=1) / n), float(m_w.mean()), float(m_w.std(ddof=1) / n), frac
