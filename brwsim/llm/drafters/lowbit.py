"""``lowbit:bits=N``: a copy of the target with every weight matrix rounded to N bits (N in 2..16).

Per output channel, symmetric. Its pass reads every matrix at N bits (norms at
the target's dtype) and the target's KV cache: on a device whose target runs
at B bits per weight it reads about N/B of the target's weight bytes (its
footprint, :func:`._hf.model_footprint`; here on the CPU the rounded copy
runs in the target's fp32, and its pass is timed).
"""

from __future__ import annotations

from ..._spec import Spec, number
from ._base import register
from ._hf import HFDraftModel, model_footprint, quantize_weights, sub_source


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
        fp = model_footprint(target.model, bits=bits, what=f"every matrix at {bits} bits")
        return cls(sub_source(target, quantize_weights(target.model, bits), name), name, {"bits": bits}, fp, target)
