"""End-to-end check of the real-model path and the synthetic oracle on one device; writes one JSON of what it measured.

    python benchmarks/gpu_check.py --device cuda --out gpu_check.json    # a machine with a GPU (a few minutes)
    python benchmarks/gpu_check.py --device cpu --tiny                   # anywhere (the test runs this)

Sections (each runs even when an earlier one failed; its error is recorded in
the JSON under ``errors`` and the exit status is 1):

- ``real``: :func:`brwsim.llm.run.run_llm` on ``--device`` (walks, the real
  oracle tree, a layer-skip drafter's trees and its direct check);
- ``compare``: the same run on the CPU, same prompts and seed: the oracle's
  E[X] per P and mu on the device against the CPU's (relative differences);
- ``exactness``: real speculative decoding on the device at T = 0 for a
  layer-skip drafter, prompt lookup and the EAGLE-style head (``--tiny``: an
  untrained head; else the quick head, trained here): the generated tokens
  against plain greedy decoding of the same target (tokens that differ, first
  position that differs), and the accepted tokens per call;
- ``bf16``: the target in bfloat16 on the device, the head too (the same head
  cast to the target's dtype): the same comparison;
- ``timing``: the tree-verification pass on the device (median ms over
  interleaved rounds, device synchronised) in float32 and bfloat16 at each P,
  and each model drafter's pass as a fraction of the target's step, timed in
  the same rounds (:func:`brwsim.speedup.measure_draft_cost`); beside them the
  h100 roofline's t_verify for the same shapes (a prediction);
- ``oracle``: :func:`brwsim.simulate` on a synthetic law on JAX's default
  backend and on the CPU, same seed (E[X] per P of each).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

TIMING_P = (1, 2, 4, 8, 16, 32, 64, 128)


def _source(args, device: str, dtype: str = "float32"):
    if not args.tiny:
        from brwsim.llm.sources import load_source

        return load_source(args.model, device=device, dtype=dtype, threads=args.threads)
    import torch
    from tiny_llm import tiny_llama

    from brwsim.llm.sources._hf import HFSource

    class Tok:  # one id per word: its length mod 11
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [len(w) % 11 for w in text.split()] or [1, 2]}

        def get_vocab(self):
            return {str(i): i for i in range(11)}

        def decode(self, ids, **kw):
            return " ".join(str(i) for i in ids)

    m = tiny_llama(11, n_layers=3).to(getattr(torch, dtype))
    return HFSource(m, Tok(), name="tiny", device=device, threads=args.threads)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def _options(args, device: str):
    from brwsim.llm.run import RunOptions

    return RunOptions(prompts=args.prompts, n=args.n, P=(1, 2, 4, 16), walks=16, depth=8, trees=256,
                      check_samples=20, check_P=2, heldout_tokens=16, drafters=(args.drafter,),
                      device=device)  # fmt: skip


def real(args, state) -> dict:
    import torch

    from brwsim.llm.run import run_llm

    src = state["src"] = _source(args, args.device)
    t0 = time.perf_counter()
    run = run_llm(_options(args, args.device), source=src)
    t = run.tasks[0]
    state["run"] = run
    return {
        "torch": torch.__version__,
        "device": str(next(src.model.parameters()).device),
        "cuda_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "oracle_ex": {r.P: r.mean for r in t.rows},
        "mu": t.mu,
        "drafter": {d.name: {P: m for P, m, _ in d.ex()} for d in t.drafters},
        "check": [d.check.to_dict() if d.check else None for d in t.drafters],
        "run_seconds": time.perf_counter() - t0,
        "verify_ms": _verify_ms(src, [1, 4], repeats=3),
    }


def _verify_ms(src, Ps, repeats: int, context: int = 32) -> dict:
    from brwsim.speedup._timing import verify_times

    times = verify_times(src, Ps, context=context, repeats=repeats)
    return {P: 1e3 * statistics.median(ts) for P, ts in times.items()}


def compare(args, state) -> dict:
    """The same run on the CPU: oracle E[X] and mu, device against CPU."""
    from brwsim.llm.run import run_llm

    cpu = state["cpu_src"] = state["src"] if args.device == "cpu" else _source(args, "cpu")
    t0 = time.perf_counter()
    ref = run_llm(_options(args, "cpu"), source=cpu).tasks[0]
    dev = state["run"].tasks[0]
    ex = {r.P: (r.mean, c.mean, _rel(r.mean, c.mean)) for r, c in zip(dev.rows, ref.rows, strict=True)}
    return {
        "oracle_ex_device_cpu_rel": ex,
        "max_rel_oracle_ex": max(v[2] for v in ex.values()),
        "mu_device_cpu": [dev.mu, ref.mu],
        "rel_mu": _rel(dev.mu, ref.mu) if dev.mu is not None and ref.mu is not None else None,
        "cpu_seconds": time.perf_counter() - t0,
    }


def _drafters(args, src, head=None):
    """(layer skip, prompt lookup, the EAGLE-style head) on ``src``; ``head``: a head to cast to src's dtype."""
    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters.eagle_head import QUICK
    from brwsim.llm.drafters.eagle_head._drafter import EagleDraftModel
    from brwsim.llm.drafters.eagle_head._model import head_for

    out = [open_drafter(args.drafter, src), open_drafter("lookup:n=3", src)]
    if head is not None:
        out.append(EagleDraftModel(src, copy.deepcopy(head.head), head.meta, name=head.name))  # .to() is in place
    elif args.tiny:
        out.append(EagleDraftModel(src, head_for(src.model), {"config": dataclasses.asdict(QUICK)}, name="eagle-head"))
    else:
        out.append(open_drafter("eagle-head:quick", src, log=lambda m: print(m, file=sys.stderr, flush=True)))
    return out


def _greedy(src, drafters, prompts, n: int, P: int) -> dict:
    from brwsim.llm.specdec import plain_generate, speculative_generate

    out = {}
    for d in drafters:
        rows = []
        for ids in prompts:
            ref = plain_generate(src, ids, n, T=0).tokens
            g = speculative_generate(src, d, ids, n, P, T=0)
            diff = [i for i, (a, b) in enumerate(zip(g.tokens, ref, strict=True)) if a != b]
            rows.append({"differ": len(diff), "first": diff[0] if diff else None,
                         "accepted_per_call": sum(g.accepted) / g.calls,
                         "tokens_per_s": g.tokens_per_second})  # fmt: skip
        out[d.name] = rows
    return out


def _prompt_ids(args, src) -> list[list[int]]:
    from brwsim.llm.sources import load_prompts

    return [src.encode(p.text)[-128:] for p in load_prompts(args.prompts, args.n)][:2]


def exactness(args, state) -> dict:
    src = state["src"]
    drafters = state["drafters"] = _drafters(args, src)
    return _greedy(src, drafters, _prompt_ids(args, src), args.tokens, 8)


def bf16(args, state) -> dict:
    src = state["bf16_src"] = _source(args, args.device, "bfloat16")
    head = state["drafters"][-1] if state.get("drafters") else None
    drafters = _drafters(args, src, head)
    return {"dtype": str(src.dtype), "head_dtype": str(next(drafters[-1].head.parameters()).dtype),
            "greedy": _greedy(src, drafters, _prompt_ids(args, src), args.tokens, 8)}  # fmt: skip


def timing(args, state) -> dict:
    from brwsim.speedup import measure_draft_cost
    from brwsim.speedup._sources import verify_cost

    out: dict = {"context": args.context, "repeats": args.repeats}
    for key in ("src", "bf16_src"):
        if key in state:
            src = state[key]
            out[str(src.dtype)] = _verify_ms(src, TIMING_P, args.repeats, args.context)
    try:
        h100 = verify_cost("h100", source=state["src"], context=args.context)
        out["h100_roofline_ms_prediction"] = {P: 1e3 * h100.t_verify(P) for P in (0, *TIMING_P)}
    except Exception as e:  # the roofline needs the model's shapes; a tiny model has them too
        out["h100_roofline_ms_prediction"] = f"{type(e).__name__}: {e}"
    passes = {}
    for d in [*state.get("drafters", []), _lowbit(state["src"])]:
        c = measure_draft_cost(d, state["src"], context=args.context, repeats=args.repeats)
        if c is not None:
            passes[d.name] = {"pass_ms": 1e3 * c.t_pass, "step_ms": 1e3 * c.t_step, "fraction": c.fraction,
                              "fraction_ci95": c.fraction_ci95}  # fmt: skip
    out["drafter_passes"] = passes
    return out


def _lowbit(src):
    from brwsim.llm.drafters import open_drafter

    return open_drafter("lowbit:bits=4", src)


def oracle(args, state) -> dict:
    import jax

    import brwsim

    out = {"jax_backend": jax.default_backend(), "jax_devices": [str(d) for d in jax.devices()]}
    for name, devs in (("default", jax.devices()[:1]), ("cpu", jax.devices("cpu")[:1])):
        t0 = time.perf_counter()
        res = brwsim.simulate("dirichlet:V=50,alpha=0.1", P=(1, 4, 16), trees=64, seed=0, bounds=False,
                              progress=False, devices=devs)  # fmt: skip
        out[name] = {"ex": {r.P: r.stat.mean for r in res.results}, "seconds": time.perf_counter() - t0}
    out["max_rel_default_cpu"] = max(_rel(out["default"]["ex"][P], out["cpu"]["ex"][P]) for P in out["cpu"]["ex"])
    out["ex"] = out["default"]["ex"]
    out["seconds"] = out["default"]["seconds"]
    return out


SECTIONS = {"real": real, "compare": compare, "exactness": exactness, "bf16": bf16, "timing": timing,
            "oracle": oracle}  # fmt: skip


def _clean(x):
    """Strict JSON: non-finite floats as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="torch device of the real path: cpu, cuda, cuda:N")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tiny", action="store_true", help="a 3-layer random Llama instead of --model (no download)")
    ap.add_argument("--prompts", default="humaneval", help="a prompt source or a .jsonl file")
    ap.add_argument("--n", type=int, default=2, help="prompts of the llm run")
    ap.add_argument("--drafter", default="layerskip:skip=2-2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=32, help="tokens generated per exactness run")
    ap.add_argument("--context", type=int, default=256, help="context tokens of the timed passes")
    ap.add_argument("--repeats", type=int, default=9, help="timed rounds")
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run")
    ap.add_argument("--out", default=None, help="also write the JSON here (rewritten after every section)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.prompts = str(Path(__file__).resolve().parent / "gpu_check_prompts.jsonl")
        args.context, args.repeats = min(args.context, 32), min(args.repeats, 3)
    out: dict = {"command": " ".join(["python benchmarks/gpu_check.py", *(argv if argv is not None else sys.argv[1:])]),
                 "date": time.strftime("%Y-%m-%d"), "errors": {}}  # fmt: skip
    state: dict = {}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        try:
            out[name] = SECTIONS[name](args, state)
        except Exception as e:
            out["errors"][name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        out.setdefault("section_seconds", {})[name] = time.perf_counter() - t0
        print(f"gpu_check: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(_clean(out), indent=1, default=str, allow_nan=False))
    print(json.dumps(_clean(out), indent=1, default=str, allow_nan=False))
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
