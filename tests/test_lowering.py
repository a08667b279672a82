"""The unrolled threefry lowering: the same bits, and it takes effect."""

from __future__ import annotations

import jax
import numpy as np

from brwsim import unrolled_threefry


def test_nested_unrolled_threefry_restores_the_rule():
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32 as tf

    rules = mlir._platform_specific_lowerings["cpu"]
    before = rules[tf.threefry2x32_p]
    with unrolled_threefry():
        with unrolled_threefry():
            pass
        assert rules[tf.threefry2x32_p] is not before
    assert rules[tf.threefry2x32_p] is before


def test_unrolled_threefry_gives_the_same_bits():
    """The CPU lowering swap changes loop structure only: compilations under both agree bit for bit.

    (Each compilation needs a fresh function object: JAX caches lowerings by traced function.)
    """

    def make():
        def draws(k):
            k1, k2 = jax.random.split(jax.random.fold_in(k, 7))
            return (
                jax.random.gamma(k1, 0.3, (500,)),
                jax.random.randint(k2, (50,), 0, 1000),
                jax.random.categorical(k1, jax.numpy.log(jax.numpy.arange(1.0, 9.0)), shape=(50,)),
            )

        return jax.jit(draws)

    key = jax.random.key(3)
    rolled_f = make()
    rolled = rolled_f(key)
    with unrolled_threefry():
        unrolled_f = make()
        unrolled = unrolled_f(key)
    # the swap takes effect: the rolled CPU lowering has a while loop per threefry call, the unrolled none
    n_rolled = rolled_f.lower(key).as_text().count("stablehlo.while")
    n_unrolled = unrolled_f.lower(key).as_text().count("stablehlo.while")
    assert n_unrolled < n_rolled, (n_unrolled, n_rolled)
    for a, b in zip(rolled, unrolled, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
