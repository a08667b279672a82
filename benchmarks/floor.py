"""A floor for the oracle's nanoseconds per node on one CPU core, and where brwsim stands against it.

    python benchmarks/floor.py [--P 16,256,4096] [--V 64]

Everything runs pinned to one core (every thread of the process), interleaved
with the brwsim oracle on the benchmark's table law, so the ratios hold under
whatever load the machine has. Measured per node, on this core:

- ``copy``: bytes a node must move (its 32-byte record written, its parent's
  record read, a row entry, one frontier entry per level: ~80 bytes) at the
  core's streaming copy bandwidth (a large ``numpy`` copy);
- ``keys``: the node's three threefry folds (child key, state key, draw key),
  measured as one batched ``fold_in`` of the unrolled lowering brwsim uses;
- ``step``: the smallest loop any batched best-first kernel on XLA runs per
  node: a ``fori_loop`` over P steps whose body gathers one record per tree
  at a per-tree slot, writes one record per tree at slot i, and takes an
  argmax over 16 entries per tree (the frontier's innermost level), at
  brwsim's own batch size.

``floor = copy + keys`` is what the data and the arithmetic cost on this
core; ``blocks = step + keys`` is what XLA's building blocks cost for any
kernel of this design. brwsim's kernel does, besides, the frontier's other
levels, the state hash and the bookkeeping.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from brwsim import one_cpu_device_per_core, tree_keys, unrolled_threefry
from brwsim import oracle as O
from brwsim._lowering import threefry_fold_in_words
from brwsim.testing import table_law

one_cpu_device_per_core()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import pin  # noqa: E402

BYTES_PER_NODE = 32 + 32 + 4 + 3 * 4


def _best(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def copy_ns_per_byte(n_bytes: int = 1 << 28, repeats: int = 3) -> float:
    a = np.ones(n_bytes // 8)
    b = np.empty_like(a)
    return _best(lambda: np.copyto(b, a), repeats) * 1e9 / (2 * n_bytes)  # read + write


def keys_ns_per_node(n: int = 1 << 20, repeats: int = 5) -> float:
    w0 = jnp.arange(n, dtype=jnp.uint32)
    w1 = w0 * jnp.uint32(7)

    @jax.jit
    def three_folds(a, b):
        c = threefry_fold_in_words(a, b, jnp.uint32(2))
        s = threefry_fold_in_words(c[0], c[1], jnp.uint32(1))
        d = threefry_fold_in_words(c[0], c[1], jnp.uint32(0))
        return s[0] ^ d[1]

    return _best(lambda: three_folds(w0, w1).block_until_ready(), repeats) * 1e9 / n


def step_ns_per_node(P: int, B: int, repeats: int = 5) -> float:
    @jax.jit
    def loop(rec, parent):
        def body(i, c):
            rec, acc = c
            j = parent[i % parent.shape[0]] % (i + 1)  # a per-tree slot already written
            got = jnp.take_along_axis(rec, j[None, :, None], axis=0)[0]  # [B, 8]
            rec = jax.lax.dynamic_update_slice(rec, (got + i)[None], (i + 1, 0, 0))
            acc = acc + jnp.argmax(got[:, :8].astype(jnp.float32) + acc[:, None], axis=1)
            return rec, acc

        return jax.lax.fori_loop(0, P, body, (rec, jnp.zeros((B,), jnp.int32)))

    rec = jnp.zeros((P + 1, B, 8), jnp.int32)
    parent = jax.random.randint(jax.random.key(1), (64, B), 0, P + 1)
    return _best(lambda: jax.block_until_ready(loop(rec, parent)), repeats) * 1e9 / (P * B)


def brwsim_ns_per_node(law, P: int, repeats: int = 5) -> tuple[float, int]:
    B = O.default_batch(law, P)
    keys = tree_keys(jax.random.key(0), 0, B)
    K = min(P, law.vocab)
    t = _best(lambda: jax.block_until_ready(O.oracle_batch(law, keys, P, K)), repeats)
    return t * 1e9 / (P * B), B


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", default="16,256,4096")
    ap.add_argument("--V", type=int, default=64)
    args = ap.parse_args(argv)
    law = table_law(args.V)
    pin({min(os.sched_getaffinity(0))})
    with unrolled_threefry():
        copy = copy_ns_per_byte() * BYTES_PER_NODE
        keys = keys_ns_per_node()
        print(f"one core: copy {copy:.1f} ns per node ({BYTES_PER_NODE} bytes), threefry keys {keys:.1f} ns per node")
        print(
            f"{'P':>6} {'batch':>6} {'step':>7} {'floor':>7} {'blocks':>7} {'brwsim':>7} {'/floor':>7} {'/blocks':>7}"
        )
        for P in (int(x) for x in args.P.split(",")):
            ns, B = brwsim_ns_per_node(law, P)
            step = step_ns_per_node(P, B)
            floor, blocks = copy + keys, step + keys
            print(
                f"{P:>6} {B:>6} {step:>7.1f} {floor:>7.1f} {blocks:>7.1f} {ns:>7.1f} "
                f"{ns / floor:>7.1f} {ns / blocks:>7.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
