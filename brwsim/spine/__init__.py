"""The spine: the target sampling its own continuation, and what its walks estimate.

The cumulative surprisal ``S_d`` of a spine walk is the random walk of the
many-to-one lemma (docs/theory.md, "The spine"):

    E[ sum_{v != root, V(v) <= t} P(v) ] = sum_d Pr(S_d <= t)              = E[tau_t] - 1,
    E[ #{v != root : V(v) <= t} ]        = sum_d E[e^{S_d} 1{S_d <= t}]  = E[N(t)].

Neither identity needs independence between nodes, so the same walks serve
i.i.d. and Markov laws and real models (:func:`curves_from_xi`).

* :func:`sample_walks`: independent walks, each stopped once its surprisal
  passes a level (a few steps per walk) (:mod:`._walks`).
* :func:`spine_batch`: walks on the oracle's own tree, to couple a walk with a tree.
* :class:`SpineCurves`: walks -> the curves t -> E[tau_t], E[N(t)] with standard
  errors, and the splitting and dual bounds minimised over s (:mod:`._curves`).
* :func:`stationary`, :func:`spine_moments`: a Markov law's long-run moments.
"""

from ._coupled import Spine, spine_batch, spine_one
from ._curves import BoundResult, SpineCurves, curves_from_xi, law_curves
from ._stationary import StationaryChain, WalkMoments, spine_moments, spine_moments_walks, stationary
from ._walks import Walks, sample_walks

__all__ = [
    "BoundResult",
    "Spine",
    "SpineCurves",
    "StationaryChain",
    "WalkMoments",
    "Walks",
    "curves_from_xi",
    "law_curves",
    "sample_walks",
    "spine_batch",
    "spine_moments",
    "spine_moments_walks",
    "spine_one",
    "stationary",
]
