"""Several processes, one program: start them, split work, gather results (docs/scaling.md, "Many processes").

brwsim runs as one JAX program over several processes (one per host, or one
per accelerator) with ``jax.distributed``: every process computes its share of
the trees, prompts or experiments on its own devices, and the results are
gathered with JAX's multi-host utilities (on CPU, JAX's gloo collectives).
Nothing else is exchanged: a tree's key depends on (seed, index) only, so each
process builds the keys of its own trees, and the gathered values are added in
the order one process would have added them, which makes the numbers bit for
bit those of a one-process run.

What this process knows of its run (count, index, what it finished, its
timeouts, its launcher's channel) is one :class:`Group`, made by
:func:`start` and passed explicitly to the launcher (:mod:`brwsim._supervise`)
and the peer watch (:class:`PeerWatch`); the module's functions read the
group this process joined, as JAX's own ``jax.process_index()`` reads the
distributed client it joined. A failed peer is named from structured state:
the heartbeats every process writes into the coordination service's
key-value store (which peers' stopped, whether the service still answers),
the worker's exit status and whether it ever joined (:func:`fault_line`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import os
import pickle
import re
import socket
import sys
import threading
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
ALIVE_KEY = "brwsim/alive/{}"  # each process's heartbeat counter in the coordination service's key-value store
DONE = "done"  # the counter a process leaves when its command succeeded (PeerWatch.finish): not a stopped peer
TEXT_FALLBACK = " (as the runtime's log names it)"  # marks a line whose process was named by the last resort


@dataclasses.dataclass
class Group:
    """This process's place in a run of several processes: what it works with, and what a fault's line says.

    ``n`` and ``me`` are the process count and index (``"?"`` while ``--distributed auto`` has not joined);
    ``heartbeat`` and ``join`` the timeouts in seconds; ``joined``: the run has assembled; ``finished``: what
    this process has finished so far; ``port_in_use``: process 0 found the coordinator's port taken before
    it started the coordination service; ``alone``: depth of :func:`alone` blocks; ``channel``: the pipe to
    this process's launcher (:func:`brwsim._supervise.supervise`).
    """

    n: int | str = 1
    me: int | str = 0
    heartbeat: int = HEARTBEAT_S
    join: int = JOIN_S
    coordinator: str | None = None
    joined: bool = False
    finished: str | None = None
    port_in_use: bool = False
    alone: int = 0
    channel: _supervise.Channel = dataclasses.field(default_factory=_supervise.Channel)
    watch: PeerWatch | None = None  # this process's peer watch, once joined (runs of two or more)

    def run_name(self) -> str:
        """``the 2-process run``, or ``the multi-process run`` while the count is unknown."""
        return f"the {self.n}-process run" if isinstance(self.n, int) else "the multi-process run"

    def describe(self, ending: _supervise.Ending) -> str:
        """The launcher's one line for its worker's ``ending`` (:func:`fault_line` of this group), asking first,
        on a process other than 0, whether the coordination service still accepts connections."""
        up = None if self.me == 0 or not self.coordinator else _service_answers(self.coordinator)
        return fault_line(self, ending, up)


_JOINED = Group()  # the group this process joined; start() replaces it, the fields of one group change in place


def current() -> Group:
    """The :class:`Group` of this process (a one-process group until :func:`start` joins a run)."""
    return _JOINED


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


def _service_answers(coordinator: str, timeout: float = 2.0) -> bool:
    """True when the coordination service at ``coordinator`` (``HOST:PORT``) accepts a TCP connection."""
    host, _, port = coordinator.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _port_taken(coordinator: str) -> bool:
    """True when the coordinator's port cannot be bound here (``EADDRINUSE``): the coordination service that
    process 0 starts on it would fail. Asked of the operating system before the service starts."""
    port = int(coordinator.rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


class PeerWatch:
    """Every process's heartbeat in the coordination service's key-value store, watched by every process.

    A daemon thread of each joined process increments its own counter
    (:data:`ALIVE_KEY`) every ``period`` seconds and reads the others'; it
    tells its launcher (:class:`brwsim._supervise.Channel`) ``stale``, the
    processes whose counter has not moved for ``stale_after`` seconds (half
    the heartbeat timeout: well before the runtime gives up on them), and
    ``answered``, the ``time.monotonic()`` of its last round the service
    answered. When the runtime ends this process for a failed peer, the
    launcher names the failed process from these (:func:`fault_line`).
    """

    def __init__(self, client, group: Group):
        self.client, self.group = client, group
        self.stale_after = max(2.0, group.heartbeat / 2)
        self.period = min(1.0, self.stale_after / 4)
        self.peers = [i for i in range(group.n) if i != group.me]
        self._stop, self._done = threading.Event(), False
        self._thread = threading.Thread(target=self._loop, name="brwsim-peer-watch", daemon=True)

    def start(self) -> PeerWatch:
        self._thread.start()
        atexit.register(self.stop)  # before JAX's own shutdown of the client (atexit runs the last first)
        return self

    def finish(self) -> None:
        """This process's command succeeded: stop beating, and the watch thread's last write is :data:`DONE` as
        this process's counter, so the processes still running never read it as one that stopped sending
        heartbeats. Only on success: a process that failed, even in Python with a clean exit, keeps its last
        counter, which its peers then see stop."""
        self._done = True
        self.stop()

    def stop(self) -> None:
        """Stop the watch (at exit, whatever happened; the thread is a daemon, so a write the service never
        answers cannot hold the interpreter's exit)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _read(self, i: int) -> str | None:
        try:
            return self.client.key_value_try_get(ALIVE_KEY.format(i))
        except Exception:  # noqa: BLE001 - not written yet (or the service is gone: the next write says so)
            return None

    def _loop(self) -> None:
        tell, beat, told = self.group.channel.tell, 0, None
        seen = {i: (None, time.monotonic()) for i in self.peers}
        while not self._stop.wait(self.period):
            beat += 1
            try:
                self.client.key_value_set(ALIVE_KEY.format(self.group.me), str(beat), allow_overwrite=True)
            except Exception:  # noqa: BLE001 - the service does not answer: 'answered' stops moving
                continue
            values, now = {i: self._read(i) for i in self.peers}, time.monotonic()
            seen = {i: seen[i] if values[i] == seen[i][0] else (values[i], now) for i in self.peers}
            stale = " ".join(str(i) for i in self.peers if values[i] != DONE and now - seen[i][1] > self.stale_after)
            tell("answered", f"{now:.3f}")
            if stale != told:
                tell("stale", stale)
                told = stale
        if self._done:  # written here, after the last beat, so no beat in flight can overwrite it
            try:
                self.client.key_value_set(ALIVE_KEY.format(self.group.me), DONE, allow_overwrite=True)
            except Exception:  # noqa: BLE001 - the service is already gone: nobody is left to read it
                pass


def _failed_process(message: str) -> str:
    """Last resort, when the peer watch left nothing to go on (no heartbeat seen stop, the service still
    answering): which process the coordination service's report names (its tasks are the process ids).
    This reads JAX's log text, which a JAX release may change; a line named this way says so
    (:data:`TEXT_FALLBACK`)."""
    m = re.search(r"stopped sending heartbeats\):\s*([\d,\s]+)", message)
    if m:
        ids = [int(x) for x in re.findall(r"\d+", m.group(1))]
        return ", ".join(_name(i) for i in ids)
    m = re.search(r"task[:_ ](\d+)", message)
    if m:
        return _name(int(m.group(1)))
    return _name(0)  # this process lost the coordination service itself


def _not_joined(view: Group) -> tuple[str, str]:
    n, me, at = view.n, view.me, view.coordinator
    if view.port_in_use or not isinstance(n, int) or n < 2:  # nobody else to wait for
        where = f" on {at}" if at else ""
        return f"process {me}", (
            f"could not start the run's coordination service{where} (is the port in use by another program? "
            "choose another --coordinator port)"
        )
    if me == 0:
        who = "process 1" if n == 2 else f"one of processes 1-{n - 1}"
    else:
        who = "process 0 (the coordinator)" if n == 2 else "process 0 (the coordinator) or another process"
    return who, f"did not join within {view.join} s (not started, or given another --coordinator)"


def _failed_peer(view: Group, ending: _supervise.Ending, service_up: bool | None) -> tuple[str, str]:
    """Who failed in a joined run: the peers whose heartbeats the peer watch saw stop while the coordination
    service still answered; else, when the service is gone (``service_up`` False, or the peer watch got no
    answer for longer than a peer may miss its heartbeats), process 0; the runtime's report text only when
    neither says anything. Stopped heartbeats come first: in a run of three or more processes the service may
    shut down after another process died (the runtime ends the run), and then the dead process, not the
    coordinator, is the one to name; when process 0 itself dies, its service goes with it, so the watch sees
    no counter stop before the service stops answering."""
    told, stale_after = ending.told, max(2.0, view.heartbeat / 2)
    answered = float(told["answered"]) if "answered" in told else None
    stale = [int(i) for i in told.get("stale", "").split()]
    lost = answered is not None and ending.at - answered > stale_after
    if stale:  # seen while the service still answered: these stopped first, whatever became of the service after
        who, what = ", ".join(_name(i) for i in stale), "stopped sending heartbeats"
    elif view.me != 0 and (service_up is False or lost):
        who, what = _name(0), "is unreachable or failed"
    else:
        who, what = _failed_process(ending.report), "failed" + TEXT_FALLBACK
    return who, what + f" (detected within about {2 * view.heartbeat} s)"


def fault_line(group: Group, ending: _supervise.Ending, service_up: bool | None = None) -> str:
    """The one line a launcher prints when its worker (of ``group``, as it was when the launcher forked) ended
    of the runtime's failure report or of a signal: which process failed, and what was finished. Decided from
    the ending's structured state (:class:`brwsim._supervise.Ending`): the signal, whether the worker told it
    had joined, what its peer watch told (:class:`PeerWatch`), and ``service_up``: whether the coordination
    service still accepted a connection when the worker ended (None: not asked)."""
    told, view = ending.told, dataclasses.replace(group)
    if "joined" in told:
        n, me = told["joined"].split()
        view.n, view.me, view.joined = int(n), int(me), True
    if ending.signal is not None:
        who, what = f"process {view.me}", f"was ended by {ending.signal}"
    elif not view.joined:
        who, what = _not_joined(view)
    else:
        who, what = _failed_peer(view, ending, service_up)
    done = told.get("finished") or view.finished or "nothing was finished"
    return f"brwsim: error: {who} of {view.run_name()} {what}; process {view.me} stops: {done}"


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
    they stop with exit status :data:`FAULT_EXIT` (docs/scaling.md, "Faults"); a :class:`PeerWatch` tells
    the launcher whose heartbeats stopped, so the line names the process from that. With ``supervise`` (the
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
    global _JOINED
    group = _JOINED = Group(
        n=num_processes or "?",
        me=process_id if process_id is not None else "?",
        heartbeat=heartbeat,
        join=timeout,
        coordinator=coordinator,
    )
    group.port_in_use = process_id == 0 and not auto and _port_taken(coordinator)
    if supervise if supervise is not None else not _interactive():
        group.channel = _supervise.supervise(group.describe)
    _join(group, auto, num_processes, process_id)
    return True


def _join(group: Group, auto: bool, num_processes, process_id) -> None:
    """Join the run of ``group``, tell the launcher, and start the peer watch."""
    try:
        _initialize(group.coordinator, num_processes, process_id, group.join, group.heartbeat)
    except (RuntimeError, ValueError, TypeError) as e:
        raise _join_failed(e, auto, group.coordinator, group.join, group) from None
    group.n, group.me, group.joined = jax.process_count(), jax.process_index(), True
    group.channel.tell("joined", f"{group.n} {group.me}")
    client = _client()
    if group.n > 1 and client is not None:  # without JAX's client, a fault is named from the runtime's report
        group.watch = PeerWatch(client, group).start()


def succeeded() -> None:
    """This process's command succeeded: its peer watch leaves :data:`DONE` (:meth:`PeerWatch.finish`)."""
    if _JOINED.watch is not None:
        _JOINED.watch.finish()


def _join_failed(e: Exception, auto: bool, coordinator, timeout: int, group: Group) -> BrwsimError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if auto:
        return BrwsimError(
            f"--distributed auto could not join a multi-process run within {timeout} s: JAX found no cluster "
            "it knows (SLURM, Open MPI, Kubernetes, Cloud TPU) or could not reach it; elsewhere give "
            f"--coordinator HOST:PORT, --num-processes N and --process-id I ({first[:200]})"
        )
    return BrwsimError(
        f"could not join {group.run_name()} at {coordinator} within {timeout} s "
        f"(is every process started, with the same --coordinator?): {first[:200]}"
    )


def _interactive() -> bool:
    """A Python prompt or a notebook kernel: forking a launcher there would leave the session behind."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules


def note_finished(text: str | None) -> None:
    """What this process has finished (and where it is kept), for the line a fault prints."""
    group = current()
    group.finished = text
    if text and count() > 1:
        group.channel.tell("finished", text)


def several() -> bool:
    """True once this process has joined a run of several processes (:func:`start`)."""
    group = current()
    return group.joined and isinstance(group.n, int) and group.n > 1


def count() -> int:
    """Processes working together here (1 unless :func:`start` joined a multi-process run)."""
    return 1 if current().alone else jax.process_count()


def index() -> int:
    """This process's index, 0 .. count() - 1; process 0 prints and writes files."""
    return 0 if current().alone else jax.process_index()


def is_main() -> bool:
    """True on the process that prints and writes files (process 0 of the whole run)."""
    return jax.process_index() == 0


@contextlib.contextmanager
def alone():
    """Inside the block this process works by itself (e.g. on an experiment no other process runs)."""
    group = current()
    group.alone += 1
    try:
        yield
    finally:
        group.alone -= 1


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
    group = current()
    time.sleep(2 * group.heartbeat + 5)
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    done = group.finished or "nothing was finished"
    return BrwsimError(
        f"an exchange between the {group.n} processes of the run failed ({first[:200]}); "
        f"process {group.me} stops: {done}"
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
