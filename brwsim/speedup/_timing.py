"""Wall-clock timing of a target model's tree-verification pass, and of this machine's bandwidth and FLOP/s.

:func:`verify_times` times the pass that verifies a tree of ``P`` draft tokens
plus the bonus position: ONE forward of ``P + 1`` query tokens after a KV
cache of ``context`` tokens, with the 4D tree-attention mask of
:class:`brwsim.llm.sources._contexts.HFContext` (each token sees the context, its ancestors
and itself; the tree is the binary heap: parent of node i is (i - 1) // 2).
``P = 0`` is one plain decoding step. The context is ``context`` fixed token
ids (the times do not depend on which tokens). :func:`machine_peaks` measures
memory bandwidth (a large tensor copy: bytes read + written per second) and
FLOP/s (a large float32 matrix product) with the same torch threads.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from ..llm.sources._device import _torch, additive_mask, returned_cache, synchronize, with_cache


def _tree_inputs(torch, P: int, context: int, dtype, device):
    n = P + 1
    parent = [-1] + [(i - 1) // 2 for i in range(1, n)]
    allowed = torch.zeros((n, context + n), dtype=torch.bool)
    allowed[:, :context] = True
    path: list[list[int]] = []  # path[i]: the nodes from the root to node i (a parent comes before its children)
    for i in range(n):
        path.append((path[parent[i]] if i else []) + [i])
        allowed[i, [context + j for j in path[i]]] = True
    mask = additive_mask(allowed, dtype)
    pos = torch.tensor([[context + len(p) - 1 for p in path]], device=device)  # context + depth
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
        cache = returned_cache(m(input_ids=ids, use_cache=True, logits_to_keep=1))
    Ps = sorted({0, *(int(p) for p in P_list)})
    inputs = {
        P: (*_tree_inputs(torch, P, context, src.dtype, src.device), _ids(torch, rng, vocab, P + 1, src)) for P in Ps
    }
    out: dict[int, list[float]] = {P: [] for P in Ps}
    for r in range(warmup + repeats):  # rounds over every P, so that load from other processes hits all alike
        for P in Ps:
            mask, pos, q = inputs[P]
            with torch.inference_mode():
                synchronize(src.device)
                t0 = time.perf_counter()
                m(input_ids=q, position_ids=pos, attention_mask=mask, use_cache=True, **with_cache(m, cache))
                synchronize(src.device)  # CUDA runs asynchronously: stop the clock when the pass has finished
                dt = time.perf_counter() - t0
            cache.crop(-(P + 1))  # drop the tree's slots: every pass sees the same context
            if r >= warmup:
                out[P].append(dt)
    return out


def _ids(torch, rng, vocab: int, n: int, src):
    return torch.tensor([rng.integers(0, vocab, size=n).tolist()], device=src.device)


@dataclasses.dataclass(frozen=True)
class Peaks:
    """This machine's measured memory bandwidth (bytes/s; a copy counts read + write) and float32 FLOP/s (medians),
    their ranges over the repeats, and what they were measured with."""

    bandwidth: float
    flops: float
    bandwidth_range: tuple[float, float] | None = None
    flops_range: tuple[float, float] | None = None
    threads: int | None = None
    copy_mb: int | None = None
    matmul_n: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def machine_peaks(copy_mb: int = 512, matmul_n: int = 2048, repeats: int = 5, device: str = "cpu") -> Peaks:
    """The memory bandwidth (bytes/s, a copy counts read + write) and float32 FLOP/s (median of repeats) of
    ``device`` (this CPU with the torch threads in use, or a GPU: tensors made there, the device synchronised
    around every timed call)."""
    torch = _torch()
    a = torch.ones(copy_mb * 2**20 // 4, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    nbytes = 2 * a.numel() * 4

    def copy():
        b.copy_(a)

    bw = [nbytes / t for t in _synced_times(copy, repeats, device)]
    a = b = None  # noqa: F841  (free the buffers before the matrix product)
    x = torch.randn(matmul_n, matmul_n, device=device)
    y = torch.randn(matmul_n, matmul_n, device=device)
    x @ y
    fl = [2 * matmul_n**3 / t for t in _synced_times(lambda: x @ y, repeats, device)]
    return Peaks(float(np.median(bw)), float(np.median(fl)), (float(min(bw)), float(max(bw))),
                 (float(min(fl)), float(max(fl))), int(torch.get_num_threads()), copy_mb, matmul_n)  # fmt: skip


def _synced_times(fn, repeats: int, device) -> list[float]:
    out = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        out.append(time.perf_counter() - t0)
    return out


def linear_shapes(model) -> list[tuple[int, int, int]]:
    """The model's weight matrices as ``(d_in, d_out, count)``, one row per distinct shape (the LM head included)."""
    torch = _torch()
    counts: dict[tuple[int, int], int] = {}
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            key = (int(m.in_features), int(m.out_features))
            counts[key] = counts.get(key, 0) + 1
    return [(i, o, c) for (i, o), c in sorted(counts.items())]


def _time_call(fn, min_s: float, device: str = "cpu") -> float:
    """Seconds per call of ``fn``, run back to back until ``min_s`` has passed (at least twice). On a device that
    runs asynchronously (CUDA) the clock is read, after a synchronisation, only after 2, 4, 8, ... calls: a
    synchronisation per call would add its latency to every call."""
    lazy = str(device).startswith("cuda")
    fn()
    synchronize(device)
    k, t0, check = 0, time.perf_counter(), 2
    while True:
        fn()
        k += 1
        if lazy and k < check:
            continue
        check *= 2
        synchronize(device)
        dt = time.perf_counter() - t0
        if k >= 2 and dt >= min_s:
            return dt / k


def gemm_throughput(shapes, rows, repeats: int = 3, min_s: float = 0.03, seed: int = 0, device: str = "cpu") -> dict:
    """Achieved FLOP/s of ``x @ W.T`` (``torch.nn.functional.linear``, the verification pass's kernel) for each
    ``(d_in, d_out)`` of ``shapes`` and each row count ``n`` of ``rows``: ``2 n d_in d_out`` / seconds, median of
    ``repeats`` rounds. The same matrix is applied back to back, so a matrix that fits the cache is read from it:
    this is the kernel's compute throughput at that shape, not the memory bandwidth. The operands are drawn on the
    host (the same numbers on every device) and moved to ``device``."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    out: dict[tuple[int, int], dict[int, list[float]]] = {}
    with torch.inference_mode():
        for _ in range(repeats):  # rounds over every shape and n: load from other processes hits all alike
            for d_in, d_out, *_ in shapes:
                w = torch.randn(d_out, d_in, generator=g).to(device)
                for n in rows:
                    x = torch.randn(n, d_in, generator=g).to(device)
                    t = _time_call(functools.partial(torch.nn.functional.linear, x, w), min_s, device)
                    out.setdefault((d_in, d_out), {}).setdefault(n, []).append(2.0 * n * d_in * d_out / t)
    return {k: {n: float(np.median(v)) for n, v in d.items()} for k, d in out.items()}


def attention_throughput(
    heads: int,
    head_dim: int,
    context: int,
    rows,
    repeats: int = 3,
    min_s: float = 0.03,
    seed: int = 0,
    device: str = "cpu",
) -> dict[int, float]:
    """Achieved FLOP/s of one layer's masked attention (``scaled_dot_product_attention`` with a float mask, as the
    tree pass calls it) for ``n`` query rows against ``context + n`` keys: ``4 heads head_dim n (context + n)`` /
    seconds, median of ``repeats`` rounds, per ``n`` of ``rows``."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    out: dict[int, list[float]] = {n: [] for n in rows}
    with torch.inference_mode():
        for _ in range(repeats):
            for n in rows:
                q = torch.randn(1, heads, n, head_dim, generator=g).to(device)
                k = torch.randn(1, heads, context + n, head_dim, generator=g).to(device)
                v = torch.randn(1, heads, context + n, head_dim, generator=g).to(device)
                mask = torch.zeros(1, 1, n, context + n, device=device)
                f = functools.partial(torch.nn.functional.scaled_dot_product_attention, q, k, v, attn_mask=mask)
                t = _time_call(f, min_s, device)
                out[n].append(4.0 * heads * head_dim * n * (context + n) / t)
    return {n: float(np.median(v)) for n, v in out.items()}


class stubbed_kernels:
    """Within this context ``torch.nn.functional.linear`` and ``scaled_dot_product_attention`` return zeros of the
    right shape at no cost: a forward pass then times everything but the weight matrices and attention (framework
    dispatch, norms, activations, rotary embedding, cache update, mask handling)."""

    def __enter__(self):
        torch = _torch()
        F = torch.nn.functional
        self._saved = (F.linear, F.scaled_dot_product_attention)
        F.linear = lambda x, w, b=None: x.new_zeros(*x.shape[:-1], w.shape[0])
        F.scaled_dot_product_attention = lambda q, k, v, *a, **kw: q.new_zeros(*q.shape[:-1], v.shape[-1])
        return self

    def __exit__(self, *exc):
        F = _torch().nn.functional
        F.linear, F.scaled_dot_product_attention = self._saved
        return False


def decode_step_timer(src, context: int = 256, seed: int = 0):
    """A callable that runs one plain decoding step of a loaded HF source (one new token after a KV cache of
    ``context`` random tokens; the cache is cropped back after each call, so every call sees the same context):
    a target's step, or a drafter's pass when the drafter is a model of its own."""
    torch = _torch()
    rng = np.random.default_rng(seed)
    vocab = int(src.vocab_size)
    ids = torch.tensor([rng.integers(0, vocab, size=context).tolist()], device=src.device)
    with torch.inference_mode():
        cache = returned_cache(src.model(input_ids=ids, use_cache=True, logits_to_keep=1))
    mask, pos = _tree_inputs(torch, 0, context, src.dtype, src.device)
    q = _ids(torch, rng, vocab, 1, src)

    def step():
        with torch.inference_mode():
            src.model(
                input_ids=q, position_ids=pos, attention_mask=mask, use_cache=True, **with_cache(src.model, cache)
            )
        cache.crop(-1)

    return step


def interleaved_times(calls: dict, repeats: int = 5, warmup: int = 1, device=None) -> dict[str, list[float]]:
    """Seconds of each named callable over ``repeats`` rounds (after ``warmup`` rounds), one call of each per round
    in turn, so that load from other processes hits all alike; the device is synchronised around every call."""
    out: dict[str, list[float]] = {k: [] for k in calls}
    for r in range(warmup + repeats):
        for name, fn in calls.items():
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            dt = time.perf_counter() - t0
            if r >= warmup:
                out[name].append(dt)
    return out
