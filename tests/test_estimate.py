"""The estimator: simulate, the check estimator, reproducibility whatever the batch, the README example."""

from __future__ import annotations

import math

import numpy as np
import pytest
from jax.random import key

import brwsim
from brwsim import laws
from brwsim.estimate import oracle_values
from brwsim.testing import enumerate_fixed


def test_fixed_law_simulate_exact_values_and_zero_ci():
    res = brwsim.simulate("fixed:probs=0.6/0.3/0.1", P=[1, 64, 500], trees=3, seed=0)
    exact = enumerate_fixed([0.6, 0.3, 0.1], 500)
    for r in res.results:
        assert r.stat.mean == pytest.approx(exact[r.P - 1], rel=2e-5)
        assert r.stat.ci95 == 0.0


def test_check_mode_agrees_with_tree_value():
    """Sampled continuations and exact conditional values estimate the same E[X].

    Paired on the same trees: the difference accepted - value has mean 0, and
    its standard error gives the tolerance (4 se, fixed seed).
    """
    law = laws.Dirichlet(V=20, alpha=0.3)
    values, accepted = oracle_values(key(11), law, 12, trees=3000, check=True)
    d = accepted - values[:, -1]
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert abs(d.mean()) < 4 * se
    assert se < 0.05  # the check is informative


def test_check_mode_on_deterministic_tree():
    law = laws.fixed_law([0.6, 0.3, 0.1])
    values, accepted = oracle_values(key(5), law, 30, trees=4000, check=True)
    exact = enumerate_fixed([0.6, 0.3, 0.1], 30)[-1]
    se = accepted.std(ddof=1) / math.sqrt(accepted.size)
    assert abs(accepted.mean() - exact) < 4 * se


def test_same_seed_same_numbers_whatever_the_batch():
    law = laws.LogitNormal(V=50, sigma=2.0)
    a, _ = oracle_values(key(9), law, 16, trees=37, batch=37)
    b, _ = oracle_values(key(9), law, 16, trees=37, batch=5)
    c, _ = oracle_values(key(9), law, 16, trees=37, batch=64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    r1 = brwsim.simulate("dirichlet:V=30,alpha=0.2", P=[4, 8], trees=20, seed=1, batch=3, bounds=False)
    r2 = brwsim.simulate("dirichlet:V=30,alpha=0.2", P=[4, 8], trees=20, seed=1, batch=20, bounds=False)
    assert r1.to_dict()["results"] == r2.to_dict()["results"]


def test_different_seeds_differ():
    a, _ = oracle_values(key(0), laws.Dirichlet(V=30, alpha=0.2), 8, trees=10)
    b, _ = oracle_values(key(1), laws.Dirichlet(V=30, alpha=0.2), 8, trees=10)
    assert not np.array_equal(a, b)


def test_nested_prefixes_equal_separate_runs():
    """T*_P from a run at P_max equals a run at P (best-first order)."""
    law = laws.Dirichlet(V=40, alpha=0.2)
    big, _ = oracle_values(key(4), law, 32, trees=8)
    small, _ = oracle_values(key(4), law, 8, trees=8)
    np.testing.assert_allclose(big[:, 7], small[:, 7], rtol=1e-6)


def test_large_vocabulary_runs():
    res = brwsim.simulate("logitnormal:V=32000,sigma=3", P=[1, 8], trees=4, seed=0, bounds=False)
    assert 0 < res[1].stat.mean <= res[8].stat.mean <= 8


def test_readme_python_example_runs(capsys):
    """The README's Python example is real: run it and check what it prints."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.split()[:2] == ["64", "4.2318"]


def test_running_stat_is_stat_of_and_does_not_depend_on_chunks():
    """Up to one block the running statistic is exactly Stat.of; beyond, the same to rounding, however fed."""
    from brwsim._stats import RunningStat, Stat

    rng = np.random.default_rng(0)
    for n in (1, 7, RunningStat.BLOCK, RunningStat.BLOCK + 3, 3 * RunningStat.BLOCK + 11):
        x = rng.gamma(0.5, 2.0, size=n) + 1.0
        stats = []
        for parts in (1, 5, 97):
            r = RunningStat()
            for chunk in np.array_split(x, parts):
                r.add(chunk)
            stats.append(r.stat())
        # the order of the values matters, the chunks do not
        assert len({(s.mean, s.n, s.se if n > 1 else None) for s in stats}) == 1
        ref = Stat.of(x)
        if n <= RunningStat.BLOCK:
            assert stats[0].mean == ref.mean and (n == 1 or stats[0].se == ref.se)
        else:
            assert stats[0].mean == pytest.approx(ref.mean, rel=1e-13)
            assert stats[0].se == pytest.approx(ref.se, rel=1e-10)


def test_keep_values_returns_every_trees_value():
    res = brwsim.simulate("dirichlet:V=20,alpha=0.3", P=[2, 9], trees=33, seed=5, bounds=False, keep_values=True)
    assert res.values.shape == (33, 2)
    v, _ = oracle_values(key(5), laws.parse_law("dirichlet:V=20,alpha=0.3"), 9, 33)
    np.testing.assert_array_equal(res.values, v[:, [1, 8]])
    assert res[9].stat.mean == v[:, 8].mean()
    assert brwsim.simulate("dirichlet:V=20,alpha=0.3", P=[2], trees=3, seed=5, bounds=False).values is None


def test_every_trees_values_are_bit_for_bit_the_same_whatever_the_batch():
    """Batches on both sides of the size where XLA's CPU compiler would hand a log-sum-exp to another library
    (4096 trees x V = 64 entries): the same values, bit for bit, for every tree."""
    law = laws.parse_law("dirichlet:V=64,alpha=0.3")
    big, _ = oracle_values(key(0), law, 4, trees=4200, batch=4200)
    small, _ = oracle_values(key(0), law, 4, trees=4200, batch=1000)
    np.testing.assert_array_equal(big, small)


def test_seed_beyond_32_bits_is_refused():
    """jax.random.key keeps a seed's low 32 bits: a larger seed would silently repeat a smaller one."""
    with pytest.raises(brwsim.BrwsimError, match="seed must be an integer from 0 to 4294967295"):
        brwsim.simulate("fixed:probs=1", P=[1], trees=1, seed=2**32 + 5)
    with pytest.raises(brwsim.BrwsimError, match="seed must be an integer from 0 to 4294967295"):
        brwsim.simulate("fixed:probs=1", P=[1], trees=1, seed=99999999999999999999999)


def test_checkpoint_resumes_an_interrupted_run_bit_for_bit(tmp_path, monkeypatch):
    """Ctrl-C after two rounds keeps them; the same call again resumes there and gives the uninterrupted numbers."""
    from brwsim._checkpoint import Checkpoint

    args = dict(law="dirichlet:V=20,alpha=0.3", P=[2, 9], trees=1000, seed=5, bounds=False, round_trees=150)
    whole = brwsim.simulate(**args, check=True).to_dict()
    save, calls = Checkpoint.save, []

    def save_then_stop(self, done, states):
        save(self, done, states)
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "save", save_then_stop)
    part = brwsim.simulate(**args, check=True, checkpoint=tmp_path)
    assert part.interrupted and part.trees == 300 and calls == [150, 300]
    monkeypatch.setattr(Checkpoint, "save", save)
    resumed = brwsim.simulate(**args, check=True, checkpoint=tmp_path, batch=7)
    assert not resumed.interrupted and resumed.to_dict() == whole
    # other arguments never read this run's file
    other = brwsim.simulate(**(args | {"seed": 6}), check=True, checkpoint=tmp_path)
    assert other.to_dict() != whole and len(list(tmp_path.glob("simulate-*.npz"))) == 2
