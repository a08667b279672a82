"""Shared test settings: JAX on the CPU, float32, and the laws several test modules use."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import brwsim  # noqa: E402
from brwsim.laws import markov_law, parse_law  # noqa: E402
from brwsim.testing import table_law  # noqa: E402

brwsim.enable_compilation_cache()  # compiled programs shared with the CLI subprocesses the tests start
jax.config.update("jax_enable_x64", False)  # brwsim computes in float32; the tests check that
settings.register_profile("brwsim", deadline=None, derandomize=True)  # fixed examples: same run every time
settings.load_profile("brwsim")

# a Markov law mixing an indexed state (fixed) with a drawn one (dirichlet): the oracle's drawn-law path
MIXED_MARKOV = {
    "states": {"a": "fixed:probs=0.9/0.1", "b": "dirichlet:V=2,alpha=1"},
    "initial": "a",
    "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
}


@pytest.fixture()
def indexed_laws(tmp_path):
    """One law of every indexed kind: fixed, pool, an all-indexed Markov law, the benchmark's table law."""
    np.savez(tmp_path / "pool.npz", probs=np.array([[0.7, 0.2, 0.1, 0.0], [0.4, 0.3, 0.2, 0.1], [0.25] * 4]))
    markov = {
        "states": {"a": "fixed:probs=0.9/0.1", "b": f"pool:path={tmp_path / 'pool.npz'}"},
        "initial": {"a": 0.5, "b": 0.5},
        "kernel": {"a": [[0.8, 0.2], [0.1, 0.9]], "b": [[0.3, 0.7]]},
    }
    return [
        parse_law("fixed:probs=0.5/0.3/0.2"),
        parse_law(f"pool:path={tmp_path / 'pool.npz'}"),
        markov_law(markov),
        table_law(6, n_rows=32, alpha=0.4),
    ]
