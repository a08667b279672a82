"""torch and transformers helpers of the real-model side: the torch module (imported on first use), device choice
and synchronisation, tensors to NumPy, the additive attention mask, the KV cache keyword of a model's forward,
and the checks of the thread count and the prompt length."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping

import numpy as np

from ... import _processes as processes
from ...errors import BrwsimError
from .. import require_llm


def _torch():
    require_llm()
    import torch

    return torch


def additive_mask(allowed, dtype):
    """A boolean attention pattern ``allowed`` [queries, keys] as the additive mask transformers takes: 0 where a
    query may attend, the dtype's most negative finite value elsewhere."""
    torch = _torch()
    mask = torch.zeros(allowed.shape, dtype=dtype)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)


def torch_device(device: str = "auto") -> str:
    """The torch device to run on, checked: ``auto`` is the process's own GPU when torch sees one (in a
    multi-process run, GPU ``index % count``), else the CPU; any other name must be a device torch knows and has
    here (``cpu``, ``cuda``, ``cuda:1``, ``mps``), else a one-line :class:`BrwsimError`."""
    torch = _torch()
    if device == "auto":
        if torch.cuda.is_available():
            return f"cuda:{processes.index() % torch.cuda.device_count()}"
        return "cpu"
    try:
        dev = torch.device(str(device))
    except (RuntimeError, ValueError, TypeError):
        raise BrwsimError(f"--device {device!r} is not a torch device; use auto, cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0 or (dev.index is not None and dev.index >= n):
            raise BrwsimError(f"--device {device!r}: torch sees {n} CUDA device(s) here; use auto or cpu")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise BrwsimError(f"--device {device!r}: torch has no MPS device here; use auto or cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise BrwsimError(f"--device {device!r}: only cpu, cuda[:N] and mps are supported")
    return str(dev)


def check_threads(threads) -> int | None:
    """``threads`` as an int from 1 to the machine's CPU count (or None: torch's default); one-line error
    otherwise (torch would try to start every thread asked for, and fail deep inside its first matrix product)."""
    if threads is None:
        return None
    cores = os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise BrwsimError(f"--threads must be an integer >= 1, got {threads!r}")
    if threads > cores:
        raise BrwsimError(f"--threads {threads} is more than the {cores} CPU cores here: use 1 to {cores}")
    return threads


def check_max_prompt_tokens(n) -> int:
    """``max_prompt_tokens`` (the last N tokens of a prompt are kept) as an int >= 1; one-line error otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BrwsimError(f"--max-prompt-tokens must be an integer >= 1 (the last N prompt tokens kept), got {n!r}")
    return n


def synchronize(device: str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously): call before reading a clock."""
    if str(device).startswith("cuda"):
        _torch().cuda.synchronize(device)


@functools.cache
def _cache_keyword(cls) -> str:
    return _keyword_of(getattr(cls, "forward", None))


def _keyword_of(fn) -> str:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def with_cache(model, cache) -> dict:
    """The keyword argument passing a KV cache to ``model``'s forward: ``cache`` where this transformers version
    takes it (it deprecates ``past_key_values``), else ``past_key_values``."""
    key = _cache_keyword(type(model)) if hasattr(type(model), "forward") else _keyword_of(model)
    return {key: cache}


def returned_cache(out):
    """The KV cache a forward returned: ``out["cache"]`` in transformers versions that name it so, else
    ``out.past_key_values``."""
    if isinstance(out, Mapping):
        got = out.get("cache")
        return got if got is not None else out.get("past_key_values")
    got = getattr(out, "cache", None)
    return got if got is not None else getattr(out, "past_key_values", None)


def to_numpy(t) -> np.ndarray:
    """A tensor on any device as a NumPy array (detached, moved to the CPU first)."""
    return t.detach().cpu().numpy()
