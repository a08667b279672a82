"""The command line: JSON contract, readable table, one-line errors with exit status 2."""

from __future__ import annotations

import json
import os
import sys

import pytest

from brwsim.cli import main

BAD = [
    (["--law", "gaussian:V=3"], "unknown family"),
    (["--law", "dirichlet:V=10"], "missing key"),
    (["--law", "dirichlet:V=10,alpha=0.1,beta=2"], "unknown key"),
    (["--law", "fixed:probs=0.6/-0.1/0.5"], ">= 0"),
    (["--law", "fixed:probs=nan/0.5/0.5"], "NaN"),
    (["--law", "fixed:probs=0.6/0.3"], "sum to"),
    (["--law", "fixed:probs="], "numbers separated"),
    (["--law", "dirichlet:V=0,alpha=0.1"], "V must be >= 1"),
    (["--law", "logitnormal:V=10,sigma=-1"], "sigma must be > 0"),
    (["--law", "dirichlet:V=10,alpha=0.1", "--P", "0"], "P must be an integer >= 1"),
    (["--law", "dirichlet:V=10,alpha=0.1", "--P", "a,b"], "--P must be"),
    (["--law", "dirichlet:V=10,alpha=0.1", "--trees", "0"], "trees must be an integer >= 1"),
    (["--law", "pool:path=/nonexistent/pool.npz"], "cannot be read"),
    (["--law", "markov:path=/nonexistent/law.json"], "cannot be read"),
    (["--law", "/nonexistent/law.toml"], "cannot be read"),
    (["--law", "noseparator"], "expected family:key=value"),
]


@pytest.mark.parametrize("argv,needle", BAD)
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    code = main(["simulate", *argv])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("brwsim: error:")
    assert needle in lines[0]
    assert "Traceback" not in err


def test_bad_markov_file(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text('{"states": {"a": "fixed:probs=1"}, "initial": "b", "kernel": {"a": [[1.0]]}}')
    assert main(["simulate", "--law", str(path), "--trees", "2"]) == 2
    assert "initial state 'b'" in capsys.readouterr().err
    path.write_text("{not json")
    assert main(["simulate", "--law", str(path)]) == 2
    assert "does not parse" in capsys.readouterr().err
    path.write_text('{"states": {"a": "fixed:probs=1"}, "initial": "a", "kernel": {"a": [[0.5]]}}')
    assert main(["simulate", "--law", str(path)]) == 2
    assert "sum to" in capsys.readouterr().err


def test_bad_pool_file(tmp_path, capsys):
    path = tmp_path / "p.npz"
    path.write_bytes(b"not an archive")
    assert main(["simulate", "--law", f"pool:path={path}"]) == 2
    assert "not a readable .npz" in capsys.readouterr().err


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--law", "fixed:probs=1", "--trees", "many"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid int value" in err[0]


def _stdout(processes, argv: list[str], env=None, timeout: float = 600) -> str:
    """stdout of a command that must succeed (started through the ``processes`` fixture: never left running)."""
    rc, out, err = processes.run(argv, timeout, env=env)
    assert rc == 0, err[-3000:]
    return out


def test_json_contract_subprocess(processes):
    out = _stdout(
        processes,
        [sys.executable, "-m", "brwsim", "simulate", "--law", "fixed:probs=0.6/0.3/0.1", "--P", "1,64", "--trees", "3",
         "--seed", "7", "--json"],
    )  # fmt: skip
    d = json.loads(out)  # exactly one JSON object
    assert d["law"] == "fixed:probs=0.6/0.3/0.1"
    assert d["convention"] == "X = accepted draft tokens per verifier call (tokens per call = X + 1)"
    assert d["trees"] == 3 and d["seed"] == 7
    assert [r["P"] for r in d["results"]] == [1, 64]
    assert d["results"][0]["mean"] == pytest.approx(0.6, rel=1e-6)
    assert d["results"][1]["mean"] == pytest.approx(4.2317776, rel=2e-5)
    for r in d["results"]:
        assert r["ci95"] == 0.0
        # an i.i.d. law: three rigorous bounds, two predictions, each labelled
        assert set(r["bounds"]) == {"dual", "splitting", "renewal"}
        assert set(r["predictions"]) == {"asymptotic", "theorem1_leading"}
        assert r["mean"] <= r["bounds"]["dual"] + 1e-6
    assert d["iid"] is True and set(d["kinds"]) == {"dual", "splitting", "renewal", "asymptotic", "theorem1_leading"}
    assert d["mu"] == pytest.approx(0.897945, rel=1e-5)
    assert d["mu_se"] == 0.0


def test_table_output(capsys):
    assert main(["simulate", "--law", "fixed:probs=0.5/0.5", "--P", "1,2", "--trees", "2"]) == 0
    out = capsys.readouterr().out
    assert "E[X]" in out and "tokens per call = X + 1" in out
    assert "0.5000" in out


def test_cli_uses_one_device_per_core_with_identical_results(processes):
    """The command exposes one XLA CPU device per core and shards trees over them: same numbers."""

    def run(flags):
        env = dict(os.environ, XLA_FLAGS=flags) if flags else {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        argv = [sys.executable, "-m", "brwsim", "simulate", "--law", "dirichlet:V=30,alpha=0.2", "--P", "8,32",
                "--trees", "21", "--seed", "4", "--json"]  # fmt: skip
        return json.loads(_stdout(processes, argv, env=env))["results"]

    one = run("--xla_force_host_platform_device_count=1")
    assert run("--xla_force_host_platform_device_count=3") == one
    assert run(None) == one


def test_cli_exposes_one_device_per_core(processes):
    """brwsim.cli is imported after jax (the package imports it); the flag still takes effect."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    code = "import sys, brwsim, jax; assert 'jax' in sys.modules; brwsim.one_cpu_device_per_core(); "
    code += "import os; print(jax.device_count(), os.cpu_count())"
    n_dev, n_cpu = map(int, _stdout(processes, [sys.executable, "-c", code], env=env).split())
    assert n_dev == n_cpu


def test_default_devices_in_process():
    import jax

    from brwsim._devices import default_devices

    expected = "all" if jax.default_backend() == "cpu" and jax.device_count() > 1 else None
    assert default_devices() == expected


def test_ctrl_c_prints_what_was_finished_not_a_traceback(processes, tmp_path):
    import signal
    import time

    cmd = [sys.executable, "-m", "brwsim", "simulate", "--law", "fixed:probs=0.5/0.5", "--P", "4", "--trees",
           "4000000000", "--batch", "2000", "--round-trees", "2000", "--checkpoint", str(tmp_path)]  # fmt: skip
    proc = processes.start(cmd, sigint_default=True)  # SIGINT as a terminal's Ctrl-C, even from a shell ignoring it
    end = time.monotonic() + 600  # a loaded machine: wait for a finished round rather than a fixed time
    while not list(tmp_path.glob("simulate-*.npz")) and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    rc, out, err = processes.finish(proc, 300)
    assert rc == 130, err[-2000:]
    assert "Traceback" not in err and "brwsim: interrupted" in err
    assert "interrupted:" in out and "E[X]" in out  # a round had finished: its estimate, with the count
    assert "rerun the same command to resume" in err and str(tmp_path) in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--law", "dirichlet:V=1000,alpha=0.1", "--P", "10000000000", "--trees", "2"], "the largest P that fits is"),
        (["--law", "fixed:probs=0.5/0.5", "--trees", "10000000000"], "trees must be at most 4294967295"),
    ],
)
def test_inputs_too_large_for_the_machine_are_one_line_errors(argv, needle, capsys):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_compiled_programs_kept_on_disk_give_the_same_numbers(processes, tmp_path):
    """A second process loads XLA's compiled programs from the cache: same JSON, bit for bit."""
    cmd = [sys.executable, "-m", "brwsim", "simulate", "--law", "dirichlet:V=8,alpha=0.5", "--P", "1,5", "--trees"]
    env = dict(os.environ, BRWSIM_XLA_CACHE=str(tmp_path / "xla"))
    runs = []
    for _ in range(2):
        out = _stdout(processes, cmd + ["40", "--json"], env=env)
        runs.append({k: v for k, v in json.loads(out).items() if k != "seconds"})
        assert any((tmp_path / "xla").iterdir()), "the first run kept no compiled program"
    assert runs[0] == runs[1]
    # cache off: nothing kept in the user cache (a run with the least to compile: the cache is opened, or not,
    # before any law is read, and its programs would be written there too)
    env |= {"BRWSIM_XLA_CACHE": "off", "BRWSIM_CACHE": str(tmp_path / "user")}
    off = [sys.executable, "-m", "brwsim", "simulate", "--law", "fixed:probs=0.5/0.5", "--P", "1", "--trees", "1"]
    assert json.loads(_stdout(processes, off + ["--json"], env=env))["results"][0]["mean"] == 0.5
    assert not (tmp_path / "user" / "xla").exists()
