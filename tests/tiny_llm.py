"""A tiny randomly initialised Llama for the real-model plumbing tests (no download)."""

from __future__ import annotations

import pytest


def tiny_llama(vocab: int, n_layers: int = 2, seed: int = 0):
    """Random weights, ``vocab`` tokens, peaked outputs (a deep, narrow oracle tree)."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=n_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)
    return model


def tiny_gemma3(vocab: int, n_layers: int = 3, seed: int = 0, window: int = 64):
    """A random Gemma 3 text model: query/key norms, the norms around attention and MLP outputs, a sliding
    and a full attention layer type with their own rotary tables (``window`` tokens of sliding attention)."""
    torch = pytest.importorskip("torch")
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=n_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=128,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention"] * (n_layers // 2) + ["sliding_attention"] * (n_layers % 2),
        query_pre_attn_scalar=8,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = Gemma3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # Gemma's norms scale by (1 + weight): make them matter
                p.copy_(torch.randn(p.shape) * 0.3)
        model.lm_head.weight.mul_(10.0)
    return model
