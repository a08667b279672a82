"""Ctrl-C, SIGTERM and SIGHUP alike: the finished work is kept and printed, one line, exit status 128 + signal.

The command installs these handlers (:func:`installed`): each of the three signals raises
``KeyboardInterrupt`` in the main thread, as Python does for SIGINT, after noting which signal came, so that
the exit status says it (130, 143, 129: :func:`exit_status`). In a multi-process run a process that stops
alone would leave the others waiting for it in their next exchange, so there the rounds of ``simulate`` run
inside :func:`deferred`: a signal is only noted, the process finishes its share of the round, the note
travels with the round's exchange and every process stops after that same round (:func:`agree`); a second
signal to the same process changes nothing. Outside those rounds a signalled process of a multi-process run
stops at once, and its peers stop as after a fault (docs/scaling.md, "Faults").

Python runs a handler only when the main thread is back in the interpreter, not while it waits for a long XLA
call (a batch of heavy trees can take minutes). So a thread (:class:`_Watch`) sees each signal as it comes, through
the interpreter's wakeup file descriptor: if the handler has not run :data:`NOTE_AFTER` seconds after the first
signal, it says once that the command stops after the computation in progress and that a second signal stops it at
once; a second signal while the handler has still not run then ends a one-process command at once (one line, exit
status 128 + the first signal), losing what was not yet printed or checkpointed (a checkpoint's rename is atomic:
at worst a stray temporary file stays). Once the handler ran, or in a multi-process run (a shared round, or
:func:`once`), a second signal changes nothing, as above.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading

SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
_STATE = {"signal": None, "by": None, "deferred": 0, "once": False, "agreed": False}
NOTE_AFTER = 2.0  # seconds after a signal whose handler has not run: the note that the command is in a long call
_WATCH: list = []  # the watch of the outermost block of :func:`installed` (at most one)


class _Watch:
    """The signals as they come (the interpreter's wakeup fd, written by its C-level handler whatever the main
    thread does): the note of a long computation, and a second signal's immediate stop (see the module's
    docstring). The thread reads the pipe until :meth:`stop` closes it, so a signal never finds it unread."""

    def __init__(self):
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)
        self.before = signal.set_wakeup_fd(self.w, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._run, name="brwsim-signals", daemon=True)
        self.thread.start()

    def _next(self, timeout: float | None) -> int | None:
        """The next of our signals (None: ``timeout`` passed); -1 when the pipe is closed."""
        while True:
            ready, _, _ = select.select([self.r], [], [], timeout)
            if not ready:
                return None
            data = os.read(self.r, 1)
            if not data:
                return -1
            if data[0] in SIGNALS:
                return data[0]

    @staticmethod
    def _stuck() -> bool:
        """The main thread has not run the handler of a signal that a one-process command obeys at once."""
        return _STATE["signal"] is None and not _STATE["deferred"] and not _STATE["once"]

    def _run(self) -> None:
        try:
            first = self._next(None)
            while first is not None and first != -1:
                nxt = self._next(NOTE_AFTER)
                if nxt is None and self._stuck():
                    _write(f"brwsim: {signal.Signals(first).name}: stopping after the computation in progress (it "
                           "cannot be cut short); a second signal stops at once, losing what is not yet printed or "
                           "checkpointed")  # fmt: skip
                    nxt = self._next(None)
                if nxt is not None and nxt != -1 and self._stuck():  # still no handler: the main thread is in a call
                    _write(f"brwsim: stopped at once by a second signal ({signal.Signals(nxt).name}); what was not "
                           "printed or checkpointed is lost")  # fmt: skip
                    os._exit(128 + int(first))
                while nxt is None:  # the handler ran (or the process obeys signals only after its round)
                    nxt = self._next(None)
                first = nxt
        finally:
            os.close(self.r)

    def stop(self) -> None:
        signal.set_wakeup_fd(self.before)
        os.close(self.w)  # the thread reads the end and returns
        self.thread.join(timeout=5)


def release() -> None:
    """Before a fork inside :func:`installed` (a launcher and its worker, brwsim._supervise): the watch ends, so
    that neither process shares its pipe (the launcher passes signals on, the worker obeys the first only)."""
    while _WATCH:
        _WATCH.pop().stop()


def _write(line: str) -> None:
    try:
        lead = "\n" if os.isatty(2) else ""  # a bar's line may be open on a terminal
        os.write(2, (lead + line + "\n").encode())
    except OSError:  # a closed stderr: nothing to say it on
        pass


def _handler(signum, _frame) -> None:
    first = _STATE["signal"] is None
    if first:
        _STATE["signal"] = signum
    if _STATE["deferred"]:
        return  # noted: the round in progress finishes, and every process stops after it
    if first or not _STATE["once"]:
        raise KeyboardInterrupt


def _reset(once: bool) -> None:
    _STATE.update(signal=None, by=None, deferred=0, once=once, agreed=False)


@contextlib.contextmanager
def installed(once: bool = False):
    """Inside the block SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` (the first of them noted);
    the handlers before it are put back after it. ``once``: only the first signal raises (see :func:`once`).
    Outside the main thread, nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in SIGNALS}
    _reset(once)
    outer = not _WATCH
    try:
        install()
        if outer:
            _WATCH.append(_Watch())
        yield
    finally:
        if outer:
            release()
        for s, h in saved.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        _reset(False)


def install() -> None:
    """(Again) make SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt``: e.g. after JAX's distributed
    runtime put its own SIGTERM handler (its preemption notice, which would swallow the signal)."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _handler)


def once() -> None:
    """From now on only the first signal raises (a multi-process run: a launcher passes on the Ctrl-C that
    the worker got too, and a second ``KeyboardInterrupt`` must not cut the first one's clean stop short)."""
    _STATE["once"] = True


def received() -> int | None:
    """The first signal that came (or that another process of the run got, :func:`agree`), else None."""
    return _STATE["signal"]


def by() -> int | None:
    """The process of a multi-process run whose signal stopped it (:func:`agree`), else None."""
    return _STATE["by"]


def agree(process: int, signum: int) -> None:
    """Every process of the run stops after this round because ``process`` got ``signum``."""
    if _STATE["signal"] is None:
        _STATE["signal"] = signum
    _STATE.update(by=process, agreed=True)


def settle() -> None:
    """Every process of the run has passed its last exchange that could stop it (e.g. ``llm``'s measurement):
    from now on a signal is only noted (the exit status says it), and no later round stops for it."""
    _STATE["agreed"] = True


def agreed() -> bool:
    """True when every process of the run stops together (:func:`agree`)."""
    return _STATE["agreed"]


def name(signum: int | None = None) -> str:
    """``SIGTERM``, ... of ``signum`` (default: the signal received; SIGINT when none)."""
    signum = signum or _STATE["signal"] or signal.SIGINT
    return signal.Signals(signum).name


def exit_status() -> int:
    """128 + the signal received (SIGINT's 130 when none: a ``KeyboardInterrupt`` raised some other way)."""
    return 128 + int(_STATE["signal"] or signal.SIGINT)


@contextlib.contextmanager
def deferred(on: bool = True):
    """Inside the block (``on``) a signal is only noted (:func:`received`); the caller checks at its next
    exchange. Leaving the outermost such block with a signal noted but not agreed raises ``KeyboardInterrupt``
    (an inner block, e.g. a checkpoint's write inside a multi-process round, leaves that to the outer one)."""
    if not on:
        yield
        return
    _STATE["deferred"] += 1
    try:
        yield
    finally:
        _STATE["deferred"] -= 1
    if _STATE["deferred"] == 0 and _STATE["signal"] is not None and not _STATE["agreed"]:
        raise KeyboardInterrupt


__all__ = [
    "SIGNALS",
    "agree",
    "agreed",
    "settle",
    "by",
    "deferred",
    "exit_status",
    "release",
    "install",
    "installed",
    "name",
    "received",
]
