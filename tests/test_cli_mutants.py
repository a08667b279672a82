"""brwsim/cli in the test process: tests written against the survivors of a random sample of mutmut's mutants
(docs/testing.md, "The command line"). No model is loaded and no tree is simulated: the slow calls a command
makes (simulate, a real-model run, a drafter's measurement) are replaced by recorders."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import signal
import types
from pathlib import Path

import pytest

from brwsim import _interrupts as interrupts
from brwsim import cli
from brwsim.cli import _args, _laws, _llm, _plan, _reproduce, _simulate, _table, build_parser, main
from brwsim.errors import BrwsimError
from brwsim.laws import parse_law
from brwsim.llm.results import run_from_dict
from brwsim.speedup import DraftCost, TableCost

GOLDEN = Path(__file__).with_name("test_cli_mutants_options.txt")


def _options() -> str:
    """Every option of ``brwsim`` and its subcommands, one line each: its names, destination, default, type,
    choices, whether required, metavar, nargs, const, and its help text as written (not wrapped to a terminal's
    width)."""
    lines = []
    top = build_parser()
    parsers = [("brwsim", top)]
    for a in top._actions:
        if isinstance(a, argparse._SubParsersAction):
            parsers += [(f"brwsim {name}", p) for name, p in a.choices.items()]
            lines += [f"brwsim: subcommand {c.dest}: {c.help}" for c in a._choices_actions]
    for name, p in parsers:
        defaults = sorted(
            (k, f"{v.__module__}.{v.__qualname__}" if callable(v) else repr(v)) for k, v in p._defaults.items()
        )
        lines.append(f"{name}: prog {p.prog}, description {p.description!r}, defaults {defaults}")
        lines += [f"{name}: group {g.title!r}: {[a.dest for a in g._group_actions]}" for g in p._action_groups]
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                continue
            kind = getattr(a.type, "__name__", a.type)
            lines.append(f"{name}: {' '.join(a.option_strings)} -> {a.dest} = {a.default!r} ({type(a).__name__}, "
                         f"type {kind}, choices {a.choices}, required {a.required}, metavar {a.metavar}, nargs "
                         f"{a.nargs}, const {a.const!r}): {a.help}")  # fmt: skip
    return "\n".join(lines) + "\n"


def test_every_option_its_default_and_help_are_as_written():
    # regenerate after a deliberate change: BRWSIM_WRITE_OPTIONS=1 pytest tests/test_cli_mutants.py
    if os.environ.get("BRWSIM_WRITE_OPTIONS"):
        GOLDEN.write_text(_options())
    assert _options() == GOLDEN.read_text()


def test_the_parser_knows_every_subcommand():
    assert build_parser().parse_args(["laws", "--law", "fixed:probs=1"]).cmd == "laws"


def test_a_command_line_is_parsed_into_each_option():
    p = build_parser()
    args = p.parse_args(["--coordinator", "h:5", "--num-processes", "2", "--process-id", "1", "--join-timeout", "9",
                         "--heartbeat-timeout", "4", "plan", "--law", "fixed:probs=1", "--from-json", "f.json",
                         "--bytes-per-param", "1", "--draft-tokens", "3", "--hardware", "h100"])  # fmt: skip
    assert (args.coordinator, args.num_processes, args.process_id, args.join_timeout, args.heartbeat_timeout) == (
        "h:5", 2, 1, 9, 4)  # fmt: skip
    assert (args.law, args.from_json, args.bytes_per_param, args.draft_tokens, args.hardware) == (
        "fixed:probs=1", "f.json", 1.0, 3, "h100")  # fmt: skip
    args = p.parse_args(["reproduce", "--seed", "3", "--only", "a,b", "--budget-seconds", "2.5", "--quick"])
    assert (args.seed, args.only, args.budget_seconds, args.quick) == (3, "a,b", 2.5, True)


# --- tables ----------------------------------------------------------------------------------------------------


def test_numbers_in_a_table():
    assert (
        _table.fmt(None) == "        -" and _table.fmt(math.nan) == "        -" and _table.fmt(math.inf) == "      inf"
    )
    assert _table.fmt(1.5) == "   1.5000" and _table.fmt(2, 5) == "2.0000" and _table.fmt(None, 3) == "  -"


def test_the_notes_name_each_group_and_the_renewal_form_only_where_it_is():
    groups = [("bounds", ["dual", "splitting"]), ("iid_only", ["renewal"])]
    assert _table.bound_notes(groups) == [
        "[dual, splitting] " + _table.RIGOROUS_NOTE,
        "[renewal] " + _table.IID_ONLY_NOTE,
    ]
    assert _table.bound_notes([("bounds", ["dual", "renewal"])]) == [
        "[dual, renewal] " + _table.RIGOROUS_NOTE + _table.RENEWAL_NOTE
    ]


def test_emit_prints_strict_json_or_the_table(capsys):
    d = {"results": [{"P": 2, "mean": 1.5, "ci95": math.nan}]}
    assert _args.emit(types.SimpleNamespace(json=True), d, None) == 0
    assert json.loads(capsys.readouterr().out) == {"results": [{"P": 2, "mean": 1.5, "ci95": None}]}
    shown = []
    assert _args.emit(types.SimpleNamespace(json=False), d, shown.append) == 0
    assert shown == [d] and capsys.readouterr().out == ""


def _simulated(**extra) -> dict:
    row = {"P": 4, "mean": 1.25, "ci95": 0.125, "bounds": {"dual": 2.5}}
    return {"law": "fixed:probs=0.5/0.5", "mu": 0.5, "mu_se": 0.0, "mu2": 0.25, "mu2_se": 0.01, "trees": 10,
            "seed": 3, "convention": "X = accepted draft tokens", "results": [row]} | extra  # fmt: skip


def test_a_simulation_table_names_its_drafter():
    out = io.StringIO()
    _simulate.print_table(_simulated(drafter="chain", iid=False), out)
    head = out.getvalue().splitlines()[0]
    assert head == "law fixed:probs=0.5/0.5   drafter chain   (Markov law: mu, mu_2 are the spine's long-run values)"
    out = io.StringIO()
    _simulate.print_table(_simulated(), out)
    assert out.getvalue().splitlines()[0] == "law fixed:probs=0.5/0.5   drafter oracle   (i.i.d. law)"
    assert out.getvalue().splitlines()[1] == ("mu = 0.5000 (exact) nats, mu_2 = 0.2500 +- 0.0196 nats^2   trees 10, "
                                              "seed 3")  # fmt: skip


@pytest.mark.parametrize(
    "sig,by,want", [(None, None, ""), (15, None, " by SIGTERM"), (1, 2, " by SIGHUP (sent to process 2)")]
)
def test_an_interrupt_names_its_signal_and_the_process_it_was_sent_to(monkeypatch, sig, by, want):
    monkeypatch.setitem(interrupts._STATE, "signal", sig)
    monkeypatch.setitem(interrupts._STATE, "by", by)
    assert _simulate.interrupted_by() == want


def test_simulate_passes_every_option_on(monkeypatch, capsys):
    seen = {}

    def simulate(law, **kw):
        seen.update(kw, law=law)
        d = _simulated()
        return types.SimpleNamespace(to_dict=lambda: d, interrupted=False, seconds=0.25)

    monkeypatch.setattr(_simulate, "simulate", simulate)
    args = build_parser().parse_args(
        ["simulate", "--law", "L", "--P", "4,1", "--trees", "7", "--seed", "2", "--batch", "3", "--check",
         "--drafter", "chain", "--draft-law", "exact", "--devices", "all", "--checkpoint", "D", "--round-trees", "5",
         "--kernel", "jax"])  # fmt: skip
    assert _simulate._cmd(args) == 0
    assert seen == dict(law="L", P=[4, 1], trees=7, seed=2, batch=3, check=True, progress=None, drafter="chain",
                        draft_law="exact", devices="all", checkpoint="D", round_trees=5, kernel="jax")  # fmt: skip
    assert capsys.readouterr().out.splitlines()[-1] == "(0.2 s)"


# --- brwsim laws ------------------------------------------------------------------------------------------------


class _Curves:
    limit, coverage = 2.0, 1.0

    def threshold_curve(self, t):
        return t, t + 1, t + 2, t + 3


def test_the_spine_curve_has_eight_points_below_the_coverage():
    spine = _laws._curve(_Curves(), 64)
    assert spine["walks"] == 64 and spine["coverage"] == 1.0 and len(spine["curve"]) == 8
    assert list(spine["curve"][0]) == ["t", "N", "N_se", "value", "value_se"]
    t = spine["curve"][-1]["t"]
    assert t == pytest.approx(1.0 - 1e-9) and spine["curve"][-1]["value_se"] == pytest.approx(t + 3)


def test_walks_that_do_not_fit_name_their_steps(monkeypatch):
    monkeypatch.setattr(_laws, "available_memory", lambda: 1000.0)
    law = parse_law("fixed:probs=0.5/0.5")
    with pytest.raises(BrwsimError) as e:
        _laws.check_walks_memory(law, 2, 1, 1.0)  # s_max = ln(1) + 3: 64 + 6 steps
    assert str(e.value) == (
        "--walks 2 needs about 8.96e-06 GB (up to 70 steps of 64 bytes per walk), more than the 8e-07 GB a run may "
        "use here (80% of the memory available): the largest that fits is about --walks 0"
    )


def test_laws_needs_two_walks_and_names_itself_when_the_spine_is_too_costly():
    with pytest.raises(BrwsimError) as e:
        _laws.laws_summary("fixed:probs=1", [1], walks=1)
    assert str(e.value) == "walks must be an integer >= 2, got 1"
    with pytest.raises(BrwsimError) as e:
        _laws.laws_summary("logitnormal:V=100000,sigma=1", [1], walks=2**20)
    assert str(e.value).startswith("brwsim laws of logitnormal:V=100000,sigma=1")
    assert "take 1048576 spine walks" in str(e.value)


def test_a_laws_summary_is_printed_whole(capsys):
    row = {"P": 4, "bounds": {"dual": 2.5}, "dual_estimate": 2.25, "dual_se": 0.125}
    d = {"law": "L", "iid": True, "vocab": 3, "mu": 0.5, "mu_se": 0.0, "mu2": 0.25, "mu2_se": 0.5,
         "states": {"a": {"fraction": 0.75, "mu": 0.5, "mu2": 0.25}},
         "spine": {"walks": 8, "coverage": 2.0, "curve": [{"t": 1.0, "N": 3.0, "value": 0.5}]},
         "convention": "C", "results": [row]}  # fmt: skip
    _laws.print_summary(d)
    assert capsys.readouterr().out.splitlines() == [
        "law L   i.i.d., V = 3",
        "mu = 0.5000 (exact) nats, mu_2 = 0.2500 +- 0.9800 nats^2",
        "  state a: long-run fraction 0.7500, mu = 0.5000, mu_2 = 0.2500",
        "spine: 8 walks, observed up to S = 2.000",
        "       t      E[N(t)]  E[tau_t]-1   (threshold tree {V <= t}: size, value)",
        "   1.000         3.00      0.5000",
        "C",
        "          rigorous bounds ",
        "      P       dual      dual est +- se",
        "      4     2.5000     2.2500 +- 0.1250",
        "[dual] " + _table.RIGOROUS_NOTE,
    ]


# --- brwsim reproduce -------------------------------------------------------------------------------------------


def test_an_interrupted_reproduce_counts_only_this_runs_points(monkeypatch, capsys):
    from experiments import common

    monkeypatch.setattr(common, "COUNTERS", {"computed": 5, "cached": 2})

    def run(**kw):
        common.COUNTERS["computed"] += 3
        common.COUNTERS["cached"] += 1
        raise KeyboardInterrupt

    monkeypatch.setattr(_reproduce, "run", run)
    args = build_parser().parse_args(["reproduce", "--quick"])
    assert _reproduce._cmd(args) == 130
    err = capsys.readouterr().err
    assert err.startswith("brwsim: interrupted: 3 point(s) computed and cached in this run, 1 read from the cache")


# --- brwsim plan ------------------------------------------------------------------------------------------------


def _saved(tmp_path, d: dict) -> str:
    f = tmp_path / "run.json"
    f.write_text(json.dumps(d))
    return str(f)


SIMULATED = {"law": "L", "trees": 9, "drafter": "chain",
             "results": [{"P": 1, "mean": 0.5, "ci95": 0.1}, {"P": 2, "mean": 0.9, "ci95": None}]}  # fmt: skip


def test_plan_from_a_saved_simulation(tmp_path, capsys):
    assert main(["plan", "--from-json", _saved(tmp_path, SIMULATED), "--hardware", "h100", "--params", "1e9",
                 "--json"]) == 0  # fmt: skip
    (t,) = json.loads(capsys.readouterr().out)["tables"]
    assert t["drafter"] == "chain" and [r["P"] for r in t["rows"]] == [0, 1, 2]


def test_plan_from_a_saved_real_model_run(tmp_path, capsys):
    res = [{"P": 1, "mean": 0.8, "ci95": 0.1}, {"P": 2, "mean": 1.2, "ci95": 0.2}]
    run = {"model": "m", "vocab_size": 9, "tasks": [{"task": "code", "prompts": 2, "results": res}]}
    assert main(["plan", "--from-json", _saved(tmp_path, run), "--hardware", "h100", "--params", "1e9", "--json"]) == 0
    (t,) = json.loads(capsys.readouterr().out)["tables"]
    assert t["drafter"] == "oracle" and [r["ex"] for r in t["rows"]] == [0.0, 0.8, 1.2]


def test_plan_refuses_a_saved_file_of_another_kind_and_rows_without_a_budget(tmp_path, capsys):
    path = _saved(tmp_path, {"law": "L"})
    assert main(["plan", "--from-json", path, "--hardware", "h100", "--params", "1e9"]) == 2
    assert capsys.readouterr().err == (f"brwsim: error: --from-json {path!r} is neither a brwsim simulate nor a "
                                       "brwsim llm --json output\n")  # fmt: skip
    with pytest.raises(BrwsimError) as e:
        _plan._check_rows([{"P": 0, "mean": 0.0}], "f")
    assert str(e.value) == "--from-json 'f': row 0 has P = 0; P must be an integer >= 1"


def test_a_plan_table_goes_where_it_is_sent(tmp_path, capsys):
    args = build_parser().parse_args(["plan", "--from-json", _saved(tmp_path, SIMULATED), "--hardware", "h100",
                                      "--params", "1e9"])  # fmt: skip
    tables = _plan.tables_for(args)
    out = io.StringIO()
    _plan.print_plan(tables, out)
    assert capsys.readouterr().out == ""
    lines = out.getvalue().splitlines()
    head = "    P     E[X]   +-95%  t_verify ms t_draft ms  speedup   +-95%"
    assert head in lines and len([ln for ln in lines if ln.startswith("    2 ")]) == 1


def test_the_user_draft_cost(monkeypatch):
    args = types.SimpleNamespace(draft_pass_seconds=0.002, draft_passes=None)
    assert _plan._user_draft(args, "chain") == DraftCost(0.002, "P", "chain: 2 ms per pass, one pass per drafted token",
                                                         "user")  # fmt: skip
    args = types.SimpleNamespace(draft_pass_seconds=0.0, draft_passes=3)
    assert _plan._user_draft(args, "x") == DraftCost(0.0, 3, "x: 0 ms per pass, one pass per tree (3 passes)", "none")


def test_plan_of_a_law_simulates_the_oracle_and_the_drafter_quietly(monkeypatch, capsys):
    calls = []

    def simulate(law, **kw):
        calls.append((law, kw))
        rows = [types.SimpleNamespace(P=p, stat=types.SimpleNamespace(mean=min(p, 2) * 0.5, ci95=0.0)) for p in kw["P"]]
        return types.SimpleNamespace(results=rows, drafter=kw.get("drafter") or "oracle", law=law, trees=kw["trees"])

    monkeypatch.setattr(_plan, "simulate", simulate)
    assert main(["plan", "--law", "L", "--hardware", "h100", "--params", "1e9", "--P", "1,2,4", "--trees", "5",
                 "--seed", "6", "--drafter", "chain", "--draft-law", "exact", "--json"]) == 0  # fmt: skip
    assert calls[0] == ("L", dict(P=[1, 2, 4], trees=5, seed=6, progress=False))
    assert ("L", dict(P=[1, 2, 4], drafter="chain", draft_law="exact", trees=5, seed=6, progress=False)) in calls
    capsys.readouterr()


def test_plan_takes_one_or_more_draft_tokens(capsys):
    common = ["plan", "--acceptance", "0.5", "--hardware", "h100", "--params", "1e9", "--P", "1", "--json"]
    assert main([*common, "--draft-tokens", "1", "--draft-prompts", "1"]) == 0
    capsys.readouterr()
    assert main([*common, "--draft-tokens", "0"]) == 2
    assert "--draft-prompts and --draft-tokens must be >= 1, got 2, 0" in capsys.readouterr().err


def test_plan_of_an_acceptance_vector_prints_sequoias_trees(capsys):
    common = ["plan", "--acceptance", "0.6,0.2", "--hardware", "h100", "--params", "1e9", "--P", "1,2,3"]
    assert main([*common, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [t["P"] for t in d["sequoia"]][:3] == [1, 2, 3] and d["tables"][0][
        "drafter"
    ] == "sequoia (acceptance vector)"
    assert main(common) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "acceptance rates a[rank 1..2]: 0.6, 0.2"
    assert lines[3] == f"{1:>5} {2:>5} {0.6:>9.5f} {1.6:>9.5f} {1:>5}"
    assert any(ln.startswith("tree at P = ") and "nodes per level [" in ln for ln in lines)


class _Drafter:
    name = "lookup:n=3"

    def __init__(self, footprint=None):
        self.fp = footprint

    def footprint(self):
        return self.fp


def test_a_real_drafters_cost_is_measured_on_cpu_measured(monkeypatch):
    got = {}

    def measure(d, source, ids, P, tokens, T, seed, name):
        got.update(ids=ids, P=P, tokens=tokens, seed=seed)
        return types.SimpleNamespace(cost=lambda t0: ("measured", t0))

    monkeypatch.setattr(_plan, "measure_draft_calls", measure)
    monkeypatch.setattr(
        _plan, "load_prompts", lambda prompts, n: [types.SimpleNamespace(text=f"p{i}") for i in range(n)]
    )
    args = types.SimpleNamespace(hardware=" cpu-measured ", draft_prompts=2, draft_tokens=4, seed=1)
    source = types.SimpleNamespace(encode=lambda text: [len(text), ord(text[-1])])
    cost = types.SimpleNamespace(t_verify=lambda P: 0.5)
    opts = types.SimpleNamespace(prompts="humaneval", n=3)
    assert _plan._drafting(args, _Drafter(), source, cost, [1, 2], opts) == ("measured", 0.5)
    assert got == dict(ids=[[2, ord("0")], [2, ord("1")]], P=[1, 2], tokens=4, seed=1)


def test_a_real_model_plan_asks_the_cost_at_its_budgets(monkeypatch, capsys):
    seen = {}

    def verify_cost(hw, **kw):
        seen.update(kw, hw=hw)
        return TableCost({0: 1.0, 1: 1.0, 2: 1.0})

    res = [{"P": 1, "mean": 0.5, "ci95": 0.1}, {"P": 2, "mean": 0.75, "ci95": 0.1}]
    run = run_from_dict({"model": "m", "tasks": [{"task": "code", "prompts": 1, "results": res}]})
    monkeypatch.setattr(_plan, "verify_cost", verify_cost)
    monkeypatch.setattr(_plan, "load_source", lambda model, threads: "source")
    opened = []
    monkeypatch.setattr(_plan, "open_drafters", lambda *a: opened.append(a) or ([], None))
    monkeypatch.setattr(_plan, "run_llm", lambda opts, source, opened: run)
    assert main(["plan", "--model", "m", "--hardware", "h100", "--params", "1e9", "--P", "1,2", "--json"]) == 0
    assert seen["P"] == [1, 2] and seen["source"] == "source" and seen["model"] == "m" and seen["hw"] == "h100"
    assert opened == [("source", (), 1.0, None, 256)]
    assert json.loads(capsys.readouterr().out)["tables"][0]["drafter"] == "oracle"


# --- brwsim llm -------------------------------------------------------------------------------------------------


def test_a_real_model_table_goes_where_it_is_sent(capsys):
    res = [{"P": 1, "mean": 0.5, "ci95": 0.1, "surrogate": 0.4}]
    run = run_from_dict({"model": "m", "vocab_size": 9, "prompts": "humaneval", "convention": "C", "interrupted": True,
                         "prompts_finished": 1, "prompts_requested": 4,
                         "tasks": [{"task": "code", "prompts": 1, "results": res}]})  # fmt: skip
    out = io.StringIO()
    _llm.print_llm(run, out)
    assert capsys.readouterr().out == ""
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["model m (vocab 9), prompts humaneval, T = 1, C", "(interrupted: 1 of 4 prompts finished)"]


# --- the command --------------------------------------------------------------------------------------------------


def test_only_a_command_that_succeeded_tells_its_peers(monkeypatch):
    told, code = [], {"code": 0}
    monkeypatch.setattr(_simulate, "_cmd", lambda args: code["code"])
    monkeypatch.setattr("brwsim._processes.succeeded", lambda: told.append(True))
    assert main(["simulate", "--law", "L"]) == 0 and told == [True]
    code["code"] = 1
    assert main(["simulate", "--law", "L"]) == 1 and told == [True]
    assert signal.getsignal(signal.SIGTERM) is not None


# --- the second sample's survivors --------------------------------------------------------------------------------


def test_laws_passes_its_law_walks_and_moments_on(monkeypatch):
    seen = {}
    mom = types.SimpleNamespace(mu=0.5, mu2=0.375, mu_se=0.0, mu2_se=0.0, exact=True, per_state=None)
    monkeypatch.setattr(_laws, "moments", lambda key, law: mom)

    def law_curves(key, law, P_max, **kw):
        seen["curves"] = (law.vocab, P_max, kw)
        return _Curves()

    def bounds_from_curves(*args):
        seen["bounds"] = args[1:]
        return []

    monkeypatch.setattr(_laws, "law_curves", law_curves)
    monkeypatch.setattr(_laws, "bounds_from_curves", bounds_from_curves)
    d = _laws.laws_summary("fixed:probs=0.5/0.5", [4, 1], walks=16, seed=3)
    assert seen["curves"] == (2, 4, dict(walks=16, mu_hint=0.5))
    assert seen["bounds"] == ([1, 4], 0.5, 0.375, True, _laws.MARGIN_Z)
    assert d["law"] == "fixed:probs=0.5/0.5" and d["mu2"] == 0.375 and d["results"] == []


def test_laws_prints_its_summary(monkeypatch, capsys):
    got = []
    monkeypatch.setattr(_laws, "laws_summary", lambda *a, **kw: got.append((a, kw)) or {"law": "L"})
    args = build_parser().parse_args(["laws", "--law", "L", "--P", "2,1", "--walks", "9", "--seed", "4", "--json"])
    assert _laws._cmd(args) == 0
    assert got == [(("L", [2, 1]), dict(walks=9, seed=4))] and json.loads(capsys.readouterr().out) == {"law": "L"}


def test_llm_runs_its_options_and_needs_the_extra_only_for_a_model(monkeypatch, capsys):
    needed, runs = [], []
    monkeypatch.setattr(_llm, "require_llm", lambda: needed.append(True))
    res = run_from_dict({"model": "m", "tasks": [{"task": "code", "prompts": 1, "results": []}]})
    monkeypatch.setattr(_llm, "run_llm", lambda opts, log: runs.append((opts, log)) or res)
    monkeypatch.setattr(_llm, "options", lambda args: ("options", args.model, args.n))
    for model, need in [("x.NPZ", 0), ("file:x", 0), ("smollm2-135m", 1)]:
        args = build_parser().parse_args(["llm", "--model", model, "--n", "3", "--json"])
        assert _llm._cmd(args) == 0
        assert len(needed) == need and runs[-1] == (("options", model, 3), None)
    capsys.readouterr()


def test_a_real_model_table_is_printed_whole():
    res = [{"P": 1, "mean": 0.5, "ci95": 0.1, "surrogate": 0.4}]
    walks = {"mu": 0.75, "mu2": 1.5, "mu_ci95": 0.125, "mu2_ci95": 0.25, "walks": 6}
    timing = {"load_seconds": 1.25, "model_phase_seconds": 3.5, "forward_seconds": 1.75, "forward_fraction": 0.5,
              "total_seconds": 5.0, "host_bytes_per_node": 2048.0}  # fmt: skip
    task = {"task": "code", "prompts": 1, "results": res} | walks
    run = run_from_dict({"model": "m", "vocab_size": 9, "prompts": "humaneval", "convention": "C", "temperature": 0.5,
                         "timing": timing, "tasks": [task]})  # fmt: skip
    out = io.StringIO()
    _llm.print_llm(run, out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "model m (vocab 9), prompts humaneval, T = 0.5, C"
    assert lines[1] == ("task code: 1 prompts, mu = 0.7500 +- 0.1250, mu_2 = 1.5000 +- 0.2500 (nats, along 6 sampled "
                        "continuations)")  # fmt: skip
    assert "    P    oracle   +-95% surrogate" in lines
    assert lines[-1] == ("model phase 3.5 s, 50% in forward passes; load 1.2 s; total 5.0 s; 2.0 KiB per node from the "
                         "model's device to the host")  # fmt: skip


def test_plan_takes_one_or_more_draft_passes(capsys):
    common = ["plan", "--acceptance", "0.5", "--hardware", "h100", "--params", "1e9", "--P", "1", "--json"]
    assert main([*common, "--draft-passes", "1"]) == 0
    capsys.readouterr()
    assert main([*common, "--draft-passes", "0"]) == 2
    assert "--draft-pass-seconds must be a finite number >= 0 and --draft-passes >= 1" in capsys.readouterr().err


def test_a_real_drafters_cost_on_a_roofline_needs_its_footprint(monkeypatch):
    class Roofline:
        def t_verify(self, P):
            return 0.5

    derived = []
    monkeypatch.setattr(_plan, "RooflineCost", Roofline)
    monkeypatch.setattr(_plan, "derived_draft_cost", lambda cost, d, b, c: derived.append(d) or "derived")
    monkeypatch.setattr(_plan, "load_prompts", lambda name, n: [types.SimpleNamespace(text="p")])
    dc = DraftCost(0.25, "P", "m", "measured")
    seen = []

    def measure(*a):
        return types.SimpleNamespace(roofline_cost=lambda cost, fp: seen.append((cost, fp)) or dc)

    monkeypatch.setattr(_plan, "measure_draft_calls", measure)
    args = types.SimpleNamespace(hardware="h100", draft_prompts=1, draft_tokens=4, seed=1, bytes_per_param=2.0,
                                 context=512)  # fmt: skip
    source, opts = types.SimpleNamespace(encode=lambda text: [1]), types.SimpleNamespace(prompts="humaneval", n=1)
    d = _Drafter(footprint=7)
    roofline = Roofline()
    assert _plan._drafting(args, d, source, roofline, [1], opts) == dataclasses.replace(dc, fraction=0.5)
    assert seen == [(roofline, 7)] and derived == []  # the pass time at the roofline's own cost
    assert _plan._drafting(args, _Drafter(), source, Roofline(), [1], opts) == "derived" and len(derived) == 1
    assert _plan._drafting(args, d, source, object(), [1], opts) == "derived" and len(derived) == 2


def test_a_saved_simulation_without_its_tree_count_says_so(tmp_path, capsys):
    d = {"results": SIMULATED["results"]}
    path = _saved(tmp_path, d)
    assert main(["plan", "--from-json", path, "--hardware", "h100", "--params", "1e9", "--json"]) == 0
    (t,) = json.loads(capsys.readouterr().out)["tables"]
    assert t["source"] == f"{path} (?, ? trees)" and t["drafter"] == "oracle"


def test_a_plan_table_prints_each_tables_source_and_the_measured_spread():
    args = build_parser().parse_args(
        ["plan", "--acceptance", "0.5", "--hardware", "h100", "--params", "1e9", "--P", "1"]
    )
    (t,) = _plan._acceptance_tables(args, [1], _plan.verify_cost("h100", P=[1], params=1e9))[0]
    t = dataclasses.replace(t, rows=[dataclasses.replace(r, spread=(0.1, 0.2)) for r in t.rows])
    out = io.StringIO()
    _plan.print_plan([t], out)
    lines = out.getvalue().splitlines()
    assert f"{t.drafter}: E[X] from {t.source}; draft cost: {t.draft.label}" in lines
    assert lines[lines.index(f"{t.drafter}: E[X] from {t.source}; draft cost: {t.draft.label}") - 1] == ""
    row = next(ln for ln in lines if ln.startswith("    1 "))
    assert row.startswith(f"    1 {t.rows[1].ex:>8.4f} {t.rows[1].ex_ci95:>7.4f} {1e3 * t.rows[1].t_verify:>12.3f}")
    assert f" {'100.0..200.0':>15} " in row


def test_reproduce_passes_its_options_on(monkeypatch, capsys):
    got = []
    monkeypatch.setattr(_reproduce, "run", lambda **kw: got.append(kw) or "R.md")
    args = build_parser().parse_args(["reproduce", "--seed", "3", "--only", "a,b", "--budget-seconds", "2"])
    assert _reproduce._cmd(args) == 0 and capsys.readouterr().out == "wrote R.md\n"
    assert got == [dict(quick=False, only=["a", "b"], seed=3, budget_seconds=2.0)]


@pytest.mark.parametrize("checkpoint", [None, "D"])
def test_an_interrupted_simulation_says_how_to_keep_or_resume(monkeypatch, capsys, checkpoint):
    monkeypatch.setitem(interrupts._STATE, "signal", None)
    d = _simulated()
    res = types.SimpleNamespace(to_dict=lambda: d, interrupted=True, seconds=1.0, trees=3, trees_requested=10,
                                checkpoint=checkpoint)  # fmt: skip
    monkeypatch.setattr(_simulate, "simulate", lambda law, **kw: res)
    assert _simulate._cmd(build_parser().parse_args(["simulate", "--law", "L", "--json"])) == 130
    kept = ("; the finished rounds are kept in D: rerun the same command to resume" if checkpoint
            else "; run with --checkpoint DIR to keep finished rounds for a rerun")  # fmt: skip
    assert capsys.readouterr().err == (f"brwsim: interrupted after 3 of 10 trees: the estimates above use the finished "
                                       f"trees; no bounds were computed{kept}\n")  # fmt: skip


def test_bound_groups_in_their_order():
    rows = [{"iid_only": {"renewal": 1.0}, "predictions": {"asymptotic": 2.0}}, {"bounds": {"dual": 1.0},
            "predictions": {"theorem1_leading": 3.0, "asymptotic": 2.5}}]  # fmt: skip
    assert _table.bound_groups(rows) == [
        ("bounds", ["dual"]), ("predictions", ["asymptotic", "theorem1_leading"]), ("iid_only", ["renewal"])
    ]  # fmt: skip


def test_expected_values_in_zero_to_P_with_a_rounding_slack():
    P = 4
    _table.check_expected_values({"P": P, "mean": -0.5 * _table.EX_TOL * P, "ex": P * (1 + 0.5 * _table.EX_TOL)})
    for v in (-2 * _table.EX_TOL * P, P * (1 + 2 * _table.EX_TOL), 5.0, math.nan):
        with pytest.raises(BrwsimError):
            _table.check_expected_values({"rows": [{"P": P, "mean": v}]})
    _table.check_expected_values({"P": True, "mean": 5.0})  # a flag, not a budget


def test_an_interrupt_before_anything_finished_is_one_line(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(_simulate, "_cmd", interrupted)
    assert main(["simulate", "--law", "L"]) == 130
    assert capsys.readouterr().err == "brwsim: interrupted before anything finished\n"


# --- every table, refusal and argument, whole (written before the fourth sample) -----------------------------------
# Each printed text is compared whole with the text expected here; each slow call a command makes is a recorder
# whose arguments are compared whole.


def test_bound_columns_and_their_group_titles():
    groups = [("bounds", ["dual", "splitting", "renewal"]), ("predictions", ["theorem1_leading"]), ("iid_only", ["x"])]
    assert _table.bound_header(groups) == "       dual  splitting    renewal  theorem1_leading          x"
    assert _table.group_header(5, groups) == "       ---- rigorous upper bounds ----  -- not bounds --   i.i.d.-only "
    assert _table.group_header(0, []) == ""
    # the long title where it fits with a space each side (width 23 = 21 + 2), else the short one
    assert _table.group_header(0, [("bounds", ["dual", "abcdefghijkl"])]) == "   rigorous upper bounds "
    assert _table.group_header(0, [("bounds", ["dual", "abcdefghijk"])]) == "  -- rigorous bounds ---"
    assert _table.group_header(1, [("iid_only", ["a" * 25])]) == "    i.i.d.-only, not bounds "
    assert _table.group_header(1, [("iid_only", ["a" * 24])]) == "   ----- i.i.d.-only ------"


def test_bound_cells_of_a_row_without_a_group_or_a_column():
    groups = [("bounds", ["dual", "theorem1_leading"]), ("iid_only", ["renewal"])]
    assert _table.bound_cells({"bounds": {"dual": 1.5}, "iid_only": None}, groups) == (
        "     1.5000                 -          -"
    )
    assert _table.bound_cells({}, groups) == "          -                 -          -"
    assert _table.bound_notes([("predictions", ["asymptotic"])]) == ["[asymptotic] " + _table.PREDICTION_NOTE]


def test_strict_json_writes_null_for_no_value_and_refuses_a_non_finite_result():
    d = {"results": [{"P": 2, "mean": 1.0, "ci95": math.inf, "se": -math.inf, "pair": (1, math.nan)}], "mu": 0.5}
    assert _table.strict_json(d) == (
        '{"results": [{"P": 2, "mean": 1.0, "ci95": null, "se": null, "pair": [1, null]}], "mu": 0.5}'
    )
    for key in _table.REQUIRED_FINITE:
        with pytest.raises(BrwsimError) as e:
            _table.strict_json({"a": {"b": [{key: -math.inf}]}})
        assert str(e.value) == (
            f"internal error: the result's a.b[0].{key} is -inf, not a finite number; nothing was printed "
            "(please report the command)"
        )
    with pytest.raises(BrwsimError) as e:
        _table.strict_json({"mu": math.nan})
    assert str(e.value).startswith("internal error: the result's mu is nan, not a finite number;")
    with pytest.raises(BrwsimError) as e:  # E[X] is checked in [0, P] before JSON is written
        _table.strict_json({"P": 1, "mean": 1.5})
    assert str(e.value).startswith("internal error: E[X] = 1.5 at P = 1 (.mean) lies outside [0, P]")


def test_an_expected_value_outside_zero_to_P_is_named_with_its_path():
    for key in ("mean", "check_mean", "ex"):
        with pytest.raises(BrwsimError) as e:
            _table.check_expected_values({"tables": [{"rows": [{"P": 1}, {"P": 1, key: 1.5}]}]})
        assert str(e.value) == (
            f"internal error: E[X] = 1.5 at P = 1 (tables[0].rows[1].{key}) lies outside [0, P]; nothing was printed "
            "(please report the command)"
        )
    P = 4
    _table.check_expected_values({"P": P, "mean": -_table.EX_TOL * P, "ex": P * (1 + _table.EX_TOL)})  # at the edge
    _table.check_expected_values({"P": 0, "mean": 5.0})  # no budget: nothing to check
    _table.check_expected_values({"P": 1.0, "mean": 5.0})
    _table.check_expected_values({"P": 1, "mean": 5})  # (an integer is not an estimate)
    with pytest.raises(BrwsimError):
        _table.check_expected_values(({"P": 1, "ex": math.inf},))


def test_budgets_are_read_from_a_comma_list():
    assert _args.P_list("1, 2,,3 ") == [1, 2, 3] and _args.P_list(" ") == []
    for text in ("1,a", None):
        with pytest.raises(BrwsimError) as e:
            _args.P_list(text)
        assert str(e.value) == f"--P must be a comma-separated list of integers, e.g. 1,4,16; got {text!r}"


def test_emit_checks_expected_values_before_printing_a_table(capsys):
    shown = []
    with pytest.raises(BrwsimError):
        _args.emit(types.SimpleNamespace(json=False), {"P": 1, "mean": 2.0}, shown.append)
    with pytest.raises(BrwsimError):
        _args.emit(types.SimpleNamespace(json=True), {"P": 1, "mean": 2.0}, shown.append)
    assert shown == [] and capsys.readouterr().out == ""


# --- the command: its parser's errors, the processes joined, errors and signals -----------------------------------


def test_a_parser_error_is_one_line_naming_the_help(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    assert capsys.readouterr().err == "brwsim: error: the following arguments are required: cmd (see brwsim --help)\n"
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--trees", "2"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "brwsim simulate: error: the following arguments are required: --law (see brwsim simulate --help)\n"
    )
    with pytest.raises(SystemExit) as e:
        main(["--num-processes", "x", "laws"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "brwsim: error: argument --num-processes: invalid int value: 'x' (see brwsim --help)\n"
    )


def _command(monkeypatch, cmd):
    """``brwsim simulate``'s command replaced by ``cmd``; the processes' start and success recorded."""
    seen = []
    monkeypatch.setattr(cli.processes, "start", lambda *a, **kw: seen.append(("start", a, kw)))
    monkeypatch.setattr(cli.processes, "succeeded", lambda: seen.append("succeeded"))
    monkeypatch.setattr(cli, "enable_compilation_cache", lambda: seen.append("cache"))
    monkeypatch.setattr(_simulate, "_cmd", cmd)
    return seen


def test_the_command_joins_its_processes_with_every_option(monkeypatch, capsys):
    seen = _command(monkeypatch, lambda args: print("ran") or 0)
    assert main(["--coordinator", "h:1", "--num-processes", "3", "--process-id", "2", "--distributed", "auto",
                 "--join-timeout", "5", "--heartbeat-timeout", "6", "simulate", "--law", "L"]) == 0  # fmt: skip
    assert seen == ["cache", ("start", ("h:1", 3, 2), dict(auto=True, timeout=5, heartbeat=6)), "succeeded"]
    assert capsys.readouterr().out == "ran\n"
    seen.clear()
    assert main(["simulate", "--law", "L"]) == 0
    start = ("start", (None, None, None), dict(auto=False, timeout=cli.processes.JOIN_S,
                                               heartbeat=cli.processes.HEARTBEAT_S))  # fmt: skip
    assert seen == ["cache", start, "succeeded"]


def test_an_error_is_one_line_with_status_2(monkeypatch, capsys):
    def fails(args):
        raise BrwsimError("--x is bad")

    seen = _command(monkeypatch, fails)
    assert main(["simulate", "--law", "L"]) == 2
    assert capsys.readouterr().err == "brwsim: error: --x is bad\n" and "succeeded" not in seen


def _signalled(signum, code, agreed=False):
    def cmd(args):
        interrupts._STATE.update(signal=signum, agreed=agreed)
        return code

    return cmd


@pytest.mark.parametrize("signum,code,want", [(signal.SIGTERM, 0, 143), (signal.SIGHUP, 130, 129),
                                              (signal.SIGTERM, 2, 2)])  # fmt: skip
def test_a_signal_makes_a_finished_command_fail(monkeypatch, signum, code, want):
    seen = _command(monkeypatch, _signalled(signum, code))
    exits = []
    monkeypatch.setattr(cli.os, "_exit", exits.append)
    assert main(["simulate", "--law", "L"]) == want
    assert "succeeded" not in seen and exits == []  # one process: it returns


@pytest.mark.parametrize("agreed", [False, True])
def test_a_process_stopped_alone_by_a_signal_exits_at_once(monkeypatch, agreed):
    _command(monkeypatch, _signalled(signal.SIGTERM, 0, agreed))
    exits = []
    monkeypatch.setattr(cli.os, "_exit", exits.append)
    monkeypatch.setattr(cli.processes, "several", lambda: True)
    assert main(["simulate", "--law", "L"]) == 143
    assert exits == ([] if agreed else [143])


def test_an_interrupt_names_its_signal(monkeypatch, capsys):
    def interrupted(args):
        interrupts._STATE["signal"] = signal.SIGTERM
        raise KeyboardInterrupt

    _command(monkeypatch, interrupted)
    assert main(["simulate", "--law", "L"]) == 143
    assert capsys.readouterr().err == "brwsim: interrupted by SIGTERM before anything finished\n"


# --- brwsim simulate, whole -----------------------------------------------------------------------------------------

SIMULATE_ROWS = [
    {"P": 1, "mean": 0.5, "ci95": 0.0625, "check_mean": 0.4375, "check_ci95": 0.125,
     "bounds": {"dual": 0.75, "renewal": 0.875}, "iid_only": {"asymptotic": math.nan}},
    {"P": 16, "mean": 3.25, "ci95": 0.5, "bounds": None, "predictions": {"theorem1_leading": math.inf}},
]  # fmt: skip
SIMULATE_TABLE = """\
law dirichlet:V=9,alpha=1   drafter eagle   (Markov law: mu, mu_2 are the spine's long-run values)
mu = 1.5000 +- 0.4900 nats, mu_2 = 2.5000 (exact) nats^2   trees 7 (interrupted: 7 of 20 finished), seed 11
CONV; +- is the 95% confidence half-width of the estimate
                                                 - rigorous bounds --  -- not bounds --   i.i.d.-only\x20
      P       E[X]    +-95%      check    +-95%       dual    renewal  theorem1_leading  asymptotic
      1     0.5000   0.0625     0.4375   0.1250     0.7500     0.8750                 -           -
     16     3.2500   0.5000                             -          -               inf           -
[dual, renewal] rigorous upper bounds: dual and splitting are spine estimates + 1.96 se at the minimising s \
(one-sided upper 97.5% confidence values); renewal is a closed form, rigorous for i.i.d. laws
[theorem1_leading] not bounds: asymptotic is a large-P prediction, theorem1_leading the leading term of Theorem 1
[asymptotic] i.i.d.-only: the closed forms at the long-run mu, mu_2 assume i.i.d. trees; for this law they are \
neither bounds nor predictions
"""


def test_a_simulation_table_is_printed_whole(capsys):
    d = {"law": "dirichlet:V=9,alpha=1", "mu": 1.5, "mu_se": 0.25, "mu2": 2.5, "trees": 7, "trees_requested": 20,
         "interrupted": True, "seed": 11, "convention": "CONV", "results": SIMULATE_ROWS, "iid": False,
         "drafter": "eagle"}  # fmt: skip
    out = io.StringIO()
    _simulate.print_table(d, out)
    assert out.getvalue() == SIMULATE_TABLE and capsys.readouterr().out == ""
    d = {"law": "L", "mu": 0.5, "mu2": 0.25, "mu2_se": 0.5, "trees": 3, "seed": 0, "convention": "C",
         "results": [{"P": 2, "mean": 1.0, "ci95": 0.25}]}  # fmt: skip
    _simulate.print_table(d)
    assert capsys.readouterr().out == (
        "law L   drafter oracle   (i.i.d. law)\n"
        "mu = 0.5000 (exact) nats, mu_2 = 0.2500 +- 0.9800 nats^2   trees 3, seed 0\n"
        "C; +- is the 95% confidence half-width of the estimate\n"
        "      P       E[X]    +-95%\n"
        "      2     1.0000   0.2500\n"
    )


def _simulation(d, **kw):
    return types.SimpleNamespace(**(dict(to_dict=lambda: d, seconds=1.25, interrupted=False) | kw))


def test_simulate_prints_its_table_and_time_or_one_json_object(monkeypatch, capsys):
    d = {"law": "L", "mu": 0.5, "mu2": 0.25, "trees": 3, "seed": 0, "convention": "C",
         "results": [{"P": 2, "mean": 1.0, "ci95": math.nan}]}  # fmt: skip
    monkeypatch.setattr(_simulate, "simulate", lambda law, **kw: _simulation(d))
    assert _simulate._cmd(build_parser().parse_args(["simulate", "--law", "L"])) == 0
    table = io.StringIO()
    _simulate.print_table(d, table)
    assert capsys.readouterr() == (table.getvalue() + "(1.2 s)\n", "")
    assert _simulate._cmd(build_parser().parse_args(["simulate", "--law", "L", "--json"])) == 0
    assert capsys.readouterr() == (_table.strict_json(d) + "\n", "")


def test_an_interrupted_simulation_names_the_signal_and_its_process(monkeypatch, capsys):
    monkeypatch.setitem(interrupts._STATE, "signal", signal.SIGHUP)
    monkeypatch.setitem(interrupts._STATE, "by", 1)
    d = {"law": "L", "mu": 0.5, "mu2": 0.25, "trees": 3, "seed": 0, "convention": "C", "results": []}
    res = _simulation(d, interrupted=True, trees=3, trees_requested=8, checkpoint="ck")
    monkeypatch.setattr(_simulate, "simulate", lambda law, **kw: res)
    assert _simulate._cmd(build_parser().parse_args(["simulate", "--law", "L", "--json"])) == 129
    assert capsys.readouterr().err == (
        "brwsim: interrupted by SIGHUP (sent to process 1) after 3 of 8 trees: the estimates above use the finished "
        "trees; no bounds were computed; the finished rounds are kept in ck: rerun the same command to resume\n"
    )


# --- brwsim reproduce, whole ----------------------------------------------------------------------------------------


def test_an_interrupted_reproduce_says_what_it_kept(monkeypatch):
    from experiments import common

    results, _ = common.out_dirs()
    assert _reproduce.interrupted_message(0, 0) == "brwsim: interrupted before any point finished; nothing was cached"
    for computed, cached in [(1, 0), (0, 1), (2, 3)]:
        assert _reproduce.interrupted_message(computed, cached) == (
            f"brwsim: interrupted: {computed} point(s) computed and cached in this run, {cached} read from the cache "
            f"(under {results / '.cache'}); rerun the same command to go on from them"
        )


def test_reproduce_counts_points_from_none_and_passes_its_defaults_on(monkeypatch, capsys):
    from experiments import common

    monkeypatch.setattr(common, "COUNTERS", {})
    got = []

    def run(**kw):
        got.append(kw)
        common.COUNTERS.update(computed=2, cached=0)
        raise KeyboardInterrupt

    monkeypatch.setattr(_reproduce, "run", run)
    assert _reproduce._cmd(build_parser().parse_args(["reproduce"])) == 130
    assert got == [dict(quick=False, only=None, seed=0, budget_seconds=None)]
    assert capsys.readouterr() == ("", _reproduce.interrupted_message(2, 0) + "\n")


# --- brwsim laws, whole ---------------------------------------------------------------------------------------------


class _Sub:
    def __init__(self, costly, seen):
        self.costly, self.seen = costly, seen

    def costly_spine_step(self, need_rank):
        self.seen.append(need_rank)
        return self.costly


def _fake_law(costly: bool, seen: list, vocab: int = 1000):
    subs = (_Sub(False, seen), _Sub(costly, seen))
    return types.SimpleNamespace(spine_needs_rank=True, vocab=vocab, sub_laws=lambda: subs)


def _memory_refusal(monkeypatch, avail, law, walks, P_max, mu) -> str | None:
    monkeypatch.setattr(_laws, "available_memory", lambda: avail)
    try:
        _laws.check_walks_memory(law, walks, P_max, mu)
    except BrwsimError as e:
        return str(e)
    return None


def test_walks_that_do_not_fit_name_their_need_steps_and_the_largest_that_fits(monkeypatch):
    seen = []
    law = _fake_law(True, seen)
    # s_max = ln(0.5 x 1000) + 3 = 9.21: 64 + ceil(2 x 9.21 / 0.5) = 101 steps; 64 x 101 + 12 x 1000 bytes a walk
    assert _memory_refusal(monkeypatch, 1e6, law, 100, 1000, 0.5) == (
        "--walks 100 needs about 0.00185 GB (up to 101 steps of 64 bytes per walk, plus O(V) rows), more than the "
        "0.0008 GB a run may use here (80% of the memory available): the largest that fits is about --walks 43"
    )
    assert seen == [True, True]  # each sub-law asked with the law's need of the rank
    assert _memory_refusal(monkeypatch, 1e4, law, 2, 1000, 0.5) == (
        "--walks 2 needs about 3.69e-05 GB (up to 101 steps of 64 bytes per walk, plus O(V) rows), more than the "
        "8e-06 GB a run may use here (80% of the memory available): the largest that fits is about --walks 0"
    )
    cheap = _fake_law(False, [])
    # mu = 0: 64 steps of 64 bytes; 2 walks need 8192 bytes, exactly 80% of 10240
    assert _memory_refusal(monkeypatch, 10240, cheap, 2, 1000, 0.0) is None
    assert _memory_refusal(monkeypatch, 10239, cheap, 2, 1000, 0.0) == (
        "--walks 2 needs about 8.19e-06 GB (up to 64 steps of 64 bytes per walk), more than the 8.19e-06 GB a run "
        "may use here (80% of the memory available): the largest that fits is about --walks 1"
    )


@pytest.mark.parametrize(
    "walks,P_max,mu,steps",
    [
        (2, 1000, 0.5, 101),  # 64 + ceil(2 (ln(mu P) + 3) / mu)
        (2, 1, 1e-3, 4000),  # at most MAX_STEPS
        (2**22 // 32, 1000, 0.5, 64),  # POINTS_MAX // walks below 64: 64
        (2**22 // 80, 1000, 0.5, 80),  # POINTS_MAX // walks = 80 < 101
        (2, 1, 2.0, 68),  # ln(2) + 3 = 3.69: 64 + ceil(3.69)
        (2, 1, 1e-301, 4000),
    ],
)
def test_the_steps_a_walk_is_planned_for(monkeypatch, walks, P_max, mu, steps):
    msg = _memory_refusal(monkeypatch, 1.0, _fake_law(False, []), walks, P_max, mu)
    assert f" (up to {steps} steps of 64 bytes per walk), " in msg
    assert msg.startswith(f"--walks {walks} needs about {walks * 64 * steps / 1e9:.3g} GB ")


def test_walk_indices_are_32_bit(monkeypatch):
    law = _fake_law(False, [])
    assert _memory_refusal(monkeypatch, None, law, 2**32 - 1, 4, 1.0) is None
    assert _memory_refusal(monkeypatch, None, law, 2**32, 4, 1.0) == (
        "--walks must be at most 4294967295 (walk indices are 32-bit), got 4294967296"
    )
    assert _memory_refusal(monkeypatch, 1e30, law, 2**32, 4, 1.0) == (
        "--walks must be at most 4294967295 (walk indices are 32-bit), got 4294967296"
    )
    assert _memory_refusal(monkeypatch, 3e13, law, 2**33, 4, 0.0) == (
        "--walks 8589934592 needs about 3.52e+04 GB (up to 64 steps of 64 bytes per walk), more than the 2.4e+04 GB "
        "a run may use here (80% of the memory available): the largest that fits is about --walks 4294967295"
    )


def test_the_spine_curve_lies_below_the_smaller_of_its_limit_and_coverage():
    for limit, coverage in [(2.0, 1.0), (0.5, 1.0)]:
        curves = types.SimpleNamespace(limit=limit, coverage=coverage, threshold_curve=_Curves().threshold_curve)
        spine = _laws._curve(curves, 5)
        hi = min(limit, coverage)
        assert list(spine) == ["walks", "coverage", "curve"] and spine["walks"] == 5 and spine["coverage"] == coverage
        for k, row in enumerate(spine["curve"], 1):
            t = hi * (1 - 1e-9) * k / 8  # (the 8 points after 0 of 9 evenly spaced up to just below hi)
            assert row == {"t": pytest.approx(t, rel=1e-12), "N": pytest.approx(t), "N_se": pytest.approx(t + 1),
                           "value": pytest.approx(t + 2), "value_se": pytest.approx(t + 3)}  # fmt: skip
            assert all(type(v) is float for v in row.values())
        assert len(spine["curve"]) == 8 and spine["curve"][-1]["t"] < hi
    curves = types.SimpleNamespace(limit=1.0, coverage=0.0, threshold_curve=None)
    assert _laws._curve(curves, 5) == {"walks": 5, "coverage": 0.0}


def test_a_laws_summary_holds_every_value_and_passes_its_law_seed_and_walks_on(monkeypatch):
    import jax

    from brwsim._stats import CONVENTION
    from brwsim.theory import KINDS

    calls = []
    state = types.SimpleNamespace(to_dict=lambda: {"fraction": 1.0})
    mom = types.SimpleNamespace(mu=0.5, mu2=0.375, mu_se=0.125, mu2_se=0.25, exact=False, per_state={"a": state})

    def key_of(key):
        return jax.random.key_data(key).tolist()

    monkeypatch.setattr(_laws, "check_tables", lambda law: calls.append(("tables", law.spec())))
    monkeypatch.setattr(_laws, "check_spine", lambda law, walks, what: calls.append(("spine", law.spec(), walks, what)))
    monkeypatch.setattr(_laws, "moments", lambda key, law: calls.append(("moments", key_of(key), law.spec())) or mom)
    monkeypatch.setattr(_laws, "check_walks_memory", lambda *a: calls.append(("memory", a[0].spec(), *a[1:])))

    def law_curves(key, law, P_max, **kw):
        calls.append(("curves", key_of(key), law.spec(), P_max, kw))
        return _Curves()

    def bounds_from_curves(curves, *a):
        calls.append(("bounds", type(curves), *a))
        return [types.SimpleNamespace(P=4, to_dict=lambda: {"bounds": {"dual": 1.0}})]

    monkeypatch.setattr(_laws, "law_curves", law_curves)
    monkeypatch.setattr(_laws, "bounds_from_curves", bounds_from_curves)
    law = parse_law("fixed:probs=0.5/0.5")
    spec = law.spec()
    seed = _laws.SEED_MAX
    d = _laws.laws_summary(law, [4, 1], walks=16, seed=seed, margin_z=2.5)
    assert d == {"law": spec, "convention": CONVENTION, "iid": True, "vocab": 2, "mu": 0.5, "mu2": 0.375,
                 "mu_se": 0.125, "mu2_se": 0.25, "exact": False, "states": {"a": {"fraction": 1.0}},
                 "spine": _laws._curve(_Curves(), 16), "results": [{"P": 4, "bounds": {"dual": 1.0}}],
                 "kinds": KINDS}  # fmt: skip
    key = key_of(jax.random.key(seed))
    assert calls == [("tables", spec), ("spine", spec, 16, "brwsim laws"), ("moments", key, spec),
                     ("memory", spec, 16, 4, 0.5), ("curves", key, spec, 4, dict(walks=16, mu_hint=0.5)),
                     ("bounds", _Curves, [1, 4], 0.5, 0.375, True, 2.5)]  # fmt: skip
    mom.per_state = {}
    assert "states" not in _laws.laws_summary("fixed:probs=0.5/0.5", [1], walks=2, seed=0)


def test_a_laws_seed_is_a_64_bit_integer():
    with pytest.raises(BrwsimError) as e:
        _laws.laws_summary("fixed:probs=1", [1], seed=_laws.SEED_MAX + 1)
    assert str(e.value) == (
        "seed must be an integer in [0, 9223372036854775807] (a 64-bit PRNG seed), got 9223372036854775808"
    )
    with pytest.raises(BrwsimError) as e:
        _laws.laws_summary("fixed:probs=1", [1], seed=-1)
    assert str(e.value) == "seed must be an integer >= 0, got -1"
    with pytest.raises(BrwsimError) as e:
        _laws.laws_summary("fixed:probs=1", [0])
    assert str(e.value).startswith("P must be an integer >= 1")


LAWS_SUMMARY = """\
law markov:x   Markov (mu, mu_2: the spine's long-run values), V = 7
mu = 1.2500 +- 0.9800 nats, mu_2 = 2.0000 (exact) nats^2
spine: 4 walks, observed up to S = 0.000
C
         - rigorous bounds --   not bounds    i.i.d.-only\x20
      P       dual  splitting  asymptotic    renewal      dual est +- se
      1          -          -      0.5000     1.0000     0.2500 +- 0.0625
     64     9.5000     8.2500           -          -     7.0000 +- 1.0000
[dual, splitting] rigorous upper bounds: dual and splitting are spine estimates + 1.96 se at the minimising s \
(one-sided upper 97.5% confidence values)
[asymptotic] not bounds: asymptotic is a large-P prediction, theorem1_leading the leading term of Theorem 1
[renewal] i.i.d.-only: the closed forms at the long-run mu, mu_2 assume i.i.d. trees; for this law they are \
neither bounds nor predictions
"""


def test_a_markov_laws_summary_without_states_or_curve_is_printed_whole(capsys):
    d = {"law": "markov:x", "iid": False, "vocab": 7, "mu": 1.25, "mu_se": 0.5, "mu2": 2.0, "mu2_se": 0.0,
         "spine": {"walks": 4, "coverage": 0.0}, "convention": "C",
         "results": [{"P": 1, "predictions": {"asymptotic": 0.5}, "iid_only": {"renewal": 1.0}, "dual_estimate": 0.25,
                      "dual_se": 0.0625},
                     {"P": 64, "bounds": {"dual": 9.5, "splitting": 8.25}, "dual_estimate": 7.0,
                      "dual_se": 1.0}]}  # fmt: skip
    _laws.print_summary(d)
    assert capsys.readouterr().out == LAWS_SUMMARY
    _laws.print_summary(d | {"states": None})
    assert capsys.readouterr().out == LAWS_SUMMARY


def test_laws_prints_its_table_by_default(monkeypatch, capsys):
    d = {"law": "L", "iid": True, "vocab": 3, "mu": 0.5, "mu_se": 0.0, "mu2": 0.25, "mu2_se": 0.0,
         "spine": {"walks": 8, "coverage": 0.0}, "convention": "C", "results": []}  # fmt: skip
    got = []
    monkeypatch.setattr(_laws, "laws_summary", lambda *a, **kw: got.append((a, kw)) or d)
    assert _laws._cmd(build_parser().parse_args(["laws", "--law", "L"])) == 0
    assert got == [(("L", [1, 4, 16, 64, 1024]), dict(walks=8192, seed=0))]
    _laws.print_summary(d)
    table = capsys.readouterr().out
    assert table.startswith("law L   i.i.d., V = 3\n") and table == table[: len(table) // 2] * 2
    assert all(line.strip() for line in table.splitlines())  # no groups of bound columns: no blank line naming them


# --- brwsim llm, whole ----------------------------------------------------------------------------------------------

LLM_TABLE = """\
model m (vocab 5), prompts pydoc, T = 1, C
task code: 2 prompts, mu = 0.5000 +- 0.0625, mu_2 = 1.2500 +- 0.1250 (nats, along 12 sampled continuations)
                                    rigorous bounds    i.i.d.-only\x20
    P    oracle   +-95% surrogate       dual    renewal
    1    0.5000  0.1250    0.3750     0.7500     1.5000
    4    1.2500       -         -     2.2500          -
[dual] rigorous upper bounds: dual and splitting are spine estimates + 1.96 se at the minimising s (one-sided upper \
97.5% confidence values)
[renewal] i.i.d.-only: the closed forms at the long-run mu, mu_2 assume i.i.d. trees; for this law they are neither \
bounds nor predictions
drafters of code
task prose: 1 prompts, mu = nan +- nan, mu_2 = nan +- nan (nats, along 0 sampled continuations)
    P    oracle   +-95% surrogate
    2    0.2500  0.0625         -
drafters of prose
model phase 2.0 s, 0% in forward passes; load 0.2 s; total 3.2 s
"""


def _llm_run():
    res1 = [{"P": 1, "mean": 0.5, "ci95": 0.125, "surrogate": 0.375, "bounds": {"dual": 0.75},
             "iid_only": {"renewal": 1.5}},
            {"P": 4, "mean": 1.25, "ci95": None, "surrogate": None, "bounds": {"dual": 2.25}}]  # fmt: skip
    t1 = {"task": "code", "prompts": 2, "results": res1, "mu": 0.5, "mu2": 1.25, "mu_ci95": 0.0625, "mu2_ci95": 0.125,
          "walks": 12}  # fmt: skip
    t2 = {"task": "prose", "prompts": 1, "results": [{"P": 2, "mean": 0.25, "ci95": 0.0625}]}
    timing = {"load_seconds": 0.25, "model_phase_seconds": 2.0, "forward_seconds": 1.0, "forward_fraction": None,
              "total_seconds": 3.25, "host_bytes_per_node": None}  # fmt: skip
    return run_from_dict({"model": "m", "vocab_size": 5, "prompts": "pydoc", "convention": "C", "tasks": [t1, t2],
                          "timing": timing})  # fmt: skip


def test_a_real_model_table_of_two_tasks_is_printed_whole(monkeypatch, capsys):
    monkeypatch.setattr(_llm, "print_drafters", lambda t, out: print(f"drafters of {t.task}", file=out))
    out = io.StringIO()
    _llm.print_llm(_llm_run(), out)
    assert out.getvalue() == LLM_TABLE and capsys.readouterr().out == ""
    _llm.print_llm(_llm_run())
    assert capsys.readouterr().out == LLM_TABLE


def test_the_options_of_a_real_model_run_are_every_argument(monkeypatch):
    from brwsim.llm.run import RunOptions

    args = build_parser().parse_args(
        ["llm", "--model", "gemma3-270m", "--prompts", "pydoc", "--n", "3", "--P", "4,2", "--walks", "6", "--depth",
         "6", "--seed", "7", "--trees", "8", "--batch", "2", "--prompt-batch", "3", "--dtype", "bfloat16", "--threads",
         "2", "--device", "cpu", "--max-prompt-tokens", "99", "--save-pool", "SP", "--drafter", "lookup:n=3",
         "--drafter", "lookup:n=2", "--temperature", "0.5", "--check-samples", "11", "--heldout-tokens", "12",
         "--check-P", "13"])  # fmt: skip
    assert _llm.options(args) == RunOptions(
        model="gemma3-270m", prompts="pydoc", n=3, P=(2, 4), walks=6, depth=6, seed=7, trees=8, batch=2, prompt_batch=3,
        dtype="bfloat16", threads=2, device="cpu", max_prompt_tokens=99, save_pool="SP", record=None,
        drafters=("lookup:n=3", "lookup:n=2"), temperature=0.5, check_samples=11, check_P=13,
        heldout_tokens=12)  # fmt: skip
    args = build_parser().parse_args(["llm", "--record", "R.npz"])
    assert _llm.options(args) == RunOptions(record="R.npz")
    with pytest.raises(BrwsimError) as e:
        _llm.options(build_parser().parse_args(["llm", "--walks", "1", "--n", "15"]))
    assert str(e.value).startswith("--walks 1 x --n 15 gives 15 sampled continuations per task;")


def test_llm_logs_to_stderr_and_prints_its_table(monkeypatch, capsys):
    run = _llm_run()
    monkeypatch.setattr(_llm, "require_llm", lambda: None)
    monkeypatch.setattr(_llm, "options", lambda args: "opts")
    monkeypatch.setattr(_llm, "print_drafters", lambda t, out: None)
    got = []

    def run_llm(opts, log):
        got.append(opts)
        if log is not None:
            log("measuring")
        return run

    monkeypatch.setattr(_llm, "run_llm", run_llm)
    assert _llm._cmd(build_parser().parse_args(["llm"])) == 0
    table = io.StringIO()
    _llm.print_llm(run, table)
    assert got == ["opts"] and capsys.readouterr() == (table.getvalue(), "measuring\n")
    assert _llm._cmd(build_parser().parse_args(["llm", "--json"])) == 0
    assert capsys.readouterr() == (_table.strict_json(run.to_dict()) + "\n", "")


def test_an_interrupted_real_model_run_says_how_many_prompts_finished(monkeypatch, capsys):
    monkeypatch.setitem(interrupts._STATE, "signal", signal.SIGTERM)
    monkeypatch.setitem(interrupts._STATE, "by", None)
    res = run_from_dict({"model": "m", "interrupted": True, "prompts_finished": 2, "prompts_requested": 5, "tasks": []})
    monkeypatch.setattr(_llm, "options", lambda args: "opts")
    monkeypatch.setattr(_llm, "run_llm", lambda opts, log: res)
    assert _llm._cmd(build_parser().parse_args(["llm", "--model", "x.npz", "--json"])) == 143
    out, err = capsys.readouterr()
    assert json.loads(out)["interrupted"] is True
    assert err == (
        "brwsim: interrupted by SIGTERM after 2 of 5 prompts: the results above are those of the finished prompts\n"
    )


# --- brwsim plan, whole ---------------------------------------------------------------------------------------------

PLAN_TABLES = """\
t_verify: user table (csv:c.csv)
speedup = tokens per second with speculation / without it = (E[X]+1) t_verify(0) / (t_verify(P) + t_draft(P)); \
for the oracle (t_draft = 0) it is the speed of light: no deterministic drafter at that verifier cost does better
E[X] and speedup are estimates; +- is the 95% CI of E[X]'s Monte Carlo error carried through

oracle: E[X] from S1; draft cost: oracle (no draft cost: the speed of light)
    P     E[X]   +-95%  t_verify ms t_draft ms  speedup   +-95%
    0   0.0000  0.0000       10.000      0.000    1.000   0.000
    1   0.5000  0.1000       12.500      0.000    1.200   0.080
    2   0.9000  0.0000       15.000      0.000    1.267   0.000
    4   1.2000  0.2500       20.000      0.000    1.100   0.125
best P = 2: speedup 1.267 +- 0.000 (estimate); budgets whose 95% CI reaches the best's: 1, 2
recommended P = 2 (the smallest budget whose estimate is within the best's 95% CI)

chain: E[X] from S2; draft cost: chain: 1 ms per pass, one pass per tree (2 passes)
    P     E[X]   +-95%  t_verify ms        min..max t_draft ms  speedup   +-95%
    0   0.0000  0.0000       10.000               -      0.000    1.000   0.000
    1   0.2500  0.0500       12.500      11.3..15.6      2.000    0.862   0.034
    2   0.5000  0.5000       15.000               -      2.000    0.882   0.294
best P = 0: speedup 1.000 +- 0.000 (estimate); budgets whose 95% CI reaches the best's: 0, 2
recommended P = 0 (plain decoding is within the best's 95% CI: do not speculate)
"""


def test_plan_tables_are_printed_whole(capsys):
    from brwsim.speedup import speedup_table

    cost = TableCost({0: 0.01, 1: 0.0125, 2: 0.015, 4: 0.02}, kind="table", label="csv:c.csv")
    t1 = speedup_table([(1, 0.5, 0.1), (2, 0.9, 0.0), (4, 1.2, 0.25)], cost, drafter="oracle", source="S1")
    dc = DraftCost(0.001, 2, "chain: 1 ms per pass, one pass per tree (2 passes)", "user")
    t2 = speedup_table([(1, 0.25, 0.05), (2, 0.5, 0.5)], cost, dc, drafter="chain", source="S2")
    rows = [dataclasses.replace(r, spread=(0.9 * r.t_verify, 1.25 * r.t_verify)) if r.P == 1 else r for r in t2.rows]
    t2 = dataclasses.replace(t2, rows=rows)
    out = io.StringIO()
    _plan.print_plan([t1, t2], out)
    assert out.getvalue() == PLAN_TABLES and capsys.readouterr().out == ""
    _plan.print_plan([t1, t2])
    assert capsys.readouterr().out == PLAN_TABLES


def _csv(tmp_path, rows="0,0.01\n1,0.011\n2,0.012\n4,0.016\n8,0.032\n16,0.064\n") -> str:
    f = tmp_path / "cost.csv"
    f.write_text("P,seconds\n" + rows)
    return f"csv:{f}"


def _plan_run(argv, capsys) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_from_a_saved_simulation_is_printed_whole(tmp_path, capsys):
    hw = _csv(tmp_path)
    saved = _saved(tmp_path, SIMULATED | {"results": SIMULATED["results"] + [{"P": 4, "mean": 1.2, "ci95": 0.25}]})
    code, out, err = _plan_run(["--from-json", saved, "--hardware", hw], capsys)
    assert (code, err) == (0, "")
    assert out == (
        f"t_verify: user table ({hw})\n{_plan.MEANING}\n"
        "E[X] and speedup are estimates; +- is the 95% CI of E[X]'s Monte Carlo error carried through\n\n"
        f"chain: E[X] from {saved} (L, 9 trees); draft cost: oracle (no draft cost: the speed of light)\n"
        "    P     E[X]   +-95%  t_verify ms t_draft ms  speedup   +-95%\n"
        "    0   0.0000  0.0000       10.000      0.000    1.000   0.000\n"
        "    1   0.5000  0.1000       11.000      0.000    1.364   0.091\n"
        "    2   0.9000  0.0000       12.000      0.000    1.583   0.000\n"
        "    4   1.2000  0.2500       16.000      0.000    1.375   0.156\n"
        "best P = 2: speedup 1.583 +- 0.000 (estimate); budgets whose 95% CI reaches the best's: 2\n"
        "recommended P = 2 (the smallest budget whose estimate is within the best's 95% CI)\n"
    )
    code, out, err = _plan_run(["--from-json", _saved(tmp_path, SIMULATED), "--hardware", hw], capsys)
    assert (
        "best at least P = 2, still rising (E[X] was saved up to P = 2: run with larger budgets to find the best)"
        in out
    )


def test_plan_from_a_saved_run_asks_the_cost_with_every_option(tmp_path, monkeypatch, capsys):
    seen = []

    def verify_cost(hw, **kw):
        seen.append((hw, kw))
        return TableCost({0: 1.0, 1: 1.0, 2: 1.0})

    monkeypatch.setattr(_plan, "verify_cost", verify_cost)
    opts = ["--hardware", "h9", "--params", "2e9", "--target", "T", "--bytes-per-param", "1", "--context", "64",
            "--overhead", "0.5", "--repeats", "3", "--verifier", "V", "--json"]  # fmt: skip
    kw = dict(params=2e9, target="T", bytes_per_param=1.0, context=64, overhead=0.5, repeats=3, model="V")
    assert main(["plan", "--from-json", _saved(tmp_path, SIMULATED), *opts]) == 0
    assert seen == [("h9", dict(P=[1, 2], **kw))]
    res = [{"P": 2, "mean": 0.5, "ci95": 0.1}, {"P": 4, "mean": 0.75, "ci95": 0.1}]
    run = {"model": "m", "tasks": [{"task": "a", "results": res}, {"task": "b", "results": res[:1]}]}
    got = []
    monkeypatch.setattr(_plan, "from_llm", lambda run, cost, **kw: got.append((run.model, cost, kw)) or [])
    assert main(["plan", "--from-json", _saved(tmp_path, run), *opts, "--task", "b"]) == 0
    assert seen[1] == ("h9", dict(P=[2, 4], **kw))  # the first task's budgets
    assert got == [("m", TableCost({0: 1.0, 1: 1.0, 2: 1.0}), dict(task="b", bytes_per_param=1.0, context=64))]
    assert json.loads(capsys.readouterr().out[-200:].splitlines()[-1]) == {"tables": []}


def test_plan_from_a_saved_real_model_run_names_its_tasks_limit(tmp_path, capsys):
    res = [{"P": 1, "mean": 0.8, "ci95": 0.1}, {"P": 2, "mean": 1.2, "ci95": 0.2}]
    run = {"model": "m", "vocab_size": 9, "tasks": [{"task": "code", "prompts": 2, "results": res}]}
    code, out, err = _plan_run(["--from-json", _saved(tmp_path, run), "--hardware", _csv(tmp_path, "0,1\n2,1\n")],
                               capsys)  # fmt: skip
    assert (code, err) == (0, "")
    assert (
        "best at least P = 2, still rising (E[X] was saved up to P = 2: run with larger budgets to find the best)"
        in out
    )
    code, out, err = _plan_run(["--from-json", _saved(tmp_path, run), "--hardware", "h100", "--params", "1e9",
                                "--task", "prose"], capsys)  # fmt: skip
    assert code == 2 and err.startswith("brwsim: error: ") and "prose" in err and "cannot read" not in err


UNREAD = "; give a brwsim --json output"


@pytest.mark.parametrize(
    "saved,why",
    [
        ({"tasks": [{"task": "a"}]}, ": cannot read its result rows (missing key 'results')" + UNREAD),
        ({"tasks": []}, ": cannot read its result rows (list index out of range)" + UNREAD),
        ({"tasks": 5}, ": cannot read its result rows ('int' object is not iterable)" + UNREAD),
        ({"results": None}, ": cannot read its result rows ('NoneType' object is not iterable)" + UNREAD),
        ({"results": [{"P": 1}]}, ": cannot read its result rows (missing key 'mean')" + UNREAD),
        ({"tasks": [{"task": "a", "results": [{"P": 0, "mean": 0.0}]}]},
         ": row 0 has P = 0; P must be an integer >= 1"),
        ({"results": [{"P": "1", "mean": 0.5}]}, ": row 0 has P = '1'; P must be an integer >= 1"),
        ([1], " is neither a brwsim simulate nor a brwsim llm --json output"),
    ],
)  # fmt: skip
def test_plan_refuses_a_saved_file_it_cannot_read(tmp_path, capsys, saved, why):
    path = _saved(tmp_path, saved)
    want = f"brwsim: error: --from-json {path!r}{why}\n"
    assert _plan_run(["--from-json", path, "--hardware", _csv(tmp_path)], capsys) == (2, "", want)


def test_plan_refuses_a_path_that_is_no_json_file(tmp_path, monkeypatch, capsys):
    hw = ["--hardware", _csv(tmp_path)]
    want = "; give the file a brwsim simulate/llm --json run wrote\n"
    assert _plan_run(["--from-json", str(tmp_path), *hw], capsys) == (
        2, "", f"brwsim: error: --from-json {str(tmp_path)!r} is a directory{want}")  # fmt: skip
    path = str(tmp_path / "none.json")
    assert _plan_run(["--from-json", path, *hw], capsys) == (
        2, "", f"brwsim: error: --from-json {path!r} does not exist{want}")  # fmt: skip
    long = str(tmp_path / ("x" * 300))
    code, _, err = _plan_run(["--from-json", long, *hw], capsys)
    assert code == 2 and err.startswith(f"brwsim: error: --from-json {long[:60]!r}... ({len(long)} characters) is not")
    f = tmp_path / "bad.json"
    f.write_text("{not json")
    assert _plan_run(["--from-json", str(f), *hw], capsys) == (
        2, "", f"brwsim: error: --from-json {str(f)!r} is not JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)); give a brwsim simulate/llm --json output\n")  # fmt: skip
    f.write_bytes(b"\xff\xfe")
    assert _plan_run(["--from-json", str(f), *hw], capsys) == (
        2, "", f"brwsim: error: --from-json {str(f)!r} is not JSON ('utf-8' codec can't decode byte 0xff in position "
        "0: invalid start byte); give a brwsim simulate/llm --json output\n")  # fmt: skip

    def unreadable(self, *a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_plan.Path, "read_text", unreadable)
    assert _plan_run(["--from-json", str(f), *hw], capsys) == (
        2, "", f"brwsim: error: --from-json {str(f)!r} cannot be read (Permission denied)\n")  # fmt: skip


@pytest.mark.parametrize(
    "row,why",
    [
        ({"P": True, "mean": 0.5}, "has P = True; P must be an integer >= 1"),
        ({"P": 1.0, "mean": 0.5}, "has P = 1.0; P must be an integer >= 1"),
        ({"P": -1, "mean": 0.5}, "has P = -1; P must be an integer >= 1"),
        ({"P": 2, "mean": True}, "(P = 2) has E[X] = True; it must be finite, in [0, P]"),
        ({"P": 2, "mean": "1"}, "(P = 2) has E[X] = '1'; it must be finite, in [0, P]"),
        ({"P": 2, "mean": math.nan}, "(P = 2) has E[X] = nan; it must be finite, in [0, P]"),
        ({"P": 2, "mean": math.inf}, "(P = 2) has E[X] = inf; it must be finite, in [0, P]"),
        ({"P": 2, "mean": -0.25}, "(P = 2) has E[X] = -0.25; it must be finite, in [0, P]"),
        ({"P": 2, "mean": 2.5}, "(P = 2) has E[X] = 2.5; it must be finite, in [0, P]"),
        ({"P": 2, "mean": 3}, "(P = 2) has E[X] = 3; it must be finite, in [0, P]"),
        ({"P": 2, "mean": 1, "ci95": False}, "(P = 2) has ci95 = False; it must be finite, >= 0"),
        ({"P": 2, "mean": 1, "ci95": "0"}, "(P = 2) has ci95 = '0'; it must be finite, >= 0"),
        ({"P": 2, "mean": 1, "ci95": -0.5}, "(P = 2) has ci95 = -0.5; it must be finite, >= 0"),
        ({"P": 2, "mean": 1, "ci95": math.inf}, "(P = 2) has ci95 = inf; it must be finite, >= 0"),
    ],
)
def test_saved_rows_are_checked_one_by_one(row, why):
    with pytest.raises(BrwsimError) as e:
        _plan._check_rows([{"P": 1, "mean": 0.0}, row], "f.json")
    assert str(e.value) == f"--from-json 'f.json': row 1 {why}"


def test_saved_rows_read_as_budgets_values_and_half_widths():
    rows = [{"P": 1, "mean": 0, "ci95": 0}, {"P": 2, "mean": 2, "ci95": None}, {"P": 3, "mean": 1.5}]
    got = _plan._check_rows(rows, "f")
    assert got[0] == (1, 0.0, 0.0) and [type(x) for x in got[0]] == [int, float, float]
    assert got[1][:2] == (2, 2.0) and math.isnan(got[1][2]) and got[2][:2] == (3, 1.5) and math.isnan(got[2][2])
    assert _plan._check_rows([{"P": 1, "mean": 0.5, "ci95": math.nan}], "f")[0][1] == 0.5
    assert _plan._Ps([{"P": 4.0}, {"P": 2}]) == [4, 2]


PLAN_REFUSALS = [
    ([], "give exactly one of --law SPEC, --model M, --from-json FILE or --acceptance VECTOR"),
    (["--law", "L", "--model", "m"], "give exactly one of --law SPEC, --model M, --from-json FILE or --acceptance "
                                     "VECTOR"),
    (["--law", "L", "--tree-depth", "2"], "--tree-depth D (>= 1) goes with --acceptance: draft levels below the root"),
    (["--acceptance", "0.5", "--tree-depth", "0"], "--tree-depth D (>= 1) goes with --acceptance: draft levels below "
                                                   "the root"),
    (["--law", "L", "--P-max", "0"], "--P-max must be >= 1, got 0"),
    (["--law", "L", "--draft-pass-seconds", "-0.5"], "--draft-pass-seconds must be a finite number >= 0 and "
                                                     "--draft-passes >= 1"),
    (["--law", "L", "--draft-pass-seconds", "inf"], "--draft-pass-seconds must be a finite number >= 0 and "
                                                    "--draft-passes >= 1"),
    (["--law", "L", "--draft-prompts", "0"], "--draft-prompts and --draft-tokens must be >= 1, got 0, 16"),
    (["--law", "L"], "give --hardware: " + _plan.hardware_names()),
    (["--acceptance", "0.5"], "give --hardware: " + _plan.hardware_names()),
    (["--from-json", "f"], "give --hardware: " + _plan.hardware_names()),
]  # fmt: skip


@pytest.mark.parametrize("argv,why", PLAN_REFUSALS)
def test_plan_refuses_bad_arguments_in_one_line(monkeypatch, capsys, argv, why):
    monkeypatch.setattr(_plan, "simulate", None)  # nothing is simulated
    assert _plan_run(argv, capsys) == (2, "", f"brwsim: error: {why}\n")


@pytest.mark.parametrize("name", ["params", "bytes_per_param", "overhead", "draft_pass_seconds"])
def test_plan_refuses_an_option_argparse_read_as_a_list(name):
    args = build_parser().parse_args(["plan", "--law", "L"])
    setattr(args, name, [])
    with pytest.raises(BrwsimError) as e:
        _plan._cmd(args)
    assert str(e.value) == f"--{name.replace('_', '-')} needs a number, got []"


def test_plan_takes_the_edges_of_its_arguments(tmp_path, monkeypatch, capsys):
    hw = ["--hardware", _csv(tmp_path), "--P", "1", "--json"]
    for extra in (["--P-max", "1"], ["--draft-pass-seconds", "0"], ["--tree-depth", "1"]):
        assert _plan_run(["--acceptance", "0.5", *hw, *extra], capsys)[0] == 0


def test_plan_of_a_law_asks_the_cost_with_every_option_and_grows_its_grid_to_P_max(monkeypatch, capsys):
    calls, seen = [], []

    def simulate(law, **kw):
        calls.append((kw.get("drafter"), list(kw["P"])))
        rows = [types.SimpleNamespace(P=p, stat=types.SimpleNamespace(mean=p * 0.9, ci95=0.0)) for p in kw["P"]]
        return types.SimpleNamespace(results=rows, drafter=kw.get("drafter") or "oracle", law=law, trees=kw["trees"])

    def verify_cost(hw, **kw):
        seen.append((hw, kw))
        return TableCost({0: 1.0, 64: 1.0})

    monkeypatch.setattr(_plan, "simulate", simulate)
    monkeypatch.setattr(_plan, "verify_cost", verify_cost)
    assert main(["plan", "--law", "L", "--hardware", "hw", "--params", "2e9", "--target", "T", "--bytes-per-param", "1",
                 "--context", "64", "--overhead", "0.5", "--repeats", "3", "--verifier", "V", "--P", "2,1",
                 "--P-max", "8", "--drafter", "eagle", "--drafter", "chain", "--draft-pass-seconds", "0.001",
                 "--json"]) == 0  # fmt: skip
    assert seen == [("hw", dict(P=[2, 1], params=2e9, target="T", bytes_per_param=1.0, context=64, overhead=0.5,
                                repeats=3, model="V"))]  # fmt: skip
    grid = [[1, 2], [1, 2, 4], [1, 2, 4, 8]]
    assert calls == [(None, P) for P in grid] + [("chain", P) for P in grid]
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert [t["drafter"] for t in tables] == ["oracle", "chain"]
    assert tables[1]["draft_cost"]["label"] == "chain: 1 ms per pass, one pass per drafted token"
    assert tables[0]["draft_cost"]["kind"] == "none" and tables[1]["draft_cost"]["kind"] == "user"
    calls.clear()
    assert main(["plan", "--law", "L", "--hardware", "hw", "--P", "1", "--P-max", "1", "--drafter", "oracle",
                 "--json"]) == 0  # fmt: skip
    assert calls == [(None, [1])] and len(json.loads(capsys.readouterr().out)["tables"]) == 1


ACCEPTANCE_PLAN = """\
acceptance rates a[rank 1..2]: 0.6, 0.2
Sequoia's terms: its budget m = P + 1 counts the root; tau = X + 1; max_depth = tree depth + 1
    P     m         X       tau depth
    1     2   0.60000   1.60000     1
    2     3   0.96000   1.96000     2
    4     5   1.37600   2.37600     3

t_verify: user table ({hw})
{meaning}
E[X] and speedup are estimates; +- is the 95% CI of E[X]'s Monte Carlo error carried through

sequoia (acceptance vector): E[X] from Sequoia's tree under the acceptance vector '0.6,0.2' (2 ranks); draft cost: \
sequoia: 0 ms per pass, one pass per drafted token
    P     E[X]   +-95%  t_verify ms t_draft ms  speedup   +-95%
    0   0.0000  0.0000       10.000      0.000    1.000   0.000
    1   0.6000  0.0000       11.000      0.000    1.455   0.000
    2   0.9600  0.0000       12.000      0.000    1.633   0.000
    4   1.3760  0.0000       16.000      0.000    1.485   0.000
best P = 2: speedup 1.633 +- 0.000 (estimate); budgets whose 95% CI reaches the best's: 2
recommended P = 2 (the smallest budget whose estimate is within the best's 95% CI)
tree at P = 2: nodes per level [1, 1] (--json lists every budget's rank paths)
"""


def test_plan_of_an_acceptance_vector_is_printed_whole(tmp_path, monkeypatch, capsys):
    from brwsim.drafters._sequoia import sequoia_budgets

    made = []

    def budgets(a, P, depth):
        made.append((P, depth))
        return sequoia_budgets(a, P, depth)

    monkeypatch.setattr(_plan, "sequoia_budgets", budgets)
    hw = _csv(tmp_path)
    assert _plan_run(["--acceptance", "0.6,0.2", "--hardware", hw, "--P", "1,2"], capsys) == (
        0, ACCEPTANCE_PLAN.format(hw=hw, meaning=_plan.MEANING), "")  # fmt: skip
    assert made == [([1, 2], None), ([4], None)]  # each budget's tree made once
    code, out, _ = _plan_run(["--acceptance", "0.6,0.2", "--hardware", hw, "--P", "1,2", "--json"], capsys)
    d = json.loads(out)
    assert list(d) == ["tables", "sequoia"] and [t["P"] for t in d["sequoia"]] == [1, 2, 4]
    assert d["sequoia"] == [dict(t, X=pytest.approx(t["X"]), tau=pytest.approx(t["tau"])) for t in
                            sequoia_budgets([0.6, 0.2], [1, 2, 4])]  # fmt: skip
    made.clear()
    code, out, _ = _plan_run(["--acceptance", "0.5,0.3", "--tree-depth", "1", "--hardware", hw, "--P", "1,2"], capsys)
    assert made[0] == ([1, 2], 1) and "tree at P = 2: nodes per level [2] (--json" in out


@pytest.mark.parametrize("P_max,levels", [(32, str([1] * 32)), (33, str([1] * 16)[:-1] + ", ... (33 levels)]")])
def test_a_deep_sequoia_tree_is_shown_by_its_first_levels(tmp_path, capsys, P_max, levels):
    hw = _csv(tmp_path, "0,0.01\n64,0.01\n")
    code, out, _ = _plan_run(["--acceptance", "0.99", "--hardware", hw, "--P", "1,2", "--P-max", str(P_max)], capsys)
    assert (
        out.splitlines()[-1]
        == f"tree at P = {P_max}: nodes per level {levels} (--json lists every budget's rank paths)"
    )


def test_a_sequoia_tree_not_worth_drafting_is_not_shown(tmp_path, capsys):
    argv = ["--acceptance", "0.01", "--hardware", _csv(tmp_path), "--P", "1,2", "--draft-pass-seconds", "0.01"]
    code, out, _ = _plan_run(argv, capsys)
    assert out.splitlines()[-1] == "recommended P = 0 (plain decoding is within the best's 95% CI: do not speculate)"
    assert "sequoia: 10 ms per pass, one pass per drafted token" in out


def test_plan_of_an_acceptance_vector_asks_the_cost_with_every_option(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(_plan, "verify_cost", lambda hw, **kw: seen.append((hw, kw)) or TableCost({0: 1.0, 64: 2.0}))
    assert main(["plan", "--acceptance", "0.5", "--hardware", "hw", "--params", "2e9", "--target", "T",
                 "--bytes-per-param", "1", "--context", "64", "--overhead", "0.5", "--repeats", "3", "--verifier", "V",
                 "--P", "2,1", "--json"]) == 0  # fmt: skip
    assert seen == [("hw", dict(P=[2, 1], params=2e9, target="T", bytes_per_param=1.0, context=64, overhead=0.5,
                                repeats=3, model="V"))]  # fmt: skip
    capsys.readouterr()
    with pytest.raises(BrwsimError) as e:  # a bad vector: one line before any cost is asked
        _plan._cmd(build_parser().parse_args(["plan", "--acceptance", "0.9,0.5", "--hardware", "hw"]))
    assert str(e.value).startswith("acceptance vector '0.9,0.5': rates must be") and len(seen) == 1


class _Opened:
    def __init__(self, name):
        self.name = name


def _model_plan(monkeypatch, argv, capsys):
    """``brwsim plan --model`` with its model, cost, drafters and run recorded."""
    from brwsim.speedup import speedup_table

    seen = []
    cost = TableCost({0: 1.0, 1: 1.0, 2: 1.0})
    monkeypatch.setattr(_plan, "load_source", lambda model, **kw: seen.append(("load", model, kw)) or "source")
    monkeypatch.setattr(_plan, "verify_cost", lambda hw, **kw: seen.append(("cost", hw, kw)) or cost)
    drafters = [_Opened("d1"), _Opened("d2")]

    def open_drafters(*a):
        seen.append(("open", *a))
        return drafters, "cal"

    monkeypatch.setattr(_plan, "open_drafters", open_drafters)
    monkeypatch.setattr(_plan, "run_llm", lambda opts, **kw: seen.append(("run", opts, kw)) or "run")

    def drafting(args, d, source, cost_, P, opts):
        seen.append(("drafting", d.name, source, cost_ is cost, P, opts.n))
        return f"cost of {d.name}"

    monkeypatch.setattr(_plan, "_drafting", drafting)

    def from_llm(run, cost_, **kw):
        seen.append(("from_llm", run, cost_ is cost, kw))
        return [speedup_table([(1, 0.5, 0.0), (2, 1.5, 0.0)], cost_)]

    monkeypatch.setattr(_plan, "from_llm", from_llm)
    code, out, err = _plan_run(["--model", "m", *argv], capsys)
    return code, out, err, seen


def test_a_real_model_plan_passes_every_option_on(monkeypatch, capsys):
    from brwsim.llm.run import RunOptions

    argv = ["--hardware", " h9 ", "--params", "2e9", "--target", "T", "--bytes-per-param", "1", "--context", "64",
            "--overhead", "0.5", "--repeats", "3", "--verifier", "V", "--P", "2,1", "--prompts", "pydoc", "--n", "3",
            "--walks", "6", "--depth", "5", "--seed", "4", "--surrogate-trees", "7", "--drafter", "lookup:n=3",
            "--drafter", "lookup:n=2", "--task", "code", "--json"]  # fmt: skip
    monkeypatch.setattr(_plan, "preset", lambda name: None)
    code, out, err, seen = _model_plan(monkeypatch, argv, capsys)
    assert (code, err) == (0, "")
    opts = RunOptions(model="m", prompts="pydoc", n=3, P=(1, 2), walks=6, depth=5, seed=4, trees=7, threads=1,
                      drafters=("lookup:n=3", "lookup:n=2"))  # fmt: skip
    kw = dict(params=2e9, target="T", bytes_per_param=1.0, context=64, overhead=0.5, repeats=3, model="m")
    assert seen[:3] == [
        ("load", "m", dict(threads=1)),
        ("cost", "h9", dict(P=[2, 1], source="source", **kw)),
        ("open", "source", ("lookup:n=3", "lookup:n=2"), 1.0, None, 256),
    ]
    run = seen[3]
    assert run[:2] == ("run", opts) and run[2]["source"] == "source" and run[2]["opened"][1] == "cal"
    assert [d.name for d in run[2]["opened"][0]] == ["d1", "d2"] and list(run[2]) == ["source", "opened"]
    assert seen[4:] == [
        ("drafting", "d1", "source", True, [2, 1], 3),
        ("drafting", "d2", "source", True, [2, 1], 3),
        ("from_llm", "run", True, dict(task="code", draft_costs={"d1": "cost of d1", "d2": "cost of d2"})),
    ]
    (t,) = json.loads(out)["tables"]
    assert t["best"]["limit"] == "E[X] was measured up to P = 2: give larger budgets (--P) to find the best"


@pytest.mark.parametrize(
    "hw,why",
    [
        ("csv:/nonexistent/c.csv", "cost table '/nonexistent/c.csv' does not exist (expected a CSV file of rows "
                                   "'P,seconds')"),
        ("custom:bw=x", "bad hardware 'custom:bw=x': bw='x' is not a number"),
        (" nope ", "unknown hardware 'nope'; use one of h100, h200, a100, l4, cpu-measured, cpu-roofline, "
                   "cpu-achieved, csv:FILE or custom:bw=BYTES_PER_S,flops=FLOP_PER_S"),
    ],
)  # fmt: skip
def test_a_real_model_plan_refuses_bad_hardware_before_loading_the_model(monkeypatch, capsys, hw, why):
    code, out, err, seen = _model_plan(monkeypatch, ["--hardware", hw], capsys)
    assert (code, out, err, seen) == (2, "", f"brwsim: error: {why}\n", [])


def test_a_real_model_plan_refuses_a_missing_drafter_directory_before_loading_the_model(monkeypatch, capsys):
    argv = ["--hardware", "H100", "--params", "1e9", "--drafter", "lookup:n=3", "--drafter", "model:/nonexistent/d"]
    code, out, err, seen = _model_plan(monkeypatch, argv, capsys)
    assert (code, out, seen) == (2, "", [])
    assert err == (
        "brwsim: error: drafter model:/nonexistent/d: '/nonexistent/d' is not a directory (give a transformers model "
        "directory)\n"
    )
    code, out, err, seen = _model_plan(monkeypatch, ["--hardware", "cpu-measured", "--json"], capsys)
    assert (code, err) == (0, "") and seen[1][:2] == ("cost", "cpu-measured")
    assert seen[2] == ("open", "source", (), 1.0, None, 256) and seen[3][1].drafters == ()


def test_a_real_drafters_measured_cost_passes_every_option_on(monkeypatch, capsys):
    got = []
    calls = types.SimpleNamespace(cost=lambda t0: ("measured", t0))
    monkeypatch.setattr(_plan, "measure_draft_calls", lambda *a: got.append(a) or calls)
    monkeypatch.setattr(_plan, "load_prompts", lambda prompts, n: [types.SimpleNamespace(text=f"{prompts}{i}")
                                                                    for i in range(n)])  # fmt: skip
    args = types.SimpleNamespace(hardware="cpu-measured", draft_prompts=2, draft_tokens=5, seed=9)
    source = types.SimpleNamespace(encode=lambda text: [text])
    cost = types.SimpleNamespace(t_verify=lambda P: 0.25 + P)
    d = _Drafter()
    assert _plan._drafting(args, d, source, cost, [1, 2], types.SimpleNamespace(prompts="q", n=3)) == ("measured", 0.25)
    assert got == [(d, source, [["q0"], ["q1"]], [1, 2], 5, 1.0, 9, "lookup:n=3")]
    assert capsys.readouterr() == ("", "plan: lookup:n=3: drafting per call in speculative decoding on 2 prompts\n")
    args.draft_prompts = 5  # at most the run's prompts
    _plan._drafting(args, d, source, cost, [1], types.SimpleNamespace(prompts="q", n=3))
    assert got[-1][2] == [["q0"], ["q1"], ["q2"]] and "on 3 prompts" in capsys.readouterr().err


def test_a_real_drafters_cost_derived_from_its_size_off_a_roofline(monkeypatch):
    derived = []
    monkeypatch.setattr(_plan, "derived_draft_cost", lambda *a: derived.append(a) or "derived")
    args = types.SimpleNamespace(hardware="csv:x", bytes_per_param=1.5, context=99)
    d, cost = _Drafter(footprint=7), object()
    assert _plan._drafting(args, d, None, cost, [1], None) == "derived"
    assert derived == [(cost, d, 1.5, 99)]


def test_a_real_model_runs_timing_line(monkeypatch):
    from brwsim.llm.results import Timing

    run = dataclasses.replace(_llm_run(), tasks=[], timing=Timing(1.0, 2.0, 0.5, 0.375, 4.0, 102400.0))
    out = io.StringIO()
    _llm.print_llm(run, out)
    assert out.getvalue().splitlines()[-1] == (
        "model phase 2.0 s, 38% in forward passes; load 1.0 s; total 4.0 s; 100.0 KiB per node from the model's "
        "device to the host"
    )


def test_a_refused_value_is_named_by_its_whole_path():
    # (a leading "X" tells a path stripped of its first dot only from one stripped of more characters)
    with pytest.raises(BrwsimError) as e:
        _table.strict_json({"Xs": {"mu": math.nan}})
    assert str(e.value).startswith("internal error: the result's Xs.mu is nan, not a finite number;")
    with pytest.raises(BrwsimError) as e:
        _table.check_expected_values({"Xs": [{"P": 1, "ex": 2.0}]})
    assert str(e.value).startswith("internal error: E[X] = 2.0 at P = 1 (Xs[0].ex) lies outside [0, P];")


def test_plan_tables_of_an_acceptance_vector_are_not_made_by_tables_for():
    args = build_parser().parse_args(["plan", "--acceptance", "0.5", "--hardware", "h100"])
    with pytest.raises(BrwsimError) as e:
        _plan.tables_for(args)
    assert str(e.value) == "internal: --acceptance goes through _acceptance_tables"
