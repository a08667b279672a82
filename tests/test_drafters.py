"""Drafters beyond the oracle: exact cases, DP against brute force, CLI, experiments."""

from __future__ import annotations

import csv
import importlib
import json
import math

import jax
import numpy as np
import pytest
from jax.random import key

from brwsim import drafters as dr
from brwsim import simulate
from brwsim.cli import main as cli_main
from brwsim.drafters import draft_stats, node_pq, parse_draft_law
from brwsim.errors import BrwsimError
from brwsim.estimate import oracle_values
from brwsim.laws import parse_law

FIXED = "fixed:probs=0.5/0.3/0.15/0.05"


def _oracle(law, P, trees=2, seed=0):
    return oracle_values(key(seed), parse_law(law), P, trees)[0]


@pytest.mark.parametrize("dl", [None, "exact", "noise:sigma=0"])
def test_topq_equals_oracle_when_q_is_p(dl):
    # (a temperature keeps each node's order but not the order of paths of different depths)
    want = _oracle(FIXED, 24)
    got = dr.drafter_values(key(0), "topq", FIXED, dl, list(range(1, 25)), 2)
    # same nodes; float32 sums may differ in the last bit if the oracle adds in another order
    np.testing.assert_allclose(got, want, rtol=2e-6)


def test_eagle_unbounded_equals_oracle():
    P = 12
    want = _oracle(FIXED, P)[:, [0, 4, 11]]
    got = dr.drafter_values(key(0), f"eagle:top_k={P},depth={P - 1}", FIXED, None, [1, 5, 12], 2)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_eagle_defaults_and_bounded_shape():
    # top_k=1 is a chain of depth + 1 nodes
    got = dr.drafter_values(key(0), "eagle:top_k=1,depth=4", FIXED, None, [5], 1)[0, 0]
    assert got == pytest.approx(sum(0.5**d for d in range(1, 6)), rel=1e-6)
    with pytest.raises(BrwsimError, match="candidates"):
        dr.drafter_values(key(0), "eagle:top_k=1,depth=2", FIXED, None, [5], 1)


def test_chain_and_kary_exact_on_fixed_tree():
    got = dr.drafter_values(key(0), "chain", FIXED, None, [1, 6], 1)[0]
    np.testing.assert_allclose(got, [0.5, sum(0.5**d for d in range(1, 7))], rtol=1e-6)
    # binary tree, 6 nodes BFS: (0),(1),(0,0),(0,1),(1,0),(1,1)
    b = dr.drafter_values(key(0), "static:k=2", FIXED, None, [6], 1)[0, 0]
    assert b == pytest.approx(0.5 + 0.3 + (0.5 + 0.3) ** 2, rel=1e-6)


def test_static_file_and_errors(tmp_path):
    f = tmp_path / "tree.json"
    f.write_text(json.dumps([[0], [0, 0], [1], [0, 1]]))
    v = dr.drafter_values(key(0), f"static:path={f}", FIXED, None, [4], 1)[0, 0]
    assert v == pytest.approx(0.5 + 0.3 + 0.25 + 0.15, rel=1e-6)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([[0], [1, 0]]))
    with pytest.raises(BrwsimError, match="prefix-closed"):
        dr.parse_drafter(f"static:path={bad}")
    for spec in ["nope", "eagle:top_k=0", "eagle:width=3", "static", "static:k=2,path=x", "topq:x=1"]:
        with pytest.raises(BrwsimError) as e:
            dr.parse_drafter(spec)
        assert "\n" not in str(e.value)
    with pytest.raises(BrwsimError, match="fewer than P"):
        dr.drafter_values(key(0), "static:path=" + str(f), FIXED, None, [5], 1)


@pytest.mark.parametrize("seed", range(4))
def test_sequoia_dp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.05, 0.9, 3)
    if seed % 2:
        a = np.sort(a)[::-1]
    for n in range(1, 6):
        val, paths = dr.sequoia_dp(a, n)
        assert val == pytest.approx(dr.brute_force_best(a, n), rel=1e-12)
        assert len(paths) <= n
        assert sum(math.prod(a[r] for r in p) for p in paths) == pytest.approx(val, rel=1e-12)
        dr.bfs_order(paths)  # prefix-closed
    if seed % 2:  # sorted rates: the greedy (Tunstall) tree is optimal too
        assert dr.greedy_tree(a, 5)[0] == pytest.approx(dr.sequoia_dp(a, 5)[0], rel=1e-12)


def test_sequoia_depth_limit():
    a = np.array([0.9, 0.05])
    v1, p1 = dr.sequoia_dp(a, 4, depth=1)
    assert v1 == pytest.approx(0.95) and all(len(p) == 1 for p in p1)
    v2, p2 = dr.sequoia_dp(a, 4, depth=2)
    assert max(len(p) for p in p2) <= 2 and v2 == pytest.approx(0.9 + 0.81 + 0.05 + 0.9 * 0.05)


def test_sequoia_equals_oracle_on_deterministic_tree():
    want = _oracle(FIXED, 10)[0, [2, 9]]
    got = dr.drafter_values(key(0), "sequoia:samples=2", FIXED, None, [3, 10], 1)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_drafters_never_beat_the_oracle_per_tree():
    law, dl, P = "dirichlet:V=16,alpha=0.3", "noise:sigma=1", [1, 4, 9]
    o = dr.drafter_values(key(3), "oracle", law, None, P, 24)
    for d in ["topq", "eagle:top_k=3,depth=2", "chain", "static:k=3"]:
        v = dr.drafter_values(key(3), d, law, dl, P, 24)
        assert np.all(v <= o + 1e-5), d
        assert np.all(v > 0)


def test_draft_law_is_a_pure_function_of_the_node_and_errors_are_one_line():
    law = parse_law("dirichlet:V=8,alpha=0.5")
    dl = parse_draft_law("noise:sigma=0.7")
    k = jax.random.key(5)
    a, b = node_pq(law, dl, k, 0), node_pq(law, dl, k, 0)
    np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))
    assert np.exp(np.asarray(a[1])).sum() == pytest.approx(1, abs=1e-5)
    for spec in ["noise", "noise:sigma=x", "temp:T=-1", "mix:w=2,law=fixed:probs=1", "mix:law=", "zzz:a=1"]:
        with pytest.raises(BrwsimError) as e:
            parse_draft_law(spec)
        assert "\n" not in str(e.value)
    with pytest.raises(BrwsimError, match="V="):
        dr.drafter_values(key(0), "topq", "dirichlet:V=4,alpha=1", "mix:w=0.5,law=dirichlet:V=8,alpha=1", [2], 1)


def test_draft_stats_exact_cases():
    # temperature on a fixed law: closed form
    st = draft_stats(key(0), FIXED, "temp:T=2")
    p = np.array([0.5, 0.3, 0.15, 0.05])
    q = np.sqrt(p) / np.sqrt(p).sum()
    assert st.cross_entropy.mean == pytest.approx(-(p * np.log(q)).sum(), rel=1e-5)
    assert st.kl.mean == pytest.approx((p * np.log(p / q)).sum(), rel=1e-4, abs=1e-6)
    st0 = draft_stats(key(0), "dirichlet:V=8,alpha=0.5", "exact", samples=64)
    assert st0.kl.mean == pytest.approx(0, abs=1e-6)


def test_simulate_and_cli_with_a_drafter(capsys):
    r = simulate(FIXED, P=[1, 4], trees=2, drafter="topq", draft_law="exact")
    assert r[4].stat.mean == pytest.approx(_oracle(FIXED, 4)[0, 3], rel=1e-6)
    d = r.to_dict()
    assert d["drafter"] == "topq" and d["draft"]["draft_law"] == "exact"
    rc = cli_main(
        ["simulate", "--law", FIXED, "--P", "2,5", "--trees", "3", "--drafter", "chain", "--draft-law",
         "noise:sigma=0.3", "--json"]
    )  # fmt: skip
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["drafter"] == "chain" and out["draft"]["kl"] > 0 and len(out["results"]) == 2
    assert cli_main(["simulate", "--law", FIXED, "--draft-law", "noise:sigma=1"]) == 2
    assert "drafter" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["drafters", "drafter_gap"])
def test_experiment_quick(name, tmp_path, monkeypatch):
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    info = importlib.import_module(f"experiments.{name}").main(["--quick"])
    with open(tmp_path / "results" / "quick" / f"{name}.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"law", "P", "statistic", "mean", "ci95"} <= set(rows[0])
    assert any(r["statistic"] == "gap" for r in rows)
    for fig in info["figures"]:
        assert fig.exists() and fig.stat().st_size > 10_000
