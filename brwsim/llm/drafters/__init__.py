"""Real drafters for a real target (docs/drafters.md, "Real drafters"): a registry of classes.

SPECs (:func:`parse_drafter`, the one SPEC parser; every error is one line):

``early-exit:k=K``           the target's first K decoder layers + final norm + LM head (:mod:`.early_exit`).
``layerskip:skip=A-B``       the target with decoder layers A..B (1-based, inclusive) skipped; several
                             ranges with ``/``; ``layerskip:auto[,n=N]`` picks the block (:mod:`.layerskip`).
``lowbit:bits=N``            a copy of the target with every weight matrix rounded to N bits (:mod:`.lowbit`).
``model:DIR``                any transformers causal LM directory with the target's tokenizer (:mod:`.model_dir`).
``lookup[:n=N]``             prompt lookup (n-gram copy of the context), proposals only (:mod:`.lookup`).
``eagle-head[:quick]``       the trained EAGLE-style head (:mod:`.eagle`, :mod:`.eagle_head`).

A new drafter is one module with one class (a :class:`DraftModel` or a
:class:`Proposer`, decorated with :func:`register`) and one import line
below. The measurement (:func:`measure_prompt_drafters`: trees, values, the
direct check) and the summary (:func:`summarize_drafter_task` ->
:class:`~brwsim.llm.results.DrafterResult`) are shared by every drafter.
"""

from __future__ import annotations

from . import eagle, early_exit, layerskip, lookup, lowbit, model_dir  # noqa: F401  (registrations)
from ._base import DRAFTERS, Drafter, DraftModel, Proposer, examples, open_drafter, parse_drafter, register
from ._builders import chain_nodes, eagle_nodes, topq_nodes
from ._calibrate import STATS, Calibration, calibrate, heldout_ids, row_divergences, teacher_forced
from ._measure import BUILDERS, DraftedPrompt, DrafterSettings, measure_prompt_drafters
from ._report import print_drafters, summarize_drafter_task
from ._values import prefix_values, speculative_check, target_logP
from ._view import DraftView

__all__ = [
    "BUILDERS",
    "DRAFTERS",
    "STATS",
    "Calibration",
    "DraftModel",
    "DraftView",
    "DraftedPrompt",
    "Drafter",
    "DrafterSettings",
    "Proposer",
    "calibrate",
    "chain_nodes",
    "eagle_nodes",
    "examples",
    "heldout_ids",
    "measure_prompt_drafters",
    "open_drafter",
    "parse_drafter",
    "prefix_values",
    "print_drafters",
    "register",
    "row_divergences",
    "speculative_check",
    "summarize_drafter_task",
    "target_logP",
    "teacher_forced",
    "topq_nodes",
]
