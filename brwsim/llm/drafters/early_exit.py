"""``early-exit:k=K``: the target's first K decoder layers, its final norm and LM head (self-speculation).

The cut model shares the target's weights (no copy); its KV cache is its
own. With ``k`` = the model's layer count it is the target itself, and its
top-P-by-Q tree is the oracle (tests/llm/drafters/test_real_drafters.py).
"""

from __future__ import annotations

from ..._spec import Spec, number
from ...errors import BrwsimError
from ._base import register
from ._hf import HFDraftModel, layer_subset, model_footprint, n_layers, sub_source


@register("early-exit")
class EarlyExit(HFDraftModel):
    spec_keys = ({"k"}, set())
    example = "early-exit:k=12"

    @classmethod
    def check(cls, spec: Spec) -> None:
        number(spec, "k", integer=True, lo=1)

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> EarlyExit:
        L, k = n_layers(target.model), int(number(spec, "k", integer=True, lo=1))
        if k > L:
            raise BrwsimError(f"early-exit k must be in 1..{L} (the model has {L} layers), got {k}")
        sub = sub_source(target, layer_subset(target.model, range(k)), spec.text)
        fp = model_footprint(target.model, range(k), what=f"the first {k} of {L} layers, embeddings and LM head")
        return cls(sub, f"early-exit:k={k}", {"layers": L, "kept": k}, fp, target)
