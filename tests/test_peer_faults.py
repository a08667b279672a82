"""Who a fault's line names, decided from structured state: the launcher's Ending and the peer watch's notes
(fast: no process is started; tests/test_processes.py kills real ones)."""

from __future__ import annotations

import dataclasses
import threading
import time

from brwsim import _processes as P
from brwsim._supervise import Channel, Ending


def _ending(told: dict, at: float = 100.0, report: str = "") -> Ending:
    return Ending(code=1, reported=True, told=told, at=at, report=report)


def _line(me: int, n: int, told: dict, service_up, at: float = 100.0, report: str = "") -> str:
    group = P.Group(n=n, me=me, heartbeat=10, joined=True)
    return P.fault_line(group, _ending({"joined": f"{n} {me}"} | told, at, report), service_up)


def test_a_dead_peer_seen_stopping_is_named_even_after_the_service_went_down():
    # three processes, process 2 killed: the runtime then brings the service down, but the watch of process 1 saw
    # process 2's counter stop while the service still answered
    line = _line(1, 3, {"stale": "2", "answered": "99.0"}, service_up=False)
    assert "process 2 of the 3-process run stopped sending heartbeats" in line and "coordinator" not in line
    assert P.TEXT_FALLBACK not in line


def test_the_coordinator_is_named_when_the_service_went_down_with_no_peer_seen_stopping():
    for told, up in [({"stale": "", "answered": "99.5"}, False), ({"answered": "80.0"}, None)]:  # gone; long silent
        line = _line(1, 3, told, up)
        assert "process 0 (the coordinator) of the 3-process run is unreachable or failed" in line, line


def test_several_stopped_peers_are_all_named():
    line = _line(0, 4, {"stale": "1 3", "answered": "99.9"}, None)
    assert "process 1, process 3 of the 4-process run stopped sending heartbeats" in line


def test_the_log_text_is_a_marked_last_resort():
    line = _line(1, 2, {"answered": "99.9"}, True, report="Terminating process because the coordination service "
                 "has detected missing heartbeats (task stopped sending heartbeats): 1")  # fmt: skip
    assert "process 1 of the 2-process run failed" + P.TEXT_FALLBACK in line


class _Told(Channel):
    def __init__(self):
        super().__init__()
        self.notes: dict[str, str] = {}

    def tell(self, what: str, text: str) -> None:
        self.notes[what] = text


class _Store:
    """The coordination service's key-value store, in memory."""

    def __init__(self):
        self.kv: dict[str, str] = {}
        self.lock = threading.Lock()

    def key_value_set(self, key, value, allow_overwrite=False):
        with self.lock:
            self.kv[key] = value

    def key_value_try_get(self, key):
        with self.lock:
            if key not in self.kv:
                raise KeyError(key)
            return self.kv[key]


def test_the_peer_watch_tells_the_peers_whose_counters_stopped_and_not_those_that_finished():
    store, told = _Store(), _Told()
    group = dataclasses.replace(P.Group(n=4, me=1, heartbeat=4, joined=True), channel=told)  # stale after 2 s
    watch = P.PeerWatch(store, group)
    stop = threading.Event()

    def beat_0():
        k = 0
        while not stop.wait(0.1):
            k += 1
            store.key_value_set(P.ALIVE_KEY.format(0), str(k), True)

    store.key_value_set(P.ALIVE_KEY.format(2), "7", True)  # process 2: one beat, then nothing
    store.key_value_set(P.ALIVE_KEY.format(3), P.DONE, True)  # process 3 finished its work and said so
    feeder = threading.Thread(target=beat_0, daemon=True)
    feeder.start()
    watch.start()
    try:
        end = time.monotonic() + 30
        while told.notes.get("stale") != "2" and time.monotonic() < end:
            time.sleep(0.1)
        assert told.notes.get("stale") == "2", told.notes
        assert time.monotonic() - float(told.notes["answered"]) < 5
        assert store.kv[P.ALIVE_KEY.format(1)].isdigit()  # its own counter beats
    finally:
        stop.set()
        watch.finish()
        feeder.join()
    assert store.kv[P.ALIVE_KEY.format(1)] == P.DONE  # its command succeeded: 'done', not a counter that stopped


def test_a_watch_stopped_without_success_leaves_its_counter():
    # a process that failed (even in Python, exiting cleanly) must be seen to stop by its peers: no 'done'
    store, told = _Store(), _Told()
    group = dataclasses.replace(P.Group(n=2, me=1, heartbeat=4, joined=True), channel=told)
    watch = P.PeerWatch(store, group).start()
    end = time.monotonic() + 30
    while P.ALIVE_KEY.format(1) not in store.kv and time.monotonic() < end:
        time.sleep(0.05)
    watch.stop()
    assert store.kv[P.ALIVE_KEY.format(1)].isdigit()
