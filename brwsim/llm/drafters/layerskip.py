"""``layerskip:skip=A-B[/C-D]`` and ``layerskip:auto[,n=N]``: the target with decoder layers skipped.

``skip``: layers A..B (1-based, inclusive; several ranges with ``/``) are
skipped. ``auto``: N layers (default a third) skipped: the contiguous block
whose removal gives the smallest KL(p || q) on held-out text. Weights are
shared with the target (no copy).
"""

from __future__ import annotations

from ..._spec import Spec, number
from ...errors import BrwsimError
from ._base import register
from ._calibrate import heldout_ids, row_divergences, teacher_forced
from ._hf import HFDraftModel, layer_subset, model_footprint, n_layers, range_text, sub_source


def _ranges(spec: Spec, value: str) -> list[int]:
    """``8-12/20`` -> [8, ..., 12, 20] (1-based layer numbers)."""
    out: list[int] = []
    for part in filter(None, (x.strip() for x in value.split("/"))):
        a, dash, b = part.partition("-")
        if not (a.strip().isdigit() and (not dash or b.strip().isdigit())):
            raise BrwsimError(f"{spec.where}: skip must be layer ranges A-B (1-based), e.g. skip=10-19; got {part!r}")
        lo, hi = int(a), int(b) if dash else int(a)
        if lo < 1 or hi < lo:
            raise BrwsimError(f"{spec.where}: skip range {part!r} is empty; write A-B with 1 <= A <= B")
        out += range(lo, hi + 1)
    if not out:
        raise BrwsimError(f"{spec.where}: skip needs layers, e.g. skip=10-19")
    return sorted(set(out))


def auto_skip(target, n: int | None, log=None) -> tuple[list[int], dict]:
    """The contiguous block of ``n`` middle layers whose removal gives the smallest held-out KL(p || q)."""
    L = n_layers(target.model)
    n = n if n is not None else max(1, L // 3)
    if not 1 <= n <= L - 2:
        raise BrwsimError(f"layerskip:auto,n={n}: n must be in 1..{L - 2} (the model has {L} layers)")
    ids = heldout_ids(target, 128)
    lp = teacher_forced(target.open(ids[:1]), ids)
    scores = []
    for a in range(1, L - n):  # keep the first and the last layer
        skip = list(range(a, a + n))
        sub = sub_source(target, layer_subset(target.model, [i for i in range(L) if i not in skip]), "probe")
        d = row_divergences(lp, teacher_forced(sub.open(ids[:1]), ids)).mean(0)
        scores.append((float(d[1]), -float(d[3]), a))
        if log:
            log(f"layerskip:auto: skip {a + 1}-{a + n}: held-out KL {d[1]:.3f}, top-1 {d[3]:.3f}")
    kl, neg_top, a = min(scores)
    return [i + 1 for i in range(a, a + n)], {"heldout_kl_choice": kl, "heldout_top1_choice": -neg_top}


@register("layerskip")
class LayerSkip(HFDraftModel):
    spec_keys = (set(), {"skip", "auto", "n"})
    flags = ("auto",)
    example = "layerskip:skip=10-19, layerskip:auto"

    @classmethod
    def check(cls, spec: Spec) -> None:
        auto = "auto" in spec.params
        if auto == ("skip" in spec.params):
            raise BrwsimError(f"{spec.where}: give skip=A-B or auto (e.g. layerskip:skip=10-19, layerskip:auto,n=8)")
        if "n" in spec.params and not auto:
            raise BrwsimError(f"{spec.where}: n= goes with auto (layerskip:auto,n=8)")
        if auto and "n" in spec.params:
            number(spec, "n", integer=True, lo=1)
        if not auto:
            _ranges(spec, spec.params["skip"])

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> LayerSkip:
        L = n_layers(target.model)
        info: dict = {"layers": L}
        if "auto" in spec.params:
            n = int(number(spec, "n", integer=True, lo=1)) if "n" in spec.params else None
            skip, more = auto_skip(target, n, log)
            info |= more
        else:
            skip = _ranges(spec, spec.params["skip"])
        if max(skip) > L or len(skip) >= L:
            raise BrwsimError(f"layerskip: skip must name layers in 1..{L} and keep at least one; got {skip}")
        keep = [i for i in range(L) if i + 1 not in skip]
        info |= {"skipped": skip, "kept": len(keep)}
        name = f"layerskip:skip={range_text(skip)}"
        fp = model_footprint(target.model, keep, what=f"{len(keep)} of {L} layers, embeddings and LM head")
        return cls(sub_source(target, layer_subset(target.model, keep), name), name, info, fp, target)
