"""Stochastic verification on the realised tree (THEORY.md section 6; docs/drafters.md).

All schemes here output *exactly* the target's distribution; they differ in
how many drafted tokens they get accepted. Node ``u`` has the target's
``p_u`` and the drafter's ``q_u`` (:func:`brwsim.draftlaws.node_pq`); a token
``x`` of target rank ``i`` leads to the child with key ``child_key(k_u, i)``.
Tokens are reported by their target rank (0 = the target's most likely).
Drafting is simulated lazily: only draft tokens on the path the output takes
can matter, and a drafted token whose prefix is on that path is, given that
path, a fresh draw from ``q`` at its node; so drawing it when the path gets
there has exactly the right joint law.

Speculative sampling with recursive rejection (Leviathan et al.; Chen et
al.; SpecInfer's multi-draft verification; Yin et al.'s batch variant)
    A draft *shape* ``widths = (w_1, ..., w_G)``: every drafted node at depth
    d - 1 of the call (the root for d = 1) gets ``w_d`` children drawn i.i.d.
    from ``q``. Drafted tokens per call: ``sum_d w_1 ... w_d``. Sequence of k:
    ``(1,) * k``; Yin et al.'s batch of M chains of length L:
    ``(M,) + (1,) * (L - 1)``; a SpecInfer-style tree: any other widths.
    Verification at a node with m candidates x_1..x_m ~ q i.i.d.: residual
    r_0 = p; candidate j is accepted with probability min(1, r_{j-1}(x_j) /
    q(x_j)), else r_j = (r_{j-1} - q)^+ / Z. The first accepted x is output
    and the walk goes on with the candidates equal to x (their drafted
    children); if all m are rejected a token is drawn from r_m (a
    *rejection*); with no candidate left the target's own token is drawn from
    p (a *bonus*). Either ends the verifier call.

Exponential races (Kobus and Gunduz)
    Shared Exp(1) clocks E_x per position; the target's token is
    argmin E_x / p(x) (an exact sample from p); the drafter ranks tokens by
    E_x / q(x). R = rank of the target's token in the drafter's order. A
    draft tree is a set of R-paths; the call accepts while the R-path of the
    target's tokens stays in the tree. Their bound on tokens generated per
    call (accepted + the target's own): (log V + log(k + 1)) / H[R].
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .draftlaws import DraftLaw, node_pq, parse_draft_law, target_rank
from .errors import BrwsimError, check_positive_int
from .laws import Law, parse_law
from .tree import child_key, state_key

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
        rank = target_rank(lp, tok)
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


def _keys(seed: int, runs: int, stream: int, same_tree: bool):
    from .estimate import tree_keys

    if same_tree:
        tk = tree_keys(seed, 0, 1)[jnp.zeros((runs,), jnp.int32)]
    else:
        tk = tree_keys(seed, 0, runs)
    return tk, tree_keys(seed, 0, runs, stream=stream)


def _prep(law, dlaw):
    law = parse_law(law)
    dlaw = parse_draft_law(dlaw)
    dlaw.check(law)
    return law, dlaw


def _chunks(runs: int, V: int, width: int = 1):
    B = int(max(1, min(runs, 2**24 // max(V * width, 1))))
    return [(s, min(B, runs - s), B) for s in range(0, runs, B)]


def generate(law, dlaw, widths, T: int, runs: int, seed: int = 0, same_tree: bool = False) -> dict:
    """Run :func:`generate_one` on ``runs`` trees; numpy arrays ``[runs, T]`` per field.

    With ``same_tree`` every run uses tree 0 of the seed (for
    exactness tests); otherwise run n uses tree n of the seed (as the oracle).
    """
    law, dlaw = _prep(law, dlaw)
    widths = tuple(int(x) for x in widths)
    if not widths or min(widths) < 1:
        raise BrwsimError(f"draft shape must be a non-empty list of widths >= 1, got {widths}")
    T = check_positive_int("T", T)
    tk, wk = _keys(seed, runs, 7, same_tree)
    outs = []
    for s, n, B in _chunks(runs, law.vocab, max_candidates(widths)):
        tks, wks = tk[s : s + B], wk[s : s + B]
        if tks.shape[0] < B:  # pad so every chunk has one shape (one compilation)
            pad = B - tks.shape[0]
            tks = jnp.concatenate([tks, tks[:pad]])
            wks = jnp.concatenate([wks, wks[:pad]])
        o = generate_batch(law, dlaw, tks, wks, T=T, widths=widths)
        outs.append([np.asarray(a)[:n] for a in o])
    names = ("token", "event", "tv", "verified")
    return {nm: np.concatenate([o[i] for o in outs]) for i, nm in enumerate(names)}


def first_call_accepted(events: np.ndarray) -> np.ndarray:
    """Accepted draft tokens X of the first verifier call of each run (leading ACCEPT events)."""
    notacc = events != ACCEPT
    return np.where(notacc.any(axis=1), notacc.argmax(axis=1), events.shape[1])


def call_accepted(law, dlaw, widths, runs: int, seed: int = 0) -> np.ndarray:
    """Per-run accepted draft tokens X of one verifier call with this draft shape."""
    g = generate(law, dlaw, widths, T=len(widths) + 1, runs=runs, seed=seed)
    return first_call_accepted(g["event"])


def rejection_identity(law, dlaw, widths, T: int, runs: int, seed: int = 0) -> dict:
    """Rejections over T generated tokens against summed TV(p_u, q_u) along the output.

    Yin et al.: for a single draft chain, E[#rejections] = E[sum over verified
    positions of TV] (with a chain of length >= T every position is verified,
    which is their statement). Returns Stats: ``rejections``, ``tv_verified``,
    ``tv_all``, ``difference`` (rejections - tv_verified, paired per run).
    """
    from .estimate import Stat

    g = generate(law, dlaw, widths, T=T, runs=runs, seed=seed)
    rej = (g["event"] == REJECT).sum(axis=1).astype(np.float64)
    tv_ver = (g["tv"] * g["verified"]).sum(axis=1).astype(np.float64)
    tv_all = g["tv"].sum(axis=1).astype(np.float64)
    return {
        "rejections": Stat.of(rej),
        "tv_verified": Stat.of(tv_ver),
        "tv_all": Stat.of(tv_all),
        "difference": Stat.of(rej - tv_ver),
    }


# ---------------------------------------------------------------------------
# exponential races


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
        rank = target_rank(lp, x)
        kc = child_key(k, rank)
        sc = law.child_state(state_key(kc), s, rank)
        return (kc, sc, cur, found, X + found.astype(jnp.int32)), (rank, R)

    init = (tree_key, s0, jnp.int32(-1), jnp.bool_(True), jnp.int32(0))
    (_, _, _, _, X), (toks, Rs) = jax.lax.scan(step, init, jnp.arange(D + 1))
    return X, toks, Rs


@partial(jax.jit, static_argnames=("D",))
def race_batch(law, dlaw, tree_keys, walk_keys, parents, ranks, D: int):
    return jax.vmap(lambda tk, wk: race_one(law, dlaw, tk, wk, parents, ranks, D))(tree_keys, walk_keys)


def race(law, dlaw, paths, runs: int, seed: int = 0, same_tree: bool = False) -> dict:
    """ERSD calls with a draft tree of race-rank paths; numpy ``X [runs]``, ``token``/``R [runs, D+1]``."""
    from .drafters import bfs_order, tree_arrays

    law, dlaw = _prep(law, dlaw)
    paths = bfs_order(paths)
    par, rk = tree_arrays(paths)
    D = max(len(p) for p in paths)
    tk, wk = _keys(seed, runs, 8, same_tree)
    outs = []
    for s, n, B in _chunks(runs, law.vocab):
        tks, wks = tk[s : s + B], wk[s : s + B]
        if tks.shape[0] < B:
            pad = B - tks.shape[0]
            tks = jnp.concatenate([tks, tks[:pad]])
            wks = jnp.concatenate([wks, wks[:pad]])
        o = race_batch(law, dlaw, tks, wks, jnp.asarray(par), jnp.asarray(rk), D=D)
        outs.append([np.asarray(a)[:n] for a in o])
    return {nm: np.concatenate([o[i] for o in outs]) for i, nm in enumerate(("X", "token", "R"))}


def race_rank_law(law, dlaw, samples: int = 20000, seed: int = 0) -> tuple[np.ndarray, float, float]:
    """Empirical law of R at tree roots: (pi [V], H[R] plug-in estimate in nats, its delta-method SE)."""
    law, dlaw = _prep(law, dlaw)
    out = race(law, dlaw, [(0,)], runs=samples, seed=seed + 1000003)
    R = out["R"][:, 0]
    pi = np.bincount(R, minlength=law.vocab).astype(np.float64) / R.shape[0]
    logpi = np.log(pi[R])
    H = float(-logpi.mean())
    se = float(logpi.std(ddof=1) / math.sqrt(R.shape[0]))
    return pi, H, se


def optimal_race_tree(pi, k: int) -> list[tuple[int, ...]]:
    """Kobus and Gunduz's optimal drafting tree for i.i.d. R: the k R-paths of largest prod pi (greedy)."""
    from .drafters import greedy_tree

    return greedy_tree(np.maximum(np.asarray(pi, np.float64), 1e-300), k)[1]


def kobus_bound(V: int, k: int, H_R: float) -> float:
    """(log V + log(k + 1)) / H[R]: their bound on tokens generated per call (X + 1), large k."""
    return (math.log(V) + math.log(k + 1)) / H_R if H_R > 0 else math.inf


# ---------------------------------------------------------------------------
# exact reference distributions for tests


def exact_pair_law(law, tree_key) -> np.ndarray:
    """Target's law of its first two tokens (target ranks) on one tree: ``[V, V]`` probabilities."""
    from .laws import topk_sorted

    law = parse_law(law)
    V = law.vocab
    s0 = law.init_state(state_key(tree_key))
    from .tree import dist_key

    lp0 = topk_sorted(law.full_logp(dist_key(tree_key), s0), V)
    out = np.zeros((V, V))
    for a in range(V):
        kc = child_key(tree_key, a)
        sc = law.child_state(state_key(kc), s0, a)
        lp1 = topk_sorted(law.full_logp(dist_key(kc), sc), V)
        out[a] = np.exp(np.asarray(lp0[a], np.float64) + np.asarray(lp1, np.float64))
    return out
