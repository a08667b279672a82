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
import re
import sys
import time

import jax
import numpy as np
from jax._src import distributed as _distributed  # the coordination service's client (its key-value store)
from jax.experimental import multihost_utils

from . import _supervise
from .errors import BrwsimError, check_positive_int

ENV = ("BRWSIM_COORDINATOR", "BRWSIM_NUM_PROCESSES", "BRWSIM_PROCESS_ID")


HEARTBEAT_S = 10  # a process that sends no heartbeat for this long is dead (JAX's coordination service)
JOIN_S = 120  # how long a process waits for all the others to join
FAULT_EXIT = _supervise.FAULT_EXIT
_RUN = {
    "n": 1,
    "me": 0,
    "finished": None,
    "heartbeat": HEARTBEAT_S,
    "join": JOIN_S,
    "joined": False,
    "coordinator": None,
}  # what a fault report says


def parse_coordinator(text: str) -> str:
    """``HOST:PORT`` of process 0 (``[IPv6]:PORT`` too), checked; a one-line error says what is wrong."""
    text = str(text).strip()
    host, sep, port = text.rpartition(":")
    hint = "give --coordinator HOST:PORT, e.g. 127.0.0.1:12355 (process 0's address, a free port 1-65535)"
    if not sep or not host or host in ("[", "[]"):
        raise BrwsimError(f"coordinator {text!r} is not HOST:PORT: {hint}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise BrwsimError(f"coordinator {text!r}: the port must be an integer from 1 to 65535, got {port!r}: {hint}")
    if host.startswith("[") != host.endswith("]") or any(c.isspace() for c in host):
        raise BrwsimError(f"coordinator {text!r}: {host!r} is not a host name or address: {hint}")
    return f"{host}:{int(port)}"


def _check_seconds(name: str, value) -> int:
    value = check_positive_int(name, value)
    if value > 86400:
        raise BrwsimError(f"{name} must be at most 86400 seconds (one day), got {value}")
    return value


def _name(i: int) -> str:
    return "process 0 (the coordinator)" if i == 0 else f"process {i}"


def _failed_process(message: str) -> str:
    """Which process the coordination service's error names (its tasks are the process ids)."""
    m = re.search(r"stopped sending heartbeats\):\s*([\d,\s]+)", message)
    if m:
        ids = [int(x) for x in re.findall(r"\d+", m.group(1))]
        return ", ".join(_name(i) for i in ids)
    m = re.search(r"task[:_ ](\d+)", message)
    if m:
        return _name(int(m.group(1)))
    return _name(0)  # this process lost the coordination service itself


def _run_name() -> str:
    """``the 2-process run``, or ``the multi-process run`` while the count is unknown (``--distributed auto``)."""
    n = _RUN["n"]
    return f"the {n}-process run" if isinstance(n, int) else "the multi-process run"


def _not_joined(report: str = "") -> tuple[str, str]:
    n, me, at = _RUN["n"], _RUN["me"], _RUN["coordinator"]
    if "Failed to add port" in report or not isinstance(n, int) or n < 2:  # nobody else to wait for
        where = f" on {at}" if at else ""
        return f"process {me}", (
            f"could not start the run's coordination service{where} (is the port in use by another program? "
            "choose another --coordinator port)"
        )
    if me == 0:
        who = "process 1" if n == 2 else f"one of processes 1-{n - 1}"
    else:
        who = "process 0 (the coordinator)" if n == 2 else "process 0 (the coordinator) or another process"
    return who, f"did not join within {_RUN['join']} s (not started, or given another --coordinator)"


def fault_line(report: str, told: dict | None = None) -> str:
    """The one line a process prints when its run fails: which process failed, and what was finished
    (``told``: what the failed worker told its launcher, :func:`brwsim._supervise.tell`)."""
    told = told or {}
    if "joined" in told:
        n, me = told["joined"].split()
        _RUN.update(n=int(n), me=int(me), joined=True)
    hb = _RUN["heartbeat"]
    if report.startswith("this process was ended by"):
        who, what = f"process {_RUN['me']}", report.removeprefix("this process ")
    elif "RegisterTask" in report or not _RUN["joined"]:
        who, what = _not_joined(report)
    else:
        who = _failed_process(report)
        what = "stopped sending heartbeats" if "heartbeat" in report else "is unreachable or failed"
        what += f" (detected within about {2 * hb} s)"
    done = told.get("finished") or _RUN["finished"] or "nothing was finished"
    return f"brwsim: error: {who} of {_run_name()} {what}; process {_RUN['me']} stops: {done}"


def _initialize(coordinator, num_processes, process_id, timeout: int, heartbeat: int) -> None:
    jax.distributed.initialize(
        coordinator,
        num_processes,
        process_id,
        initialization_timeout=timeout,
        heartbeat_timeout_seconds=heartbeat,
    )


def start(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    auto: bool = False,
    timeout: int = JOIN_S,
    heartbeat: int = HEARTBEAT_S,
    supervise: bool | None = None,
) -> bool:
    """Join a multi-process run (call before anything touches JAX's backend); True when one was joined.

    Explicit ``coordinator`` (``host:port`` of process 0), ``num_processes`` and
    ``process_id``, else the ``BRWSIM_COORDINATOR``, ``BRWSIM_NUM_PROCESSES`` and
    ``BRWSIM_PROCESS_ID`` environment variables; ``auto`` lets JAX read a
    cluster's own environment (SLURM, Open MPI, Kubernetes, Cloud TPU). A
    process that cannot reach the others within ``timeout`` seconds stops with
    a one-line error instead of waiting forever. Once joined, a process that
    stops sending heartbeats for ``heartbeat`` seconds (killed, crashed, its
    host gone) is reported by every other process in one line naming it, and
    they stop with exit status :data:`FAULT_EXIT` (docs/scaling.md, "Faults"). With ``supervise`` (the
    default outside an interactive session, POSIX) the calling process forks first and stays behind as the
    worker's launcher, which turns the runtime's own abort (a native stack trace) into that one line
    (:mod:`brwsim._supervise`); without it that abort is JAX's.
    """
    env = [os.environ.get(k) for k in ENV]
    coordinator = coordinator or env[0]
    num_processes = num_processes if num_processes is not None else env[1]
    process_id = process_id if process_id is not None else env[2]
    if not (auto or coordinator or num_processes is not None):
        return False
    timeout, heartbeat = _check_seconds("join-timeout", timeout), _check_seconds("heartbeat-timeout", heartbeat)
    if not auto:
        if not coordinator or num_processes is None or process_id is None:
            raise BrwsimError(
                "a multi-process run needs --coordinator HOST:PORT, --num-processes N and --process-id I "
                "(or BRWSIM_COORDINATOR, BRWSIM_NUM_PROCESSES, BRWSIM_PROCESS_ID), or --distributed auto on a cluster"
            )
        coordinator = parse_coordinator(coordinator)
        num_processes = check_positive_int("num-processes", num_processes)
        process_id = check_positive_int("process-id", process_id, minimum=0)
        if process_id >= num_processes:
            raise BrwsimError(f"process-id must be below num-processes ({num_processes}), got {process_id}")
    _RUN.update(
        n=num_processes or "?",
        me=process_id if process_id is not None else "?",
        heartbeat=heartbeat,
        join=timeout,
        coordinator=coordinator,
    )
    if supervise if supervise is not None else not _interactive():
        _supervise.supervise(fault_line)
    try:
        _initialize(coordinator, num_processes, process_id, timeout, heartbeat)
    except (RuntimeError, ValueError, TypeError) as e:
        raise _join_failed(e, auto, coordinator, timeout) from None
    _RUN.update(n=jax.process_count(), me=jax.process_index(), joined=True)
    _supervise.tell("joined", f"{_RUN['n']} {_RUN['me']}")
    return True


def _join_failed(e: Exception, auto: bool, coordinator, timeout: int) -> BrwsimError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if auto:
        return BrwsimError(
            f"--distributed auto could not join a multi-process run within {timeout} s: JAX found no cluster "
            "it knows (SLURM, Open MPI, Kubernetes, Cloud TPU) or could not reach it; elsewhere give "
            f"--coordinator HOST:PORT, --num-processes N and --process-id I ({first[:200]})"
        )
    return BrwsimError(
        f"could not join {_run_name()} at {coordinator} within {timeout} s "
        f"(is every process started, with the same --coordinator?): {first[:200]}"
    )


def _interactive() -> bool:
    """A Python prompt or a notebook kernel: forking a launcher there would leave the session behind."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules


def note_finished(text: str | None) -> None:
    """What this process has finished (and where it is kept), for the line a fault prints."""
    _RUN["finished"] = text
    if text and count() > 1:
        _supervise.tell("finished", text)


def several() -> bool:
    """True once this process has joined a run of several processes (:func:`start`)."""
    return bool(_RUN["joined"]) and isinstance(_RUN["n"], int) and _RUN["n"] > 1


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


def _collective_failed(e: Exception):
    """A collective with the other processes broke (a peer died mid-exchange): let the coordination
    service name the dead process (its report ends this process), else stop with one line here."""
    time.sleep(2 * _RUN["heartbeat"] + 5)
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    done = _RUN["finished"] or "nothing was finished"
    return BrwsimError(
        f"an exchange between the {_RUN['n']} processes of the run failed ({first[:200]}); "
        f"process {_RUN['me']} stops: {done}"
    )


def gather(obj) -> list:
    """Every process's ``obj`` (any picklable object), in process order, on every process."""
    if count() == 1:
        return [obj]
    blob = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    try:
        with _native_stdout_to_stderr():
            sizes = multihost_utils.process_allgather(np.array([blob.size], np.int64)).reshape(-1)
            padded = np.zeros(int(sizes.max()), np.uint8)
            padded[: blob.size] = blob
            parts = multihost_utils.process_allgather(padded)
    except Exception as e:  # noqa: BLE001 - any runtime error of a collective means a peer failed
        raise _collective_failed(e) from None
    return [pickle.loads(parts[i, : int(sizes[i])].tobytes()) for i in range(parts.shape[0])]


def barrier(name: str) -> None:
    """Wait until every process gets here."""
    if count() > 1:
        try:
            with _native_stdout_to_stderr():
                multihost_utils.sync_global_devices(name)
        except Exception as e:  # noqa: BLE001 - as in gather
            raise _collective_failed(e) from None


STOP_KEY = "brwsim/stop"  # the coordination service's key a signalled process posts (post_stop)


def _client():
    return _distributed.global_state.client


def post_stop(signum: int) -> None:
    """Tell every process of the run, through the coordination service (no collective: the others may be
    anywhere in their work), that this process got ``signum`` and stops (:func:`stop_posted`)."""
    client = _client() if count() > 1 else None
    if client is None:
        return
    try:
        client.key_value_set(STOP_KEY, f"{index()} {int(signum)}")
    except Exception:  # noqa: BLE001 - another process posted first, or the service is gone (a fault)
        pass


def stop_posted() -> tuple[int, int] | None:
    """(process, signal) that a process of the run posted (:func:`post_stop`), else None: one quick request
    to the coordination service."""
    client = _client() if count() > 1 else None
    if client is None:
        return None
    try:
        value = client.key_value_try_get(STOP_KEY)
    except Exception:  # noqa: BLE001 - not posted (or the service is gone: the fault path reports that)
        return None
    process, signum = (int(x) for x in value.split())
    return process, signum


def share(items: list) -> list:
    """This process's items of a list: every ``count()``-th, from ``index()`` (round robin)."""
    return items[index() :: count()]
