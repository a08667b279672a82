"""``brwsim plan --model M --drafter SPEC``: every real drafter planned beside the oracle, with its draft cost."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.needs_llm, pytest.mark.slow]


def test_plan_model_with_a_real_drafter_measured_here(capsys, tmp_path):
    from brwsim.cli import main

    # auto with n = 27 of the 30 layers: two candidate blocks probed (2-28, 3-29), not the default's 19
    argv = ["plan", "--model", "smollm2-135m", "--drafter", "layerskip:auto,n=27", "--hardware", "cpu-measured",
            "--P", "1,2", "--n", "2", "--walks", "8", "--depth", "4", "--surrogate-trees", "50", "--repeats", "2",
            "--context", "32", "--prompts", "pydoc", "--draft-prompts", "2", "--draft-tokens", "4"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert [t["drafter"].split(" ")[0] for t in tables] == ["oracle", tables[1]["drafter"].split(" ")[0]]
    assert tables[1]["drafter"].split(" ")[0] in ("layerskip:skip=2-28", "layerskip:skip=3-29")  # auto resolved
    d = tables[1]["draft_cost"]
    assert d["kind"] == "measured" and tables[1]["rows"][1]["t_draft"] > 0
    assert "in speculative decoding here" in d["label"]  # one run (a model run and a timed drafter: the slowest case)
    # per call, as the builder spends it: a measured passes-per-call and seconds-per-call pair at each budget
    assert [P for P, _ in d["passes"]] == [1, 2] and all(n > 0 for _, n in d["passes"])
    assert [r["t_draft"] for r in tables[1]["rows"][1:]] == pytest.approx([s for _, s in d["per_call"]])


def test_plan_model_on_a_roofline_derives_the_drafters_pass_from_its_footprint(capsys):
    from brwsim.cli import main

    argv = ["plan", "--model", "smollm2-135m", "--drafter", "lowbit:bits=4", "--hardware", "h100", "--P", "1,2",
            "--n", "1", "--walks", "16", "--depth", "4", "--surrogate-trees", "50", "--prompts", "pydoc",
            "--draft-tokens", "4", "--json"]  # fmt: skip
    assert main(argv) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    d, t0 = tables[1]["draft_cost"], tables[1]["rows"][0]["t_verify"]
    # counted by hand from SmolLM2-135M's config: 134,479,872 matrix parameters (the tied embedding once, as the LM
    # head) at 4 bits, 35,136 norm weights and 30 layers x 2 x 3 KV heads x 64 cached values a token (L + 1 = 513)
    # in bf16; memory-bound on the H100: bytes / 3.35 TB/s
    low = 134_479_872 * 0.5 + 35_136 * 2 + 11_520 * 2 * 513
    target = 134_515_008 * 2 + 11_520 * 2 * 513
    assert d["kind"] == "derived" and d["t_pass"] == pytest.approx(low / 3.35e12, rel=1e-12)
    assert t0 == pytest.approx(target / 3.35e12, rel=1e-12)
    assert d["fraction"] == pytest.approx(d["t_pass"] / t0) and round(d["fraction"], 4) == 0.2818
    # each budget: the builder's passes per call, measured in speculative decoding here, at that pass time (the
    # pass's extra rows add only their KV values on this memory-bound roofline)
    for (P, n), (_, t) in zip(d["passes"], d["per_call"], strict=True):
        assert n > 0 and n * d["t_pass"] <= t <= n * d["t_pass"] * 1.01, P
