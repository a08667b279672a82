"""A process of a multi-process run, watched by its own launcher: a fault is one line, never a native stack.

JAX's distributed runtime ends a process itself when the run's coordination
service reports a failure (a peer that stopped sending heartbeats, a lost
coordinator): a fatal log line and a C++ stack trace on stderr, then an
abort. :func:`supervise` forks before JAX's backend starts: the child does
the work, with its stderr piped through the parent, which passes every line
on until the runtime's own failure report begins; from there it keeps the
report, and when the child ends it prints one line that names the failed
process and what was finished (the child tells it through a second pipe,
:meth:`Channel.tell`). Ctrl-C reaches the child (same process group); SIGTERM and
SIGHUP sent to the parent are passed on; if the parent dies, the child is
killed (Linux ``PR_SET_PDEATHSIG``), so a killed launcher leaves no worker.

Who failed is decided from structured state only, never from the report's
text: the worker's exit status, and what the worker told its launcher
(:class:`Channel`: that it joined, what it finished, which peers' heartbeats
it saw stop and when it last reached the coordination service,
:mod:`brwsim._processes`). The launcher hands all of it to ``describe`` as an
:class:`Ending`. The patterns below only sort the child's stderr: which lines
begin the runtime's report (held back, not printed) and which are the CPU
collectives' connection notes (dropped).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import select
import signal
import sys
import time

from . import _interrupts as interrupts

FAULT_EXIT = 3  # exit status of a process whose run failed (another process died, or the coordinator)
# the runtime's failure report: a log line of the coordination service (warning, error, fatal), a C++ terminate
_REPORT = re.compile(
    rb"^([WEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*(coordination|client\.h|distributed|preemption|add_port)\S*:\d+\]"
    rb"|terminate called|\*\*\* (Check failure|SIGABRT|SIGSEGV))"
)
# the CPU collectives' note of each connection (native code, on stdout, which the worker sends to stderr)
_CHATTER = re.compile(rb"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks")
_MAYBE_REPORT = re.compile(rb"^([WEF]\d*( [\d:.]*( +\d*( \S*)?)?)?|t[a-z ]*|\*[* A-Za-z]*)$")


@dataclasses.dataclass
class Channel:
    """The worker's end of the pipe to its launcher (``fd`` None: no launcher; what is told goes nowhere)."""

    fd: int | None = None

    def tell(self, what: str, text: str) -> None:
        """Tell the launcher something about this process (``what``: e.g. ``finished``, the work kept so far, or
        ``joined``, the process count and index once the run has assembled); the last of each kind reaches
        ``describe`` (:class:`Ending`)."""
        if self.fd is not None:
            try:
                os.write(self.fd, f"{what}={text}".replace("\n", " ").encode()[:4000] + b"\n")
            except OSError:
                pass


@dataclasses.dataclass(frozen=True)
class Ending:
    """How the worker ended, as its launcher saw it.

    ``code``: its exit code (negative: the signal that ended it, e.g. -6 for the runtime's own abort);
    ``reported``: the runtime began a failure report on stderr (a fatal log line, a C++ terminate);
    ``told``: the last note of each kind the worker told (:meth:`Channel.tell`); ``at``: the launcher's
    ``time.monotonic()`` when the worker ended (the worker's notes use the same clock: one host);
    ``report``: the report's text, kept only for a last resort (see :func:`brwsim._processes.fault_line`).
    """

    code: int
    reported: bool
    told: dict
    at: float
    report: str = ""

    @property
    def signal(self) -> str | None:
        """The name of the signal that ended the worker, if one did and the runtime reported nothing."""
        return signal.Signals(-self.code).name if self.code < 0 and not self.reported else None


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: a killed launcher may leave its worker to the runtime
        pass


def supervise(describe) -> Channel:
    """Fork: the child returns its :class:`Channel` to the launcher (and does the work); this process becomes
    its launcher and never returns.

    ``describe(ending: Ending) -> str`` gives the one line printed when the
    child dies of the runtime's failure report or of a signal.
    """
    if not hasattr(os, "fork"):
        return Channel()
    sys.stdout.flush()
    sys.stderr.flush()
    interrupts.release()  # no signal watch across the fork: the launcher passes signals on, the worker heeds one
    err_r, err_w = os.pipe()
    note_r, note_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _die_with_parent()
        os.close(err_r)
        os.close(note_r)
        os.dup2(err_w, 2)
        os.close(err_w)
        interrupts.once()  # a Ctrl-C may come twice: straight from the terminal, and passed on by the launcher
        return Channel(note_w)
    os.close(err_w)
    os.close(note_w)
    os._exit(_watch(pid, err_r, note_r, describe))


def _forward(signum, _frame, pid=None):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _watch(pid: int, err_r: int, note_r: int, describe) -> int:
    """Pass the child's stderr on until the runtime's report; the child's exit status, or the fault line's."""
    # Ctrl-C, SIGTERM and SIGHUP sent to the launcher go to the child, which stops cleanly (a terminal's
    # Ctrl-C reaches it twice, directly and through here: it heeds the first)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda n, f: _forward(n, f, pid))
    report, told, pending, notes = [], {}, b"", b""
    open_fds = {err_r, note_r}
    while open_fds:
        try:
            ready, _, _ = select.select(list(open_fds), [], [])
        except InterruptedError:
            continue
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            if fd == note_r:
                notes += chunk
                *lines, notes = notes.split(b"\n")
                for line in lines:
                    what, _, text = line.decode(errors="replace").partition("=")
                    told[what] = text
                continue
            pending = _pass_on(pending + chunk, report)
    if pending:
        _pass_on(pending + b"\n", report)
    status = _wait(pid)
    return _verdict(status, report, told, describe)


def _pass_on(data: bytes, report: list) -> bytes:
    """Write the complete lines of ``data`` to stderr unless the runtime's report has begun (then keep them);
    returns the incomplete last line (written now too when it cannot be the start of a report)."""
    *lines, rest = data.split(b"\n")
    out = []
    for line in lines:
        if _CHATTER.match(line):
            continue
        if report or _REPORT.match(line):
            report.append(line)
        else:
            out.append(line + b"\n")
    if rest and not report and not _MAYBE_REPORT.match(rest) and not rest.startswith(b"[Gloo]"[: len(rest)]):
        # e.g. a progress bar's \r updates (a note of the collectives may come in two writes: kept whole)
        out.append(rest)
        rest = b""
    if out:
        os.write(2, b"".join(out))
    return rest


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0


def _verdict(status: int, report: list, told: dict, describe) -> int:
    code = os.waitstatus_to_exitcode(status)
    ending = Ending(code, bool(report), dict(told), time.monotonic(), b"\n".join(report).decode(errors="replace"))
    if not report:
        if code < 0:
            os.write(2, (describe(ending) + "\n").encode())
            return 128 - code
        return code
    if code == 0:  # the runtime logged errors but the work ended well: show them as they were
        os.write(2, b"\n".join(report) + b"\n")
        return 0
    os.write(2, (describe(ending) + "\n").encode())
    return FAULT_EXIT


__all__ = ["FAULT_EXIT", "Channel", "Ending", "supervise"]
