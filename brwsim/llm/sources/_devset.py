"""Development prompts: per task, prompts that no experiment scores, the only ones a drafter's settings are tuned on.

The real-model experiments and tools score ``load_prompts(source, n)``: ``n``
prompts evenly spaced over the source (experiments/real_model.py and
experiments/real_drafters.py: 64 a task, 1 or 2 with ``--quick``;
tools/forward_floor.py: 3). The *scored* prompts of a source are the union
of those selections over :data:`SCORED_NS`; its *development* prompts are
:data:`DEV_N` prompts evenly spaced over the rest, in the source's order
(:func:`dev_prompts`). Choosing a setting by looking at a scored prompt's
result (a head's loss weights, its drafting depths, a builder) would tune on
the sample that is then reported; tools/eagle_head_value.py, the tool that
compares heads on prompts, reads the development prompts only, and
:func:`check_unscored` refuses a scored one.

Tasks: ``code`` = ``humaneval``, ``prose`` = ``pydoc``, ``chat`` =
``sharegpt`` (:data:`TASKS`); a chat development prompt comes from the
evaluation chunks like every chat prompt, so no training conversation
repeats it (:mod:`._sharegpt`).
"""

from __future__ import annotations

from ...errors import BrwsimError
from ._prompts import Prompt, load_prompts, spread

TASKS = {"code": "humaneval", "prose": "pydoc", "chat": "sharegpt"}
SCORED_NS = (1, 2, 3, 4, 8, 16, 32, 64)  # every per-task n the experiments and tools score
DEV_N = 8  # development prompts per task


def _source(task_or_source: str) -> str:
    src = TASKS.get(task_or_source, task_or_source)
    if src not in TASKS.values():
        known = ", ".join(f"{t} ({s})" for t, s in TASKS.items())
        raise BrwsimError(f"no development prompts for {task_or_source!r}; tasks: {known}")
    return src


def scored_ids(task_or_source: str) -> frozenset[str]:
    """Ids of every prompt the experiments score for this task (any ``n`` of :data:`SCORED_NS`)."""
    items = load_prompts(_source(task_or_source))
    return frozenset(p.id for n in SCORED_NS for p in spread(items, n))


def dev_prompts(task_or_source: str, n: int | None = None) -> list[Prompt]:
    """The task's development prompts (``n`` of them evenly spaced over the :data:`DEV_N`, all when None)."""
    items = load_prompts(_source(task_or_source))
    scored = scored_ids(task_or_source)
    return spread(spread([p for p in items if p.id not in scored], DEV_N), n)


def load_dev_prompts(spec: str, n: int | None = None) -> list[Prompt]:
    """Development prompts of a comma-separated list of tasks or sources (``code,chat`` or ``humaneval,sharegpt``)."""
    parts = [s.strip() for s in spec.split(",") if s.strip()]
    if not parts:
        raise BrwsimError("development prompts need a task: code, prose or chat")
    return [p for part in parts for p in dev_prompts(part, n)]


def check_unscored(prompts: list[Prompt]) -> None:
    """Raise when any of ``prompts`` is a scored prompt of its task (a setting must not be tuned on one)."""
    for task in sorted({p.task for p in prompts}):
        if task not in TASKS.values():
            continue  # the user's own file: not a scored source
        hit = sorted(p.id for p in prompts if p.task == task and p.id in scored_ids(task))
        if hit:
            raise BrwsimError(f"{len(hit)} scored {task} prompt(s) ({', '.join(hit[:3])}) in a tuning set")


__all__ = ["DEV_N", "SCORED_NS", "TASKS", "check_unscored", "dev_prompts", "load_dev_prompts", "scored_ids"]
