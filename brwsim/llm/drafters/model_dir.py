"""``model:DIR``: any transformers causal LM directory with the target's tokenizer, as the drafter."""

from __future__ import annotations

import os

from ..._spec import Spec
from ...errors import BrwsimError
from ..sources import load_source
from ._base import register
from ._hf import HFDraftModel, check_same_tokenizer


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@register("model")
class ModelDir(HFDraftModel):
    spec_keys = ({"path"}, set())
    positional = "path"
    example = "model:DIR"

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> ModelDir:
        path = spec.params["path"]
        where = f"drafter model:{path}"
        if not os.path.isdir(os.path.expanduser(path)):
            raise BrwsimError(f"{where}: {path!r} is not a directory (give a transformers model directory)")
        src = load_source(path, device=target.device, max_prompt_tokens=target.max_prompt_tokens)
        check_same_tokenizer(target, src.tokenizer, src.vocab_size, where)
        name = f"model:{os.path.basename(os.path.normpath(path))}"
        return cls(src, name, {"path": path}, _params(src.model) / _params(target.model))
