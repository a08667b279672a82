"""Ctrl-C, SIGTERM and SIGHUP alike: the finished work is kept and printed, one line, exit status 128 + signal.

The command installs these handlers (:func:`installed`): each of the three signals raises
``KeyboardInterrupt`` in the main thread, as Python does for SIGINT, after noting which signal came, so that
the exit status says it (130, 143, 129: :func:`exit_status`). In a multi-process run a process that stops
alone would leave the others waiting for it in their next exchange, so there the rounds of ``simulate`` run
inside :func:`deferred`: a signal is only noted, the process finishes its share of the round, the note
travels with the round's exchange and every process stops after that same round (:func:`agree`); a second
signal to the same process changes nothing. Outside those rounds a signalled process of a multi-process run
stops at once, and its peers stop as after a fault (docs/scaling.md, "Faults").
"""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
_STATE = {"signal": None, "by": None, "deferred": 0, "once": False, "agreed": False}


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
    try:
        install()
        yield
    finally:
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
    "install",
    "installed",
    "name",
    "received",
]
