"""Prompt sets at scale and the real-drafter statistics on hand-made per-prompt points (no model needed)."""

import math

import pytest

from brwsim._stats import mean_ci95, paired_ci95
from brwsim.llm.drafters._report import fixed_builder
from brwsim.llm.sources._prompts import pydoc
from experiments import common, real_drafters


def test_pydoc_has_64_distinct_prose_prompts_with_topic_ids():
    ps = pydoc()
    assert len(ps) >= 64
    assert len({p.id for p in ps}) == len(ps) and len({p.text for p in ps}) == len(ps)
    assert any(p.id.endswith("#2") for p in ps) and all(p.id.count("#") <= 1 for p in ps)
    assert all(p.text[-1] in ".!?" and len(p.text) >= 80 for p in ps)
    # the first paragraph of a topic keeps the bare topic name
    assert {p.id.split("#")[0] for p in ps} == {p.id for p in ps if "#" not in p.id}


def test_prompt_order_interleaves_tasks_in_a_seeded_order():
    a = common.prompt_order(["humaneval", "pydoc"], 6, seed=0)
    assert [p.task for p in a] == ["humaneval", "pydoc"] * 6
    assert a == common.prompt_order(["humaneval", "pydoc"], 6, seed=0)
    b = common.prompt_order(["humaneval", "pydoc"], 6, seed=1)
    assert {p.id for p in a} == {p.id for p in b} and a != b  # the same prompts, another order


def test_fixed_builder_is_chosen_in_advance():
    assert fixed_builder(["topq", "chain", "eagle", "sequoia"]) == "topq"
    assert fixed_builder(["lookup_tree", "lookup_chain"]) == "lookup_tree"


def _point(task, pid, oracle, values):
    drafters = [
        {"name": name, "values": v, "stats": None, "xi_q": None, "s_P": None,
         "check": {"builder": "chain", "mean": 1.0, "value": 1.0, "se": 0.1, "samples": 10, "P": 2}, "passes": 0}
        for name, v in values.items()
    ]  # fmt: skip
    return {"task": task, "id": pid, "oracle": oracle, "xi": [[0.5, 1.0, 2.0, 9.0]] * 16, "H": 1.0, "M2": 2.0,
            "drafters": drafters, "seconds": 1.0, "phases": {"walks": 0.5, "oracle": 0.25},
            "host": {"walks": 0.125}}  # fmt: skip


def test_real_drafters_scores_the_fixed_builder_with_paired_t_intervals():
    # the "chain" builder is better on these prompts, but "topq" is the one fixed in advance and scored
    a = [([1.0, 2.0], [0.5, 1.0], [0.9, 1.9]), ([2.0, 4.0], [1.0, 3.0], [1.5, 3.9]), ([1.0, 2.0], [0.5, 0.5], [1, 2])]
    b = [[0.1, 0.2], [0.3, 0.1], [0.0, 0.0]]
    pts = [
        _point("code", str(i), o, {"m": {"topq": q, "chain": c}, "look": {"lookup_tree": lt, "lookup_chain": lt}})
        for i, ((o, q, c), lt) in enumerate(zip(a, b, strict=True))
    ]
    params = {"model": "toy", "seed": 0, "P": [1, 2]}
    rows = real_drafters.aggregate(params, pts, {})
    get = {(r["statistic"], r.get("drafter"), r["P"]): r for r in rows}
    fr = get[("fraction_of_oracle", "m", 2)]
    assert fr["builder"] == "topq"
    assert (fr["mean"], fr["ci95"]) == pytest.approx(mean_ci95([1.0 / 2.0, 3.0 / 4.0, 0.5 / 2.0]))
    assert get[("best_same_prompts", "m", 2)]["builder"] == "chain"
    gap = get[("oracle_minus_drafter", "m", 1)]
    assert (gap["mean"], gap["ci95"]) == pytest.approx(paired_ci95([1, 2, 1], [0.5, 1.0, 0.5]))
    d = next(r for r in rows if r["statistic"] == "paired_difference" and r["P"] == 2)
    assert (d["drafter"], d["other"]) == ("m", "look")
    assert (d["mean"], d["ci95"]) == pytest.approx(paired_ci95([1.0, 3.0, 0.5], [0.2, 0.1, 0.0]))
    secs = {r["phase"]: r["mean"] for r in rows if r["statistic"] == "seconds_per_prompt"}
    assert secs == {"walks": 0.5, "oracle": 0.25}
    host = {r["phase"]: r["mean"] for r in rows if r["statistic"] == "host_seconds_per_prompt"}
    assert host == {"walks": 0.125}
    prompt_rows = real_drafters.prompt_rows(params, pts)
    assert len(prompt_rows) == 3 * 2 * 2 * 2  # prompts x P x drafters x builders
    r0 = prompt_rows[0]
    assert (r0["id"], r0["P"], r0["drafter"], r0["builder"], r0["fixed"], r0["value"], r0["oracle"]) == (
        "0", 1, "m", "topq", True, 0.5, 1.0)  # fmt: skip
    assert all(r["ci95"] is None or math.isfinite(r["ci95"]) for r in rows if isinstance(r["ci95"], float))


def test_real_drafters_budget_zero_reads_only_cached_prompts(tmp_path, monkeypatch, capsys):
    """``--budget-seconds 0`` measures nothing new: with an empty cache it is a one-line error (exit 2)."""
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    monkeypatch.setattr(real_drafters, "measure_one", lambda *a: pytest.fail("a prompt was measured"))
    with pytest.raises(SystemExit) as e:
        real_drafters.main(["--quick", "--budget-seconds", "0"])
    assert e.value.code == 2
    assert "none is cached" in capsys.readouterr().err
    assert not common.is_cached("real_drafters", {"a": 1})
    common.cached("real_drafters", {"a": 1}, lambda: [{"x": 1}])
    assert common.is_cached("real_drafters", {"a": 1}) and not common.is_cached("real_drafters", {"a": 2})


def test_worker_processes_fail_in_one_line_and_end_whatever_happens(tmp_path):
    import os
    import time

    from brwsim.errors import BrwsimError

    with pytest.raises(BrwsimError, match=r"^worker 1 of 2 \(demo\) failed with exit status 3; its messages") as e:
        with common.workers("demo", [], 2, log=lambda m: None, program=["-c", "import sys; sys.exit(3)"]):
            pass
    assert "\n" not in str(e.value)
    started, pids = [], tmp_path / "pids"
    sleeper = f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}} '); time.sleep(600)"
    with pytest.raises(RuntimeError, match="the parent's own share failed"):
        with common.workers("demo", [], 3, log=started.append, program=["-c", sleeper]):
            end = time.monotonic() + 60
            while len(pids.read_text().split() if pids.exists() else []) < 2 and time.monotonic() < end:
                time.sleep(0.05)
            raise RuntimeError("the parent's own share failed")
    assert started == ["3 processes measure the prompts (this one and 2 worker(s))"]
    for pid in map(int, pids.read_text().split()):  # both workers ended (and were waited for)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with common.workers("demo", [], 1, log=started.append, program=["-c", "raise SystemExit(9)"]):
        pass  # one process: no worker is started
    assert len(started) == 1


def test_a_worker_measures_its_own_share_of_the_prompts():
    order = list(range(10))
    assert common.share(order, None) == order
    shares = [common.share(order, f"{k}/3") for k in range(3)]
    assert shares == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert sorted(x for sh in shares for x in sh) == order
