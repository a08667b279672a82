"""Every experiment runs in --quick mode and writes its rows and figure; the cache works."""

from __future__ import annotations

import csv
import importlib
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
    "entropy_table",
    "scaling_in_P",
    "collapse",
    "threshold_vs_oracle",
    "real_drafters",
]


@pytest.fixture()
def out(tmp_path, monkeypatch):
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    return tmp_path


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", CORE)
def test_experiment_quick_writes_rows_and_figure(name, out):
    mod = importlib.import_module(f"experiments.{name}")
    info = mod.main(["--quick"])
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


def test_second_run_recomputes_nothing(out):
    from experiments import scaling_in_P

    scaling_in_P.main(["--quick"])
    before = dict(common.COUNTERS)
    scaling_in_P.main(["--quick"])
    assert common.COUNTERS["computed"] == before.get("computed", 0)
    assert common.COUNTERS["cached"] > before.get("cached", 0)
    # a different seed is a different point
    scaling_in_P.law_points("fixed:probs=0.5/0.5", [1, 2], 2, seed=123)
    assert common.COUNTERS["computed"] == before.get("computed", 0) + 1


def test_reproduce_writes_report(out):
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


def test_reproduce_only_replaces_its_sections_and_keeps_the_others(out):
    """``--only`` rewrites the named sections of an existing report in place and keeps every other section."""
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
    assert set(reproduce.BUDGETED) == {"real_model", "real_drafters"}
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(BrwsimError, match="--budget-seconds must be a finite number >= 0"):
            reproduce.run(quick=True, only=["collapse"], budget_seconds=bad)
