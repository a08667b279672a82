"""The batched oracle's frontier: a three-level max structure over its slots, batch last.

The frontier holds one candidate per taken node (slot 0 is the root, slot
``i + 1`` the i-th node taken): the path log-probability of that node's best
child not yet taken. Its ``S`` slots are ``groups`` groups of ``blocks``
blocks of ``slots`` slots (:class:`Shape`); three arrays keep the slot values,
each block's maximum and each group's maximum, for every tree of the batch.

* :func:`top` finds the largest candidate and its first slot: the first group
  holding the maximum (a masked min over the leading axis), then the first
  block and slot (argmax over a contiguous row returns the first maximum).
  The lowest slot index is the earliest-taken parent: the reference tie-break.
* :func:`replace` rewrites the taken slot's entry (one per-tree scatter per level).
* :func:`insert` writes a new slot, the same index for every tree (one
  dynamic-update-slice per level).

docs/scaling.md explains the layout and how the shape was measured.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


class Shape(NamedTuple):
    """``groups x blocks x slots`` frontier slots (at least S)."""

    groups: int
    blocks: int
    slots: int


def shape_for(S: int) -> Shape:
    """The frontier shape for ``S`` slots.

    Measured on XLA CPU (benchmarks/frontier_shapes.py): an argmax over a row
    of 8-16 gathered entries is cheap and gets slow past 16, a min over the
    groups (a leading axis, vectorised over the batch) stays cheap up to ~30;
    so blocks of 8 slots, and blocks per group doubled (up to 16) while there
    would be more than 24 groups.
    """
    slots = 8
    need = -(-S // (slots * 24))  # blocks per group for at most 24 groups
    blocks = min(16, 1 << max(0, need - 1).bit_length())  # the power of two >= need (no loop to get stuck in)
    return Shape(-(-S // (slots * blocks)), blocks, slots)


class Frontier(NamedTuple):
    """Slot values ``[groups, blocks, B, slots]``, block maxima ``[groups, B, blocks]``, group maxima
    ``[groups, B]``."""

    slot: jax.Array
    block: jax.Array
    group: jax.Array


class Top(NamedTuple):
    """The largest candidate of each tree: its value, group, block, slot and flat slot index; the rows read."""

    value: jax.Array  # [B]
    group: jax.Array  # [B]
    block: jax.Array  # [B]
    slot: jax.Array  # [B]
    index: jax.Array  # [B]: (group * blocks + block) * slots + slot
    block_row: jax.Array  # [B, blocks]: the block maxima of its group
    slot_row: jax.Array  # [B, slots]: the slot values of its block


def init(shape: Shape, root_value: jax.Array) -> Frontier:
    """A frontier whose only candidate is slot 0's (``root_value`` [B])."""
    A, G1, G0 = shape
    B = root_value.shape[0]
    return Frontier(
        slot=jnp.full((A, G1, B, G0), NEG_INF, jnp.float32).at[0, 0, :, 0].set(root_value),
        block=jnp.full((A, B, G1), NEG_INF, jnp.float32).at[0, :, 0].set(root_value),
        group=jnp.full((A, B), NEG_INF, jnp.float32).at[0].set(root_value),
    )


def top(fr: Frontier, shape: Shape) -> Top:
    """The largest candidate of every tree and its first slot (the earliest-taken parent)."""
    A, G1, G0 = shape
    B = fr.group.shape[1]
    b_ix = jnp.arange(B, dtype=jnp.int32)
    m = jnp.max(fr.group, axis=0)
    a_ix = jnp.arange(A, dtype=jnp.int32)[:, None]
    a = jnp.minimum(jnp.min(jnp.where(fr.group == m, a_ix, A), axis=0), A - 1)
    r1v = fr.block[a, b_ix]
    g = jnp.argmax(r1v, axis=1).astype(jnp.int32)
    r0v = fr.slot[a, g, b_ix]
    c = jnp.argmax(r0v, axis=1).astype(jnp.int32)
    return Top(m, a, g, c, (a * G1 + g) * G0 + c, r1v, r0v)


def replace(fr: Frontier, t: Top, value: jax.Array) -> Frontier:
    """The frontier with the entry at ``t`` set to ``value`` [B] and the block and group maxima above it updated."""
    B = value.shape[0]
    b_ix = jnp.arange(B, dtype=jnp.int32)
    G1, G0 = t.block_row.shape[1], t.slot_row.shape[1]
    m1 = jnp.max(jnp.where(jnp.arange(G0, dtype=jnp.int32) == t.slot[:, None], value[:, None], t.slot_row), axis=1)
    m2 = jnp.max(jnp.where(jnp.arange(G1, dtype=jnp.int32) == t.block[:, None], m1[:, None], t.block_row), axis=1)
    return Frontier(
        slot=fr.slot.at[t.group, t.block, b_ix, t.slot].set(value, unique_indices=True),
        block=fr.block.at[t.group, b_ix, t.block].set(m1, unique_indices=True),
        group=fr.group.at[t.group, b_ix].set(m2, unique_indices=True),
    )


def insert(fr: Frontier, shape: Shape, n, value: jax.Array) -> Frontier:
    """The frontier with slot ``n`` (the same for every tree) set to ``value`` [B]; maxima raised to it."""
    _, G1, G0 = shape
    B = value.shape[0]
    na, ng, nc = n // (G1 * G0), (n // G0) % G1, n % G0
    slot = jax.lax.dynamic_update_slice(fr.slot, value[None, None, :, None], (na, ng, 0, nc))
    old1 = jax.lax.dynamic_slice(fr.block, (na, 0, ng), (1, B, 1))
    block = jax.lax.dynamic_update_slice(fr.block, jnp.maximum(old1, value[None, :, None]), (na, 0, ng))
    old2 = jax.lax.dynamic_slice(fr.group, (na, 0), (1, B))
    group = jax.lax.dynamic_update_slice(fr.group, jnp.maximum(old2, value), (na, 0))
    return Frontier(slot, block, group)
