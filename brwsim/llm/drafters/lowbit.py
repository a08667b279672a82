"""``lowbit:bits=N``: a copy of the target with every weight matrix rounded to N bits (N in 2..16).

Per output channel, symmetric. Its modelled pass cost is N/32 of the target's
(fp32 weights; a decoding step reads the weights once).
"""

from __future__ import annotations

from ..._spec import Spec, number
from ._base import register
from ._hf import HFDraftModel, quantize_weights, sub_source


@register("lowbit")
class LowBit(HFDraftModel):
    spec_keys = ({"bits"}, set())
    example = "lowbit:bits=4"

    @classmethod
    def check(cls, spec: Spec) -> None:
        number(spec, "bits", integer=True, lo=2, hi=16)

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> LowBit:
        bits = int(number(spec, "bits", integer=True, lo=2, hi=16))
        name = f"lowbit:bits={bits}"
        return cls(sub_source(target, quantize_weights(target.model, bits), name), name, {"bits": bits}, bits / 32)
