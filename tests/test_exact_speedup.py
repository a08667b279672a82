"""The speedup planner against hand arithmetic: interpolated costs, the best budget's tie rule, the near-best set;
the roofline and the achieved roofline on made-up hardware and shapes; cost tables, the non-decreasing fit against
brute force, the best budget set by enumerating a two-prompt bootstrap; timing driven by a clock the test controls."""

from __future__ import annotations

import dataclasses
import io
import itertools
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats

from brwsim._stats import CONVENTION
from brwsim.cli._plan import print_plan
from brwsim.errors import BrwsimError
from brwsim.llm.drafters import examples as drafter_examples
from brwsim.llm.sources import MODELS, PROMPT_SETS
from brwsim.speedup import (
    DEFAULT_P,
    MEANING,
    MEASURED,
    MODEL_PRESETS,
    ORACLE,
    PRESETS,
    AchievedRooflineCost,
    DraftCost,
    Hardware,
    ModelShape,
    RooflineCost,
    SpeedupRow,
    SpeedupTable,
    TableCost,
    VerifyCost,
    _costs,
    _sources,
    _timing,
    best_P_set,
    cpu_achieved,
    cpu_roofline,
    drafter_names,
    from_llm,
    from_simulation,
    hardware_names,
    isotonic_fit,
    measure_cost,
    measure_draft_cost,
    measured_cost,
    model_names,
    model_shape,
    modelled_draft_cost,
    parse_custom,
    preset,
    prompt_names,
    read_cost_csv,
    shape_of_hf,
    speedup_table,
    target_names,
    verify_cost,
)
from brwsim.speedup._names import HARDWARE_FORMS
from brwsim.speedup._timing import Peaks

try:  # imported at collection, so that a test process forked after collection has it loaded
    import torch

    _LINEAR = torch.nn.functional.linear
except ImportError:  # the llm extra is not installed: the timing tests skip
    torch = _LINEAR = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch (the llm extra)")


def _whole(msg):
    """A pattern for exactly this message (a changed word anywhere in it, or text added at either end, fails)."""
    return "^" + re.escape(msg) + "$"


COST = TableCost({0: 1.0, 4: 1.5, 8: 2.0})  # t_verify(2) = 1.25 by linear interpolation


def test_table_cost_interpolates_and_refuses_outside():
    assert [COST.t_verify(P) for P in (0, 1, 2, 4, 6, 8)] == pytest.approx([1.0, 1.125, 1.25, 1.5, 1.75, 2.0])
    with pytest.raises(BrwsimError):
        COST.t_verify(9)
    with pytest.raises(BrwsimError):
        TableCost({1: 1.0})  # no P = 0 row
    with pytest.raises(BrwsimError):
        TableCost({0: 1.0, 2: -1.0})


def test_measured_cost_is_the_median_with_its_range():
    c = measured_cost({0: [3.0, 1.0, 2.0], 4: [5.0, 4.0]}, "here")
    assert c.t_verify(0) == 2.0 and c.t_verify(4) == 4.5 and c.t_verify(2) == pytest.approx(3.25)
    assert c.spread(0) == (1.0, 3.0) and c.spread(2) is None and c.kind == "measured"


def test_speedup_rows_by_hand():
    t = speedup_table([(4, 2.0, 0.2), (8, 2.5, 0.3), (2, 1.0, 0.1)], COST)
    assert [r.P for r in t.rows] == [0, 2, 4, 8]
    # (E[X] + 1) t(0) / t(P): 1, 2 / 1.25, 3 / 1.5, 3.5 / 2; the CI scales by the same ratio
    assert [r.speedup for r in t.rows] == pytest.approx([1.0, 1.6, 2.0, 1.75])
    assert [r.speedup_ci95 for r in t.rows] == pytest.approx([0.0, 0.08, 0.2 / 1.5, 0.15])
    assert t.best.P == 4 and not t.at_edge()
    # the best's CI reaches down to 2 - 0.1333 = 1.8667: P = 8 (up to 1.9) is near it, P = 2 (1.68) is not
    assert t.near_best() == [4, 8]
    d = t.to_dict()
    assert d["best"]["P"] == 4 and d["near_best_P"] == [4, 8] and d["best"]["at_edge"] is False
    assert t.recommended() == 4 and d["recommended_P"] == 4


def test_the_recommended_budget_is_plain_decoding_when_the_best_is_not_told_apart_from_it():
    flat = TableCost({0: 1.0, 4: 1.0, 8: 1.0, 16: 1.0})
    # speedups 1, 1.3 +- 0.31, 1.5 +- 0.5, 1.2 +- 0.1: the best (P = 8) reaches down to 1.0, plain decoding's exact 1
    t = speedup_table([(4, 0.3, 0.31), (8, 0.5, 0.5), (16, 0.2, 0.1)], flat)
    assert t.best.P == 8 and t.near_best() == [0, 4, 8, 16] and t.recommended() == 0
    out = io.StringIO()
    print_plan([t], out)
    assert "best P = 8" in out.getvalue() and "recommended P = 0 (plain decoding is within" in out.getvalue()
    # a narrower interval (down to 1.4) excludes 1; P = 4's interval reaches it (1.61) but its estimate, 1.3, does
    # not: the best itself is the recommendation
    t = speedup_table([(4, 0.3, 0.31), (8, 0.5, 0.1), (16, 0.2, 0.1)], flat)
    assert t.near_best() == [4, 8] and t.recommended() == 8
    # the estimate, not the interval, against the best's interval: P = 2 is a slowdown (0.9 +- 0.3) whose interval
    # reaches the best's (1.5 +- 0.4, down to 1.1); P = 4 (1.2 +- 0.05) is the cheapest estimate within it
    cost = TableCost({0: 1.0, 2: 1.5, 4: 1.0, 8: 1.0})
    t = speedup_table([(2, 0.35, 0.45), (4, 0.2, 0.05), (8, 0.5, 0.4)], cost)
    assert [r.speedup for r in t.rows] == pytest.approx([1.0, 0.9, 1.2, 1.5])
    assert t.near_best() == [2, 4, 8] and t.recommended() == 4
    out = io.StringIO()
    print_plan([t], out)
    assert "recommended P = 4 (the smallest budget" in out.getvalue()


def test_a_drafter_that_drafts_fewer_nodes_is_charged_the_verifier_at_those_nodes():
    # at P = 4 half the calls draft 2 nodes and half 4: t = (t(2) + t(4)) / 2 = (1.25 + 1.5) / 2; at P = 8 a
    # single count of 3 nodes: t(3) interpolated, 1.375; P = 2 is not in the map: t(2)
    drafted = {4: ((2, 0.5), (4, 0.5)), 8: ((3, 1.0),)}
    t = speedup_table([(2, 1.0, 0.1), (4, 2.0, 0.2), (8, 2.5, 0.3)], COST, drafted=drafted)
    assert [r.t_verify for r in t.rows] == pytest.approx([1.0, 1.25, 1.375, 1.375])
    assert [r.speedup for r in t.rows] == pytest.approx([1.0, 2 / 1.25, 3 / 1.375, 3.5 / 1.375])
    for bad in ({4: ((5, 1.0),)}, {4: ((2, -1.0), (4, 2.0))}, {4: ((2, 0.0),)}):
        with pytest.raises(BrwsimError, match="nodes drafted at P = 4"):
            speedup_table([(4, 2.0, 0.2)], COST, drafted=bad)


def test_ties_go_to_the_smaller_budget_and_touching_intervals_are_near():
    flat = TableCost({0: 1.0, 2: 1.0, 4: 1.0, 8: 1.0})
    t = speedup_table([(2, 1.0, 0.25), (4, 1.5, 0.25), (8, 1.5, 0.25)], flat)
    assert t.best.P == 4  # speedups 2, 2.5, 2.5: the smaller of the tied budgets
    assert not t.at_edge()
    assert t.near_best() == [2, 4, 8]  # 2 + 0.25 == 2.5 - 0.25: intervals that touch count as near
    t = speedup_table([(2, 1.0, 0.25), (4, 1.5, 0.25)], flat)
    assert t.best.P == 4 and t.at_edge()


def test_no_gain_keeps_plain_decoding():
    t = speedup_table([(4, 0.2, 0.0)], COST)  # 1.2 / 1.5 = 0.8 < 1
    assert t.best.P == 0 and not t.at_edge() and t.near_best() == [0]


def test_nan_ci_counts_as_zero_and_bad_budgets_are_refused():
    t = speedup_table([(4, 2.0, math.nan)], COST)
    assert t.rows[1].speedup_ci95 == 0.0 and t.rows[1].ex_ci95 == 0.0
    with pytest.raises(BrwsimError):
        speedup_table([], COST)
    with pytest.raises(BrwsimError):
        speedup_table([(0, 1.0, 0.1)], COST)


def test_draft_cost_passes():
    per_token = DraftCost(t_pass=0.1)
    per_tree = DraftCost(t_pass=0.1, passes=3)
    assert per_token.t_draft(0) == 0 and per_token.t_draft(4) == pytest.approx(0.4)
    assert per_tree.t_draft(0) == 0 and per_tree.t_draft(8) == pytest.approx(0.3)
    t = speedup_table([(4, 2.0, 0.2)], COST, per_token)
    assert t.rows[1].t_draft == pytest.approx(0.4) and t.rows[1].speedup == pytest.approx(3.0 / 1.9)
    d = DraftCost(0.25)  # a quarter of the step per drafted token
    assert d.t_draft(0) == 0 and d.t_draft(4) == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------------------
# Hardware and target shapes


def test_parse_custom_reads_the_three_numbers_and_refuses_the_rest():
    hw = parse_custom("custom: bw=100 , flops=1e3,,overhead=0.5")
    assert hw == Hardware("custom", 100.0, 1000.0, 0.5, "user")
    assert parse_custom("custom:flops=2,bw=3") == Hardware("custom", 3.0, 2.0, 0.0, "user")
    assert parse_custom("custom:bw=3,flops=2,overhead=0").overhead == 0.0  # a zero overhead is allowed
    assert hw.to_dict() == {"name": "custom", "bandwidth": 100.0, "flops": 1000.0, "overhead": 0.5, "source": "user"}
    for text, msg in [
        ("custom:bw=1,flops=2,speed=3", "expected custom:bw=BYTES_PER_S,flops=FLOP_PER_S"),
        ("custom:bw=1,flops", "expected custom:bw=BYTES_PER_S,flops=FLOP_PER_S"),
        ("custom:bw=1,flops=fast", "flops='fast' is not a number"),
        ("custom:bw=1:2,flops=3", "bw='1:2' is not a number"),
        ("custom:bw=1=2,flops=3", "bw='1=2' is not a number"),
        ("custom:bw=1", "custom needs both bw= (bytes/s) and flops= (FLOP/s)"),
        ("custom:flops=1", "custom needs both bw="),
        ("custom", "custom needs both bw="),
        ("custom:bw=0,flops=1", "bw must be a finite number > 0, got 0"),
        ("custom:bw=1,flops=inf", "flops must be a finite number > 0, got inf"),
        ("custom:bw=1,flops=-2", "flops must be a finite number > 0, got -2"),
        ("custom:bw=1,flops=2,overhead=-1", "overhead must be a finite number >= 0, got -1"),
        ("custom:bw=1,flops=2,overhead=nan", "overhead must be a finite number >= 0"),
    ]:
        with pytest.raises(BrwsimError, match=re.escape(f"bad hardware {text!r}: {msg}")):
            parse_custom(text)


def test_preset_names_and_unknown_hardware():
    assert preset("h100") is PRESETS["h100"] and preset("l4").bandwidth == 300e9
    msg = (
        "unknown hardware 'tpu'; use one of h100, h200, a100, l4, cpu-measured, cpu-roofline, cpu-achieved, "
        "csv:FILE or custom:bw=BYTES_PER_S,flops=FLOP_PER_S"
    )
    with pytest.raises(BrwsimError, match=_whole(msg)):
        preset("tpu")
    assert hardware_names().split(", ") == [*PRESETS, *MEASURED, "csv:FILE", HARDWARE_FORMS[1]]
    assert target_names() == "llama-1b, llama-8b, llama-70b"


def test_model_shape_kv_values_and_presets():
    s = ModelShape("toy", 10.0, layers=2, kv_heads=3, head_dim=5, attn_dim=4)
    assert s.kv_values_per_token() == 60  # keys and values (2) x 2 layers x 3 heads x 5 numbers
    assert s.to_dict() == {"name": "toy", "params": 10.0, "layers": 2, "kv_heads": 3, "head_dim": 5, "attn_dim": 4}
    assert model_shape("llama-8b") is MODEL_PRESETS["llama-8b"]
    assert model_shape("llama-8b", 7e9) == dataclasses.replace(MODEL_PRESETS["llama-8b"], params=7e9)
    bare = model_shape(params=8e9)
    assert bare == ModelShape("8e+09 params", 8e9) and bare.kv_values_per_token() == 0
    assert isinstance(model_shape(params=5).params, float) and isinstance(model_shape("llama-1b", 5).params, float)
    with pytest.raises(BrwsimError, match=re.escape("unknown target model shape 'gpt'; use one of llama-1b, ")):
        model_shape("gpt")
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(BrwsimError, match=re.escape("--params must be a positive parameter count, e.g. 8e9; got")):
            model_shape("llama-1b", bad)
    msg = "the roofline needs the target's size: give --params N (e.g. 8e9) or --target llama-8b"
    with pytest.raises(BrwsimError, match=_whole(msg)):
        model_shape()


class _Param:
    def __init__(self, n, size=4):
        self.n, self.size = n, size

    def numel(self):
        return self.n

    def element_size(self):
        return self.size


def _fake_hf(cfg, params=(10, 20, 30), size=4):
    return SimpleNamespace(config=cfg, parameters=lambda: iter([_Param(n, size) for n in params]))


def test_shape_of_hf_reads_the_config():
    cfg = SimpleNamespace(num_attention_heads=4, hidden_size=32, num_hidden_layers=3)
    # no head_dim, no KV heads: head size = 32 / 4, KV heads = attention heads
    assert shape_of_hf(_fake_hf(cfg), "m") == ModelShape("m", 60.0, 3, 4, 8, 32)
    cfg = SimpleNamespace(
        num_attention_heads=4, hidden_size=32, num_hidden_layers=3, head_dim=16, num_key_value_heads=2, text_config=None
    )
    s = shape_of_hf(_fake_hf(cfg))
    assert s == ModelShape("hf", 60.0, 3, 2, 16, 64) and isinstance(s.params, float)
    inner = SimpleNamespace(
        num_attention_heads=2, hidden_size=6, num_hidden_layers=1, head_dim=None, num_key_value_heads=None
    )
    s = shape_of_hf(_fake_hf(SimpleNamespace(text_config=inner, num_attention_heads=99)), "vl")
    assert s == ModelShape("vl", 60.0, 1, 2, 3, 6)  # a multimodal config: the text model's numbers


# ---------------------------------------------------------------------------------------------------------------
# The roofline: max(bytes / bandwidth, FLOPs / peak) + overhead, by hand

HW = Hardware("toy-hw", 100.0, 1000.0, 0.5)
SHAPE = ModelShape("toy", 10.0, layers=2, kv_heads=1, head_dim=3, attn_dim=4)  # 12 cached values per token


def test_roofline_breakdown_by_hand():
    r = RooflineCost(HW, SHAPE, 2.0, context=5)
    # P = 0, one query token: bytes 10 x 2 + 12 x 2 x (5 + 1) = 164; FLOPs 2 x 10 + 4 x 2 x 4 x 1 x 6 = 212
    assert r.breakdown(0) == {
        "bytes": 164.0,
        "flops": 212.0,
        "t_memory": pytest.approx(1.64),
        "t_compute": pytest.approx(0.212),
        "bound": "memory",
        "overhead": 0.5,
    }
    assert r.t_verify(0) == pytest.approx(1.64 + 0.5)
    # P = 9, ten tokens: bytes 20 + 24 x 15 = 380; FLOPs 2 x 10 x 10 + 32 x 10 x 15 = 5000: compute-bound
    b = r.breakdown(9)
    assert (b["bytes"], b["flops"], b["bound"]) == (380.0, 5000.0, "compute")
    assert r.t_verify(9) == pytest.approx(5.0 + 0.5)
    # one byte per cached value: the KV part of the bytes halves
    assert RooflineCost(HW, SHAPE, 2.0, context=5, kv_bytes=1.0).breakdown(0)["bytes"] == 20.0 + 12 * 6
    assert RooflineCost(HW, SHAPE, 2.0, context=5, kv_bytes=1.0).t_verify(0) == pytest.approx(0.92 + 0.5)


def test_roofline_ridge_is_where_compute_meets_memory():
    bare = ModelShape("bare", 10.0)  # weights only: bytes 20, FLOPs 20 (P + 1)
    r = RooflineCost(Hardware("hw", 100.0, 1000.0), bare, 2.0)
    assert r.ridge_P() == 9.0  # 1000 x 2 / (2 x 100) - 1
    at = r.breakdown(9)
    assert at["t_memory"] == at["t_compute"] == pytest.approx(0.2) and at["bound"] == "memory"  # a tie is memory
    assert r.breakdown(8)["bound"] == "memory" and r.breakdown(10)["bound"] == "compute"
    assert r.t_verify(19) == pytest.approx(0.4)  # 400 FLOPs / 1000
    assert RooflineCost(Hardware("hw", 100.0, 1000.0), bare, 4.0).ridge_P() == 19.0


def test_roofline_label_and_dict():
    r = RooflineCost(HW, SHAPE, 2.0, context=5)
    assert r.label == "roofline toy-hw, toy, 2 B/param, L=5"
    bare = RooflineCost(HW, ModelShape("bare", 1.0), 0.5, context=7)
    assert bare.label == (
        "roofline toy-hw, bare, 0.5 B/param, L=7; KV cache and attention not counted (give a --target shape)"
    )
    free = RooflineCost(Hardware("free-hw", 100.0, 1000.0), SHAPE, 2.0, context=5)  # no overhead: said so
    assert free.label == "roofline free-hw, toy, 2 B/param, L=5; no per-call overhead assumed (--overhead S adds one)"
    assert r.to_dict() == {
        "kind": "modelled",
        "label": r.label,
        "hardware": HW.to_dict(),
        "shape": SHAPE.to_dict(),
        "bytes_per_param": 2.0,
        "context": 5,
        "kv_bytes": 2.0,
    }
    assert RooflineCost(HW, SHAPE, 2.0, kv_bytes=1.0).to_dict()["kv_bytes"] == 1.0
    assert VerifyCost().to_dict() == {"kind": "modelled", "label": ""} and VerifyCost().spread(3) is None
    with pytest.raises(NotImplementedError):
        VerifyCost().t_verify(0)


# ---------------------------------------------------------------------------------------------------------------
# The achieved roofline: per operation, the measured kernel FLOP/s, by hand

ASHAPE = ModelShape("toy", 100.0, layers=1, kv_heads=1, head_dim=2, attn_dim=2)  # 4 cached values per token
GEMMS = ((2, 3, 2), (4, 1, 1), (5, 2, 1))
GFLOPS = {(2, 3): {1: 6.0, 3: 18.0}, (4, 1): {1: 8.0, 3: 8.0}, (5, 2): {1: 100.0, 3: 100.0}}
AFLOPS = {1: 4.0, 3: 12.0}


def _achieved(**kw):
    args = {"bytes_per_param": 1.0, "context": 3, "per_token": 0.5} | kw
    return AchievedRooflineCost(Hardware("hw", 10.0, 1e9, 0.25), ASHAPE, GEMMS, GFLOPS, AFLOPS, **args)


def test_achieved_roofline_by_hand():
    c = _achieved()
    # P = 0 (n = 1): 2x3 twice: max(6/10, 2 x 6 / 6) = 2 each; 4x1: max(0.4, 8/8) = 1; 5x2: max(10/10, 20/100) = 1
    # attention: max(4 x 1 x (3 + 1) / 10, 4 x 1 x 2 x 1 x 4 / 4) = max(1.6, 8); rest: 0.25 + 0.5 x 1
    assert c.breakdown(0) == pytest.approx({"t_gemm": 6.0, "t_attention": 8.0, "t_rest": 0.75})
    assert c.t_verify(0) == pytest.approx(14.75)
    # P = 1 (n = 2), FLOP/s interpolated half way: 2x3: max(0.6, 24/12) x 2; 4x1: max(0.4, 16/8); 5x2: max(1, 0.4)
    # attention: max(4 x 5 / 10, 4 x 2 x 2 x 5 / 8); rest 0.25 + 0.5 x 2
    assert c.breakdown(1) == pytest.approx({"t_gemm": 7.0, "t_attention": 10.0, "t_rest": 1.25})
    assert c.t_verify(1) == pytest.approx(18.25)
    # no overlap: memory + compute per operation
    s = _achieved(overlap=False)
    assert s.breakdown(0) == pytest.approx({"t_gemm": 2 * 2.6 + 1.4 + 1.2, "t_attention": 9.6, "t_rest": 0.75})
    assert s.breakdown(1) == pytest.approx({"t_gemm": 2 * 2.6 + 2.4 + 1.4, "t_attention": 12.0, "t_rest": 1.25})
    # a measured rest of the pass replaces overhead + per_token n, interpolated between row counts
    m = _achieved(rest={1: 0.5, 3: 1.5})
    assert m.breakdown(0)["t_rest"] == 0.5 and m.breakdown(1)["t_rest"] == pytest.approx(1.0)
    assert m.t_verify(2) == pytest.approx(m.breakdown(2)["t_gemm"] + m.breakdown(2)["t_attention"] + 1.5)
    assert m.breakdown(2)["t_gemm"] == pytest.approx(2 * max(0.6, 36 / 18) + max(0.4, 24 / 8) + max(1.0, 0.6))


def test_achieved_roofline_two_layers_two_bytes():
    shape = ModelShape("two", 1.0, layers=2, kv_heads=1, head_dim=2, attn_dim=2)  # 8 cached values per token
    c = AchievedRooflineCost(
        Hardware("hw", 10.0, 1.0, 0.25),
        shape,
        ((2, 3, 1),),
        {(2, 3): {1: 6.0}},
        {1: 8.0},
        bytes_per_param=2.0,
        context=3,
        per_token=0.5,
        overlap=False,
    )
    # one 2x3 matrix: 2 x 3 x 2 bytes / 10 + 2 x 1 x 6 FLOPs / 6; the attention: 8 x 2 x (3 + 1) bytes / 10
    # + 4 x 2 layers x 2 x 1 x 4 FLOPs / 8; the rest 0.25 + 0.5
    assert c.breakdown(0) == pytest.approx({"t_gemm": 1.2 + 2.0, "t_attention": 6.4 + 8.0, "t_rest": 0.75})


def test_interp_between_measured_row_counts():
    table = {1: 1.0, 2: 2.0, 4: 8.0}
    assert [_costs._interp(table, n, "x") for n in (1, 2, 3, 4)] == [1.0, 2.0, 5.0, 8.0]
    with pytest.raises(BrwsimError, match=_whole("x was measured for 1 .. 4 rows; 5 rows is outside: measure it")):
        _costs._interp(table, 5, "x")
    with pytest.raises(BrwsimError, match=_whole("x was measured for 1 .. 4 rows; 0 rows is outside: measure it")):
        _costs._interp(table, 0, "x")


def test_achieved_roofline_refuses_row_counts_it_did_not_measure():
    with pytest.raises(BrwsimError, match=re.escape("the 2x3 matrix product was measured for 1 .. 3 rows; 4 rows")):
        _achieved().t_verify(3)
    bad = AchievedRooflineCost(
        Hardware("hw", 10.0, 1.0), ASHAPE, ((2, 3, 1),), {(2, 3): {1: 6.0, 5: 6.0}}, {1: 4.0, 3: 4.0}, context=3
    )
    with pytest.raises(
        BrwsimError, match="^" + re.escape("the attention was measured for 1 .. 3 rows; 4 rows is outside")
    ):
        bad.t_verify(3)
    bad = _achieved(rest={2: 1.0, 3: 1.0})
    with pytest.raises(BrwsimError, match="^" + re.escape("the rest of the pass was measured for 2 .. 3 rows; 1 rows")):
        bad.t_verify(0)


def test_achieved_roofline_label_and_dict():
    c = _achieved(rest={1: 0.5, 3: 1.5})
    assert c.label == (
        "achieved roofline hw, toy, 1 B/param, L=3 (measured kernel FLOP/s per shape, not the peak; "
        "max(memory, compute) per operation)"
    )
    assert _achieved(overlap=False).label.endswith("; memory + compute per operation)")
    assert c.to_dict() == {
        "kind": "modelled",
        "label": c.label,
        "hardware": {"name": "hw", "bandwidth": 10.0, "flops": 1e9, "overhead": 0.25, "source": "user"},
        "shape": ASHAPE.to_dict(),
        "gemms": [[2, 3, 2], [4, 1, 1], [5, 2, 1]],
        "gemm_flops": {"2x3": {"1": 6.0, "3": 18.0}, "4x1": {"1": 8.0, "3": 8.0}, "5x2": {"1": 100.0, "3": 100.0}},
        "attn_flops": {"1": 4.0, "3": 12.0},
        "bytes_per_param": 1.0,
        "context": 3,
        "per_token": 0.5,
        "overlap": True,
        "rest": {"1": 0.5, "3": 1.5},
    }
    assert _achieved().to_dict()["rest"] is None


# ---------------------------------------------------------------------------------------------------------------
# Tables: a user's CSV, a measured table and its non-decreasing fit


def test_table_cost_edges_messages_and_dict():
    c = TableCost({0: 1.0, 2: 2.0, 10: 6.0}, label="t")
    assert c.t_verify(2) == 2.0 and isinstance(c.t_verify(0), float) and c.t_verify(6) == pytest.approx(4.0)
    assert c.t_verify(3) == pytest.approx(2.5) and c.t_verify(1) == pytest.approx(1.5)
    with pytest.raises(BrwsimError, match=re.escape("cost table 't' covers P = 0 .. 10; P = 11 is outside it")):
        c.t_verify(11)
    with pytest.raises(BrwsimError, match=re.escape("cost table 't' covers P = 0 .. 10; P = -1 is outside it")):
        c.t_verify(-1)
    with pytest.raises(BrwsimError, match=re.escape("cost table 'u' has no row for P = 0 (one plain decoding step)")):
        TableCost({1: 1.0}, label="u")
    for bad in (0.0, math.inf, math.nan, -1.0):
        with pytest.raises(BrwsimError, match=re.escape("cost table 'user table': seconds must be positive numbers")):
            TableCost({0: 1.0, 3: bad})
    assert c.to_dict() == {"kind": "table", "label": "t", "points": {"0": 1.0, "2": 2.0, "10": 6.0}}
    m = TableCost({4: 2.0, 0: 1.0}, kind="measured", label="m", spreads={4: (1.5, 2.5), 0: (1.0, 1.0)})
    assert m.to_dict() == {
        "kind": "measured",
        "label": "m",
        "points": {"0": 1.0, "4": 2.0},
        "spreads": {"0": [1.0, 1.0], "4": [1.5, 2.5]},
    }
    assert m.spread(4) == (1.5, 2.5) and m.spread(2) is None and c.spread(0) is None


def _brute_isotonic(values, weights):
    """The least-squares non-decreasing fit by brute force: every split into consecutive blocks, each at its
    weighted mean; the non-decreasing candidate of least weighted squared error."""
    n, best = len(values), None
    for cuts in itertools.product([False, True], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        fit = []
        for a, b in itertools.pairwise(bounds):
            m = sum(values[i] * weights[i] for i in range(a, b)) / sum(weights[a:b])
            fit += [m] * (b - a)
        if all(x <= y + 1e-12 for x, y in itertools.pairwise(fit)):
            err = sum(w * (v - f) ** 2 for v, w, f in zip(values, weights, fit, strict=True))
            if best is None or err < best[0] - 1e-12:
                best = (err, fit)
    return best[1]


def test_isotonic_fit_by_hand_and_against_brute_force():
    assert isotonic_fit([1, 3, 2, 4]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic_fit([3, 2, 1]) == [2.0, 2.0, 2.0]  # a violation that cascades back to the start
    assert isotonic_fit([1, 3, 2], [1, 1, 3]) == [1.0, 2.25, 2.25]  # (3 x 1 + 2 x 3) / 4
    assert isotonic_fit([2, 2, 1, 5]) == pytest.approx([5 / 3, 5 / 3, 5 / 3, 5.0])
    assert isotonic_fit([1.0, 1.0, 2.0]) == [1.0, 1.0, 2.0] and isotonic_fit([]) == []
    # equal neighbours are already non-decreasing: left as they are, bit for bit (pooling 0.1 weighted 1 and 2 would
    # give (0.1 + 0.2) / 3 = 0.10000000000000002)
    assert isotonic_fit([0.1, 0.1], [1, 2]) == [0.1, 0.1]
    with pytest.raises(ValueError):
        isotonic_fit([1, 2], [1])
    cases = [
        ([4, 1, 3, 2, 5, 0], [1, 2, 1, 3, 1, 1]),
        ([0, 5, 4, 3, 6, 6], [2, 1, 1, 1, 4, 1]),
        ([2, 1, 1, 3, 0, 4], [1, 1, 1, 1, 1, 1]),
        ([5, 4, 3, 2, 1, 0], [1, 2, 3, 4, 5, 6]),
    ]
    for v, w in cases:
        assert isotonic_fit(v, w) == pytest.approx(_brute_isotonic(v, w), rel=1e-12)


def test_measured_cost_fits_medians_non_decreasing():
    times = {0: [1.0, 1.0, 1.0], 2: [3.0, 3.0, 3.0], 4: [2.0], 8: [4.0, 5.0]}
    c = measured_cost(times, "here")
    # medians 1, 3, 2, 4.5 weighted 3, 3, 1, 2: P = 2 and 4 pool to (3 x 3 + 2) / 4
    assert [c.t_verify(P) for P in (0, 2, 4, 8)] == pytest.approx([1.0, 2.75, 2.75, 4.5])
    assert c.label == "here, isotonic fit in P" and c.kind == "measured" and c.spread(8) == (4.0, 5.0)
    raw = measured_cost(times, "raw", isotonic=False)
    assert [raw.t_verify(P) for P in (0, 2, 4, 8)] == [1.0, 3.0, 2.0, 4.5] and raw.label == "raw"
    assert raw.spreads == {0: (1.0, 1.0), 2: (3.0, 3.0), 4: (2.0, 2.0), 8: (4.0, 5.0)}


def _csv(tmp_path, text, name="c.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_read_cost_csv_reads_rows_and_header(tmp_path):
    path = _csv(tmp_path, "P , seconds\n\n0, 0.5\n 4 ,1.5\n,\n8,2.5\n")
    c = read_cost_csv(path)
    assert dict(c.points) == {0: 0.5, 4: 1.5, 8: 2.5} and c.kind == "table" and c.label == f"csv:{path}"
    assert read_cost_csv(_csv(tmp_path, "0,1\n2.0,3\n")).points == {0: 1.0, 2: 3.0}  # no header; P = 2.0 is 2


def test_read_cost_csv_refuses_bad_files(tmp_path):
    with pytest.raises(BrwsimError, match=re.escape("cost table 'nowhere.csv' does not exist (expected a CSV file")):
        read_cost_csv("nowhere.csv")
    with pytest.raises(BrwsimError, match="does not exist"):
        read_cost_csv(str(tmp_path))  # a directory
    b = tmp_path / "b.csv"
    b.write_bytes(b"0,\xff\xfe\n")
    with pytest.raises(BrwsimError, match=re.escape(f"cost table {str(b)!r} is not a readable CSV file: ")):
        read_cost_csv(str(b))
    for text, msg in [
        ("P,s\n", "has no rows; expected lines 'P,seconds' starting at P = 0"),
        ("", "has no rows"),
        ("0,1\n2,1\n2,3\n", ":3: the P column must increase strictly, but P = 2 follows P = 2"),
        ("P,s\n0,1\n4,1\n3,3\n", ":4: the P column must increase strictly, but P = 3 follows P = 4"),
        ("0,1\n1,2,3\n", ":2: expected two columns 'P,seconds', got 3: '1,2,3'"),
        ("0\n", ":1: expected two columns 'P,seconds', got 1: '0'"),
        ("0,1\n 1 , fast \n", ":2: cannot read '1,fast' as 'P,seconds' (two numbers)"),
        ("0,1\n 1.5 ,2\n", ":2: P must be an integer >= 0, got '1.5'"),
        ("-1,1\n", ":1: P must be an integer >= 0, got '-1'"),
        ("0,0\n", ":1: seconds must be a positive number, got '0'"),
        ("0,1\n1,inf\n", ":2: seconds must be a positive number, got 'inf'"),
        ("0, -2 \n", ":1: seconds must be a positive number, got '-2'"),
    ]:
        path = _csv(tmp_path, text)
        with pytest.raises(BrwsimError, match=re.escape(msg)) as e:
            read_cost_csv(path)
        assert path in str(e.value)
    assert read_cost_csv(_csv(tmp_path, "0,1\n")).points == {0: 1.0}  # P = 0 after last = -1


# ---------------------------------------------------------------------------------------------------------------
# The speedup table: to_dict, the sources of E[X], the modelled draft cost


def test_speedup_table_dict_and_null_half_widths():
    cost = TableCost({0: 1.0, 4: 1.5, 8: 2.0}, kind="measured", label="m", spreads={0: (0.9, 1.1), 4: (1.4, 1.6)})
    t = speedup_table([(8, 2.5, None), (4, 2.0, 0.3)], cost, DraftCost(0.25, 1), drafter="d", source="s")
    assert (t.drafter, t.source, t.cost, t.draft) == ("d", "s", cost, DraftCost(0.25, 1))
    # one draft pass per tree: 3 / (1.5 + 0.25), 3.5 / (2 + 0.25); a null half-width is 0
    assert [r.speedup for r in t.rows] == pytest.approx([1.0, 3 / 1.75, 3.5 / 2.25])
    assert [r.speedup_ci95 for r in t.rows] == pytest.approx([0.0, 0.3 / 1.75, 0.0])
    assert [r.spread for r in t.rows] == [(0.9, 1.1), (1.4, 1.6), None]
    assert t.rows[0] == SpeedupRow(0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, (0.9, 1.1))
    assert t.rows[1].to_dict() == {
        "P": 4,
        "ex": 2.0,
        "ex_ci95": 0.3,
        "t_verify": 1.5,
        "t_draft": 0.25,
        "speedup": pytest.approx(3 / 1.75),
        "speedup_ci95": pytest.approx(0.3 / 1.75),
        "spread": [1.4, 1.6],
    }
    assert t.rows[2].to_dict()["spread"] is None
    d = t.to_dict()
    assert d["drafter"] == "d" and d["source"] == "s" and d["convention"] == CONVENTION and d["meaning"] == MEANING
    assert d["ci95_covers"] == "the Monte Carlo error of E[X] only (times taken as exact; measured spread beside)"
    assert d["cost"] == cost.to_dict() and d["draft_cost"] == DraftCost(0.25, 1).to_dict()
    assert d["rows"] == [r.to_dict() for r in t.rows]
    assert d["best"] == {
        "P": 4,
        "speedup": pytest.approx(3 / 1.75),
        "speedup_ci95": pytest.approx(0.3 / 1.75),
        "at_edge": False,
        "text": "P = 4",
        "limit": "",
    }
    assert d["near_best_P"] == [4, 8]  # 3.5 / 2.25 = 1.556 reaches 3 / 1.75 - 0.3 / 1.75 = 1.543
    assert "(E[X]+1) t_verify(0) / (t_verify(P) + t_draft(P))" in MEANING
    with pytest.raises(BrwsimError, match=_whole("no E[X] values to turn into a speedup: give at least one budget P")):
        speedup_table([], cost)
    msg = "E[X] budgets must be >= 1 (P = 0, plain decoding, is added by itself)"
    with pytest.raises(BrwsimError, match=_whole(msg)):
        speedup_table([(4, 1.0, 0.1), (-1, 1.0, 0.1)], cost)


def test_at_edge_needs_the_largest_budget_above_zero():
    t = speedup_table([(2, 0.5, 0.0), (4, 3.0, 0.0)], TableCost({0: 1.0, 4: 1.0}))
    assert t.best.P == 4 and t.at_edge() and (t.drafter, t.source, t.draft) == ("oracle", "", ORACLE)
    t = speedup_table([(2, 0.5, 0.0), (4, 3.0, 0.0)], TableCost({0: 1.0, 2: 1.0, 4: 5.0}))
    assert t.best.P == 2 and not t.at_edge()  # 1.5 at P = 2 beats 4 / 5 at P = 4
    t = speedup_table([(4, 0.0, 0.0)], TableCost({0: 1.0, 4: 2.0}))
    assert t.best.P == 0 and not t.at_edge()
    t = speedup_table([(1, 0.5, 0.0)], TableCost({0: 1.0, 4: 1.0}))  # P = 1 is a budget, and the best
    assert [r.P for r in t.rows] == [0, 1] and t.best.P == 1 and t.at_edge()
    # a table of plain decoding alone (built directly): P = 0 is the largest and the best, but no budget was tried
    # beyond it, and P = 0 is never "at the edge"
    alone = SpeedupTable([SpeedupRow(0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0)], TableCost({0: 1.0}), ORACLE)
    assert alone.best.P == 0 and not alone.at_edge() and alone.to_dict()["best"]["at_edge"] is False


def test_from_simulation_reads_the_result():
    res = SimpleNamespace(
        results=[
            SimpleNamespace(P=4, stat=SimpleNamespace(mean=2.0, ci95=0.3)),
            SimpleNamespace(P=2, stat=SimpleNamespace(mean=1.0, ci95=0.1)),
        ],
        drafter="best-first",
        law="geometric",
        trees=100,
    )
    cost = TableCost({0: 1.0, 4: 1.5, 8: 2.0})
    t = from_simulation(res, cost, DraftCost(0.1))
    assert [(r.P, r.ex, r.ex_ci95) for r in t.rows] == [(0, 0.0, 0.0), (2, 1.0, 0.1), (4, 2.0, 0.3)]
    assert t.rows[2].speedup == pytest.approx(3.0 / 1.9) and t.draft == DraftCost(0.1)
    assert t.drafter == "best-first" and t.source == "simulate geometric (100 trees)" and t.cost is cost
    assert from_simulation(res, cost).draft == ORACLE


def test_modelled_draft_cost_from_the_drafters_fraction():
    cost = TableCost({0: 2.0, 4: 3.0})
    # a run saved without footprints: its fraction as it is, and the label says where it comes from
    d = modelled_draft_cost(cost, SimpleNamespace(name="ee", draft_fraction=0.25, footprint=None))
    label = "ee: 0.25 of a decoding step per pass (the run's saved fraction, at the dtype that run loaded the target "
    label += "in and L = 256: the run saved no footprints to re-derive it here)"
    assert d == DraftCost(0.5, "P", label, "derived", fraction=0.25)
    assert d.t_draft(4) == 2.0
    assert modelled_draft_cost(cost, SimpleNamespace(name="x", draft_fraction=None, footprint=None)) == DraftCost(
        0.0, "P", "x: unknown (not counted)", "none"
    )
    assert modelled_draft_cost(cost, SimpleNamespace(name="y", draft_fraction=0.0, footprint=None)) == DraftCost(
        0.0, "P", "y: no model pass (proposals from the context)", "none"
    )


def test_from_llm_tables_per_task_and_drafter():
    cost = TableCost({0: 1.0, 4: 2.0})

    def drafter(name, frac, ex):
        calls = []
        d = SimpleNamespace(
            name=name,
            draft_fraction=frac,
            builders=["other", "topq"],
            ex=lambda b: calls.append(b) or ex,
            calls=calls,
            footprint=None,
        )
        return d

    d1, d2 = drafter("a", 0.25, [(4, 1.0, 0.1)]), drafter("b", 0.5, [])
    task = SimpleNamespace(task="code", prompts=3, ex=lambda: [(4, 3.0, 0.2)], drafters=[d1, d2])
    asked = []
    run = SimpleNamespace(model="m", task=lambda name: asked.append(name) or [task])
    out = from_llm(run, cost, "code")
    assert asked == ["code"] and d1.calls == ["topq"] and d2.calls == ["topq"]  # the builder fixed in advance
    assert len(out) == 2  # the oracle, and drafter a (b has no rows)
    oracle, a = out
    assert oracle.drafter == "oracle" and oracle.source == "m/code (3 prompts)" and oracle.draft == ORACLE
    assert oracle.rows[1].speedup == pytest.approx(4.0 / 2.0)
    assert a.drafter == "a (topq)" and a.source == "m/code (3 prompts)"
    assert a.draft == modelled_draft_cost(cost, d1) and a.rows[1].speedup == pytest.approx(2.0 / (2.0 + 4 * 0.25))
    measured = DraftCost(0.1, "P", "a measured", "measured")
    a = from_llm(run, cost, draft_costs={"a": measured})[1]
    assert asked[-1] is None and a.draft is measured and a.rows[1].speedup == pytest.approx(2.0 / 2.4)


# ---------------------------------------------------------------------------------------------------------------
# The best budget as a set: a bootstrap over two prompts has three outcomes, enumerated by hand


def test_best_P_set_by_enumeration():
    times = {0: [1.0, 1.0], 1: [1.25, 1.25, 1.25], 2: [2.0]}
    # point speedups: (1.5 + 1) / 1.25 = 2 at P = 1, (2.5 + 1) / 2 = 1.75 at P = 2
    # the prompts resampled jointly: both the first (1/4), one of each (1/2), both the second (1/4):
    # S(2) - S(1) = 2/2 - 2/1.25 = -0.6, -0.25, and 5/2 - 3/1.25 = +0.1; the upper 97.5% point is +0.1 >= 0
    b = best_P_set({1: [1.0, 2.0], 2: [1.0, 4.0]}, times, replicates=400, seed=3)
    assert (b.P_hat, b.near_best, b.smallest, b.replicates) == (1, [1, 2], 1, 400)
    assert b.speedup == pytest.approx({0: 1.0, 1: 2.0, 2: 1.75})  # P = 0: plain decoding, speedup 1
    # P = 2 wins only when both resampled prompts are the second: a share of 1/4 (standard error 0.022)
    assert b.argmax_share[2] == pytest.approx(0.25, abs=0.09) and b.argmax_share[1] == 1 - b.argmax_share[2]
    assert b.to_dict()["near_best"] == [1, 2] and b.to_dict()["P_hat"] == 1
    # at a 20% level the upper point is the 60% quantile, inside the middle outcome (-0.25): P = 2 is out
    assert best_P_set({1: [1.0, 2.0], 2: [1.0, 4.0]}, times, replicates=400, level=0.2).near_best == [1]
    # second prompt 3 instead of 4: S(2) - S(1) is at most 4/2 - 3/1.25 = -0.4 in every replicate
    b = best_P_set({1: [1.0, 2.0], 2: [1.0, 3.0]}, times, replicates=200)
    assert (b.near_best, b.argmax_share) == ([1], {0: 0.0, 1: 1.0, 2: 0.0})


def test_best_P_set_upper_point_is_the_level_quantile():
    # three prompts, every t_verify 1: S(2) - S(1) is the mean over the resampled prompts of X2 - X1 = (-0.5, -0.5,
    # +0.2). With c draws of the third prompt it is (0.7 c - 1.5) / 3: >= 0 only at c = 3 (probability 1/27 = 3.7%),
    # -0.033 at c = 2 (6/27). The upper 97.5% point lies in c = 3 (3.7% > 2.5%): P = 2 is near the best. At a 60%
    # level the upper point is the 80% quantile, inside c = 2 (the top 20% holds c = 3's 3.7% and then c = 2): out.
    # 2000 replicates: c = 3 comes ~74 times (sd 8.4), 50 needed
    ex, times = {1: [1.0, 1.0, 1.0], 2: [0.5, 0.5, 1.2]}, {0: [1.0], 1: [1.0], 2: [1.0]}
    b = best_P_set(ex, times, replicates=2000, seed=1)
    assert (b.P_hat, b.near_best) == (1, [1, 2])
    assert abs(b.argmax_share[2] - 1 / 27) <= 4 * math.sqrt((1 / 27) * (26 / 27) / 2000)  # P = 2 wins only at c = 3
    assert best_P_set(ex, times, replicates=2000, seed=1, level=0.6).near_best == [1]
    assert best_P_set(ex, times, replicates=2000, seed=1) == b  # the same seed, the same replicates


def test_best_budget_with_no_budget_is_plain_decoding():
    # no E[X] at any budget: P = 0 (plain decoding, speedup 1) is the only candidate, the best and the whole set
    b = best_P_set({}, {0: [0.5, 0.7, 0.6]}, replicates=20)
    assert (b.P_hat, b.near_best, b.smallest, b.speedup, b.argmax_share) == (0, [0], 0, {0: 1.0}, {0: 1.0})


def test_best_P_set_fits_times_and_counts_drafting():
    # one repeat per budget (no timing noise to resample) and one prompt: every replicate is the point estimate
    b = best_P_set({1: [1.0], 2: [2.0]}, {0: [1.0], 1: [2.0], 2: [1.0]}, replicates=20)
    # medians 1, 2, 1 fitted non-decreasing: 1, 1.5, 1.5
    assert b.speedup == pytest.approx({0: 1.0, 1: 2.0 / 1.5, 2: 3.0 / 1.5}) and b.P_hat == 2 and b.near_best == [2]
    assert b.argmax_share == {0: 0.0, 1: 0.0, 2: 1.0}
    b = best_P_set({1: [1.0], 2: [2.0]}, {0: [1.0], 1: [2.0, 2.0, 2.0], 2: [1.0]}, replicates=20)
    assert b.speedup == pytest.approx({0: 1.0, 1: 2.0 / 1.75, 2: 3.0 / 1.75})  # weighted by repeats: (3 x 2 + 1) / 4
    b = best_P_set({1: [1.0], 2: [2.0]}, {0: [1.0], 1: [1.0], 2: [1.0]}, t_draft=lambda P: 0.5 * P, replicates=20)
    assert b.speedup == pytest.approx({0: 1.0, 1: 2.0 / 1.5, 2: 3.0 / 2.0}) and b.P_hat == 2
    # exact ties: the smaller budget is the best and both are near it
    b = best_P_set({2: [1.0], 1: [1.0]}, {0: [1.0], 1: [1.0], 2: [1.0]}, replicates=20)
    assert (b.P_hat, b.near_best, b.smallest, b.argmax_share) == (1, [1, 2], 1, {0: 0.0, 1: 1.0, 2: 0.0})
    b = best_P_set({1: [0.5], 2: [1.0], 3: [3.0]}, {0: [1.0], 1: [1.0], 2: [1.0], 3: [4.0]}, replicates=20)
    assert (b.P_hat, b.near_best, b.smallest) == (2, [2], 2)
    for times in ({1: [1.0], 2: [1.0]}, {0: [1.0], 1: [1.0]}):
        msg = "best_P_set needs timing repeats at P = 0 and at every budget of ex"
        with pytest.raises(BrwsimError, match=_whole(msg)):
            best_P_set({1: [1.0], 2: [1.0]}, times)


# ---------------------------------------------------------------------------------------------------------------
# --hardware names to cost models; the measured sources with their measurements replaced by known numbers


def test_verify_cost_presets_custom_and_csv(tmp_path):
    c = verify_cost(" H100 ", target="llama-8b", context=64, bytes_per_param=1.0)
    assert c == RooflineCost(PRESETS["h100"], MODEL_PRESETS["llama-8b"], 1.0, 64)
    assert isinstance(c.bytes_per_param, float) and isinstance(c.context, int)
    c = verify_cost("custom:bw=100,flops=1000", params=10, overhead=0.25)
    assert c == RooflineCost(Hardware("custom", 100.0, 1000.0, 0.25), ModelShape("10 params", 10.0), 2.0, 512)
    assert c.t_verify(0) == pytest.approx(20 / 100 + 0.25)
    assert verify_cost("custom:bw=1,flops=2,overhead=3", params=1, overhead=None).hardware.overhead == 3.0
    assert verify_cost("a100", params=1, overhead=0).hardware.overhead == 0.0
    assert verify_cost("l4", target="llama-1b", params=2e9).shape == dataclasses.replace(
        MODEL_PRESETS["llama-1b"], params=2e9
    )
    # docs/speedup.md: an 8e9-parameter bf16 target on the L4: 16 GB at 300 GB/s is 53.3 ms up to the ridge at
    # P + 1 = 121e12 x 2 / (2 x 300e9) = 403.3; at P = 1024 the 2 x 8e9 x 1025 FLOPs take 135.537 ms at 121 TFLOP/s
    l4 = verify_cost("l4", params=8e9)
    assert l4.t_verify(0) == pytest.approx(16e9 / 300e9) and l4.t_verify(256) == l4.t_verify(0)
    assert l4.ridge_P() == pytest.approx(403.33 - 1, abs=0.01) and l4.t_verify(1024) == pytest.approx(
        0.135537, abs=5e-7
    )
    path = tmp_path / "t.csv"
    path.write_text("0,1\n4,2\n")
    assert verify_cost(f"csv:{path}", context=0 + 1).points == {0: 1.0, 4: 2.0}


def test_verify_cost_takes_the_shape_of_a_loaded_model():
    cfg = SimpleNamespace(num_attention_heads=2, hidden_size=8, num_hidden_layers=1)
    src = SimpleNamespace(model=_fake_hf(cfg), tokenizer=None, device="cpu", max_prompt_tokens=9, engine=None,
                          name="tiny")  # the TransformersModel capability, engine included  # fmt: skip
    assert verify_cost("h200", source=src).shape == ModelShape("tiny", 60.0, 1, 2, 4, 8)
    assert verify_cost("h200", source=src, params=5).shape == ModelShape("5 params", 5.0)
    with pytest.raises(BrwsimError, match="the roofline needs the target's size"):
        verify_cost("h200", source=SimpleNamespace(name="not a transformers model"))


def test_verify_cost_refuses_bad_arguments():
    for hw in ("", "  ", None):
        with pytest.raises(BrwsimError, match=re.escape(f"--hardware is empty; use {hardware_names()}")):
            verify_cost(hw, params=1)
    with pytest.raises(BrwsimError, match=_whole("--context must be an integer >= 1, got 0")):
        verify_cost("h100", params=1, context=0)
    with pytest.raises(BrwsimError, match=_whole("--repeats must be an integer >= 1, got 0")):
        verify_cost("h100", params=1, repeats=0)
    for bpp, over in [(0.0, None), (math.inf, None), (-1.0, 0.0), (1.0, -0.5), (1.0, math.inf)]:
        msg = f"--bytes-per-param must be > 0 and --overhead >= 0, both finite numbers; got {bpp}, {over}"
        with pytest.raises(BrwsimError, match=re.escape(msg)):
            verify_cost("h100", params=1, bytes_per_param=bpp, overhead=over)
    with pytest.raises(BrwsimError, match="unknown hardware 'tpu'"):
        verify_cost("tpu", params=1)
    with pytest.raises(BrwsimError, match="bad hardware 'custom:bw=1'"):
        verify_cost("custom:bw=1", params=1)


def test_verify_cost_dispatches_the_measured_kinds(monkeypatch):
    calls = []
    monkeypatch.setattr(_sources, "load_source", lambda name, threads: calls.append(("load", name, threads)) or "S")
    monkeypatch.setattr(_sources, "measure_cost", lambda s, P, context, repeats: ("measured", s, P, context, repeats))
    monkeypatch.setattr(_sources, "cpu_achieved", lambda s, P, context, repeats: ("achieved", s, P, context, repeats))
    monkeypatch.setattr(_sources, "cpu_roofline", lambda s, context, overhead: ("roofline", s, context, overhead))
    assert verify_cost("cpu-measured", P=(1, 2), context=7, repeats=3) == ("measured", "S", (1, 2), 7, 3)
    assert calls == [("load", "smollm2-135m", 1)]
    assert verify_cost("cpu-achieved", P=(4,), context=9, repeats=2, source="T") == ("achieved", "T", (4,), 9, 2)
    assert verify_cost("cpu-roofline", context=5, source="T", model="other") == ("roofline", "T", 5, 0.0)
    assert verify_cost("cpu-roofline", context=5, overhead=0.5, model="other") == ("roofline", "S", 5, 0.5)
    assert calls[-1] == ("load", "other", 1) and len(calls) == 2
    assert verify_cost("cpu-measured", source="T")[2:] == (DEFAULT_P, 512, 5)


def test_measure_cost_and_draft_cost_from_known_times(monkeypatch):
    seen = []

    def fake_times(src, P_list, context, repeats):
        seen.append((src, list(P_list), context, repeats))
        return {0: [3.0, 1.0, 2.0], 2: [5.0, 4.0, 6.0], 4: [4.0, 4.0, 4.0]} if P_list else {0: [0.004, 0.002, 0.003]}

    monkeypatch.setattr(_sources, "verify_times", fake_times)
    src = SimpleNamespace(name="toy")
    c = measure_cost(src, [2, 4], context=7, repeats=3)
    assert seen == [(src, [2, 4], 7, 3)]
    assert [c.t_verify(P) for P in (0, 2, 4)] == [2.0, 4.5, 4.5]  # medians 2, 5, 4 fitted non-decreasing
    assert c.label == "measured: toy, L=7, 3 repeats, isotonic fit in P" and c.spread(2) == (4.0, 6.0)
    timers = []

    def fake_step(source, context, seed):
        timers.append((source, context, seed))
        return source

    def fake_interleaved(calls, repeats, device):
        assert list(calls) == (["target", "draft"] if "target" in calls else ["draft"]) and device == "cpu"
        d = {"target": [0.010, 0.020, 0.012], "draft": [0.004, 0.002, 0.003]}
        return {k: d[k] for k in calls}

    monkeypatch.setattr(_sources, "decode_step_timer", fake_step)
    monkeypatch.setattr(_sources, "interleaved_times", fake_interleaved)
    dr = SimpleNamespace(name="dr", timing_source=lambda: src, pass_timer=lambda context, seed: None, device="cpu")
    d = measure_draft_cost(dr, context=11, repeats=3)
    assert timers == [(src, 11, 0)]
    half = float(scipy.stats.t.ppf(0.975, 2)) * 0.001 / 3**0.5  # Student t, 2 degrees of freedom: s = 0.001
    label = "dr: 3.000 ms per pass measured here (mean of 3), one pass per drafted token"
    assert d == DraftCost(pytest.approx(0.003), "P", label, "measured", pytest.approx(half), None, None, 3)
    tgt = SimpleNamespace(name="target", device="cpu")
    d = measure_draft_cost(dr, tgt, context=11, repeats=3)  # interleaved with the target's step: ratios .4 .1 .25
    assert timers[-2:] == [(src, 11, 0), (tgt, 11, 0)] and d.t_step == pytest.approx(0.014)
    # the mean ratio with the Student t half-width of that mean over the rounds (s = 0.15)
    assert d.fraction == pytest.approx(0.25) and d.fraction_ci95 == pytest.approx(half * 150)
    assert "0.250 +- 0.373 of the target's step in the same rounds" in d.label
    no_pass = SimpleNamespace(name="p", timing_source=lambda: None, pass_timer=lambda context, seed: None)
    assert measure_draft_cost(no_pass) is None
    head = SimpleNamespace(name="head", pass_timer=lambda context, seed: ("timer", context, seed), device="cpu")
    seen_calls = []
    monkeypatch.setattr(_sources, "interleaved_times", lambda calls, repeats, device: seen_calls.append(calls) or
                        {"draft": [1.0, 3.0]})  # fmt: skip
    d = measure_draft_cost(head, context=5, repeats=2, seed=4)
    assert seen_calls == [{"draft": ("timer", 5, 4)}] and d.t_pass == 2.0  # a head's own pass, not a source's step
    measure_cost(src, [1])
    assert seen[-1] == (src, [1], 256, 5)


def _hf_source(name="tiny", size=4):
    cfg = SimpleNamespace(num_attention_heads=2, hidden_size=8, num_hidden_layers=3, num_key_value_heads=1)
    return SimpleNamespace(model=_fake_hf(cfg, size=size), name=name, device="cpu")


def test_cpu_roofline_uses_the_measured_peaks(monkeypatch):
    peaks = Peaks(100.0, 1000.0)
    c = cpu_roofline(_hf_source(size=2), context=9, overhead=0.1, peaks=peaks)
    hw = Hardware("this machine", 100.0, 1000.0, 0.1, f"measured here: {peaks.to_dict()}")
    assert c == RooflineCost(hw, ModelShape("tiny", 60.0, 3, 1, 4, 8), 2.0, 9)
    monkeypatch.setattr(_sources, "machine_peaks", lambda: Peaks(5.0, 6.0))
    c = cpu_roofline(_hf_source())
    assert (c.hardware.bandwidth, c.hardware.flops, c.hardware.overhead) == (5.0, 6.0, 0.0)
    assert (c.bytes_per_param, c.context) == (4.0, 256)


@needs_torch
def test_rest_of_pass_is_the_least_squares_line(monkeypatch):
    seen = []

    def fake_times(src, P_list, context, repeats):
        # the matrix products and attention are stubbed out while the rest is timed
        seen.append((list(P_list), context, repeats, torch.nn.functional.linear is not _LINEAR))
        return {P: [table[P] + 1.0, table[P], table[P] - 0.5] for P in P_list}

    monkeypatch.setattr(_sources, "verify_times", fake_times)
    table = {0: 0.75, 1: 1.0, 3: 1.5}  # 0.5 + 0.25 (P + 1)
    over, per_tok, med = _sources.rest_of_pass("S", [0, 1, 3], context=5, repeats=4)
    assert (over, per_tok) == pytest.approx((0.5, 0.25)) and med == table and seen == [([0, 1, 3], 5, 4, True)]
    assert torch.nn.functional.linear is _LINEAR
    table = {0: 0.5, 1: 1.5, 3: 3.5}  # -0.5 + (P + 1): a negative intercept is clipped to 0
    assert _sources.rest_of_pass("S", [0, 1, 3])[:2] == pytest.approx((0.0, 1.0)) and seen[-1][1:3] == (256, 3)
    table = {0: 3.0, 1: 2.0, 3: 1.0}  # a falling line: no negative slope
    assert _sources.rest_of_pass("S", [0, 1, 3])[1] == 0.0
    table = {0: 1.0, 1: 1.5}  # two budgets: the line through both
    assert _sources.rest_of_pass("S", [0, 1])[:2] == pytest.approx((0.5, 0.5))
    table = {0: 0.5}
    assert _sources.rest_of_pass("S", [0]) == (0.5, 0.0, {0: 0.5})  # one budget: the time itself, no slope


def test_cpu_achieved_assembles_the_measurements(monkeypatch):
    seen = {}
    monkeypatch.setattr(_sources, "machine_peaks", lambda: Peaks(50.0, 60.0))
    src = _hf_source(size=2)

    def shapes(model):
        assert model is src.model
        return [(8, 8, 6), (8, 32, 1)]

    monkeypatch.setattr(_sources, "linear_shapes", shapes)

    def gemm(shapes, rows, repeats, device):
        assert device == src.device
        seen["gemm"] = (shapes, rows, repeats)
        return {"g": 1}

    def attn(heads, head_dim, context, rows, repeats, device):
        assert device == src.device
        seen["attn"] = (heads, head_dim, context, rows, repeats)
        assert type(heads) is int  # query heads = attention width // head size
        return {"a": 2}

    def rest(source, Ps, context, repeats):
        assert source is src
        seen["rest"] = (Ps, context, repeats)
        return 0.5, 0.25, {0: 1.0, 2: 2.0, 4: 3.0}

    monkeypatch.setattr(_sources, "gemm_throughput", gemm)
    monkeypatch.setattr(_sources, "attention_throughput", attn)
    monkeypatch.setattr(_sources, "rest_of_pass", rest)
    c = cpu_achieved(src, [4, 2, 2], context=16, repeats=7)
    assert seen == {
        "gemm": (((8, 8, 6), (8, 32, 1)), [1, 3, 5], 7),
        "attn": (2, 4, 16, [1, 3, 5], 7),
        "rest": ([0, 2, 4], 16, 7),
    }
    hw = Hardware("this machine", 50.0, 60.0, 0.5, f"measured here: {Peaks(50.0, 60.0).to_dict()}")
    assert c == AchievedRooflineCost(
        hw,
        ModelShape("tiny", 60.0, 3, 1, 4, 8),
        ((8, 8, 6), (8, 32, 1)),
        {"g": 1},
        {"a": 2},
        2.0,
        16,
        0.25,
        False,
        {1: 1.0, 3: 2.0, 5: 3.0},
    )
    c = cpu_achieved(src, [1], peaks=Peaks(1.0, 2.0), overlap=True)
    assert seen["rest"] == ([0, 1], 256, 3) and seen["attn"][2:] == (256, [1, 2], 3) and c.overlap
    assert c.hardware.bandwidth == 1.0 and c.context == 256


# ---------------------------------------------------------------------------------------------------------------
# Timing with a clock that the test drives


class _Clock:
    def __init__(self, ticks=None):
        self.now, self.ticks = 0.0, iter(ticks or [])

    def perf_counter(self):
        return next(self.ticks) if self.ticks.__length_hint__() else self.now


@needs_torch
def test_time_call_runs_until_min_s_and_at_least_twice(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(_timing, "time", clock)
    calls = []

    def fn():
        calls.append(clock.now)
        clock.now += 0.5

    assert _timing._time_call(fn, 1.2) == 0.5 and len(calls) == 4  # one warm-up, then 3 calls to pass 1.2 s
    calls.clear()
    assert _timing._time_call(fn, 0.0) == 0.5 and len(calls) == 3  # at least two timed calls
    calls.clear()
    assert _timing._time_call(fn, 1.0) == 0.5 and len(calls) == 3  # 1.0 s reached exactly after two


def test_time_call_counts_its_calls(monkeypatch):
    """The loop ends once it has counted two timed calls and ``min_s``: a count that does not go up would loop for
    ever, so this ``fn`` refuses a tenth call and such a loop ends in an error instead of a hang."""
    clock = _Clock()
    monkeypatch.setattr(_timing, "time", clock)
    calls = []

    def fn():
        calls.append(clock.now)
        if len(calls) == 10:
            raise RuntimeError("called ten times: the timing loop did not stop")
        clock.now += 0.25

    assert _timing._time_call(fn, 0.0) == 0.25 and len(calls) == 3  # a warm-up and two timed calls
    calls.clear()
    assert _timing._time_call(fn, 1.0) == 0.25 and len(calls) == 5  # a warm-up and four calls of 0.25 s


@needs_torch
def test_machine_peaks_from_a_known_clock(monkeypatch):
    # copies of 1 MiB (2 MiB moved) taking 1, 2, 4 s; products of 4 x 4 matrices (128 FLOPs) taking 2, 2, 1 s
    ticks = [0, 1, 1, 3, 3, 7, 10, 12, 12, 14, 14, 15]
    monkeypatch.setattr(_timing, "time", _Clock(ticks))
    p = _timing.machine_peaks(copy_mb=1, matmul_n=4, repeats=3)
    assert p == _timing.Peaks(2.0**20, 64.0, (2.0**19, 2.0**21), (64.0, 128.0), torch.get_num_threads(), 1, 4)
    assert p.to_dict() == {
        "bandwidth": 2.0**20,
        "flops": 64.0,
        "bandwidth_range": (2.0**19, 2.0**21),
        "flops_range": (64.0, 128.0),
        "threads": torch.get_num_threads(),
        "copy_mb": 1,
        "matmul_n": 4,
    }


@needs_torch
def test_kernel_throughputs_from_known_times(monkeypatch):
    calls = []

    F = torch.nn.functional

    def per_round(fn, min_s, device="cpu"):
        assert device == "cpu"
        calls.append((fn, min_s))
        scale = 2.0 ** ((len(calls) - 1) // len(calls_per_round))  # 1, 2, 4 in the three rounds
        return float(fn.args[0].shape[-2]) * scale * 1e-3

    calls_per_round = [None] * 4  # 2 shapes x 2 row counts
    monkeypatch.setattr(_timing, "_time_call", per_round)
    g = _timing.gemm_throughput([(3, 2, 5), (4, 6, 1)], [1, 3], repeats=3, min_s=0.25)
    # times n, 2n, 4n ms over the rounds: the median is 2n ms, the FLOP/s 2 n d_in d_out / (2n ms)
    assert g.keys() == {(3, 2), (4, 6)}
    assert g[(3, 2)] == pytest.approx({1: 6e3, 3: 6e3}) and g[(4, 6)] == pytest.approx({1: 24e3, 3: 24e3})
    assert len(calls) == 12 and {m for _, m in calls} == {0.25}
    for fn, _ in calls[:4]:
        assert fn.func is F.linear
    assert [(tuple(fn.args[0].shape), tuple(fn.args[1].shape)) for fn, _ in calls[:4]] == [
        ((1, 3), (2, 3)),
        ((3, 3), (2, 3)),
        ((1, 4), (6, 4)),
        ((3, 4), (6, 4)),
    ]
    calls.clear()
    calls_per_round[:] = [None] * 2
    a = _timing.attention_throughput(2, 4, 5, [1, 3], repeats=3, min_s=0.5)
    # 4 heads head_dim n (context + n) / (2n ms) = 2 x 2 x 4 x (5 + n) / 1e-3
    assert a == pytest.approx({1: 96e3, 3: 128e3})
    assert len(calls) == 6 and {m for _, m in calls} == {0.5}
    fn = calls[1][0]
    assert fn.func is F.scaled_dot_product_attention
    q, k, v = fn.args
    assert (tuple(q.shape), tuple(k.shape), tuple(v.shape)) == ((1, 2, 3, 4), (1, 2, 8, 4), (1, 2, 8, 4))
    assert tuple(fn.keywords["attn_mask"].shape) == (1, 1, 3, 8) and not fn.keywords["attn_mask"].any()


@needs_torch
def test_tree_inputs_are_the_heap_tree_mask():
    mask, pos = _timing._tree_inputs(torch, 3, 2, torch.float32, "cpu")
    # parents 0 <- 1, 0 <- 2, 1 <- 3: each token sees the 2 context tokens, its ancestors and itself
    allowed = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 1]]).bool()
    expect = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
    assert mask.shape == (1, 1, 4, 6) and torch.equal(mask[0, 0], expect) and mask.dtype == torch.float32
    assert pos.tolist() == [[2, 3, 3, 4]]  # context + depth
    mask, pos = _timing._tree_inputs(torch, 0, 1, torch.float64, "cpu")
    assert mask.tolist() == [[[[0.0, 0.0]]]] and pos.tolist() == [[1]] and mask.dtype == torch.float64
    mask, _ = _timing._tree_inputs(torch, 1, 0, torch.float64, "cpu")
    assert mask.tolist() == [[[[0.0, torch.finfo(torch.float64).min], [0.0, 0.0]]]]  # the float64 lowest
    mask, pos = _timing._tree_inputs(torch, 6, 0, torch.float32, "cpu")
    assert pos.tolist() == [[0, 1, 1, 2, 2, 2, 2]]
    assert (mask[0, 0, 6] == 0).tolist() == [True, False, True, False, False, False, True]  # 6 -> 2 -> 0


@needs_torch
def test_linear_shapes_and_stubbed_kernels():
    nn = torch.nn
    model = nn.Sequential(
        nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 3), nn.Sequential(nn.Linear(3, 4)), nn.Linear(4, 4, bias=False)
    )
    assert _timing.linear_shapes(model) == [(3, 4, 2), (4, 3, 1), (4, 4, 1)]
    F = torch.nn.functional
    sdpa = F.scaled_dot_product_attention
    with _timing.stubbed_kernels():
        y = F.linear(torch.ones(2, 5, 3), torch.ones(4, 3), torch.ones(4))
        o = F.scaled_dot_product_attention(
            torch.ones(1, 2, 3, 4), torch.ones(1, 2, 7, 4), torch.ones(1, 2, 7, 6), attn_mask=None
        )
    assert y.shape == (2, 5, 4) and not y.any() and o.shape == (1, 2, 3, 6) and not o.any()
    assert F.linear is _LINEAR and F.scaled_dot_product_attention is sdpa
    with pytest.raises(KeyError), _timing.stubbed_kernels():
        raise KeyError("x")  # an error inside passes through, and the kernels are back
    assert F.linear is _LINEAR and F.scaled_dot_product_attention is sdpa


class _Cache:
    def __init__(self, log):
        self.log = log

    def crop(self, k):
        self.log.append(("crop", k))


class _Model:
    """A stand-in target: records its calls; a tree pass of n tokens in round r takes n + 10 r seconds."""

    def __init__(self, clock, log):
        self.clock, self.log, self.calls, self.cache = clock, log, {}, None

    def __call__(self, input_ids, use_cache, **kw):
        if "past_key_values" not in kw:
            self.log.append(("prefill", tuple(input_ids.shape), use_cache, kw))
            self.cache, self.context_ids = _Cache(self.log), input_ids.flatten().tolist()
            return SimpleNamespace(past_key_values=self.cache)
        assert use_cache is True and kw["past_key_values"] is self.cache
        n = input_ids.shape[1]
        r = self.calls.get(n, 0)
        self.calls[n] = r + 1
        mask, pos = kw["attention_mask"].clone(), kw["position_ids"].tolist()
        self.log.append(("pass", n, pos, mask, input_ids.tolist()))
        self.clock.now += n + 10 * r


@needs_torch
def test_verify_times_with_a_stand_in_model(monkeypatch):
    clock, log = _Clock(), []
    monkeypatch.setattr(_timing, "time", clock)
    src = SimpleNamespace(model=_Model(clock, log), vocab_size=7, device="cpu", dtype=torch.float32)
    out = _timing.verify_times(src, [2, 1, 2], context=4, repeats=2, warmup=1)
    assert out == {0: [11.0, 21.0], 1: [12.0, 22.0], 2: [13.0, 23.0]}  # the warm-up round dropped
    assert log[0][:3] == ("prefill", (1, 4), True) and log[0][3] == {"logits_to_keep": 1}
    passes = [e for e in log if e[0] == "pass"]
    assert [e[1] for e in passes] == [1, 2, 3] * 3  # rounds over every P
    assert [e[1] for e in log if e[0] == "crop"] == [-1, -2, -3] * 3  # each tree's slots dropped after its pass
    for e in passes[:3]:
        mask, pos = _timing._tree_inputs(torch, e[1] - 1, 4, torch.float32, "cpu")
        assert e[2] == pos.tolist() and torch.equal(e[3], mask)
        assert len(e[4][0]) == e[1] and all(0 <= t < 7 for t in e[4][0])
    assert _timing.verify_times(src, [], context=4, repeats=1, warmup=0).keys() == {0}
    before = len(log)
    out = _timing.verify_times(src, [1], context=4)
    assert [len(v) for v in out.values()] == [5, 5]
    assert sum(e[0] == "pass" for e in log[before:]) == 12  # a warm-up round, then 5 rounds of P = 0 and 1
    ids = [e[4] for e in log[before:] if e[0] == "pass"]
    before = len(log)
    _timing.verify_times(src, [1], context=4, repeats=5, seed=0, warmup=1)  # the defaults: the same token ids
    assert [e[4] for e in log[before:] if e[0] == "pass"] == ids


@needs_torch
def test_verify_times_puts_every_input_on_the_source_device(monkeypatch):
    """The context ids, the tree's mask and positions and its token ids all go to ``src.device``: here torch's
    ``meta`` device (shapes without data), so a tensor left on the default CPU device shows in its ``device``."""
    monkeypatch.setattr(_timing, "time", _Clock())
    devices = []

    def model(input_ids, use_cache, **kw):
        devices.append(sorted({str(t.device) for t in [input_ids, *kw.values()] if isinstance(t, torch.Tensor)}))
        return SimpleNamespace(past_key_values=SimpleNamespace(crop=lambda k: None))

    src = SimpleNamespace(model=model, vocab_size=7, device="meta", dtype=torch.float32)
    out = _timing.verify_times(src, [1], context=3, repeats=1, warmup=0)
    assert out.keys() == {0, 1} and devices == [["meta"]] * 3  # the prefill, then the passes at P = 0 and 1


def test_best_P_set_takes_medians_in_double_precision():
    # t(0) repeats 1 and 1 + 2^-23 given as float32: their median 1 + 2^-24 is a float64 number but not a float32
    # one (float32 arithmetic rounds the mean to 1); t(1) = 2, E[X](1) = 1: speedup (1 + 1) (1 + 2^-24) / 2
    t0 = np.array([1.0, 1.0 + 2.0**-23], dtype=np.float32)
    b = best_P_set({1: [1.0]}, {0: t0, 1: [2.0]}, replicates=20)
    assert b.speedup == {0: 1.0, 1: 1.0 + 2.0**-24}


def test_best_P_set_resamples_the_timing_repeats():
    # one prompt; t(1) repeats 1 and 3: a resampled median of 1 (1/4), 2 (1/2) or 3 (1/4), with t(0) = 1, t(2) = 2.
    # point: medians 1, 2, 2: speedups 2 / 2 = 1 at P = 1 and 3 / 2 = 1.5 at P = 2.
    # t(1) = 1: S(1) = 2 beats 1.5 (share 1/4); t(1) = 2: 1 < 1.5; t(1) = 3 pools with t(2) = 2 at weights 2 and 1
    # to 8/3: S(1) = 0.75 < S(2) = 1.125. S(1) - S(2) reaches +0.5: both budgets are near, the smallest is P = 1
    b = best_P_set({1: [1.0], 2: [2.0]}, {0: [1.0], 1: [1.0, 3.0], 2: [2.0]}, replicates=400, seed=1)
    assert (b.P_hat, b.near_best, b.smallest) == (2, [1, 2], 1) and b.speedup == pytest.approx({0: 1.0, 1: 1.0, 2: 1.5})
    assert b.argmax_share[1] == pytest.approx(0.25, abs=0.09)  # standard error 0.022


def test_the_other_name_lists():
    assert model_names().split(", ") == list(MODELS) and prompt_names().split(", ") == [*PROMPT_SETS, "a .jsonl file"]
    assert drafter_names() == drafter_examples()


class _FakeTensor:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n

    def copy_(self, other):
        return self

    def __matmul__(self, other):
        return self


def test_machine_peaks_default_sizes(monkeypatch):
    made = []

    def make(*shape, **kw):
        made.append(shape)
        return _FakeTensor(math.prod(shape))

    fake = SimpleNamespace(float32="f32", ones=make, randn=make, empty_like=lambda a: a, get_num_threads=lambda: 3)
    monkeypatch.setattr(_timing, "_torch", lambda: fake)
    ticks = [0, 1] * 5 + [0, 2] * 5  # five copies of 1 s, five products of 2 s
    monkeypatch.setattr(_timing, "time", _Clock(ticks))
    p = _timing.machine_peaks()
    # 512 MiB of float32 copied: 2 x 512 MiB moved per second; two 2048 x 2048 products: 2 x 2048^3 FLOPs in 2 s
    assert made == [(512 * 2**20 // 4,), (2048, 2048), (2048, 2048)]
    assert p == _timing.Peaks(2.0**30, 2048.0**3, (2.0**30, 2.0**30), (2048.0**3, 2048.0**3), 3, 512, 2048)


@needs_torch
def test_kernel_throughput_defaults(monkeypatch):
    calls, args = [], []
    monkeypatch.setattr(
        _timing, "_time_call", lambda fn, min_s, device="cpu": calls.append(min_s) or args.append(fn.args) or 1.0
    )
    assert _timing.gemm_throughput([(2, 3, 1)], [1]) == {(2, 3): {1: 12.0}}  # 2 x 1 x 2 x 3 FLOPs in 1 s
    assert calls == [0.03] * 3  # three rounds of at least 30 ms
    _timing.gemm_throughput([(2, 3, 1)], [1], seed=0)  # the default seed is 0: the same operands
    assert all(torch.equal(a, b) for a, b in zip(args[0] + args[1], args[3] + args[4], strict=True))
    calls.clear()
    args.clear()
    assert _timing.attention_throughput(1, 2, 3, [1]) == {1: 32.0}  # 4 x 1 x 2 x 1 x (3 + 1) FLOPs in 1 s
    assert calls == [0.03] * 3
    _timing.attention_throughput(1, 2, 3, [1], seed=0)
    assert all(torch.equal(a, b) for a, b in zip(args[0] + args[1], args[3] + args[4], strict=True))


def test_best_P_set_is_reproducible_with_its_defaults():
    ex, times = {1: [1.0, 2.0], 2: [1.0, 4.0]}, {0: [1.0, 1.0], 1: [1.25, 1.25, 1.25], 2: [2.0]}
    a, b = best_P_set(ex, times), best_P_set(ex, times, replicates=1000, seed=0, level=0.95)
    assert a.replicates == 1000 and a == b  # the defaults: 1000 replicates from seed 0 (the same replicates)
    assert (a.P_hat, a.near_best) == (1, [1, 2])  # at the default 95% level, as enumerated above


def test_cost_csv_errors_name_the_file_line_past_blank_lines(tmp_path):
    """Blank lines are skipped but still counted: the bad row of '0,1', two blank lines, '2,x' is line 4."""
    from brwsim.speedup._costs import read_cost_csv

    path = tmp_path / "cost.csv"
    path.write_text("0,1\n\n\n2,x\n")
    with pytest.raises(BrwsimError, match=r"cost\.csv:4\b"):
        read_cost_csv(str(path))
    path.write_text("P,seconds\n\n1,1\n1,0.5\n")  # a header, a blank line, then a P that does not increase
    with pytest.raises(BrwsimError, match=r"cost\.csv:4: the P column must increase strictly, but P = 1 follows P = 1"):
        read_cost_csv(str(path))


def test_interpolation_in_an_empty_table_is_a_one_line_error():
    from brwsim.speedup._costs import _interp

    with pytest.raises(BrwsimError, match="^the rest of the pass has no measured row counts: measure it$"):
        _interp({}, 3, "the rest of the pass")
    assert _interp({2: 1.0, 4: 2.0}, 3, "x") == 1.5


@needs_torch
def test_rest_of_pass_times_the_source_it_is_given(monkeypatch):
    """The stubbed pass is timed on the source given to rest_of_pass (the stand-in records what it was handed)."""
    handed = []

    def fake_times(src, P_list, context, repeats):
        handed.append(src)
        return {P: [1.0] for P in P_list}

    monkeypatch.setattr(_sources, "verify_times", fake_times)
    src = object()
    _sources.rest_of_pass(src, [0, 1])
    assert len(handed) == 1 and handed[0] is src


@needs_torch
def test_tree_token_ids_are_drawn_from_the_whole_vocabulary():
    """The tree's token ids are uniform on 0 .. vocab - 1: a one-token vocabulary has only the id 0; 64 draws from
    two ids show both (each is missed with probability 2^-64), on the source's device, as one batch row."""
    src = SimpleNamespace(device="cpu")
    assert _timing._ids(torch, np.random.default_rng(0), 1, 3, src).tolist() == [[0, 0, 0]]
    ids = _timing._ids(torch, np.random.default_rng(0), 2, 64, src)
    assert ids.shape == (1, 64) and set(ids.flatten().tolist()) == {0, 1}


@needs_torch
def test_verify_times_context_is_uniform_and_each_pass_is_waited_for(monkeypatch):
    """The prefill's token ids are uniform on 0 .. vocab - 1 (a one-token vocabulary gives only 0; 64 draws from two
    ids show both, each missed with probability 2^-64), and the clock is read between two waits on the source's
    device, one right before and one right after each pass (CUDA runs asynchronously)."""
    clock, log, waits = _Clock(), [], []
    monkeypatch.setattr(_timing, "time", clock)
    monkeypatch.setattr(_timing, "synchronize", lambda dev: waits.append((dev, sum(e[0] == "pass" for e in log))))
    for vocab, want in ((1, {0}), (2, {0, 1})):
        model = _Model(clock, log)
        src = SimpleNamespace(model=model, vocab_size=vocab, device="cpu", dtype=torch.float32)
        _timing.verify_times(src, [2], context=64, repeats=1, warmup=0)
        assert len(model.context_ids) == 64 and set(model.context_ids) == want
    # two passes (P = 0 and 2) a call, two calls: each pass k is waited for before (k passes done) and after (k + 1)
    assert waits == [("cpu", k + a) for k in range(4) for a in (0, 1)]


@needs_torch
def test_verify_times_default_context_is_256_tokens(monkeypatch):
    """Without ``context`` the prefill is 256 token ids (the documented default), and the P = 0 pass is the one
    token at position 256, right after them."""
    clock, log = _Clock(), []
    monkeypatch.setattr(_timing, "time", clock)
    src = SimpleNamespace(model=_Model(clock, log), vocab_size=7, device="cpu", dtype=torch.float32)
    assert _timing.verify_times(src, [], repeats=1, warmup=0) == {0: [1.0]}  # one pass of one token: 1 s
    assert log[0][:2] == ("prefill", (1, 256))
    assert [e[2] for e in log if e[0] == "pass"] == [[[256]]]
