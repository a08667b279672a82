"""brwsim/_processes.py in the test process: the tests written against mutmut's survivors (docs/testing.md,
"The processes module"). No process is started and no run is joined: JAX's distributed runtime, its
collectives, the launcher's fork and the clock are replaced, and each test leaves the joined group as it was."""

from __future__ import annotations

import errno
import os
import pickle
import socket
import sys
import threading
import types

import jax
import numpy as np
import pytest

from brwsim import _processes as P
from brwsim._supervise import Channel, Ending
from brwsim.errors import BrwsimError

HINT = "give --coordinator HOST:PORT, e.g. 127.0.0.1:12355 (process 0's address, a free port 1-65535)"


class _Told(Channel):
    """A launcher's channel that keeps every note told, in order."""

    def __init__(self):
        super().__init__()
        self.notes: list[tuple[str, str]] = []

    def tell(self, what: str, text: str) -> None:
        self.notes.append((what, text))


@pytest.fixture()
def run(monkeypatch):
    """A fresh joined group of ``n`` processes seen from process ``me`` (JAX's process count and index replaced)."""

    def make(n: int = 1, me: int = 0, **kw) -> P.Group:
        group = P.Group(n=n, me=me, **kw)
        monkeypatch.setattr(P, "_JOINED", group)
        monkeypatch.setattr(jax, "process_count", lambda: n)
        monkeypatch.setattr(jax, "process_index", lambda: me)
        return group

    return make


def _ending(told: dict, code: int = 1, reported: bool = True, at: float = 100.0, report: str = "") -> Ending:
    return Ending(code=code, reported=reported, told=told, at=at, report=report)


def test_a_one_process_group_by_default():
    assert P.current().n == 1 and P.count() == 1 and P.index() == 0 and P.share([1, 2, 3]) == [1, 2, 3]


# --- the group, the coordinator's address, the timeouts --------------------------------------------------------


def test_run_name_with_and_without_the_count():
    assert P.Group(n=2).run_name() == "the 2-process run"
    assert P.Group(n="?").run_name() == "the multi-process run"


@pytest.mark.parametrize(
    "text,want",
    [("127.0.0.1:12355", "127.0.0.1:12355"), (" host:080 \n", "host:80"), ("[::1]:5", "[::1]:5"), ("h:1", "h:1"),
     ("h:65535", "h:65535"), ("a:b:7", "a:b:7")],
)  # fmt: skip
def test_a_coordinator_is_read_as_host_and_port(text, want):
    assert P.parse_coordinator(text) == want


@pytest.mark.parametrize(
    "text,message",
    [
        ("nohost", "coordinator 'nohost' is not HOST:PORT: " + HINT),
        (":5", "coordinator ':5' is not HOST:PORT: " + HINT),
        ("[:5", "coordinator '[:5' is not HOST:PORT: " + HINT),
        ("[]:5", "coordinator '[]:5' is not HOST:PORT: " + HINT),
        ("h:0", "coordinator 'h:0': the port must be an integer from 1 to 65535, got '0': " + HINT),
        ("h:65536", "coordinator 'h:65536': the port must be an integer from 1 to 65535, got '65536': " + HINT),
        ("h:x1", "coordinator 'h:x1': the port must be an integer from 1 to 65535, got 'x1': " + HINT),
        ("h:", "coordinator 'h:': the port must be an integer from 1 to 65535, got '': " + HINT),
        ("[::1:5", "coordinator '[::1:5': '[::1' is not a host name or address: " + HINT),
        ("::1]:5", "coordinator '::1]:5': '::1]' is not a host name or address: " + HINT),
        ("a b:5", "coordinator 'a b:5': 'a b' is not a host name or address: " + HINT),
        ("a\tb:5", "coordinator 'a\\tb:5': 'a\\tb' is not a host name or address: " + HINT),
    ],
)
def test_a_bad_coordinator_is_one_line_saying_what_is_wrong(text, message):
    with pytest.raises(BrwsimError) as e:
        P.parse_coordinator(text)
    assert str(e.value) == message


def test_timeouts_are_whole_seconds_up_to_a_day():
    assert P._check_seconds("join-timeout", 86400) == 86400 and P._check_seconds("x", "7") == 7
    with pytest.raises(BrwsimError) as e:
        P._check_seconds("heartbeat-timeout", 86401)
    assert str(e.value) == "heartbeat-timeout must be at most 86400 seconds (one day), got 86401"
    with pytest.raises(BrwsimError) as e:
        P._check_seconds("join-timeout", 0)
    assert str(e.value) == "join-timeout must be an integer >= 1, got 0"


def test_processes_are_named_and_0_is_the_coordinator():
    assert P._name(0) == "process 0 (the coordinator)" and P._name(1) == "process 1" and P._name(12) == "process 12"


# --- the coordination service's port -------------------------------------------------------------------------


def test_the_service_answers_while_something_listens_on_the_port(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert P._service_answers(f"127.0.0.1:{port}") is True
        assert P._service_answers(f"[127.0.0.1]:{port}") is True  # an address in brackets
    assert P._service_answers(f"127.0.0.1:{port}") is False  # closed now
    seen = []

    def connect(address, timeout=None):
        seen.append((address, timeout))
        raise ConnectionRefusedError

    monkeypatch.setattr(socket, "create_connection", connect)
    assert P._service_answers("[::1]:77") is False and P._service_answers("h:5", 0.5) is False
    assert P._service_answers("Xenon-X:9") is False  # only the brackets are taken off
    assert seen == [(("::1", 77), 2.0), (("h", 5), 0.5), (("Xenon-X", 9), 2.0)]


def test_a_port_in_use_is_taken_and_a_free_or_shared_one_is_not():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        assert P._port_taken(f"127.0.0.1:{port}") is True
        assert P._port_taken(f"[::1]:{port}") is True  # the port after the last colon
    with socket.socket() as s:  # bound with SO_REUSEADDR, not listening: a second SO_REUSEADDR bind succeeds
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", 0))
        port = s.getsockname()[1]
        assert P._port_taken(f"127.0.0.1:{port}") is False
    assert P._port_taken(f"127.0.0.1:{port}") is False


def test_only_a_port_in_use_counts_as_taken(monkeypatch):
    class Refused(socket.socket):
        def bind(self, address):
            assert address == ("0.0.0.0", 5) and self.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
            raise OSError(errno.EACCES, "permission denied")

    monkeypatch.setattr(socket, "socket", Refused)
    assert P._port_taken("h:5") is False


# --- the peer watch --------------------------------------------------------------------------------------------


def test_the_watch_waits_half_the_heartbeat_and_polls_four_times_as_often():
    cases = [(10, 5.0, 1.0), (4, 2.0, 0.5), (2, 2.0, 0.5), (3, 2.0, 0.5), (20, 10.0, 1.0), (6, 3.0, 0.75)]
    for heartbeat, stale_after, period in cases:
        w = P.PeerWatch(None, P.Group(n=4, me=1, heartbeat=heartbeat))
        assert (w.stale_after, w.period) == (stale_after, period), heartbeat
    w = P.PeerWatch("client", P.Group(n=4, me=1))
    assert w.client == "client" and w.peers == [0, 2, 3] and w._done is False and not w._stop.is_set()
    assert w._thread.name == "brwsim-peer-watch" and w._thread.daemon is True and not w._thread.is_alive()


def test_the_watch_starts_its_thread_and_stops_it_at_exit(monkeypatch):
    registered = []
    monkeypatch.setattr(P.atexit, "register", registered.append)
    store = _Store()
    w = P.PeerWatch(store, P.Group(n=2, me=0, heartbeat=4))
    assert w.start() is w and registered == [w.stop]
    try:
        for _ in range(200):  # the thread beats every half second
            if store.writes:
                break
            threading.Event().wait(0.05)
        assert store.writes[0] == (P.ALIVE_KEY.format(0), "1", True)
    finally:
        w.finish()
    assert w._done is True and w._stop.is_set() and not w._thread.is_alive()
    assert store.writes[-1] == (P.ALIVE_KEY.format(0), P.DONE, True)


def test_stopping_the_watch_waits_at_most_five_seconds_for_its_thread():
    # the thread is a daemon: a write the service never answers must not hold the exit for longer
    joined = []
    w = P.PeerWatch(None, P.Group(n=2, me=0))
    w._thread = types.SimpleNamespace(join=lambda timeout=None: joined.append(timeout))
    w.stop()
    assert joined == [5] and w._stop.is_set()


class _Store:
    """The coordination service's key-value store: every write kept (with its overwrite flag); a missing key raises;
    ``fail`` says which writes (by their 1-based number) raise."""

    def __init__(self, fail=()):
        self.kv: dict[str, str] = {}
        self.writes: list[tuple] = []
        self.fail = set(fail)

    def key_value_set(self, key, value, allow_overwrite=False):
        self.writes.append((key, value, allow_overwrite))
        if len(self.writes) in self.fail:
            raise RuntimeError("the service does not answer")
        self.kv[key] = value

    def key_value_try_get(self, key):
        return self.kv[key]


class _Rounds:
    """The watch's stop event: ``rounds`` waits return False, each moving the clock one second (and running
    ``each``), then True; the periods asked are kept."""

    def __init__(self, clock, rounds: int, each=None):
        self.clock, self.rounds, self.each, self.asked = clock, rounds, each, []

    def wait(self, period):
        self.asked.append(period)
        if len(self.asked) > self.rounds:
            return True
        self.clock.now += 1.0
        if self.each:
            self.each(len(self.asked))
        return False


def _watched(monkeypatch, store, rounds: int, each=None, me: int = 1, n: int = 5):
    clock = types.SimpleNamespace(now=100.25)
    monkeypatch.setattr(P, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    told = _Told()
    watch = P.PeerWatch(store, P.Group(n=n, me=me, heartbeat=4, joined=True, channel=told))  # stale after 2 s
    watch._stop = _Rounds(clock, rounds, each)
    return watch, told


def test_the_watch_tells_who_stopped_beating_round_by_round(monkeypatch):
    # process 0 beats every round, 2 beats once, 3 has finished, 4 never wrote; the 5th write (round 5) fails
    store = _Store(fail={5})
    store.kv |= {P.ALIVE_KEY.format(2): "7", P.ALIVE_KEY.format(3): P.DONE}

    def each(k):
        store.kv[P.ALIVE_KEY.format(0)] = str(k)

    watch, told = _watched(monkeypatch, store, 6, each)
    watch._loop()
    assert watch._stop.asked == [0.5] * 7
    assert told.notes == [
        ("answered", "101.250"), ("stale", ""),  # round 1: every counter seen to change but 4's (1 s silent)
        ("answered", "102.250"),  # round 2: 4 silent 2 s, not more
        ("answered", "103.250"), ("stale", "4"),  # round 3: 4 silent 3 s; 2 silent 2 s since its change
        ("answered", "104.250"), ("stale", "2 4"),  # round 4
        # round 5: the write failed, nothing told
        ("answered", "106.250"),  # round 6: the same stale peers, not told again
    ]  # fmt: skip
    me = P.ALIVE_KEY.format(1)
    assert store.writes == [(me, str(k), True) for k in range(1, 7)]  # no 'done': the command did not succeed
    assert store.kv[me] == "6"


def test_a_finished_watch_leaves_done_after_its_last_beat(monkeypatch):
    store = _Store()
    watch, told = _watched(monkeypatch, store, 2, me=0, n=2)
    watch._done = True
    watch._loop()
    me = P.ALIVE_KEY.format(0)
    assert store.writes == [(me, "1", True), (me, "2", True), (me, P.DONE, True)] and store.kv[me] == P.DONE
    assert told.notes == [("answered", "101.250"), ("stale", ""), ("answered", "102.250")]
    store = _Store(fail={2})  # the service is gone at the end: nothing raised
    watch, _ = _watched(monkeypatch, store, 1, me=0, n=2)
    watch._done = True
    watch._loop()
    assert store.writes == [(me, "1", True), (me, P.DONE, True)]


def test_a_peer_that_finished_is_never_stale(monkeypatch):
    store = _Store()
    store.kv[P.ALIVE_KEY.format(1)] = P.DONE
    watch, told = _watched(monkeypatch, store, 4, me=0, n=2)
    watch._loop()
    assert ("stale", "1") not in told.notes and told.notes[1] == ("stale", "")


def test_an_unreadable_counter_reads_as_none():
    class Broken:
        def key_value_try_get(self, key):
            raise RuntimeError(key)

    w = P.PeerWatch(Broken(), P.Group(n=2, me=0))
    assert w._read(1) is None
    store = _Store()
    store.kv["brwsim/alive/1"] = "3"
    assert P.PeerWatch(store, P.Group(n=2, me=0))._read(1) == "3"


# --- the fault's line --------------------------------------------------------------------------------------------


def test_the_last_resort_reads_the_process_from_the_runtimes_report():
    heartbeats = "Terminating process because the coordination service has detected missing heartbeats"
    assert (
        P._failed_process(f"{heartbeats} (tasks stopped sending heartbeats): 1, 3\nlater 9") == "process 1, process 3"
    )
    assert P._failed_process(f"{heartbeats} (stopped sending heartbeats):0") == "process 0 (the coordinator)"
    assert P._failed_process("lost /job:jax_worker/replica:0/task:2 at once") == "process 2"
    assert P._failed_process("task_12 failed") == "process 12" and P._failed_process("task 3") == "process 3"
    assert P._failed_process("task 0 went") == "process 0 (the coordinator)"
    assert P._failed_process("nothing to go on") == "process 0 (the coordinator)"


def _line(group: P.Group, told: dict, service_up=None, **ending) -> str:
    return P.fault_line(group, _ending(told, **ending), service_up)


def test_a_run_that_never_assembled_names_who_did_not_join():
    g = P.Group(n=2, me=0, join=7, coordinator="h:5")
    start = "brwsim: error: "
    wait = "did not join within 7 s (not started, or given another --coordinator)"
    assert _line(g, {}) == f"{start}process 1 of the 2-process run {wait}; process 0 stops: nothing was finished"
    g3 = P.Group(n=3, me=0, join=7)
    assert (
        _line(g3, {})
        == f"{start}one of processes 1-2 of the 3-process run {wait}; process 0 stops: nothing was finished"
    )
    g = P.Group(n=2, me=1, join=7)
    assert (
        _line(g, {})
        == f"{start}process 0 (the coordinator) of the 2-process run {wait}; process 1 stops: nothing was finished"
    )
    g = P.Group(n=3, me=2, join=7, finished="2 rounds")
    assert _line(g, {}) == (f"{start}process 0 (the coordinator) or another process of the 3-process run {wait}; "
                            "process 2 stops: 2 rounds")  # fmt: skip


def test_a_service_that_never_started_is_named_for_what_it_is():
    service = "could not start the run's coordination service{} (is the port in use by another program? choose another --coordinator port)"  # noqa: E501
    for g, where in [
        (P.Group(n=2, me=0, coordinator="h:5", port_in_use=True), " on h:5"),
        (P.Group(n="?", me="?", coordinator=None), ""),
        (P.Group(n=1, me=0, coordinator="h:6"), " on h:6"),
    ]:
        assert _line(g, {}) == (f"brwsim: error: process {g.me} of {g.run_name()} {service.format(where)}; "
                                f"process {g.me} stops: nothing was finished")  # fmt: skip


def test_the_line_reads_the_count_and_index_the_worker_told_and_leaves_the_group_as_it_was():
    g = P.Group(n="?", me="?", heartbeat=10, finished="kept in DIR")
    line = _line(g, {"joined": "3 2", "stale": "1", "answered": "99.5", "finished": "40 trees"})
    assert line == ("brwsim: error: process 1 of the 3-process run stopped sending heartbeats (detected within about "
                    "20 s); process 2 stops: 40 trees")  # fmt: skip
    assert (g.n, g.me, g.joined) == ("?", "?", False)
    line = _line(g, {"joined": "3 2", "stale": "0 1", "answered": "99.5"})
    assert line.endswith("process 2 stops: kept in DIR") and "process 0 (the coordinator), process 1 of" in line


def test_a_worker_ended_by_a_signal_is_named_with_it():
    g = P.Group(n=2, me=1, joined=True, heartbeat=10)
    line = _line(g, {"stale": "0"}, code=-9, reported=False)
    assert (
        line
        == "brwsim: error: process 1 of the 2-process run was ended by SIGKILL; process 1 stops: nothing was finished"
    )
    line = _line(P.Group(n=2, me=0), {}, code=-15, reported=False)  # before it joined too
    assert (
        line
        == "brwsim: error: process 0 of the 2-process run was ended by SIGTERM; process 0 stops: nothing was finished"
    )


def test_the_coordinator_is_named_only_when_the_service_is_lost_for_longer_than_a_peer_may_be_silent():
    joined = {"joined": "2 1"}
    end = "; process 1 stops: nothing was finished"
    gone = (
        "brwsim: error: process 0 (the coordinator) of the 2-process run is unreachable or failed "
        "(detected within about {} s)" + end
    )
    last = ("brwsim: error: process 0 (the coordinator) of the 2-process run failed" + P.TEXT_FALLBACK
            + " (detected within about {} s)" + end)  # fmt: skip
    g10 = P.Group(n=2, me=1, heartbeat=10)
    assert _line(g10, joined | {"answered": "95.0"}) == last.format(20)  # silent 5 s: not more than 5
    assert _line(g10, joined | {"answered": "94.75"}) == gone.format(20)
    assert _line(g10, joined | {"answered": "94.75"}, service_up=True) == gone.format(20)
    assert _line(g10, joined) == last.format(20)  # no answer told: not lost
    assert _line(g10, joined, service_up=False) == gone.format(20)
    assert _line(g10, joined, service_up=True) == last.format(20)
    g2 = P.Group(n=2, me=1, heartbeat=2)  # a peer may be silent 2 s (not 1)
    assert _line(g2, joined | {"answered": "98.5"}) == last.format(4)
    assert _line(g2, joined | {"answered": "97.75"}) == gone.format(4)
    g0 = P.Group(n=2, me=0, heartbeat=10)  # process 0 never names itself from a lost service
    line = _line(g0, {"joined": "2 0", "answered": "50.0"}, service_up=False, report="task:1 gone")
    assert line == ("brwsim: error: process 1 of the 2-process run failed" + P.TEXT_FALLBACK
                    + " (detected within about 20 s); process 0 stops: nothing was finished")  # fmt: skip


def test_describe_asks_whether_the_service_answers_only_away_from_the_coordinator(monkeypatch):
    asked = []

    def answers(at):
        asked.append(at)
        return False

    monkeypatch.setattr(P, "_service_answers", answers)
    ending = _ending({"joined": "2 1"})
    g = P.Group(n=2, me=1, heartbeat=10, coordinator="h:5")
    assert "process 0 (the coordinator) of the 2-process run is unreachable or failed" in g.describe(ending)
    assert asked == ["h:5"]
    P.Group(n=2, me=0, coordinator="h:5").describe(_ending({"joined": "2 0"}))
    P.Group(n=2, me=1, coordinator=None).describe(ending)
    assert asked == ["h:5"]


# --- joining a run ------------------------------------------------------------------------------------------


@pytest.fixture()
def joining(monkeypatch, run):
    """start() with JAX's initialize, the launcher's fork, the port check and the peer watch recorded."""
    run()
    for k in P.ENV:
        monkeypatch.delenv(k, raising=False)
    calls: dict[str, list] = {"init": [], "supervise": [], "port": [], "watch": []}
    state = types.SimpleNamespace(calls=calls, n=2, me=1, fail=None, client="client", port=False, channel=_Told())

    def initialize(*args, **kw):
        calls["init"].append((args, kw))
        if state.fail is not None:
            raise state.fail
        monkeypatch.setattr(jax, "process_count", lambda: state.n)
        monkeypatch.setattr(jax, "process_index", lambda: state.me)

    def supervise(describe):
        calls["supervise"].append(describe)
        return state.channel

    def port(coordinator):
        calls["port"].append(coordinator)
        return state.port

    class Watch:
        def __init__(self, client, group):
            calls["watch"].append((client, group))

        def start(self):
            return self

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    monkeypatch.setattr(P._supervise, "supervise", supervise)
    monkeypatch.setattr(P, "_port_taken", port)
    monkeypatch.setattr(P, "_client", lambda: state.client)
    monkeypatch.setattr(P, "PeerWatch", Watch)
    monkeypatch.setattr(P, "_interactive", lambda: False)
    return state


def test_no_run_is_joined_without_a_coordinator_or_a_count(joining):
    assert P.start() is False and P.start(process_id=1) is False
    assert joining.calls == {"init": [], "supervise": [], "port": [], "watch": []}


def test_a_run_is_joined_from_the_arguments(joining):
    assert P.start(" 127.0.0.1:0123 ", 2, 1, timeout=7, heartbeat=3) is True
    kw = dict(initialization_timeout=7, heartbeat_timeout_seconds=3)
    assert joining.calls["init"] == [(("127.0.0.1:123", 2, 1), kw)]
    g = P.current()
    assert (g.n, g.me, g.heartbeat, g.join, g.coordinator, g.joined) == (2, 1, 3, 7, "127.0.0.1:123", True)
    assert g.port_in_use is False and joining.calls["port"] == []  # only process 0 checks the port
    assert joining.calls["supervise"] == [g.describe] and g.channel is joining.channel
    assert joining.channel.notes == [("joined", "2 1")]
    (client, watched), = joining.calls["watch"]  # fmt: skip
    assert client == "client" and watched is g and g.watch is not None


def test_a_run_is_joined_from_the_environment_and_the_arguments_come_first(joining, monkeypatch):
    monkeypatch.setenv("BRWSIM_COORDINATOR", "h:9")
    monkeypatch.setenv("BRWSIM_NUM_PROCESSES", "3")
    monkeypatch.setenv("BRWSIM_PROCESS_ID", "2")
    joining.n, joining.me = 3, 2
    assert P.start(supervise=False) is True
    assert joining.calls["init"][-1][0] == ("h:9", 3, 2) and joining.calls["supervise"] == []
    assert P.current().channel.fd is None
    joining.n, joining.me, joining.port = 4, 0, True
    assert P.start("h:8", 4, 0, supervise=False) is True
    assert joining.calls["init"][-1][0] == ("h:8", 4, 0) and joining.calls["port"] == ["h:8"]
    assert P.current().port_in_use is True
    assert P.start(num_processes=0 + 4, process_id=0, supervise=False) and joining.calls["init"][-1][0] == ("h:9", 4, 0)
    monkeypatch.setenv("BRWSIM_PROCESS_ID", "7")
    joining.n, joining.me = 9, 0
    P.start(num_processes=9, process_id=0, supervise=False)
    assert joining.calls["init"][-1][0] == ("h:9", 9, 0)


def test_the_launcher_is_forked_outside_an_interactive_session(joining, monkeypatch):
    P.start("h:5", 2, 1)
    assert len(joining.calls["supervise"]) == 1
    monkeypatch.setattr(P, "_interactive", lambda: True)
    P.start("h:5", 2, 1)
    assert len(joining.calls["supervise"]) == 1
    P.start("h:5", 2, 1, supervise=True)
    assert len(joining.calls["supervise"]) == 2


def test_a_one_process_run_or_one_without_jaxs_client_has_no_peer_watch(joining):
    joining.n, joining.me = 1, 0
    P.start("h:5", 1, 0, supervise=False)
    assert joining.calls["watch"] == [] and P.current().watch is None
    joining.n, joining.me, joining.client = 2, 1, None
    P.start("h:5", 2, 1, supervise=False)
    assert joining.calls["watch"] == [] and P.current().watch is None


def test_auto_lets_jax_find_the_cluster(joining):
    joining.n, joining.me = 4, 3
    assert P.start(auto=True, supervise=False) is True
    assert joining.calls["init"] == [
        ((None, None, None), dict(initialization_timeout=120, heartbeat_timeout_seconds=10))
    ]
    assert joining.calls["port"] == [] and (P.current().n, P.current().me) == (4, 3)


def test_an_auto_run_that_cannot_join_names_what_jax_looks_for(joining):
    joining.fail = ValueError("")
    with pytest.raises(BrwsimError) as e:
        P.start(auto=True, timeout=9, supervise=False)
    assert str(e.value) == (
        "--distributed auto could not join a multi-process run within 9 s: JAX found no cluster it knows (SLURM, "
        "Open MPI, Kubernetes, Cloud TPU) or could not reach it; elsewhere give --coordinator HOST:PORT, "
        "--num-processes N and --process-id I (ValueError)"
    )


@pytest.mark.parametrize("error", [RuntimeError, ValueError, TypeError])
def test_a_run_that_cannot_join_is_one_line(joining, error):
    joining.fail = error("  DEADLINE_EXCEEDED: " + "x" * 300 + "\nsecond line")
    with pytest.raises(BrwsimError) as e:
        P.start("h:5", 2, 1, timeout=7, supervise=False)
    first = ("DEADLINE_EXCEEDED: " + "x" * 300)[:200]
    assert str(e.value) == (f"could not join the 2-process run at h:5 within 7 s (is every process started, with "
                            f"the same --coordinator?): {first}")  # fmt: skip
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_before_it_joins_the_group_is_the_one_asked_for(joining):
    # what the launcher forked here knows when the worker fails before the run assembled
    joining.fail = RuntimeError("no")
    for kw, n, me in [(dict(coordinator="h:5", num_processes=3, process_id=1), 3, 1), (dict(auto=True), "?", "?")]:
        with pytest.raises(BrwsimError):
            P.start(**kw, supervise=False)
        g = P.current()
        assert (g.n, g.me, g.joined) == (n, me, False), kw
    line = g.describe(_ending({}))
    assert line.startswith("brwsim: error: process ? of the multi-process run could not start the run's coordination")
    assert line.endswith("; process ? stops: nothing was finished")


def test_join_failures_of_an_unnamed_run():
    e = P._join_failed(RuntimeError(" \n "), False, "h:5", 3, P.Group(n="?"))
    assert str(e) == ("could not join the multi-process run at h:5 within 3 s (is every process started, with the "
                      "same --coordinator?): RuntimeError")  # fmt: skip
    e = P._join_failed(RuntimeError("y" * 250), True, None, 4, P.Group())
    assert str(e).endswith("--process-id I (" + "y" * 200 + ")")


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ("h:5", None, None),
            "a multi-process run needs --coordinator HOST:PORT, --num-processes N and --process-id I "
            "(or BRWSIM_COORDINATOR, BRWSIM_NUM_PROCESSES, BRWSIM_PROCESS_ID), or --distributed auto on a cluster",
        ),
        (
            (None, 2, 0),
            "a multi-process run needs --coordinator HOST:PORT, --num-processes N and --process-id I "
            "(or BRWSIM_COORDINATOR, BRWSIM_NUM_PROCESSES, BRWSIM_PROCESS_ID), or --distributed auto on a cluster",
        ),
        (
            ("h:5", 2, None),
            "a multi-process run needs --coordinator HOST:PORT, --num-processes N and --process-id I "
            "(or BRWSIM_COORDINATOR, BRWSIM_NUM_PROCESSES, BRWSIM_PROCESS_ID), or --distributed auto on a cluster",
        ),
        (("h:5", 2, 2), "process-id must be below num-processes (2), got 2"),
        (("h:5", 0, 0), "num-processes must be an integer >= 1, got 0"),
        (("h:5", 2, -1), "process-id must be an integer >= 0, got -1"),
        (("h", 2, 0), "coordinator 'h' is not HOST:PORT: " + HINT),
    ],
)
def test_bad_process_arguments_are_refused_before_anything_starts(joining, args, message):
    with pytest.raises(BrwsimError) as e:
        P.start(*args, supervise=False)
    assert str(e.value) == message and joining.calls["init"] == []


def test_bad_timeouts_are_refused_by_name(joining):
    for kw, message in [
        (dict(timeout=0), "join-timeout must be an integer >= 1, got 0"),
        (dict(heartbeat=86401), "heartbeat-timeout must be at most 86400 seconds (one day), got 86401"),
    ]:
        with pytest.raises(BrwsimError) as e:
            P.start("h:5", 2, 1, supervise=False, **kw)
        assert str(e.value) == message
    assert P.start("h:5", 2, 1, timeout=86400, heartbeat=1, supervise=False)


def test_success_is_told_to_the_peer_watch(run):
    finished = []
    g = run(2, 0)
    P.succeeded()  # no watch: nothing to do
    g.watch = types.SimpleNamespace(finish=lambda: finished.append(True))
    P.succeeded()
    assert finished == [True]


def test_an_interactive_session_is_recognised(monkeypatch):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.delattr(sys, "ps1", raising=False)
    assert P._interactive() is False
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert P._interactive() is True
    monkeypatch.delattr(sys, "ps1")
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    assert P._interactive() is True
    monkeypatch.delitem(sys.modules, "ipykernel")
    monkeypatch.setattr(sys, "flags", types.SimpleNamespace(interactive=1))
    assert P._interactive() is True


# --- what a process knows of its run ----------------------------------------------------------------------------


def test_what_was_finished_is_told_to_the_launcher_only_in_a_run_of_several(run):
    g = run(2, 1, channel=_Told())
    P.note_finished("3 rounds in DIR")
    P.note_finished(None)
    P.note_finished("")
    assert g.finished == "" and g.channel.notes == [("finished", "3 rounds in DIR")]
    g = run(1, 0, channel=_Told())
    P.note_finished("all")
    assert g.finished == "all" and g.channel.notes == []


def test_several_only_once_joined_to_two_or_more():
    for kw, want in [
        (dict(n=2, joined=True), True), (dict(n=1, joined=True), False), (dict(n="?", joined=True), False),
        (dict(n=3, joined=False), False),
    ]:  # fmt: skip
        mp = pytest.MonkeyPatch()
        mp.setattr(P, "_JOINED", P.Group(**kw))
        try:
            assert P.several() is want, kw
        finally:
            mp.undo()


def test_count_index_and_main_read_jax_unless_alone(run):
    run(3, 2)
    assert (P.count(), P.index(), P.is_main()) == (3, 2, False)
    assert P.share(list(range(8))) == [2, 5]
    with P.alone():
        assert (P.count(), P.index()) == (1, 0) and P.share([1, 2]) == [1, 2]
        with P.alone():
            assert P.current().alone == 2
        assert P.count() == 1 and P.current().alone == 1
    assert P.current().alone == 0 and P.count() == 3
    with pytest.raises(KeyError), P.alone():
        raise KeyError
    assert P.current().alone == 0
    run(2, 0)
    assert P.is_main() is True


def test_native_stdout_goes_to_stderr_inside_the_block(capfd):
    with P._native_stdout_to_stderr():
        os.write(1, b"native")
    os.write(1, b"after")
    out, err = capfd.readouterr()
    assert out == "after" and err == "native"


# --- the collectives --------------------------------------------------------------------------------------------


@pytest.fixture()
def slept(monkeypatch):
    naps: list[float] = []
    monkeypatch.setattr(P, "time", types.SimpleNamespace(sleep=naps.append))
    return naps


def test_a_failed_exchange_waits_for_the_service_then_stops_with_one_line(run, slept):
    run(2, 1, heartbeat=7, finished="12 rounds")
    e = P._collective_failed(RuntimeError("gloo: connection reset\ntrace"))
    assert slept == [19]
    assert str(e) == ("an exchange between the 2 processes of the run failed (gloo: connection reset); process 1 "
                      "stops: 12 rounds")  # fmt: skip
    run(3, 0)
    assert str(P._collective_failed(OSError(" "))) == (
        "an exchange between the 3 processes of the run failed (OSError); process 0 stops: nothing was finished"
    )
    assert str(P._collective_failed(RuntimeError("z" * 300))).startswith(
        f"an exchange between the 3 processes of the run failed ({'z' * 200}); "
    )  # noqa: E501


def _two_processes(monkeypatch, other, fail=False):
    """process_allgather as process 0 of two, the other process holding ``other``."""
    theirs = np.frombuffer(pickle.dumps(other, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    seen = []

    def allgather(x):
        seen.append(x.copy())
        if fail:
            raise RuntimeError("peer gone")
        if len(seen) == 1:
            assert x.dtype == np.int64 and x.shape == (1,)
            return np.stack([x, np.array([theirs.size], np.int64)])
        assert x.dtype == np.uint8
        pad = np.zeros(x.size, np.uint8)
        pad[: theirs.size] = theirs
        return np.stack([x, pad])

    monkeypatch.setattr(P.multihost_utils, "process_allgather", allgather)
    return seen


def test_gather_returns_every_processs_object_in_order(run, monkeypatch, capfd):
    run(1, 0)
    assert P.gather({"a": 1}) == [{"a": 1}]
    run(2, 0)
    mine, theirs = {"rows": [1.5, 2.5], "name": "x" * 50}, ("short", 3)
    seen = _two_processes(monkeypatch, theirs)
    assert P.gather(mine) == [mine, theirs]
    assert seen[0].tolist() == [len(pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL))]
    seen = _two_processes(monkeypatch, mine)
    assert P.gather(theirs) == [theirs, mine]  # this process's object the shorter: padded
    assert len(seen[1]) == len(pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_failed_gather_or_barrier_is_one_line(run, monkeypatch, slept):
    run(2, 1, heartbeat=1)
    _two_processes(monkeypatch, 0, fail=True)
    with pytest.raises(BrwsimError) as e:
        P.gather(1)
    assert str(e.value) == ("an exchange between the 2 processes of the run failed (peer gone); process 1 stops: "
                            "nothing was finished") and slept == [7]  # fmt: skip

    def sync(name):
        raise RuntimeError(f"barrier {name} broken")

    monkeypatch.setattr(P.multihost_utils, "sync_global_devices", sync)
    with pytest.raises(BrwsimError) as e:
        P.barrier("round 3")
    assert "failed (barrier round 3 broken); process 1 stops" in str(e.value)


def test_a_barrier_waits_only_in_a_run_of_several(run, monkeypatch, capfd):
    names = []

    def sync(name):
        os.write(1, b"gloo says hello")
        names.append(name)

    monkeypatch.setattr(P.multihost_utils, "sync_global_devices", sync)
    run(1, 0)
    P.barrier("a")
    run(2, 0)
    P.barrier("b")
    assert names == ["b"]
    out, err = capfd.readouterr()
    assert out == "" and err == "gloo says hello"


# --- a signal posted to every process ----------------------------------------------------------------------------


class _Posts:
    def __init__(self, fail=False):
        self.kv: dict = {}
        self.fail = fail
        self.asked = 0

    def key_value_set(self, key, value):
        if self.fail:
            raise RuntimeError("ALREADY_EXISTS")
        self.kv[key] = value

    def key_value_try_get(self, key):
        self.asked += 1
        return self.kv[key]


def test_a_stop_is_posted_and_read_through_the_coordination_service(run, monkeypatch):
    store = _Posts()
    monkeypatch.setattr(P._distributed.global_state, "client", store)
    run(2, 1)
    assert P._client() is store
    assert P.stop_posted() is None  # nothing posted: the key is missing
    P.post_stop(15)
    assert store.kv == {P.STOP_KEY: "1 15"} and P.STOP_KEY == "brwsim/stop"
    assert P.stop_posted() == (1, 15)
    monkeypatch.setattr(P._distributed.global_state, "client", _Posts(fail=True))
    P.post_stop(2)  # another process posted first (the service refuses a second post): nothing raised


def test_a_one_process_run_posts_and_reads_nothing(run, monkeypatch):
    store = _Posts()
    store.kv[P.STOP_KEY] = "0 2"
    monkeypatch.setattr(P._distributed.global_state, "client", store)
    run(1, 0)
    P.post_stop(15)
    assert P.stop_posted() is None and store.kv == {P.STOP_KEY: "0 2"} and store.asked == 0
    run(2, 0)
    monkeypatch.setattr(P._distributed.global_state, "client", None)
    P.post_stop(15)
    assert P.stop_posted() is None
