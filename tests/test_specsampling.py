"""Stochastic verification: exact output (chi-square), Yin et al.'s TV identity, races."""

from __future__ import annotations

import csv
import importlib

import numpy as np
import pytest
from jax.random import key
from scipy.stats import chisquare

from brwsim import specsampling as ss
from brwsim import tree_keys
from brwsim.drafters import draft_stats
from brwsim.errors import BrwsimError
from brwsim.testing import exact_pair_law

LAW = "dirichlet:V=3,alpha=1"
DL = "noise:sigma=1.2"
SEED = 11
RUNS = 12000


@pytest.fixture(scope="module")
def ref():
    r = exact_pair_law(LAW, tree_keys(key(SEED), 0, 1)[0]).ravel()
    return r / r.sum()


def _pvalue(tokens, ref):
    c = np.bincount(tokens[:, 0] * 3 + tokens[:, 1], minlength=9)
    return chisquare(c, ref * c.sum()).pvalue


@pytest.mark.parametrize("widths", [(1, 1), (3, 1), (2, 2)])
def test_rejection_schemes_output_the_target(widths, ref):
    g = ss.generate(key(SEED), LAW, DL, widths, T=2, runs=RUNS, same_tree=True)
    assert (g.event == ss.REJECT).any() and (g.event == ss.ACCEPT).any()
    assert _pvalue(g.token, ref) > 1e-3


def test_exponential_race_outputs_the_target(ref):
    pi, H, _ = ss.race_rank_law(key(SEED), LAW, DL, samples=2000)
    out = ss.race(key(SEED), LAW, DL, ss.optimal_race_tree(pi, 3), runs=RUNS, same_tree=True)
    assert _pvalue(out.token, ref) > 1e-3
    assert 0 < H < np.log(3) + 1e-9


def test_a_biased_sampler_is_rejected(ref):
    # the test has power: the drafter's own tokens (no correction) fail it
    g = ss.generate(key(SEED), LAW, "temp:T=3", (1, 1), T=2, runs=RUNS, same_tree=True)
    tok = g.token.copy()
    assert _pvalue(tok[g.event[:, 0] == ss.ACCEPT], ref) < 1e-3


def test_yin_identity_rejections_equal_summed_tv():
    d = ss.rejection_identity(key(2), "dirichlet:V=16,alpha=0.3", "noise:sigma=1", (1,) * 6, T=6, runs=3000)
    diff = d.difference
    assert abs(diff.mean) < 4 * diff.se
    assert d.tv_all.mean == pytest.approx(d.tv_verified.mean)
    # with finite chains, the identity holds on the verified positions only
    d3 = ss.rejection_identity(key(2), "dirichlet:V=16,alpha=0.3", "noise:sigma=1", (1, 1), T=6, runs=3000)
    assert abs(d3.difference.mean) < 4 * d3.difference.se
    assert d3.tv_verified.mean < d3.tv_all.mean
    # batch drafting rejects less than the summed TV
    db = ss.rejection_identity(key(2), "dirichlet:V=16,alpha=0.3", "noise:sigma=1", (4,) + (1,) * 5, T=6, runs=3000)
    assert db.difference.mean + 4 * db.difference.se < 0


def test_one_token_acceptance_is_one_minus_tv():
    law, dl = "dirichlet:V=16,alpha=0.3", "noise:sigma=1"
    x = ss.call_accepted(key(4), law, dl, (1,), runs=6000)
    tv = draft_stats(key(4), law, dl, samples=6000).tv
    se = np.hypot(x.std() / np.sqrt(x.size), tv.se)
    assert abs(x.mean() - (1 - tv.mean)) < 4 * se


def test_shapes_and_bounds():
    assert ss.drafted_count(ss.shape("sequence", 5)) == 5
    for k in (1, 4, 16):
        for s in ("batch", "tree"):
            assert ss.drafted_count(ss.shape(s, k)) == k
    for bad in [("batch", 6), ("tree", 3), ("fan", 2)]:
        with pytest.raises(BrwsimError):
            ss.shape(*bad)
    assert ss.kobus_bound(100, 3, 1.0) == pytest.approx(np.log(100) + np.log(4))
    # with q = p the race always accepts rank 0: H[R] = 0 and the chain accepts everything
    out = ss.race(key(0), "dirichlet:V=8,alpha=0.5", "exact", [(0,), (0, 0)], runs=50)
    assert (out.X == 2).all()


def test_spec_sampling_quick(tmp_path, monkeypatch):
    monkeypatch.setenv("BRWSIM_OUT", str(tmp_path))
    info = importlib.import_module("experiments.spec_sampling").main(["--quick"])
    with open(tmp_path / "results" / "quick" / "spec_sampling.csv") as f:
        rows = list(csv.DictReader(f))
    schemes = {r.get("scheme") for r in rows}
    assert {"sequence", "batch", "tree", "race optimal tree"} <= schemes
    assert info["figures"][0].exists()
