"""Fuzz the command line in process: hostile SPEC strings and option values through ``brwsim.cli.main``.

Every run must end in one of two ways: exit 0 with output that keeps the invariants (strict JSON, every
E[X] a finite number in [0, P]), or exit 2 with exactly one line on stderr and nothing on stdout. Values
are drawn from extreme floats (NaN, infinities, 1e-300, 1e300, subnormals), huge and negative integers,
empty strings and junk, but a *valid* value is always small (V, P, trees, walks), so a run that is
accepted stays short. ``BRWSIM_FUZZ_EXAMPLES`` sets the number of examples per test (a handful by
default, for CI; e.g. ``BRWSIM_FUZZ_EXAMPLES=2000`` for a long run).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brwsim.cli import main

EXAMPLES = int(os.environ.get("BRWSIM_FUZZ_EXAMPLES", "6"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

EXTREME = ["nan", "NaN", "inf", "-inf", "1e-300", "1e300", "5e-324", "1e-45", "3.4e38", "1e38", "0", "-0", "-1"]
JUNK = ["", " ", "abc", "1,2", "=", "0x10", "1e", "--", "1_0"]
# out of range for every count option (2^31 trees would be a valid, hours-long run)
BIG_INTS = ["-1", "0", str(2**32), str(2**63), str(10**30), "99999999999999999999999"]


def real(lo: float = 1e-3, hi: float = 50.0):
    """A number as the user types it: ordinary, extreme, or junk."""
    ordinary = st.floats(lo, hi, allow_nan=False).map(lambda x: f"{x:.6g}")
    any_float = st.floats(allow_nan=True, allow_infinity=True).map(repr)
    return st.one_of(ordinary, ordinary, st.sampled_from(EXTREME), any_float, st.sampled_from(JUNK))


def count(lo: int, hi: int):
    """An integer option: small and valid, or out of range, huge, or junk (never a huge valid one)."""
    return st.one_of(st.integers(lo, hi).map(str), st.integers(lo, hi).map(str), st.sampled_from(BIG_INTS + JUNK))


def probs():
    """``fixed:probs=``: a real distribution, a perturbed one, or extreme entries."""
    dist = st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6).map(lambda w: [x / sum(w) for x in w])
    good = dist.map(lambda p: "/".join(f"{x:.17g}" for x in p))
    bad = st.lists(st.one_of(real(0, 1), st.sampled_from(EXTREME)), min_size=0, max_size=4).map("/".join)
    return st.one_of(good, good, bad)


def kv(**values) -> st.SearchStrategy[str]:
    """``key=value,...`` with each key sometimes dropped, and sometimes an unknown key added."""
    parts = [
        st.one_of(v.map(lambda x, k=k: f"{k}={x}"), v.map(lambda x, k=k: f"{k}={x}"), st.just(""))
        for k, v in values.items()
    ]
    extra = st.sampled_from(["", "", "", "beta=2", "V=3", "=", ",,"])
    return st.tuples(*parts, extra).map(lambda t: ",".join(x for x in t if x))


def spec(depth: int = 0):
    families = [
        kv(V=count(1, 64), alpha=real(1e-3, 5)).map("dirichlet:".__add__),
        kv(V=count(1, 64), sigma=real(0.01, 10)).map("logitnormal:".__add__),
        kv(V=count(1, 64), s=real(0.1, 3), s_sd=real(0, 2)).map("zipf:".__add__),
        probs().map("fixed:probs=".__add__),
        st.sampled_from(["", " ", "gaussian:V=3", "dirichlet", "dirichlet:", "noseparator", "x.npz", "y.json"]),
        st.text(max_size=12),
    ]
    if depth == 0:
        families.append(st.tuples(real(0.05, 5), spec(1)).map(lambda t: f"temp:T={t[0]},law={t[1]}"))
    return st.one_of(*families)


def P_list():
    ok = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(lambda ps: ",".join(map(str, ps)))
    return st.one_of(ok, ok, ok, st.sampled_from(BIG_INTS + JUNK + ["1,,2", "1.5", "nan", "4,0"]))


def strict_loads(text: str):
    def refuse(c):
        raise AssertionError(f"not strict JSON: {c}")

    return json.loads(text, parse_constant=refuse)


def check_values(d) -> None:
    """Every E[X] (a row's mean at its P) is a finite number in [0, P]."""
    if isinstance(d, dict):
        if isinstance(d.get("P"), int) and d["P"] >= 1:
            for k in ("mean", "check_mean", "ex"):
                if k in d:
                    v = d[k]
                    assert isinstance(v, (int, float)) and math.isfinite(v), d
                    assert -1e-9 <= v <= d["P"] * (1 + 1e-9), d
        for v in d.values():
            check_values(v)
    elif isinstance(d, list):
        for v in d:
            check_values(v)


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: a bad option value or a missing argument
        code = e.code
    out, err = capsys.readouterr()
    if os.environ.get("BRWSIM_FUZZ_LOG"):  # a long run's tally: one line per case
        with open(os.environ["BRWSIM_FUZZ_LOG"], "a") as f:
            f.write(f"{argv[0]}\t{code}\t{' '.join(argv[1:])!r}\n")
    return code, out, err


def check_outcome(argv, code, out, err, cmd: str) -> None:
    try:
        _check_outcome(argv, code, out, err, cmd)
    except AssertionError:
        if os.environ.get("BRWSIM_FUZZ_LOG"):
            with open(os.environ["BRWSIM_FUZZ_LOG"], "a") as f:
                f.write(f"FAIL\t{code}\t{' '.join(argv)!r}\t{err.strip()[-300:]!r}\n")
        raise


def _check_outcome(argv, code, out, err, cmd: str) -> None:
    note = f"brwsim {' '.join(argv)!r}"
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, f"{note}: {err}"
        assert lines[0].startswith("brwsim"), f"{note}: {err}"
        assert out == "", f"{note}: printed {out[:200]!r} before its error"
        return
    assert code == 0, f"{note}: exit {code}: {err[-2000:]}"
    if "--json" in argv:
        check_values(strict_loads(out))


def drafter_options():
    """Nothing (the oracle) most often; else a drafter, perhaps with its draft law q."""
    drafter = st.sampled_from(
        ["topq", "chain", "eagle:top_k=2,depth=2", "sequoia", "nosuch", "", "eagle:top_k=0"]
        + ["eagle:depth=200", "eagle:top_k=1000000000", "sequoia:depth=1000000", "static:k=1000000000", "static:k=2"]
    )
    draft_law = st.one_of(
        st.just(None),
        real(0.01, 3).map("noise:sigma=".__add__),
        real(0.2, 5).map("temp:T=".__add__),
        st.tuples(real(0, 1), spec(1)).map(lambda t: f"mix:w={t[0]},law={t[1]}"),
    )
    pair = st.tuples(drafter, draft_law).map(
        lambda t: ["--drafter", t[0]] + ([] if t[1] is None else ["--draft-law", t[1]])
    )
    return st.one_of(st.just([]), st.just([]), pair)


@FUZZ
@given(
    law=spec(), P=P_list(), trees=count(1, 20), seed=count(0, 5), batch=st.one_of(st.none(), count(1, 8)),
    drafter=drafter_options(), as_json=st.booleans(),
)  # fmt: skip
def test_fuzz_simulate(law, P, trees, seed, batch, drafter, as_json, capsys):
    argv = ["simulate", "--law", law, "--P", P, "--trees", trees, "--seed", seed, *drafter]
    argv += ([] if batch is None else ["--batch", batch]) + (["--json"] if as_json else [])
    check_outcome(argv, *run(argv, capsys), "simulate")


@FUZZ
@given(law=spec(), P=P_list(), walks=count(2, 64), seed=count(0, 5), as_json=st.booleans())
def test_fuzz_laws(law, P, walks, seed, as_json, capsys):
    argv = ["laws", "--law", law, "--P", P, "--walks", walks, "--seed", seed] + (["--json"] if as_json else [])
    check_outcome(argv, *run(argv, capsys), "laws")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "ex.json"
    rows = [{"P": P, "mean": m, "ci95": 0.05} for P, m in ((1, 0.8), (2, 1.4), (4, 2.1))]
    path.write_text(json.dumps({"law": "x", "results": rows}))
    return path


@FUZZ
@given(
    bw=real(1e9, 1e13),
    flops=real(1e12, 1e16),
    overhead=st.one_of(st.just(None), real(0, 1e-2)),
    opt=st.sampled_from(["--bytes-per-param", "--overhead", "--params", "--context", "--draft-pass-seconds"]),
    value=st.one_of(real(1e-3, 1e10), st.sampled_from(BIG_INTS)),
    as_json=st.booleans(),
)
def test_fuzz_plan(saved, bw, flops, overhead, opt, value, as_json, capsys):
    hw = f"custom:bw={bw},flops={flops}" + ("" if overhead is None else f",overhead={overhead}")
    argv = ["plan", "--from-json", str(saved), "--hardware", hw, "--params", "1e9", f"{opt}={value}"]
    argv += ["--json"] if as_json else []
    code, out, err = run(argv, capsys)
    check_outcome(argv, code, out, err, "plan")
    if code == 0 and as_json:
        for t in strict_loads(out)["tables"]:
            assert all(math.isfinite(r["speedup"]) and r["speedup"] > 0 for r in t["rows"])


def test_fuzz_strategies_reach_both_outcomes(capsys):
    """The fuzz must exercise accepted runs, not only errors: one valid and one invalid draw of each kind."""
    ok = ["simulate", "--law", "zipf:V=8,s=1.5", "--P", "1,3", "--trees", "4", "--json"]
    code, out, err = run(ok, capsys)
    check_outcome(ok, code, out, err, "simulate")
    assert code == 0 and np.isclose(json.loads(out)["results"][0]["mean"], 1 / sum(i**-1.5 for i in range(1, 9)))
    bad = ["simulate", "--law", "zipf:V=8,s=nan", "--trees", "4"]
    code, out, err = run(bad, capsys)
    check_outcome(bad, code, out, err, "simulate")
    assert code == 2
