"""simulate on the binary tree p = (1/2, 1/2), where everything is known by hand.

Every node has two children of probability 1/2. The best P-node trees take the shallowest nodes:
E[X] = 1/2, 1, 5/4 at P = 1, 2, 3 (the P(v) of the nodes taken), with no spread between trees. The
target's sampled continuation through the 3-node tree {a, b, aa} accepts 1 token, and a second with
probability 1/2 * 1/2: mean 5/4, variance 3/16. Along the spine S_d = d ln 2 on every walk, so the
splitting bound min_d (d - 1) + P 2^-d and the dual bound min_d (d - 2) + (P + 2) 2^-d are exact.
"""

from __future__ import annotations

import io
import json
import math
import re
import sys
import time
import types
from fractions import Fraction
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import brwsim.estimate as est
from brwsim._checkpoint import Checkpoint
from brwsim._stats import CONVENTION
from brwsim.drafters import parse_drafter
from brwsim.errors import BrwsimError
from brwsim.estimate import oracle_values
from brwsim.laws import markov_law, parse_law
from brwsim.oracle import default_batch, kernel_choice, oracle_memory
from brwsim.testing import returns_within
from brwsim.theory import KINDS

LN2 = math.log(2)


def simulate(*args, **kwargs):
    """brwsim.simulate, where a KeyboardInterrupt that no test simulated fails the test (escaping, it would end
    the whole pytest session instead). Where a test expects one, it calls ``est.simulate``."""
    try:
        return est.simulate(*args, **kwargs)
    except KeyboardInterrupt:
        pytest.fail("simulate raised KeyboardInterrupt: it reported no finished tree")


@pytest.fixture()
def search_ends(monkeypatch):
    """Every search for the largest P that fits must return within seconds (a hang guard)."""
    real = est._largest_P
    monkeypatch.setattr(est, "_largest_P", lambda law, budget: returns_within(10, real, law, budget))


@pytest.fixture(scope="module")
def result():
    return simulate("fixed:probs=0.5/0.5", P=[1, 2, 3], trees=1500, seed=3, check=True, bounds=True)


def test_oracle_values_by_hand(result):
    assert [r.stat.mean for r in result.results] == pytest.approx([0.5, 1.0, 1.25], rel=1e-6)
    assert [r.stat.se for r in result.results] == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
    assert (result.mu, result.mu2) == pytest.approx((LN2, LN2**2), rel=1e-6)
    assert result.trees == 1500 and result.iid


def test_the_check_rides_on_the_largest_budget(result):
    assert result[1].check is None and result[2].check is None
    c = result[3].check
    assert c.n == 1500 and abs(c.mean - 1.25) <= 4 * math.sqrt(3 / 16 / 1500)
    d = [r.to_dict() for r in result.results]
    assert "check_mean" not in d[0] and "check_mean" not in d[1]
    assert d[2]["check_mean"] == c.mean and d[2]["check_ci95"] == pytest.approx(1.959963984540054 * c.se)


@pytest.mark.parametrize("P", [1, 2, 3])
def test_bounds_on_the_binary_tree(result, P):
    b = result[P].bounds
    split = min([P] + [(d - 1) + P * 2.0**-d for d in range(1, 6)])
    dual = min([P] + [(d - 2) + (P + 2) * 2.0**-d for d in range(1, 6)])
    assert b.splitting.estimate == pytest.approx(split, rel=1e-5) and b.splitting.se == pytest.approx(0, abs=1e-6)
    assert b.dual.estimate == pytest.approx(dual, rel=1e-5) and b.dual.se == pytest.approx(0, abs=1e-6)
    assert b.dual.upper >= result[P].stat.mean - 1e-6  # here the dual bound is tight
    ren = min(P, (math.log(LN2 * P) + 1) / LN2 + 1 - 1) if LN2 * P >= 1 else P
    assert b.renewal == pytest.approx(ren, rel=1e-6)


def test_the_result_as_json_by_hand(result):
    d = result.to_dict()
    assert set(d) == {"law", "convention", "iid", "drafter", "mu", "mu2", "mu_se", "mu2_se", "trees", "seed"} | {
        "results",
        "kinds",
    }
    assert (d["law"], d["iid"], d["drafter"], d["trees"], d["seed"]) == ("fixed:probs=0.5/0.5", True, "oracle", 1500, 3)
    assert d["convention"] == CONVENTION and d["kinds"] == KINDS
    assert (d["mu"], d["mu2"], d["mu_se"], d["mu2_se"]) == pytest.approx((LN2, LN2**2, 0, 0), abs=1e-6)
    assert [r["P"] for r in d["results"]] == [1, 2, 3]
    assert [r["mean"] for r in d["results"]] == pytest.approx([0.5, 1.0, 1.25], rel=1e-6)
    assert all(r["ci95"] == pytest.approx(0, abs=1e-6) and r["se"] == pytest.approx(0, abs=1e-6) for r in d["results"])
    assert {"P", "mean", "ci95", "se", "bounds", "dual_estimate", "splitting_estimate"} <= set(d["results"][0])
    assert [("check_mean" in r) for r in d["results"]] == [False, False, True]  # the check rides on P = 3
    assert not result.interrupted and result.trees_requested == 1500 and result.values is None
    assert result.checkpoint is None and result.draft is None and result.law == "fixed:probs=0.5/0.5"
    with pytest.raises(KeyError):
        result[4]


def test_every_tree_and_its_continuation_on_the_binary_tree():
    law = parse_law("fixed:probs=0.5/0.5")
    values, acc = oracle_values(jax.random.key(3), law, 3, 1500, check=True)
    assert values.shape == (1500, 3) and values.dtype == np.float64
    np.testing.assert_allclose(values, np.tile([0.5, 1.0, 1.25], (1500, 1)), rtol=1e-6)
    assert acc.shape == (1500,) and set(np.unique(acc)) == {1, 2}
    assert abs(acc.mean() - 1.25) <= 4 * math.sqrt(3 / 16 / 1500)
    v, a = oracle_values(jax.random.key(3), law, 2, 5)
    assert a is None and v.shape == (5, 2) and np.allclose(v, [0.5, 1.0])
    # tree n's continuation has its own key: the same for any batch size
    _, acc500 = oracle_values(jax.random.key(3), law, 3, 1500, batch=500, check=True)
    np.testing.assert_array_equal(acc500, acc)


def test_rounds_keep_every_tree_value_in_order():
    # 40 trees in rounds of 16 (16, 16, 8): every tree's values, each column in tree order
    law = parse_law("fixed:probs=0.5/0.5")
    t0 = time.perf_counter()
    r = simulate(law, P=[1, 3], trees=40, seed=3, bounds=False, keep_values=True, round_trees=16)
    assert 0 < r.seconds <= time.perf_counter() - t0 and r.law == law.spec()  # a law object: its SPEC
    assert r.values.shape == (40, 2) and r.trees == 40
    np.testing.assert_allclose(r.values, np.tile([0.5, 1.25], (40, 1)), rtol=1e-6)
    assert [x.stat.n for x in r.results] == [40, 40] and all(x.bounds is None for x in r.results)
    assert "kinds" not in r.to_dict()


def _interrupt_after(monkeypatch, trees):
    """Make the oracle's (and the other drafters') batches raise Ctrl-C once ``trees`` trees are done."""
    real, real_drafter = est._oracle_batches, est.drafter_batches

    def batches(key, law, P_max, lo, hi, B, devs, check):
        if lo >= trees:
            raise KeyboardInterrupt
        yield from real(key, law, P_max, lo, hi, B, devs, check)

    def drafter_batches(key, d, law, dlaw, P_list, hi, batch=None, lo=0):
        if lo >= trees:
            raise KeyboardInterrupt
        yield from real_drafter(key, d, law, dlaw, P_list, hi, batch, lo=lo)

    monkeypatch.setattr(est, "_oracle_batches", batches)
    monkeypatch.setattr(est, "drafter_batches", drafter_batches)


def test_an_interrupted_run_returns_its_finished_rounds_and_resumes(tmp_path, monkeypatch):
    args = dict(law="fixed:probs=0.5/0.5", P=[1, 3], trees=40, seed=3, round_trees=16)
    notes = []  # what a fault would print: the trees finished, and where they are kept
    with monkeypatch.context() as m:
        _interrupt_after(m, 16)
        m.setattr(est.processes, "note_finished", notes.append)
        r = simulate(**args, checkpoint=tmp_path)
    assert notes[0] == "no round of 16 trees a process was finished yet" and notes[-1] is None
    assert notes[1] == f"16 of 40 trees are kept in {r.checkpoint}: rerun the same command to resume"
    assert r.interrupted and r.trees == 16 and r.trees_requested == 40
    assert all(x.bounds is None for x in r.results) and [x.stat.n for x in r.results] == [16, 16]
    d = r.to_dict()
    assert d["interrupted"] is True and d["trees_requested"] == 40 and d["trees"] == 16 and "kinds" not in d
    path = r.checkpoint
    assert path.startswith(str(tmp_path))
    with np.load(path) as z:  # what fixes the run's numbers, and the trees finished
        assert int(z["done"]) == 16
        meta = json.loads(str(z["meta"]))
    np.testing.assert_array_equal(parse_law(meta["law"]).logp, parse_law("fixed:probs=0.5/0.5").logp)
    assert {k: meta[k] for k in ("P", "trees", "seed", "drafter", "draft_law", "check")} == {
        "P": [1, 3],
        "trees": 40,
        "seed": 3,
        "drafter": "oracle",
        "draft_law": None,
        "check": False,
    }
    full = simulate(**args, checkpoint=tmp_path)  # resumes after the first round
    assert not full.interrupted and full.trees == 40 and [x.stat.n for x in full.results] == [40, 40]
    assert [x.stat.mean for x in full.results] == pytest.approx([0.5, 1.25], rel=1e-6)
    with monkeypatch.context() as m:  # everything is finished: a rerun computes no tree
        _interrupt_after(m, 0)
        again = simulate(**args, checkpoint=tmp_path)
    assert again.trees == 40 and not again.interrupted
    assert [x.stat.mean for x in again.results] == [x.stat.mean for x in full.results]
    with pytest.raises(
        BrwsimError, match="^keep_values and checkpoint do not go together: a resumed run has no earlier values$"
    ):
        simulate(**args, checkpoint=tmp_path, keep_values=True)
    with monkeypatch.context() as m:  # interrupted before any round: nothing to report
        _interrupt_after(m, 0)
        with pytest.raises(KeyboardInterrupt):
            est.simulate(**args)
    notes.clear()
    with monkeypatch.context() as m:  # no checkpoint: the finished trees are not kept
        _interrupt_after(m, 16)
        m.setattr(est.processes, "note_finished", notes.append)
        assert simulate(**args).trees == 16
    assert notes[1] == "16 of 40 trees were finished (run with --checkpoint DIR to keep finished rounds)"


@pytest.mark.parametrize(
    "kw,msg",
    [
        (
            {"trees": 2**32},
            "trees must be at most 4294967295 (tree indices are 32-bit), got 4294967296; "
            "run several seeds for more, each seed's trees are independent of the others'",
        ),
        ({"seed": 2**32}, "seed must be an integer from 0 to 4294967295, got 4294967296"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"trees": 0}, "trees must be an integer >= 1, got 0"),
        ({"batch": 0}, "batch must be an integer >= 1, got 0"),
        ({"draft_law": "exact"}, "--draft-law applies to a drafter other than the oracle; add e.g. --drafter topq"),
        ({"P": [0]}, "P must be an integer >= 1, got 0"),
        ({"round_trees": 0}, "round-trees must be an integer >= 1, got 0"),
        (
            {"drafter": "topq", "draft_law": "mix:w=0.5,law=fixed:probs=0.25/0.25/0.25/0.25"},
            "draft law mix: the second law has V=4 tokens but the target law has 2; use a second law with V <= 2",
        ),
    ],
)
def test_inputs_refused_before_any_tree(kw, msg):
    args = {"law": "fixed:probs=0.5/0.5", "P": [1], "trees": 1, "seed": 0} | kw
    with pytest.raises(BrwsimError, match=f"^{re.escape(msg)}$"):
        simulate(**args)


def test_the_largest_inputs_accepted(tmp_path):
    assert est._check_inputs("fixed:probs=1", [1], 1, 0, None, "topq", None)[3] == 0  # seed 0
    np.savez(tmp_path / "top2.npz", probs=np.array([[0.5, 0.3]]), entropy=np.ones(1), m2=np.ones(1))
    with pytest.raises(BrwsimError, match="keeps only the top 2 entries per row, but a tree of P=3"):
        simulate(f"pool:path={tmp_path / 'top2.npz'}", P=[1, 3], trees=1)
    (tmp_path / "file").write_text("")
    with pytest.raises(BrwsimError, match="--checkpoint .*: cannot create the directory"):
        simulate("fixed:probs=1", P=[1], trees=1, checkpoint=tmp_path / "file" / "dir")
    law, P, trees, seed, batch, d = est._check_inputs(
        "fixed:probs=0.5/0.5", [2, 1], 2**32 - 1, 2**32 - 1, 7, None, None
    )
    assert (law.vocab, P, trees, seed, batch, d.text) == (2, [1, 2], 2**32 - 1, 2**32 - 1, 7, "oracle")


def test_batches_and_memory_checks_against_a_brute_force_fit(monkeypatch, search_ends):
    law = parse_law("fixed:probs=0.5/0.5")
    per = est.tree_bytes(law, 64)
    assert per - oracle_memory(law, 64) == 72 * 65  # beside the kernel: 72 bytes per node of P + 1
    monkeypatch.setattr(est, "available_memory", lambda devs=None: None)
    assert est.plan_batch(law, 64, 1000, None, None) == min(default_batch(law, 64), 1000)
    assert est.plan_batch(law, 64, 7, None, None) == 7
    assert est.plan_batch(law, 64, 5, None, [0, 1, 2]) == 6  # a multiple of the device count
    assert est.plan_batch(law, 64, 5000, None, [0, 1, 2]) == 5001  # the default batch is per device
    assert est.plan_batch(law, 64, 1000, 7, None) == 7
    avail = 1000 * per / 0.8 + 1  # room for 1000 trees, not 1001
    monkeypatch.setattr(est, "available_memory", lambda devs=None: avail)
    assert est.plan_batch(law, 64, 5000, None, None) == 1000  # the default batch shrinks to what fits
    assert est.plan_batch(law, 64, 5000, 1000, None) == 1000
    assert est.plan_batch(law, 64, 5000, None, [0, 1, 2]) == 999  # equal shares: 333 trees a device
    big = lambda devs=None: avail if devs == [0, 1, 2] else 1e30  # noqa: E731
    monkeypatch.setattr(est, "available_memory", big)
    assert est.plan_batch(law, 64, 5000, None, [0, 1, 2]) == 999  # the memory of the devices the run uses
    monkeypatch.setattr(est, "available_memory", lambda devs=None: avail)
    with pytest.raises(BrwsimError, match="--batch 1001 at P=64 .* the largest batch that fits is 1000$"):
        est.plan_batch(law, 64, 5000, 1001, None)
    small = per / 0.8 * 0.5  # not even one tree at P = 64: the message names the largest P that fits
    monkeypatch.setattr(est, "available_memory", lambda devs=None: small)
    with pytest.raises(BrwsimError, match=r"the largest P that fits is about (\d+);") as e:
        est.plan_batch(law, 64, 10, None, None)
    fit = int(re.search(r"fits is about (\d+);", str(e.value)).group(1))
    assert est.tree_bytes(law, fit) <= 0.8 * small < est.tree_bytes(law, fit + 1)  # brute force: the largest P
    assert "`brwsim laws` gives the spine's bounds with no tree" in str(e.value) and "1 trees at once" in str(e.value)
    for room in (est.tree_bytes(law, 2000), est.tree_bytes(law, 1) * 1.01):  # a large P, and P = 1 only
        monkeypatch.setattr(est, "available_memory", lambda devs=None, room=room: room / 0.8)
        with pytest.raises(BrwsimError, match=r"the largest P that fits is about (\d+);") as e:
            est.plan_batch(law, 2**20, 10, None, None)
        fit = int(re.search(r"fits is about (\d+);", str(e.value)).group(1))
        assert est.tree_bytes(law, fit) <= room < est.tree_bytes(law, fit + 1)
    dl = parse_law("dirichlet:V=8,alpha=1")  # a drawn law needs room for two trees
    two = est.tree_bytes(dl, 64) / 0.8 * 1.5
    monkeypatch.setattr(est, "available_memory", lambda devs=None: two)
    with pytest.raises(BrwsimError, match="2 trees at once") as e:
        est.plan_batch(dl, 64, 10, None, None)
    assert f"needs about {2 * est.tree_bytes(dl, 64) / 1e9:.3g} GB" in str(e.value)
    assert f"more than the {0.8 * two / 1e9:.3g} GB a run may use here" in str(e.value)
    # 100 trees' values at P = 3 take 8 * 100 * (3 + 1) = 3200 bytes, more than 80% of 3750
    monkeypatch.setattr(est, "available_memory", lambda devs=None: 3750)
    with pytest.raises(BrwsimError, match=r"needs 2.4e-06 GB \(100 trees x P=3\) but 3.75e-06 GB are available"):
        oracle_values(jax.random.key(0), law, 3, 100)


def test_the_progress_bar():
    bar = est._progress(7, "oracle P=3", True)
    assert not bar.disable and (bar.total, bar.desc, bar.unit, bar.leave) == (7, "oracle P=3", "tree", False)
    bar.close()
    assert est._progress(7, "x", False).disable
    lines = est._progress(7, "x", None)  # stderr is not a terminal under pytest: lines once the run is slow
    assert isinstance(lines, est._SlowLines) and (lines.total, lines.n) == (7, 0)
    assert est._progress(7, "x", None, initial=3).n == 3  # a resumed run's trees are counted, not timed


def test_the_progress_bar_shows_by_default_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    bar = est._progress(7, "oracle P=3", None)
    assert not bar.disable
    bar.close()
    assert est._progress(7, "x", False).disable


def test_a_drafter_with_the_exact_draft_law_matches_the_oracle(monkeypatch):
    # q = p: top-q takes the P nodes of largest path probability, as the oracle does; entropy = cross-entropy = ln 2
    monkeypatch.setattr(est, "tqdm", _Bar)
    monkeypatch.setattr(_Bar, "bars", [])
    r = simulate(
        "fixed:probs=0.5/0.5",
        P=[1, 2, 3],
        trees=64,
        seed=3,
        drafter="topq",
        check=True,
        bounds=False,
        batch=32,
        progress=True,
    )
    # one tree of P = 3 serves every P (top-q is nested): 64 trees in all, the check's batches count none
    assert [(b.total, b.desc, b.n) for b in _Bar.bars] == [(64, "topq P=3", 64)]
    r8 = simulate("fixed:probs=0.5/0.5", P=[3], trees=8, seed=3, drafter="topq", check=True, bounds=False)
    assert r8[3].stat.mean == pytest.approx(1.25, rel=1e-6) and r8[3].check.n == 8  # the default batch
    assert r.drafter == "topq" and [x.stat.mean for x in r.results] == pytest.approx([0.5, 1.0, 1.25], rel=1e-6)
    assert r[1].check is None and r[2].check is None and r[3].check.n == 64
    assert abs(r[3].check.mean - 1.25) <= 4 * math.sqrt(3 / 16 / 64)
    assert r.draft["drafter"] == "topq" and r.draft["draft_law"] == "exact"
    assert (r.draft["entropy"], r.draft["cross_entropy"]) == pytest.approx((LN2, LN2), rel=1e-6)
    assert (r.draft["kl"], r.draft["tv"], r.draft["kl_se"], r.draft["entropy_se"]) == pytest.approx(
        (0, 0, 0, 0), abs=1e-6
    )
    assert r.to_dict()["draft"] == r.draft and r.to_dict()["drafter"] == "topq"


def test_the_defaults_on_the_binary_tree():
    # P = 1, 4, 16, 64 take the shallowest nodes: 1/2; 2 (1/2) + 2 (1/4) = 3/2; the 14 nodes of depths 1 .. 3
    # (sum 3) and two of depth 4 = 3 + 1/8; the 62 nodes of depths 1 .. 5 (sum 5) and two of depth 6 = 5 + 1/32.
    # 1000 trees of seed 0, with the bounds and no check
    r = simulate("fixed:probs=0.5/0.5")
    assert [x.P for x in r.results] == [1, 4, 16, 64]
    assert [x.stat.mean for x in r.results] == pytest.approx([0.5, 1.5, 3.125, 5.03125], rel=1e-6)
    assert (r.trees, r.seed, r.drafter, r.values) == (1000, 0, "oracle", None)
    assert all(x.stat.n == 1000 and x.bounds is not None and x.check is None for x in r.results)
    # the law as it was given (its SPEC reads back as 0.499999999/0.499999999), exact moments with no error
    assert r.law == "fixed:probs=0.5/0.5" and parse_law(r.law).spec() != r.law
    assert (r.mu, r.mu2) == pytest.approx((LN2, LN2**2), rel=1e-6) and (r.mu_se, r.mu2_se) == (0.0, 0.0)


class _Bar:
    """Stands in for tqdm: records each bar's total, description and the trees it was told of."""

    bars: list = []

    def __init__(self, total, desc, unit, disable, file, leave):
        self.total, self.desc, self.disable, self.n = total, desc, disable, 0
        _Bar.bars.append(self)

    def update(self, n):
        self.n += n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_progress_counts_every_tree_once(tmp_path, monkeypatch):
    monkeypatch.setattr(est, "tqdm", _Bar)
    monkeypatch.setattr(_Bar, "bars", [])
    law = parse_law("fixed:probs=0.5/0.5")
    oracle_values(jax.random.key(3), law, 3, 40, batch=16, progress=True)  # batches of 16, 16, 8
    args = dict(law=law, P=[1, 3], trees=40, seed=3, bounds=False, round_trees=16, progress=True)
    with monkeypatch.context() as m:  # a first run stops after one round of 16 trees
        _interrupt_after(m, 16)
        simulate(**args, checkpoint=tmp_path)
    simulate(**args, checkpoint=tmp_path)  # resumes: 16 trees restored, 24 computed
    totals = [(b.total, b.desc, b.disable, b.n) for b in _Bar.bars]
    assert totals == [(40, "oracle P=3", False, 40), (40, "oracle P=3", False, 16), (40, "oracle P=3", False, 40)]
    assert all(type(b.total) is int for b in _Bar.bars)  # a count of trees


def test_plan_batch_messages_by_hand(monkeypatch, search_ends):
    # a tree of P nodes takes exactly 1 MB a node: every size, fit and message below is a hand computation
    monkeypatch.setattr(est, "tree_bytes", lambda law, P: 10**6 * P)
    law, drawn = parse_law("fixed:probs=0.5/0.5"), parse_law("dirichlet:V=8,alpha=1")
    monkeypatch.setattr(est, "available_memory", lambda devs=None: 1.25e9)  # a run may use 80%: 1e9 bytes
    assert est.MEMORY_FRACTION * 1.25e9 == 10**9
    assert est.plan_batch(law, 1000, 5, None, None) == 1  # one tree of 1000 nodes fills the budget exactly
    assert est.plan_batch(law, 1000, 5, 1, None) == 1
    monkeypatch.setattr(est, "available_memory", lambda devs=None: 1.54375e9)  # 80%: 1.235e9 bytes
    assert est.MEMORY_FRACTION * 1.54375e9 == 1.235e9
    # the doubles nearest 1.235 and 2.345 lie just above them: these print as 1.24 and 2.35 GB, so dividing by
    # anything but 1e9 (even 1e9 + 1) shows in the message
    with pytest.raises(BrwsimError) as e:
        est.plan_batch(law, 2345, 10, None, None)
    assert str(e.value) == (
        f"P=2345 needs about 2.35 GB for the oracle ({law.spec()}, 1 trees at once), more than the 1.24 GB a run "
        "may use here (80% of the memory available): the largest P that fits is about 1235; beyond it, "
        "`brwsim laws` gives the spine's bounds with no tree"
    )
    # a drawn law runs two trees at once: the largest P is that of half the budget, 617.5 MB
    with pytest.raises(BrwsimError) as e:
        est.plan_batch(drawn, 1000, 10, None, None)
    assert str(e.value).startswith(
        "P=1000 needs about 2 GB for the oracle (dirichlet:V=8,alpha=1, 2 trees at once), more than the 1.24 GB "
    )
    assert " the largest P that fits is about 617; " in str(e.value)
    # P = 5: 5 MB a tree, 247 trees fit in 1.235e9 bytes (123 a device on two devices); 469 trees take 2.345e9
    assert est.plan_batch(law, 5, 1000, None, None) == 247
    assert est.plan_batch(law, 5, 1000, 247, None) == 247
    assert est.plan_batch(law, 5, 1000, None, [0, 1]) == 246
    with pytest.raises(BrwsimError) as e:
        est.plan_batch(law, 5, 1000, 469, None)
    assert str(e.value) == (
        "--batch 469 at P=5 needs about 2.35 GB, more than the 1.24 GB a run may use here: "
        "the largest batch that fits is 247"
    )


def test_keeping_every_tree_value_needs_8_bytes_a_value_and_one_more_column(monkeypatch):
    law = parse_law("fixed:probs=0.5/0.5")
    # 100 trees at P = 3 take 8 * 100 * (3 + 1) = 3200 bytes: exactly 80% of 4000, so they are kept
    monkeypatch.setattr(est, "available_memory", lambda devs=None: 4000)
    assert est.MEMORY_FRACTION * 4000 == 3200
    values, _ = oracle_values(jax.random.key(0), law, 3, 100)
    np.testing.assert_allclose(values, np.tile([0.5, 1.0, 1.25], (100, 1)), rtol=1e-6)
    # 8 * 154375000 trees * P = 1.235e9 bytes, with 1.235e9 available (the doubles print as 1.24 GB)
    monkeypatch.setattr(est, "available_memory", lambda devs=None: 1.235e9)
    with pytest.raises(BrwsimError) as e:
        oracle_values(jax.random.key(0), law, 1, 154375000)
    assert str(e.value) == (
        "keeping every tree's values needs 1.24 GB (154375000 trees x P=1) but 1.24 GB are available here; "
        "use brwsim.simulate, which keeps running sums"
    )


class _Accelerator:
    """A device that is not the CPU (so the native CPU kernel cannot serve it) and reports its free memory."""

    platform = "gpu"

    def __init__(self, free: int):
        self.free = free

    def memory_stats(self):
        return {"bytes_limit": self.free, "bytes_in_use": 0}


def test_the_devices_asked_for_plan_and_run_the_oracle(monkeypatch, search_ends):
    law = parse_law("fixed:probs=0.5/0.5")
    small = _Accelerator(est.tree_bytes(law, 3))  # 80% of it: not one tree at P = 3
    with pytest.raises(BrwsimError, match=r"^P=3 needs about .* the largest P that fits is about \d+;"):
        oracle_values(jax.random.key(0), law, 3, 2, devices=[small])
    with monkeypatch.context() as m:  # no devices named: the default ones
        m.setattr(est, "default_devices", lambda: [small])
        with pytest.raises(BrwsimError, match=r"^P=3 needs about .* the largest P that fits is about \d+;"):
            oracle_values(jax.random.key(0), law, 3, 2)
    # room enough: the trees run on the device named, which the native CPU kernel refuses
    with kernel_choice("native"), pytest.raises(BrwsimError, match="^the native oracle kernel serves only CPU devices"):
        oracle_values(jax.random.key(0), law, 3, 2, devices=[_Accelerator(10**12)])


def _continuation_of_one_node(seed: int, trees: int) -> np.ndarray:
    """Accepted lengths through the 1-node tree {a} of the binary tree, from the documented keys alone.

    Tree n's continuation has key fold_in(fold_in(key(seed), CHECK = 1), n); its first draw, from
    fold_in(that key, 0), picks the root's top entry (the node a, 1/2) or the rest (1/2): 1 token or none.
    """
    check = jax.random.fold_in(jax.random.key(seed), 1)
    logits = jnp.log(jnp.array([0.5, 0.5], jnp.float32))
    draws = [jax.random.categorical(jax.random.fold_in(jax.random.fold_in(check, n), 0), logits) for n in range(trees)]
    return (np.array(draws) == 0).astype(np.int64)


def test_the_check_walks_its_own_stream():
    law = parse_law("fixed:probs=0.5/0.5")
    want = _continuation_of_one_node(3, 64)
    assert 0 < want.sum() < 64  # both outcomes occur
    _, acc = oracle_values(jax.random.key(3), law, 1, 64, check=True)
    assert acc.dtype == np.int64
    np.testing.assert_array_equal(acc, want)
    r = simulate(law, P=[1], trees=64, seed=3, check=True, bounds=False)
    assert r[1].check.n == 64 and r[1].check.mean == pytest.approx(want.mean(), abs=1e-12)
    # top-q's 1-node tree is {a} too, and its check walks the same stream
    t = simulate(law, P=[1], trees=64, seed=3, drafter="topq", check=True, bounds=False)
    assert t[1].check.n == 64 and t[1].check.mean == pytest.approx(want.mean(), abs=1e-12)


def test_a_missing_budget_is_the_key_error(result):
    with pytest.raises(KeyError) as e:
        result[4]
    assert e.value.args == (4,)


def test_the_bounds_of_an_iid_law_carry_its_closed_form_and_predictions(result):
    for P in (1, 2, 3):
        assert result[P].bounds.iid is True
        d = result[P].bounds.to_dict()
        assert set(d["bounds"]) == {"dual", "splitting", "renewal"} and "iid_only" not in d
        assert set(d["predictions"]) == {"asymptotic", "theorem1_leading"}


def _spied_curves(monkeypatch) -> list:
    """The spine curves behind each call of the bounds, as they are built."""
    seen, real = [], est.law_curves

    def curves(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(est, "law_curves", curves)
    return seen


def test_the_spine_bounds_walk_to_the_largest_budget(monkeypatch):
    # the binary tree: S_d = d ln 2 on every walk. With mu = ln 2 the walks stop at the first S past
    # ln(1000 ln 2) + 3 = 9.54, at d = 14 (coverage 14 ln 2; without the hint: ln 1000 + 3, d = 15). At P = 1000
    # the splitting bound is min_d (d - 1) + 1000 2^-d = 8 + 1000 / 512 (d = 9), the dual min_d (d - 2) + 1002
    # 2^-d = 7 + 1002 / 512; walks stopped for P = 2 (d = 5) would give 4 + 1000 / 32 and 3 + 1002 / 32
    mom = types.SimpleNamespace(mu=LN2, mu2=LN2**2)
    iid = parse_law("fixed:probs=0.5/0.5")
    markov = markov_law(
        {
            "states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.5/0.5"},
            "initial": "a",
            "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
        }
    )
    for law, walks in ((iid, 8192), (markov, 4096)):  # half as many walks for a Markov law
        seen = _spied_curves(monkeypatch)
        b = est._bounds(jax.random.key(0), law, [1, 2, 1000], mom)
        assert len(seen) == 1 and seen[0].walks == walks and seen[0].coverage == pytest.approx(14 * LN2, rel=1e-6)
        assert b[2].P == 1000 and b[2].iid is law.is_iid
        assert b[2].splitting.estimate == pytest.approx(8 + 1000 / 512, rel=1e-6)
        assert b[2].dual.estimate == pytest.approx(7 + 1002 / 512, rel=1e-6)


def test_a_draft_laws_divergences_by_hand():
    # p = (3/4, 1/4) and q proportional to p^(1/2): q = (sqrt 3, 1) / (sqrt 3 + 1), for every node
    p = np.array([0.75, 0.25])
    q = np.sqrt(p) / np.sqrt(p).sum()
    h, ce = -(p * np.log(p)).sum(), -(p * np.log(q)).sum()
    r = simulate("fixed:probs=0.75/0.25", P=[1], trees=2, seed=0, drafter="topq", draft_law="temp:T=2", bounds=False)
    assert r.draft["drafter"] == "topq" and r.draft["draft_law"] == "temp:T=2"
    got = [r.draft[k] for k in ("entropy", "cross_entropy", "kl", "tv")]
    assert got == pytest.approx([h, ce, ce - h, abs(p[0] - q[0])], rel=1e-5)
    assert r[1].stat.mean == pytest.approx(0.75, rel=1e-6)  # top-q's one node: the first token


def test_the_largest_P_that_fits_by_brute_force(monkeypatch):
    # a tree of P nodes takes 10^6 P bytes: the largest P within a budget is its floor over 10^6
    monkeypatch.setattr(est, "tree_bytes", lambda law, P: 10**6 * P)
    law = parse_law("fixed:probs=0.5/0.5")
    for budget, want in ((10**6, 1), (1.235e9, 1235), (2e6 - 1, 1), (10**6 * 2**20 + 5e5, 2**20), (9.99e12, 9990000)):
        assert want * 10**6 <= budget < (want + 1) * 10**6
        assert returns_within(10, est._largest_P, law, budget) == want


def test_a_batch_never_exceeds_the_budget_by_a_byte(monkeypatch):
    # trees of per bytes (a size past 2^53 / 3, where a float quotient rounds): 3 trees overshoot the budget by
    # less than a part in 2^53, so 2 fit; budget / per rounds to 3.0, its floor division does not
    per = 4845375981200153
    budget = math.nextafter(float(3 * per), 0)
    assert 2 * per <= Fraction(budget) < 3 * per and budget / per == 3.0
    monkeypatch.setattr(est, "tree_bytes", lambda law, P: per)
    monkeypatch.setattr(est, "available_memory", lambda devs=None: budget / 0.8)
    assert 0.8 * (budget / 0.8) == budget
    law = parse_law("fixed:probs=0.5/0.5")
    assert est.plan_batch(law, 1, 1000, None, None) == 2
    with pytest.raises(BrwsimError, match=r"the largest batch that fits is 2$"):
        est.plan_batch(law, 1, 1000, 3, None)


def test_a_run_that_keeps_no_values_holds_none():
    # memory does not grow with the trees: without keep_values the sums hold no tree's value
    for keep in (False, True):
        s = est._Sums([1, 3], keep)
        s.add([0, 1], np.array([[0.5, 1.25], [0.5, 1.25]]))
        s.add([0, 1], np.array([[0.5, 1.25]]))
        assert [c.n for c in s.cols] == [3, 3] and s.check.n == 0
        if keep:
            np.testing.assert_array_equal(s.values(3), [[0.5, 1.25]] * 3)
        else:
            assert s.kept is None and s.values(3) is None


def test_the_checkpoint_names_the_drafter_its_draft_law_and_the_check(tmp_path):
    r = simulate(
        "fixed:probs=0.5/0.5", P=[1], trees=2, drafter="topq", draft_law="temp:T=2", check=True, checkpoint=tmp_path
    )
    with np.load(r.checkpoint) as z:
        meta, done = json.loads(str(z["meta"])), int(z["done"])
    assert done == 2 and r[1].check.n == 2
    assert {k: meta[k] for k in ("P", "trees", "seed", "drafter", "draft_law", "check")} == {
        "P": [1],
        "trees": 2,
        "seed": 0,
        "drafter": "topq",
        "draft_law": "temp:T=2",
        "check": True,
    }


def test_a_markov_law_takes_its_moments_from_the_run_key():
    # both states are the binary law: the binary tree's values, and mu = ln 2, mu2 = (ln 2)^2 along the spine
    law = markov_law(
        {
            "states": {"a": "fixed:probs=0.5/0.5", "b": "fixed:probs=0.5/0.5"},
            "initial": "a",
            "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
        }
    )
    r = simulate(law, P=[1, 3], trees=8, seed=3, bounds=False)
    assert [x.stat.mean for x in r.results] == pytest.approx([0.5, 1.25], rel=1e-6) and not r.iid
    assert (r.mu, r.mu2) == pytest.approx((LN2, LN2**2), rel=1e-6)
    assert 0 <= r.mu_se < 1e-9 and 0 <= r.mu2_se < 1e-9 and r.law == law.spec()


def _keys_per_call(monkeypatch, cls=None):
    """The trees (keys) each oracle call gets, or each call of drafter class ``cls``: the batches a run uses."""
    seen: list[int] = []
    if cls is None:
        real = est.oracle_batch

        def oracle_batch(law, keys, **kw):
            seen.append(int(keys.shape[0]))
            return real(law, keys, **kw)

        monkeypatch.setattr(est, "oracle_batch", oracle_batch)
    else:
        real_trees = cls.trees

        def trees(self, key, law, dlaw, keys, P):
            seen.append(int(keys.shape[0]))
            return real_trees(self, key, law, dlaw, keys, P)

        monkeypatch.setattr(cls, "trees", trees)
    return seen


def test_the_oracle_runs_the_batch_asked_for(monkeypatch):
    # 40 trees in batches of 16: three calls of 16 trees (the last one padded); a run of 5 trees (or of 1) is one
    # batch of 5 (1), however large the default batch
    law = parse_law("fixed:probs=0.5/0.5")
    assert est.default_batch(law, 3) > 5
    seen = _keys_per_call(monkeypatch)
    oracle_values(jax.random.key(3), law, 3, 40, batch=16)
    assert seen == [16, 16, 16]
    seen.clear()
    r = simulate(law, P=[1, 3], trees=40, seed=3, batch=16, bounds=False)
    assert seen == [16, 16, 16] and [x.stat.n for x in r.results] == [40, 40]
    for trees in (5, 1):
        seen.clear()
        r = simulate(law, P=[3], trees=trees, seed=3, bounds=False)
        assert seen == [trees] and r[3].stat.mean == pytest.approx(1.25, rel=1e-6)


def test_a_drafters_batches_and_rounds(monkeypatch):
    # top-q builds its P = 3 tree for both budgets, then the check walks it: with batches of 16, three calls
    # each; in rounds of 16 trees (default batch), each round's trees once for the values and once for the check
    law = parse_law("fixed:probs=0.5/0.5")
    topq = type(parse_drafter("topq"))
    assert topq().batch_size(law, 3) >= 72
    seen = _keys_per_call(monkeypatch, topq)
    args = dict(law=law, P=[1, 3], trees=40, seed=3, drafter="topq", check=True, bounds=False)
    for kw, calls in (({"batch": 16}, [16] * 6), ({"round_trees": 16}, [16, 16, 16, 16, 8, 8])):
        seen.clear()
        r = simulate(**args, **kw)
        assert seen == calls
        assert [x.stat.n for x in r.results] == [40, 40] and r[3].check.n == 40
        assert [x.stat.mean for x in r.results] == pytest.approx([0.5, 1.25], rel=1e-6)


def test_simulate_plans_and_runs_the_oracle_on_the_devices_asked_for(monkeypatch, search_ends):
    law = parse_law("fixed:probs=0.5/0.5")
    small = _Accelerator(est.tree_bytes(law, 3))  # 80% of it: not one tree at P = 3
    args = dict(law=law, P=[3], trees=2, bounds=False)
    with pytest.raises(BrwsimError, match=r"^P=3 needs about .* the largest P that fits is about \d+;"):
        simulate(**args, devices=[small])
    with monkeypatch.context() as m:  # no devices named: the default ones
        m.setattr(est, "default_devices", lambda: [small])
        with pytest.raises(BrwsimError, match=r"^P=3 needs about .* the largest P that fits is about \d+;"):
            simulate(**args)
    # room enough: the trees run on the device named, which the native CPU kernel refuses
    with pytest.raises(BrwsimError, match="^the native oracle kernel serves only CPU devices"):
        simulate(**args, devices=[_Accelerator(10**12)], kernel="native")


def test_progress_of_a_drafter_that_runs_once_per_budget(tmp_path, monkeypatch):
    # Sequoia builds a tree per budget: each tree counts once per budget (40 trees x 2 budgets), the check's
    # batches none; a first run stops after one round of 16 trees, the rerun restores them and computes 24
    monkeypatch.setattr(est, "tqdm", _Bar)
    monkeypatch.setattr(_Bar, "bars", [])
    args = dict(law="fixed:probs=0.5/0.5", P=[1, 3], trees=40, seed=3, drafter="sequoia", check=True)
    args |= dict(bounds=False, round_trees=16, progress=True, checkpoint=tmp_path)
    with monkeypatch.context() as m:
        _interrupt_after(m, 16)
        first = simulate(**args)
    r = simulate(**args)
    assert [(b.total, b.desc, b.n) for b in _Bar.bars] == [(80, "sequoia P=3", 32), (80, "sequoia P=3", 80)]
    assert first.trees == 16 and r.trees == 40 and r[3].check.n == 40
    # its 3-node tree takes both children of the root and one grandchild: 1/2 + 1/2 + 1/4
    assert [x.stat.mean for x in r.results] == pytest.approx([0.5, 1.25], rel=1e-6)


class _TwoProcesses:
    """This process as process ``me`` of two (``brwsim._processes`` as estimate.py sees it).

    ``gather(obj)`` returns ``obj`` at index ``me`` and, at the other index, the next of ``theirs``: what the
    other process sends, in order; ``(lo, hi, seg)`` stands for its share of a round, trees lo .. hi - 1,
    computed here by the real ``_Run.values``. Records this process's own shares (``mine``), what it sent
    (``sent``) and the trees each checkpoint it saved holds (``saved``).
    """

    def __init__(self, monkeypatch, me: int, theirs: list):
        self.me, self.theirs, self.mine, self.sent, self.saved, self.run = me, list(theirs), [], [], [], None
        self.values = est._Run.values
        real_save = Checkpoint.save

        def values(run, lo, hi, seg):
            self.run = run
            self.mine.append((lo, hi, seg))
            return self.values(run, lo, hi, seg)

        def save(ckpt, done, states):
            self.saved.append(done)
            real_save(ckpt, done, states)

        monkeypatch.setattr(est._Run, "values", values)
        monkeypatch.setattr(Checkpoint, "save", save)
        monkeypatch.setattr(est.processes, "count", lambda: 2)
        monkeypatch.setattr(est.processes, "index", lambda: me)
        monkeypatch.setattr(est.processes, "is_main", lambda: me == 0)
        monkeypatch.setattr(est.processes, "gather", self.gather)

    def gather(self, obj):
        self.sent.append(obj)
        other = self.theirs.pop(0)
        if isinstance(other, tuple):
            lo, hi, seg = other
            other = list(self.values(self.run, lo, hi, seg)) if hi > lo else []
        return [obj, other] if self.me == 0 else [other, obj]


def _same_numbers(r, one, trees):
    """Several processes give the numbers of one, bit for bit (and here the binary tree's, by hand)."""
    assert r.trees == one.trees == trees and not r.interrupted
    assert [x.stat for x in r.results] == [x.stat for x in one.results]
    assert [x.stat.n for x in r.results] == [trees, trees]
    assert [x.stat.mean for x in r.results] == pytest.approx([0.5, 1.25], rel=1e-6)
    assert r[3].check == one[3].check and r[3].check.n == trees


def test_process_0_of_two_adds_both_shares_of_every_round(tmp_path, monkeypatch):
    # rounds of 8 trees a process: process 0 takes trees 0-7 and 16-23, process 1 trees 8-15 and none; after
    # each round process 0 saves the trees both finished (16, then all 24)
    law = parse_law("fixed:probs=0.5/0.5")
    args = dict(law=law, P=[1, 3], trees=24, seed=3, check=True, bounds=False, round_trees=8)
    one = simulate(**args)
    monkeypatch.setattr(est, "tqdm", _Bar)
    monkeypatch.setattr(_Bar, "bars", [])
    two = _TwoProcesses(monkeypatch, 0, [None, (8, 16, 8), (24, 24, 8)])
    r = simulate(**args, checkpoint=tmp_path, progress=True)
    assert two.mine == [(0, 8, 8), (16, 24, 8)] and two.sent[0] is None  # no checkpoint to resume
    assert two.saved == [16, 24] and not two.theirs
    assert [(b.total, b.n) for b in _Bar.bars] == [(24, 24)]
    _same_numbers(r, one, 24)
    with np.load(r.checkpoint) as z:
        assert int(z["done"]) == 24


def test_process_1_of_two_reads_no_checkpoint_and_adds_both_shares(tmp_path, monkeypatch):
    # process 1 computes trees 8-15 (its last share is empty) and saves nothing; only process 0 reads the
    # checkpoint (it has none here): a stale, unreadable file on process 1's own disk is never opened
    law = parse_law("fixed:probs=0.5/0.5")
    args = dict(law=law, P=[1, 3], trees=24, seed=3, check=True, bounds=False, round_trees=8)
    one = simulate(**args, checkpoint=tmp_path)
    Path(one.checkpoint).write_bytes(b"not a checkpoint")
    two = _TwoProcesses(monkeypatch, 1, [None, (0, 8, 8), (16, 24, 8)])
    r = simulate(**args, checkpoint=tmp_path)
    assert two.mine == [(8, 16, 8)] and two.sent[0] is None and two.saved == [] and not two.theirs
    _same_numbers(r, one, 24)


def test_two_processes_share_one_round_of_all_the_trees(monkeypatch):
    # 24 trees, the default rounds: one round, 12 trees a process; every tree's values kept, in order
    law = parse_law("fixed:probs=0.5/0.5")
    args = dict(law=law, P=[1, 3], trees=24, seed=3, check=True, bounds=False, keep_values=True)
    one = simulate(**args)
    two = _TwoProcesses(monkeypatch, 0, [(12, 24, 12)])
    r = simulate(**args)
    assert two.mine == [(0, 12, 12)] and not two.theirs
    _same_numbers(r, one, 24)
    np.testing.assert_array_equal(r.values, one.values)
    np.testing.assert_allclose(r.values, np.tile([0.5, 1.25], (24, 1)), rtol=1e-6)


def test_process_1_of_two_with_a_drafter_and_its_check(monkeypatch):
    # top-q with the check: the check's batches count no tree on the bar; process 1's last share is empty
    law = parse_law("fixed:probs=0.5/0.5")
    args = dict(law=law, P=[1, 3], trees=24, seed=3, drafter="topq", check=True, bounds=False, round_trees=8)
    one = simulate(**args)
    monkeypatch.setattr(est, "tqdm", _Bar)
    monkeypatch.setattr(_Bar, "bars", [])
    two = _TwoProcesses(monkeypatch, 1, [(0, 8, 8), (16, 24, 8)])
    r = simulate(**args, progress=True)
    assert two.mine == [(8, 16, 8)] and not two.theirs
    assert [(b.total, b.desc, b.n) for b in _Bar.bars] == [(24, "topq P=3", 24)]
    _same_numbers(r, one, 24)
