"""The timing fit and the best-budget set of the speedup, on hand-made inputs with exact expected outputs."""

import numpy as np
import pytest

from brwsim.errors import BrwsimError
from brwsim.speedup import best_P_set, isotonic_fit, measured_cost


def test_isotonic_fit_pools_adjacent_violators():
    assert isotonic_fit([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic_fit([5.0, 4.0, 3.0]) == [4.0, 4.0, 4.0]
    assert isotonic_fit([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]  # already non-decreasing: unchanged
    # weights: a block's value is the weighted mean of what it pools
    assert isotonic_fit([1.0, 4.0, 1.0], [1, 1, 3]) == [1.0, 1.75, 1.75]


def test_measured_cost_is_non_decreasing_in_P():
    # the dip at P = 16 (200 < 218) is pooled with P = 8
    times = {0: [0.1, 0.1, 0.1], 8: [0.218, 0.218, 0.218], 16: [0.2, 0.2, 0.2], 32: [0.3, 0.3, 0.3]}
    c = measured_cost(times, "hand-made")
    assert [c.t_verify(P) for P in (0, 8, 16, 32)] == pytest.approx([0.1, 0.209, 0.209, 0.3], abs=1e-15)
    raw = measured_cost(times, "hand-made", isotonic=False)
    assert raw.t_verify(16) == pytest.approx(0.2, abs=1e-15)


def test_best_P_set_without_noise_is_the_argmax():
    # identical prompts and repeats: no uncertainty, the set is the exact best
    ex = {1: [1.0, 1.0], 2: [2.0, 2.0], 4: [2.5, 2.5]}
    times = {0: [1.0] * 3, 1: [1.0] * 3, 2: [1.2] * 3, 4: [1.2] * 3}
    b = best_P_set(ex, times, replicates=50)
    assert b.P_hat == 4 and b.near_best == [4] and b.smallest == 4
    assert b.speedup == pytest.approx({0: 1.0, 1: 2.0, 2: 2.5, 4: 3.5 / 1.2})  # P = 0: plain decoding
    assert b.argmax_share == {0: 0.0, 1: 0.0, 2: 0.0, 4: 1.0}


def test_best_P_set_names_the_smallest_of_exact_ties():
    ex = {1: [1.0, 1.0], 2: [2.0, 2.0], 4: [3.0, 3.0]}
    times = {0: [1.0] * 2, 1: [1.0] * 2, 2: [1.5] * 2, 4: [2.0] * 2}  # speedups 2, 2, 2
    b = best_P_set(ex, times, replicates=20)
    assert b.near_best == [1, 2, 4] and b.smallest == 1 and b.P_hat == 1


def test_best_P_set_widens_with_noisy_prompts_and_draft_cost():
    # prompts that disagree about P = 2 vs P = 4: both stay in the set
    # (P = 1 loses unless a replicate draws only zeros at P = 2: probability 2**-8, below 2.5%)
    ex = {1: [0.1] * 8, 2: [0.0, 4.0] * 4, 4: [4.0, 0.0] * 4}
    times = {0: [1.0] * 3, 1: [1.0] * 3, 2: [1.0] * 3, 4: [1.0] * 3}
    b = best_P_set(ex, times, replicates=400, seed=1)
    assert b.near_best == [2, 4] and b.smallest == 2
    # a draft cost that grows with P moves the best down
    c = best_P_set({1: [1.0], 2: [1.5], 4: [2.0]}, {0: [1.0], 1: [1.0], 2: [1.0], 4: [1.0]}, lambda P: 0.25 * P)
    assert c.speedup == pytest.approx({0: 1.0, 1: 2.0 / 1.25, 2: 2.5 / 1.5, 4: 3.0 / 2.0})
    assert c.near_best == [2]


def test_best_P_set_is_plain_decoding_when_no_budget_pays():
    # E[X] grows slower than the pass: every budget is below speedup 1, so the best is not to speculate
    ex = {1: [0.2, 0.3], 2: [0.4, 0.5], 4: [0.6, 0.7]}
    times = {0: [1.0] * 3, 1: [1.5] * 3, 2: [2.0] * 3, 4: [3.0] * 3}
    b = best_P_set(ex, times, replicates=50)
    assert (b.P_hat, b.near_best, b.smallest) == (0, [0], 0) and b.speedup[0] == 1.0
    assert b.speedup == pytest.approx({0: 1.0, 1: 1.25 / 1.5, 2: 1.45 / 2.0, 4: 1.65 / 3.0})


def test_best_P_set_needs_the_plain_step():
    with pytest.raises(BrwsimError, match="P = 0"):
        best_P_set({1: [1.0]}, {1: [1.0]})
    assert np.isfinite(best_P_set({1: [1.0]}, {0: [1.0], 1: [2.0]}).speedup[1])


def test_best_P_set_says_when_the_best_is_the_largest_budget():
    # a flat pass and a rising E[X]: the best is the largest budget given, so the best budget is at least that
    ex = {1: [1.0, 1.0], 2: [2.0, 2.0], 4: [3.0, 3.0]}
    flat = {0: [1.0] * 2, 1: [1.0] * 2, 2: [1.0] * 2, 4: [1.0] * 2}
    assert best_P_set(ex, flat, replicates=20).at_edge
    slow = {0: [1.0] * 2, 1: [1.0] * 2, 2: [1.0] * 2, 4: [2.0] * 2}  # P = 4: 4 / 2 < 3 at P = 2: interior
    b = best_P_set(ex, slow, replicates=20)
    assert b.P_hat == 2 and not b.at_edge
    none = best_P_set({1: [0.1]}, {0: [1.0], 1: [2.0]}, replicates=5)  # plain decoding is best: not an edge
    assert none.P_hat == 0 and not none.at_edge
