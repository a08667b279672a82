"""End-to-end check of the real-model path and the synthetic oracle on one device; prints what it measured.

    python benchmarks/gpu_check.py --device cuda          # a machine with a GPU
    python benchmarks/gpu_check.py --device cpu --tiny    # anywhere (the test runs this)

Real path: load the model on ``--device`` (``--tiny``: a 3-layer random Llama,
no download), run :func:`brwsim.llm.run.run_llm` with a layer-skip drafter
(walks, the real oracle tree, the drafter's trees and direct check), and
time the tree-verification pass (:func:`brwsim.speedup._timing.verify_times`,
device-synchronised). Oracle: :func:`brwsim.simulate` on a synthetic law
with JAX's default backend. Prints one JSON object (devices as torch and JAX
report them, E[X] values, times).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _source(args):
    if not args.tiny:
        from brwsim.llm.sources import load_source

        return load_source(args.model, device=args.device, threads=args.threads)
    from tiny_llm import tiny_llama

    from brwsim.llm.sources._hf import HFSource

    class Tok:  # one id per word: its length mod 11
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [len(w) % 11 for w in text.split()] or [1, 2]}

        def get_vocab(self):
            return {str(i): i for i in range(11)}

    return HFSource(tiny_llama(11, n_layers=3), Tok(), name="tiny", device=args.device, threads=args.threads)


def real_path(args) -> dict:
    import torch

    from brwsim.llm.run import RunOptions, run_llm
    from brwsim.speedup._timing import verify_times

    src = _source(args)
    opts = RunOptions(prompts=args.prompts, n=1, P=(1, 2, 4), walks=16, depth=4, trees=64, check_samples=20,
                      check_P=2, heldout_tokens=16, drafters=(args.drafter,), device=args.device)  # fmt: skip
    t0 = time.perf_counter()
    run = run_llm(opts, source=src)
    secs = time.perf_counter() - t0
    times = verify_times(src, [1, 4], context=32, repeats=3)
    t = run.tasks[0]
    return {
        "torch": torch.__version__,
        "device": str(next(src.model.parameters()).device),
        "cuda_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "oracle_ex": {r.P: r.mean for r in t.rows},
        "drafter": {d.name: {P: m for P, m, _ in d.ex()} for d in t.drafters},
        "check": [d.check.to_dict() if d.check else None for d in t.drafters],
        "run_seconds": secs,
        "verify_ms": {P: 1e3 * statistics.median(ts) for P, ts in times.items()},
    }


def oracle_path() -> dict:
    import jax

    import brwsim

    t0 = time.perf_counter()
    res = brwsim.simulate("dirichlet:V=50,alpha=0.1", P=(1, 4, 16), trees=64, seed=0, bounds=False, progress=False)
    return {
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "ex": {r.P: r.stat.mean for r in res.results},
        "seconds": time.perf_counter() - t0,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="torch device of the real path: cpu, cuda, cuda:N")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tiny", action="store_true", help="a 3-layer random Llama instead of --model (no download)")
    ap.add_argument("--prompts", default="humaneval")
    ap.add_argument("--drafter", default="layerskip:skip=2-2")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.tiny:
        args.prompts = str(Path(__file__).resolve().parent / "gpu_check_prompts.jsonl")
    out = {"command": " ".join(["python benchmarks/gpu_check.py", *(argv or sys.argv[1:])]),
           "date": time.strftime("%Y-%m-%d"), "real": real_path(args), "oracle": oracle_path()}  # fmt: skip
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
