"""The batching engine: many prompts measured at once, every model pass they ask for gathered into rounds.

A prompt's measurement is ordinary sequential code (walks, the oracle's
best-first search, each drafter's builders, the direct check) that asks
models for rows one question at a time. On a CPU a pass of a few tokens costs
almost as much as a pass of a hundred (it is bound by reading the weights),
so asking prompt by prompt wastes the machine. :func:`run_concurrently`
runs up to ``width`` measurements in threads; each model question is a
*request* handed to :func:`ask`, which blocks its thread. When every live
thread is blocked the requests form a *round*: they are grouped by the
engine that answers them (the target, each drafter), and each group runs as
one call of ``engine.run(requests)`` (for a transformer, one packed forward
pass of all the requests' tokens: :mod:`._packed`). Then every thread goes on
to its next question.

Outside :func:`run_concurrently` (a single prompt, the tests, calibration)
:func:`ask` answers at once with ``engine.run([request])``. The packed
engines give every request the same bits whatever else is in its pass, so a
prompt's numbers do not depend on which prompts were measured beside it, nor
on ``width`` (tests/llm/sources/test_packed.py).

Time is attributed per thread and phase (:func:`phase`), so that a prompt's
seconds are what it used, not what it waited: *model* seconds are each
pass's wall seconds shared among its requests in proportion to their tokens;
*host* seconds are the thread's own CPU time outside the passes (its tree
searches, row statistics, sampling); the *floor* is shared the same way as
model seconds. :func:`attributed` returns them, and the tokens, as :class:`Accounts`.

An engine (:class:`Engine`) answers a list of requests in one call and says
what a request costs in tokens and, after a call, the floor seconds of its
passes (``last_floor``: None when this machine's rates are not known).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ...errors import BrwsimError


class Engine(Protocol):
    """Answers a list of requests in one go (a packed pass); ``tokens(request)`` is what a request costs;
    ``last_floor``: the roofline seconds of the last call's passes at this machine's rates (None: not known)."""

    last_floor: float | None

    def run(self, requests: list) -> list: ...

    def tokens(self, request) -> int: ...


@dataclasses.dataclass(frozen=True)
class Accounts:
    """One thread's time and work per phase: ``model`` seconds (a token share of each pass it took part in),
    ``host`` CPU seconds outside the passes, ``tokens`` asked, ``floor`` seconds (a token share of each pass's
    roofline time; empty when the rates are not known)."""

    model: dict[str, float]
    host: dict[str, float]
    tokens: dict[str, float]
    floor: dict[str, float]

    def total(self, kind: str) -> float:
        """The sum over phases of one kind (``model``, ``host``, ``tokens`` or ``floor``)."""
        return float(sum(getattr(self, kind).values()))


class Aborted(BrwsimError):
    """Another measurement of the same concurrent run failed (or was interrupted); this one stops too."""


class Stopped(KeyboardInterrupt):
    """The run is asked to stop (:func:`stopping`): raised at a measurement's next model request, so the
    prompts that finished are kept, as after Ctrl-C."""


_STOP: list = [None]  # the check of :func:`stopping`, or None


@contextlib.contextmanager
def stopping(check: Callable[[], bool] | None):
    """Inside the block ``check()`` is asked before every model request and before every job of
    :func:`run_concurrently`; when it says True the measurement raises :class:`Stopped` there (a
    multi-process run, whose signals are only noted, stops this way; ``check`` must be cheap and
    thread-safe)."""
    old, _STOP[0] = _STOP[0], check
    try:
        yield
    finally:
        _STOP[0] = old


def _check_stop() -> None:
    check = _STOP[0]
    if check is not None and check():
        raise Stopped


_local = threading.local()
# what is attributed per thread and phase: model seconds (a token share of each pass), host CPU seconds, the
# tokens asked, and the floor seconds of the passes (a token share of each pass's roofline time, when the engine
# knows this machine's rates: brwsim.llm.sources._packed.set_rates)
KINDS = ("model", "host", "tokens", "floor")


def _state() -> dict:
    st = getattr(_local, "state", None)
    if st is None:
        st = _local.state = {"phase": "other", "rounds": None, "cpu": time.thread_time()} | {k: {} for k in KINDS}
    return st


def _host(st: dict) -> None:
    """Charge this thread's CPU time since the last mark to its current phase (host seconds)."""
    now = time.thread_time()
    _charge(st, "host", st["phase"], now - st["cpu"])
    st["cpu"] = now


@contextlib.contextmanager
def phase(name: str):
    """Attribute this thread's time to ``name`` while the block runs."""
    st = _state()
    _host(st)
    old, st["phase"] = st["phase"], name
    try:
        yield
    finally:
        _host(st)
        st["phase"] = old


def attributed(reset: bool = False) -> Accounts:
    """This thread's accounts so far (``reset``: start again from zero)."""
    st = _state()
    _host(st)
    out = Accounts(**{k: dict(st[k]) for k in KINDS})
    if reset:
        st.update({k: {} for k in KINDS})
    return out


def _charge(st: dict, kind: str, name: str, seconds: float) -> None:
    st[kind][name] = st[kind].get(name, 0.0) + seconds


def run_timed(engine: Engine, requests: list, states: list[dict]) -> list:
    """``engine.run(requests)``, its seconds shared by token count among the asking threads' current phases."""
    t0 = time.perf_counter()
    out = engine.run(requests)
    dt = time.perf_counter() - t0
    floor = engine.last_floor
    weights = [max(int(engine.tokens(r)), 1) for r in requests]
    total = sum(weights)
    for st, w in zip(states, weights, strict=True):
        _charge(st, "model", st["phase"], dt * w / total)
        _charge(st, "tokens", st["phase"], w)
        if floor is not None:
            _charge(st, "floor", st["phase"], floor * w / total)
    return out


def ask(engine: Engine, request):
    """The answer to one request: at once, or (inside :func:`run_concurrently`) in the next round."""
    _check_stop()
    st = _state()
    _host(st)
    try:
        if st["rounds"] is None:
            return run_timed(engine, [request], [st])[0]
        return st["rounds"].submit(st, engine, request)
    finally:
        st["cpu"] = time.thread_time()  # the passes and the waiting are not this thread's host time


class _Rounds:
    def __init__(self):
        self.cv = threading.Condition()
        self.live = 0
        self.pending: dict[int, tuple] = {}  # id(thread state) -> (state, engine, request)
        self.answers: dict[int, tuple[bool, Any]] = {}
        self.error: BaseException | None = None
        self.rounds = self.passes = 0

    def submit(self, st: dict, engine: Engine, request):
        key = id(st)
        with self.cv:
            if self.error is not None:
                raise Aborted("stopped: another measurement of this run failed")
            self.pending[key] = (st, engine, request)
            if len(self.pending) == self.live:
                self._round()
            while key not in self.answers:
                if self.error is not None and key in self.pending:
                    raise Aborted("stopped: another measurement of this run failed")
                self.cv.wait()
            ok, value = self.answers.pop(key)
        if not ok:
            raise value
        return value

    def leave(self, error: BaseException | None = None) -> None:
        with self.cv:
            self.live -= 1
            if error is not None and self.error is None:
                self.error = error
            if self.error is not None:
                self.cv.notify_all()
            elif self.pending and len(self.pending) == self.live:
                self._round()

    def _round(self) -> None:
        """Run every pending request, one ``engine.run`` per engine (groups in order of first request)."""
        groups: dict[int, list] = {}
        for key, (st, engine, request) in self.pending.items():
            groups.setdefault(id(engine), []).append((key, st, engine, request))
        self.pending = {}
        self.rounds += 1
        for items in groups.values():
            engine = items[0][2]
            self.passes += 1
            try:
                out = run_timed(engine, [r for *_, r in items], [st for _, st, _, _ in items])
                for (key, *_), value in zip(items, out, strict=True):
                    self.answers[key] = (True, value)
            except BaseException as e:  # the whole group fails; its threads raise it
                for key, *_ in items:
                    self.answers[key] = (False, e)
        self.cv.notify_all()


def fork(jobs: Sequence[Callable[[], Any]]) -> list:
    """Run ``jobs`` in threads of their own that take part in this thread's rounds (inside
    :func:`run_concurrently`; elsewhere one after the other), and return their results in order. The jobs must
    not share a context (each asks its own models). Their time is added to this thread's."""
    st = _state()
    rounds = st["rounds"]
    if rounds is None or len(jobs) <= 1:
        return [job() for job in jobs]
    _host(st)
    with rounds.cv:
        if rounds.error is not None:
            raise Aborted("stopped: another measurement of this run failed")
        rounds.live += len(jobs) - 1  # this thread's place passes to the jobs until they end
    results: list = [None] * len(jobs)
    errors: list[BaseException] = []
    times: list[Accounts] = []

    def child(i: int):
        cst = _state()
        cst["rounds"], cst["phase"] = rounds, st["phase"]
        error = None
        try:
            results[i] = jobs[i]()
        except BaseException as e:  # noqa: BLE001 - raised in the forking thread
            error = e
            errors.append(e)
        finally:
            times.append(attributed(reset=True))
            cst["rounds"] = None
            rounds.leave(None if isinstance(error, Aborted) else error)

    threads = [threading.Thread(target=child, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with rounds.cv:
        rounds.live += 1
    st["cpu"] = time.thread_time()
    for tm in times:
        for kind in KINDS:
            for name, secs in getattr(tm, kind).items():
                _charge(st, kind, name, secs)
    if errors:
        raise next((e for e in errors if not isinstance(e, Aborted)), errors[0])
    return results


def run_concurrently(
    jobs: Sequence[Callable[[], Any]], width: int, on_done: Callable[[int, Any], None] | None = None
) -> list:
    """Run ``jobs`` (each a measurement of one prompt) with up to ``width`` at a time, their model requests
    gathered into rounds (module docstring); returns their results in order. ``on_done(i, result)`` is called
    in the job's thread as each finishes (to cache or print it). A job that raises ends the run: the others stop
    at their next request and the first error is raised here. ``width`` 1 runs the jobs one by one in this
    thread."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise BrwsimError(f"the number of prompts measured at once must be an integer >= 1, got {width!r}")
    results: list = [None] * len(jobs)
    if width == 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            _check_stop()
            results[i] = job()
            if on_done is not None:
                on_done(i, results[i])
        return results
    rounds, errors = _Rounds(), []
    worker = _worker(rounds, jobs, results, on_done, errors)
    n = min(width, len(jobs))
    rounds.live = n
    threads = [threading.Thread(target=worker, name=f"brwsim-prompt-{k}", daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except KeyboardInterrupt as e:
        with rounds.cv:
            if rounds.error is None:
                rounds.error = e
            rounds.cv.notify_all()
        for t in threads:
            t.join()
        raise
    if errors:
        raise errors[0]
    return results


def _worker(rounds: _Rounds, jobs, results: list, on_done, errors: list):
    """A thread's loop of :func:`run_concurrently`: take the next job until none is left or the run failed."""
    queue = list(range(len(jobs)))[::-1]
    lock = threading.Lock()

    def worker():
        st = _state()
        st["rounds"] = rounds
        error = None
        try:
            while True:
                with lock:
                    if not queue or rounds.error is not None:
                        break
                    i = queue.pop()
                _check_stop()
                results[i] = jobs[i]()
                if on_done is not None:
                    on_done(i, results[i])
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            error = e
            if not isinstance(e, Aborted):
                errors.append(e)
        finally:
            st["rounds"] = None
            rounds.leave(error)

    return worker
