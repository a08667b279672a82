"""Exponential races (Kobus and Gunduz) on the realised tree.

Shared Exp(1) clocks E_x per position; the target's token is argmin E_x / p(x)
(an exact sample from p); the drafter ranks tokens by E_x / q(x). R = rank of
the target's token in the drafter's order. A draft tree is a set of R-paths;
the call accepts while the R-path of the target's tokens stays in the tree.
Their bound on tokens generated per call (accepted + the target's own):
(log V + log(k + 1)) / H[R].
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._keys import Stream, child_key, state_key, stream_key
from ..drafters import DraftLaw, bfs_order, greedy_tree, node_pq, tree_arrays
from ..laws import Law, rank_of
from ._rejection import _prep, batched, run_keys


def _race_node(lp, lq, clock_key):
    """(target's token, its rank R in the drafter's race order), shared Exp(1) clocks."""
    loge = jnp.log(jax.random.exponential(clock_key, lp.shape))
    tp = loge - lp  # log(E / p)
    x = jnp.argmin(tp)
    tq = loge - lq
    return x, jnp.sum(tq < tq[x]).astype(jnp.int32)


def race_one(law: Law, dlaw: DraftLaw, tree_key, walk_key, parents, ranks, D: int):
    """One ERSD call with the static race-rank tree (parents, ranks); D = its depth.

    Returns (accepted X, target tokens (target ranks) of positions 1..D+1, race ranks R of those positions).
    The target's token at every position is argmin E/p whatever happens to the draft.
    """
    s0 = law.init_state(state_key(tree_key))

    def step(carry, t):
        k, s, cur, alive, X = carry
        lp, lq = node_pq(law, dlaw, k, s)
        x, R = _race_node(lp, lq, jax.random.fold_in(walk_key, t))
        hit = (parents == cur) & (ranks == R)
        found = alive & jnp.any(hit)
        cur = jnp.where(found, jnp.argmax(hit).astype(jnp.int32), cur)
        rank = rank_of(lp, x)
        kc = child_key(k, rank)
        sc = law.child_state(state_key(kc), s, rank)
        return (kc, sc, cur, found, X + found.astype(jnp.int32)), (rank, R)

    init = (tree_key, s0, jnp.int32(-1), jnp.bool_(True), jnp.int32(0))
    (_, _, _, _, X), (toks, Rs) = jax.lax.scan(step, init, jnp.arange(D + 1))
    return X, toks, Rs


@partial(jax.jit, static_argnames=("D",))
def race_batch(law, dlaw, tree_keys, walk_keys, parents, ranks, D: int):
    return jax.vmap(lambda tk, wk: race_one(law, dlaw, tk, wk, parents, ranks, D))(tree_keys, walk_keys)


class Raced(NamedTuple):
    """Per run: accepted draft tokens ``X [runs]``; target tokens (target ranks) and race ranks R ``[runs, D+1]``."""

    X: np.ndarray
    token: np.ndarray
    R: np.ndarray


def race(key, law, dlaw, paths, runs: int, same_tree: bool = False) -> Raced:
    """ERSD calls with a draft tree of race-rank paths on ``runs`` trees of the run key (clocks: stream RACE)."""
    law, dlaw = _prep(law, dlaw)
    paths = bfs_order(paths)
    par, rk = (jnp.asarray(a) for a in tree_arrays(paths))
    D = max(len(p) for p in paths)
    tk, wk = run_keys(key, runs, Stream.RACE, same_tree)
    return Raced(*batched(partial(race_batch, law, dlaw, parents=par, ranks=rk, D=D), tk, wk, runs, law.vocab))


def race_rank_law(key, law, dlaw, samples: int = 20000) -> tuple[np.ndarray, float, float]:
    """Empirical law of R at tree roots: (pi [V], H[R] plug-in estimate in nats, its delta-method SE).

    The roots are those of a run key derived from ``key`` (stream ``RACE_RANKS``).
    """
    law, dlaw = _prep(law, dlaw)
    R = race(stream_key(key, Stream.RACE_RANKS), law, dlaw, [(0,)], runs=samples).R[:, 0]
    pi = np.bincount(R, minlength=law.vocab).astype(np.float64) / R.shape[0]
    logpi = np.log(pi[R])
    H = float(-logpi.mean())
    se = float(logpi.std(ddof=1) / math.sqrt(R.shape[0]))
    return pi, H, se


def optimal_race_tree(pi, k: int) -> list[tuple[int, ...]]:
    """Kobus and Gunduz's optimal drafting tree for i.i.d. R: the k R-paths of largest prod pi (greedy)."""
    return greedy_tree(np.maximum(np.asarray(pi, np.float64), 1e-300), k)[1]


def kobus_bound(V: int, k: int, H_R: float) -> float:
    """(log V + log(k + 1)) / H[R]: their bound on tokens generated per call (X + 1), large k."""
    return (math.log(V) + math.log(k + 1)) / H_R if H_R > 0 else math.inf
