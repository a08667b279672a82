"""PRNG keys: brwsim's named random streams and the keys of tree nodes.

Every random number of a run derives from one typed key, ``jax.random.key(seed)``.
The user-facing layer (``simulate``, the command line, the experiments) takes
the integer seed; every lower layer takes that *run key* and derives its own
named stream from it::

    stream key = fold_in(run key, stream)      # Stream below: one integer per purpose
    item i     = fold_in(stream key, i)        # tree i, walk i, sample i

so two components handed the same run key never draw the same bits, and a
result depends on the seed and the item count only, never on batch sizes.

A realised tree is a pure function of its key (docs/theory.md, "Node keys"):
node ``u`` with key ``k_u`` draws its distribution from ``fold_in(k_u, 0)``,
its hidden state from ``fold_in(k_u, 1)``; its child of rank ``i`` has key
``fold_in(k_u, 2 + i)``; a drafter's distribution at ``u`` uses
``fold_in(k_u, DRAFT_TAG)``, a tag above every child's.
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp

from .errors import BrwsimError


class Stream(enum.IntEnum):
    """Every random stream of brwsim, in one place (a test checks they are distinct)."""

    TREES = 0  # realised trees: the oracle and every drafter see tree i of a run
    CHECK = 1  # the target's sampled continuation through tree i (the --check estimator)
    MOMENTS = 2  # Monte Carlo mu and mu_2 of an i.i.d. law
    SPINE_DIRECT = 3  # long spine walks for the direct long-run moments of a Markov law
    SPINE = 5  # spine walks of the splitting and dual bounds
    STATIONARY = 6  # per-state samples of the spine's hidden-state chain
    GENERATE = 7  # speculative sampling runs (verifier randomness)
    RACE = 8  # exponential-race runs (the race clocks)
    DRAFT_STATS = 9  # node samples for a draft law's divergences from the target
    ACCEPTANCE = 10  # node samples for Sequoia's positional acceptance rates
    RACE_RANKS = 11  # tree roots for the law of the race rank R
    BOOTSTRAP = 12  # bootstrap resamples of the stationary moments


# the draft tag: above every child tag 2 + i (vocabularies are far below 2**32 - 10)
DRAFT_TAG = 2**32 - 8
# a walk's initial-state tag, above every depth a walk reaches
INIT_TAG = 2**31 - 1


def check_key(key, what: str = "key"):
    """Return ``key`` if it is one typed PRNG key (``jax.random.key(seed)``), else raise a one-line error."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ():
        return key
    raise BrwsimError(f"{what} must be one typed PRNG key, jax.random.key(seed); got {type(key).__name__}")


def stream_key(key, stream: Stream):
    """The key of one named stream of the run with run key ``key``."""
    return jax.random.fold_in(key, int(stream))


def item_keys(base, start: int, count: int):
    """``fold_in(base, i)`` for ``i = start .. start + count - 1`` (uint32 indices)."""
    idx = jnp.arange(start, start + count, dtype=jnp.uint32)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(idx)


def tree_keys(key, start: int, count: int, stream: Stream = Stream.TREES):
    """Keys of items ``start .. start + count - 1`` of a stream (default: the run's trees)."""
    return item_keys(stream_key(key, stream), start, count)


def dist_key(k):
    """The key of a node's distribution."""
    return jax.random.fold_in(k, 0)


def state_key(k):
    """The key of a node's hidden state."""
    return jax.random.fold_in(k, 1)


def child_key(k, rank):
    """The key of a node's child of target rank ``rank`` (0 = most likely)."""
    return jax.random.fold_in(k, 2 + rank)


def draft_key(k):
    """The key of a node's drafter randomness (disjoint from its children's keys)."""
    return jax.random.fold_in(k, DRAFT_TAG)
