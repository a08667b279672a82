"""Logits sources: the models whose token trees are measured (docs/llm.md, "Layout").

- :mod:`._base`: the interface (:class:`LogitsSource`, :class:`Context`,
  :class:`Walker`) and the capabilities a drafter may need
  (:class:`TransformersModel`, :class:`Tokenizes`).
- :mod:`._query`: the node query a context answers (:class:`NodeQuery`, :class:`NodeAnswer`), on the host or
  next to the model on its device.
- :mod:`._hf`: transformers causal LMs (GGUF files load through it); their contexts (KV-cache reuse, batched
  tree passes) in :mod:`._contexts`, the torch and device helpers in :mod:`._device`.
- :mod:`._file`: saved-logits files (:class:`FileSource`) and :class:`Recorder`.
- :mod:`._temperature`: :class:`TempSource`, any source at temperature T.
- :mod:`._models`: the named models (:data:`MODELS`), :func:`check_model` and :func:`load_source`.
- :mod:`._check`: cheap checks of a model's files before it loads (:func:`check_model_files`, no torch).
- :mod:`._prompts`: prompt sets (:data:`PROMPT_SETS`) and :func:`load_prompts`.
- :mod:`.rounds`: the batching engine: many prompts' model requests gathered into packed rounds
  (:func:`~.rounds.run_concurrently`, :func:`~.rounds.ask`), their time per phase as :class:`~.rounds.Accounts`.

A new source is a subclass of :class:`LogitsSource` (with its
:class:`Context`); it becomes reachable from ``--model`` with one branch in
:func:`load_source`. Importing this package needs only numpy.
"""

from __future__ import annotations

from ._base import Context, LogitsSource, Tokenizes, TransformersModel, Walker, WrappedWalker, Wrapper
from ._check import check_model_files, check_model_shapes
from ._file import FILE_FORMAT, FileSource, Recorder, save_logits
from ._models import MODELS, cache_dir, check_model, converted, load_source
from ._prompts import SOURCES as PROMPT_SETS
from ._prompts import Prompt, load_prompts
from ._query import DeviceQuery, HostQuery, NodeAnswer, NodeQuery, Transfer, answer_rows, to_evaluate
from ._temperature import TempSource, check_temperature, temper

__all__ = [
    "FILE_FORMAT",
    "MODELS",
    "PROMPT_SETS",
    "Context",
    "FileSource",
    "DeviceQuery",
    "HostQuery",
    "LogitsSource",
    "NodeAnswer",
    "NodeQuery",
    "Prompt",
    "Recorder",
    "TempSource",
    "Tokenizes",
    "Transfer",
    "TransformersModel",
    "Walker",
    "WrappedWalker",
    "Wrapper",
    "answer_rows",
    "cache_dir",
    "check_model",
    "check_model_files",
    "check_model_shapes",
    "check_temperature",
    "converted",
    "load_prompts",
    "load_source",
    "save_logits",
    "temper",
    "to_evaluate",
]
