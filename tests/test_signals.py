"""SIGTERM and SIGHUP stop `simulate` as Ctrl-C does: the finished trees printed, one line, exit 143 / 129; a
signal to any process of a multi-process run (or to its launcher) stops every process after the same round."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
from test_processes import BROKEN, TIMEOUT, _env, _wait_for_checkpoint, start_processes

from brwsim import _interrupts as interrupts

# rounds of 2000 trees: a round is kept within seconds, and the run would take hours
ONE = ["simulate", "--law", "fixed:probs=0.5/0.5", "--P", "4", "--trees", "4000000000", "--batch", "2000",
       "--round-trees", "2000", "--json"]  # fmt: skip
# 2 processes, rounds of 2 x 500 trees, 200 rounds: a signal comes long before the end
MANY = ["--heartbeat-timeout", "60", "simulate", "--law", "dirichlet:V=30,alpha=0.2", "--P", "1,8", "--trees",
        "200000", "--seed", "3", "--round-trees", "500", "--json"]  # fmt: skip


def _interrupted(out: str, err: str, sig: signal.Signals, by: str = "") -> dict:
    """The JSON of the finished trees on stdout, and one line on stderr naming the signal."""
    d = json.loads(out)
    assert d["interrupted"] is True and 0 < d["trees"] < d["trees_requested"], out[:2000]
    assert all(r["mean"] > 0 for r in d["results"]) and "kinds" not in d
    lines = [x for x in err.strip().splitlines() if not x.startswith("brwsim: progress: ")]  # a slow run's own
    assert len(lines) == 1 and lines[0].startswith(f"brwsim: interrupted by {sig.name}{by} after "), err[-3000:]
    assert f"after {d['trees']} of {d['trees_requested']} trees" in lines[0]
    return d


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_print_the_finished_trees(processes, tmp_path, sig, status):
    proc = processes.start([sys.executable, "-m", "brwsim", *ONE, "--checkpoint", str(tmp_path)], env=_env())
    _wait_for_checkpoint(tmp_path, [proc])
    proc.send_signal(sig)
    rc, out, err = processes.finish(proc, BROKEN)
    assert rc == status, err[-3000:]
    _interrupted(out, err, sig)
    assert "rerun the same command to resume" in err and str(tmp_path) in err


@pytest.mark.parametrize(
    "case,sig,status",
    [("Ctrl-C to process 0", signal.SIGINT, 130), ("SIGTERM to the launcher of process 1", signal.SIGTERM, 143)],
)
def test_a_signal_to_one_process_stops_every_process_after_one_round(processes, tmp_path, case, sig, status):
    procs = start_processes(processes, 2, [*MANY, "--checkpoint", str(tmp_path)])
    end = time.monotonic() + TIMEOUT
    while not list(tmp_path.glob("simulate-*.npz")) and time.monotonic() < end:  # the first round kept
        for i, p in enumerate(procs):
            if p.poll() is not None:
                rc, out, err = processes.finish(p, 10)
                pytest.fail(f"process {i} ended before its first round (status {rc}): {err[-3000:]}")
        time.sleep(0.05)
    target = 0 if "process 0" in case else 1
    t0 = time.monotonic()
    if case.startswith("Ctrl-C"):  # a terminal's Ctrl-C: the process group, launcher and worker
        os.killpg(procs[target].pid, sig)
    else:  # the launcher alone (e.g. a scheduler's SIGTERM): it passes the signal on
        os.kill(procs[target].pid, sig)
    runs = [processes.finish(p, BROKEN) for p in procs]
    assert time.monotonic() - t0 < BROKEN  # measured: 3.3-3.7 s, one round of 500 trees a process
    for rc, _, err in runs:
        assert rc == status, err[-3000:]
    d = _interrupted(runs[0][1], runs[0][2], sig, f" (sent to process {target})")
    assert not runs[1][1].strip() and runs[1][2] == runs[0][2]  # process 1 prints no JSON, the same line
    assert d["trees"] % 1000 == 0  # whole rounds of 2 x 500 trees, the same on both processes


def _wait_for_line(path, needle: str, proc, limit: float) -> float:
    """Seconds until ``needle`` is in the file ``path`` (a process's stderr); fails after ``limit`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if needle in path.read_text():
            return time.monotonic() - t0
        assert proc.poll() is None, path.read_text()[-3000:]
        time.sleep(0.05)
    pytest.fail(f"no {needle!r} within {limit} s: {path.read_text()[-3000:]}")


def test_a_signal_during_a_long_call_is_answered_and_a_second_one_stops_at_once(processes, tmp_path):
    """A batch of heavy trees (the JAX kernel, V = 10^6: seconds a node) cannot be cut short, so Python's handler
    waits for it; the signal watch says so within NOTE_AFTER (2 s) of the signal, and a second signal ends the
    process at once with one line and 128 + the first signal."""
    err = tmp_path / "err"
    argv = ["simulate", "--law", "dirichlet:V=1000000,alpha=0.5", "--P", "256", "--trees", "200", "--json"]
    with open(err, "w") as fh:
        proc = processes.start([sys.executable, "-m", "brwsim", *argv], env=_env(), stderr=fh)
    _wait_for_line(err, "brwsim: progress: ", proc, TIMEOUT)  # the heavy run's estimate: the trees come next
    time.sleep(3)  # well inside the first batch (at least a tree: 257 nodes of 0.1-0.3 s)
    proc.send_signal(signal.SIGTERM)
    assert _wait_for_line(err, "brwsim: SIGTERM: stopping after the computation in progress", proc, 30) < 15
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc, out, _ = processes.finish(proc, BROKEN)
    assert rc == 143 and time.monotonic() - t0 < 10 and out == ""
    lines = [x for x in err.read_text().splitlines() if not x.startswith("brwsim: progress: ")]
    assert lines == [
        "brwsim: SIGTERM: stopping after the computation in progress (it cannot be cut short); a second "
        "signal stops at once, losing what is not yet printed or checkpointed",
        "brwsim: stopped at once by a second signal (SIGINT); what was not printed or checkpointed is lost",
    ]


def test_signals_after_the_handler_ran_reach_a_watch_still_reading(capfd):
    """Once the handler ran, later signals are read by the watch too (a pipe nobody read would make Python print a
    BrokenPipeError for each), and none of them stops the process: each raises as the first did."""
    with interrupts.installed():
        for _ in range(2):
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(5)
            time.sleep(interrupts.NOTE_AFTER + 0.5)  # past the watch's wait for a second signal
    assert capfd.readouterr().err == ""


def test_the_handlers_raise_note_and_are_put_back():
    before, before_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)  # (SIG_IGN in a `cmd &`)
    with interrupts.installed():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)  # the handler runs at once; the sleep is cut short
        assert interrupts.received() == signal.SIGHUP and interrupts.exit_status() == 129
    assert signal.getsignal(signal.SIGTERM) is before and interrupts.received() is None
    with interrupts.installed():
        with pytest.raises(KeyboardInterrupt):
            with interrupts.deferred():  # inside a shared round a signal is only noted ...
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                assert interrupts.received() == signal.SIGTERM  # ... the first one counts ...
        assert interrupts.exit_status() == 143  # ... and it raises when the round ends, unless all agreed to stop
    with interrupts.installed():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            interrupts.agree(1, signal.SIGTERM)  # every process stops: process 1's signal came first in order
        assert interrupts.exit_status() == 130 and interrupts.by() == 1 and interrupts.agreed()
    assert signal.getsignal(signal.SIGINT) is before_int


# -- the one line of a process fault: no [Gloo] notes around it, no garbled counts or addresses


def test_the_collectives_notes_never_reach_stderr_even_in_two_writes(capfd):
    from brwsim import _supervise

    report = []
    rest = _supervise._pass_on(b"result line\n[Gloo] Rank 1 is connected to 1 pe", report)
    assert rest == b"[Gloo] Rank 1 is connected to 1 pe"  # held back: it may be a note
    assert _supervise._pass_on(rest + b"er ranks. Expected number of connected peer ranks is : 1\n", report) == b""
    assert _supervise._pass_on(b"[Gl", report) == b"[Gl" and _supervise._pass_on(b"50%|#####", report) == b""
    assert capfd.readouterr().err == "result line\n50%|#####" and not report


@pytest.mark.parametrize(
    "run,needle",
    [
        ({"n": 1, "me": 0, "coordinator": "127.0.0.1:5"}, "process 0 of the 1-process run could not start the run's "
         "coordination service on 127.0.0.1:5 (is the port in use by another program? choose another --coordinator "
         "port); process 0 stops: nothing was finished"),
        ({"n": "?", "me": "?", "coordinator": None}, "process ? of the multi-process run could not start the run's "
         "coordination service (is the port"),
        ({"n": 3, "me": 0, "coordinator": "h:1"},
         "one of processes 1-2 of the 3-process run did not join within 120 s"),
    ],
)  # fmt: skip
def test_fault_lines_name_the_run_as_it_is(monkeypatch, run, needle):
    from brwsim import _processes, _supervise

    group = _processes.Group(**run, join=120)
    report = "E1128 03:29:29.001333   30161 coordination_service.cc:1] lost"
    line = _processes.fault_line(group, _supervise.Ending(-6, True, {}, time.monotonic(), report))
    assert needle in line and line.startswith("brwsim: error: ") and "None" not in line and "1-0" not in line


def test_distributed_auto_outside_a_cluster_names_no_address(monkeypatch):
    from brwsim import _processes
    from brwsim.errors import BrwsimError

    def fail(*args):
        raise RuntimeError("coordinator_address should be defined.")

    monkeypatch.setattr(_processes, "_initialize", fail)
    monkeypatch.setattr(_processes, "_JOINED", _processes.current())  # start() makes a new group: put it back
    with pytest.raises(BrwsimError) as e:
        _processes.start(auto=True, timeout=5, supervise=False)
    msg = str(e.value)
    assert msg.startswith("--distributed auto could not join a multi-process run within 5 s") and "None" not in msg
    assert "give --coordinator HOST:PORT, --num-processes N and --process-id I" in msg
