"""Draft models made from a transformers target: the shared base and the model surgery (layers, weights)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from ...errors import BrwsimError
from ..sources import TransformersModel
from ..sources._hf import HFSource, _torch
from ._base import DraftModel, PassFootprint


def model_footprint(
    model, keep: Sequence[int] | None = None, bits: float | None = None, what: str = ""
) -> PassFootprint:
    """The :class:`PassFootprint` of one decoding step of a transformers decoder with only decoder layers ``keep``
    (0-based; None: all): every parameter outside the decoder layers (final norm, LM head) and those of the kept
    layers, but not an untied input embedding (a lookup of one row, :func:`lookup_ids`; a tied one is counted
    once, as the LM head); with ``bits``, every matrix (2-D weight) at ``bits`` bits and the rest (norms) at the
    target's dtype. KV cache: keys and values of the kept layers."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise BrwsimError(f"a footprint needs a decoder-only model with model.layers; {type(model).__name__} has not")
    keep = range(len(layers)) if keep is None else list(keep)
    skip = {id(p) for layer in layers for p in layer.parameters()} | lookup_ids(model)
    kept = {id(p): p for i in keep for p in layers[i].parameters()}
    params = {id(p): p for p in model.parameters() if id(p) not in skip} | kept
    mats = float(sum(p.numel() for p in params.values() if p.ndim == 2))
    rest = float(sum(p.numel() for p in params.values() if p.ndim != 2))
    weights = ((mats, bits), (rest, None)) if bits is not None else ((mats + rest, None),)
    cfg = getattr(model.config, "text_config", None) or model.config
    heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    n = len(keep)
    return PassFootprint(weights, 2 * n * kv * head_dim, n, heads * head_dim, what)


def lookup_ids(model) -> set[int]:
    """Ids of the input embedding's parameters when it is not the LM head's tensor: a decoding step looks up one
    row of it and reads none of the rest. Empty when the two are tied (the matrix is read once, as the LM head)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if emb is None:
        return set()
    tied = {id(p) for p in head.parameters()} if head is not None else set()
    return {id(p) for p in emb.parameters() if id(p) not in tied}


def read_params(model) -> float:
    """Parameters one decoding step of a transformers model reads: each tensor once, an untied input embedding
    left out (:func:`lookup_ids`)."""
    skip = lookup_ids(model)
    return float(sum(p.numel() for p in model.parameters() if id(p) not in skip))


class HFDraftModel(DraftModel):
    """A draft model over a transformers model (its own :class:`HFSource`): tree rows on its own KV cache.
    Subclasses make the model from the target's (a layer subset, a rounded copy, another directory) and declare
    what one of its passes reads (``fp``, a :class:`PassFootprint`), beside the target's own (``target``, a
    source whose model's decoding step is the unit of :meth:`cost_fraction`)."""

    needs = (TransformersModel,)

    def __init__(self, src, name: str, info: dict | None = None, fp: PassFootprint | None = None, target=None):
        self.src, self.name, self.info, self.fp = src, name, dict(info or {}), fp
        self.device = src.device
        if target is not None:
            self.target_footprint = model_footprint(target.model, what="the target's decoding step")
            self.target_bits = 8.0 * float(next(target.model.parameters()).element_size())

    def context(self, prompt_ids: Sequence[int]) -> HFDraftContext:
        return HFDraftContext(self.src, prompt_ids)

    def footprint(self) -> PassFootprint | None:
        return self.fp

    def timing_source(self):
        return self.src


class HFDraftContext:
    def __init__(self, src: HFSource, prompt_ids):
        self.src = src
        self.inner = src.open(prompt_ids)

    @property
    def passes(self) -> int:
        """Forward passes this context asked for (the prompt's included)."""
        return self.inner.passes

    def logprobs(self, prefixes):
        return self.inner.logprobs(prefixes)

    def query(self, prefixes, q):
        """The node query, answered where the drafter's model runs."""
        return self.inner.query(prefixes, q)

    def device_rows(self, prefixes):
        return self.inner.device_rows(prefixes)

    def known(self, prefix) -> bool | None:
        """Whether the prefix's row is already computed (asking for it costs no pass)."""
        return self.inner.known(prefix)

    def forget(self, prefixes) -> None:
        """Drop the stored rows of these prefixes (a context that stores none ignores it)."""
        self.inner.forget(prefixes)


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


def sub_source(target, model, name: str):
    s = HFSource(model, target.tokenizer, name=name, device=target.device, max_prompt_tokens=target.max_prompt_tokens)
    return s


def check_same_tokenizer(target, tok, vocab_size: int, where: str) -> None:
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


def range_text(layers: Sequence[int]) -> str:
    out, start = [], None
    for i, x in enumerate(layers):
        if start is None:
            start = x
        if i + 1 == len(layers) or layers[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x != start else f"{x}")
            start = None
    return "/".join(out)
