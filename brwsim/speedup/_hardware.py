"""Accelerators and target-model shapes for the roofline cost model (datasheet figures; docs/speedup.md).

A :class:`Hardware` is a memory bandwidth (bytes/s), a peak dense FLOP/s and a
fixed per-call overhead (s). A :class:`ModelShape` is what the roofline needs to
know of the target model: its parameter count, and for the KV cache and the
attention FLOPs its layers, KV heads, head size and attention width.
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import BrwsimError
from ..llm.drafters._hf import read_params


@dataclasses.dataclass(frozen=True)
class Hardware:
    """A machine for the roofline: ``bandwidth`` bytes/s, ``flops`` dense FLOP/s, ``overhead`` seconds per call."""

    name: str
    bandwidth: float
    flops: float
    overhead: float = 0.0
    source: str = "user"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Datasheet peaks: memory bandwidth and dense BF16 tensor-core FLOP/s (the datasheets print the 2:4-sparse
# figure, twice the dense one). Sources are cited in docs/speedup.md.
PRESETS = {
    "h100": Hardware("h100", 3.35e12, 989e12, 0.0, "NVIDIA H100 SXM datasheet: 3.35 TB/s, 989 TFLOP/s dense BF16"),
    "h200": Hardware("h200", 4.8e12, 989e12, 0.0, "NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e, 989 TFLOP/s dense BF16"),
    "a100": Hardware("a100", 2.039e12, 312e12, 0.0, "NVIDIA A100 80GB SXM datasheet: 2,039 GB/s, 312 TFLOP/s BF16"),
    "l4": Hardware("l4", 300e9, 121e12, 0.0, "NVIDIA L4 datasheet: 300 GB/s GDDR6, 121 TFLOP/s dense BF16"),
}


def parse_custom(text: str) -> Hardware:
    """``custom:bw=3.35e12,flops=989e12[,overhead=2e-3]`` (bytes/s, FLOP/s, seconds) as a :class:`Hardware`."""
    body = text.split(":", 1)[1] if ":" in text else ""
    vals: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        k, sep, v = part.partition("=")
        if not sep or k not in ("bw", "flops", "overhead"):
            raise BrwsimError(f"bad hardware {text!r}: expected custom:bw=BYTES_PER_S,flops=FLOP_PER_S[,overhead=S]")
        try:
            vals[k] = float(v)
        except ValueError:
            raise BrwsimError(f"bad hardware {text!r}: {k}={v!r} is not a number") from None
    if "bw" not in vals or "flops" not in vals:
        raise BrwsimError(f"bad hardware {text!r}: custom needs both bw= (bytes/s) and flops= (FLOP/s)")
    for k, v in vals.items():
        if not math.isfinite(v) or v < 0 or (v == 0 and k != "overhead"):
            need = "a finite number >= 0" if k == "overhead" else "a finite number > 0"
            raise BrwsimError(f"bad hardware {text!r}: {k} must be {need}, got {v:g}")
    return Hardware("custom", vals["bw"], vals["flops"], vals.get("overhead", 0.0), "user")


def preset(name: str) -> Hardware:
    if name not in PRESETS:
        raise BrwsimError(
            f"unknown hardware {name!r}; use one of {', '.join(PRESETS)}, cpu-measured, cpu-roofline, cpu-achieved, "
            "csv:FILE or custom:bw=BYTES_PER_S,flops=FLOP_PER_S"
        )
    return PRESETS[name]


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """A target model for the roofline: ``params`` weights; per layer ``kv_heads`` x ``head_dim`` cached keys and
    values, and an attention width ``attn_dim`` (query heads x head size) for the attention FLOPs."""

    name: str
    params: float
    layers: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    attn_dim: int = 0

    def kv_values_per_token(self) -> int:
        """Cached numbers per context token (keys and values of every layer)."""
        return 2 * self.layers * self.kv_heads * self.head_dim

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Llama-3-family shapes (config.json of Llama 3.2 1B, Llama 3.1 8B and 70B); parameter counts rounded.
MODEL_PRESETS = {
    "llama-1b": ModelShape("llama-1b", 1.24e9, 16, 8, 64, 2048),
    "llama-8b": ModelShape("llama-8b", 8.03e9, 32, 8, 128, 4096),
    "llama-70b": ModelShape("llama-70b", 70.6e9, 80, 8, 128, 8192),
}


def model_shape(name: str | None = None, params: float | None = None) -> ModelShape:
    """A preset shape by name, or a bare parameter count (no KV cache, no attention FLOPs), or a preset with its
    parameter count replaced."""
    if name is not None and name not in MODEL_PRESETS:
        raise BrwsimError(f"unknown target model shape {name!r}; use one of {', '.join(MODEL_PRESETS)} or --params N")
    if params is not None and not (0 < params < math.inf):
        raise BrwsimError(f"--params must be a positive parameter count, e.g. 8e9; got {params!r}")
    if name is None:
        if params is None:
            raise BrwsimError("the roofline needs the target's size: give --params N (e.g. 8e9) or --target llama-8b")
        return ModelShape(f"{params:.3g} params", float(params))
    shape = MODEL_PRESETS[name]
    return dataclasses.replace(shape, params=float(params)) if params is not None else shape


def shape_of_hf(model, name: str = "hf") -> ModelShape:
    """The shape of a loaded ``transformers`` model: the parameters a decoding step reads (each tensor once; an
    untied input embedding, a lookup, left out: :func:`brwsim.llm.drafters._hf.read_params`)."""
    cfg = getattr(model.config, "text_config", None) or model.config
    heads = int(cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    params = read_params(model)
    return ModelShape(name, params, int(cfg.num_hidden_layers), kv, head_dim, heads * head_dim)
