"""The target's matrix products at a few rows a pass against their floor, on one core.

    taskset -c 1 python benchmarks/small_passes.py [--model smollm2-135m] [--rows 4,8,16,32,64,128] [--json]

A packed pass (brwsim.llm.sources._packed) runs every linear map of the model
once on all of its T rows: the decoder layers' projections and MLPs, then the
LM head on the answer rows. The tree searches' passes carry a few rows per
prompt, so T is small there. For each row count M this times the loaded
model's own ``nn.Linear`` modules on M rows of float32 input, as the engine
calls them, in the order a pass does (the decoder's weights do not fit in
the cache, so each sweep streams them from memory), and the LM head alone;
best of ``--repeats``, the row counts interleaved round by round. Beside
each: the floor max(bytes / bandwidth, 2 M params / rate), the bytes being
the weights (and, for the head, its M float32 rows of logits), with this
machine's copy bandwidth and float32 matmul rate measured in the same process
(brwsim.speedup._timing.machine_peaks, one thread), as the packed engine
accounts a pass. The ratio time / floor is what a pass of M rows can reach
at best with these kernels, which the engine keeps (its rows are the same
bits whatever else is packed beside them, which holds for these products on
this CPU).
"""

from __future__ import annotations

import argparse
import datetime
import json
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", default="4,8,16,32,64,128")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [int(x) for x in args.rows.split(",")]

    import torch

    from brwsim.llm.sources import load_source
    from brwsim.speedup._timing import machine_peaks

    torch.set_num_threads(1)
    src = load_source(args.model, device="cpu", threads=1)
    model = src.model
    head = model.get_output_embeddings()
    decoder = [m for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    peaks = machine_peaks()
    bw, rate = peaks.bandwidth, peaks.flops
    dec_params = sum(m.weight.numel() for m in decoder)
    dec_bytes = sum(m.weight.numel() * m.weight.element_size() for m in decoder)
    head_params, vocab = head.weight.numel(), head.weight.shape[0]
    head_bytes = head_params * head.weight.element_size()
    g = torch.Generator().manual_seed(0)
    xs = {M: {d: torch.randn(M, d, generator=g) for d in {m.in_features for m in [*decoder, head]}} for M in rows}
    best: dict = {M: [np.inf, np.inf] for M in rows}
    with torch.inference_mode():
        for _ in range(args.repeats):
            for M in rows:
                x = xs[M]
                t0 = time.perf_counter()
                for m in decoder:
                    m(x[m.in_features])
                t1 = time.perf_counter()
                head(x[head.in_features])
                t2 = time.perf_counter()
                best[M] = [min(best[M][0], t1 - t0), min(best[M][1], t2 - t1)]
    results = []
    for M in rows:
        # the weights read once (and the head's float32 logits written), as brwsim's packed engine accounts a pass
        floors = [max(dec_bytes / bw, 2 * M * dec_params / rate),
                  max((head_bytes + 4 * vocab * M) / bw, 2 * M * head_params / rate)]  # fmt: skip
        results.append(dict(rows=M, decoder_ms=1e3 * best[M][0], decoder_floor_ms=1e3 * floors[0],
                            head_ms=1e3 * best[M][1], head_floor_ms=1e3 * floors[1],
                            decoder_ratio=best[M][0] / floors[0], head_ratio=best[M][1] / floors[1]))  # fmt: skip
    out = dict(date=datetime.date.today().isoformat(),
               model=args.model, bandwidth_gb_s=bw / 1e9, gflop_s=rate / 1e9, decoder_params=dec_params,
               head_params=head_params, torch=torch.__version__, repeats=args.repeats, results=results)  # fmt: skip
    if args.json:
        print(json.dumps(out, indent=1, allow_nan=False))
        return 0
    print(f"{args.model}: decoder {dec_params / 1e6:.1f}M params in {len(decoder)} maps,"
          f" LM head {head_params / 1e6:.1f}M; this core {bw / 1e9:.1f} GB/s,"
          f" {rate / 1e9:.1f} GFLOP/s (machine_peaks)")  # fmt: skip
    print(f"{'rows':>5} {'decoder ms':>11} {'floor':>7} {'ratio':>6} {'head ms':>8} {'floor':>7} {'ratio':>6}")
    for r in results:
        print(f"{r['rows']:>5} {r['decoder_ms']:>11.1f} {r['decoder_floor_ms']:>7.1f} {r['decoder_ratio']:>6.2f}"
              f" {r['head_ms']:>8.1f} {r['head_floor_ms']:>7.1f} {r['head_ratio']:>6.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
