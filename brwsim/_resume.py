"""Checkpoint and resume of a ``simulate`` run: which file keeps it, what it restores, when it is written.

The file format (a checksummed file per run, named by what fixes the run's
numbers) is :mod:`brwsim._checkpoint`; this module ties it to a run of the
driver (:mod:`brwsim.estimate`): the run's identity (:func:`open_checkpoint`),
the statistics of an earlier run restored before the first round
(:func:`resume`; process 0 reads the file and hands it to the others) and the
running sums saved after every round (:func:`save`), with the line a fault
prints about what was finished (:func:`finished_text`).
"""

from __future__ import annotations

import jax

from . import _processes as processes
from ._checkpoint import Checkpoint, code_version, content_digest
from ._stats import RunningStat
from .errors import BrwsimError


def open_checkpoint(run, directory, keep_values: bool) -> Checkpoint | None:
    """The checkpoint file of ``run`` (:class:`brwsim.estimate.Run`) in ``directory`` (None: no checkpoint),
    checked to be writable."""
    if directory is None:
        return None
    if keep_values:
        raise BrwsimError("keep_values and checkpoint do not go together: a resumed run has no earlier values")
    meta = {
        "law": run.law.spec(),
        "P": run.P_list,
        "trees": run.trees,
        "seed": run.seed,
        "drafter": run.d.text,
        "draft_law": None if run.dlaw is None else run.dlaw.spec(),
        "check": bool(run.check),
        # what the law, drafter and draft law resolved to (file contents too) and the code: another one is
        # another run, even under the same path or spec
        "content": [content_digest(x) for x in (run.law, run.d, run.dlaw)],
        "code": code_version(),
        "x64": bool(jax.config.jax_enable_x64),
    }
    ckpt = Checkpoint(directory, meta)
    if processes.is_main():
        ckpt.check_writable()
    return ckpt


def finished_text(sums, run) -> str:
    """What the finished rounds are and where they are kept: the end of the line a fault prints."""
    done = sums.done()
    if done == 0:
        return f"no round of {run.round_trees} trees a process was finished yet"
    if run.ckpt is None:
        return f"{done} of {run.trees} trees were finished (run with --checkpoint DIR to keep finished rounds)"
    return f"{done} of {run.trees} trees are kept in {run.ckpt.path}: rerun the same command to resume"


def resume(sums, run) -> int:
    """Trees already finished by an earlier run of the same arguments (its statistics restored into ``sums``)."""
    if run.ckpt is None:
        return 0
    saved = None
    if processes.is_main():
        try:
            saved = run.ckpt.load()
        except BrwsimError as e:  # every process stops with process 0's one line
            saved = str(e)
    saved = processes.gather(saved)[0]  # process 0's file (or why it is refused), everywhere
    if saved is None:
        return 0
    if isinstance(saved, str):
        raise BrwsimError(saved)
    done, states = saved
    counts = [
        s["n"] + s["buf"].size if s["buf"].ndim == 1 and s["buf"].size <= RunningStat.BLOCK else -1 for s in states
    ]
    if counts != [done] * len(run.P_list) + [done if run.check else 0]:
        raise run.ckpt.refuse(f"holds statistics of {counts} trees, not of its {done} finished")
    sums.restore(states)
    return done


def save(sums, run, done: int) -> None:
    """The running sums of the first ``done`` trees into the checkpoint (process 0), and the fault line told."""
    if run.ckpt is not None and processes.is_main():
        run.ckpt.save(done, sums.states())
    processes.note_finished(finished_text(sums, run))


__all__ = ["finished_text", "open_checkpoint", "resume", "save"]
