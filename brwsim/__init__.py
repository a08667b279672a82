"""brwsim: Monte Carlo speed-of-light for speculative decoding draft trees.

The token tree of speculative decoding, seen through log-probabilities, is a
branching random walk. brwsim samples such trees from named laws, finds the
optimal P-node draft tree exactly, measures E[X] (accepted draft tokens per
verifier call; tokens per call = X + 1) with confidence intervals, and checks
it against closed-form and empirical bounds.

Quick start::

    import brwsim
    res = brwsim.simulate("fixed:probs=0.6/0.3/0.1", P=[1, 64], trees=10, seed=0)
    res.to_dict()["results"][0]["mean"]   # 0.6

This module is the public surface; the subpackages group one family each:
:mod:`brwsim.laws` (node-distribution laws), :mod:`brwsim.tree` (the
realised tree and a drafted tree's value), :mod:`brwsim.oracle` (the exact
optimal tree), :mod:`brwsim.drafters` (other drafters and draft laws),
:mod:`brwsim.spine` (spine walks), :mod:`brwsim.theory` (moments and
bounds), :mod:`brwsim.specsampling` (stochastic verification),
:mod:`brwsim.llm` (real models). Modules whose name starts with ``_`` are
private. docs/architecture.md describes the layout.
"""

from ._cache import enable_compilation_cache, user_cache_dir
from ._devices import one_cpu_device_per_core, resolve_devices
from ._keys import Stream, stream_key, tree_keys
from ._lowering import unrolled_threefry
from ._moments import Moments, entropy_moments
from ._processes import start as start_processes
from ._stats import CONVENTION, Stat
from .errors import BrwsimError
from .estimate import PResult, SimulateOptions, SimulationResult, oracle_values, simulate, simulate_with
from .laws import Law, parse_law
from .oracle import clear_caches
from .theory import Bounds
from .tree import DraftTree

__version__ = "0.1.0"

__all__ = [
    "Bounds",
    "BrwsimError",
    "CONVENTION",
    "DraftTree",
    "Law",
    "Moments",
    "PResult",
    "SimulateOptions",
    "SimulationResult",
    "Stat",
    "Stream",
    "__version__",
    "clear_caches",
    "enable_compilation_cache",
    "entropy_moments",
    "one_cpu_device_per_core",
    "oracle_values",
    "parse_law",
    "resolve_devices",
    "simulate",
    "simulate_with",
    "start_processes",
    "stream_key",
    "tree_keys",
    "unrolled_threefry",
    "user_cache_dir",
]
