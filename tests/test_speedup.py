"""Speedup and best budget (brwsim.speedup, brwsim plan): the formula and argmax on an exactly known case, the CI,
the roofline arithmetic, the cost tables and their one-line errors, the timed tree pass on a tiny model."""

from __future__ import annotations

import dataclasses
import heapq
import json
import math

import pytest
from tiny_llm import tiny_llama

import brwsim
from brwsim.cli import main
from brwsim.errors import BrwsimError
from brwsim.speedup import (
    PRESETS,
    AchievedRooflineCost,
    DraftCost,
    Hardware,
    ModelShape,
    RooflineCost,
    TableCost,
    from_llm,
    from_simulation,
    read_cost_csv,
    speedup_table,
    verify_cost,
)

PROBS = (0.6, 0.3, 0.1)
LAW = "fixed:probs=0.6/0.3/0.1"
COSTS = {0: 1.0, 1: 1.0, 2: 1.1, 4: 1.5, 8: 3.0}  # seconds per target call


def exact_ex(P: int) -> float:
    """E[X] of the optimal P-node tree of the fixed law: every tree is the same, so E[X] is the sum of the P
    largest path probabilities (best-first enumeration)."""
    heap, total = [(-1.0, ())], 0.0
    for _ in range(P + 1):  # the first pop is the root (path probability 1, not a draft token)
        negp, path = heapq.heappop(heap)
        total += -negp if path else 0.0
        for i, q in enumerate(PROBS):
            heapq.heappush(heap, (negp * q, (*path, i)))
    return total


@pytest.fixture(scope="module")
def sim():
    return brwsim.simulate(LAW, P=[1, 2, 4, 8], trees=4, seed=0, progress=False)


def test_exact_ex_matches_the_simulation(sim):
    for r in sim.results:
        assert r.stat.mean == pytest.approx(exact_ex(r.P), rel=1e-6)


def test_formula_and_argmax_known_answer(sim):
    cost = TableCost(COSTS)
    t = from_simulation(sim, cost)
    want = {P: (exact_ex(P) + 1) * COSTS[0] / COSTS[P] for P in COSTS}
    assert want[0] == 1.0
    assert [r.P for r in t.rows] == [0, 1, 2, 4, 8]
    for r in t.rows:
        assert r.speedup == pytest.approx(want[r.P], rel=1e-6)
    # by hand: 1.6/1.0, 1.96/1.1 = 1.782, 2.476/1.5 = 1.651, 3.07/3.0: the best budget is P = 2
    assert t.best.P == 2 and t.best.speedup == pytest.approx(1.96 / 1.1, rel=1e-6)
    assert not t.at_edge()
    # a draft cost of 0.5 s per drafted token moves the best to P = 1
    t2 = from_simulation(sim, cost, DraftCost(0.5, "P", "test drafter", "modelled"))
    assert t2.rows[2].t_draft == pytest.approx(1.0)
    assert t2.best.P == 1 and t2.best.speedup == pytest.approx(1.6 / 1.5)


def test_ci_is_carried_from_ex():
    cost = TableCost({0: 2.0, 4: 4.0, 16: 8.0})
    t = speedup_table([(4, 2.0, 0.3), (16, 3.0, float("nan"))], cost)
    r4, r16 = t.rows[1], t.rows[2]
    assert r4.speedup == pytest.approx(3.0 * 2 / 4) and r4.speedup_ci95 == pytest.approx(0.3 * 2 / 4)
    assert r16.speedup_ci95 == 0.0  # a one-prompt NaN CI is not spread into the table
    assert t.best.P == 4 and t.near_best() == [4]
    # the same table read back from strict JSON, where an undefined half-width is null
    t_json = speedup_table([(4, 2.0, 0.3), (16, 3.0, None)], cost)
    assert [r.speedup_ci95 for r in t_json.rows] == [r.speedup_ci95 for r in t.rows]
    wide = speedup_table([(4, 2.0, 3.0), (16, 5.0, 0.1)], cost)  # P=16: 1.5; P=4: 1.5 +- 1.5: cannot be told apart
    assert 4 in wide.near_best() and 16 in wide.near_best()
    best = {"P": 4, "speedup": 1.5, "speedup_ci95": pytest.approx(0.15), "at_edge": False, "text": "P = 4", "limit": ""}
    assert t.to_dict()["best"] == best


def test_roofline_arithmetic_by_hand():
    hw = Hardware("toy", bandwidth=1e12, flops=1e14, overhead=1e-3)
    shape = ModelShape("toy", params=1e9, layers=2, kv_heads=2, head_dim=4, attn_dim=8)
    c = RooflineCost(hw, shape, bytes_per_param=2.0, context=10)
    # P = 0: 2e9 weight bytes + 2*2*2*4 = 32 cached values x 2 bytes x 11 tokens; memory-bound
    b = c.breakdown(0)
    assert b["bytes"] == 2e9 + 32 * 2 * 11 and b["flops"] == 2e9 + 4 * 2 * 8 * 1 * 11 and b["bound"] == "memory"
    assert c.t_verify(0) == pytest.approx((2e9 + 704) / 1e12 + 1e-3, rel=1e-12)
    # P = 999: 1000 tokens, 2e12 + 4*2*8*1000*1010 FLOPs at 1e14: compute-bound
    b = c.breakdown(999)
    assert b["bound"] == "compute"
    assert c.t_verify(999) == pytest.approx((2e12 + 64 * 1000 * 1010) / 1e14 + 1e-3, rel=1e-12)
    assert c.ridge_P() == pytest.approx(99.0)  # 1e14 FLOP/s x 2 B / (2 FLOP x 1e12 B/s) - 1


def test_presets_datasheet_numbers():
    h = verify_cost("h100", params=8e9)
    assert h.t_verify(0) == pytest.approx(16e9 / 3.35e12, rel=1e-9)  # 8B bf16 weights once at 3.35 TB/s
    assert PRESETS["a100"].bandwidth == 2.039e12 and PRESETS["l4"].flops == 121e12
    c = verify_cost("custom:bw=1e11,flops=1e12,overhead=0.01", params=1e9, bytes_per_param=1)
    assert c.t_verify(0) == pytest.approx(1e9 / 1e11 + 0.01)
    assert verify_cost("h100", target="llama-8b").shape.layers == 32


@pytest.mark.parametrize(
    "hardware, params, match",
    [
        ("tpu9", 8e9, "unknown hardware 'tpu9'"),
        ("custom:bw=1e12", 8e9, "needs both bw="),
        ("custom:bw=fast,flops=1", 8e9, "is not a number"),
        ("h100", None, "needs the target's size"),
        ("h100", -1.0, "--params must be a positive"),
    ],
)
def test_bad_hardware_is_one_line(hardware, params, match):
    with pytest.raises(BrwsimError, match=match) as e:
        verify_cost(hardware, params=params)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kw, match",
    [({"context": 0}, "--context must be an integer >= 1"), ({"bytes_per_param": 0}, "--bytes-per-param must be > 0"),
     ({"overhead": -1.0}, "--overhead >= 0")],
)  # fmt: skip
def test_bad_roofline_numbers_are_one_line(kw, match):
    with pytest.raises(BrwsimError, match=match):
        verify_cost("h100", params=8e9, **kw)


@pytest.mark.parametrize(
    "text, match",
    [
        ("P,seconds\n0,0.1\n1,abc\n", ":3: cannot read"),
        ("0,0.1\n4,0.2\n2,0.3\n", ":3: the P column must increase strictly"),
        ("0,0.1\n0,0.2\n", "must increase strictly"),
        ("0,0.1,7\n", "expected two columns"),
        ("1,0.1\n2,0.2\n", "no row for P = 0"),
        ("0,-1\n", "positive number"),
        ("P,seconds\n", "has no rows"),
        ("0.5,0.1\n", "integer >= 0"),
    ],
)
def test_bad_csv_is_one_line(tmp_path, text, match):
    f = tmp_path / "cost.csv"
    f.write_text(text)
    with pytest.raises(BrwsimError, match=match) as e:
        read_cost_csv(str(f))
    assert "\n" not in str(e.value)


def test_csv_table_reads_and_interpolates(tmp_path):
    f = tmp_path / "cost.csv"
    f.write_text("P,seconds\n0,0.010\n4,0.012\n16,0.024\n")
    c = verify_cost(f"csv:{f}")
    assert c.kind == "table" and c.t_verify(4) == 0.012 and c.t_verify(10) == pytest.approx(0.018)
    with pytest.raises(BrwsimError, match="P = 17 is outside it"):
        c.t_verify(17)
    with pytest.raises(BrwsimError, match="does not exist"):
        verify_cost(f"csv:{tmp_path / 'nope.csv'}")


def test_from_llm_oracle_and_every_real_drafter():
    """A real-model run's JSON (typed back by run_from_dict): the oracle and each real drafter's tree of the builder
    fixed in advance, with its draft cost modelled from its size (or measured, when given)."""
    from brwsim.llm.results import run_from_dict

    res = [{"P": 1, "mean": 0.8, "ci95": 0.1}, {"P": 4, "mean": 2.0, "ci95": 0.2}]
    rows = [
        {"P": 1, "topq": 0.5, "topq_ci95": 0.1, "chain": 0.5, "chain_ci95": 0.1, "best_builder": "topq"},
        {"P": 4, "topq": 1.0, "topq_ci95": 0.2, "chain": 1.5, "chain_ci95": 0.2, "best_builder": "chain"},
    ]  # chain is best at P = 4 on these prompts, but topq is the builder fixed in advance and the one planned
    dr = {"name": "layerskip:skip=3-10", "prompts": 2, "builders": ["topq", "chain"], "results": rows,
          "draft_fraction": 0.2}  # fmt: skip
    look = dr | {"name": "lookup:n=3", "draft_fraction": 0.0}
    d = {"model": "m", "tasks": [{"task": "code", "prompts": 2, "results": res, "drafters": [dr, look]}]}
    run = run_from_dict(d)
    cost = TableCost({0: 1.0, 1: 1.0, 4: 1.0})
    tables = from_llm(run, cost)
    assert [t.drafter for t in tables] == ["oracle", "layerskip:skip=3-10 (topq)", "lookup:n=3 (topq)"]
    assert tables[0].best.P == 4 and tables[0].best.speedup == pytest.approx(3.0)
    # 0.2 of a decoding step per drafted token: P = 4 costs 1 + 0.8, E[X] + 1 = 2
    assert tables[1].draft.kind == "derived" and tables[1].rows[2].speedup == pytest.approx(2.0 / 1.8)
    assert tables[2].rows[2].speedup == pytest.approx(2.0)  # lookup: no model pass
    measured = from_llm(run, cost, draft_costs={"layerskip:skip=3-10": DraftCost(0.5, "P", "m", "measured")})
    assert measured[1].rows[2].speedup == pytest.approx(2.0 / 3.0)
    assert run_from_dict(run.to_dict()).to_dict() == run.to_dict()
    with pytest.raises(BrwsimError, match="no task 'prose'"):
        from_llm(run, cost, task="prose")


def test_cli_plan_json(tmp_path, capsys):
    f = tmp_path / "cost.csv"
    f.write_text("\n".join(f"{P},{s}" for P, s in COSTS.items()) + "\n")
    args = ["plan", "--law", LAW, "--hardware", f"csv:{f}", "--P", "1,2,4,8", "--trees", "4"]
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (t,) = d["tables"]
    assert t["best"]["P"] == 2 and t["best"]["speedup"] == pytest.approx(1.96 / 1.1, rel=1e-6)
    assert t["cost"]["kind"] == "table" and [r["P"] for r in t["rows"]] == [0, 1, 2, 4, 8]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "best P = 2" in out and "user table" in out
    assert main(["plan", "--law", LAW, "--hardware", "tpu9", "--params", "8e9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown hardware 'tpu9'" in err


def test_achieved_roofline_arithmetic_by_hand():
    hw = Hardware("toy", bandwidth=1e9, flops=1e12, overhead=2e-3)
    shape = ModelShape("toy", params=0.0, layers=2, kv_heads=1, head_dim=4, attn_dim=8)
    # one 100 x 200 matrix used 3 times, 4 bytes per weight: 80,000 bytes each = 80 us at 1 GB/s
    gf = {(100, 200): {1: 1e9, 3: 2e9, 5: 1e8}}  # FLOP/s at n = 1, 3, 5 rows
    af = {1: 1e6, 3: 1e6, 5: 4e6}
    c = AchievedRooflineCost(hw, shape, ((100, 200, 3),), gf, af, bytes_per_param=4.0, context=10, per_token=1e-4)
    # P = 0: 40,000 FLOPs at 1e9 is 40 us < 80 us: memory-bound. Attention: 2*2*1*4 = 16 cached values x 4 B x 11
    # tokens = 704 B (0.7 us) vs 4*2*8*1*11 = 704 FLOPs at 1e6 = 704 us: compute. Rest: 2 ms + 1 x 0.1 ms.
    b = c.breakdown(0)
    assert b["t_gemm"] == pytest.approx(3 * 80e-6) and b["t_attention"] == pytest.approx(704e-6)
    assert b["t_rest"] == pytest.approx(2.1e-3) and c.t_verify(0) == pytest.approx(3 * 80e-6 + 704e-6 + 2.1e-3)
    # P = 4: 5 rows, 200,000 FLOPs at 1e8 = 2 ms per matrix: compute-bound, the kernel's FLOP/s and not the peak
    assert c.breakdown(4)["t_gemm"] == pytest.approx(3 * 2e-3)
    # P = 1: 2 rows, FLOP/s interpolated between n = 1 and 3: 1.5e9; 80,000 FLOPs = 53.3 us < 80 us
    assert c.breakdown(1)["t_gemm"] == pytest.approx(3 * 80e-6)
    assert c.breakdown(3)["t_gemm"] == pytest.approx(3 * 160_000 / (0.5 * 2e9 + 0.5 * 1e8))
    with pytest.raises(BrwsimError, match="outside"):
        c.t_verify(5)  # 6 rows: not measured, no extrapolation
    assert c.to_dict()["gemm_flops"]["100x200"]["3"] == 2e9
    # no overlap: memory + compute, per matrix (80 + 40 us at P = 0) and for the attention (0.704 + 704 us)
    s = dataclasses.replace(c, overlap=False).breakdown(0)
    assert s["t_gemm"] == pytest.approx(3 * 120e-6) and s["t_attention"] == pytest.approx(704.704e-6)
    # the rest of the pass as measured at 1 and 5 rows: 3 rows interpolated; the line overhead + per_token n unused
    r = dataclasses.replace(c, rest={1: 5e-3, 5: 9e-3})
    assert r.breakdown(2)["t_rest"] == pytest.approx(7e-3) and r.breakdown(0)["t_rest"] == pytest.approx(5e-3)


def test_timed_tree_pass_on_a_tiny_model():
    pytest.importorskip("torch")
    from brwsim.llm.sources._hf import HFSource
    from brwsim.speedup import measure_cost, shape_of_hf
    from brwsim.speedup._timing import _tree_inputs

    src = HFSource(tiny_llama(7), None, name="tiny", threads=1)
    c = measure_cost(src, [1, 4], context=8, repeats=2)
    assert c.kind == "measured" and sorted(c.points) == [0, 1, 4]
    # the medians fitted non-decreasing in P: each fitted time lies within the range of all the repeats
    lo, hi = min(c.spread(P)[0] for P in (0, 1, 4)), max(c.spread(P)[1] for P in (0, 1, 4))
    ts = [c.t_verify(P) for P in (0, 1, 4)]
    assert 0 < lo and all(lo <= t <= hi for t in ts) and ts == sorted(ts)
    assert shape_of_hf(src.model).kv_values_per_token() == 2 * 2 * 1 * 8
    import torch

    mask, pos = _tree_inputs(torch, 4, 3, torch.float32, "cpu")  # binary heap: 0 <- 1, 2; 1 <- 3, 4
    seen = (mask[0, 0] == 0).int().tolist()
    assert seen[3] == [1, 1, 1, 1, 1, 0, 1, 0] and pos.tolist() == [[3, 4, 4, 5, 5]]
    assert math.isfinite(c.t_verify(2))


def test_cpu_achieved_on_a_tiny_model():
    torch = pytest.importorskip("torch")
    from brwsim.llm.sources._hf import HFSource
    from brwsim.speedup import cpu_achieved
    from brwsim.speedup._timing import linear_shapes

    src = HFSource(tiny_llama(7), None, name="tiny", threads=1)
    lin = torch.nn.functional.linear
    from brwsim.speedup._timing import Peaks

    peaks = Peaks(bandwidth=1e10, flops=1e11)
    c = cpu_achieved(src, [1, 4], context=8, repeats=1, peaks=peaks)
    assert torch.nn.functional.linear is lin  # the stubs are gone after the timing of the rest of the pass
    assert c.gemms == tuple(linear_shapes(src.model)) and (16, 7, 1) in c.gemms  # the LM head: 16 -> 7 tokens
    assert all(sorted(t) == [1, 2, 5] for t in c.gemm_flops.values()) and sorted(c.attn_flops) == [1, 2, 5]
    for P in (0, 1, 4):
        b = c.breakdown(P)
        assert b["t_gemm"] > 0 and b["t_attention"] > 0 and math.isfinite(c.t_verify(P))
    assert c.breakdown(0)["t_gemm"] >= sum(count * i * o * 4 for i, o, count in c.gemms) / 1e10  # never below bw


def test_cli_plan_from_saved_json(sim, tmp_path, capsys):
    f = tmp_path / "sim.json"
    f.write_text(json.dumps(sim.to_dict()))
    assert main(["plan", "--from-json", str(f), "--hardware", "custom:bw=1e12,flops=1e15", "--params", "1e9",
                 "--json"]) == 0  # fmt: skip
    (t,) = json.loads(capsys.readouterr().out)["tables"]
    # memory-bound at every P here (ridge P + 1 = 1000): t_verify is flat, so speedup = E[X] + 1 and the best is P = 8
    assert t["best"]["P"] == 8 and t["best"]["speedup"] == pytest.approx(exact_ex(8) + 1, rel=1e-6)
    assert t["best"]["at_edge"] and t["cost"]["kind"] == "modelled"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rowless = tmp_path / "rowless.json"
    rowless.write_text('{"results": [{"P": 1}]}')
    cases = ((bad, "is not JSON"), (tmp_path / "none.json", "does not exist"), (rowless, "missing key 'mean'"))
    for path, msg in cases:
        assert main(["plan", "--from-json", str(path), "--hardware", "h100", "--params", "1e9"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err


def test_cli_plan_drafter_beside_the_oracle(tmp_path, capsys):
    f = tmp_path / "cost.csv"
    f.write_text("\n".join(f"{P},{s}" for P, s in COSTS.items()) + "\n")
    args = ["plan", "--law", LAW, "--hardware", f"csv:{f}", "--P", "1,2,4", "--trees", "4", "--json"]
    assert main([*args, "--drafter", "chain", "--draft-pass-seconds", "0.5"]) == 0
    oracle, chain = json.loads(capsys.readouterr().out)["tables"]
    assert oracle["drafter"] == "oracle" and chain["drafter"] == "chain"
    # the fixed law's greedy chain of P tokens accepts 0.6 + 0.36 + ... (P terms); one 0.5 s pass per token
    for r in chain["rows"][1:]:
        ex = sum(0.6**d for d in range(1, r["P"] + 1))
        assert r["ex"] == pytest.approx(ex, rel=1e-6) and r["t_draft"] == pytest.approx(0.5 * r["P"])
        assert r["speedup"] == pytest.approx((ex + 1) / (COSTS[r["P"]] + 0.5 * r["P"]), rel=1e-6)
    assert chain["best"]["P"] == 1 and oracle["best"]["P"] == 2


def test_cli_plan_from_json_of_a_real_model_run_with_drafters(tmp_path, capsys):
    """``brwsim plan --from-json`` of a ``brwsim llm --json`` output plans the oracle and every real drafter."""
    rows = [{"P": P, "topq": m, "topq_ci95": 0.1, "best_builder": "topq"} for P, m in ((1, 0.5), (2, 0.8))]
    dr = {"name": "lowbit:bits=4", "prompts": 2, "builders": ["topq"], "results": rows, "draft_fraction": 0.125}
    res = [{"P": 1, "mean": 0.8, "ci95": 0.1}, {"P": 2, "mean": 1.2, "ci95": 0.2}]
    run = {"model": "m", "vocab_size": 9, "tasks": [{"task": "code", "prompts": 2, "results": res, "drafters": [dr]}]}
    f, cost = tmp_path / "run.json", tmp_path / "cost.csv"
    f.write_text(json.dumps(run))
    cost.write_text("0,1.0\n1,1.0\n2,1.0\n")
    assert main(["plan", "--from-json", str(f), "--hardware", f"csv:{cost}", "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert [t["drafter"] for t in tables] == ["oracle", "lowbit:bits=4 (topq)"]
    row = tables[1]["rows"][2]  # P = 2: (0.8 + 1) / (1 + 2 x 0.125)
    assert row["t_draft"] == pytest.approx(0.25) and row["speedup"] == pytest.approx(1.8 / 1.25)
