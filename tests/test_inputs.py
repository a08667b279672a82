"""Hostile inputs: every law's distributions stay valid at extreme parameters, bad files and numbers get one line.

Each case is a command or call that once printed an impossible number, a NaN, or a traceback; the test pins
the right answer or the one-line error (exit status 2) that replaced it.
"""

from __future__ import annotations

import json
import math
import threading
import time

import jax
import numpy as np
import pytest

import brwsim
from brwsim.cli import main
from brwsim.cli._table import check_expected_values, strict_json
from brwsim.errors import BrwsimError
from brwsim.laws import parse_law
from brwsim.spine import sample_walks
from experiments import common

EXTREME_LAWS = [
    "logitnormal:V=64,sigma=1e6",
    "logitnormal:V=64,sigma=100",
    "logitnormal:V=64,sigma=1e300",
    "logitnormal:V=64,sigma=1e-300",
    "dirichlet:V=64,alpha=1e-300",
    "dirichlet:V=64,alpha=1e-30",
    "dirichlet:V=64,alpha=1e-3",
    "dirichlet:V=64,alpha=1e20",
    "zipf:V=64,s=1e300",
    "zipf:V=64,s=1e-300,s_sd=1e30",
    "zipf:V=64,s=1e300,s_sd=3",
    "temp:T=1e-300,law=dirichlet:V=64,alpha=0.3",
    "temp:T=1e300,law=logitnormal:V=64,sigma=1e6",
    "fixed:probs=0.5000004/0.5",
]


def strict_loads(text: str):
    def refuse(c):
        raise AssertionError(f"not strict JSON: {c}")

    return json.loads(text, parse_constant=refuse)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("brwsim: error:") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("spec", EXTREME_LAWS)
def test_node_distributions_are_valid_in_float32(spec):
    """Jitted and batched, as the oracle draws them: log-probabilities <= 0, no NaN, summing to one."""
    law = parse_law(spec)
    keys = jax.random.split(jax.random.key(0), 256)
    lp = np.asarray(jax.jit(jax.vmap(lambda k: law.full_logp(k, 0)))(keys))
    assert lp.dtype == np.float32 and not np.isnan(lp).any()
    assert lp.max() <= 0.0
    total = np.exp(lp.astype(np.float64)).sum(axis=1)
    assert np.abs(total - 1).max() < 2e-6 * law.vocab


def test_huge_sigma_gives_values_within_P():
    """logitnormal sigma=1e6 once gave E[X] = 1.0086 at P = 1 (112 of 200 trees above 1)."""
    res = brwsim.simulate("logitnormal:V=64,sigma=1e6", P=[1, 4], trees=200, bounds=False, keep_values=True)
    assert res.values.max(axis=0)[0] <= 1.0 and res.values.max(axis=0)[1] <= 4.0
    assert np.all(res.values >= 0)


def test_sigma_100_spine_steps_are_surprisals():
    """Once stopped with the internal message 'xi must hold surprisals ...' (a log-probability above 0)."""
    w = sample_walks(jax.random.key(0), parse_law("logitnormal:V=64,sigma=100"), 512, depth=4)
    assert np.all(w.xi >= 0)


def test_tiny_dirichlet_alpha_is_the_point_mass():
    """alpha = 1e-300: every node puts all its mass on one symbol, so the optimal 4-node chain is worth 4."""
    res = brwsim.simulate("dirichlet:V=64,alpha=1e-300", P=4, trees=50, bounds=False)
    assert res.results[0].stat.mean == 4.0
    assert res.mu == 0.0 and math.copysign(1, res.mu) == 1.0


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("dirichlet:V=64,alpha=1e21", "alpha must be <= 1e+20"),
        ("dirichlet:V=4294967296,alpha=1", "V must be <= 2.14748e+09"),
        ("zipf:V=8,s=1,s_sd=1e31", "s_sd must be <= 1e+30"),
        ("logitnormal:V=8,sigma=inf", "sigma must be finite"),
    ],
)
def test_law_ranges_refused_up_front(spec, needle):
    with pytest.raises(BrwsimError, match=needle.replace("+", r"\+")):
        parse_law(spec)


def test_markov_file_that_names_itself(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"states": {"x": f"markov:path={a}"}, "initial": "x", "kernel": {"x": [[1]]}}))
    for cmd in (["simulate", "--trees", "2"], ["laws"]):
        assert main([*cmd, "--law", f"markov:path={a}"]) == 2
        assert "refers to itself (a.json -> a.json)" in one_error_line(capsys)
    # through another file and a temperature wrapper
    a.write_text(json.dumps({"states": {"x": f"temp:T=1,law={b}"}, "initial": "x", "kernel": {"x": [[1]]}}))
    b.write_text(json.dumps({"states": {"y": str(a)}, "initial": "y", "kernel": {"y": [[1]]}}))
    assert main(["laws", "--law", str(a)]) == 2
    assert "refers to itself (a.json -> b.json -> a.json)" in one_error_line(capsys)


def test_pool_files_with_bad_arrays(tmp_path, capsys):
    cases = {
        "obj.npz": (dict(logp=np.array([[0.5, 0.5], [1, None]], dtype=object)), "object arrays are refused"),
        "cplx.npz": (dict(probs=np.array([[0.5, 0.5]], dtype=complex)), "dtype complex128"),
        "zero.npz": (dict(probs=np.zeros((2, 3)), entropy=np.zeros(2), m2=np.zeros(2)), "no positive probability"),
        "nanH.npz": (dict(probs=[[0.5, 0.2]], entropy=[np.nan], m2=[0.0]), "must be finite numbers >= 0"),
    }
    for name, (arrays, needle) in cases.items():
        np.savez(tmp_path / name, **arrays)
        assert main(["simulate", "--law", f"pool:path={tmp_path / name}", "--trees", "2"]) == 2
        assert needle in one_error_line(capsys)


def test_pool_rows_are_renormalised(tmp_path):
    np.savez(tmp_path / "p.npz", probs=np.array([[0.6000005, 0.4], [0.5, 0.5]]))
    lp = np.asarray(parse_law(f"pool:path={tmp_path / 'p.npz'}").logp, np.float64)
    assert lp.max() <= 0 and np.allclose(np.exp(lp).sum(axis=1), 1, atol=1e-7)


def test_option_value_dashes(capsys):
    """argparse hands ``--P=--`` over as an empty list."""
    assert main(["laws", "--law", "fixed:probs=1", "--P=--"]) == 2
    assert "--P must be a comma-separated list of integers" in one_error_line(capsys)


def test_laws_walks_memory_refused(capsys):
    assert main(["laws", "--law", "fixed:probs=0.5/0.5", "--walks", "100000000000"]) == 2
    line = one_error_line(capsys)
    assert "--walks 100000000000 needs about" in line and "the largest that fits is about --walks" in line


@pytest.fixture()
def ex_json(tmp_path):
    path = tmp_path / "ex.json"
    path.write_text('{"law": "x", "results": [{"P": 1, "mean": 0.9, "ci95": 0.1}, {"P": 4, "mean": 2.0, "ci95": 0.1}]}')
    return path


@pytest.mark.parametrize(
    "opts,needle",
    [
        (["--hardware", "custom:bw=nan,flops=1e15"], "bw must be a finite number > 0, got nan"),
        (["--hardware", "custom:bw=1e12,flops=nan"], "flops must be a finite number > 0, got nan"),
        (["--hardware", "custom:bw=1e12,flops=1e15,overhead=nan"], "overhead must be a finite number >= 0"),
        (["--hardware", "custom:bw=1e12,flops=1e15,overhead=inf"], "overhead must be a finite number >= 0"),
        (["--hardware", "h100", "--overhead=inf"], "--overhead >= 0, both finite numbers; got 2.0, inf"),
        (["--hardware", "h100", "--bytes-per-param", "inf"], "both finite numbers; got inf, None"),
        (["--hardware", "h100", "--params", "inf"], "--params must be a positive parameter count"),
        (["--hardware", "h100", "--draft-pass-seconds", "nan"], "--draft-pass-seconds must be a finite number"),
        (["--hardware", "h100", "--draft-pass-seconds=--"], "--draft-pass-seconds needs a number, got []"),
    ],
)
def test_plan_numbers_must_be_finite(ex_json, opts, needle, capsys):
    assert main(["plan", "--from-json", str(ex_json), "--params", "1e9", *opts]) == 2
    assert needle in one_error_line(capsys)


def test_plan_from_json_with_nan_mean(tmp_path, ex_json, capsys):
    bad = tmp_path / "nan.json"
    bad.write_text(ex_json.read_text().replace("0.9", "NaN"))
    assert main(["plan", "--from-json", str(bad), "--hardware", "h100", "--params", "1e9"]) == 2
    assert "row 0 (P = 1) has E[X] = nan; it must be finite, in [0, P]" in one_error_line(capsys)
    assert main(["plan", "--from-json", str(ex_json), "--hardware", "h100", "--params", "1e9", "--json"]) == 0
    best = strict_loads(capsys.readouterr().out)["tables"][0]["best"]
    assert best["P"] == 4 and math.isfinite(best["speedup"])


def test_strict_json_nulls_the_undefined_and_refuses_the_rest():
    d = {"results": [{"P": 1, "mean": 0.5, "ci95": math.nan, "predictions": {"asymptotic": math.inf}}]}
    assert strict_loads(strict_json(d))["results"][0] == {"P": 1, "mean": 0.5, "ci95": None, "predictions": {
        "asymptotic": None}}  # fmt: skip
    with pytest.raises(BrwsimError, match=r"results\[0\].mu is nan, not a finite number"):
        strict_json({"results": [{"mu": math.nan}]})
    with pytest.raises(BrwsimError, match=r"E\[X\] = 1.0086 at P = 1 \(results\[0\].mean\) lies outside \[0, P\]"):
        check_expected_values({"results": [{"P": 1, "mean": 1.0086}]})


@pytest.mark.parametrize("as_json", [True, False])
def test_a_bad_result_is_one_line_not_printed(monkeypatch, capsys, as_json):
    bad = {"law": "x", "results": [{"P": 1, "mean": 1.0086}]}
    monkeypatch.setattr("brwsim.cli._laws.laws_summary", lambda *a, **k: bad)
    assert main(["laws", "--law", "fixed:probs=1"] + (["--json"] if as_json else [])) == 2
    assert "E[X] = 1.0086 at P = 1" in one_error_line(capsys)
    bad["results"][0] = {"mu": math.inf}
    assert main(["laws", "--law", "fixed:probs=1", "--json"]) == 2
    assert "results[0].mu is inf, not a finite number" in one_error_line(capsys)


def test_laws_json_is_strict_at_zero_entropy(capsys):
    """mu = 0: the asymptotic prediction is infinite, written as null."""
    assert main(["laws", "--law", "fixed:probs=1", "--P", "1,4", "--walks", "64", "--json"]) == 0
    d = strict_loads(capsys.readouterr().out)
    assert d["mu"] == 0 and d["results"][0]["predictions"]["asymptotic"] is None


def test_simulate_json_is_strict_at_zero_entropy(capsys):
    assert main(["simulate", "--law", "dirichlet:V=64,alpha=1e-300", "--P", "4", "--trees", "50", "--json"]) == 0
    assert strict_loads(capsys.readouterr().out)["results"][0]["mean"] == 4.0


def test_reproduce_empty_only(capsys):
    for only in ("", " , "):
        assert main(["reproduce", "--quick", "--only", only]) == 2
        assert "--only names no experiment" in one_error_line(capsys)


@pytest.fixture()
def out(tmp_path, monkeypatch):
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    return tmp_path


def test_reproduce_interrupt_counts_cached_points(out, monkeypatch, capsys):
    def fake_run(**kw):
        for i in range(2):
            common.cached("fake", {"i": i}, lambda: [{"i": 1}])
        raise KeyboardInterrupt

    monkeypatch.setattr("brwsim.cli._reproduce.run", fake_run)
    assert main(["reproduce", "--quick"]) == 130
    err = capsys.readouterr().err
    assert "interrupted: 2 point(s) computed and cached in this run, 0 read from the cache" in err
    assert main(["reproduce", "--quick"]) == 130
    assert "0 point(s) computed and cached in this run, 2 read from the cache" in capsys.readouterr().err


def test_concurrent_runs_compute_each_point_once(out):
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.3)
        return [{"v": 1}]

    got = []
    threads = [threading.Thread(target=lambda: got.append(common.cached("race", {"p": 1}, compute))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(calls) == 1 and got == [[{"v": 1}]] * 3
    files = sorted(p.name for p in (common.out_dirs()[0] / ".cache" / "race").iterdir())  # quick or not
    assert len(files) == 2 and files[0].endswith(".json") and files[1].endswith(".lock")  # no temporary left
