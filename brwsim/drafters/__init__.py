"""Drafters beyond the oracle, and the draft laws they see (docs/drafters.md).

Every drafter returns a :class:`brwsim.tree.DraftTree` with the oracle's
meaning (``logP`` under the target, ``rank`` the target rank), so one value
function (:func:`brwsim.tree.prefix_values`) and one estimator serve them
all; a drafter chooses from the drafter's ``q`` only (a draft law,
:func:`parse_draft_law`). Names: :data:`DRAFTERS` (``oracle``, ``topq``,
``eagle``, ``chain``, ``static``, ``sequoia``).
"""

from ._builders import chain_one, eagle_one, node_qtable, topq_one
from ._draftlaws import (
    DRAFT_LAWS,
    DraftLaw,
    DraftStats,
    Exact,
    Mix,
    Noise,
    Temp,
    divergences,
    draft_stats,
    node_pq,
    parse_draft_law,
)
from ._registry import DRAFTERS, Drafter, Oracle, drafter_batches, drafter_values, parse_drafter
from ._sequoia import acceptance_rates, brute_force_best, greedy_tree, sequoia_dp, sequoia_paths
from ._static import bfs_order, kary_paths, load_paths, static_one, tree_arrays

__all__ = [
    "DRAFTERS",
    "DRAFT_LAWS",
    "DraftLaw",
    "DraftStats",
    "Drafter",
    "Exact",
    "Mix",
    "Noise",
    "Oracle",
    "Temp",
    "acceptance_rates",
    "bfs_order",
    "brute_force_best",
    "chain_one",
    "divergences",
    "draft_stats",
    "drafter_batches",
    "drafter_values",
    "eagle_one",
    "greedy_tree",
    "kary_paths",
    "load_paths",
    "node_pq",
    "node_qtable",
    "parse_draft_law",
    "parse_drafter",
    "sequoia_dp",
    "sequoia_paths",
    "static_one",
    "topq_one",
    "tree_arrays",
]
