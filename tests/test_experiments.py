"""Every experiment runs in --quick mode and writes its rows and figure; the cache works."""

from __future__ import annotations

import csv
import importlib
import shutil
import types
from pathlib import Path

import pytest

from brwsim import reproduce
from brwsim.errors import BrwsimError
from experiments import common

# The experiments run here in quick mode. iid_vs_markov (~42 s, mostly compilation) and real_model (~22 s)
# are left to `brwsim reproduce --quick` to keep the suite's time down: their machinery (Markov laws with
# bounds; the real oracle on the shipped model) is tested in test_theory, test_estimate, test_llm and
# test_processes, and real_drafters below runs the real oracle too.
CORE = [
    "real_drafters",  # the slowest first (tests/conftest.py: slow files first)
    "entropy_table",
    "scaling_in_P",
    "collapse",
    "threshold_vs_oracle",
]


@pytest.fixture()
def out(tmp_path, monkeypatch):
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def quick_out(tmp_path_factory):
    """One output root for the quick runs of this module (each experiment run once per process: :func:`quick`)."""
    return tmp_path_factory.mktemp("quick-out")


@pytest.fixture(scope="module")
def quick(quick_out):
    """``quick(name)``: experiment ``name`` run with ``--quick`` into ``quick_out``, once per process (later calls
    return the first run's result); the tests that need a first run share it instead of computing it again."""
    infos: dict = {}

    def run(name: str) -> dict:
        if name not in infos:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("BRWSIM_OUT", str(quick_out))
                infos[name] = importlib.import_module(f"experiments.{name}").main(["--quick"])
        return infos[name]

    return run


def _with_quick_cache(quick, quick_out, out, names):
    """``out`` given the cached points of the quick runs of ``names`` (run first where this process has not)."""
    for name in names:
        quick(name)
    for cache in (quick_out / "results").rglob(".cache"):  # (quick mode keeps its points under results/quick)
        shutil.copytree(cache, out / cache.relative_to(quick_out), dirs_exist_ok=True)


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", CORE)
def test_experiment_quick_writes_rows_and_figure(name, quick, quick_out):
    out = quick_out
    info = quick(name)
    rows = _rows(out / "results" / "quick" / f"{name}.csv")
    assert rows
    for col in ("law", "P", "statistic", "mean", "ci95", "seed", "version"):
        assert col in rows[0]
    figs = [] if name == "entropy_table" else [out / "figures" / "quick" / f"{name}.png"]
    assert [p.name for p in map(Path, info.get("figures") or [])] == [p.name for p in figs]
    for fig in figs:
        assert fig.exists() and fig.stat().st_size > 10_000
        assert fig.with_suffix(".pdf").exists()
    if name == "scaling_in_P":
        ex = [r for r in rows if r["statistic"] == "E[X]"]
        assert {int(r["P"]) for r in ex} >= {1, 64}
        assert all(float(r["ci95"]) >= 0 for r in ex)


def test_second_run_recomputes_nothing(quick, quick_out, monkeypatch):
    from experiments import scaling_in_P

    quick("scaling_in_P")  # the first run (shared with test_experiment_quick_writes_rows_and_figure)
    monkeypatch.setenv("BRWSIM_OUT", str(quick_out))
    before = dict(common.COUNTERS)
    scaling_in_P.main(["--quick"])
    assert common.COUNTERS["computed"] == before.get("computed", 0)
    assert common.COUNTERS["cached"] > before.get("cached", 0)
    # a different seed is a different point
    scaling_in_P.law_points("fixed:probs=0.5/0.5", [1, 2], 2, seed=123)
    assert common.COUNTERS["computed"] == before.get("computed", 0) + 1


def test_reproduce_writes_report(out, quick, quick_out):
    _with_quick_cache(quick, quick_out, out, ["entropy_table", "collapse"])  # their points: not computed again
    path = reproduce.run(quick=True, only=["entropy_table", "collapse"])
    text = path.read_text()
    assert path == out / "figures" / "quick" / "REPORT.md"
    assert "## collapse" in text and "![collapse](collapse.png)" in text
    assert "| law | mu (nats)" in text
    assert "X = accepted draft tokens" in text


def test_reproduce_unknown_experiment(out):
    with pytest.raises(BrwsimError, match="unknown experiment"):
        reproduce.run(quick=True, only=["nope"])


def test_entropy_table_reads_every_real_model_in_order(out, monkeypatch):
    """The shipped model's real rows come first, then each ``real_model-MODEL`` file's; the stem names them."""
    from experiments import entropy_table, real_model

    monkeypatch.setitem(common._MODE, "quick", False)  # an earlier quick run in this process must not redirect
    assert real_model.stem("smollm2-135m") == "real_model"
    assert real_model.stem("gemma3-270m") == "real_model-gemma3-270m"
    results = out / "results"
    results.mkdir()
    for stem, label, mu in [("real_model-gemma3-270m", "gemma3-270m/code", 2.0), ("real_model", "smollm2/code", 0.5)]:
        with open(results / f"{stem}_entropy.csv", "w") as f:
            f.write("label,spec,mu,mu_ci95,mu2,mu2_ci95,prompts\n")
            f.write(f"{label},real model,{mu},0.1,1.0,0.2,64\n")
    rows = entropy_table.real_rows()
    assert [r["law"] for r in rows] == ["smollm2/code (64 prompts)", "gemma3-270m/code (64 prompts)"]
    assert rows[0]["slope 1/mu"] == 2.0 and rows[1]["slope 1/mu"] == 0.5
    assert rows[1]["mu2/mu^2"] == 0.25


def test_reproduce_only_replaces_its_sections_and_keeps_the_others(out, quick, quick_out):
    """``--only`` rewrites the named sections of an existing report in place and keeps every other section."""
    _with_quick_cache(quick, quick_out, out, ["collapse"])
    figures = out / "figures" / "quick"
    figures.mkdir(parents=True)
    old = (
        "# brwsim: reproduced figures and tables\n\nMode: old header\n\n"
        "## scaling_in_P: old title\n\nold scaling text\n\n"
        "## collapse: old collapse\n\nOLD COLLAPSE BODY\n\n"
        "## speedup: old speedup\n\nold speedup text\n"
    )
    (figures / "REPORT.md").write_text(old)
    text = reproduce.run(quick=True, only=["collapse"]).read_text()
    assert "OLD COLLAPSE BODY" not in text and "![collapse](collapse.png)" in text
    assert "old scaling text" in text and "old speedup text" in text
    assert text.index("## scaling_in_P") < text.index("## collapse") < text.index("## speedup")
    assert "--only collapse`" in text and "not rerun): scaling_in_P, speedup." in text
    # a run without --only writes a whole new report
    assert "Sections kept" not in reproduce.write_report([], True, 0, 0.0).read_text()


def test_reproduce_budget_reaches_the_prompt_experiments_only(out, monkeypatch):
    """``--budget-seconds`` goes to the experiments that measure prompts and into the report's command."""
    seen = {}

    def fake_run_one(name, argv, tag, log):
        seen[name] = argv
        return name, types.SimpleNamespace(__doc__=f"{name} title"), {}, 0.0, 0, 0

    monkeypatch.setattr(reproduce, "_run_one", fake_run_one)
    text = reproduce.run(quick=True, only=["collapse", "real_drafters"], budget_seconds=0).read_text()
    assert seen["real_drafters"] == ["--seed", "0", "--quick", "--budget-seconds", "0.0"]
    assert seen["collapse"] == ["--seed", "0", "--quick"]
    assert "command `brwsim reproduce --quick --budget-seconds 0`" in text
    assert set(reproduce.BUDGETED) == {"real_model", "real_drafters", "continuation"}
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(BrwsimError, match="--budget-seconds must be a finite number >= 0"):
            reproduce.run(quick=True, only=["collapse"], budget_seconds=bad)


def test_surrogate_verdicts_need_separate_intervals_and_cut_prompts_are_counted():
    """The surrogate is "above" or "below" the real oracle only when the two 95% intervals do not overlap (each
    with its own half-width); a prompt at the source's token limit counts as cut; the report says both."""
    import inspect

    from brwsim.llm.sources import load_source
    from experiments import real_model

    v = real_model.surrogate_verdict
    assert v(1.0, 0.1, 1.2, 0.05) == "above" and v(1.0, 0.1, 0.8, 0.05) == "below"
    assert v(1.0, 0.1, 1.15, 0.1) == "not resolved"  # outside the oracle's interval, not outside both
    assert v(1.0, 0.0, 1.0001, float("nan")) == "above"
    assert real_model.MAX_PROMPT_TOKENS == inspect.signature(load_source).parameters["max_prompt_tokens"].default
    assert real_model.cut_prompts([12, 383, 384, 384]) == 2
    rows = [common.row("m/code", None, "prompts_cut", 1, 0.0, 4, 0, max_prompt_tokens=384)]
    for P, o, s in ((1, (0.5, 0.03), (0.6, 0.01)), (8, (2.0, 0.09), (1.96, 0.04)), (64, (3.57, 0.17), (3.2, 0.05))):
        rows += [common.row("m/code", P, "oracle", *o, 4, 0), common.row("m/code", P, "surrogate", *s, 2000, 0)]
    text = "\n".join(real_model.summary_lines(rows))
    assert "m/code: 1 of 4 prompts cut to their last 384 tokens" in text
    assert "P=1 above, P=8 not resolved, P=64 below" in text


def test_real_drafters_table_names_the_checked_builder_and_shows_the_fixed_one():
    """The direct check's column says whose trees it speculated on (each prompt's best builder) and the fixed
    builder's value at the check's P stands beside it; the figure keeps a prediction above the oracle apart."""
    from experiments import real_drafters

    law, extra = "m/code", dict(drafter="d", task="code")
    rows = [common.row(law, P, "oracle", 2.0 * P, 0.1, 4, 0, drafter=None, task="code") for P in (8, 32)]
    for P in (8, 32):
        rows += [common.row(law, P, "fixed", 1.0 * P / 8, 0.05, 4, 0, builder="topq", **extra),
                 common.row(law, P, "fraction_of_oracle", 0.5, 0.02, 4, 0, builder="topq", **extra),
                 common.row(law, P, "ik_lorden", 100.0 if P == 8 else 1.0, 0.0, 4, 0, **extra)]  # fmt: skip
    rows.append(common.row(law, 32, "check_accepted_per_call", 5.0, 0.1, 600, 0, value=5.1, z=-1.0, **extra))
    text = real_drafters.table(rows, {"P": [8, 32]})
    line = next(x for x in text.splitlines() if x.startswith("| m/code | d |"))
    assert "5.000 ± 0.100 (P=32; best per prompt)" in line and "4.000 ± 0.050 (topq)" in line
    assert "not the fixed builder" in text
    rows[-1]["builders"] = ["eagle", "topq"]
    assert "(P=32; eagle/topq)" in real_drafters.table(rows, {"P": [8, 32]})
    fig = real_drafters.figure(rows)
    ax = fig.axes[0]
    dotted = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":" and len(ln.get_xdata())]
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x" and len(ln.get_xdata())]
    assert [list(ln.get_xdata()) for ln in crosses] == [[8]] and [list(ln.get_xdata()) for ln in dotted] == [[32]]


def test_real_drafters_rows_carry_the_checked_builders_and_the_cut_prompts():
    """From cached points: the check's row names the builders its trees came from and the fixed builder's mean
    value at the check's P; a prompt at the token limit is counted as cut."""
    import numpy as np

    from experiments import real_drafters

    rng = np.random.default_rng(0)

    def point(i, tokens):
        o = np.cumsum(rng.uniform(0.1, 0.5, 8)).tolist()
        check = {"builder": "eagle", "P": 4, "samples": 10, "mean": 1.0, "se": 0.1, "value": 1.0, "sample_se": 0.1}
        d = {"name": "d", "values": {"topq": [x * 0.8 for x in o], "eagle": [x * 0.9 for x in o]}, "stats": None,
             "xi_q": None, "s_P": None, "check": check, "passes": 3}  # fmt: skip
        return {"task": "code", "id": str(i), "prompt_tokens": tokens, "oracle": o, "H": 1.0, "M2": 2.0,
                "xi": rng.exponential(1.0, (8, 6)).tolist(), "drafters": [d], "seconds": 1.0, "phases": {"open": 0.1},
                "host": {}, "tokens": {}, "floor": {}}  # fmt: skip

    pts = [point(0, 384), point(1, 12), point(2, 100)]
    rows = real_drafters.aggregate({"P": [1, 2, 4, 8], "model": "m", "seed": 0}, pts, {})
    ck = next(r for r in rows if r["statistic"] == "check_accepted_per_call")
    assert ck["builders"] == ["eagle"] and ck["fixed_builder"] == "topq"
    assert ck["fixed_value"] == pytest.approx(np.mean([p["drafters"][0]["values"]["topq"][3] for p in pts]))
    assert [r["mean"] for r in rows if r["statistic"] == "prompts_cut"] == [1]
    assert "(P=4; eagle)" in real_drafters.table(rows, {"P": [1, 2, 4, 8]})
