"""experiments/end_to_end.py's bookkeeping: prompts held out from the planner's, paired ratios over the plain runs
around each configuration, and one cached unit per drafter that later runs reuse."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.needs_llm

TASKS = ("humaneval", "pydoc", "sharegpt")


def test_scored_prompts_are_none_of_the_planners_and_interleaved_by_task():
    from brwsim.llm.sources._devset import dev_prompts
    from experiments import common, end_to_end

    planner = {(p.task, p.id) for p in common.prompt_order(TASKS, end_to_end.PLANNER_PROMPTS, 0)}
    assert len(planner) == 3 * end_to_end.PLANNER_PROMPTS
    got = end_to_end.held_out_order(TASKS, 16, 0)
    assert len(got) == 48 and len({(p.task, p.id) for p in got}) == 48
    assert not planner & {(p.task, p.id) for p in got}  # never scored on the sample the planner read
    dev = {(p.task, p.id) for t in TASKS for p in dev_prompts(t)}
    assert len(dev) == 24 and not dev & {(p.task, p.id) for p in got}  # nor on prompts settings were chosen on
    assert [p.task for p in got[:6]] == list(TASKS) * 2
    # a development prompt among the evenly spaced ones is left out, the others keep their order
    every = end_to_end.held_out_order(("pydoc",), 18, 0)
    assert len(every) == 18 and not dev & {(p.task, p.id) for p in every}
    with pytest.raises(SystemExit, match="pydoc has 18 prompts outside the planner's 64 and the development"):
        end_to_end.held_out_order(("pydoc",), 19, 0)


def _run(kind, tps, drafter=None, P=None):
    return {"kind": kind, "tokens_per_second": tps} | ({"drafter": drafter, "P": P} if drafter else {})


def test_each_configuration_is_over_the_mean_of_the_plain_runs_around_it():
    from experiments.end_to_end import ratios

    units = [  # two drafters' units, as _point concatenates them
        [_run("plain", 10.0), _run("speculative", 15.0, "a", 4), _run("speculative", 6.0, "a", 32), _run("plain", 20)],
        [_run("plain", 12.0), _run("speculative", 18.0, "b", 0), _run("plain", 12.0)],
    ]
    got = [(d, P, s) for d, P, s, _ in ratios([r for u in units for r in u])]
    assert got == [("a", 4, 1.0), ("a", 32, 0.4), ("b", 0, 1.5)]


def test_a_drafters_unit_is_cached_on_its_own(monkeypatch, tmp_path):
    from experiments import end_to_end

    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    measured = []

    def fake(params, prompt, plan):
        measured.append([s for s, _ in plan][0])
        runs = [_run("plain", 10.0)] + [_run("speculative", 10.0 + P, s, P) for s, P in plan] + [_run("plain", 10.0)]
        return [{"task": prompt.task, "id": prompt.id, "prompt_tokens": 5, "runs": runs}]

    class Table:
        def __init__(self, best):
            self.best = type("B", (), {"P": best})()
            self.rows = [type("R", (), {"P": P})() for P in (0, 1, 4, 8, 32)]

    monkeypatch.setattr(end_to_end, "measure_prompt", fake)
    prompt = type("Prompt", (), {"task": "humaneval", "id": "HumanEval/1", "text": "x"})()
    tables = {("humaneval", "lookup:n=3"): Table(4), ("humaneval", "lowbit:bits=4"): Table(0)}
    one = end_to_end.settings(True, 0, drafters=["lowbit:bits=4", "lookup:n=3"])
    (pt,) = end_to_end._point(one, prompt, tables, 0.0, None)
    assert measured == ["lowbit:bits=4", "lookup:n=3"] and len(pt["runs"]) == 8
    assert [(r["drafter"], r["P"]) for r in pt["runs"] if r["kind"] == "speculative"] == [
        ("lowbit:bits=4", 0), ("lowbit:bits=4", 8), ("lookup:n=3", 4), ("lookup:n=3", 32)]  # fmt: skip
    alone = end_to_end.settings(True, 0, drafters=["lookup:n=3"])  # another run, one of the drafters: reused
    (pt2,) = end_to_end._point(alone, prompt, tables, 0.0, None)
    assert measured == ["lowbit:bits=4", "lookup:n=3"] and pt2["runs"] == pt["runs"][4:]
    assert end_to_end._point(alone, prompt, {}, 0.0, None) is None  # no planner rows: nothing to measure
    # a unit measured with another version of the loop's host work is not reused: it is measured again
    monkeypatch.setattr(end_to_end.planner, "_loop_version", lambda: 1)
    old = end_to_end.settings(True, 0, drafters=["lookup:n=3"])
    assert old["loop"] == 1 and alone["loop"] != 1
    end_to_end._point(old, prompt, tables, 0.0, None)
    assert measured == ["lowbit:bits=4", "lookup:n=3", "lookup:n=3"]
