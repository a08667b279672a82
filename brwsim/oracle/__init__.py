"""The exact oracle: the P nodes of largest path probability, for many trees at once.

:func:`oracle_batch` runs the batched best-first kernel (:mod:`._kernel`, its
frontier :mod:`._frontier`, node records :mod:`._records`) on a batch of tree
keys, over several devices if asked (on CPU, for the laws it serves, the
native kernel :mod:`._native`: the same trees, bit for bit, :func:`kernel_choice`
picks); :func:`oracle_one` is the plain
one-tree search it must match exactly. docs/theory.md ("The oracle") defines
the tree; docs/scaling.md explains the kernel.
"""

from ._batch import TABLE_BYTES, clear_caches, default_batch, keep_entries, oracle_batch, oracle_memory
from ._frontier import shape_for as frontier_shape
from ._kernel import oracle_kernel, scratch_arrays, tail_bound
from ._native import KERNELS, kernel_choice
from ._reference import best_first_one, oracle_one

__all__ = [
    "KERNELS",
    "TABLE_BYTES",
    "best_first_one",
    "clear_caches",
    "default_batch",
    "frontier_shape",
    "keep_entries",
    "kernel_choice",
    "oracle_batch",
    "oracle_kernel",
    "oracle_memory",
    "oracle_one",
    "scratch_arrays",
    "tail_bound",
]
