"""Measurements on a real model's token tree (docs/llm.md, "What is measured").

Per prompt (:func:`open_walks_oracle`, the one opening of the one per-prompt pipeline,
:func:`brwsim.llm.drafters.measure_prompt_drafters`, which a measurement without drafters runs too):

- **walks** (:func:`sample_walks`): continuations sampled from the model
  itself (the spine of docs/theory.md), ``depth`` tokens each, stopped at an
  end token; along them the surprisal ``xi`` of every step and the entropy
  ``H`` and second log-moment ``M2`` of every visited node. The visited
  nodes' top-K rows form the i.i.d. surrogate's ``pool`` law.
- **the real oracle tree** T*_P (:func:`oracle_tree`): the P nodes of largest
  path probability, by the one best-first search of the real-model side
  (:mod:`._search`, the same search as :func:`brwsim.oracle.best_first_one`).

Per task (:func:`summarize_task` -> :class:`~brwsim.llm.results.TaskResult`):
the oracle's mean with its 95% interval over prompts; the i.i.d. surrogate
(the pool simulated in memory with :func:`brwsim.simulate`); the empirical
bounds from all the task's walks. X counts accepted draft tokens per verifier
call (tokens per call = X + 1).
"""

from __future__ import annotations

from ._search import OracleTree, oracle_tree, row_stats, sample_rows
from ._task import pool_law, save_pool, summarize_task
from ._walks import (
    Opened,
    PromptResult,
    Walks,
    open_walks_oracle,
    prompt_rng,
    sample_walks,
)

__all__ = [
    "Opened",
    "OracleTree",
    "PromptResult",
    "Walks",
    "open_walks_oracle",
    "oracle_tree",
    "pool_law",
    "prompt_rng",
    "row_stats",
    "sample_rows",
    "sample_walks",
    "save_pool",
    "summarize_task",
]
