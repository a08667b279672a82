"""The batched oracle kernel: best-first search for a whole batch of trees at once.

Exactly the trees of :func:`brwsim.oracle.oracle_one` (same nodes, order and
tie-breaks), for ``B`` trees in one XLA program. One loop step takes one node
in every tree, in named steps (:func:`_step`):

1. the frontier's largest candidate and its slot: the parent (:mod:`._frontier`);
2. read the parent's record (one gather, :mod:`._records`) and its next sibling's log-prob;
3. draw the new node: key, hidden state, distribution (:class:`_Draws`);
4. the parent's next child replaces it in the frontier;
5. the new node's best child enters the frontier at slot ``n = i + 1`` and its
   record is written there: the same slot for every tree, so these writes are
   dynamic-update-slices, not scatters.

Node distributions: an indexed law (``law.indexed``) keeps only a row index
per node (its row of ``law.row_table(K)``); a drawn law keeps each node's
``Kc <= K`` largest sorted entries in a slot-major ``[S, B, Kc]`` table, and
``dropped[b]`` bounds the path log-prob of every child that was not kept.

Performance notes (docs/scaling.md): every value written is tied to every
per-tree read by a float zero (:func:`_zero_of`), without which XLA cannot
prove the reads precede the in-place writes and copies whole arrays each
step; node keys use the hand-unrolled threefry fold.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._lowering import threefry_fold_in_words
from ..laws import Law
from ..tree import DraftTree
from . import _frontier as frontier
from ._records import DEPTH, POINTER, ROW, STATE, Layout

NEG_INF = -jnp.inf
f32, i32 = jnp.float32, jnp.int32


def tail_bound(d: jax.Array, V: int) -> jax.Array:
    """An upper bound on log p of every entry past the ``Kc`` kept ones of sorted rows ``d [..., Kc]``.

    The entries past the top ``Kc`` are each at most ``p[Kc - 1]`` and sum to
    at most ``1 - sum(p[:Kc])``; ``slack`` covers float32 rounding of the
    normalisation (and a user distribution's 1e-6 tolerance).
    """
    slack = 2e-6 + 2.4e-7 * (V + d.shape[-1])
    tail = jnp.maximum(1.0 - jnp.sum(jnp.exp(d), axis=-1), 0.0) + slack
    return jnp.minimum(d[..., -1], jnp.log(tail))


def _zero_of(x: jax.Array) -> jax.Array:
    """0.0 of x's shape that XLA cannot fold away (so it carries a data dependency on x)."""
    return jnp.isnan(x).astype(jnp.float32) * 0.0


class _Draws:
    """Node keys and node draws for a batch of ``B`` trees (built while tracing).

    Keys travel as tuples of ``[B]`` word arrays; ``fold(words, data)`` is
    ``fold_in`` on them (the unrolled threefry for threefry keys). ``draw``
    gives a node's row index (indexed law) or its ``Kc`` sorted log-probs.
    """

    def __init__(self, law: Law, tree_keys, Kc: int):
        self.law, self.Kc = law, Kc
        self.B = tree_keys.shape[0]
        self.impl = jax.random.key_impl(tree_keys)
        self.root_data = jax.random.key_data(tree_keys)  # [B, *key_shape]
        self.key_shape = self.root_data.shape[1:]
        self.layout = Layout(math.prod(self.key_shape), self.root_data.dtype)
        self.indexed = law.indexed
        self.table = law.row_table(Kc).astype(f32) if law.indexed else None  # [N, Kc]
        self.unrolled = str(self.impl) == "threefry2x32" and self.key_shape == (2,)

    def key_of(self, words):
        return jax.random.wrap_key_data(jnp.stack(words, axis=-1).reshape((self.B,) + self.key_shape), impl=self.impl)

    def fold(self, words, data):
        if self.unrolled:
            return threefry_fold_in_words(words[0], words[1], data)
        kd = jax.random.key_data(jax.vmap(jax.random.fold_in)(self.key_of(words), jnp.broadcast_to(data, (self.B,))))
        kd = kd.reshape(self.B, self.layout.key_words)
        return tuple(kd[:, w] for w in range(self.layout.key_words))

    def draw(self, words, state):
        keys = self.key_of(self.fold(words, 0))
        if self.indexed:
            return jax.vmap(self.law.node_row)(keys, state).astype(i32)
        return jax.vmap(lambda k, s: self.law.node_logp(k, s, self.Kc))(keys, state).astype(f32)

    def first(self, d):
        """The best child's log-prob of nodes with draws ``d``."""
        return self.table[d, 0] if self.indexed else d[:, 0]

    def root(self):
        """(key words, state, draw) of every tree's root."""
        words = tuple(self.root_data.reshape(self.B, self.layout.key_words)[:, w] for w in range(self.layout.key_words))
        s0 = jax.vmap(self.law.init_state)(self.key_of(self.fold(words, 1))).astype(i32)
        return words, s0, self.draw(words, s0)

    def child(self, parent_words, parent_state, rank):
        """(key words, state, draw) of each tree's child of given rank."""
        kw = self.fold(parent_words, 2 + rank)
        sn = jax.vmap(self.law.child_state)(self.key_of(self.fold(kw, 1)), parent_state, rank).astype(i32)
        return kw, sn, self.draw(kw, sn)


class _Carry(NamedTuple):
    """The loop state: frontier, records ``[S, B, width]``, ranks ``[S, B]``, a drawn law's node table
    ``[S, B, Kc]`` and tail bounds ``[S, B]``, and ``dropped [B]``."""

    fr: frontier.Frontier
    rec: jax.Array
    rank: jax.Array
    tab: jax.Array | None
    tail: jax.Array | None
    dropped: jax.Array


def scratch_arrays(S: int, B: int, width: int, Kc: int | None) -> tuple:
    """Fresh buffers for the records (and, for a drawn law, the node table) of ``B`` trees of ``S`` slots."""
    rec = jnp.zeros((S, B, width), jnp.int32)
    return (rec,) if Kc is None else (rec, jnp.zeros((S, B, Kc), jnp.float32))


def _next_sibling(d: _Draws, c: _Carry, parent, j, b_ix, trunc: bool):
    """(rank taken, parent's log P, log-prob of the parent's next child, updated ``dropped``)."""
    r = parent[:, POINTER]
    plp = d.layout.logp(parent)
    r1 = r + 1
    rc = jnp.minimum(r1, d.Kc - 1)
    nxt = d.table[parent[:, ROW], rc] if d.indexed else c.tab[j, b_ix, rc]
    nxt = jnp.where(r1 < d.Kc, nxt, NEG_INF)
    dropped = c.dropped
    if trunc:  # the parent's kept children run out: bound every child past them
        bound = plp + jnp.minimum(c.tab[j, b_ix, d.Kc - 1], c.tail[j, b_ix])
        dropped = jnp.where(r1 >= d.Kc, jnp.maximum(dropped, bound), dropped)
    return r, plp, nxt, dropped


def _step(n, c: _Carry, d: _Draws, shape: frontier.Shape, V: int, trunc: bool) -> _Carry:
    """Take node ``n`` of every tree (slot ``n``): the steps listed in the module docstring."""
    b_ix = jnp.arange(d.B, dtype=i32)
    top = frontier.top(c.fr, shape)
    parent = c.rec[top.index, b_ix]  # [B, width]: one gather
    r, plp, nxt, dropped = _next_sibling(d, c, parent, top.index, b_ix, trunc)
    kw, sn, dn = d.child(d.layout.keys(parent), parent[:, STATE], r)
    # Tie every value written below to every per-tree read above: without a
    # data dependency XLA cannot prove the reads happen before the in-place
    # writes and copies whole arrays every step (an optimization_barrier does
    # not do it; a float zero does).
    zero = _zero_of(nxt) + _zero_of(plp) + (_zero_of(dropped) if trunc else 0.0)
    m = top.value + zero
    fr = frontier.replace(c.fr, top, plp + nxt)
    rec = c.rec.at[top.index, b_ix, POINTER].set(r + 1, unique_indices=True)
    if d.indexed:
        cn = m + d.first(dn)
    else:
        dn = dn + zero[:, None]
        cn = m + dn[:, 0]
    fr = frontier.insert(fr, shape, n, cn)
    zeros = jnp.zeros((d.B,), i32)
    new = d.layout.pack(m, parent[:, DEPTH] + 1, sn, dn if d.indexed else zeros, zeros, kw, top.index - 1)
    rec = jax.lax.dynamic_update_slice(rec, new[None], (n, 0, 0))
    rank = jax.lax.dynamic_update_slice(c.rank, r[None], (n, 0))
    tab, tail = c.tab, c.tail
    if not d.indexed:
        tab = jax.lax.dynamic_update_slice(tab, dn[None], (n, 0, 0))
        if trunc:
            tail = jax.lax.dynamic_update_slice(tail, tail_bound(dn, V)[None], (n, 0))
    return _Carry(fr, rec, rank, tab, tail, dropped)


def _init(d: _Draws, scratch, S: int, V: int, trunc: bool, shape: frontier.Shape) -> _Carry:
    """The loop state with every tree's root in slot 0."""
    words, s0, d0 = d.root()
    if scratch is None:
        scratch = scratch_arrays(S, d.B, d.layout.width, None if d.indexed else d.Kc)
    zeros = jnp.zeros((d.B,), i32)
    root = d.layout.pack(zeros, zeros, s0, d0 if d.indexed else zeros, zeros, words, jnp.full((d.B,), -1, i32))
    return _Carry(
        fr=frontier.init(shape, d.first(d0)),
        rec=scratch[0].at[0].set(root),
        rank=jnp.zeros((S, d.B), i32),
        tab=None if d.indexed else scratch[1].at[0].set(d0),
        tail=jnp.full((S, d.B), NEG_INF, f32).at[0].set(tail_bound(d0, V)) if trunc else None,
        dropped=jnp.full((d.B,), NEG_INF, f32),
    )


def _collect(c: _Carry, d: _Draws) -> DraftTree:
    """The taken nodes (slots 1..P) of every tree as a DraftTree ``[B, P]``."""
    rec = jnp.moveaxis(c.rec[1:], 0, 1)  # [B, P, width]
    return DraftTree(
        parent=rec[..., d.layout.parent],
        depth=rec[..., DEPTH],
        logP=d.layout.logp(rec),
        rank=jnp.moveaxis(c.rank[1:], 0, 1),
        state=rec[..., STATE],
        key=d.layout.key_data(rec, d.key_shape),
    )


@partial(jax.jit, static_argnames=("P", "K", "Kc", "shape"), donate_argnames=("scratch",))
def oracle_kernel(law: Law, tree_keys, scratch, P: int, K: int, Kc: int, shape: frontier.Shape):
    """Best-first search for a batch of trees; returns (tree ``[B, P]``, dropped ``[B]``, scratch).

    ``scratch``: the record buffer (and a drawn law's node table) to write
    into, donated; None allocates them. Every slot is written before it is
    read, so their contents do not matter. They come back as ``scratch``.
    """
    d = _Draws(law, tree_keys, Kc)
    trunc = Kc < K and not d.indexed
    c = _init(d, scratch, P + 1, law.vocab, trunc, shape)
    c = jax.lax.fori_loop(0, P, lambda i, c: _step(i + 1, c, d, shape, law.vocab, trunc), c)
    scratch = (c.rec,) if d.indexed else (c.rec, c.tab)
    return _collect(c, d), c.dropped, scratch
