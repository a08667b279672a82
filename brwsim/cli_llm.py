"""``brwsim llm``: every measurement of the project on a real language model.

``brwsim llm --model NAME_OR_PATH --prompts SOURCE --n N --P LIST [--json]``

NAME_OR_PATH: ``smollm2-135m`` (shipped default), ``gemma3-270m``, a
transformers model directory, a ``.gguf`` file, or a saved-logits ``.npz``.
SOURCE: ``humaneval``, ``pydoc`` or a ``.jsonl`` file (comma-separated for
several); N prompts per task. Per task it prints mu, mu_2 and, per P, the
real oracle E[X] (mean over prompts, 95% CI), the i.i.d. surrogate, and the
bounds. This module imports without torch: the extra is checked when run.
"""

from __future__ import annotations

import json
import sys
import time

from .errors import BrwsimError, check_P_list, check_positive_int


def add_parser(sub) -> None:
    s = sub.add_parser("llm", help="real-model token trees: mu, mu_2, real oracle E[X], i.i.d. surrogate, bounds")
    s.add_argument("--model", default="smollm2-135m", help="smollm2-135m, gemma3-270m, a model dir, .gguf or .npz")
    s.add_argument("--prompts", default="humaneval", help="humaneval, pydoc or a .jsonl file (comma-separated)")
    s.add_argument("--n", type=int, default=8, help="prompts per task (evenly spaced; default 8)")
    s.add_argument("--P", default="1,2,4,8,16,32,64", help="verifier budgets (default 1,2,4,...,64)")
    s.add_argument("--walks", type=int, default=16, help="sampled continuations per prompt (default 16)")
    s.add_argument("--depth", type=int, default=48, help="tokens per continuation (default 48)")
    s.add_argument("--seed", type=int, default=0, help="seed of the continuations and the surrogate (default 0)")
    s.add_argument("--trees", type=int, default=2000, help="i.i.d. surrogate trees (default 2000)")
    s.add_argument("--batch", type=int, default=4, help="tree nodes per forward pass (default 4)")
    s.add_argument("--dtype", default="float32", help="float32 (default) or bfloat16")
    s.add_argument("--threads", type=int, default=1, help="torch threads (default 1; see docs/llm.md)")
    s.add_argument("--device", default="cpu", help="torch device (default cpu)")
    s.add_argument("--max-prompt-tokens", type=int, default=384, help="keep the last N prompt tokens (default 384)")
    s.add_argument("--save-pool", default=None, help="directory to keep each task's surrogate pool .npz")
    s.add_argument("--record", default=None, help="save every log-prob row asked to this .npz (saved-logits file)")
    s.add_argument("--drafter", default=None, help="early-exit:k=K (or k=6/12/18): the model cut after K layers as q")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.set_defaults(func=_cmd_llm)


def run_llm(
    model: str = "smollm2-135m",
    prompts: str = "humaneval",
    n: int = 8,
    P=(1, 2, 4, 8, 16, 32, 64),
    walks: int = 16,
    depth: int = 48,
    seed: int = 0,
    trees: int = 2000,
    batch: int = 4,
    dtype: str = "float32",
    threads: int | None = 1,
    device: str = "cpu",
    max_prompt_tokens: int = 384,
    save_pool: str | None = None,
    record: str | None = None,
    source=None,
    log=None,
    drafter: str | None = None,
) -> dict:
    """Run the measurements; return the JSON object of ``brwsim llm --json``."""
    import os

    from .llm.measure import measure_prompt, summarize_task
    from .llm.prompts import load_prompts

    P_list = check_P_list(P)
    n = check_positive_int("n", n)
    walks = check_positive_int("walks", walks)
    depth = check_positive_int("depth", depth)
    trees = check_positive_int("trees", trees)
    batch = check_positive_int("batch", batch)
    seed = check_positive_int("seed", seed, minimum=0)
    from .theory import MIN_SPINE_WALKS

    if walks * n < MIN_SPINE_WALKS:
        raise BrwsimError(
            f"--walks {walks} x --n {n} gives {walks * n} sampled continuations per task; the empirical bounds "
            f"need at least {MIN_SPINE_WALKS}: raise --walks or --n"
        )
    if drafter:
        from .llm.early_exit import parse_early_exit

        parse_early_exit(drafter)  # spec errors before the slow model load
        if record:
            raise BrwsimError("--record and --drafter cannot be combined (a saved-logits file holds target rows only)")
    items = load_prompts(prompts, n)  # prompt errors before the slow model load
    t_all = time.perf_counter()
    if source is None:
        from .llm.models import load_source

        source = load_source(model, device=device, dtype=dtype, threads=threads, max_prompt_tokens=max_prompt_tokens)
    recorder = None
    if drafter:
        from .llm.early_exit import EarlyExitSource, measure_prompt_with_drafter, parse_early_exit, summarize_drafter

        source = EarlyExitSource(source, parse_early_exit(drafter))
    drafted: dict[str, list] = {}
    if record:
        from .llm.source import Recorder

        source = recorder = Recorder(source)
    inner = source.inner if recorder is not None else source
    f0 = getattr(inner, "forward_seconds", 0.0)
    t0 = time.perf_counter()
    by_task: dict[str, list] = {}
    for i, p in enumerate(items):
        if drafter:
            r, dr = measure_prompt_with_drafter(
                source, p, max(P_list), walks=walks, depth=depth, seed=seed, batch=batch
            )
            drafted.setdefault(p.task, []).append(dr)
        else:
            r = measure_prompt(source, p, max(P_list), walks=walks, depth=depth, seed=seed, batch=batch)
        by_task.setdefault(p.task, []).append(r)
        if log:
            log(f"[{i + 1}/{len(items)}] {p.task} {p.id}: {r.n_tokens} prompt tokens, {r.seconds:.1f} s")
    model_seconds = time.perf_counter() - t0
    fwd = getattr(inner, "forward_seconds", 0.0) - f0
    tasks = []
    for task, rs in by_task.items():
        pool = os.path.join(save_pool, f"{task}.npz") if save_pool else None
        if save_pool:
            os.makedirs(save_pool, exist_ok=True)
        tasks.append(summarize_task(task, rs, P_list, surrogate_trees=trees, seed=seed, pool_path=pool))
        if drafter:
            tasks[-1]["drafter"] = summarize_drafter(drafted[task], P_list, n_layers=source.n_layers)
    if recorder is not None:
        recorder.save(record)
    from .estimate import CONVENTION

    return {
        "model": getattr(inner, "name", model),
        "vocab_size": int(inner.vocab_size),
        "prompts": prompts,
        "n": n,
        "walks": walks,
        "depth": depth,
        "seed": seed,
        "surrogate_trees": trees,
        "dtype": dtype,
        "threads": threads,
        "convention": CONVENTION,
        "drafter": drafter,
        "tasks": tasks,
        "timing": {
            "load_seconds": getattr(inner, "load_seconds", 0.0),
            "model_phase_seconds": model_seconds,
            "forward_seconds": fwd,
            "forward_fraction": fwd / model_seconds if model_seconds > 0 else None,
            "total_seconds": time.perf_counter() - t_all,
        },
    }


def _f(x, w=9):
    if x is None:
        return f"{'-':>{w}}"
    return f"{x:>{w}.3f}"


def print_llm(d: dict, out=None) -> None:
    out = out or sys.stdout
    print(f"model {d['model']} (vocab {d['vocab_size']}), prompts {d['prompts']}, {d['convention']}", file=out)
    for t in d["tasks"]:
        print(
            f"task {t['task']}: {t['prompts']} prompts, mu = {t.get('mu', float('nan')):.4f} "
            f"+- {t.get('mu_ci95', float('nan')):.4f}, mu_2 = {t.get('mu2', float('nan')):.4f} "
            f"+- {t.get('mu2_ci95', float('nan')):.4f} (nats, along {t.get('walks', 0)} sampled continuations)",
            file=out,
        )
        names = ["theorem1_leading", "renewal", "asymptotic", "splitting", "dual"]
        print(f"{'P':>5} {'oracle':>9} {'+-95%':>7} {'surrogate':>9} " + " ".join(f"{n:>16}" for n in names), file=out)
        for r in t["results"]:
            b = r.get("bounds", {})
            line = f"{r['P']:>5} {_f(r['mean'])} {_f(r['ci95'], 7)} {_f(r.get('surrogate'))} "
            print(line + " ".join(_f(b.get(n), 16) for n in names), file=out)
        if t.get("drafter"):
            from .llm.early_exit import print_drafter

            print_drafter(t, out)
    tm = d["timing"]
    print(
        f"model phase {tm['model_phase_seconds']:.1f} s, {100 * (tm['forward_fraction'] or 0):.0f}% in forward "
        f"passes; load {tm['load_seconds']:.1f} s; total {tm['total_seconds']:.1f} s",
        file=out,
    )


def _cmd_llm(args) -> int:
    from .llm import require_llm

    if not (args.model.startswith("file:") or args.model.lower().endswith(".npz")):
        require_llm()
    d = run_llm(
        model=args.model,
        prompts=args.prompts,
        n=args.n,
        P=_P_list(args.P),
        walks=args.walks,
        depth=args.depth,
        seed=args.seed,
        trees=args.trees,
        batch=args.batch,
        dtype=args.dtype,
        threads=args.threads,
        device=args.device,
        max_prompt_tokens=args.max_prompt_tokens,
        save_pool=args.save_pool,
        record=args.record,
        drafter=args.drafter,
        log=None if args.json else (lambda m: print(m, file=sys.stderr)),
    )
    if args.json:
        print(json.dumps(d))
    else:
        print_llm(d)
    return 0


def _P_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BrwsimError(f"--P must be a comma-separated list of integers, e.g. 1,8,64; got {text!r}") from None
