"""Node records of the batched oracle: one int32 row per taken node and tree.

A node's fields are packed into one record ``rec[slot, tree]`` of int32 words,
so a step reads its parent with one gather: log P (float32 bitcast), depth,
hidden state, row index (indexed laws), next-child pointer, key words (key
data bitcast), parent slot. With threefry keys a record is ``int32[8]``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

LOGP, DEPTH, STATE, ROW, POINTER, KEY = 0, 1, 2, 3, 4, 5  # word offsets; the key words follow, then the parent


def as_i32(x: jax.Array) -> jax.Array:
    """``x`` as int32 words (a bitcast for float32 and uint32)."""
    return x if x.dtype == jnp.int32 else jax.lax.bitcast_convert_type(x, jnp.int32)


class Layout(NamedTuple):
    """Where each field sits in a record, for keys of ``key_words`` words of type ``key_dtype``."""

    key_words: int
    key_dtype: jnp.dtype

    @property
    def parent(self) -> int:
        return KEY + self.key_words

    @property
    def width(self) -> int:
        return self.parent + 1

    def pack(self, logp, depth, state, row, pointer, key_words, parent) -> jax.Array:
        """``[B, width]`` records from per-tree fields (``key_words``: a sequence of [B] word arrays)."""
        words = [as_i32(logp), depth, state, row, pointer, *[as_i32(w) for w in key_words], parent]
        return jnp.stack(words, axis=1)

    def logp(self, rec: jax.Array) -> jax.Array:
        return jax.lax.bitcast_convert_type(rec[..., LOGP], jnp.float32)

    def keys(self, rec: jax.Array) -> tuple:
        """The key words of records ``rec [..., width]``, each ``[...]`` of the key dtype."""
        return tuple(jax.lax.bitcast_convert_type(rec[..., KEY + w], self.key_dtype) for w in range(self.key_words))

    def key_data(self, rec: jax.Array, key_shape: tuple) -> jax.Array:
        """Key data ``[..., *key_shape]`` of records ``rec [..., width]``."""
        kd = jax.lax.bitcast_convert_type(rec[..., KEY : self.parent], self.key_dtype)
        return kd.reshape(rec.shape[:-1] + key_shape)
