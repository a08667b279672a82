"""Timing of the performance choices of the HF source (``python -m brwsim.llm.bench``).

Measures, on the shipped model and one real prompt: prefill speed in fp32 and
bf16 (and the KL divergence of bf16 from fp32 per position), with one and two
torch threads; the saving of ``logits_to_keep=1``; KV-cached decoding at
batch 16; one batched tree pass (4D mask) against path-by-path recomputation.
Prints one JSON object. Numbers depend on the machine's load: the 2-core box
here is shared, so each figure is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from ..errors import BrwsimError, check_positive_int
from ..speedup._timing import _synced_times
from .sources import NodeQuery, load_source
from .sources._device import synchronize, to_numpy
from .sources._prompts import humaneval


def _median_time(fn, repeat: int, device: str = "cpu") -> float:
    """Median seconds of ``repeat`` calls, the device synchronised before and after each (CUDA is asynchronous)."""
    return statistics.median(_synced_times(fn, repeat, device))


def run(model: str = "smollm2-135m", repeat: int = 3, prompt_index: int = 32, device: str = "cpu") -> dict:
    import torch  # the llm extra: imported when the benchmark runs

    out: dict = {"model": model, "repeat": repeat}
    src = load_source(model, threads=1, device=device)
    dev = src.device
    out["device"] = dev
    text = humaneval()[prompt_index].text
    ids = src.encode(text)
    x = torch.tensor([ids], device=dev)
    out["prompt_tokens"] = len(ids)
    m = src.model
    with torch.inference_mode():
        ref = torch.log_softmax(m(input_ids=x).logits[0].float(), -1)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in ("float32", "bfloat16"):
            mm = m.to(getattr(torch, dtype))
            with torch.inference_mode():
                t = _median_time(lambda mm=mm: mm(input_ids=x, logits_to_keep=1), repeat, dev)
                t_all = _median_time(lambda mm=mm: mm(input_ids=x), repeat, dev)
            key = f"{dtype}_threads{threads}"
            out[f"prefill_tok_per_s_{key}"] = len(ids) / t
            out[f"prefill_all_logits_tok_per_s_{key}"] = len(ids) / t_all
            if dtype == "bfloat16" and threads == 1:
                with torch.inference_mode():
                    lp = torch.log_softmax(mm(input_ids=x).logits[0].float(), -1)
                kl = (ref.exp() * (ref - lp)).sum(-1)
                out["kl_bf16_from_fp32_nats_per_position_mean"] = float(kl.mean())
                out["kl_bf16_from_fp32_nats_per_position_max"] = float(kl.max())
    m.to(torch.float32)
    torch.set_num_threads(1)
    return out | _decode_and_tree(src, ids, repeat)


def _decode_and_tree(src, ids, repeat: int) -> dict:
    """KV-cached decoding at batch 16, and one batched tree pass against path-by-path recomputation."""
    import torch  # the llm extra: imported when the benchmark runs

    out: dict = {}
    m = src.model
    ctx = src.open(ids)
    rng = np.random.default_rng(0)

    def decode():
        w = ctx.walker(16)
        rows = np.broadcast_to(ctx.root, (16, ctx.root.shape[0]))
        for _ in range(16):
            rows = w.step([int(np.argmax(r + rng.gumbel(size=r.shape))) for r in rows])

    out["decode_batch16_tok_per_s"] = 256 / _median_time(decode, repeat, src.device)

    # one tree pass of 16 nodes (two levels) vs path-by-path recomputation
    top = np.argsort(-ctx.root)[:4]
    level1 = [(int(t),) for t in top]
    kids = ctx.query(level1, NodeQuery(K=4)).ids
    level2 = [(a[0], int(b)) for a, row in zip(level1, kids, strict=True) for b in row]

    def tree_pass():
        c = src.open(ids)
        c.logprobs(level1)
        synchronize(src.device)
        t0 = time.perf_counter()
        r = c.logprobs(level2)
        synchronize(src.device)
        return time.perf_counter() - t0, r

    tt = statistics.median(tree_pass()[0] for _ in range(repeat))
    _, tree_rows = tree_pass()
    paths = torch.tensor([ids + list(p) for p in level2], device=src.device)
    with torch.inference_mode():
        full = torch.log_softmax(m(input_ids=paths).logits[:, -1].float(), -1)
        tf = _median_time(lambda: m(input_ids=paths, logits_to_keep=1), repeat, src.device)
    out["tree_pass_16_nodes_seconds"] = tt
    out["path_by_path_16_nodes_seconds"] = tf
    out["tree_pass_max_abs_logprob_diff"] = float(np.abs(tree_rows - to_numpy(full)).max())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m brwsim.llm.bench", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N, auto")
    a = p.parse_args(argv)
    try:
        check_positive_int("--repeat", a.repeat)  # a median of no run
        out = run(a.model, a.repeat, device=a.device)
    except BrwsimError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
