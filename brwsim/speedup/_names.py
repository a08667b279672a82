"""The one place that knows every preset's names: help texts and errors are generated from here.

Hardware (:data:`brwsim.speedup.PRESETS` and the measured kinds), target
shapes (:data:`brwsim.speedup.MODEL_PRESETS`), named real models
(:data:`brwsim.llm.sources.MODELS`), prompt sets and real drafters (the
registry of :mod:`brwsim.llm.drafters`). A new preset is a row in its table
(or a registered class); its name then appears here by itself.
"""

from __future__ import annotations

from ..llm.drafters import examples as _drafter_examples
from ..llm.sources import MODELS, PROMPT_SETS
from ._hardware import MODEL_PRESETS, PRESETS

MEASURED = ("cpu-measured", "cpu-roofline", "cpu-achieved")
HARDWARE_FORMS = ("csv:FILE", "custom:bw=BYTES_PER_S,flops=FLOP_PER_S[,overhead=S]")


def hardware_names() -> str:
    return ", ".join([*PRESETS, *MEASURED, *HARDWARE_FORMS])


def target_names() -> str:
    return ", ".join(MODEL_PRESETS)


def model_names() -> str:
    return ", ".join(MODELS)


def prompt_names() -> str:
    return ", ".join([*PROMPT_SETS, "a .jsonl file"])


def drafter_names() -> str:
    return _drafter_examples()
