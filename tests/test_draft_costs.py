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
    tf = PassFootprint(((1000.0, None),))
    d = SimpleNamespace(name="q", footprint=lambda: fp, target_footprint=tf)
    dc = derived_draft_cost(cost, d)
    assert dc.t_pass == 5.0 and dc.fraction == 0.25 and dc.kind == "derived" and dc.t_draft(4) == 20.0
    assert dc.label == ("q: 5000 ms per pass on the roofline, 0.25 of a decoding step (0.0005 MB read against its "
                        "target's 0.002 MB: a quarter of the weights)")  # fmt: skip
    # a larger target on the roofline: the pass keeps its fraction of the step it was derived against
    big = RooflineCost(HW, ModelShape("big", params=4000.0), 2.0, 9)
    assert derived_draft_cost(big, d).t_pass == 0.25 * big.t_verify(0) == 20.0
    # a 4-bit pass with a KV cache on a table: bytes read at --bytes-per-param b and L, not at the loaded dtype
    four = PassFootprint(((1000.0, 4.0),), kv_values=2)
    tk = PassFootprint(((1000.0, None),), kv_values=2)
    d4 = SimpleNamespace(name="four", footprint=lambda: four, target_footprint=tk)
    table = TableCost({0: 2.0, 4: 3.0})
    dt = derived_draft_cost(table, d4, bytes_per_param=2.0, context=9)
    assert dt.fraction == (500 + 2 * 2 * 10) / (2000 + 2 * 2 * 10) and dt.t_pass == 2.0 * dt.fraction
    assert "at 2 B per value (--bytes-per-param), L = 9" in dt.label
    assert derived_draft_cost(table, d4, bytes_per_param=4.0, context=9).fraction == (500 + 80) / (4000 + 80)
    look = SimpleNamespace(name="look", footprint=lambda: NO_PASS, target_footprint=None)
    assert derived_draft_cost(table, look) == DraftCost(0.0, "P", "look: no model pass (proposals from the context)",
                                                        "none")  # fmt: skip
    unknown = SimpleNamespace(name="u", footprint=lambda: None, target_footprint=None)
    assert derived_draft_cost(table, unknown).kind == "none" and derived_draft_cost(table, unknown).t_pass == 0.0


def _saved_run(footprints: bool) -> dict:
    """A brwsim llm --json run with one 4-bit drafter whose saved fraction is at fp32 (N/32 of the weights)."""
    tf = PassFootprint(((1000.0, None),), kv_values=2, layers=1, attn_dim=4, what="target")
    fp = PassFootprint(((1000.0, 4.0),), kv_values=2, layers=1, attn_dim=4, what="4-bit")
    dr = {"name": "lowbit:bits=4", "prompts": 2, "builders": ["topq"], "draft_fraction": 0.2,
          "results": [{"P": 1, "topq": 0.5, "topq_ci95": 0.1, "best_builder": "topq"}]}  # fmt: skip
    if footprints:
        dr |= {"footprint": fp.to_dict(), "target_footprint": tf.to_dict()}
    res = [{"P": 1, "mean": 0.8, "ci95": 0.1}]
    return {"model": "m", "tasks": [{"task": "code", "prompts": 2, "results": res, "drafters": [dr]}]}


def test_a_saved_run_is_re_derived_from_its_footprints_on_the_planners_cost():
    from brwsim.llm.results import run_from_dict
    from brwsim.speedup import from_llm, modelled_draft_cost

    run = run_from_dict(_saved_run(True))
    d = run.tasks[0].drafters[0]
    assert run_from_dict(run.to_dict()).to_dict() == run.to_dict() and d.footprint["weights"] == [[1000.0, 4.0]]
    cost = RooflineCost(HW, ModelShape("toy", 1000.0, 1, 1, 1, 4), 2.0, 9)  # the target's own shape
    dc = modelled_draft_cost(cost, d)
    assert dc.t_pass == pytest.approx((500 + 2 * 2 * 10) / 100.0, rel=1e-12) and dc.fraction != 0.2
    assert dc.label.endswith("(from the run's saved footprints)")
    table = TableCost({0: 1.0, 1: 1.0})
    tables = from_llm(run, table, bytes_per_param=1.0, context=9)
    assert tables[1].draft.fraction == (500 + 20) / (1000 + 20)  # the target at 1 byte a value, as told
    old = run_from_dict(_saved_run(False)).tasks[0].drafters[0]  # no footprints: the saved fraction, said so
    dc = modelled_draft_cost(cost, old)
    assert dc.fraction == 0.2 and "the run's saved fraction" in dc.label and "no footprints" in dc.label


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
    assert model.get_input_embeddings().weight is not model.lm_head.weight  # untied: the embedding is a lookup
    # hand count: 3 layers (q, o 16x16; k, v 16x8; gate, up, down 16x32; two norms), final norm, LM head 11x16
    layer = 2 * 16 * 16 + 2 * 16 * 8 + 3 * 16 * 32 + 2 * 16
    assert n["layer"] == layer
    total = 3 * layer + 16 + 11 * 16  # the 11x16 input embedding is not read, only one row of it looked up
    target = model_footprint(model)
    assert target.params == total and target.kv_values == 2 * 3 * 1 * 8 and target.layers == 3
    ee = open_drafter("early-exit:k=1", src)
    assert ee.footprint().params == total - 2 * n["layer"] and ee.footprint().kv_values == 2 * 1 * 8
    assert ee.cost_fraction(context=5) == ee.footprint().nbytes(4, 4, 5) / target.nbytes(4, 4, 5)
    low = open_drafter("lowbit:bits=4", src).footprint()
    norms = 3 * 2 * 16 + 16  # every 1-D weight; the matrices, LM head included, at 4 bits
    assert low.weights == ((float(total - norms), 4.0), (float(norms), None)) and low.kv_values == target.kv_values
    full = open_drafter("early-exit:k=3", src)
    assert full.cost_fraction() == 1.0  # the target itself
    assert open_drafter("lookup", src).cost_fraction() == 0.0
    # what a brwsim llm --json run saves for the planner: both footprints, read back exactly
    from brwsim.llm.results import footprint_fields

    saved = json.loads(json.dumps(footprint_fields(ee)))
    assert PassFootprint.from_dict(saved["footprint"]) == ee.footprint()
    assert PassFootprint.from_dict(saved["target_footprint"]) == ee.target_footprint and target.params == total
    assert PassFootprint.from_dict(footprint_fields(open_drafter("lookup", src))["footprint"]).empty


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


def test_measured_draft_cost_is_a_mean_with_t_intervals(monkeypatch):
    import brwsim.speedup._sources as sources
    from brwsim._stats import t95

    times = {"target": [2.0, 4.0, 2.0], "draft": [1.0, 1.0, 2.0]}
    monkeypatch.setattr(sources, "interleaved_times", lambda calls, repeats, device: times)
    monkeypatch.setattr(sources, "decode_step_timer", lambda src, context, seed: None)
    d = SimpleNamespace(name="toy", pass_timer=lambda context, seed: lambda: None)
    dc = sources.measure_draft_cost(d, target=SimpleNamespace(device="cpu"), repeats=3)
    assert dc.t_pass == pytest.approx(4 / 3) and dc.t_step == pytest.approx(8 / 3) and dc.repeats == 3
    assert dc.t_pass_ci95 == pytest.approx(t95(3) * np.std([1, 1, 2], ddof=1) / np.sqrt(3))
    ratios = [0.5, 0.25, 1.0]  # per round: pass / step
    assert dc.fraction == pytest.approx(np.mean(ratios))
    assert dc.fraction_ci95 == pytest.approx(t95(3) * np.std(ratios, ddof=1) / np.sqrt(3))
    assert "0.583 +- " in dc.label and DraftCost(**dc.to_dict()) == dc


def test_the_grid_never_says_it_stops_at_p_max_past_a_larger_p():
    flat = TableCost({0: 1.0, 64: 1.0})
    make = lambda Ps: speedup_table([(P, _ex(P), 0.0) for P in Ps], flat)  # noqa: E731
    t = grown_table(make, [1, 32], flat, P_cap=8)  # a budget given past P_max: shown, not grown
    assert [r.P for r in t.rows] == [0, 1, 32] and t.limit == "the budgets given pass P_max = 8: the grid was not grown"
    t = grown_table(make, [1, 4], flat, P_cap=12)  # doubling 8 passes P_max: the grid ends at P_max itself
    assert [r.P for r in t.rows] == [0, 1, 4, 8, 12] and t.limit == "the grid stops at P_max = 12"


def test_a_chain_thousands_of_levels_deep_is_built_without_recursion():
    (r,) = sequoia_budgets([0.99], [3000])
    assert r["depth"] == r["nodes"] == 3000 and r["paths"][-1] == [0] * 3000
    assert r["X"] == pytest.approx(sum(0.99**i for i in range(1, 3001)), rel=1e-12)


def test_experiment_cpu_draft_cost_is_the_interleaved_fraction_of_the_tables_step():
    from experiments.speedup import _draft_cost

    c = {"name": "lowbit:bits=4", "t_pass": 9.0, "fraction": 0.5, "fraction_ci95": 0.1, "timed": "lowbit:bits=4",
         "repeats": 5, "t_pass_ci95": 0.2, "t_step": 18.0}  # fmt: skip
    dc = _draft_cost(c, "cpu", 2.0)  # the pass's 9 s from another session is not mixed with this t_verify(0)
    assert dc.t_pass == 1.0 and dc.fraction == 0.5 and dc.fraction_ci95 == 0.1 and dc.kind == "measured"


def _hand_count(cfg) -> dict:
    """Parameters read per decoding step of a tied Llama-style config, counted from its shapes by hand."""
    h, inter, heads, kv, hd = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, \
        cfg.num_key_value_heads, cfg.head_dim  # fmt: skip
    layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter + 2 * h
    lm_head = cfg.vocab_size * h
    norms = 2 * h * cfg.num_hidden_layers + h
    return {"layer": layer, "lm_head": lm_head, "total": cfg.num_hidden_layers * layer + h + lm_head,
            "fc": 2 * h * h + h, "head": (2 * h * h + h) + layer + h + lm_head, "norms": norms,
            "kv": 2 * cfg.num_hidden_layers * kv * hd, "head_kv": 2 * kv * hd}  # fmt: skip


@pytest.mark.needs_llm
def test_smollm2_footprints_pinned_from_its_config():
    """SmolLM2-135M built on the meta device from its config (no weights): the footprints against a hand count of
    its shapes, and the H100 bf16 L = 512 fractions of docs/speedup.md."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    from brwsim.llm.drafters._hf import model_footprint
    from brwsim.llm.drafters.eagle_head._drafter import EagleDraftModel
    from brwsim.llm.drafters.eagle_head._model import Head
    from brwsim.llm.sources._models import converted
    from brwsim.speedup import PRESETS, shape_of_hf

    cfg = AutoConfig.from_pretrained(str(converted("smollm2-135m")))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
        head = Head(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size, 1e-5)
    assert cfg.tie_word_embeddings and model.get_input_embeddings().weight is model.lm_head.weight
    n = _hand_count(cfg)
    assert (n["total"], n["head"], n["fc"], n["layer"], n["lm_head"]) == (134_515_008, 32_516_352, 664_128,
                                                                         3_540_096, 28_311_552)  # fmt: skip
    target = model_footprint(model)
    assert target.params == n["total"] and target.kv_values == n["kv"] and shape_of_hf(model).params == n["total"]
    eagle = EagleDraftModel.footprint(SimpleNamespace(target=SimpleNamespace(model=model), head=head))
    assert eagle.params == n["head"] and eagle.kv_values == n["head_kv"]
    cost = RooflineCost(PRESETS["h100"], shape_of_hf(model), 2.0, 512)
    t0 = (2 * n["total"] + 2 * n["kv"] * 513) / 3.35e12  # memory-bound: bytes / bandwidth
    assert cost.t_verify(0) == pytest.approx(t0, rel=1e-12) == cost.pass_time(target)
    mats = n["total"] - n["norms"]
    low = (0.5 * mats + 2 * n["norms"] + 2 * n["kv"] * 513) / 3.35e12
    assert cost.pass_time(model_footprint(model, bits=4)) == pytest.approx(low, rel=1e-12)
    assert round(low / t0, 4) == 0.2818
    head_t = (2 * n["head"] + 2 * n["head_kv"] * 513) / 3.35e12
    assert cost.pass_time(eagle) == pytest.approx(head_t, rel=1e-12) and round(head_t / t0, 4) == 0.2330


@pytest.mark.needs_llm
def test_a_tied_tiny_model_counts_its_embedding_once_as_the_lm_head():
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    from brwsim.llm.drafters._hf import model_footprint
    from brwsim.speedup import shape_of_hf

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=11, num_hidden_layers=2, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    assert model.get_input_embeddings().weight is model.lm_head.weight
    layer = 2 * 16 * 16 + 2 * 16 * 8 + 3 * 16 * 32 + 2 * 16
    total = 2 * layer + 16 + 11 * 16  # the tied matrix once
    assert model_footprint(model).params == total == shape_of_hf(model).params
    assert model_footprint(model, keep=[0]).params == total - layer


def test_plan_from_json_re_derives_a_saved_drafter_on_the_hardware_asked(tmp_path, capsys):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_saved_run(True)))
    code, out = _plan(capsys, "--from-json", str(f), "--hardware", "h100", "--params", "1000", "--json")
    d = json.loads(out.out)["tables"][1]["draft_cost"]
    # bf16 target and KV cache, L = 512, memory-bound: (1000 x 0.5 + 2 x 2 x 513) / (1000 x 2 + 2 x 2 x 513)
    assert code == 0 and d["fraction"] == pytest.approx(2552 / 4052, rel=1e-12) and d["fraction"] != 0.2
    csv = tmp_path / "cost.csv"
    csv.write_text("P,seconds\n0,1.0\n1,1.0\n")
    code, out = _plan(capsys, "--from-json", str(f), "--hardware", f"csv:{csv}", "--bytes-per-param", "4",
                      "--context", "9", "--json")  # fmt: skip
    d = json.loads(out.out)["tables"][1]["draft_cost"]
    assert code == 0 and d["fraction"] == pytest.approx((500 + 80) / (4000 + 80), rel=1e-12)
    assert "at 4 B per value (--bytes-per-param), L = 9" in d["label"]


def test_plan_acceptance_near_one_grows_a_deep_chain_without_recursion(capsys):
    code, out = _plan(capsys, "--acceptance", "0.99", "--hardware", "custom:bw=1e12,flops=1e18", "--params", "1e9",
                      "--P", "1024", "--P-max", "2048", "--json")  # fmt: skip
    d = json.loads(out.out)
    assert code == 0 and [r["P"] for r in d["sequoia"]] == [1024, 2048] and d["sequoia"][-1]["depth"] == 2048


@pytest.mark.needs_llm
def test_a_model_dir_drafter_reads_its_weights_at_its_own_dtype(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    from tiny_llm import tiny_llama
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.sources._hf import HFSource

    words = ["<unk>", "a", "b", "c", "d", "e", "f"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0])
    target = HFSource(tiny_llama(7, n_layers=2).to(torch.bfloat16), tok, name="tiny", threads=1)
    tiny_llama(7, n_layers=1, seed=1).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    d = open_drafter(f"model:{tmp_path}", target)
    assert next(d.src.model.parameters()).dtype == torch.float32 and d.target_bits == 16.0
    layer = 2 * 16 * 16 + 2 * 16 * 8 + 3 * 16 * 32 + 2 * 16
    assert d.footprint().weights == ((float(layer + 16 + 7 * 16), 32.0),)  # fp32 as loaded, not the target's bf16


# ---------------------------------------------------------------------------------------------------------------
# Draft costs per target call (measured in speculative decoding)


def test_per_call_draft_cost_is_interpolated_between_budgets_and_never_extrapolated():
    dc = DraftCost(0.5, ((1, 2.0), (4, 5.0)), "toy", "measured", per_call=((1, 0.1), (4, 0.4)))
    assert dc.t_draft(0) == 0.0 and dc.t_draft(1) == 0.1 and dc.t_draft(4) == 0.4
    assert dc.t_draft(2) == pytest.approx(0.2) and dc.n_passes(3) == pytest.approx(4.0)
    with pytest.raises(BrwsimError, match="P = 1 .. 4; P = 8 is outside: measure that budget"):
        dc.t_draft(8)
    per_pass = DraftCost(0.5, ((1, 2.0), (4, 5.0)), "toy", "measured")  # passes per call x one pass
    assert per_pass.t_draft(4) == 2.5 and per_pass.t_draft(2) == pytest.approx(1.5)
    assert DraftCost(0.5).t_draft(3) == 1.5 and DraftCost(0.5, 2).t_draft(9) == 1.0  # one a node; level by level
    t = speedup_table([(1, 0.5, 0.0), (4, 1.0, 0.0)], TableCost({0: 1.0, 1: 1.0, 4: 1.0}), dc)
    assert [r.t_draft for r in t.rows] == [0.0, 0.1, 0.4] and t.rows[2].speedup == pytest.approx(2.0 / 1.4)


def test_a_pass_of_several_rows_reads_the_weights_once():
    shape = ModelShape("toy", params=1000.0, layers=2, kv_heads=1, head_dim=4, attn_dim=8)
    fp = PassFootprint(((1000.0, None),), shape.kv_values_per_token(), 2, 8)
    mem = RooflineCost(HW, shape, 2.0, 9)  # memory-bound: each extra row adds its KV values only
    assert mem.pass_time(fp, 1.0) == mem.pass_time(fp) == (2000 + 16 * 2 * 10) / 100.0
    assert mem.pass_time(fp, 4.0) == (2000 + 16 * 2 * 13) / 100.0
    fast = RooflineCost(Hardware("ridge", 1e12, 1.0), shape, 2.0, 9)  # compute-bound: rows x the FLOPs
    assert fast.pass_time(fp, 3.0) == 3 * fp.flops(9)


def test_draft_calls_give_the_tables_step_times_the_fraction_and_the_roofline_its_passes():
    from brwsim.speedup import DraftCalls

    dc = DraftCalls("toy", (1, 8), (0.25, 1.5), (0.05, None), (0.02, 0.12), (2.0, 5.0), (1.5, 4.0), 0.08, 3, 24)
    cost = dc.cost(2.0)
    assert cost.per_call == ((1, 0.5), (8, 3.0)) and cost.per_call_ci95 == ((1, 0.1), (8, None))
    assert cost.t_draft(8) == 3.0 and cost.n_passes(8) == 5.0 and cost.repeats == 3 and cost.kind == "measured"
    assert DraftCalls.from_dict(json.loads(json.dumps(dc.to_dict()))) == dc
    assert dc.verify is None and dc.verify_cost(2.0) is None  # a record made before the loop's verify was kept
    full = DraftCalls("toy", (1, 8), (0.25, 1.5), (0.05, None), (0.02, 0.12), (2.0, 5.0), (1.5, 4.0), 0.08, 3, 24,
                      (1.5, 2.0), (0.1, None), (1.0, 6.5))  # fmt: skip
    assert DraftCalls.from_dict(json.loads(json.dumps(full.to_dict()))) == full
    vc = full.verify_cost(2.0)  # 1.5 and 2.0 steps of 2 s at P = 1 and 8, linear between
    assert vc.t_verify(8) == 4.0 and vc.t_verify(4) == pytest.approx(3.0 + 3 / 7)
    shape = ModelShape("toy", params=1000.0, layers=2, kv_heads=1, head_dim=4, attn_dim=8)
    fp = PassFootprint(((1000.0, None),), shape.kv_values_per_token(), 2, 8)
    roof = RooflineCost(HW, shape, 2.0, 9)
    rc = dc.roofline_cost(roof, fp)
    assert rc.t_draft(1) == pytest.approx(2.0 * roof.pass_time(fp, 1.5))
    assert rc.t_draft(8) == pytest.approx(5.0 * roof.pass_time(fp, 4.0)) and rc.kind == "derived"
    assert dc.roofline_cost(roof, NO_PASS).t_draft(8) == 0.0


def test_measure_draft_calls_pairs_each_budget_with_the_plain_runs_around_it(monkeypatch):
    import brwsim.llm.specdec as specdec
    from brwsim._stats import t95
    from brwsim.speedup import measure_draft_calls

    plains = iter([None, 1.0, 3.0, 2.0, None, 1.0, 1.0, 1.0])  # per prompt: warm-up, then one plain per 2 budgets
    spec = iter([(0.4, 2), (0.9, 3), (0.3, 6), (0.2, 2), (0.5, 3), (0.1, 6)])  # (draft seconds per call, passes)

    def plain(target, ids, n, T, rng):
        s = next(plains)
        return SimpleNamespace(seconds=(s or 1.0) * n, tokens=[0] * n)

    def specgen(target, drafter, ids, n, P, T, rng):
        s, k = next(spec)
        return SimpleNamespace(draft_seconds=s * 2, calls=2, draft_passes=2 * k, draft_rows=8 * k,
                               verify_seconds=3 * s * 2, drafted=[P, P - 1])  # fmt: skip

    monkeypatch.setattr(specdec, "plain_generate", plain)
    monkeypatch.setattr(specdec, "speculative_generate", specgen)
    dc = measure_draft_calls(SimpleNamespace(name="toy"), None, [[1], [2]], [1, 2, 4], new_tokens=4)
    # prompt 1: P = 1, 2 between plains 1 and 3 (step 2), P = 4 between 3 and 2 (2.5); prompt 2: every step 1
    f = {1: [0.2, 0.2], 2: [0.45, 0.5], 4: [0.12, 0.1]}
    assert dc.fraction == pytest.approx(tuple(np.mean(f[P]) for P in (1, 2, 4)))
    assert dc.fraction_ci95[0] == pytest.approx(0.0) and dc.fraction_ci95[1] == pytest.approx(
        t95(2) * np.std(f[2], ddof=1) / np.sqrt(2)
    )
    assert dc.passes == (2.0, 3.0, 6.0) and dc.rows == (4.0, 4.0, 4.0)
    # verifying: three times the drafting seconds a call here, over the same plain steps; nodes drafted P - 1/2
    assert dc.verify == pytest.approx(tuple(3 * np.mean(f[P]) for P in (1, 2, 4)))
    assert dc.verify_ci95[1] == pytest.approx(3 * t95(2) * np.std(f[2], ddof=1) / np.sqrt(2))
    assert dc.drafted == (0.5, 1.5, 3.5)
    vc = dc.verify_cost(2.0)
    assert vc.t_verify(0) == 2.0 and vc.t_verify(2) == pytest.approx(2.0 * 3 * np.mean(f[2]))
    assert dc.t_step == pytest.approx(np.mean([1.0, 3.0, 2.0, 1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="budgets must be >= 1"):
        measure_draft_calls(SimpleNamespace(name="toy"), None, [[1]], [0, 1])
