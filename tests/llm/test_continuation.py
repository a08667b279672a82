"""experiments/continuation.py's rows (E[X] along the target's own continuations) and how the planner reads them:
means over each prompt's offsets then over prompts, the nodes a proposer drafts, and the planner's source."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim.speedup import TableCost

TASK = "humaneval"
LABEL = f"smollm2-135m/{TASK}"


def _points():
    # two prompts, two strata, P_max 4: the oracle, a drafter with a q (always 4 nodes) and a proposer whose trees
    # have 1, 4, 0 and 2 nodes
    def point(pid, oracle, lookup, sizes):
        values = {str(j): {"oracle": oracle[j], "layerskip:skip=14-17": [x / 2 for x in oracle[j]],
                           "lookup:n=3": lookup[j]} for j in (0, 1)}  # fmt: skip
        sz = {str(j): {"layerskip:skip=14-17": 4, "lookup:n=3": sizes[j]} for j in (0, 1)}
        return {"task": TASK, "id": pid, "offsets": [1, 6], "values": values, "sizes": sz, "seconds": 1.0}

    return [
        point("a", [[0.5, 0.9, 1.2, 1.4], [0.7, 1.1, 1.5, 1.8]], [[0.3] * 4, [0.2, 0.3, 0.35, 0.4]], [1, 4]),
        point("b", [[0.4, 0.8, 1.0, 1.3], [0.6, 1.0, 1.3, 1.6]], [[0.0] * 4, [0.5, 0.6, 0.6, 0.6]], [0, 2]),
    ]


def _params():
    return dict(model="smollm2-135m", tasks=[TASK], seed=0, P_max=4, span=8, strata=2)


def test_rows_are_means_over_offsets_then_prompts_with_the_drafted_nodes():
    from brwsim._stats import mean_ci95
    from experiments.continuation import aggregate, budgets

    assert budgets(64) == [1, 2, 4, 8, 16, 32, 64] and budgets(5) == [1, 2, 4]
    rows = aggregate(_params(), _points())
    get = {(r["statistic"], r.get("drafter"), r["P"]): r for r in rows}
    o = get[("oracle", None, 2)]
    m, c = mean_ci95([(0.9 + 1.1) / 2, (0.8 + 1.0) / 2])
    assert (o["mean"], o["ci95"], o["trees"]) == (pytest.approx(m), pytest.approx(c), 2)
    assert get[("fixed", "lookup:n=3", 4)]["mean"] == pytest.approx(((0.3 + 0.4) / 2 + (0.0 + 0.6) / 2) / 2)
    assert get[("fixed", "layerskip:skip=14-17", 1)]["mean"] == pytest.approx(np.mean([0.25, 0.35, 0.2, 0.3]))
    # at P = 2 the proposer drafts min(2, size) of 1, 4, 0, 2 nodes: 1, 2, 0, 2
    d = get[("drafted_nodes", "lookup:n=3", 2)]
    assert d["distribution"] == [[0, 0.25], [1, 0.25], [2, 0.5]] and d["mean"] == pytest.approx(1.25)
    assert get[("drafted_nodes", "layerskip:skip=14-17", 4)]["distribution"] == [[4, 1.0]]
    # each stratum's mean beside, only at the table's budgets
    strata = {(r["drafter"], r["P"], r["stratum"]): r for r in rows if r["statistic"] == "fixed_stratum"}
    assert strata[("lookup:n=3", 4, 0)]["mean"] == pytest.approx(0.15) and strata[("lookup:n=3", 4, 1)]["mean"] == 0.5
    assert strata[(None, 4, 1)]["positions"] == [4, 8] and ("lookup:n=3", 2, 0) not in strata
    from experiments.continuation import table

    assert "| humaneval | lookup:n=3 | 4 | 0.325 +- " in table(rows, _params())


def test_the_planner_reads_the_continuation_and_charges_the_nodes_drafted():
    from experiments import speedup
    from experiments.continuation import aggregate

    along = aggregate(_params(), _points())
    end = [{"law": LABEL, "statistic": "oracle", "P": 1, "trees": 64, "mean": 0.5, "ci95": 0.1}]
    src, where = speedup.ex_source(end, along, LABEL)
    assert src is not end and where("x").endswith("a stratum of 4 of the first 8 positions, 2 prompts")
    src, where = speedup.ex_source(end, [], LABEL)
    assert src is end and where(None) == "E[X] at the prompts' end, 64 prompts"
    nodes = speedup.drafted(along, LABEL, "lookup:n=3")
    assert nodes[2] == ((0, 0.25), (1, 0.25), (2, 0.5))
    cost = TableCost({0: 1.0, 1: 1.1, 2: 1.2, 4: 1.4})
    t = speedup.speedup_table(speedup._drafter_ex(along, LABEL, "lookup:n=3", 4), cost, drafted=nodes)
    assert t.rows[2].t_verify == pytest.approx(0.25 * 1.0 + 0.25 * 1.1 + 0.5 * 1.2)
    assert speedup.drafted(along, LABEL, "absent") is None


def test_the_loops_verify_time_comes_from_the_drafters_that_fill_their_budget():
    from brwsim.speedup import DraftCalls
    from experiments.speedup import loop_verify_cost

    def calls(name, verify, drafted):
        dc = DraftCalls(name, (1, 8), (0.5, 2.0), (None, None), (0.05, 0.2), (1.0, 4.0), (1.0, 3.0), 0.1, 3, 12,
                        verify, (None, None), drafted)  # fmt: skip
        return dc.to_dict() | {"spec": name}

    model = {"a": calls("a", (1.4, 2.0), (1.0, 8.0)), "b": calls("b", (1.6, 2.4), (1.0, 7.9))}
    lookup = {"lookup": calls("lookup", (1.1, 1.3), (0.4, 3.0))}  # drafts fewer: not a measure of t_verify(P)
    cost = loop_verify_cost(model | lookup, 0.1)
    assert cost.t_verify(0) == 0.1
    assert (cost.t_verify(1), cost.t_verify(8)) == pytest.approx((0.15, 0.22))  # the mean of a's and b's fractions
    assert loop_verify_cost(lookup, 0.1) is None and loop_verify_cost(None, 0.1) is None
    old = {k: v for k, v in model["a"].items() if k not in ("verify", "verify_ci95", "drafted")}
    assert loop_verify_cost({"a": old}, 0.1) is None  # a calibration made before the loop's verify was kept


def test_one_offset_a_stratum_seeded_per_prompt():
    from brwsim.llm.sources._prompts import Prompt
    from experiments.continuation import offsets_of

    params = dict(seed=0, span=128, strata=4)
    got = {p: offsets_of(params, Prompt("humaneval", p, "x")) for p in ("a", "b", "c", "d")}
    for offs in got.values():
        assert [k // 32 for k in offs] == [0, 1, 2, 3]  # one in each stratum of 32 positions
    assert got["a"] == offsets_of(params, Prompt("humaneval", "a", "x")) and len({tuple(o) for o in got.values()}) > 1
    assert offsets_of(params | {"seed": 1}, Prompt("humaneval", "a", "x")) != got["a"]
