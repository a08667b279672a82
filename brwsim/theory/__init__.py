"""Entropy moments and the bounds on E[X] (docs/theory.md, "Moments" and "Bounds").

All bounds count X = accepted draft tokens per verifier call (tokens per call
are X + 1).

* closed forms in (P, mu, mu_2): :func:`theorem1_leading` (the paper's
  leading term), :func:`renewal` (rigorous for i.i.d. laws),
  :func:`asymptotic` (a large-P prediction);
* from spine walks, for any law: the splitting and dual bounds
  (:func:`spine_bounds` from sampled surprisals, :func:`law_spine_bounds`);
* the imperfect-knowledge bound of top-P-by-Q drafting (:func:`threshold_bound`,
  :func:`lorden`);
* :class:`Bounds`: all of them at one P, labelled rigorous / prediction /
  i.i.d.-only, built by :func:`bounds_from_curves`.
"""

from ._bounds import (
    KINDS,
    MIN_SPINE_WALKS,
    Bounds,
    SpineBounds,
    bounds_from_curves,
    check_margin_z,
    check_P_values,
    check_walks,
    law_spine_bounds,
    spine_bounds,
)
from ._closed_forms import CLOSED_FORM, asymptotic, renewal, renewal_formula, theorem1_leading
from ._imperfect import lorden, threshold_bound, threshold_counts
from ._moments import moments, sample_moments

__all__ = [
    "CLOSED_FORM",
    "KINDS",
    "MIN_SPINE_WALKS",
    "Bounds",
    "SpineBounds",
    "asymptotic",
    "bounds_from_curves",
    "check_P_values",
    "check_margin_z",
    "check_walks",
    "lorden",
    "threshold_bound",
    "threshold_counts",
    "law_spine_bounds",
    "moments",
    "renewal",
    "renewal_formula",
    "sample_moments",
    "spine_bounds",
    "theorem1_leading",
]
