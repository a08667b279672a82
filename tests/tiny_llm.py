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
