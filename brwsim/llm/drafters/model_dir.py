"""``model:DIR``: any transformers causal LM directory with the target's tokenizer, as the drafter."""

from __future__ import annotations

import dataclasses
import os

from ..._spec import Spec
from ...errors import BrwsimError
from ..sources import load_source
from ._base import register
from ._hf import HFDraftModel, check_same_tokenizer, model_footprint


def check_dir(spec: Spec) -> str:
    """The SPEC's directory, or a one-line error when it is not one (cheap: run it before loading any model)."""
    path = spec.params["path"]
    if not os.path.isdir(os.path.expanduser(path)):
        raise BrwsimError(f"drafter model:{path}: {path!r} is not a directory (give a transformers model directory)")
    return path


@register("model")
class ModelDir(HFDraftModel):
    """Its pass reads its own weights at its own parameter dtype (as loaded) and its own KV cache
    (:func:`._hf.model_footprint` of its model)."""

    spec_keys = ({"path"}, set())
    positional = "path"
    example = "model:DIR"

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> ModelDir:
        path = check_dir(spec)
        where = f"drafter model:{path}"
        src = load_source(path, device=target.device, max_prompt_tokens=target.max_prompt_tokens)
        check_same_tokenizer(target, src.tokenizer, src.vocab_size, where)
        name = f"model:{os.path.basename(os.path.normpath(path))}"
        bits = 8.0 * float(next(src.model.parameters()).element_size())
        fp = model_footprint(src.model, what=f"its own model ({name}) at its own dtype ({bits:g} bits)")
        fp = dataclasses.replace(fp, weights=((fp.params, bits),))
        return cls(src, name, {"path": path}, fp, target)
