"""brwsim: Monte Carlo speed-of-light for speculative decoding draft trees.

The token tree of speculative decoding, seen through log-probabilities, is a
branching random walk. brwsim samples such trees from named laws, finds the
optimal P-node draft tree exactly, measures E[X] (accepted draft tokens per
verifier call; tokens per call = X + 1) with confidence intervals, and checks
it against closed-form bounds.

Quick start::

    import brwsim
    res = brwsim.simulate("fixed:probs=0.6/0.3/0.1", P=[1, 64], trees=10, seed=0)
    res.to_dict()["results"][0]["mean"]   # 0.6
"""

from .errors import BrwsimError
from .estimate import CONVENTION, SimulationResult, Stat, simulate
from .laws import parse_law
from .tree import DraftTree

__version__ = "0.1.0"

__all__ = [
    "BrwsimError",
    "CONVENTION",
    "DraftTree",
    "SimulationResult",
    "Stat",
    "__version__",
    "parse_law",
    "simulate",
]
