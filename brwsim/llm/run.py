"""``run_llm``: every measurement of brwsim on a real model, for a set of prompts (the ``brwsim llm`` command).

One pipeline: per prompt, the target's walks and the real oracle tree, and
every real drafter's trees, values, statistics and direct check
(:func:`brwsim.llm.drafters.measure_prompt_drafters`; no drafter is the
plain measurement); per task, a :class:`~brwsim.llm.results.TaskResult`
with one :class:`~brwsim.llm.results.DrafterResult` per drafter. The options
are one :class:`RunOptions`, checked before the slow model load.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time

from .. import _interrupts as interrupts
from .. import _processes as processes
from .._cache import check_writable_dir, check_writable_file
from .._stats import CONVENTION
from ..errors import BrwsimError, check_P_list, check_positive_int
from ..theory import MIN_SPINE_WALKS
from .drafters import (
    Calibration,
    DrafterSettings,
    Proposer,
    calibrate,
    heldout_ids,
    measure_prompt_drafters,
    open_drafter,
    parse_drafter,
    summarize_drafter_task,
    teacher_forced,
)
from .measure import summarize_task
from .results import RunResult, TaskResult, Timing, footprint_fields
from .sources import Recorder, check_model, check_temperature, load_prompts, load_source
from .sources._device import check_max_prompt_tokens, check_threads
from .sources.rounds import run_concurrently, stopping

HELDOUT_TOKENS = 256  # held-out positions for each drafter's calibration (Sequoia's rates, held-out KL)
DTYPES = ("float32", "fp32", "bfloat16", "bf16")
STOP_POLL_S = 0.25  # a multi-process run asks at most this often whether another process was signalled


def _valid_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_prompts(items: list, spec: str, walks: int = MIN_SPINE_WALKS) -> list:
    """The prompts of ``--prompts spec``: at least one, every text, id and task valid Unicode (a lone surrogate
    from a JSON escape such as ``\\ud800`` is not text a tokenizer takes), every task with enough prompts for
    ``walks`` continuations each to give the bounds their walks; one-line errors."""
    if not items:
        raise BrwsimError(f"--prompts {spec!r} names no prompt: use humaneval, pydoc, sharegpt or a .jsonl file")
    for p in items:
        for field in ("text", "id", "task"):
            if not _valid_text(getattr(p, field)):
                raise BrwsimError(
                    f"prompt {ascii(p.id)} of task {ascii(p.task)}: its {field} is not valid Unicode (a lone "
                    "surrogate such as \\ud800): fix the prompt file"
                )
    counts: dict[str, int] = {}
    for p in items:
        counts[p.task] = counts.get(p.task, 0) + 1
    for task, k in counts.items():
        if k * walks < MIN_SPINE_WALKS:
            raise BrwsimError(
                f"task {task!r} has {k} prompt(s) x --walks {walks} = {k * walks} sampled continuations; the "
                f"empirical bounds need at least {MIN_SPINE_WALKS}: raise --walks or give the task more prompts"
            )
    return items


def check_encoded(source, items: list) -> None:
    """Every prompt gives at least one token on ``source`` (a one-line error names the one that does not);
    cheap: tokenizing, before any model pass."""
    for p in items:
        if not source.encode(p.text):
            raise BrwsimError(f"prompt {ascii(p.id)} of task {ascii(p.task)} gives no token on {source.name}")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What a real-model run measures (``brwsim llm``'s options; docs/llm.md)."""

    model: str = "smollm2-135m"
    prompts: str = "humaneval"
    n: int = 8
    P: tuple = (1, 2, 4, 8, 16, 32, 64)
    walks: int = 16
    depth: int = 48
    seed: int = 0
    trees: int = 2000  # i.i.d. surrogate trees
    batch: int = 4
    prompt_batch: int = 8  # prompts measured together (brwsim.llm.sources.rounds); the numbers do not depend on it
    dtype: str = "float32"
    threads: int | None = 1
    device: str = "auto"
    max_prompt_tokens: int = 384
    save_pool: str | None = None
    record: str | None = None
    drafters: tuple = ()  # drafter SPECs (docs/drafters.md, "Real drafters")
    temperature: float = 1.0
    check_samples: int = 200
    check_P: int = 32
    heldout_tokens: int = HELDOUT_TOKENS

    def checked(self) -> RunOptions:
        """These options with every number and SPEC checked (one-line errors), before any model loads."""
        P = check_P_list(self.P)
        n, walks, depth, trees, batch, prompt_batch = (
            check_positive_int(k, getattr(self, k)) for k in ("n", "walks", "depth", "trees", "batch", "prompt_batch")
        )
        seed = check_positive_int("seed", self.seed, minimum=0)
        if walks * n < MIN_SPINE_WALKS:
            raise BrwsimError(
                f"--walks {walks} x --n {n} gives {walks * n} sampled continuations per task; the empirical bounds "
                f"need at least {MIN_SPINE_WALKS}: raise --walks or --n"
            )
        drafters = (self.drafters,) if isinstance(self.drafters, str) else tuple(self.drafters or ())
        for spec in drafters:
            parse_drafter(spec)
        if drafters and self.record:
            raise BrwsimError("--record and --drafter cannot be combined (a saved-logits file holds target rows only)")
        check_threads(self.threads)
        check_max_prompt_tokens(self.max_prompt_tokens)
        if self.dtype not in DTYPES:
            raise BrwsimError(f"--dtype must be float32 or bfloat16, got {self.dtype!r}")
        check_model(self.model)
        if self.record is not None:
            check_writable_file(self.record, "--record")
        if self.save_pool is not None:
            check_writable_dir(self.save_pool, "--save-pool")
        check_positive_int("check_samples", self.check_samples, 0)
        check_positive_int("check_P", self.check_P)
        check_positive_int("heldout_tokens", self.heldout_tokens, 2)
        T = check_temperature(self.temperature)
        new = dict(P=tuple(P), n=n, walks=walks, depth=depth, trees=trees, batch=batch, seed=seed, temperature=T,
                   prompt_batch=prompt_batch)  # fmt: skip
        return dataclasses.replace(self, drafters=drafters, **new)

    def settings(self) -> DrafterSettings:
        return DrafterSettings(self.temperature, self.walks, self.depth, self.seed, self.batch, self.check_samples,
                               self.check_P, heldout_tokens=self.heldout_tokens)  # fmt: skip

    def to_dict(self) -> dict:
        """The settings a result records."""
        d = dict(prompts=self.prompts, n=self.n, walks=self.walks, depth=self.depth, seed=self.seed)
        d |= dict(surrogate_trees=self.trees, dtype=self.dtype, threads=self.threads, convention=CONVENTION)
        return d | dict(drafters=list(self.drafters), temperature=self.temperature)


def open_drafters(source, specs, T: float, log=None, heldout_tokens: int = HELDOUT_TOKENS):
    """(drafters, their :class:`Calibration` on ``heldout_tokens`` held-out positions; None for a proposer)."""
    drafters = [open_drafter(spec, source, log) for spec in specs]
    if not drafters:
        return [], []
    ids = heldout_ids(source, heldout_tokens)
    lp = teacher_forced(source.open(ids[:1]), ids)
    cal = [None if isinstance(d, Proposer) else calibrate(source, d, ids, T, target_rows=lp) for d in drafters]
    return drafters, cal


class _StopCheck:
    """A multi-process run's stop check (:func:`brwsim.llm.sources.rounds.stopping`): this process's own signal,
    only noted (:func:`brwsim._interrupts.deferred`), is posted for the others; another process's post is asked
    for at most every ``every`` seconds. Thread-safe; once True, always True."""

    def __init__(self, every: float = STOP_POLL_S):
        self.every, self.last, self.stopped = every, float("-inf"), False
        self.lock = threading.Lock()

    def __call__(self) -> bool:
        with self.lock:
            if self.stopped:
                return True
            sig = interrupts.received()
            if sig is not None:
                processes.post_stop(sig)
                self.stopped = True
                return True
            now = time.monotonic()
            if now - self.last >= self.every:
                self.last = now
                self.stopped = processes.stop_posted() is not None
            return self.stopped


def _measure(source, drafters, cal: list[Calibration | None], items, P_max, opts: RunOptions, log):
    """(per task: the prompts' (PromptResult, [DraftedPrompt]) in prompt order; whether it was interrupted).

    ``opts.prompt_batch`` prompts are measured together, their model passes
    packed (:func:`brwsim.llm.sources.rounds.run_concurrently`). In a
    multi-process run every process measures every ``count()``-th prompt and
    the results are gathered: a prompt's result depends on the prompt and the
    seed only, so the rows are those of one process. A ``KeyboardInterrupt``
    (Ctrl-C, SIGTERM, SIGHUP: :mod:`brwsim._interrupts`) keeps the prompts that
    finished: the result is that of a run over them. In a multi-process run a
    signal is only noted: the process posts it to the others through the
    coordination service, each process stops at its next model request (or
    within :data:`STOP_POLL_S` of the post), and the finished prompts of every
    process are gathered as usual, so every process stops with the same result.
    """
    rates = [c.rates if c else None for c in cal]
    st = opts.settings()
    several = processes.count() > 1
    share = processes.share(list(enumerate(items)))
    finished: dict[int, tuple] = {}

    def job(p):
        return lambda: measure_prompt_drafters(source, drafters, p, P_max, st, rates)

    def done(k, result):
        (i, p), r = share[k], result[0]
        finished[k] = result
        if log:
            log(f"[{i + 1}/{len(items)}] {p.task} {p.id}: {r.n_tokens} prompt tokens, {r.seconds:.1f} s")

    interrupted = False
    try:
        with stopping(_StopCheck() if several else None):
            run_concurrently([job(p) for _, p in share], opts.prompt_batch, done)
    except KeyboardInterrupt:
        if not several and not finished:
            raise
        interrupted = True
        interrupts.once()  # a second signal does not cut the summary of the finished prompts short
    mine = [(share[k][0], *finished[k]) for k in sorted(finished)]
    if several:  # every process's finished prompts, and the first signal any of them got
        sig = interrupts.received()
        parts = processes.gather((mine, None if sig is None else (processes.index(), sig)))
        stops = [stop for _, stop in parts if stop is not None]
        if stops:
            interrupts.agree(*stops[0])
            interrupted = True
        else:  # the rest (summaries, their surrogate runs) is not cut short: a later signal is only noted
            interrupts.settle()
        rows = [x for part, _ in parts for x in part]
        if interrupted and not rows:
            raise KeyboardInterrupt  # every process: "interrupted before anything finished"
    else:
        rows = mine
    by_task: dict[str, list] = {}
    for _, r, drs in sorted(rows, key=lambda x: x[0]):
        by_task.setdefault(r.prompt.task, []).append((r, drs))
    return by_task, interrupted


def _task(task: str, pairs: list, drafters, cal, opts: RunOptions) -> TaskResult:
    rs = [r for r, _ in pairs]
    if all(r.walks is not None for r in rs) and sum(r.walks.xi.shape[0] for r in rs) < MIN_SPINE_WALKS:
        # an interrupted run's few prompts (a whole run is checked up front): the oracle only, no mu, mu_2,
        # surrogate or bounds, as the spine needs MIN_SPINE_WALKS walks
        rs = [dataclasses.replace(r, walks=None) for r in rs]
    pool = os.path.join(opts.save_pool, f"{task}.npz") if opts.save_pool and rs[0].walks is not None else None
    pool = pool if processes.index() == 0 else None  # every process holds the same rows: process 0 writes
    if pool:
        os.makedirs(opts.save_pool, exist_ok=True)
    t = summarize_task(task, rs, list(opts.P), surrogate_trees=opts.trees, seed=opts.seed, pool_path=pool)
    out = []
    for j, d in enumerate(drafters):
        info = dict(d.info) | ({"heldout": cal[j].to_dict()} if cal[j] else {})
        drs = [x[j] for _, x in pairs]
        s = summarize_drafter_task(drs, [r.oracle.values for r in rs], opts.P, info, d.cost_fraction())
        out.append(dataclasses.replace(s, **footprint_fields(d)))
    return dataclasses.replace(t, drafters=out)


def _timing(inner, f0: float, model_seconds: float, t_all: float) -> Timing:
    fwd = sum(processes.gather(inner.forward_seconds - f0))  # forward passes of every process
    model_seconds = sum(processes.gather(model_seconds))
    frac = fwd / model_seconds if model_seconds > 0 else None
    return Timing(inner.load_seconds, model_seconds, fwd, frac, time.perf_counter() - t_all)


def run_llm(options: RunOptions | None = None, *, source=None, log=None, opened=None, **kw) -> RunResult:
    """Run the measurements (``options``, or :class:`RunOptions` fields as keywords); return the
    :class:`~brwsim.llm.results.RunResult` (``to_dict()`` is ``brwsim llm --json``, docs/llm.md).
    ``source``: an already loaded target (else ``options.model`` is loaded); ``opened``: the drafters of
    ``options.drafters`` already opened on it (:func:`open_drafters`)."""
    opts = (dataclasses.replace(options, **kw) if options else RunOptions(**kw)).checked()
    items = check_prompts(load_prompts(opts.prompts, opts.n), opts.prompts, opts.walks)  # before the slow model load
    # several processes: a signal is only noted until the measurement's exchange, where every process stops
    with interrupts.deferred(processes.count() > 1):
        return _run(opts, items, source, log, opened)


def _save_record(recorder, path: str) -> None:
    """The saved-logits file of every process's rows (process 0 writes it)."""
    if processes.count() > 1:
        parts = processes.gather((recorder.entries, recorder.texts))
        if processes.index() != 0:
            return
        recorder.entries = [e for entries, _ in parts for e in entries]
        recorder.texts = {k: v for _, texts in parts for k, v in texts.items()}
    recorder.save(path)


def _run(opts: RunOptions, items: list, source, log, opened) -> RunResult:
    t_all = time.perf_counter()
    if source is None:
        source = load_source(opts.model, device=opts.device, dtype=opts.dtype, threads=opts.threads,
                             max_prompt_tokens=opts.max_prompt_tokens)  # fmt: skip
    check_encoded(source, items)
    inner = source
    recorder = source = Recorder(source) if opts.record else source
    f0, t0 = inner.forward_seconds, time.perf_counter()
    drafters, cal = opened or open_drafters(source, opts.drafters, opts.temperature, log, opts.heldout_tokens)
    by_task, interrupted = _measure(source, drafters, cal, items, max(opts.P), opts, log)
    tasks = [_task(task, pairs, drafters, cal, opts) for task, pairs in by_task.items()]
    model_seconds = time.perf_counter() - t0
    if opts.record:
        _save_record(recorder, opts.record)
    timing = _timing(inner, f0, model_seconds, t_all)
    results = [r for pairs in by_task.values() for r, _ in pairs]
    nodes = sum(r.host_nodes for r in results)
    if nodes:
        timing = dataclasses.replace(timing, host_bytes_per_node=sum(r.host_bytes for r in results) / nodes)
    settings = opts.to_dict()
    if processes.count() > 1 and interrupts.received() is not None and interrupts.by() is None:
        # a signal after the measurement's exchange: every prompt finished; this process says it was signalled
        interrupts.agree(processes.index(), interrupts.received())
        interrupted = True
    if interrupted:
        done = sum(t.prompts for t in tasks)
        settings |= {"interrupted": True, "prompts_finished": done, "prompts_requested": len(items)}
    return RunResult(inner.name, int(inner.vocab_size), settings, tasks, timing)


__all__ = ["HELDOUT_TOKENS", "RunOptions", "check_encoded", "check_prompts", "open_drafters", "run_llm"]
