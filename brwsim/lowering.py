"""Compilation settings brwsim uses on XLA's CPU backend.

:func:`unrolled_threefry` (a context manager) and :func:`with_unrolled_threefry`
(a decorator) make the programs compiled inside lower JAX's threefry PRNG
unrolled, as JAX does on GPU, instead of the rolled loop it uses on CPU. The
random bits are identical; only the loop structure differs. Measured on this
project's 2-core machine (benchmarks/README.md): the oracle kernel on a
Dirichlet law 2.4x faster, Dirichlet and logit-normal spine walks 2x, and
compilation faster. The ``brwsim`` command runs entirely inside it; library
entry points (``oracle_batch``, ``sample_walks``, ``simulate``) use it for
the programs they compile.
"""

from __future__ import annotations

import contextlib
import functools
import threading


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
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as tf

        table = mlir._platform_specific_lowerings["cpu"]
        prim = tf.threefry2x32_p
        if prim not in table:
            raise KeyError(prim)
        new = mlir.LoweringRuleEntry(tf._threefry2x32_lowering_rule, False)
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
