"""mu and mu_2 of a law: closed form where known, Monte Carlo for other i.i.d. laws, long-run for Markov laws."""

from __future__ import annotations

import math

import jax
import numpy as np

from .._keys import Stream, stream_key
from .._moments import Moments, entropy_moments
from .._stats import sample_chunks
from ..laws import Law
from ..spine import spine_moments


def sample_moments(key, law: Law, samples: int, state: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """H and M2 of ``samples`` independent node distributions (item i's key: ``fold_in(key, i)``)."""
    f = jax.jit(jax.vmap(lambda k: entropy_moments(law.full_logp(k, state))))
    return tuple(sample_chunks(f, key, samples, law.vocab))


def moments(key, law: Law, samples: int = 4096) -> Moments:
    """mu and mu_2 of a law, from the run key ``key`` (docs/theory.md, "Moments").

    Exact where a closed form exists; else, for an i.i.d. law, Monte Carlo
    over ``samples`` whole distributions (stream ``MOMENTS``) with standard
    errors; for a Markov law, the long-run values along the spine
    (:func:`brwsim.spine.spine_moments`).
    """
    if not law.is_iid:
        return spine_moments(key, law)
    ex = law.exact_moments()
    if ex is not None:
        return Moments(mu=ex[0], mu2=ex[1])
    h, m = sample_moments(stream_key(key, Stream.MOMENTS), law, samples)
    n = h.shape[0]
    return Moments(
        mu=float(h.mean()),
        mu2=float(m.mean()),
        mu_se=float(h.std(ddof=1) / math.sqrt(n)),
        mu2_se=float(m.std(ddof=1) / math.sqrt(n)),
        exact=False,
    )
