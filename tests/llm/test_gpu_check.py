"""benchmarks/gpu_check.py runs the real path and the oracle end to end; here on the CPU with the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.needs_llm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_on_cpu_with_the_tiny_model():
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--tiny"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, check=True).stdout
    d = json.loads(out[out.index("{") :])
    assert d["real"]["device"] == "cpu" and d["oracle"]["jax_backend"] == "cpu"
    assert 0 < d["real"]["oracle_ex"]["4"] <= 4 and set(d["real"]["verify_ms"]) == {"0", "1", "4"}
    assert list(d["real"]["drafter"]) == ["layerskip:skip=2"]
