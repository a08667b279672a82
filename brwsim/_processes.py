"""Several processes, one program: start them, split work, gather results (docs/scaling.md, "Many processes").

brwsim runs as one JAX program over several processes (one per host, or one
per accelerator) with ``jax.distributed``: every process computes its share of
the trees, prompts or experiments on its own devices, and the results are
gathered with JAX's multi-host utilities (on CPU, JAX's gloo collectives).
Nothing else is exchanged: a tree's key depends on (seed, index) only, so each
process builds the keys of its own trees, and the gathered values are added in
the order one process would have added them, which makes the numbers bit for
bit those of a one-process run.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

from .errors import BrwsimError, check_positive_int

ENV = ("BRWSIM_COORDINATOR", "BRWSIM_NUM_PROCESSES", "BRWSIM_PROCESS_ID")


def start(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    auto: bool = False,
    timeout: int = 120,
) -> bool:
    """Join a multi-process run (call before anything touches JAX's backend); True when one was joined.

    Explicit ``coordinator`` (``host:port`` of process 0), ``num_processes`` and
    ``process_id``, else the ``BRWSIM_COORDINATOR``, ``BRWSIM_NUM_PROCESSES`` and
    ``BRWSIM_PROCESS_ID`` environment variables; ``auto`` lets JAX read a
    cluster's own environment (SLURM, Open MPI, Kubernetes, Cloud TPU). A
    process that cannot reach the others within ``timeout`` seconds stops with
    an error instead of waiting forever.
    """
    env = [os.environ.get(k) for k in ENV]
    coordinator = coordinator or env[0]
    num_processes = num_processes if num_processes is not None else env[1]
    process_id = process_id if process_id is not None else env[2]
    if not (auto or coordinator or num_processes is not None):
        return False
    if not auto:
        if not coordinator or num_processes is None or process_id is None:
            raise BrwsimError(
                "a multi-process run needs --coordinator HOST:PORT, --num-processes N and --process-id I "
                "(or BRWSIM_COORDINATOR, BRWSIM_NUM_PROCESSES, BRWSIM_PROCESS_ID), or --distributed auto on a cluster"
            )
        num_processes = check_positive_int("num-processes", num_processes)
        process_id = check_positive_int("process-id", process_id, minimum=0)
        if process_id >= num_processes:
            raise BrwsimError(f"process-id must be below num-processes ({num_processes}), got {process_id}")
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout,
        )
    except (RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BrwsimError(f"could not join the multi-process run: {first[:200]}") from None
    return True


_ALONE = [0]  # > 0 inside alone(): this process works by itself


def count() -> int:
    """Processes working together here (1 unless :func:`start` joined a multi-process run)."""
    return 1 if _ALONE[0] else jax.process_count()


def index() -> int:
    """This process's index, 0 .. count() - 1; process 0 prints and writes files."""
    return 0 if _ALONE[0] else jax.process_index()


def is_main() -> bool:
    """True on the process that prints and writes files (process 0 of the whole run)."""
    return jax.process_index() == 0


@contextlib.contextmanager
def alone():
    """Inside the block this process works by itself (e.g. on an experiment no other process runs)."""
    _ALONE[0] += 1
    try:
        yield
    finally:
        _ALONE[0] -= 1


@contextlib.contextmanager
def _native_stdout_to_stderr():
    """Send what native code prints on stdout to stderr (the CPU collectives announce their connections on
    stdout, which must carry only results, e.g. one JSON object)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def gather(obj) -> list:
    """Every process's ``obj`` (any picklable object), in process order, on every process."""
    if count() == 1:
        return [obj]
    blob = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    with _native_stdout_to_stderr():
        sizes = multihost_utils.process_allgather(np.array([blob.size], np.int64)).reshape(-1)
        padded = np.zeros(int(sizes.max()), np.uint8)
        padded[: blob.size] = blob
        parts = multihost_utils.process_allgather(padded)
    return [pickle.loads(parts[i, : int(sizes[i])].tobytes()) for i in range(parts.shape[0])]


def barrier(name: str) -> None:
    """Wait until every process gets here."""
    if count() > 1:
        with _native_stdout_to_stderr():
            multihost_utils.sync_global_devices(name)


def share(items: list) -> list:
    """This process's items of a list: every ``count()``-th, from ``index()`` (round robin)."""
    return items[index() :: count()]
