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
    assert d["errors"] == {} and set(d["section_seconds"]) == {"real", "compare", "exactness", "bf16", "timing",
                                                              "oracle"}  # fmt: skip
    assert d["compare"]["max_rel_oracle_ex"] == 0.0 and d["oracle"]["max_rel_default_cpu"] == 0.0  # same device
    for runs in [*d["exactness"].values(), *d["bf16"]["greedy"].values()]:  # T = 0: plain greedy, token for token
        assert [r["differ"] for r in runs] == [0]
    assert list(d["exactness"]) == ["layerskip:skip=2", "lookup:n=3", "eagle-head"]
    assert d["bf16"]["dtype"] == d["bf16"]["head_dtype"] == "torch.bfloat16"
    t = d["timing"]
    assert set(t["torch.float32"]) == set(t["torch.bfloat16"]) == {"0", "1", "2", "4", "8", "16", "32", "64", "128"}
    assert set(t["drafter_passes"]) == {"layerskip:skip=2", "eagle-head", "lowbit:bits=4"}
    assert all(v["fraction"] > 0 for v in t["drafter_passes"].values())
