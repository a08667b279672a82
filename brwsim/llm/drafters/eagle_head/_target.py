"""What the head borrows from the frozen target: its features, embeddings, rotary tables, final norm and LM head."""

from __future__ import annotations

import hashlib

import torch

from ....errors import BrwsimError


def parts(model):
    """(decoder layers, final norm, LM head, token embeddings, rotary embedding) of a Llama-style causal LM."""
    inner = getattr(model, "model", None)
    got = [getattr(inner, n, None) for n in ("layers", "norm")]
    for name in ("get_output_embeddings", "get_input_embeddings"):  # (a model without them has none to give)
        getter = getattr(model, name, None)
        got.append(getter() if callable(getter) else None)
    got.append(getattr(inner, "rotary_emb", None))
    if any(g is None for g in got):
        raise BrwsimError(
            f"the eagle head needs a decoder-only model with model.layers, model.norm, model.rotary_emb, "
            f"token embeddings and an LM head; {type(model).__name__} has not"
        )
    return tuple(got)


@torch.no_grad()
def features(model, ids: torch.Tensor) -> torch.Tensor:
    """``[B, T, H]``: the target's last hidden state before its final norm, for every position of ``ids [B, T]``."""
    layers = parts(model)[0]
    kept = {}

    def hook(_mod, _inp, out):
        kept["h"] = out[0] if isinstance(out, tuple) else out

    handle = layers[-1].register_forward_hook(hook)
    try:
        model.model(input_ids=ids, use_cache=False)
    finally:
        handle.remove()
    return kept["h"].float()


def decode(model, feat: torch.Tensor) -> torch.Tensor:
    """Logits of features (the target's own final norm and LM head)."""
    _, norm, head, _, _ = parts(model)
    return head(norm(feat))


def rope(model, positions: torch.Tensor, dtype=torch.float32):
    """(cos, sin) of the target's rotary embedding at ``positions [B, T]``, in ``dtype``."""
    rot = parts(model)[4]
    dummy = torch.zeros((), dtype=dtype, device=positions.device)
    return rot(dummy, positions)


def fingerprint(target) -> dict:
    """Identifies the target in the head's cache key: its name, vocabulary and a hash of its LM head."""
    w = parts(target.model)[2].weight.detach().float().contiguous().cpu().numpy()
    return {"target": str(target.name), "vocab": int(w.shape[0]), "lm_head_sha256": hashlib.sha256(w).hexdigest()}
