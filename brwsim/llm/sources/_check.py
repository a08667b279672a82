"""Cheap checks of a model before it loads: one-line errors for what would otherwise fail deep inside torch.

:func:`check_model_files` reads only a model's small files (``config.json``, the safetensors headers, a
GGUF file's magic) and needs no torch: a missing, empty, truncated or garbage weights file, a config that is
not JSON or names no ``model_type``. :func:`check_model_shapes` builds the model on torch's ``meta`` device
(no memory, no weights read) and compares every parameter with the shapes the weights file holds: a
``vocab_size`` edited in ``config.json``, or a ``model_type`` whose parameters are not in the file (which
transformers would otherwise fill with random numbers). :func:`check_tokenizer` compares the tokenizer with the
embedding. :func:`check_model` runs the file checks of any ``--model`` value; :func:`brwsim.llm.sources.load_source`
runs all of them before it reads a weight.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
from pathlib import Path

from ...errors import BrwsimError

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"
MAX_HEADER = 100_000_000  # the safetensors format's own limit on its JSON header
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}  # fmt: skip
GGUF_MAGIC = b"GGUF"


def _json_file(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise BrwsimError(f"{what}: {path} cannot be read ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError):
        raise BrwsimError(f"{what}: {path} is not a JSON file (a damaged copy? copy the model again)") from None


def safetensors_header(path: Path, what: str = "model") -> dict:
    """The tensors a safetensors file holds, ``{name: (dtype, shape)}``, its header checked against its size:
    an empty, truncated or garbage file is a one-line :class:`BrwsimError` (nothing but the header is read)."""
    fix = "a damaged copy: copy or convert the model again"
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            raw = f.read(n) if n is not None and 0 < n <= min(MAX_HEADER, size - 8) else None
    except OSError as e:
        raise BrwsimError(f"{what}: {path} cannot be read ({e.strerror or e})") from None
    if size == 0:
        raise BrwsimError(f"{what}: {path} is empty ({fix})")
    try:
        header = json.loads(raw.decode("utf-8")) if raw is not None else None
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict):
        raise BrwsimError(f"{what}: {path} is not a safetensors file: its {size} bytes hold no valid header ({fix})")
    data = size - 8 - n
    out, end = {}, 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        shape, offsets = (t.get("shape"), t.get("data_offsets")) if isinstance(t, dict) else (None, None)
        ok = isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
        ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
        ok = ok and t.get("dtype") in DTYPE_BYTES and 0 <= offsets[0] <= offsets[1]
        if not ok or offsets[1] - offsets[0] != DTYPE_BYTES[t["dtype"]] * math.prod(shape):
            raise BrwsimError(f"{what}: {path}: tensor {name!r} has a malformed header entry ({fix})")
        out[name] = (t["dtype"], tuple(shape))
        end = max(end, offsets[1])
    if end != data:
        raise BrwsimError(
            f"{what}: {path} holds {data} bytes of tensor data but its header describes {end}: "
            f"{'truncated' if data < end else 'corrupt'} ({fix})"
        )
    return out


def weight_shapes(where: Path, what: str = "model") -> dict | None:
    """``{name: shape}`` of every tensor in a model directory's safetensors file(s), each header checked; None
    when the weights are a ``pytorch_model.bin`` (no cheap check). One-line error when there are no weights."""
    single, index = where / SAFETENSORS, where / SAFETENSORS_INDEX
    if single.is_file():
        files = [single]
    elif index.is_file():
        idx = _json_file(index, what)
        wmap = idx.get("weight_map") if isinstance(idx, dict) else None
        if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
            raise BrwsimError(f"{what}: {index} has no 'weight_map' of tensor names to files (a damaged copy?)")
        files = [where / f for f in sorted(set(wmap.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise BrwsimError(f"{what}: {index} names {missing[0]}, which is not in {where} (an incomplete copy?)")
    elif (where / TORCH_BIN).is_file():
        if (where / TORCH_BIN).stat().st_size == 0:
            raise BrwsimError(f"{what}: {where / TORCH_BIN} is empty (a damaged copy: copy the model again)")
        return None
    else:
        raise BrwsimError(f"{what}: {where} has no weights ({SAFETENSORS}, {SAFETENSORS_INDEX} or {TORCH_BIN})")
    out = {}
    for f in files:
        out |= {k: shape for k, (_, shape) in safetensors_header(f, what).items()}
    return out


def check_model_files(path: str | os.PathLike, what: str = "model") -> Path:
    """A transformers model directory, checked without torch and without reading a weight: ``config.json``
    (JSON, a ``model_type``) and the weights' headers (:func:`weight_shapes`). Returns the directory.
    ``what`` names it in the errors (e.g. ``drafter model:DIR``). Usable before any slow work."""
    where = Path(os.path.expanduser(str(path)))
    if not where.is_dir():
        raise BrwsimError(f"{what}: {str(path)!r} is not a directory (give a transformers model directory)")
    cfg_path = where / "config.json"
    if not cfg_path.is_file():
        raise BrwsimError(f"{what}: model directory {str(path)!r} has no config.json (not a transformers model)")
    cfg = _json_file(cfg_path, what)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise BrwsimError(f"{what}: {cfg_path} names no model_type (not a transformers model config)")
    weight_shapes(where, what)
    return where


def check_gguf_file(path: str | os.PathLike, what: str = "model") -> Path:
    """A ``.gguf`` file that exists and starts with the GGUF magic (one-line error otherwise)."""
    p = Path(os.path.expanduser(str(path)))
    if not p.is_file():
        raise BrwsimError(f"{what}: model file {str(path)!r} does not exist")
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise BrwsimError(f"{what}: {p} cannot be read ({e.strerror or e})") from None
    if magic != GGUF_MAGIC:
        raise BrwsimError(f"{what}: {p} is not a GGUF file ({'empty' if not magic else 'no GGUF magic'})")
    return p


@contextlib.contextmanager
def quiet_transformers():
    """transformers' progress bars and warnings off (a load report, a "Loading weights" bar): brwsim checks
    what they would warn about itself, and its errors stay one line."""
    from transformers.utils import logging as tlog

    level, bars = tlog.get_verbosity(), tlog.is_progress_bar_enabled()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        tlog.set_verbosity(level)
        if bars:
            tlog.enable_progress_bar()


def _meta_model(where: Path, what: str):
    """The model of a directory's ``config.json`` on the meta device (no memory), or a one-line error."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with quiet_transformers(), torch.device("meta"):
            cfg = AutoConfig.from_pretrained(str(where))
            return AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # noqa: BLE001 - transformers' many error types on a user's config: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        cfg = where / "config.json"
        raise BrwsimError(f"{what}: {cfg} does not describe a causal LM transformers knows: {first}") from None


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix) + 1 :] if prefix and name.startswith(prefix + ".") else name


def check_model_shapes(path: str | os.PathLike, what: str = "model") -> None:
    """Every parameter of the model ``config.json`` describes is in the weights with the same shape (checked on
    torch's meta device: no weight is read). A weight the file lacks would be random, one of another shape
    (an edited ``vocab_size``) fails deep in the load: both are one-line errors. Needs the llm extra."""
    where = check_model_files(path, what)
    have = weight_shapes(where, what)
    if have is None:
        return
    meta = _meta_model(where, what)
    prefix = getattr(meta, "base_model_prefix", "") or ""
    have = {_strip(k, prefix): v for k, v in have.items()}
    groups: dict[int, list] = {}
    for name, p in meta.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append((_strip(name, prefix), tuple(p.shape)))
    vocab = getattr(meta.config, "vocab_size", None)
    for names in groups.values():
        for name, shape in names:
            if name in have and tuple(have[name]) != shape:
                hint = f" (config.json's vocab_size is {vocab})" if vocab in shape else ""
                raise BrwsimError(
                    f"{what}: {name} is {list(have[name])} in the weights but {list(shape)} for "
                    f"config.json{hint}: the config does not match the weights"
                )
        if not any(name in have for name, _ in names):
            mt = meta.config.model_type
            raise BrwsimError(
                f"{what}: the weights have no {names[0][0]}, which config.json's model_type {mt!r} needs "
                f"(the config does not match the weights: a {mt} model would run with random weights)"
            )


def check_tokenizer(tokenizer, vocab_size: int, what: str = "model") -> None:
    """The tokenizer's ids fit the embedding (``len(tokenizer) <= vocab_size``), else a one-line error."""
    n = len(tokenizer) if tokenizer is not None else 0
    if n > vocab_size:
        raise BrwsimError(
            f"{what}: its tokenizer has {n} tokens but the model's vocabulary is {vocab_size}: "
            "the tokenizer does not belong to these weights"
        )


__all__ = ["check_gguf_file", "check_model_files", "check_model_shapes", "check_tokenizer", "quiet_transformers",
           "safetensors_header", "weight_shapes"]  # fmt: skip
