"""Draft costs derived from what a pass reads and computes, the planner's growing P grid, Sequoia's acceptance
vector, and hostile plan inputs: hand-made inputs with exact expected outputs."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from brwsim.drafters._sequoia import greedy_tree, read_acceptance, sequoia_budgets
from brwsim.errors import BrwsimError
from brwsim.llm.drafters._base import NO_PASS, PassFootprint
from brwsim.speedup import (
    DraftCost,
    Hardware,
    ModelShape,
    RooflineCost,
    TableCost,
    derived_draft_cost,
    fixed_grid,
    grown_table,
    speedup_table,
)

HW = Hardware("toy", bandwidth=100.0, flops=1e6, overhead=0.0)  # 100 bytes/s: memory-bound at these sizes


# ---------------------------------------------------------------------------------------------------------------
# Footprints and the roofline


def test_footprint_bytes_by_dtype_kv_and_flops():
    fp = PassFootprint(((100.0, 4.0), (10.0, None)), kv_values=6, layers=2, attn_dim=8, what="toy")
    assert fp.params == 110.0 and not fp.empty and NO_PASS.empty
    assert fp.weight_bytes(2.0) == 100 * 0.5 + 10 * 2.0  # 4-bit matrices, the rest at the target's bf16
    assert fp.nbytes(2.0, 1.0, context=9) == 70.0 + 6 * 1.0 * 10  # KV read for the context and the new token
    assert fp.flops(9) == 2 * 110 + 4 * 2 * 8 * 10
    assert PassFootprint.from_dict(json.loads(json.dumps(fp.to_dict()))) == fp


def test_roofline_pass_time_of_the_targets_own_footprint_is_its_step():
    shape = ModelShape("toy", params=1000.0, layers=2, kv_heads=1, head_dim=4, attn_dim=8)
    cost = RooflineCost(HW, shape, bytes_per_param=2.0, context=9)
    target = PassFootprint(((1000.0, None),), shape.kv_values_per_token(), 2, 8)
    assert cost.pass_time(target) == cost.t_verify(0) == (2000 + 16 * 2 * 10) / 100.0
    # an N-bit copy of the weights reads N/16 of a bf16 target's weight bytes (not N/32), plus the same KV cache
    four = PassFootprint(((1000.0, 4.0),), shape.kv_values_per_token(), 2, 8)
    assert cost.pass_time(four) == (500 + 320) / 100.0
    assert cost.pass_time(NO_PASS) == 0.0
    fast = RooflineCost(Hardware("ridge", 1e12, 1.0), shape, 2.0, 9)  # compute-bound: FLOPs / peak
    assert fast.pass_time(four) == four.flops(9) / 1.0


def test_derived_draft_cost_on_a_roofline_and_on_a_table():
    shape = ModelShape("toy", params=1000.0)
    cost = RooflineCost(HW, shape, 2.0, 9)
    fp = PassFootprint(((250.0, None),), what="a quarter of the weights")
    d = SimpleNamespace(name="q", footprint=lambda: fp, cost_fraction=lambda context: 0.5)
    dc = derived_draft_cost(cost, d)
    assert dc.t_pass == 5.0 and dc.fraction == 0.25 and dc.kind == "derived" and dc.t_draft(4) == 20.0
    assert dc.label == "q: 5000 ms per pass on the roofline (0.0005 MB read: a quarter of the weights)"
    table = TableCost({0: 2.0, 4: 3.0})
    dt = derived_draft_cost(table, d)  # not a roofline: the drafter's fraction of the step t_verify(0)
    assert dt.t_pass == 1.0 and dt.fraction == 0.5
    look = SimpleNamespace(name="look", footprint=lambda: NO_PASS, cost_fraction=lambda context: 0.0)
    assert derived_draft_cost(table, look) == DraftCost(0.0, "P", "look: no model pass (proposals from the context)",
                                                        "none")  # fmt: skip


def test_cost_fraction_from_footprints():
    from brwsim.llm.drafters._base import Drafter

    class Toy(Drafter):
        @classmethod
        def open(cls, spec, target, log=None):  # pragma: no cover - not opened here
            raise NotImplementedError

        def footprint(self):
            return PassFootprint(((100.0, 8.0),), kv_values=2, layers=1, attn_dim=4)

    d = Toy()
    assert d.cost_fraction() is None  # no target footprint: unknown
    d.target_footprint, d.target_bits = PassFootprint(((100.0, None),), kv_values=4), 32.0
    assert d.cost_fraction(context=9) == (100 * 1 + 2 * 4 * 10) / (100 * 4 + 4 * 4 * 10)


# ---------------------------------------------------------------------------------------------------------------
# The P grid grows until the best P is interior


def _ex(P: int) -> float:
    return float(np.log2(P + 1))  # E[X] that keeps rising


def test_grid_grows_until_the_best_is_interior():
    # t(P) = 1 up to P = 16, then 1 + (P - 16) / 16: (E[X] + 1) / t peaks at P = 16 (log2(17) + 1 = 5.087 > 4.3)
    cost = TableCost({0: 1.0, 16: 1.0, 1024: 1.0 + (1024 - 16) / 16})
    asked = []

    def make(Ps):
        asked.append(list(Ps))
        return speedup_table([(P, _ex(P), 0.0) for P in Ps], cost)

    t = grown_table(make, [1, 2, 4], cost)
    assert asked == [[1, 2, 4], [1, 2, 4, 8], [1, 2, 4, 8, 16], [1, 2, 4, 8, 16, 32]]
    assert t.best.P == 16 and not t.at_edge() and t.best_text() == "P = 16" and t.limit == ""


def test_grid_stops_at_the_cap_or_the_cost_and_says_still_rising():
    flat = TableCost({0: 1.0, 64: 1.0})
    make = lambda Ps: speedup_table([(P, _ex(P), 0.0) for P in Ps], flat)  # noqa: E731
    t = grown_table(make, [1, 4], flat, P_cap=16)
    assert [r.P for r in t.rows] == [0, 1, 4, 8, 16] and t.at_edge()
    assert t.best_text() == "at least P = 16, still rising (the grid stops at P_max = 16)"
    t = grown_table(make, [1, 4], flat)  # the table ends at P = 64: no time past it
    assert t.best.P == 64 and t.limit == "the cost model gives no time past P = 64"
    assert t.to_dict()["best"]["text"] == "at least P = 64, still rising (the cost model gives no time past P = 64)"
    fixed = fixed_grid([speedup_table([(4, 1.0, 0.0)], flat), speedup_table([(4, 1.0, 0.0), (8, 0.5, 0.0)], flat)],
                       "E[X] measured up to P = {P}")  # fmt: skip
    assert fixed[0].limit == "E[X] measured up to P = 4" and fixed[1].limit == ""


def test_speedup_table_refuses_a_zero_step():
    zero = SimpleNamespace(t_verify=lambda P: 0.0, label="zero", spread=lambda P: None)
    with pytest.raises(BrwsimError, match=r"t_verify\(0\) = 0.0 s"):
        speedup_table([(1, 0.5, 0.0)], zero)


# ---------------------------------------------------------------------------------------------------------------
# Sequoia's acceptance vector


def test_read_acceptance_comma_list_and_sequoias_text_layout(tmp_path):
    assert read_acceptance(" 0.6, 0.2 ,0.1").tolist() == [0.6, 0.2, 0.1]
    f = tmp_path / "vec.txt"
    f.write_text("tensor([0.0, 0.5, 0.25, 0.25])\n")  # Sequoia's layout: leading 0, rates, no-accept share
    assert read_acceptance(str(f)).tolist() == [0.5, 0.25]
    f.write_text("0.5 0.25 0.25\n")
    with pytest.raises(BrwsimError, match="not Sequoia's saved acceptance vector"):
        read_acceptance(str(f))
    missing = str(tmp_path / "no.pt")
    bad_inputs = [("0.6,0.5", "summing to at most 1"), ("0.6,x", "as numbers"), ("", "give an acceptance"),
                  ("nan,0.1", "finite"), (missing, "no such file"), ("-0.1", "in \\[0, 1\\]")]  # fmt: skip
    for bad, msg in bad_inputs:
        with pytest.raises(BrwsimError, match=msg):
            read_acceptance(bad)
    with pytest.raises(BrwsimError, match="needs torch's loader"):
        (tmp_path / "v.pt").write_bytes(b"")
        read_acceptance(str(tmp_path / "v.pt"))


def test_acceptance_vector_reads_a_torch_file(tmp_path):
    torch = pytest.importorskip("torch")
    from brwsim.speedup import acceptance_vector

    torch.save(torch.tensor([0.0, 0.5, 0.25, 0.25]), tmp_path / "v.pt")
    assert acceptance_vector(str(tmp_path / "v.pt")).tolist() == [0.5, 0.25]
    torch.save({"not": "a tensor"}, tmp_path / "d.pt")
    with pytest.raises(BrwsimError, match="expected a 1-D tensor"):
        acceptance_vector(str(tmp_path / "d.pt"))
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(BrwsimError, match="torch cannot read it"):
        acceptance_vector(str(tmp_path / "junk.pt"))


def test_sequoia_budgets_in_sequoias_terms_and_rank_skipping():
    # non-increasing rates: the DP's value is the greedy (Tunstall) tree's, exactly
    a = [0.5, 0.3, 0.1]
    for r in sequoia_budgets(a, [1, 3, 6]):
        assert r["X"] == pytest.approx(greedy_tree(a, r["P"])[0], abs=1e-15)
        assert r["m"] == r["P"] + 1 and r["tau"] == r["X"] + 1.0 and r["nodes"] == r["P"]
    # a rank that pays nothing: brwsim's DP skips it (ranks 0 and 2: 0.5 + 0.4); a tree of contiguous ranks from
    # the top, as Sequoia's tree_search builds, gets at most 0.5 + 0.25 (a chain) at two nodes
    (r,) = sequoia_budgets([0.5, 0.0, 0.4], [2])
    assert r["X"] == pytest.approx(0.9) and r["paths"] == [[0], [2]] and r["depth"] == 1
    (r,) = sequoia_budgets([0.5, 0.3], [3], depth=1)  # max_depth 2 in Sequoia's count: one level below the root
    assert r["X"] == pytest.approx(0.8) and r["paths"] == [[0], [1]]


# ---------------------------------------------------------------------------------------------------------------
# brwsim plan: hostile inputs are one line, before any slow work


def _plan(capsys, *args):
    from brwsim.cli import main

    code = main(["plan", *args])
    return code, capsys.readouterr()


def test_plan_hostile_inputs_are_one_line(tmp_path, capsys, monkeypatch):
    code, out = _plan(capsys, "--from-json", str(tmp_path), "--hardware", "h100", "--params", "8e9")
    assert code == 2 and "is a directory" in out.err and out.err.count("\n") == 1
    code, out = _plan(capsys, "--law", "fixed:probs=0.6/0.4", "--hardware", "h100", "--params", "5e-324",
                      "--overhead", "0")  # fmt: skip
    assert code == 2 and "t_verify(0) = 0.0 s" in out.err and out.err.count("\n") == 1
    import brwsim.cli._plan as plan

    monkeypatch.setattr(plan, "load_source", lambda *a, **k: pytest.fail("the model loaded before the drafter check"))
    code, out = _plan(capsys, "--model", "smollm2-135m", "--hardware", "h100", "--drafter", "model:/nonexistent/x")
    assert code == 2 and "is not a directory" in out.err
    code, out = _plan(capsys, "--acceptance", "0.6,0.7", "--hardware", "h100", "--params", "8e9")
    assert code == 2 and "summing to at most 1" in out.err
    code, out = _plan(capsys, "--law", "fixed:probs=1", "--acceptance", "0.5", "--hardware", "h100")
    assert code == 2 and "exactly one of" in out.err
    code, out = _plan(capsys, "--law", "fixed:probs=1", "--tree-depth", "2", "--hardware", "h100", "--params", "1e9")
    assert code == 2 and "--tree-depth D (>= 1) goes with --acceptance" in out.err


def test_plan_acceptance_gives_trees_values_and_the_speedup(capsys):
    # a flat verifier (custom roofline, memory-bound up to far past the grid): the grid grows to the cap
    args = ["--acceptance", "0.5,0.3", "--hardware", "custom:bw=1e12,flops=1e18", "--params", "1e9", "--P", "1,2"]
    code, out = _plan(capsys, *args, "--P-max", "8", "--json")
    d = json.loads(out.out)
    assert code == 0 and [r["P"] for r in d["sequoia"]] == [1, 2, 4, 8]
    assert d["sequoia"][0] == {"P": 1, "X": 0.5, "m": 2, "tau": 1.5, "depth": 1, "nodes": 1, "paths": [[0]]}
    best = d["tables"][0]["best"]
    assert best["P"] == 8 and best["text"] == "at least P = 8, still rising (the grid stops at P_max = 8)"
    assert best["speedup"] == pytest.approx(d["sequoia"][-1]["tau"], rel=1e-6)  # flat t_verify: speedup = tau
    code, out = _plan(capsys, *args, "--P-max", "8")
    assert code == 0 and "Sequoia's terms: its budget m = P + 1 counts the root" in out.out
    assert "best at least P = 8, still rising" in out.out and "nodes per level" in out.out


@pytest.mark.needs_llm
def test_footprints_of_real_drafters_on_a_tiny_llama():
    pytest.importorskip("torch")
    from tiny_llm import tiny_llama

    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters._hf import model_footprint
    from brwsim.llm.sources._hf import HFSource

    model = tiny_llama(11, n_layers=3)
    src = HFSource(model, None, name="tiny", threads=1, device="cpu")
    n = {k: sum(p.numel() for p in m.parameters()) for k, m in (("layer", model.model.layers[0]),)}
    total = sum(p.numel() for p in model.parameters())  # tied or not: each tensor once
    target = model_footprint(model)
    assert target.params == total and target.kv_values == 2 * 3 * 1 * 8 and target.layers == 3
    ee = open_drafter("early-exit:k=1", src)
    assert ee.footprint().params == total - 2 * n["layer"] and ee.footprint().kv_values == 2 * 1 * 8
    assert ee.cost_fraction(context=5) == ee.footprint().nbytes(4, 4, 5) / target.nbytes(4, 4, 5)
    low = open_drafter("lowbit:bits=4", src).footprint()
    mats = sum(p.numel() for p in model.parameters() if p.ndim == 2)
    assert low.weights == ((float(mats), 4.0), (float(total - mats), None)) and low.kv_values == target.kv_values
    full = open_drafter("early-exit:k=3", src)
    assert full.cost_fraction() == 1.0  # the target itself
    assert open_drafter("lookup", src).cost_fraction() == 0.0


@pytest.mark.needs_llm
def test_the_quick_heads_footprint_and_its_pass_timed_against_the_target(tmp_path, monkeypatch):
    """The quick head (the full head's architecture) on a tiny Llama with the shipped vocabulary: its footprint is
    its own layer and fc map plus the target's final norm and LM head, and measure_draft_cost times its pass
    interleaved with the target's step."""
    pytest.importorskip("torch")
    from tiny_llm import tiny_llama
    from transformers import AutoTokenizer

    from brwsim.llm.drafters import eagle_head
    from brwsim.llm.sources._hf import HFSource
    from brwsim.llm.sources._models import converted
    from brwsim.speedup import measure_draft_cost

    tok = AutoTokenizer.from_pretrained(str(converted("smollm2-135m")))
    target = HFSource(tiny_llama(49152, n_layers=2, seed=3), tok, name="tiny-cost-test")
    monkeypatch.setitem(os.environ, "BRWSIM_CACHE", str(tmp_path))
    head = eagle_head.open_drafter(target, quick=True, progress=False)
    fp = head.footprint()
    m = target.model
    own = sum(p.numel() for p in head.head.parameters()) + sum(p.numel() for p in m.model.norm.parameters())
    assert fp.params == own + m.lm_head.weight.numel() and fp.layers == 1
    assert fp.kv_values == 2 * head.head.kv_heads * head.head.head_dim
    assert head.cost_fraction(8) == fp.nbytes(4, 4, 8) / head.target_footprint.nbytes(4, 4, 8)
    dc = measure_draft_cost(head, target, context=8, repeats=3)
    assert dc.kind == "measured" and dc.repeats == 3 and dc.t_pass > 0 and dc.t_step > 0
    assert dc.fraction > 0 and dc.t_pass_ci95 is not None and "of the target's step" in dc.label


def test_plan_law_grows_its_grid_past_the_given_budgets(capsys):
    # ridge at P + 1 = flops * 2 / (2 bw) = 8: t_verify flat up to P = 7, then linear; the fixed law's E[X] is exact
    argv = ["--law", "fixed:probs=0.6/0.3/0.1", "--hardware", "custom:bw=1e12,flops=8e12", "--params", "1e9",
            "--P", "1,2", "--trees", "4", "--json"]  # fmt: skip
    code, out = _plan(capsys, *argv)
    t = json.loads(out.out)["tables"][0]
    Ps = [r["P"] for r in t["rows"]]
    assert code == 0 and Ps[:3] == [0, 1, 2] and Ps[3:] == [2 ** (i + 2) for i in range(len(Ps) - 3)]
    best = max(t["rows"], key=lambda r: r["speedup"])["P"]
    assert (
        t["best"]["P"] == best and 2 < best < Ps[-1] and not t["best"]["at_edge"] and t["best"]["text"] == f"P = {best}"
    )
