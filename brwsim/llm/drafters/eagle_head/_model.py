"""The draft head: fc(concat(feature, next token's embedding)) -> one decoder layer -> next feature.

The published EAGLE design on the target's own widths (SmolLM2-135M: hidden
576, 9 query heads, 3 key/value heads, MLP 1536): a linear map of the
concatenated (feature of token t, embedding of token t + 1) to the hidden
width, then one pre-norm Llama decoder layer (rotary self-attention with
grouped key/value heads, SwiGLU MLP, both residual). Its output is the
predicted feature of token t + 1, decoded by the target's frozen final norm
and LM head. Features are the target's last hidden state *before* the final
norm (the output of its last decoder layer), divided by ``scale`` (their
root-mean-square on the training text) inside the head.

Attention takes explicit key/value tensors and a boolean mask, so one function
serves training (several drafting depths unrolled, each depth attending to the
target-feature positions before it and to its own chain) and drafting (a
prompt cache plus tree nodes that see their ancestors only).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Head(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, inter: int, eps: float, scale: float = 1.0):
        super().__init__()
        self.hidden, self.heads, self.kv_heads = hidden, heads, kv_heads
        self.head_dim = hidden // heads
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        self.in_norm = RMSNorm(hidden, eps)
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.post_norm = RMSNorm(hidden, eps)
        self.gate = nn.Linear(hidden, inter, bias=False)
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)
        self.register_buffer("scale", torch.tensor(float(scale)))

    def reset(self, generator: torch.Generator) -> None:
        """Seeded initialisation: normal(0, 0.02) matrices, zero biases, unit norms."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                with torch.no_grad():
                    m.weight.copy_(torch.randn(m.weight.shape, generator=generator) * 0.02)
                    if m.bias is not None:
                        m.bias.zero_()
            elif isinstance(m, RMSNorm):
                with torch.no_grad():
                    m.weight.fill_(1.0)

    def embed_in(self, feat, emb):
        """``[..., H]`` target-scale features and token embeddings -> the layer's input."""
        return self.fc(torch.cat([feat / self.scale, emb], dim=-1))

    def layer(self, x, cos, sin, k_prev=None, v_prev=None, mask=None):
        """One decoder layer on ``x [B, T, H]``; keys/values ``[B, kv, S, d]`` before it; ``mask [T, S + T]``.

        Returns (output feature at target scale ``[B, T, H]``, this call's keys, values).
        """
        B, T, _ = x.shape
        h = self.in_norm(x)
        q = self.q(h).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys = k if k_prev is None else torch.cat([k_prev, k], dim=2)
        vals = v if v_prev is None else torch.cat([v_prev, v], dim=2)
        rep = self.heads // self.kv_heads
        a = F.scaled_dot_product_attention(
            q, keys.repeat_interleave(rep, dim=1), vals.repeat_interleave(rep, dim=1), attn_mask=mask
        )
        x = x + self.o(a.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))
        h = self.post_norm(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return x * self.scale, k, v


def head_for(model, scale: float = 1.0) -> Head:
    """A head shaped like the target ``model`` (a transformers Llama-style causal LM)."""
    cfg = getattr(model.config, "text_config", None) or model.config
    return Head(
        hidden=int(cfg.hidden_size),
        heads=int(cfg.num_attention_heads),
        kv_heads=int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads),
        inter=int(cfg.intermediate_size),
        eps=float(getattr(cfg, "rms_norm_eps", 1e-6)),
        scale=scale,
    )
