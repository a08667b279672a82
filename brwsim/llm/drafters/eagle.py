"""``eagle-head[:quick][,chat]``: the trained EAGLE-style head (:mod:`.eagle_head`) as a registered drafter;
``chat`` trains it on ShareGPT training conversations instead of the Python standard library."""

from __future__ import annotations

from ..._spec import Spec
from ..sources import TransformersModel
from ._base import DraftModel, register


@register("eagle-head")
class EagleHead(DraftModel):
    """Registration only: :meth:`open` trains (or loads) the head; the draft model is
    :class:`.eagle_head._drafter.EagleDraftModel`."""

    spec_keys = (set(), {"quick", "chat"})
    flags = ("quick", "chat")
    needs = (TransformersModel,)
    example = "eagle-head[:quick][,chat]"

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> DraftModel:
        from . import eagle_head

        cfg = eagle_head.config_from("quick" in spec.params, corpus="sharegpt" if "chat" in spec.params else "stdlib")
        return eagle_head.open_drafter(target, log=log, config=cfg)
