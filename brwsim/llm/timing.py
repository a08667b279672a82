"""Wall-clock timing of a target model's tree-verification pass, and of this machine's bandwidth and FLOP/s.

:func:`verify_times` times the pass that verifies a tree of ``P`` draft tokens
plus the bonus position: ONE forward of ``P + 1`` query tokens after a KV
cache of ``context`` tokens, with the 4D tree-attention mask of
:class:`brwsim.llm.hf.HFContext` (each token sees the context, its ancestors
and itself; the tree is the binary heap: parent of node i is (i - 1) // 2).
``P = 0`` is one plain decoding step. The context is ``context`` fixed token
ids (the times do not depend on which tokens). :func:`machine_peaks` measures
memory bandwidth (a large tensor copy: bytes read + written per second) and
FLOP/s (a large float32 matrix product) with the same torch threads.
"""

from __future__ import annotations

import time

import numpy as np

from .hf import _torch


def _tree_inputs(torch, P: int, context: int, dtype, device):
    n = P + 1
    parent = [-1] + [(i - 1) // 2 for i in range(1, n)]
    depth = [0] * n
    allowed = torch.zeros((n, context + n), dtype=torch.bool)
    allowed[:, :context] = True
    for i in range(n):
        j = i
        while j >= 0:
            allowed[i, context + j] = True
            j = parent[j]
        depth[i] = 0 if i == 0 else depth[parent[i]] + 1
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    pos = torch.tensor([[context + d for d in depth]], device=device)
    return mask[None, None].to(device), pos


def verify_times(
    src, P_list, context: int = 256, repeats: int = 5, seed: int = 0, warmup: int = 1
) -> dict[int, list[float]]:
    """Seconds of each of ``repeats`` tree-verification passes at each P (0 included), on a loaded HF source; the
    passes run in rounds over every P (a warm-up round first)."""
    torch = _torch()
    m = src.model
    rng = np.random.default_rng(seed)
    vocab = int(src.vocab_size)
    ids = torch.tensor([rng.integers(0, vocab, size=context).tolist()], device=src.device)
    with torch.inference_mode():
        cache = m(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
    Ps = sorted({0, *(int(p) for p in P_list)})
    inputs = {
        P: (*_tree_inputs(torch, P, context, src.dtype, src.device), _ids(torch, rng, vocab, P + 1, src)) for P in Ps
    }
    out: dict[int, list[float]] = {P: [] for P in Ps}
    for r in range(warmup + repeats):  # rounds over every P, so that load from other processes hits all alike
        for P in Ps:
            mask, pos, q = inputs[P]
            with torch.inference_mode():
                t0 = time.perf_counter()
                m(input_ids=q, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True)
                dt = time.perf_counter() - t0
            cache.crop(-(P + 1))  # drop the tree's slots: every pass sees the same context
            if r >= warmup:
                out[P].append(dt)
    return out


def _ids(torch, rng, vocab: int, n: int, src):
    return torch.tensor([rng.integers(0, vocab, size=n).tolist()], device=src.device)


def machine_peaks(copy_mb: int = 512, matmul_n: int = 2048, repeats: int = 5) -> dict:
    """This machine's memory bandwidth (bytes/s, a copy counts read + write) and float32 FLOP/s (median of repeats),
    with the torch threads in use."""
    torch = _torch()
    a = torch.ones(copy_mb * 2**20 // 4, dtype=torch.float32)
    b = torch.empty_like(a)
    b.copy_(a)
    bw = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        b.copy_(a)
        bw.append(2 * a.numel() * 4 / (time.perf_counter() - t0))
    del a, b
    x = torch.randn(matmul_n, matmul_n)
    y = torch.randn(matmul_n, matmul_n)
    x @ y
    fl = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x @ y
        fl.append(2 * matmul_n**3 / (time.perf_counter() - t0))
    return {
        "bandwidth": float(np.median(bw)),
        "bandwidth_range": [float(min(bw)), float(max(bw))],
        "flops": float(np.median(fl)),
        "flops_range": [float(min(fl)), float(max(fl))],
        "threads": int(torch.get_num_threads()),
        "copy_mb": copy_mb,
        "matmul_n": matmul_n,
    }
