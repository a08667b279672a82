"""A trained EAGLE-style draft head for a real target model (docs/drafters.md, "A trained draft head").

:func:`open_drafter` trains the head for a target (or loads it from the user
cache directory, beside the converted model) and returns a draft model:
``.name`` and ``.context(prompt_ids)``, whose ``.logprobs(prefixes)`` gives
the drafter's next-token log-probabilities after the prompt and each prefix
(``()`` is the root: the first draft token), and whose ``.passes`` counts
head forward passes. Importing this package needs only numpy; torch and
transformers load when a drafter is opened.

- ``_config.py``: :class:`HeadConfig`, the quick and full budgets.
- ``_data.py``: the training text (the Python standard library's sources).
- ``_target.py``: the target's features, embeddings, rotary tables, norm and LM head.
- ``_model.py``: the head (fc + one decoder layer).
- ``_unroll.py``: the head over windows at several drafting depths; the loss; held-out statistics.
- ``_train.py``: training, the cache, the weights hash.
- ``_drafter.py``: the draft model and its per-prompt context.
"""

from __future__ import annotations

import dataclasses

from ....errors import BrwsimError
from ... import require_llm
from ._config import FULL, QUICK, HeadConfig, config_from

NAME = "eagle-head"


def open_drafter(target, quick: bool = False, log=None, progress: bool = True, config: HeadConfig | None = None):
    """The trained head for ``target`` (an :class:`~brwsim.llm.sources._hf.HFSource`) as a draft model.

    ``quick`` picks the small budget (tests, ``reproduce --quick``); ``config``
    overrides both. ``log`` (a callable taking one line) hears what happens.
    """
    require_llm()
    from ...sources import TransformersModel
    from ._drafter import EagleDraftModel
    from ._train import train

    if not isinstance(target, TransformersModel):  # the registry checks this too (open_drafter)
        raise BrwsimError(
            f"the {NAME} drafter needs a transformers target (a model name or directory), not {target.name!r}"
        )
    cfg = config if config is not None else (QUICK if quick else FULL)
    if not isinstance(cfg, HeadConfig):
        raise BrwsimError(f"eagle head config must be a HeadConfig, got {type(cfg).__name__}")
    head, meta = train(target, cfg, progress=progress, log=log)
    quick = dataclasses.replace(cfg, corpus=QUICK.corpus) == QUICK
    name = NAME + ("-quick" if quick else "") + ("-chat" if cfg.corpus == "sharegpt" else "")
    return EagleDraftModel(target, head, meta, name=name)


__all__ = ["FULL", "NAME", "QUICK", "HeadConfig", "config_from", "open_drafter"]
