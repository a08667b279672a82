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
        old = table[prim]
        new = mlir.LoweringRuleEntry(tf._threefry2x32_lowering_rule, False)
    except Exception:  # pragma: no cover - other JAX internals
        yield
        return
    table[prim] = new
    try:
        yield
    finally:
        table[prim] = old


def with_unrolled_threefry(f):
    """Decorator: run ``f`` inside :func:`unrolled_threefry`."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        with unrolled_threefry():
            return f(*args, **kwargs)

    return wrapper
