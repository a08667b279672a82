"""Markov laws: the spine's hidden-state chain and its long-run (stationary) moments.

Along the spine, the next child of a node in state s has rank r with
probability p_(r) (its r-th largest entry), so the spine's states form a
Markov chain with Q[s, s'] = sum_r E_s[p_(r)] K[s, r, s'] (ranks >= R - 1
share the kernel's last row), started from the law's ``initial``. A node's
distribution is drawn afresh given its state, so the long-run mean of H along
the spine is mu = sum_s pi_s mu_s (likewise mu_2), pi the long-run (Cesaro)
law of the chain from ``initial`` (docs/theory.md, "Markov laws").
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import NamedTuple

import jax
import numpy as np

from .._keys import Stream, stream_key
from .._moments import Moments, StateMoments, entropy_moments
from .._stats import sample_chunks
from ..laws import Law
from ._walks import sample_walks


@dataclasses.dataclass(frozen=True)
class StationaryChain:
    """The spine's state chain: Q ``[S, S]``, its long-run law pi ``[S]`` (with bootstrap SEs), the long-run
    moments mu, mu2 (with SEs) and every state's own moments ``mu_s``, ``mu2_s`` ``[S]``."""

    Q: np.ndarray
    pi: np.ndarray
    pi_se: np.ndarray
    mu: float
    mu2: float
    mu_se: float
    mu2_se: float
    mu_s: np.ndarray
    mu2_s: np.ndarray


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
        h, m2 = ex if ex is not None else (float(x) for x in entropy_moments(lp))
        return np.concatenate([top, [max(0.0, 1 - top.sum())]])[None], np.array([h]), np.array([m2])

    # the law's numeric parameters as data (the same float32 rows): states of one kind share one compilation
    top, h, m2 = sample_chunks(partial(_state_rows, sub.with_data_params(), K=K), key, samples, sub.vocab)
    top = np.exp(top)[:, : R - 1]
    masses = np.concatenate([top, np.clip(1 - top.sum(1, keepdims=True), 0, None)], axis=1)
    if ex is not None:
        h, m2 = np.full(samples, ex[0]), np.full(samples, ex[1])
    return masses, h, m2


@partial(jax.jit, static_argnames=("K",))
def _state_rows(sub: Law, keys, K: int):
    """Each key's node of law ``sub``: its K largest probabilities' logs, H and M2 (one compilation per kind of
    law, shared by the states of a Markov law that have one)."""

    def one(k):
        lp = sub.full_logp(k, 0)
        h, m2 = entropy_moments(lp)
        return jax.lax.top_k(lp, K)[0], h, m2

    return jax.vmap(one)(keys)


def _stationary_pi(Q: np.ndarray) -> np.ndarray:
    """The stationary law of an irreducible stochastic matrix (its left eigenvector for eigenvalue 1)."""
    vals, vecs = np.linalg.eig(Q.T)
    i = int(np.argmin(np.abs(vals - 1)))
    pi = np.abs(np.real(vecs[:, i]))
    return pi / pi.sum()


def _closed_classes(Q: np.ndarray) -> list[np.ndarray]:
    """The closed communicating classes of a stochastic matrix (states no path leaves), as index arrays."""
    S = Q.shape[0]
    reach = (Q > 0) | np.eye(S, dtype=bool)
    for k in range(S):  # transitive closure (Warshall)
        reach |= reach[:, k : k + 1] & reach[k : k + 1, :]
    classes, seen = [], set()
    for i in range(S):
        cls = np.nonzero(reach[i] & reach[:, i])[0]
        if i not in seen and not (reach[i] & ~np.isin(np.arange(S), cls)).any():
            classes.append(cls)
        seen.update(cls.tolist())
    return classes


def long_run_law(Q: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """The Cesaro limit of ``initial @ Q^k``: the long-run fraction of time in each state, started from ``initial``.

    Defined for every stochastic matrix, reducible or periodic (docs/theory.md,
    "Markov laws"): the chain ends in one of the closed classes C with the
    probability a_C that it is absorbed there, and then spends the fractions
    pi_C of C's stationary law in its states; so the limit is sum_C a_C pi_C.
    For an irreducible chain it is the stationary law, whatever ``initial``.
    """
    classes = _closed_classes(Q)
    if len(classes) == 1 and classes[0].size == Q.shape[0]:  # irreducible
        return _stationary_pi(Q)
    closed = np.concatenate(classes)
    transient = np.setdiff1d(np.arange(Q.shape[0]), closed)
    absorb = np.zeros((Q.shape[0], len(classes)))  # Pr(absorbed in class c | start in state s)
    for c, cls in enumerate(classes):
        absorb[cls, c] = 1.0
    if transient.size:
        into = np.stack([Q[np.ix_(transient, cls)].sum(1) for cls in classes], axis=1)
        absorb[transient] = np.linalg.solve(np.eye(transient.size) - Q[np.ix_(transient, transient)], into)
    a = initial @ absorb
    out = np.zeros(Q.shape[0])
    for c, cls in enumerate(classes):
        out[cls] += a[c] * _stationary_pi(Q[np.ix_(cls, cls)])
    return out


def _solve(kernel: np.ndarray, initial: np.ndarray, rows):
    """(Q, pi, mu, mu2, mu_s, mu2_s) from each state's (mean rank masses, mean H, mean M2)."""
    S = kernel.shape[0]
    Q = np.stack([rows[s][0] @ kernel[s] for s in range(S)])
    pi = long_run_law(Q, initial)
    mus = np.array([r[1] for r in rows])
    mu2s = np.array([r[2] for r in rows])
    return Q, pi, float(pi @ mus), float(pi @ mu2s), mus, mu2s


def stationary(key, law: Law, samples: int = 2048, boot: int = 200) -> StationaryChain:
    """The spine's state chain of a law and its long-run moments, from the run key ``key``.

    E_s[p_(r)], mu_s, mu2_s come from ``samples`` draws per state (exact for
    deterministic laws and where closed forms exist); standard errors by a
    ``boot``-fold bootstrap over those draws.
    """
    kernel = law.state_kernel()  # [S, R, S]
    R = kernel.shape[1]
    base = stream_key(key, Stream.STATIONARY)
    data = [_state_samples(sub, R, samples, jax.random.fold_in(base, i)) for i, sub in enumerate(law.sub_laws())]
    initial = law.initial_probs()
    Q, pi, mu, mu2, mus, mu2s = _solve(kernel, initial, [(m.mean(0), h.mean(), m2.mean()) for m, h, m2 in data])
    S = kernel.shape[0]
    if boot >= 2 and all(h.size == 1 for _, h, _ in data):  # every row exact: no spread (a resample is S^3 work)
        return StationaryChain(Q, pi, np.zeros(S), mu, mu2, 0.0, 0.0, mus, mu2s)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(stream_key(key, Stream.BOOTSTRAP))))
    bs = []
    for _ in range(boot):
        rows = []
        for m, h, m2 in data:
            j = rng.integers(0, h.size, h.size)
            rows.append((m[j].mean(0), h[j].mean(), m2[j].mean()))
        _, pb, mb, m2b, _, _ = _solve(kernel, initial, rows)
        bs.append(np.concatenate([pb, [mb, m2b]]))
    sd = np.array(bs).std(0, ddof=1)
    return StationaryChain(Q, pi, sd[:S], mu, mu2, float(sd[S]), float(sd[S + 1]), mus, mu2s)


def spine_moments(key, law: Law, samples: int = 2048) -> Moments:
    """Long-run (stationary) mean entropy and second log-moment along the spine, with every state's share.

    Computed through the spine's state chain (:func:`stationary`): cheap and
    with bootstrap standard errors. :func:`spine_moments_walks` is the direct
    (slower) estimate from walks; the tests check that the two agree.
    """
    st = stationary(key, law, samples=samples)
    per_state = {
        name: StateMoments(
            fraction=float(st.pi[i]),
            fraction_se=float(st.pi_se[i]),
            mu=float(st.mu_s[i]),
            mu2=float(st.mu2_s[i]),
            exact=sub.exact_moments() is not None,
        )
        for i, (name, sub) in enumerate(zip(law.state_names(), law.sub_laws(), strict=True))
    }
    return Moments(mu=st.mu, mu2=st.mu2, mu_se=st.mu_se, mu2_se=st.mu2_se, exact=False, per_state=per_state)


class WalkMoments(NamedTuple):
    """Long-run moments averaged along spine walks, with standard errors, and each state's share of the nodes."""

    mu: float
    mu_se: float
    mu2: float
    mu2_se: float
    fractions: np.ndarray


def spine_moments_walks(key, law: Law, walks: int = 2048, depth: int = 48, burn: int = 16) -> WalkMoments:
    """Long-run mean H and M2 along ``walks`` spine walks, depths ``burn .. depth - 1``.

    The standard error treats each walk's average as one observation.
    """
    w = sample_walks(key, law, walks, depth=depth, stream=Stream.SPINE_DIRECT, need_H=True)
    H, M2, st = w.H[:, burn:], w.M2[:, burn:], w.state[:, burn:]
    h_w, m_w = H.mean(1), M2.mean(1)
    frac = np.array([(st == i).mean() for i in range(law.n_states)])
    n = math.sqrt(walks)
    return WalkMoments(
        float(h_w.mean()), float(h_w.std(ddof=1) / n), float(m_w.mean()), float(m_w.std(ddof=1) / n), frac
    )
