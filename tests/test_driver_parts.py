"""The driver's parts, each on its own: the options as one frozen value, the memory planner as pure
arithmetic, the running sums restored bit for bit, and the result types' JSON."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import brwsim
from brwsim import SimulateOptions, simulate, simulate_with
from brwsim import _memory as memory
from brwsim._sums import Sums
from brwsim.errors import BrwsimError
from brwsim.laws import parse_law


def test_options_are_one_frozen_value_and_give_the_keyword_calls_numbers():
    opts = SimulateOptions("fixed:probs=0.5/0.5", P=[1, 3], trees=24, seed=3, check=True, bounds=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.trees = 5
    assert {f.name for f in dataclasses.fields(SimulateOptions)} == {
        "law", "P", "trees", "seed", "batch", "check", "bounds", "progress", "drafter", "draft_law", "devices",
        "keep_values", "checkpoint", "round_trees", "kernel",
    }  # fmt: skip
    a = simulate_with(opts)
    b = simulate("fixed:probs=0.5/0.5", P=[1, 3], trees=24, seed=3, check=True, bounds=False)
    assert a.to_dict() == b.to_dict() and [r.stat for r in a.results] == [r.stat for r in b.results]
    assert simulate_with(opts.replace(trees=8)).trees == 8 and opts.trees == 24
    assert brwsim.SimulationResult is type(a)


def test_the_planner_is_arithmetic_on_the_bytes_given():
    law = parse_law("fixed:probs=0.5/0.5")
    size = memory.tree_bytes(law, 64)
    assert memory.plan_batch(law, 64, 5000, None, 1, 1000 * size / 0.8 + 1) == 1000
    assert memory.plan_batch(law, 64, 5000, None, 3, 1000 * size / 0.8 + 1) == 999
    assert memory.plan_batch(law, 64, 7, None, 1, None) == 7  # memory unknown: nothing is refused
    with pytest.raises(BrwsimError, match="the largest batch that fits is 1000$"):
        memory.plan_batch(law, 64, 5000, 1001, 1, 1000 * size / 0.8 + 1)
    assert memory.largest_P(law, 5e6, lambda law, P: 10**6 * P) == 5
    with pytest.raises(BrwsimError, match=r"needs 2.4e-06 GB \(100 trees x P=3\)"):
        memory.check_kept_values(100, 3, 3750)


def test_sums_restore_bit_for_bit():
    rng = np.random.default_rng(0)
    s = Sums([1, 3], keep=False)
    s.add([0, 1], rng.random((10, 2)), rng.integers(0, 4, 10))
    t = Sums([1, 3], keep=False)
    t.restore(s.states())
    assert [c.stat() for c in t.cols] == [c.stat() for c in s.cols] and t.check.stat() == s.check.stat()
    assert t.done() == 10 and s.values(10) is None
