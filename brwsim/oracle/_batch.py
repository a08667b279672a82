"""The oracle for a batch of tree keys: kept entries, exact reruns, buffers, devices, batch sizes."""

from __future__ import annotations

import math
from functools import cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as _jax_core
from jax.sharding import PartitionSpec

from .._devices import TREES_AXIS, available_memory, mesh, place_batch, split_over
from .._lowering import unrolled_threefry
from ..errors import BrwsimError
from ..laws import Law
from ..tree import DraftTree
from . import _frontier as frontier
from . import _native
from ._kernel import oracle_kernel, scratch_arrays
from ._records import KEY

TABLE_BYTES = 16 * 2**20  # default cap on one tree's node table (float32 [P + 1, K_keep])
SLOT_BYTES = 76  # per slot and tree: node record (8 words with threefry keys), frontier, output


def keep_entries(P: int, K: int, K_keep: int | None = None) -> int:
    """Entries kept per node: ``K_keep`` if given, else ``K`` while the table fits TABLE_BYTES."""
    if K_keep is not None:
        if int(K_keep) < 1:
            raise BrwsimError(f"K_keep must be >= 1, got {K_keep}")
        return min(int(K_keep), K)
    fit = TABLE_BYTES // (4 * (P + 1))
    if fit >= K:
        return K
    return max(16, 1 << (max(fit, 1).bit_length() - 1))


def oracle_memory_at(law: Law, P: int, Kc: int, K: int | None = None) -> int:
    """Approximate bytes one tree needs in the kernel keeping ``Kc`` entries per node (records, frontier,
    output, node table, node draw)."""
    K = min(law.vocab, P) if K is None else K
    per_slot = SLOT_BYTES
    if not law.indexed:
        per_slot += 4 * Kc + (4 if Kc < K else 0)
    return per_slot * (P + 1) + 16 * law.vocab


def oracle_memory(law: Law, P: int, K: int | None = None) -> int:
    """Approximate bytes one tree needs in the kernel with the default kept entries (:func:`keep_entries`)."""
    K = min(law.vocab, P) if K is None else K
    return oracle_memory_at(law, P, keep_entries(P, K), K)


def default_batch(law: Law, P: int, hot: int = 64 * 2**20, budget: int = 256 * 2**20) -> int:
    """Trees per oracle call on one device: at most 4096, ``hot`` bytes of records, ``budget`` bytes in all.

    Measured (benchmarks/README.md): large batches amortise the per-step
    dispatch of the loop body at small P (P = 16: 4096 trees 1.8x faster
    than 1024), while past ~64 MB the node records and frontier (read at
    random every step) fall out of cache at large P (P = 4096: 205 trees 1.3x
    faster than 859). A drawn law's node table is written once per node and
    read rarely, so it counts only towards ``budget``.
    """
    hot_per_tree = SLOT_BYTES * (P + 1) + 16 * law.vocab
    return int(max(1, min(4096, hot // hot_per_tree, budget // oracle_memory(law, P))))


# The kernel's slot-major buffers (node records, a drawn law's node table) of
# the last call, handed to the next call of the same shape (donated, so XLA
# reuses them in place). Every slot is written before it is read, so their old
# contents never matter; this saves writing the whole table each call.
_SCRATCH: dict = {}


def clear_caches() -> None:
    """Free the buffers the oracle keeps between calls (``simulate`` does this when it ends)."""
    _SCRATCH.clear()


def _take_scratch(tag: tuple):
    """The buffers for ``tag = (S, B, width, Kc or None, devices or the keys' sharding)``: cached, else new."""
    buf = _SCRATCH.pop(tag, None)
    _SCRATCH.clear()  # one shape at a time: release the others first
    if buf is not None:
        return buf
    S, B, width, Kc, devs = tag
    if not isinstance(devs, tuple):  # one device: placed with the keys by jit
        return scratch_arrays(S, B, width, Kc)
    return _sharded_scratch(S, B, width, Kc, devs)()


@cache
def _sharded_scratch(S: int, B: int, width: int, Kc: int | None, devs: tuple):
    """A compiled maker of the scratch buffers split over ``devs`` along the batch (compiled once per shape)."""
    n = 1 if Kc is None else 2
    return jax.jit(partial(scratch_arrays, S, B, width, Kc), out_shardings=(split_over(devs, axis=1),) * n)


@cache
def _sharded_kernel(devices: tuple, P: int, K: int, Kc: int, shape: frontier.Shape):
    """The kernel split over ``devices`` along the batch axis (one program per device, no communication)."""
    trees = PartitionSpec(TREES_AXIS)
    f = jax.shard_map(
        lambda law, keys, scratch: oracle_kernel(law, keys, scratch, P=P, K=K, Kc=Kc, shape=shape),
        mesh=mesh(devices),
        in_specs=(PartitionSpec(), trees, PartitionSpec(None, TREES_AXIS)),
        out_specs=(trees, trees, PartitionSpec(None, TREES_AXIS)),
        check_vma=False,
    )
    return jax.jit(f, donate_argnums=2)


def _is_traced(tree_keys) -> bool:
    """Inside a jit/vmap (even with concrete keys: jnp ops are staged there)."""
    if isinstance(tree_keys, jax.core.Tracer):
        return True
    try:  # no trace active: cheap (a staged jnp op below costs ~0.1 ms a call)
        return not _jax_core.trace_state_clean()
    except AttributeError:  # pragma: no cover - other JAX internals
        return isinstance(jnp.zeros(()), jax.core.Tracer)


def oracle_batch(
    law: Law, tree_keys, P: int, K: int, *, K_keep: int | None = None, devices=None, kernel: str | None = None
) -> DraftTree:
    """Oracle trees T*_P for a batch of tree keys (``tree_keys``: key array [B]).

    Exactly the trees of :func:`oracle_one` (same nodes, order and tie-breaks),
    computed by the batched kernel (:mod:`._kernel`). ``K_keep`` (default: all
    ``K`` unless the node tables would pass :data:`TABLE_BYTES` per tree) is
    how many entries of each node's sorted distribution are kept. Never a
    silent truncation: when a child past the kept ones could have entered a
    tree, that tree is recomputed with four times as many kept entries (node
    distributions are a pure function of the node key, so this is exact), up
    to ``K``, in batches that take no more memory than the first call. Inside
    an outer ``jit`` (traced keys) all ``K`` entries are kept.

    ``devices`` (a list of devices, see :func:`brwsim.resolve_devices`): split
    the batch evenly over them (``B`` must be a multiple of their number);
    every tree is computed by the same program, so the trees are those of one device.

    ``kernel``: ``"auto"`` (the native CPU kernel, :mod:`._native`, for the laws
    it serves on CPU devices, else the JAX kernel), ``"jax"`` or ``"native"``;
    None (default): the choice of :func:`kernel_choice`, else auto. Every
    choice gives the same trees bit for bit.
    """
    P, K = int(P), int(K)
    if P < 1 or K < 1:
        raise BrwsimError(f"oracle needs P >= 1 and K >= 1, got P={P}, K={K}")
    traced = _is_traced(tree_keys)
    n_dev = len(devices) if devices is not None and not traced else 1
    if _native.use_native(law, tree_keys, kernel, devices):
        devs = tuple(devices) if devices is not None and len(devices) > 1 and not traced else None
        if devs:
            tree_keys = place_batch(devs, tree_keys)
        return _native.run_native(law, tree_keys, P, K, devs)[0]
    B = tree_keys.shape[0]
    # With one tree per device XLA copies a drawn law's node table at every step (measured: 13x slower at
    # P = 16384 than two trees): run each tree twice then, in the same call, and keep one copy.
    twice = not (law.indexed or traced) and B == n_dev
    if twice:
        tree_keys = jnp.concatenate([tree_keys, tree_keys])
    Kc = K if traced or law.indexed else keep_entries(P, K, K_keep)  # an indexed law keeps a row index
    shape = frontier.shape_for(P + 1)
    devs = tuple(devices) if devices is not None and len(devices) > 1 and not traced else None
    run = partial(_run, law, P=P, K=K, shape=shape, devs=devs, traced=traced)
    tree, dropped = run(tree_keys, Kc)
    while Kc < K:
        bad = np.nonzero(np.asarray(dropped >= tree.logP[:, -1]))[0]
        if bad.size == 0:
            break
        wider = min(K, 4 * Kc)
        tree, dropped = _rerun(run, law, tree_keys, tree, dropped, bad, P, Kc, wider, n_dev)
        Kc = wider
    if twice:  # the first copies; a slice of a split array comes back whole, so split it over the devices again
        tree = jax.tree.map(lambda x: x[:B] if devs is None else place_batch(devs, x[:B]), tree)
    return tree


def _rerun(run, law: Law, tree_keys, tree, dropped, bad, P: int, Kc: int, wider: int, n_dev: int):
    """Recompute the trees ``bad`` keeping ``wider`` entries, in batches whose node tables take no more
    memory than the first call's; a one-line error if even one tree per device cannot fit."""
    per_tree = oracle_memory_at(law, P, wider)
    low = 2 * n_dev  # one tree per device is slow on this path (oracle_batch runs each tree twice then)
    b = max(low, tree_keys.shape[0] * Kc // wider // n_dev * n_dev)
    avail = available_memory()
    if avail is not None and low * per_tree > 0.8 * avail:
        raise BrwsimError(
            f"P={P}: to stay exact, some nodes of these trees need their {wider} largest entries, "
            f"{per_tree / 1e9:.3g} GB a tree, more than the {avail / 1e9:.3g} GB available allow; lower P"
        )
    if avail is not None:
        b = max(low, min(b, int(0.8 * avail // per_tree) // n_dev * n_dev))
    idx = np.concatenate([bad, np.full(-bad.size % b, bad[0])])
    for start in range(0, idx.size, b):
        chunk = idx[start : start + b]
        t2, d2 = run(tree_keys[jnp.asarray(chunk)], wider)
        real = jnp.asarray(chunk[: max(0, min(b, bad.size - start))])
        m = real.shape[0]
        tree = jax.tree.map(lambda x, y, real=real, m=m: x.at[real].set(y[:m]), tree, t2)
        dropped = dropped.at[real].set(d2[:m])
    return tree, dropped


def _run(law: Law, tree_keys, Kc: int, *, P: int, K: int, shape, devs, traced: bool):
    """(trees, dropped) from one kernel call keeping ``Kc`` entries (buffers reused between calls)."""
    if devs:
        tree_keys = place_batch(devs, tree_keys)
    with unrolled_threefry():
        if traced:  # no buffers kept from inside a trace
            return oracle_kernel(law, tree_keys, None, P=P, K=K, Kc=Kc, shape=shape)[:2]
        width = KEY + math.prod(jax.random.key_data(tree_keys).shape[1:]) + 1
        tag = (P + 1, tree_keys.shape[0], width, None if law.indexed else Kc, devs or tree_keys.sharding)
        if devs:
            kernel = _sharded_kernel(devs, P, K, Kc, shape)
        else:
            kernel = partial(oracle_kernel, P=P, K=K, Kc=Kc, shape=shape)
        tree, dropped, _SCRATCH[tag] = kernel(law, tree_keys, _take_scratch(tag))
        return tree, dropped
