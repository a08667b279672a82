"""Stochastic verification on the realised tree: speculative sampling with recursive rejection
(:mod:`._rejection`) and exponential races (:mod:`._races`). docs/drafters.md, "Stochastic verification"."""

from ._races import Raced, kobus_bound, optimal_race_tree, race, race_batch, race_one, race_rank_law
from ._rejection import (
    ACCEPT,
    BONUS,
    REJECT,
    Generated,
    RejectionIdentity,
    call_accepted,
    drafted_count,
    first_call_accepted,
    generate,
    generate_batch,
    generate_one,
    max_candidates,
    rejection_identity,
    rrs,
    shape,
)

__all__ = [
    "ACCEPT",
    "BONUS",
    "REJECT",
    "Generated",
    "Raced",
    "RejectionIdentity",
    "call_accepted",
    "drafted_count",
    "first_call_accepted",
    "generate",
    "generate_batch",
    "generate_one",
    "kobus_bound",
    "max_candidates",
    "optimal_race_tree",
    "race",
    "race_batch",
    "race_one",
    "race_rank_law",
    "rejection_identity",
    "rrs",
    "shape",
]
