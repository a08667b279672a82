"""``brwsim plan --model M --drafter SPEC``: every real drafter planned beside the oracle, with its draft cost."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.needs_llm, pytest.mark.slow]


def test_plan_model_with_a_real_drafter_measured_here(capsys, tmp_path):
    from brwsim.cli import main

    argv = ["plan", "--model", "smollm2-135m", "--drafter", "layerskip:auto", "--hardware", "cpu-measured",
            "--P", "1,2", "--n", "2", "--walks", "8", "--depth", "4", "--surrogate-trees", "50", "--repeats", "2",
            "--context", "32", "--prompts", "pydoc"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert [t["drafter"].split(" ")[0] for t in tables] == ["oracle", tables[1]["drafter"].split(" ")[0]]
    assert tables[1]["drafter"].startswith("layerskip:skip=")
    d = tables[1]["draft_cost"]
    assert d["kind"] == "measured" and tables[1]["rows"][1]["t_draft"] > 0
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "layerskip:skip=" in out and "measured here" in out
