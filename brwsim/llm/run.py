"""``run_llm``: every measurement of brwsim on a real model, for a set of prompts (the ``brwsim llm`` command)."""

from __future__ import annotations

import os
import time

from .. import _processes as processes
from .._stats import CONVENTION
from ..errors import BrwsimError, check_P_list, check_positive_int
from ..theory import MIN_SPINE_WALKS
from .drafter_models import calibrate, heldout_ids, open_llm_drafter, parse_llm_drafter, teacher_forced
from .drafter_report import summarize_drafter_task
from .early_exit import EarlyExitSource, measure_prompt_with_drafter, parse_early_exit, summarize_drafter
from .measure import measure_prompt, summarize_task
from .models import load_source
from .prompts import load_prompts
from .real_drafters import DrafterSettings, measure_prompt_drafters
from .source import Recorder
from .temperature import TempSource, check_temperature

HELDOUT_TOKENS = 256  # held-out positions for each drafter's calibration (Sequoia's rates, held-out KL)


def _drafter_list(drafter) -> list[str]:
    if drafter is None:
        return []
    return [drafter] if isinstance(drafter, str) else list(drafter)


def _legacy(specs: list[str], T: float) -> bool:
    """``early-exit`` alone at T = 1 keeps its one-pass path (several k at once, docs/llm.md)."""
    return len(specs) == 1 and specs[0].strip().lower().startswith("early-exit") and T == 1.0


def _check(P, n, walks, depth, trees, batch, seed, drafter, record):
    P_list = check_P_list(P)
    n, walks, depth = (check_positive_int(k, v) for k, v in (("n", n), ("walks", walks), ("depth", depth)))
    trees, batch = check_positive_int("trees", trees), check_positive_int("batch", batch)
    seed = check_positive_int("seed", seed, minimum=0)
    if walks * n < MIN_SPINE_WALKS:
        raise BrwsimError(
            f"--walks {walks} x --n {n} gives {walks * n} sampled continuations per task; the empirical bounds "
            f"need at least {MIN_SPINE_WALKS}: raise --walks or --n"
        )
    specs = _drafter_list(drafter)
    if specs:
        if _legacy(specs, 1.0) and "/" in specs[0]:
            parse_early_exit(specs[0])  # spec errors before the slow model load
        else:
            for spec in specs:
                parse_llm_drafter(spec)
        if record:
            raise BrwsimError("--record and --drafter cannot be combined (a saved-logits file holds target rows only)")
    return P_list, n, walks, depth, trees, batch, seed


def _measure_all(source, items, P_max, walks, depth, seed, batch, drafter, log):
    """Per task: the prompts' results (and the drafter's, with ``drafter``), in prompt order.

    In a multi-process run every process measures every ``count()``-th prompt
    and the results are gathered: a prompt's result depends on the prompt and
    the seed only, so the rows are those of one process.
    """
    mine = []
    for i, p in processes.share(list(enumerate(items))):
        if drafter:
            r, dr = measure_prompt_with_drafter(source, p, P_max, walks=walks, depth=depth, seed=seed, batch=batch)
        else:
            r, dr = measure_prompt(source, p, P_max, walks=walks, depth=depth, seed=seed, batch=batch), None
        mine.append((i, r, dr))
        if log:
            log(f"[{i + 1}/{len(items)}] {p.task} {p.id}: {r.n_tokens} prompt tokens, {r.seconds:.1f} s")
    by_task: dict[str, list] = {}
    drafted: dict[str, list] = {}
    for _, r, dr in sorted((x for part in processes.gather(mine) for x in part), key=lambda x: x[0]):
        by_task.setdefault(r.prompt.task, []).append(r)
        if dr is not None:
            drafted.setdefault(r.prompt.task, []).append(dr)
    return by_task, drafted


def _open_drafters(source, specs, T, log, heldout_tokens: int = HELDOUT_TOKENS):
    """(draft models, calibration per drafter on ``heldout_tokens`` held-out positions) for the drafter path."""
    if not hasattr(source, "model"):
        raise BrwsimError("--drafter needs a transformers target (a model name, directory or .gguf), not a .npz")
    drafters = [open_llm_drafter(spec, source, log) for spec in specs]
    ids = heldout_ids(source, heldout_tokens)
    lp = teacher_forced(source.open(ids[:1]), ids)
    cal = [calibrate(source, d, ids, T, target_rows=lp) if hasattr(d, "context") else None for d in drafters]
    return drafters, cal


def _measure_drafters(source, drafters, cal, items, P_max, st: DrafterSettings, log):
    """Per task: the prompts' (PromptResult, [DraftedPrompt]) in prompt order (shared between processes)."""
    rates = [c["rates"] if c else None for c in cal]
    mine = []
    for i, p in processes.share(list(enumerate(items))):
        r, drs = measure_prompt_drafters(source, drafters, p, P_max, st, rates)
        mine.append((i, r, drs))
        if log:
            log(f"[{i + 1}/{len(items)}] {p.task} {p.id}: {r.n_tokens} prompt tokens, {r.seconds:.1f} s")
    by_task: dict[str, list] = {}
    for _, r, drs in sorted((x for part in processes.gather(mine) for x in part), key=lambda x: x[0]):
        by_task.setdefault(r.prompt.task, []).append((r, drs))
    return by_task


def _drafter_tasks(source, specs, items, P_list, st, trees, seed, save_pool, log) -> list:
    drafters, cal = _open_drafters(source, specs, st.T, log, st.heldout_tokens)
    by_task = _measure_drafters(source, drafters, cal, items, max(P_list), st, log)
    tasks = []
    for task, pairs in by_task.items():
        rs = [r for r, _ in pairs]
        pool = os.path.join(save_pool, f"{task}.npz") if save_pool else None
        if save_pool:
            os.makedirs(save_pool, exist_ok=True)
        t = summarize_task(task, rs, P_list, surrogate_trees=trees, seed=seed, pool_path=pool)
        t["drafters"] = []
        for j, d in enumerate(drafters):
            info = dict(getattr(d, "info", {}) or {})
            if cal[j]:
                info["heldout"] = {k: v for k, v in cal[j].items() if k != "rates"}
            drs = [x[j] for _, x in pairs]
            t["drafters"].append(summarize_drafter_task(drs, [r.oracle.values for r in rs], P_list, info))
        tasks.append(t)
    return tasks


def _plain_tasks(source, items, P_list, walks, depth, seed, batch, trees, save_pool, drafter, log) -> list:
    by_task, drafted = _measure_all(source, items, max(P_list), walks, depth, seed, batch, drafter, log)
    tasks = []
    for task, rs in by_task.items():
        pool = os.path.join(save_pool, f"{task}.npz") if save_pool else None
        if save_pool:
            os.makedirs(save_pool, exist_ok=True)
        tasks.append(summarize_task(task, rs, P_list, surrogate_trees=trees, seed=seed, pool_path=pool))
        if drafter:
            tasks[-1]["drafter"] = summarize_drafter(drafted[task], P_list, n_layers=source.n_layers)
    return tasks


def _check_drafters(drafter, T, check_samples, check_P, heldout_tokens) -> tuple[list[str], bool]:
    """(specs, legacy early-exit path?); every spec and number checked before the slow model load."""
    specs = _drafter_list(drafter)
    legacy = bool(specs) and _legacy(specs, T)
    for spec in [] if legacy else specs:
        parse_llm_drafter(spec)
    check_positive_int("check_samples", check_samples, 0)
    check_positive_int("check_P", check_P)
    check_positive_int("heldout_tokens", heldout_tokens, 2)
    return specs, legacy


def _timing(inner, f0: float, model_seconds: float, t_all: float) -> dict:
    fwd = sum(processes.gather(getattr(inner, "forward_seconds", 0.0) - f0))  # forward passes of every process
    model_seconds = sum(processes.gather(model_seconds))
    return {
        "load_seconds": getattr(inner, "load_seconds", 0.0),
        "model_phase_seconds": model_seconds,
        "forward_seconds": fwd,
        "forward_fraction": fwd / model_seconds if model_seconds > 0 else None,
        "total_seconds": time.perf_counter() - t_all,
    }


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
    device: str = "auto",
    max_prompt_tokens: int = 384,
    save_pool: str | None = None,
    record: str | None = None,
    source=None,
    log=None,
    drafter=None,
    temperature: float = 1.0,
    check_samples: int = 200,
    check_P: int = 32,
    heldout_tokens: int = HELDOUT_TOKENS,
) -> dict:
    """Run the measurements; return the JSON object of ``brwsim llm --json`` (docs/llm.md).

    ``drafter``: one SPEC or a list (docs/drafters.md, "Real drafters"); ``early-exit`` alone at
    T = 1 keeps its one-pass path. ``temperature``: the target and every drafter at T.
    """
    P_list, n, walks, depth, trees, batch, seed = _check(P, n, walks, depth, trees, batch, seed, drafter, record)
    T = check_temperature(temperature)
    specs, legacy = _check_drafters(drafter, T, check_samples, check_P, heldout_tokens)
    items = load_prompts(prompts, n)  # prompt errors before the slow model load
    t_all = time.perf_counter()
    if source is None:
        source = load_source(model, device=device, dtype=dtype, threads=threads, max_prompt_tokens=max_prompt_tokens)
    if legacy:
        source = EarlyExitSource(source, parse_early_exit(specs[0]))
    elif T != 1.0 and not specs:
        source = TempSource(source, T)
    recorder = source = Recorder(source) if record else source
    inner = source.inner if record else source
    f0, t0 = getattr(inner, "forward_seconds", 0.0), time.perf_counter()
    if specs and not legacy:
        st = DrafterSettings(T, walks, depth, seed, batch, check_samples, check_P, heldout_tokens=heldout_tokens)
        tasks = _drafter_tasks(source, specs, items, P_list, st, trees, seed, save_pool, log)
    else:
        tasks = _plain_tasks(source, items, P_list, walks, depth, seed, batch, trees, save_pool, legacy, log)
    model_seconds = time.perf_counter() - t0
    if record:
        recorder.save(record)
    settings = dict(prompts=prompts, n=n, walks=walks, depth=depth, seed=seed, surrogate_trees=trees)
    settings |= dict(dtype=dtype, threads=threads, convention=CONVENTION, drafter=drafter, temperature=T)
    model_info = {"model": getattr(inner, "name", model), "vocab_size": int(inner.vocab_size)}
    return model_info | settings | {"tasks": tasks, "timing": _timing(inner, f0, model_seconds, t_all)}
