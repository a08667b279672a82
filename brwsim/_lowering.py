"""Threefry on XLA's CPU backend: JAX's unrolled lowering, and a hand-unrolled ``fold_in``.

:func:`unrolled_threefry` (a context manager) and :func:`with_unrolled_threefry`
(a decorator) make the programs compiled inside lower JAX's threefry PRNG
unrolled, as JAX does on GPU, instead of the rolled loop it uses on CPU. The
random bits are identical; only the loop structure differs. Measured on this
project's 2-core machine (benchmarks/README.md): the oracle kernel on a
Dirichlet law 2.4x faster, Dirichlet and logit-normal spine walks 2x, and
compilation faster. The ``brwsim`` command runs entirely inside it; library
entry points (``oracle_batch``, ``sample_walks``, ``simulate``) use it for
the programs they compile.

:func:`threefry_fold_in_words` is ``fold_in`` on raw threefry key words with
the 20 rounds written out: the oracle kernel derives its node keys with it
(the same bits as ``jax.random.fold_in``, tested).
"""

from __future__ import annotations

import contextlib
import functools
import threading

import jax.numpy as jnp

try:  # JAX internals; without them the unrolled lowering is skipped (same bits, slower on CPU)
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32 as _tf
except ImportError:  # pragma: no cover - other JAX versions
    mlir = _tf = None


@contextlib.contextmanager
def unrolled_threefry():
    """Lower threefry unrolled on CPU (as JAX does on GPU) for the programs compiled inside.

    On CPU JAX lowers every threefry call (``fold_in``, ``randint``,
    ``categorical``, ...) to a rolled 5-iteration while loop: each iteration's
    tiny ops are dispatched one by one, which costs more than the arithmetic
    when the arrays are small (one node per tree inside the oracle's loop, one
    step per walk in the spine). This swaps in JAX's own unrolled lowering for the
    compilations made inside the block: the same bits, a different loop
    structure. Programs already compiled keep theirs. If this JAX version's
    internals differ, the block runs unchanged.
    """
    try:
        table = mlir._platform_specific_lowerings["cpu"]
        prim = _tf.threefry2x32_p
        if prim not in table:
            raise KeyError(prim)
        new = mlir.LoweringRuleEntry(_tf._threefry2x32_lowering_rule, False)
    except Exception:  # pragma: no cover - other JAX internals
        yield
        return
    with _lock:  # nested or concurrent blocks: the first in saves the rule, the last out restores it
        if not _saved:
            _saved.append(table[prim])
            table[prim] = new
        _depth[0] += 1
    try:
        yield
    finally:
        with _lock:
            _depth[0] -= 1
            if _depth[0] == 0:
                table[prim] = _saved.pop()


_lock = threading.Lock()
_saved: list = []
_depth = [0]


def with_unrolled_threefry(f):
    """Decorator: run ``f`` inside :func:`unrolled_threefry`."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        with unrolled_threefry():
            return f(*args, **kwargs)

    return wrapper


def _rotl(x, d: int):
    return (x << jnp.uint32(d)) | (x >> jnp.uint32(32 - d))


def threefry_fold_in_words(k1, k2, data):
    """The two words of ``key_data(fold_in(k, data))`` for threefry2x32 key words (k1, k2), bit for bit.

    JAX's fold_in is ``threefry_2x32(k, [0, data])``; on CPU its lowering is a
    rolled loop (a nested while loop per call), which inside the oracle's own
    loop costs more than the arithmetic. This is the same 20 rounds unrolled.
    """
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    rot = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = k1, jnp.asarray(data).astype(jnp.uint32) + k2
    for i in range(5):
        for r in rot[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotl(x1, r)
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x0, x1
