"""``brwsim reproduce`` (brwsim/reproduce.py) with stand-in experiments: the arguments' checks, the order and
arguments of the runs, and REPORT.md's header and sections (fast: no experiment is run)."""

from __future__ import annotations

import contextlib
import datetime
import importlib.machinery
import io
import platform
import re
import sys
import types
from collections import Counter

import pytest

from brwsim import reproduce
from brwsim.errors import BrwsimError
from experiments import common

DAY = datetime.date(2026, 11, 29)
NAMES = ["zz_alpha", "zz_beta", "zz_gamma"]  # stand-in experiments, in running order


class _Day:
    """``datetime`` as reproduce.py reads it, with a fixed day (the report's dates)."""

    class date:
        @staticmethod
        def today():
            return DAY


def _experiment(name: str, doc: str | None, info: dict, computed: int = 0, cached: int = 0, calls=None):
    """A module ``experiments.NAME`` whose ``main(argv)`` counts points and returns ``info``."""
    mod = types.ModuleType(f"experiments.{name}", doc)
    mod.__spec__ = importlib.machinery.ModuleSpec(f"experiments.{name}", None)

    def main(argv):
        if calls is not None:
            calls.append((name, list(argv)))
        common.COUNTERS["computed"] += computed
        common.COUNTERS["cached"] += cached
        return info

    mod.main = main
    return mod


@pytest.fixture()
def fake(tmp_path, monkeypatch):
    """Three stand-in experiments (zz_beta takes --budget-seconds), BRWSIM_OUT a fresh folder, fresh counters,
    a fixed day; returns the list of (name, argv) calls of their ``main``."""
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    monkeypatch.setattr(common, "COUNTERS", Counter())
    monkeypatch.setitem(common._MODE, "quick", False)
    monkeypatch.setattr(reproduce, "datetime", _Day)
    monkeypatch.setattr(reproduce, "EXPERIMENTS", list(NAMES))
    monkeypatch.setattr(reproduce, "BUDGETED", ("zz_beta",))
    calls: list = []
    table = tmp_path / "zz_gamma_table.md"
    table.write_text("\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n")
    infos = {
        "zz_alpha": ({"figures": [str(tmp_path / "figures" / "zz_alpha.png")], "summary": ["mu = 1.5"]}, 2, 3),
        "zz_beta": (None, 0, 4),
        "zz_gamma": ({"tables": [str(table)], "figures": None, "summary": []}, 1, 0),
    }
    docs = {
        "zz_alpha": "Alpha's title,\non two lines.\n\nWhat alpha\nmeasures.\n\nAnd a second paragraph.",
        "zz_beta": None,
        "zz_gamma": "Gamma's title.",
    }
    for name in NAMES:
        info, computed, cached = infos[name]
        monkeypatch.setitem(
            sys.modules, f"experiments.{name}", _experiment(name, docs[name], info, computed, cached, calls)
        )
    return calls


def test_only_the_experiments_that_exist_are_available():
    assert reproduce._available(["collapse", "zz_no_such_experiment", "speedup"]) == ["collapse", "speedup"]


def test_a_run_goes_through_every_experiment_in_order_and_writes_the_report(fake, tmp_path):
    log = io.StringIO()
    path = reproduce.run(quick=False, seed=7, log=log)
    assert path == tmp_path / "figures" / "REPORT.md"
    assert fake == [(n, ["--seed", "7"]) for n in NAMES]
    assert re.fullmatch(
        r"\[1/3\] zz_alpha \.\.\.\n\[1/3\] zz_alpha: \d+\.\d s \(2 points computed, 3 from cache\)\n"
        r"\[2/3\] zz_beta \.\.\.\n\[2/3\] zz_beta: \d+\.\d s \(0 points computed, 4 from cache\)\n"
        r"\[3/3\] zz_gamma \.\.\.\n\[3/3\] zz_gamma: \d+\.\d s \(1 points computed, 0 from cache\)\n",
        log.getvalue(),
    )
    text = path.read_text()
    header = (
        re.escape(
            "# brwsim: reproduced figures and tables\n\nMode: full; seed 7; command `brwsim reproduce`; 2026-11-29; "
            f"{platform.machine()}, {platform.system()}; total wall time "
        )
        + r"(\d+)"
        + re.escape(
            " s (points already cached are not recomputed: see the per-experiment counts).\n\nConvention everywhere: "
            "X = accepted draft tokens per verifier call (tokens per call = X + 1). Every ± and every band is a 95% "
            "confidence interval.\n\n"
        )
    )
    m = re.match(header, text)
    assert m and int(m.group(1)) < 60, text[:800]  # the run's own wall time (stand-ins: well under a second)
    sections = text[m.end() :]
    assert re.fullmatch(
        r"## zz_alpha: Alpha's title, on two lines\.\n\nWhat alpha measures\. And a second paragraph\.\n\n"
        r"\*Run 2026-11-29: \d+\.\d s, 2 points computed, 3 read from cache; rows in `results/zz_alpha\.csv`\.\*\n\n"
        r"!\[zz_alpha\]\(zz_alpha\.png\)\n\nMeasured:\n\n- mu = 1\.5\n\n"
        r"## zz_beta: zz_beta\n\n"
        r"\*Run 2026-11-29: \d+\.\d s, 0 points computed, 4 read from cache; rows in `results/zz_beta\.csv`\.\*\n\n"
        r"## zz_gamma: Gamma's title\.\n\n"
        r"\*Run 2026-11-29: \d+\.\d s, 1 points computed, 0 read from cache; rows in `results/zz_gamma\.csv`\.\*\n\n"
        r"\| a \| b \|\n\| --- \| --- \|\n\| 1 \| 2 \|\n\n",
        sections,
    ), sections
    assert not common._MODE["quick"]


def test_quick_mode_and_a_budget_reach_the_runs_and_the_header(fake, tmp_path):
    path = reproduce.run(quick=True, seed=reproduce.SEED_MAX, budget_seconds=2.5, log=io.StringIO())
    assert path == tmp_path / "figures" / "quick" / "REPORT.md" and common._MODE["quick"]
    s = str(reproduce.SEED_MAX)
    assert fake == [
        ("zz_alpha", ["--seed", s, "--quick"]),
        ("zz_beta", ["--seed", s, "--quick", "--budget-seconds", "2.5"]),  # only the budgeted experiment
        ("zz_gamma", ["--seed", s, "--quick"]),
    ]
    text = path.read_text()
    assert f"Mode: quick (small runs); seed {s}; command `brwsim reproduce --quick --budget-seconds 2.5`;" in text
    assert "Sections kept" not in text


def test_a_budget_of_0_is_passed_as_a_number(fake):
    text = reproduce.run(budget_seconds=0, log=io.StringIO()).read_text()
    assert fake[1] == ("zz_beta", ["--seed", "0", "--budget-seconds", "0.0"])
    assert "command `brwsim reproduce --budget-seconds 0`;" in text


def test_only_runs_the_named_experiments_in_running_order_and_keeps_the_other_sections(fake, tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "REPORT.md").write_text(
        "# old header\n\nold text\n\n## zz_gamma: old gamma\n\nOLD GAMMA\n\n## zz_beta: old beta\n\nOLD BETA\n"
        "## no colon here\nstill beta\n"
    )
    text = reproduce.run(only=[" zz_gamma ", "", "zz_alpha"], log=io.StringIO()).read_text()
    assert fake == [("zz_alpha", ["--seed", "0"]), ("zz_gamma", ["--seed", "0"])]
    assert "command `brwsim reproduce --only zz_alpha,zz_gamma`;" in text
    assert "\n\nSections kept from the earlier report in this directory (not rerun): zz_beta.\n\n" in text
    # the old order kept, the new sections in place of theirs or appended; the old header dropped
    assert text.index("## zz_gamma: Gamma's title.") < text.index("## zz_beta: old beta") < text.index("## zz_alpha")
    assert "OLD GAMMA" not in text and "old header" not in text and "old text" not in text
    assert "OLD BETA\n## no colon here\nstill beta\n" in text


def test_only_with_every_section_rerun_names_no_only_in_the_command(fake, tmp_path):
    reproduce.run(only=["zz_beta"], log=io.StringIO())
    text = reproduce.run(only=["zz_beta"], log=io.StringIO()).read_text()
    assert "command `brwsim reproduce`;" in text and "Sections kept" not in text


def test_a_run_without_only_replaces_an_old_report_whole(fake, tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "REPORT.md").write_text("## zz_other: old\n\nOLD\n")
    text = reproduce.run(log=io.StringIO()).read_text()
    assert "OLD" not in text and "zz_other" not in text


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"seed": -1}, "--seed must be an integer >= 0, got -1"),
        ({"seed": 2**32}, f"--seed must be an integer from 0 to {2**32 - 1} (a run key holds 32 bits), got {2**32}"),
        ({"budget_seconds": -0.5}, "--budget-seconds must be a finite number >= 0, got -0.5"),
        ({"budget_seconds": float("nan")}, "--budget-seconds must be a finite number >= 0, got nan"),
        ({"budget_seconds": float("inf")}, "--budget-seconds must be a finite number >= 0, got inf"),
        ({"only": [" ", ""]}, "--only names no experiment; give one or more of zz_alpha, zz_beta, zz_gamma, "
         "comma-separated"),
        ({"only": ["zz_alpha", "nope", "zz_nix"]}, "unknown experiment(s) nope, zz_nix; choose from zz_alpha, "
         "zz_beta, zz_gamma"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_before_any_experiment(fake, tmp_path, kwargs, message):
    with pytest.raises(BrwsimError) as e:
        reproduce.run(log=io.StringIO(), **kwargs)
    assert str(e.value) == message
    assert fake == [] and not (tmp_path / "figures").exists()


def test_the_output_folder_is_checked_first(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path / "a_file"))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(BrwsimError, match="BRWSIM_OUT"):
        reproduce.run(only=["nope"], log=io.StringIO())  # the folder's refusal comes before the names'
    assert fake == []


def test_run_one_counts_the_points_of_its_experiment_alone(fake):
    common.COUNTERS["cached"] = 10  # earlier experiments' points; nothing computed yet
    log = io.StringIO()
    name, mod, info, dt, computed, cached = reproduce._run_one("zz_alpha", ["--seed", "1"], "[x]", log)
    assert (name, mod, computed, cached) == ("zz_alpha", sys.modules["experiments.zz_alpha"], 2, 3)
    assert info["summary"] == ["mu = 1.5"] and dt >= 0
    assert reproduce._run_one("zz_beta", [], "[y]", log)[2] == {}  # main returned None
    assert re.fullmatch(
        r"\[x\] zz_alpha \.\.\.\n\[x\] zz_alpha: \d+\.\d s \(2 points computed, 3 from cache\)\n"
        r"\[y\] zz_beta \.\.\.\n\[y\] zz_beta: \d+\.\d s \(0 points computed, 4 from cache\)\n",
        log.getvalue(),
    )


def test_sections_are_read_by_name_from_their_heading_to_the_next():
    text = "# title\n\nintro\n## a: one\nbody a\n## not a section\n## b: two: three\nbody b"
    assert reproduce._sections(text) == {"a": "## a: one\nbody a\n## not a section\n", "b": "## b: two: three\nbody b"}
    assert reproduce._sections("no section\n") == {}


def test_a_multi_process_run_shares_the_experiments_and_process_0_writes_one_report(fake, tmp_path, monkeypatch):
    """Two processes, seen from process 0: it runs every second experiment, takes the other's cache files and
    run times, then assembles every experiment from the cache (its own run times in the report)."""
    P = reproduce.processes
    events = []
    cache = tmp_path / "results" / ".cache"
    (cache / "old").mkdir(parents=True)
    (cache / "old" / "kept.json").write_text("old")  # there before: not sent

    def zz_alpha_main(argv):  # computes a point the first time, reads it from the cache the second
        point = cache / "zz_alpha" / "p.json"
        key = "cached" if point.exists() else "computed"
        if key == "computed":
            point.parent.mkdir(parents=True, exist_ok=True)
            point.write_text("alpha")
        common.COUNTERS[key] += 1
        events.append(("zz_alpha", argv, key))
        return {}

    sys.modules["experiments.zz_alpha"].main = zz_alpha_main

    def gather(obj):
        timings, files = obj
        events.append(("gather", sorted(timings), sorted(files)))
        other = ({"zz_beta": (12.0, 5, 6)}, {"zz_beta/q.json": b"beta", "old/kept.json": b"theirs"})
        return [obj, other]

    @contextlib.contextmanager
    def alone():
        events.append("alone")
        yield

    monkeypatch.setattr(P, "count", lambda: 2)
    monkeypatch.setattr(P, "share", lambda items: items[0::2])
    monkeypatch.setattr(P, "index", lambda: 0)
    monkeypatch.setattr(P, "alone", alone)
    monkeypatch.setattr(P, "gather", gather)
    monkeypatch.setattr(P, "is_main", lambda: True)
    monkeypatch.setattr(P, "barrier", lambda name: events.append(("barrier", name)))
    log = io.StringIO()
    path = reproduce.run(only=["zz_alpha", "zz_beta"], log=log)
    assert path == tmp_path / "figures" / "REPORT.md"
    assert events == [
        "alone",
        ("zz_alpha", ["--seed", "0"], "computed"),
        ("gather", ["zz_alpha"], ["zz_alpha/p.json"]),  # only the new cache files
        "alone",
        ("zz_alpha", ["--seed", "0"], "cached"),
        ("barrier", "reproduce-report"),
    ]
    assert (cache / "zz_beta" / "q.json").read_bytes() == b"beta"  # the other's file written
    assert (cache / "old" / "kept.json").read_text() == "old"  # an existing file is not overwritten
    assert fake == [("zz_beta", ["--seed", "0"])]  # assembled from the cache on process 0
    assert log.getvalue().startswith("[process 0] zz_alpha ...\n[process 0] zz_alpha: ")
    assert "\n[1/2] zz_alpha ...\n" in log.getvalue() and "\n[2/2] zz_beta ...\n" in log.getvalue()
    text = path.read_text()
    assert re.search(
        r"\*Run 2026-11-29: \d+\.\d s, 1 points computed, 0 read from cache; rows in `results/zz_alpha", text
    )
    assert "*Run 2026-11-29: 12.0 s, 5 points computed, 6 read from cache; rows in `results/zz_beta.csv`.*" in text
    assert int(re.search(r"total wall time (\d+) s", text).group(1)) < 60  # the whole run's time, from its start
    # another process writes no report, but waits for process 0's
    events.clear()
    monkeypatch.setattr(P, "is_main", lambda: False)
    monkeypatch.setattr(P, "index", lambda: 1)
    monkeypatch.setattr(P, "share", lambda items: items[1::2])
    path.unlink()
    assert reproduce.run(only=["zz_alpha", "zz_beta"], log=io.StringIO()) is None
    assert not path.exists() and events[-1] == ("barrier", "reproduce-report")
    assert fake[-1] == ("zz_beta", ["--seed", "0"])


def test_the_cache_files_are_listed_by_their_path_below_the_cache(fake, tmp_path):
    assert reproduce._cache_files() == {}  # no cache yet
    cache = tmp_path / "results" / ".cache"
    (cache / "a" / "b").mkdir(parents=True)
    (cache / "a" / "b" / "p.json").write_text("{}")
    (cache / "top.json").write_text("{}")
    (cache / "a" / "note.txt").write_text("")
    assert reproduce._cache_files() == {"a/b/p.json": cache / "a" / "b" / "p.json", "top.json": cache / "top.json"}
