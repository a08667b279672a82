"""Checkpoints of ``simulate``: its running sums after every finished round, so a rerun resumes bit for bit.

A checkpoint directory holds one file per run, named by a hash of what fixes
the run's numbers (law, budgets, trees, seed, drafter, draft law, check): the
same arguments find their file, other arguments never do. The file holds how
many trees are finished (always the first ones, in tree order) and every
running statistic exactly (:meth:`brwsim._stats.RunningStat.state`). Resuming
adds the remaining trees in the same order, and the per-tree values do not
depend on the batch, the devices or the process count, so a resumed run
prints what an uninterrupted one prints, bit for bit, whatever those are.
Files are written to a unique temporary name and renamed (atomic), by
process 0 only; process 0 reads the file and hands it to the others.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from .errors import BrwsimError

FORMAT = 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Checkpoint:
    """The checkpoint file of one run (``meta``: what fixes its numbers) in ``directory``."""

    def __init__(self, directory, meta: dict):
        self.dir = Path(directory).expanduser()
        self.meta = {"format": FORMAT} | meta
        text = json.dumps(self.meta, sort_keys=True)
        self.path = self.dir / f"simulate-{hashlib.sha256(text.encode()).hexdigest()[:16]}.npz"

    def check_writable(self) -> None:
        """A one-line error now, before any work, if the directory cannot hold the checkpoint."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BrwsimError(f"--checkpoint {self.dir}: cannot create the directory ({e.strerror})") from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise BrwsimError(f"--checkpoint {self.dir}: the directory is not writable; choose another")

    def load(self) -> tuple[int, list[dict]] | None:
        """(trees finished, states of the statistics) from this run's file, or None if there is none."""
        if not self.path.exists():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                done = int(z["done"])
                states = [
                    {"buf": z[f"buf{i}"], "n": int(z["n"][i]), "mean": float(z["mean"][i]), "m2": float(z["m2"][i])}
                    for i in range(int(z["count"]))
                ]
        except (OSError, ValueError, KeyError) as e:
            raise BrwsimError(
                f"checkpoint {self.path} cannot be read ({type(e).__name__}); delete it to start the run afresh"
            ) from None
        if meta != self.meta:
            raise BrwsimError(f"checkpoint {self.path} belongs to another run; delete it to start afresh")
        return done, states

    def save(self, done: int, states: list[dict]) -> None:
        """Write ``done`` and the statistics' states: a unique temporary file, then an atomic rename."""
        arrays = {f"buf{i}": s["buf"] for i, s in enumerate(states)}
        arrays |= {
            "meta": np.array(json.dumps(self.meta, sort_keys=True)),
            "done": np.array(done, np.int64),
            "count": np.array(len(states), np.int64),
            "n": np.array([s["n"] for s in states], np.int64),
            "mean": np.array([s["mean"] for s in states], np.float64),
            "m2": np.array([s["m2"] for s in states], np.float64),
        }
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=self.path.stem + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


__all__ = ["Checkpoint"]
