"""Real drafters for a real target: specs, draft models and proposers (docs/drafters.md, "Real drafters").

A *draft model* has ``.name`` and ``.context(prompt_ids) -> DraftContext``;
a DraftContext has ``.logprobs(prefixes) -> f32[len(prefixes), V]`` (the
drafter's next-token log-probabilities at temperature 1 after prompt +
prefix; ``()`` is the root) and ``.passes`` (drafter forward passes so far).
Optionally ``.teacher_forced_rows(ids)``: held-out rows after ``ids[:2]``,
..., ``ids[:-1]``, for a drafter that cannot open a context on one token (the
EAGLE head reads the target's features); :func:`calibrate` uses it when
present. Temperature is applied by the caller on the rows. A *proposer* (``lookup``)
has no q: ``.propose(context_ids, P)`` gives token paths.

Specs (:func:`parse_llm_drafter`; every error is one line):

``early-exit:k=K``           the target's first K decoder layers + final norm + LM head.
``layerskip:skip=A-B``       the target with decoder layers A..B (1-based, inclusive) skipped;
                             several ranges with ``/`` (``skip=8-12/20-22``).
``layerskip:auto[,n=N]``     N layers (default a third) skipped: the contiguous block whose removal
                             gives the smallest KL(p || q) on held-out text (:func:`heldout_ids`).
``lowbit:bits=N``            a copy of the target with every weight matrix rounded to N bits
                             (per output channel, symmetric; N in 2..16).
``model:DIR``                any transformers causal LM directory with the target's tokenizer.
``lookup[:n=N]``             prompt lookup (n-gram copy of the context), proposals only.
``eagle-head[:quick]``       the trained EAGLE-style head (``brwsim.llm.eagle_head.open_drafter``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
import os
from collections.abc import Sequence

import numpy as np

from .._spec import parse_key_values
from ..errors import BrwsimError
from .hf import HFSource, _torch
from .temperature import temper

FAMILIES = ("early-exit", "layerskip", "lowbit", "model", "lookup", "eagle-head")
EXAMPLES = "layerskip:skip=10-19, layerskip:auto, lowbit:bits=4, model:DIR, lookup:n=3, eagle-head, early-exit:k=12"
HELDOUT_MODULES = ("textwrap", "string", "shlex")  # stdlib sources: neither HumanEval nor the pydoc topics


@dataclasses.dataclass(frozen=True)
class DrafterSpec:
    family: str
    params: dict
    text: str


def _int(text: str, key: str, value: str, lo: int, hi: int | None = None) -> int:
    try:
        v = int(value)
    except ValueError:
        raise BrwsimError(f"drafter {text!r}: {key} must be an integer, got {value!r}") from None
    if v < lo or (hi is not None and v > hi):
        rng = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        raise BrwsimError(f"drafter {text!r}: {key} must be {rng}, got {v}")
    return v


def _ranges(text: str, value: str) -> list[int]:
    """``8-12/20`` -> [8, ..., 12, 20] (1-based layer numbers)."""
    out: list[int] = []
    for part in filter(None, (x.strip() for x in value.split("/"))):
        a, dash, b = part.partition("-")
        lo = _int(text, "skip", a, 1)
        hi = _int(text, "skip", b, 1) if dash else lo
        if hi < lo:
            raise BrwsimError(f"drafter {text!r}: skip range {part!r} is empty; write A-B with A <= B")
        out += range(lo, hi + 1)
    if not out:
        raise BrwsimError(f"drafter {text!r}: skip needs layers, e.g. skip=10-19")
    return sorted(set(out))


def _keys(text: str, kv: dict, allowed: set[str]) -> None:
    bad = sorted(set(kv) - allowed)
    if bad:
        keys = ", ".join(sorted(allowed)) or "none"
        raise BrwsimError(f"drafter {text!r}: unknown key {bad[0]!r} (keys: {keys})")


def parse_llm_drafter(spec: str) -> DrafterSpec:
    """A drafter SPEC (module docstring) -> :class:`DrafterSpec`; one-line errors for bad specs."""
    text = (spec or "").strip() if isinstance(spec, str) else ""
    family, _, rest = text.partition(":")
    family = family.strip().lower()
    if family not in FAMILIES:
        raise BrwsimError(f"unknown LLM drafter {text!r}; examples: {EXAMPLES}")
    if family == "model":
        path = rest.strip()
        if not path:
            raise BrwsimError(f"drafter {text!r}: write model:DIR, a transformers model directory")
        return DrafterSpec("model", {"path": path}, text)
    flags = [x.strip() for x in rest.split(",") if x.strip() and "=" not in x]
    kv = parse_key_values(",".join(x for x in rest.split(",") if "=" in x), f"drafter {text!r}")
    return _FAMILY_PARSERS[family](text, kv, flags)


def _no_flags(text, flags, allowed=()):
    extra = [f for f in flags if f not in allowed]
    if extra:
        raise BrwsimError(f"drafter {text!r}: {extra[0]!r} is not key=value")


def _p_early_exit(text, kv, flags):
    _no_flags(text, flags)
    _keys(text, kv, {"k"})
    if "k" not in kv:
        raise BrwsimError(f"drafter {text!r} needs k, the number of layers kept, e.g. early-exit:k=12")
    return DrafterSpec("early-exit", {"k": _int(text, "k", kv["k"], 1)}, text)


def _p_layerskip(text, kv, flags):
    _no_flags(text, flags, ("auto",))
    _keys(text, kv, {"skip", "n"})
    auto = "auto" in flags
    if auto == ("skip" in kv):
        raise BrwsimError(f"drafter {text!r}: give skip=A-B or auto (e.g. layerskip:skip=10-19, layerskip:auto,n=8)")
    if "n" in kv and not auto:
        raise BrwsimError(f"drafter {text!r}: n= goes with auto (layerskip:auto,n=8)")
    if auto:
        return DrafterSpec("layerskip", {"auto": True, "n": _int(text, "n", kv["n"], 1) if "n" in kv else None}, text)
    return DrafterSpec("layerskip", {"skip": _ranges(text, kv["skip"])}, text)


def _p_lowbit(text, kv, flags):
    _no_flags(text, flags)
    _keys(text, kv, {"bits"})
    if "bits" not in kv:
        raise BrwsimError(f"drafter {text!r} needs bits, e.g. lowbit:bits=4")
    return DrafterSpec("lowbit", {"bits": _int(text, "bits", kv["bits"], 2, 16)}, text)


def _p_lookup(text, kv, flags):
    _no_flags(text, flags)
    _keys(text, kv, {"n"})
    return DrafterSpec("lookup", {"n": _int(text, "n", kv.get("n", "3"), 1, 16)}, text)


def _p_eagle(text, kv, flags):
    _no_flags(text, flags, ("quick",))
    _keys(text, kv, set())
    return DrafterSpec("eagle-head", {"quick": "quick" in flags}, text)


_FAMILY_PARSERS = {
    "early-exit": _p_early_exit,
    "layerskip": _p_layerskip,
    "lowbit": _p_lowbit,
    "lookup": _p_lookup,
    "eagle-head": _p_eagle,
}


# ---------------------------------------------------------------------------
# draft models


class HFDraftModel:
    """A draft model over a transformers model (an :class:`HFSource`): tree rows on its own KV cache."""

    def __init__(self, src: HFSource, name: str, info: dict | None = None):
        self.src, self.name, self.info = src, name, dict(info or {})

    def context(self, prompt_ids: Sequence[int]) -> HFDraftContext:
        return HFDraftContext(self.src, prompt_ids)


class HFDraftContext:
    def __init__(self, src: HFSource, prompt_ids):
        self.src = src
        self._calls0 = src.forward_calls
        self.inner = src.open(prompt_ids)

    @property
    def passes(self) -> int:
        return self.src.forward_calls - self._calls0

    def logprobs(self, prefixes):
        return self.inner.logprobs(prefixes)


def _share_weights_copy(model):
    """A structural copy of ``model`` whose parameters and buffers are the original tensors (no new memory)."""
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return copy.deepcopy(model, memo)


def layer_subset(model, keep: Sequence[int]):
    """The model with only decoder layers ``keep`` (0-based), weights shared; the KV cache is renumbered."""
    torch = _torch()
    m = _share_weights_copy(model)
    inner = getattr(m, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise BrwsimError(f"layer skipping needs a decoder-only model (model.layers); {type(model).__name__} has not")
    kept = [layers[i] for i in keep]
    for new, layer in enumerate(kept):
        attn = getattr(layer, "self_attn", None)
        if attn is not None and hasattr(attn, "layer_idx"):
            attn.layer_idx = new
    inner.layers = torch.nn.ModuleList(kept)
    m.config.num_hidden_layers = len(kept)
    types = getattr(m.config, "layer_types", None)
    if types:
        m.config.layer_types = [types[i] for i in keep]
    return m


def n_layers(model) -> int:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise BrwsimError(f"this drafter needs a decoder-only model with model.layers; {type(model).__name__} has not")
    return len(layers)


def quantize_weights(model, bits: int):
    """A copy of the model with every 2-D weight rounded to ``bits`` bits, symmetric, one scale per row."""
    torch = _torch()
    m = copy.deepcopy(model)
    qmax = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for _, p in m.named_parameters():
            if p.ndim == 2:
                w = p.float()
                scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / qmax
                p.copy_((torch.round(w / scale).clamp(-qmax, qmax) * scale).to(p.dtype))
    return m


def _sub_source(target: HFSource, model, name: str) -> HFSource:
    s = HFSource(model, target.tokenizer, name=name, device=target.device, max_prompt_tokens=target.max_prompt_tokens)
    return s


def check_same_tokenizer(target: HFSource, tok, vocab_size: int, where: str) -> None:
    """One-line error unless ``tok`` maps every token string to the same id as the target's tokenizer."""
    if vocab_size != target.vocab_size:
        raise BrwsimError(
            f"{where}: its LM head has {vocab_size} tokens but the target's has {target.vocab_size}; "
            "a drafter must share the target's tokenizer"
        )
    tv = target.tokenizer.get_vocab() if target.tokenizer is not None else None
    dv = tok.get_vocab() if tok is not None else None
    if tv != dv:
        diff = "no tokenizer" if dv is None or tv is None else f"{len(set(tv.items()) ^ set(dv.items()))} entries"
        raise BrwsimError(f"{where}: its tokenizer does not match the target's ({diff} differ); use the same family")


def open_model_dir(target: HFSource, path: str) -> HFDraftModel:
    from .models import load_source

    where = f"drafter model:{path}"
    if not os.path.isdir(os.path.expanduser(path)):
        raise BrwsimError(f"{where}: {path!r} is not a directory (give a transformers model directory)")
    src = load_source(path, device=target.device, max_prompt_tokens=target.max_prompt_tokens)
    check_same_tokenizer(target, src.tokenizer, src.vocab_size, where)
    return HFDraftModel(src, f"model:{os.path.basename(os.path.normpath(path))}", {"path": path})


def heldout_ids(target: HFSource, n_tokens: int = 256) -> list[int]:
    """Token ids of held-out text: the source of a few stdlib modules (code and docstrings; never a prompt)."""
    parts = []
    for mod in HELDOUT_MODULES:
        spec = importlib.util.find_spec(mod)
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            with open(spec.origin, encoding="utf-8") as f:
                parts.append(f.read())
    if not parts:
        raise BrwsimError(f"no held-out text: none of the stdlib modules {HELDOUT_MODULES} has a source file")
    ids = target.tokenizer("\n\n".join(parts), add_special_tokens=False)["input_ids"]
    return [int(t) for t in ids[: n_tokens + 1]]


def teacher_forced(model_or_ctx_rows, ids: Sequence[int]) -> np.ndarray:
    """Rows after ``ids[:1]``, ``ids[:2]``, ... (``[len(ids) - 1, V]``) from a context opened on ``ids[:1]``."""
    ctx = model_or_ctx_rows
    chain = [tuple(ids[1:i]) for i in range(1, len(ids))]
    return ctx.logprobs(chain)


def row_divergences(lp: np.ndarray, lq: np.ndarray) -> np.ndarray:
    """Per row: (cross-entropy H(p,q), KL(p||q), TV, top-1 agreement, H(p)) as ``[n, 5]`` (nats)."""
    lp = np.asarray(lp, np.float64)
    lq = np.asarray(lq, np.float64)
    p = np.exp(lp)
    H = -(p * np.where(p > 0, lp, 0.0)).sum(-1)
    ce = -(p * np.maximum(lq, -1e30)).sum(-1)
    tv = 0.5 * np.abs(p - np.exp(lq)).sum(-1)
    top = (np.argmax(lq, -1) == np.argmax(lp, -1)).astype(np.float64)
    return np.stack([ce, ce - H, tv, top, H], axis=-1)


def _auto_skip(target: HFSource, n: int | None, log=None) -> tuple[list[int], dict]:
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
        sub = _sub_source(target, layer_subset(target.model, [i for i in range(L) if i not in skip]), "probe")
        d = row_divergences(lp, teacher_forced(sub.open(ids[:1]), ids)).mean(0)
        scores.append((float(d[1]), -float(d[3]), a))
        if log:
            log(f"layerskip:auto: skip {a + 1}-{a + n}: held-out KL {d[1]:.3f}, top-1 {d[3]:.3f}")
    kl, neg_top, a = min(scores)
    return [i + 1 for i in range(a, a + n)], {"heldout_kl_choice": kl, "heldout_top1_choice": -neg_top}


def _open_layerskip(target: HFSource, params: dict, log=None) -> HFDraftModel:
    L = n_layers(target.model)
    info: dict = {"layers": L}
    if params.get("auto"):
        skip, more = _auto_skip(target, params.get("n"), log)
        info |= more
    else:
        skip = params["skip"]
    if max(skip) > L or len(skip) >= L:
        raise BrwsimError(f"layerskip: skip must name layers in 1..{L} and keep at least one; got {skip}")
    keep = [i for i in range(L) if i + 1 not in skip]
    info |= {"skipped": skip, "kept": len(keep)}
    name = f"layerskip:skip={_range_text(skip)}"
    return HFDraftModel(_sub_source(target, layer_subset(target.model, keep), name), name, info)


def _range_text(layers: Sequence[int]) -> str:
    out, start = [], None
    for i, x in enumerate(layers):
        if start is None:
            start = x
        if i + 1 == len(layers) or layers[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x != start else f"{x}")
            start = None
    return "/".join(out)


def _open_eagle(target, params, log=None):
    if importlib.util.find_spec("brwsim.llm.eagle_head") is None:
        raise BrwsimError("eagle-head is not available in this build")
    mod = importlib.import_module("brwsim.llm.eagle_head")
    return mod.open_drafter(target, quick=bool(params.get("quick")), log=log)


def open_llm_drafter(spec: str | DrafterSpec, target, log=None):
    """The draft model (or proposer) of a spec for a target :class:`HFSource`."""
    from .lookup import LookupProposer

    d = spec if isinstance(spec, DrafterSpec) else parse_llm_drafter(spec)
    if d.family == "lookup":
        return LookupProposer(d.params["n"])
    if not isinstance(target, HFSource):
        raise BrwsimError(
            f"drafter {d.text!r} needs a transformers target (a model name, directory or .gguf), "
            f"not {getattr(target, 'name', type(target).__name__)!r}"
        )
    if d.family == "early-exit":
        L = n_layers(target.model)
        if d.params["k"] > L:
            raise BrwsimError(f"early-exit k must be in 1..{L} (the model has {L} layers), got {d.params['k']}")
        k = d.params["k"]
        sub = _sub_source(target, layer_subset(target.model, range(k)), d.text)
        return HFDraftModel(sub, f"early-exit:k={k}", {"layers": L, "kept": k})
    if d.family == "layerskip":
        return _open_layerskip(target, d.params, log)
    if d.family == "lowbit":
        name = f"lowbit:bits={d.params['bits']}"
        model = quantize_weights(target.model, d.params["bits"])
        return HFDraftModel(_sub_source(target, model, name), name, {"bits": d.params["bits"]})
    if d.family == "model":
        return open_model_dir(target, d.params["path"])
    return _open_eagle(target, d.params, log)


def calibrate(target, draft, ids: Sequence[int], T: float = 1.0, K: int = 128, target_rows=None) -> dict:
    """Held-out (teacher-forced) statistics of a draft model at temperature T.

    ``stats``: mean cross-entropy, KL, TV, top-1 agreement, H(p) over the
    positions of ``ids``; ``rates[k] = E[p_u(x_k)]`` with x_k the drafter's
    k-th most likely token (Sequoia's positional acceptance rates), k < K.
    ``target_rows``: the target's teacher-forced rows at temperature 1, if already computed.
    """
    lp = temper(teacher_forced(target.open(ids[:1]), ids) if target_rows is None else target_rows, T)
    if hasattr(draft, "teacher_forced_rows"):  # a head that reads the target's features: rows from ids[:2] on
        lp, lq = lp[1:], temper(draft.teacher_forced_rows(ids), T)
    else:
        lq = temper(teacher_forced(draft.context(ids[:1]), ids), T)
    d = row_divergences(lp, lq)
    K = min(K, lq.shape[1])
    order = np.argpartition(-lq, K - 1, axis=1)[:, :K]
    order = np.take_along_axis(order, np.argsort(-np.take_along_axis(lq, order, 1), axis=1, kind="stable"), 1)
    rates = np.exp(np.take_along_axis(lp.astype(np.float64), order, 1)).mean(0)
    names = ("cross_entropy", "kl", "tv", "top1_agree", "target_entropy")
    out = {"positions": int(lp.shape[0]), "rates": rates}
    return out | {n: float(v) for n, v in zip(names, d.mean(0), strict=True)}
