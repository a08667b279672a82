"""The launcher of a multi-process run's worker (brwsim._supervise), in-process: what it passes on, keeps and
prints, and the exit status it gives.

The launcher's loop runs in the test process itself (its ``os._exit`` replaced by an exception), so that
mutmut sees these tests reach it; the worker is a real forked child, always ended and reaped by the fixture.
Linux only (``fork``, ``prctl``, ``/proc``), as the launcher itself.
"""

from __future__ import annotations

import array
import ctypes
import fcntl
import os
import resource
import signal
import sys
import termios
import time

import pytest

from brwsim import _supervise
from brwsim._supervise import FAULT_EXIT, Channel, Ending

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, prctl and /proc: Linux"),
    # JAX warns at every fork once its backend runs in this process (another test file's); the forked workers
    # here only write to pipes, send signals and exit, and never touch JAX
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]

_REAL_EXIT = os._exit
_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REPORT = [
    b"E1128 03:29:29.001333   30161 coordination_service_agent.cc:414] Polled an error from coordination service",
    b"*** Check failure stack trace: ***",
    b"    @     0x7f5e0a3c1b2e  absl::log_internal::LogMessageFatal::~LogMessageFatal()",
]
CHATTER = b"[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"


class _Exited(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _pdeathsig() -> int:
    """This process's parent-death signal (``prctl(PR_GET_PDEATHSIG)``)."""
    v = ctypes.c_int(-1)
    assert ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(v), 0, 0, 0) == 0
    return v.value


def _set_pdeathsig(sig: int) -> None:
    assert ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0) == 0


def _drained(fd: int, timeout: float = 10.0) -> None:
    """Wait until the reader has taken everything written to the pipe ``fd`` (so the next write is a new read)."""
    end = time.monotonic() + timeout
    buf = array.array("i", [0])
    while time.monotonic() < end:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
        if buf[0] == 0:
            return
        time.sleep(0.002)
    raise TimeoutError("the launcher did not read the pipe")


def _caught(pid: int) -> int:
    """The mask of signals ``pid`` has a handler for (/proc/PID/status, SigCgt)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))


class _Describe:
    """The launcher's ``describe``: keeps every Ending it is given."""

    def __init__(self):
        self.endings: list[Ending] = []

    def __call__(self, ending: Ending) -> str:
        self.endings.append(ending)
        return f"brwsim: error: the worker ended ({ending.code})"


@pytest.fixture()
def launch(monkeypatch):
    """``launch(work, describe) -> exit status``: :func:`supervise` with this process as the launcher (its
    ``os._exit`` raises :class:`_Exited` here) and a forked worker that runs ``work(channel)`` and exits with
    its return value (70: supervise raised in the worker; 71: ``work`` raised). The worker is killed and
    reaped at the end whatever happened, and the signal handlers the launcher installs are put back."""
    me = os.getpid()
    saved = {s: signal.getsignal(s) for s in _HANDLED}
    for s in (signal.SIGTERM, signal.SIGHUP):  # (not in SigCgt until the launcher's handlers are installed)
        signal.signal(s, signal.SIG_IGN)
    pids: list[int] = []
    reads: list[int] = []
    real_fork, real_pipe = os.fork, os.pipe

    def fork():
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    def pipe():
        r, w = real_pipe()
        reads.append(r)
        return r, w

    def exit_(code):
        if os.getpid() != me:
            _REAL_EXIT(code if isinstance(code, int) else 72)
        raise _Exited(code)

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(os, "pipe", pipe)
    monkeypatch.setattr(os, "_exit", exit_)
    deathsig = _pdeathsig()

    def too_long(signum, frame):
        raise TimeoutError("the launcher did not end within 20 s")

    saved_alarm = signal.signal(signal.SIGALRM, too_long)  # a launcher that never ends fails, not hangs

    def run(work, describe):
        try:
            channel = _supervise.supervise(describe)
        except _Exited as e:
            return e.code
        except BaseException:
            if os.getpid() != me:
                _REAL_EXIT(70)
            raise
        if os.getpid() == me:
            pytest.fail("supervise returned in the launcher")
        try:
            code = work(channel)
        except BaseException:
            _REAL_EXIT(71)
        _REAL_EXIT(code)

    try:
        signal.setitimer(signal.ITIMER_REAL, 20)
        yield run
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, saved_alarm)
        for s, h in saved.items():
            signal.signal(s, h)
        for pid in pids:
            try:
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except ChildProcessError:
                pass  # reaped by the launcher
        if os.getpid() == me:
            for fd in reads:  # the launcher's read ends (the loop never closes them: its process exits)
                try:
                    os.close(fd)
                except OSError:
                    pass
            if _pdeathsig() != deathsig:
                _set_pdeathsig(deathsig)


# -- the whole launcher: a forked worker, this process its launcher


def test_a_worker_that_ends_well_has_its_lines_passed_on_without_the_collectives_notes(launch, capfd):
    describe = _Describe()

    def work(channel):
        os.write(2, b"line one\n" + CHATTER + b"\nline two\n")
        channel.tell("finished", "7")
        return 0

    assert launch(work, describe) == 0
    assert capfd.readouterr().err == "line one\nline two\n"
    assert describe.endings == []


def test_a_worker_exit_status_is_the_launchers_when_nothing_was_reported(launch, capfd):
    describe = _Describe()
    assert launch(lambda channel: 5, describe) == 5
    assert capfd.readouterr().err == "" and describe.endings == []


def test_a_fault_report_is_held_back_and_one_line_names_what_the_worker_told(launch, capfd):
    describe = _Describe()

    def work(channel):
        os.write(2, b"before the fault\n")
        channel.tell("joined", "2 1")
        channel.tell("finished", "3 trees")
        channel.tell("finished", "4 trees")  # the last of each kind counts
        channel.tell("kept", "a=b")  # only the first '=' separates
        os.write(channel.fd, b"pdeat")  # a note in two reads
        _drained(channel.fd)
        os.write(channel.fd, f"hsig={_pdeathsig()}\n".encode())
        channel.tell("lon", "a" + "é" * 3000)  # cut at 4000 bytes, inside a character
        _drained(channel.fd)
        os.write(2, b"\n".join(REPORT) + b"\nlater lines are part of the report\nlast words")  # no newline
        return 1

    t0 = time.monotonic()
    assert launch(work, describe) == FAULT_EXIT
    t1 = time.monotonic()
    assert capfd.readouterr().err == "before the fault\nbrwsim: error: the worker ended (1)\n"
    [e] = describe.endings
    assert e.code == 1 and e.reported is True and e.signal is None
    assert e.told == {
        "joined": "2 1",
        "finished": "4 trees",
        "kept": "a=b",
        "pdeathsig": str(int(signal.SIGKILL)),  # the worker dies with its launcher
        "lon": "a" + "é" * 1997 + "\ufffd",
    }
    assert e.report == b"\n".join([*REPORT, b"later lines are part of the report", b"last words"]).decode()
    assert isinstance(e.at, float) and t0 <= e.at <= t1


def test_a_worker_killed_by_a_signal_is_named_and_exits_as_a_shell_would(launch, capfd):
    describe = _Describe()

    def work(channel):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.write(2, b"progress\n")
        channel.tell("finished", "2")
        _drained(channel.fd)
        os.kill(os.getpid(), signal.SIGKILL)

    assert launch(work, describe) == 128 + signal.SIGKILL
    assert capfd.readouterr().err == "progress\nbrwsim: error: the worker ended (-9)\n"
    [e] = describe.endings
    assert (e.code, e.reported, e.signal, e.report, e.told) == (-9, False, "SIGKILL", "", {"finished": "2"})


def test_a_report_from_a_worker_that_ended_well_is_shown_as_it_was(launch, capfd):
    describe = _Describe()

    def work(channel):
        os.write(2, b"result\n" + REPORT[0] + b"\nnot a report line\n")
        return 0

    assert launch(work, describe) == 0
    assert capfd.readouterr().err == "result\n" + REPORT[0].decode() + "\nnot a report line\n"
    assert describe.endings == []


def test_lines_split_over_several_reads_are_joined_and_a_last_partial_line_is_kept(launch, capfd):
    def work(channel):
        for part in (b"first li", b"ne\nE11", b"28 is not a log line\n", b"W"):  # the last: a report's start?
            os.write(2, part)
            _drained(2)
        return 0

    assert launch(work, _Describe()) == 0
    assert capfd.readouterr().err == "first line\nE1128 is not a log line\nW\n"


def test_signals_sent_to_the_launcher_are_passed_on_to_the_worker(launch, capfd):
    order = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]

    def work(channel):
        got: list[int] = []
        for s in _HANDLED:
            signal.signal(s, lambda n, f: got.append(n))
        parent, end = os.getppid(), time.monotonic() + 10
        want = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))  # installed after SIGINT's
        while _caught(parent) & want != want:
            if time.monotonic() > end:
                return 10
            time.sleep(0.002)
        for i, s in enumerate(order):
            os.kill(parent, s)
            while len(got) <= i and time.monotonic() < end:
                time.sleep(0.002)
        return 0 if got == order else 20 + len(got)

    assert launch(work, _Describe()) == 0
    assert capfd.readouterr().err == ""


# -- the parts one at a time


def test_a_note_is_one_line_cut_at_4000_bytes_and_goes_nowhere_without_a_launcher():
    r, w = os.pipe()
    try:
        Channel(w).tell("finished", "3 trees\nand more")
        Channel(w).tell("x", "y" * 5000)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        assert data == b"finished=3 trees and more\n" + b"x=" + b"y" * 3998 + b"\n"
        Channel(w).tell("finished", "1")  # a closed pipe (the launcher gone): nothing raised
        Channel().tell("finished", "1")
    finally:
        os.close(r)


def test_the_worker_is_set_to_die_with_its_launcher():
    before = _pdeathsig()
    try:
        _set_pdeathsig(0)
        _supervise._die_with_parent()
        assert _pdeathsig() == signal.SIGKILL
    finally:
        _set_pdeathsig(before)


def _end(pid: int) -> None:
    """Kill and reap a forked worker, if it is still there."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def test_the_wait_gives_the_status_of_a_worker_still_running_and_0_for_one_already_reaped():
    pid = os.fork()
    if pid == 0:
        time.sleep(0.2)
        _REAL_EXIT(5)
    try:
        assert os.waitstatus_to_exitcode(_supervise._wait(pid)) == 5
        assert _supervise._wait(pid) == 0  # reaped already
    finally:
        _end(pid)


def test_a_signal_is_forwarded_and_a_worker_already_gone_is_no_error():
    saved = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the child's disposition: SIGTERM ends it
    try:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            _REAL_EXIT(0)
    finally:
        signal.signal(signal.SIGTERM, saved)
    try:
        _supervise._forward(signal.SIGTERM, None, pid)
        assert os.waitpid(pid, 0)[1] == signal.SIGTERM
    finally:
        _end(pid)
    with open("/proc/sys/kernel/pid_max") as f:
        gone = int(f.read()) + 1  # no process has this id: kill() fails with ProcessLookupError
    _supervise._forward(signal.SIGTERM, None, gone)  # ignored


def test_pass_on_drops_the_collectives_notes_and_keeps_the_report_from_its_first_line(capfd):
    report = []
    rest = _supervise._pass_on(CHATTER + b"\nline one\nline two\n" + CHATTER + b"\nline three\nF11", report)
    assert rest == b"F11" and report == []  # may begin a report: held back
    assert capfd.readouterr().err == "line one\nline two\nline three\n"
    rest = _supervise._pass_on(rest + b"ine\n" + REPORT[0] + b"\nafter\n" + CHATTER + b"\nmore", report)
    assert rest == b"more" and report == [REPORT[0], b"after"]  # the report goes on to the end
    assert capfd.readouterr().err == "F11ine\n"
    assert _supervise._pass_on(b"50%|###\r60%|####\r", []) == b""  # not a report's start: written at once
    assert capfd.readouterr().err == "50%|###\r60%|####\r"


@pytest.mark.parametrize(
    "status,report,ret,err,called",
    [
        (0, [], 0, "", False),
        (5 << 8, [], 5, "", False),
        (signal.SIGKILL, [], 137, "brwsim: error: ended -9\n", True),
        (signal.SIGTERM, [], 143, "brwsim: error: ended -15\n", True),
        (0, [b"W1 coordination", b"\xffx"], 0, "W1 coordination\n\ufffdx\n", False),
        (1 << 8, [b"E1 coordination", b"\xffx"], FAULT_EXIT, "brwsim: error: ended 1\n", True),
        (signal.SIGABRT, [b"E1 coordination"], FAULT_EXIT, "brwsim: error: ended -6\n", True),
    ],
)
def test_the_verdict(capfd, status, report, ret, err, called):
    endings = []

    def describe(ending):
        endings.append(ending)
        return f"brwsim: error: ended {ending.code}"

    told = {"finished": "3"}
    t0 = time.monotonic()
    assert _supervise._verdict(status, report, told, describe) == ret
    assert capfd.readouterr().err == err
    assert bool(endings) == called
    if called:
        [e] = endings
        assert e.code == os.waitstatus_to_exitcode(status) and e.reported == bool(report)
        assert e.told == told and e.told is not told
        assert e.report == "\n".join(line.decode(errors="replace") for line in report)
        assert t0 <= e.at <= time.monotonic()
