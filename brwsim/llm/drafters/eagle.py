"""``eagle-head[:quick]``: the trained EAGLE-style head (:mod:`.eagle_head`) as a registered drafter."""

from __future__ import annotations

from ..._spec import Spec
from ..sources import TransformersModel
from ._base import DraftModel, register


@register("eagle-head")
class EagleHead(DraftModel):
    """Registration only: :meth:`open` trains (or loads) the head; the draft model is
    :class:`.eagle_head._drafter.EagleDraftModel`."""

    spec_keys = (set(), {"quick"})
    flags = ("quick",)
    needs = (TransformersModel,)
    example = "eagle-head[:quick]"

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> DraftModel:
        from . import eagle_head

        return eagle_head.open_drafter(target, quick="quick" in spec.params, log=log)
