"""Independent spine walks: the target sampling its own continuation, a few steps per walk.

A spine walk starts at the root and moves, at every node, to a child drawn
from the node's whole distribution ``p_u`` (docs/theory.md, "The spine").
Each step is one call of the law's :meth:`~brwsim.laws.Law.spine_step`:
O(log V) for fixed laws and pools, O(1) for an i.i.d. Dirichlet (the size-
biased pick), O(V) otherwise. A Markov law dispatches each walk to the step
of its current state's law, so a step costs one state's law, not all of them.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .._keys import INIT_TAG, Stream, stream_key
from .._lowering import with_unrolled_threefry
from ..errors import BrwsimError
from ..laws import Law, pick, stack_laws


@partial(jax.jit, static_argnames=("state", "need_rank", "need_H", "exact"))
def _step_batch(law: Law, tables: dict, base_key, walk_idx, depth, state: int, need_rank: bool, need_H: bool, exact):
    """One step of the walks ``walk_idx`` (all in hidden ``state``) at ``depth``: (xi, rank, H, M2, next state)."""
    sub = law.sub_laws()[state]

    def one(i):
        k = jax.random.fold_in(jax.random.fold_in(base_key, i), depth)
        xi, r, h, m2 = sub.spine_step(tables, jax.random.fold_in(k, 0), need_rank, need_H, exact)
        s_next = law.child_state(jax.random.fold_in(k, 1), jnp.int32(state), r)
        return xi, r, h, m2, s_next

    return jax.vmap(one)(walk_idx)


@partial(jax.jit, static_argnames=("need_rank", "need_H"))
def _step_kind(law: Law, kind, exact, base_key, walk_idx, pos, states, depth, need_rank: bool, need_H: bool):
    """:func:`_step_batch` of a Markov law's walks in states of one kind (:func:`brwsim.laws.stack_laws`): walk
    ``walk_idx[j]`` in state ``states[j]``, item ``pos[j]`` of the stacked (law, tables) ``kind`` and of ``exact``
    (``[n, 2]``, or None). One compilation for any number of states of that kind."""

    def one(i, p, s):
        k = jax.random.fold_in(jax.random.fold_in(base_key, i), depth)
        sub, tables = pick(kind, p)
        ex = None if exact is None else (exact[p, 0], exact[p, 1])
        xi, r, h, m2 = sub.spine_step(tables, jax.random.fold_in(k, 0), need_rank, need_H, ex)
        s_next = law.child_state(jax.random.fold_in(k, 1), s, r)
        return xi, r, h, m2, s_next

    return jax.vmap(one)(walk_idx, pos, states)


@partial(jax.jit, static_argnames=("need_rank", "need_H", "exact"))
def _step_block(law: Law, tables: dict, base_key, walk_idx, depths, need_rank: bool, need_H: bool, exact):
    """:func:`_step_batch` of an i.i.d. law at several depths in one call, ``[depths, walks]``: the same keys, so
    the same bits, as one call a depth (a peaked law's walks take many tiny steps: this saves a dispatch each)."""
    return jax.vmap(lambda d: _step_batch(law, tables, base_key, walk_idx, d, 0, need_rank, need_H, exact))(depths)


@jax.jit
def _init_states(law: Law, base_key, walk_idx):
    return jax.vmap(lambda i: law.init_state(jax.random.fold_in(jax.random.fold_in(base_key, i), INIT_TAG)))(walk_idx)


BLOCK = 32  # depths a call for an i.i.d. law with a cheap step
POINTS_MAX = 2**22  # walks x steps of one run of walks, by default: 512 steps of 8192 walks, about 0.7 GB at most
COSTLY_STEP_BYTES = 2**28  # an O(V) step's rows per call: 256 MB at most
COSTLY_STEP_ROW = 48  # bytes a token and walk of an O(V) step (measured: up to 42 for a Dirichlet step with ranks)


def _bucket(n: int, walks: int) -> int:
    """Pad batch sizes to walks / 8^k (>= 128) so a run compiles a few shapes only."""
    b = walks
    while b // 8 >= max(n, 128):
        b //= 8
    return b


@dataclasses.dataclass
class Walks:
    """Independent spine walks, arrays ``[walks, depth]`` (NaN after a walk stops).

    xi:    surprisal of the step into depth d + 1, -log p_u(child).
    H, M2: entropy and second log-moment of the node left by that step.
    state: hidden state of that node (-1 after the walk stopped).
    cover: ``[walks]``, the surprisal up to which the walk is fully observed
           (its S at the last step; +inf for a walk that ended).
    """

    xi: np.ndarray
    H: np.ndarray
    M2: np.ndarray
    state: np.ndarray
    cover: np.ndarray


class _Stepper:
    """One depth of every active walk, dispatched per hidden state."""

    def __init__(self, law: Law, base, walks: int, need_H: bool):
        self.law, self.base, self.walks, self.need_H = law, base, walks, need_H
        self.subs = law.sub_laws()
        self.tables = [s.spine_tables() for s in self.subs]
        self.exact = [None if (ex := s.exact_moments()) is None else (float(ex[0]), float(ex[1])) for s in self.subs]
        self.need_rank = law.spine_needs_rank
        # an i.i.d. law with a cheap step, past depth BLOCK: BLOCK depths of every walk a call (stopped walks dropped)
        self.blocked = len(self.subs) == 1 and law.is_iid and not self.subs[0].costly_spine_step(self.need_rank)
        self.block: tuple = (None, None)
        if not law.is_iid:  # a Markov law: its states stacked by kind, one compiled step per kind (any S)
            self.kinds, self.kind, self.pos = stack_laws(self.subs, extra=lambda sub: sub.spine_tables())
            self.kind_exact = []
            for g in range(len(self.kinds)):
                ex = [self.exact[i] for i in np.nonzero(self.kind == g)[0]]
                self.kind_exact.append(None if any(e is None for e in ex) else jnp.asarray(ex, jnp.float32))

    def _from_block(self, d: int, state: np.ndarray, active: np.ndarray):
        first, res = self.block
        if first is None or not first <= d < first + BLOCK:
            first = d
            idx, depths = jnp.arange(self.walks, dtype=jnp.uint32), jnp.arange(d, d + BLOCK)
            res = _step_block(self.law, self.tables[0], self.base, idx, depths, self.need_rank, self.need_H,
                              self.exact[0])  # fmt: skip
            res = [np.asarray(o) for o in res]
            self.block = (first, res)
        xi, _, h, m2, sn = (o[d - first] for o in res)
        out = np.full((3, self.walks), np.nan)
        out[0, active], out[1, active], out[2, active] = xi[active], h[active], m2[active]
        s_d = np.full(self.walks, -1, np.int32)
        s_d[active] = 0
        new_state = state.copy()
        new_state[active] = sn[active]
        return out[0], out[1], out[2], s_d, new_state

    def _batch(self, every: np.ndarray, si: int) -> int:
        """Walks a call for ``every`` (walks in states like ``si``): cheap steps run at one fixed batch shape (one
        compilation); O(V) steps shrink with the number of walks still going, and run in chunks of at most
        COSTLY_STEP_BYTES of rows (bounded memory at any V)."""
        if not self.subs[si].costly_spine_step(self.need_rank):
            return self.walks
        return min(
            _bucket(every.size, self.walks), max(1, COSTLY_STEP_BYTES // (COSTLY_STEP_ROW * self.subs[si].vocab))
        )

    def _markov(self, d: int, state: np.ndarray, active: np.ndarray):
        out = np.full((3, self.walks), np.nan)
        s_d = np.full(self.walks, -1, np.int32)
        new_state = state.copy()
        kind_of = self.kind[state[active]]
        for g in np.unique(kind_of):
            every = active[kind_of == g]
            members = np.nonzero(self.kind == g)[0]
            B = min(self._batch(every, int(si)) for si in members)
            for lo in range(0, every.size, B):
                sel = every[lo : lo + B]
                idx, st = np.zeros(B, np.uint32), np.full(B, members[0], np.int32)
                idx[: sel.size], st[: sel.size] = sel, state[sel]
                res = _step_kind(
                    self.law, self.kinds[g], self.kind_exact[g], self.base, jnp.asarray(idx),
                    jnp.asarray(self.pos[st]), jnp.asarray(st), d, self.need_rank, self.need_H,
                )  # fmt: skip
                xi, _, h, m2, sn = (np.asarray(o)[: sel.size] for o in res)
                out[0, sel], out[1, sel], out[2, sel] = xi, h, m2
                s_d[sel] = state[sel]
                new_state[sel] = sn
        return out[0], out[1], out[2], s_d, new_state

    def __call__(self, d: int, state: np.ndarray, active: np.ndarray):
        """(xi, H, M2, state of the node left, next states), each ``[walks]``, at depth ``d``."""
        if self.blocked and d >= BLOCK:  # walks still going after BLOCK steps take tiny steps: go on in blocks
            return self._from_block(d, state, active)
        if not self.law.is_iid:
            return self._markov(d, state, active)
        out = np.full((3, self.walks), np.nan)
        s_d = np.full(self.walks, -1, np.int32)
        new_state = state.copy()
        for si in np.unique(state[active]):
            every = active[state[active] == si]
            # cheap steps run at one fixed batch shape (one compilation); O(V) steps shrink with the number of
            # walks still going, and run in chunks of at most COSTLY_STEP_BYTES of rows (bounded memory at any V)
            costly = self.subs[si].costly_spine_step(self.need_rank)
            B = _bucket(every.size, self.walks) if costly else self.walks
            if costly:
                B = min(B, max(1, COSTLY_STEP_BYTES // (COSTLY_STEP_ROW * self.subs[si].vocab)))
            for lo in range(0, every.size, B):
                sel = every[lo : lo + B]
                pad = np.zeros(B, np.uint32)
                pad[: sel.size] = sel
                res = _step_batch(
                    self.law, self.tables[si], self.base, jnp.asarray(pad), d, int(si), self.need_rank, self.need_H,
                    self.exact[si],
                )  # fmt: skip
                xi, _, h, m2, sn = (np.asarray(o)[: sel.size] for o in res)
                out[0, sel], out[1, sel], out[2, sel] = xi, h, m2
                s_d[sel] = si
                new_state[sel] = sn
        return out[0], out[1], out[2], s_d, new_state


@with_unrolled_threefry
def sample_walks(
    key,
    law: Law,
    walks: int,
    s_max: float = math.inf,
    depth: int | None = None,
    max_depth: int = 4000,
    stream: Stream = Stream.SPINE,
    need_H: bool = False,
) -> Walks:
    """``walks`` independent spine walks of the run with key ``key`` (walk i's key: item i of ``stream``).

    A walk stops once ``S_d > s_max`` or at ``depth`` steps (``max_depth`` when
    ``depth`` is None); all stop when none of the walks still going has moved
    for 64 steps (certain tokens, e.g. a zero-entropy law). The result does
    not depend on how walks are batched. With ``need_H`` every node's entropy
    and second log-moment are recorded (else NaN where not known exactly).
    """
    if walks < 2:
        raise BrwsimError(f"walks must be >= 2, got {walks}")
    # a law whose steps are tiny (a peaked law: 1e-4 nats a step) would walk max_depth steps: the points kept
    # (walks x steps, ~150 bytes each in the curves) are capped at POINTS_MAX; the curves then end earlier
    D = min(max_depth, max(64, POINTS_MAX // walks)) if depth is None else int(depth)
    base = stream_key(key, stream)
    step = _Stepper(law, base, walks, need_H)
    state = np.asarray(_init_states(law, base, jnp.asarray(np.arange(walks, dtype=np.uint32))), np.int32)
    S = np.zeros(walks)
    cols: list[tuple] = []
    active = np.arange(walks)
    stalled = 0
    for d in range(D):
        if active.size == 0:
            break
        xi_d, h_d, m2_d, s_d, state = step(d, state, active)
        cols.append((xi_d, h_d, m2_d, s_d))
        S_before = S[active].copy()
        S[active] += xi_d[active]
        stalled = stalled + 1 if np.array_equal(S_before, S[active]) else 0
        active = active[S[active] <= s_max]
        if stalled >= 64:  # no active walk has moved for 64 steps: stop; ``cover`` records where
            break
    return _collect(cols, walks, S.copy())


def _collect(cols: list[tuple], walks: int, cover: np.ndarray) -> Walks:
    if not cols:
        empty = np.zeros((walks, 0))
        return Walks(xi=empty, H=empty, M2=empty, state=np.zeros((walks, 0), np.int32), cover=cover)
    xi, H, M2, st = (np.stack(c, 1) for c in zip(*cols, strict=True))
    return Walks(xi=xi, H=H, M2=M2, state=st, cover=cover)
