"""Tiny randomly initialised models for the real-model plumbing tests (no download): a Llama and a Gemma 3."""

from __future__ import annotations

import pytest

# the shape both tiny models share: 16 wide, 2 query heads on 1 key/value head, no special tokens
SHAPE = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, bos_token_id=None,
             eos_token_id=None, pad_token_id=None)  # fmt: skip


def _random(make, seed: int, norms: bool = False):
    """``make()`` with torch seeded, its LM head scaled up (peaked outputs: a deep, narrow oracle tree) and, with
    ``norms``, random norm weights."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    model = make()
    with torch.no_grad():
        if norms:  # Gemma's norms scale by (1 + weight), zero at initialisation: make them matter
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(torch.randn(p.shape) * 0.3)
        model.lm_head.weight.mul_(10.0)
    return model


def tiny_llama(vocab: int, n_layers: int = 2, seed: int = 0):
    """Random weights, ``vocab`` tokens, peaked outputs (a deep, narrow oracle tree)."""
    pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, num_hidden_layers=n_layers, max_position_embeddings=64, **SHAPE)
    return _random(lambda: LlamaForCausalLM(cfg), seed)


def tiny_gemma3(vocab: int, n_layers: int = 3, seed: int = 0, window: int = 64):
    """A random Gemma 3 text model: query/key norms, the norms around attention and MLP outputs, a sliding
    and a full attention layer type with their own rotary tables (``window`` tokens of sliding attention)."""
    pytest.importorskip("torch")
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    types = ["sliding_attention", "full_attention"] * (n_layers // 2) + ["sliding_attention"] * (n_layers % 2)
    cfg = Gemma3TextConfig(vocab_size=vocab, num_hidden_layers=n_layers, head_dim=8, max_position_embeddings=128,
                           sliding_window=window, layer_types=types, query_pre_attn_scalar=8, **SHAPE)  # fmt: skip
    return _random(lambda: Gemma3ForCausalLM(cfg), seed, norms=True)


# a tiny word-level vocabulary and prompts over it (speculative decoding's exactness tests, bfloat16 end to end)
WORDS = ["<unk>"] + [f"w{i}" for i in range(11)]
V = len(WORDS)
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [7, 7, 2, 10, 1], [5, 8]]


def word_tokenizer(words):
    """A transformers tokenizer over the given words (one id each, in order)."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0])
