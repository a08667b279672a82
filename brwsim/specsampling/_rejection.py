"""Speculative sampling with recursive rejection on the realised tree (docs/drafters.md, "Stochastic verification").

Every scheme here outputs *exactly* the target's distribution; they differ in
how many drafted tokens get accepted. Node ``u`` has the target's ``p_u`` and
the drafter's ``q_u`` (:func:`brwsim.drafters.node_pq`); a token of target
rank ``i`` leads to the child with key ``child_key(k_u, i)``. Tokens are
reported by their target rank. Drafting is simulated lazily: only draft
tokens on the path the output takes can matter, and a drafted token whose
prefix is on that path is, given that path, a fresh draw from ``q`` at its
node; so drawing it when the path gets there has exactly the right joint law.

A draft *shape* ``widths = (w_1, ..., w_G)``: every drafted node at depth
d - 1 of the call (the root for d = 1) gets ``w_d`` children drawn i.i.d.
from ``q``. Drafted tokens per call: ``sum_d w_1 ... w_d``. Sequence of k:
``(1,) * k``; Yin et al.'s batch of M chains of length L:
``(M,) + (1,) * (L - 1)``; a SpecInfer-style tree: any other widths.
Verification at a node with m candidates x_1..x_m ~ q i.i.d.: residual
r_0 = p; candidate j is accepted with probability min(1, r_{j-1}(x_j) /
q(x_j)), else r_j = (r_{j-1} - q)^+ / Z. The first accepted x is output and
the walk goes on with the candidates equal to x (their drafted children); if
all m are rejected a token is drawn from r_m (a *rejection*); with no
candidate left the target's own token is drawn from p (a *bonus*). Either
ends the verifier call.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._keys import Stream, child_key, state_key, tree_keys
from .._stats import Stat
from ..drafters import DraftLaw, node_pq, parse_draft_law
from ..errors import BrwsimError, check_positive_int
from ..laws import Law, parse_law, rank_of

ACCEPT, REJECT, BONUS = 0, 1, 2


# ---------------------------------------------------------------------------
# draft shapes


def drafted_count(widths) -> int:
    """Drafted tokens per call of a shape: sum over d of w_1 ... w_d."""
    return int(sum(math.prod(widths[: d + 1]) for d in range(len(widths))))


def max_candidates(widths) -> int:
    return int(max(math.prod(widths[: d + 1]) for d in range(len(widths))))


def shape(scheme: str, k: int) -> tuple[int, ...]:
    """The draft shape of ``sequence``, ``batch`` (min(4, k) chains) or ``tree`` for k drafted tokens.

    ``tree``: two i.i.d. candidates at depths 1 and 3, one elsewhere:
    k = 1: (1); 2: (2); 4: (2, 1); k = 8 + 4n: (2, 1, 2) + (1,) * n.
    """
    k = check_positive_int("drafted tokens k", k)
    if scheme == "sequence":
        return (1,) * k
    if scheme == "batch":
        M = min(4, k)
        if k % M:
            raise BrwsimError(f"batch drafting with {M} chains needs k divisible by {M}, got k={k}")
        return (M,) + (1,) * (k // M - 1)
    if scheme == "tree":
        fixed = {1: (1,), 2: (2,), 4: (2, 1)}
        if k in fixed:
            return fixed[k]
        if k >= 8 and (k - 8) % 4 == 0:
            return (2, 1, 2) + (1,) * ((k - 8) // 4)
        raise BrwsimError(f"tree drafting is defined for k = 1, 2, 4, 8, 12, 16, ...; got k={k}")
    raise BrwsimError(f"unknown scheme {scheme!r}; use sequence, batch or tree")


# ---------------------------------------------------------------------------
# recursive rejection sampling at one node


def rrs(key, lp, lq, m, M: int):
    """Verify m (<= M, static bound) i.i.d. candidates from q against p.

    Returns (accepted: bool, token, count of candidates equal to it, final residual log-probs).
    """
    p = jnp.exp(lp)
    q = jnp.exp(lq)

    def body(carry, j):
        r, acc, x = carry
        kx, ku = jax.random.split(jax.random.fold_in(key, j))
        xj = jax.random.categorical(kx, lq)
        active = (j < m) & ~acc
        ratio = r[xj] / jnp.maximum(q[xj], 1e-30)
        ok = active & (jax.random.uniform(ku) < ratio)
        res = jnp.maximum(r - q, 0.0)
        z = jnp.sum(res)
        res = jnp.where(z > 0, res / jnp.where(z > 0, z, 1.0), r)
        r = jnp.where(active & ~ok, res, r)
        return (r, acc | ok, jnp.where(ok, xj, x)), xj

    (r, acc, x), xs = jax.lax.scan(body, (p, jnp.bool_(False), jnp.int32(0)), jnp.arange(M))
    count = jnp.sum((jnp.arange(M) < m) & (xs == x))
    return acc, x, count, jnp.log(r)


# ---------------------------------------------------------------------------
# generation with speculative sampling


def generate_one(law: Law, dlaw: DraftLaw, tree_key, walk_key, T: int, widths: tuple[int, ...]):
    """Generate T tokens from the root with speculative sampling of the given draft shape.

    Returns per position: token (target rank), event (ACCEPT / REJECT / BONUS),
    tv = TV(p_u, q_u) at the node, verified (a draft was checked there).
    """
    G = len(widths)
    M = max_candidates(widths)
    w = jnp.asarray(tuple(widths) + (0,), jnp.int32)

    def step(carry, t):
        k, s, m, d = carry
        lp, lq = node_pq(law, dlaw, k, s)
        tv = 0.5 * jnp.sum(jnp.abs(jnp.exp(lp) - jnp.exp(lq)))
        kt = jax.random.fold_in(walk_key, t)
        kv, kr, kb = jax.random.split(kt, 3)
        acc, x, count, lr = rrs(kv, lp, lq, m, M)
        verified = m > 0
        y = jnp.where(verified, jax.random.categorical(kr, lr), jax.random.categorical(kb, lp))
        accepted = verified & acc
        tok = jnp.where(accepted, x, y)
        event = jnp.where(accepted, ACCEPT, jnp.where(verified, REJECT, BONUS))
        d_next = jnp.where(accepted, d + 1, 0)
        m_next = jnp.where(accepted, count * w[jnp.minimum(d + 1, G)], w[0])
        rank = rank_of(lp, tok)
        kc = child_key(k, rank)
        sc = law.child_state(state_key(kc), s, rank)
        return (kc, sc, m_next, d_next), (rank, event, tv, verified)

    s0 = law.init_state(state_key(tree_key))
    init = (tree_key, s0, w[0], jnp.int32(0))
    _, out = jax.lax.scan(step, init, jnp.arange(T))
    return out


@partial(jax.jit, static_argnames=("T", "widths"))
def generate_batch(law, dlaw, tree_keys, walk_keys, T: int, widths: tuple[int, ...]):
    return jax.vmap(lambda tk, wk: generate_one(law, dlaw, tk, wk, T, widths))(tree_keys, walk_keys)


class Generated(NamedTuple):
    """Per run and position ``[runs, T]``: the output token (target rank), the event (ACCEPT / REJECT /
    BONUS), TV(p_u, q_u) at the node, and whether a draft was verified there."""

    token: np.ndarray
    event: np.ndarray
    tv: np.ndarray
    verified: np.ndarray


def run_keys(key, runs: int, stream: Stream, same_tree: bool):
    """(tree keys, walk keys) of ``runs`` runs: run n on tree n of the run key (tree 0 for all with
    ``same_tree``), its own randomness from ``stream``."""
    if same_tree:
        tk = tree_keys(key, 0, 1)[jnp.zeros((runs,), jnp.int32)]
    else:
        tk = tree_keys(key, 0, runs)
    return tk, tree_keys(key, 0, runs, stream=stream)


def _prep(law, dlaw):
    law = parse_law(law)
    dlaw = parse_draft_law(dlaw)
    dlaw.check(law)
    return law, dlaw


def batched(f, tk, wk, runs: int, V: int, width: int = 1) -> list[np.ndarray]:
    """``f(tree keys, walk keys) -> tuple of [B, ...]`` over all runs in chunks of one shape, concatenated.

    A chunk holds at most 2**24 values (runs x V x width), so at most that many runs; the last chunk is
    padded with repeats of its own runs (their outputs are dropped)."""
    B = int(max(1, min(runs, 2**24 // max(V * width, 1))))
    outs = []
    for s in range(0, runs, B):
        n = min(B, runs - s)
        tks, wks = tk[s : s + B], wk[s : s + B]
        if n < B:  # pad with repeats of its runs so every chunk has one shape (one compilation)
            reps = -(-B // n)
            tks = jnp.concatenate([tks] * reps)[:B]
            wks = jnp.concatenate([wks] * reps)[:B]
        outs.append([np.asarray(a)[:n] for a in f(tks, wks)])
    return [np.concatenate([o[i] for o in outs]) for i in range(len(outs[0]))]


def generate(key, law, dlaw, widths, T: int, runs: int, same_tree: bool = False) -> Generated:
    """Run :func:`generate_one` on ``runs`` trees of the run key (run n on tree n, as the oracle).

    With ``same_tree`` every run uses tree 0 (for exactness tests).
    """
    law, dlaw = _prep(law, dlaw)
    widths = tuple(int(x) for x in widths)
    if not widths or min(widths) < 1:
        raise BrwsimError(f"draft shape must be a non-empty list of widths >= 1, got {widths}")
    T = check_positive_int("T", T)
    tk, wk = run_keys(key, runs, Stream.GENERATE, same_tree)
    f = partial(generate_batch, law, dlaw, T=T, widths=widths)
    return Generated(*batched(f, tk, wk, runs, law.vocab, max_candidates(widths)))


def first_call_accepted(events: np.ndarray) -> np.ndarray:
    """Accepted draft tokens X of the first verifier call of each run (leading ACCEPT events)."""
    notacc = events != ACCEPT
    return np.where(notacc.any(axis=1), notacc.argmax(axis=1), events.shape[1])


def call_accepted(key, law, dlaw, widths, runs: int) -> np.ndarray:
    """Per-run accepted draft tokens X of one verifier call with this draft shape."""
    return first_call_accepted(generate(key, law, dlaw, widths, T=len(widths) + 1, runs=runs).event)


class RejectionIdentity(NamedTuple):
    """Rejections over T tokens, summed TV at verified positions and at all, and their paired difference."""

    rejections: Stat
    tv_verified: Stat
    tv_all: Stat
    difference: Stat


def rejection_identity(key, law, dlaw, widths, T: int, runs: int) -> RejectionIdentity:
    """Rejections over T generated tokens against summed TV(p_u, q_u) along the output.

    Yin et al.: for a single draft chain, E[#rejections] = E[sum over verified
    positions of TV] (with a chain of length >= T every position is verified,
    which is their statement).
    """
    g = generate(key, law, dlaw, widths, T=T, runs=runs)
    rej = (g.event == REJECT).sum(axis=1).astype(np.float64)
    tv_ver = (g.tv * g.verified).sum(axis=1).astype(np.float64)
    tv_all = g.tv.sum(axis=1).astype(np.float64)
    return RejectionIdentity(Stat.of(rej), Stat.of(tv_ver), Stat.of(tv_all), Stat.of(rej - tv_ver))
