"""``table``: node distributions read from a fixed table (the benchmark's and the tests' law; no SPEC family).

The root's row is ``randint(rows)`` from its state key, a child's row a 32-bit hash of its parent's row and its
rank (:func:`child_row`, computed identically in JAX, Python and the native kernel), so that a reference search
outside JAX sees exactly brwsim's tree (:mod:`brwsim.testing`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ._base import Law, NativeIndexed

_M32 = 0xFFFFFFFF
_A, _C, _D, _X = 0x9E3779B1, 0x85EBCA77, 0x165667B1, 0xC2B2AE3D


def child_row(parent_row: int, rank: int, n_rows: int) -> int:
    """Row of the child of rank ``rank`` of a node with row ``parent_row`` (a 32-bit hash)."""
    h = (parent_row * _A + rank * _C + _D) & _M32
    h ^= h >> 15
    h = (h * _X) & _M32
    h ^= h >> 13
    return h % n_rows


@dataclasses.dataclass(frozen=True, eq=False)
class TableLaw(Law):
    """Node distributions read from a fixed table; the hidden state is the row index."""

    logp: jax.Array  # [N, V] float32, each row sorted decreasing

    family = "table"

    def spec(self) -> str:
        return f"table:V={self.vocab},rows={self.n_states}"

    @property
    def vocab(self) -> int:
        return int(self.logp.shape[1])

    @property
    def n_states(self) -> int:  # type: ignore[override]
        return int(self.logp.shape[0])

    def full_logp(self, key, state):
        return self.logp[state]

    def node_logp(self, key, state, K: int):
        row = self.logp[state]
        if K <= row.shape[0]:
            return row[:K]
        return jnp.concatenate([row, jnp.full((K - row.shape[0],), -jnp.inf, row.dtype)])

    indexed = True

    def row_table(self, K: int):
        return jax.vmap(lambda r: self.node_logp(None, r, K))(jnp.arange(self.logp.shape[0]))

    def node_row(self, key, state):
        return jnp.asarray(state, jnp.int32)

    def init_state(self, key):
        return jax.random.randint(key, (), 0, self.logp.shape[0]).astype(jnp.int32)

    def native_program(self) -> NativeIndexed | None:
        n = self.n_states
        return NativeIndexed(init=1, child=1, row=1, n_init=n, n_hash=n) if self.indexed else None

    def child_state(self, key, parent_state, rank):
        s = parent_state.astype(jnp.uint32)
        h = s * jnp.uint32(_A) + jnp.asarray(rank).astype(jnp.uint32) * jnp.uint32(_C) + jnp.uint32(_D)
        h = h ^ (h >> 15)
        h = h * jnp.uint32(_X)
        h = h ^ (h >> 13)
        return (h % jnp.uint32(self.logp.shape[0])).astype(jnp.int32)


jax.tree_util.register_dataclass(TableLaw, data_fields=["logp"], meta_fields=[])
