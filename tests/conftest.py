"""Shared test settings: JAX on the CPU, float32, and the laws several test modules use."""

from __future__ import annotations

import os
import signal
import subprocess

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import brwsim  # noqa: E402
from brwsim.laws import markov_law, parse_law  # noqa: E402
from brwsim.testing import table_law  # noqa: E402

brwsim.enable_compilation_cache()  # compiled programs shared with the CLI subprocesses the tests start
jax.config.update("jax_enable_x64", False)  # brwsim computes in float32; the tests check that
settings.register_profile("brwsim", deadline=None, derandomize=True)  # fixed examples: same run every time
settings.load_profile("brwsim")


# Seconds each slow test file takes on one core (measured with --durations, 2026-11-28; a file not named here is
# fast). Collection puts these files first, slowest first, and pyproject's ``--dist worksteal`` splits the order
# between the workers, an idle one taking unstarted tests from the other's end: the long tests start early and
# the run ends on short ones. (Within a file the order is unchanged, so module fixtures are made once.)
SLOW_FILES = {
    "tests/test_processes.py": 360,
    "tests/llm/test_hostile_llm.py": 180,
    "tests/test_signals.py": 140,
    "tests/test_exact_oracle.py": 135,
    "tests/test_experiments.py": 130,
    "tests/test_drafters.py": 110,
    "tests/test_oracle.py": 105,
    "tests/test_bounds_property.py": 90,
    "tests/test_estimate.py": 75,
    "tests/llm/specdec/test_specdec.py": 70,
    "tests/test_cli.py": 70,
    "tests/llm/test_plan.py": 60,
    "tests/test_specsampling.py": 50,
    "tests/test_spine.py": 40,
    "tests/test_draft_costs.py": 37,
    "tests/llm/drafters/test_real_drafters.py": 35,
    "tests/test_theory.py": 32,
}


def pytest_collection_modifyitems(config, items):
    weight = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        weight.setdefault(path, SLOW_FILES.get(path, 0))
    items.sort(key=lambda item: -weight[item.nodeid.split("::")[0]])  # stable: each file's order kept


@pytest.fixture()
def indexed_laws(tmp_path):
    """One law of every indexed kind: fixed, pool, an all-indexed Markov law, the benchmark's table law."""
    np.savez(tmp_path / "pool.npz", probs=np.array([[0.7, 0.2, 0.1, 0.0], [0.4, 0.3, 0.2, 0.1], [0.25] * 4]))
    markov = {
        "states": {"a": "fixed:probs=0.9/0.1", "b": f"pool:path={tmp_path / 'pool.npz'}"},
        "initial": {"a": 0.5, "b": 0.5},
        "kernel": {"a": [[0.8, 0.2], [0.1, 0.9]], "b": [[0.3, 0.7]]},
    }
    return [
        parse_law("fixed:probs=0.5/0.3/0.2"),
        parse_law(f"pool:path={tmp_path / 'pool.npz'}"),
        markov_law(markov),
        table_law(6, n_rows=32, alpha=0.4),
    ]


class Processes:
    """The processes a test starts: each leads its own process group (``start_new_session``), and every group
    is killed, children included, when the test ends, whatever happens (:func:`processes`)."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, argv: list[str], sigint_default: bool = False, **kwargs) -> subprocess.Popen:
        """Popen ``argv`` (text pipes by default) in a new session; ``sigint_default``: SIGINT set to its
        default in the child, so Ctrl-C reaches Python even from a shell whose background jobs ignore it."""
        kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True} | kwargs
        # an ignored SIGINT stays ignored across exec, a handled one becomes the default: handle it while starting
        # (no preexec_fn: forking a multithreaded JAX process to run Python in the child can deadlock)
        saved = signal.getsignal(signal.SIGINT)
        if sigint_default and saved == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            p = subprocess.Popen(argv, start_new_session=True, **kwargs)
        finally:
            if sigint_default and saved == signal.SIG_IGN:
                signal.signal(signal.SIGINT, saved)
        self.started.append(p)
        return p

    def finish(self, p: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
        """(returncode, stdout, stderr) of ``p``; a process still running after ``timeout`` s fails the test."""
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            pytest.fail(f"{p.args[:6]}... did not end within {timeout} s")
        return p.returncode, out, err

    def run(self, argv: list[str], timeout: float, **kwargs) -> tuple[int, str, str]:
        return self.finish(self.start(argv, **kwargs), timeout)

    @staticmethod
    def kill(p: subprocess.Popen) -> None:
        """SIGKILL to ``p``'s whole process group (it and its children), then reap it."""
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def kill_all(self) -> None:
        for p in self.started:
            self.kill(p)
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()


@pytest.fixture()
def processes():
    """Start processes through this; they and their children are killed when the test ends."""
    ps = Processes()
    try:
        yield ps
    finally:
        ps.kill_all()
