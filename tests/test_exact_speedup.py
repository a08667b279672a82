"""The speedup planner against hand arithmetic: interpolated costs, the best budget's tie rule, the near-best set."""

from __future__ import annotations

import math

import pytest

from brwsim.errors import BrwsimError
from brwsim.speedup import DraftCost, TableCost, drafter_pass_cost, measured_cost, speedup_table

COST = TableCost({0: 1.0, 4: 1.5, 8: 2.0})  # t_verify(2) = 1.25 by linear interpolation


def test_table_cost_interpolates_and_refuses_outside():
    assert [COST.t_verify(P) for P in (0, 1, 2, 4, 6, 8)] == pytest.approx([1.0, 1.125, 1.25, 1.5, 1.75, 2.0])
    with pytest.raises(BrwsimError):
        COST.t_verify(9)
    with pytest.raises(BrwsimError):
        TableCost({1: 1.0})  # no P = 0 row
    with pytest.raises(BrwsimError):
        TableCost({0: 1.0, 2: -1.0})


def test_measured_cost_is_the_median_with_its_range():
    c = measured_cost({0: [3.0, 1.0, 2.0], 4: [5.0, 4.0]}, "here")
    assert c.t_verify(0) == 2.0 and c.t_verify(4) == 4.5 and c.t_verify(2) == pytest.approx(3.25)
    assert c.spread(0) == (1.0, 3.0) and c.spread(2) is None and c.kind == "measured"


def test_speedup_rows_by_hand():
    t = speedup_table([(4, 2.0, 0.2), (8, 2.5, 0.3), (2, 1.0, 0.1)], COST)
    assert [r.P for r in t.rows] == [0, 2, 4, 8]
    # (E[X] + 1) t(0) / t(P): 1, 2 / 1.25, 3 / 1.5, 3.5 / 2; the CI scales by the same ratio
    assert [r.speedup for r in t.rows] == pytest.approx([1.0, 1.6, 2.0, 1.75])
    assert [r.speedup_ci95 for r in t.rows] == pytest.approx([0.0, 0.08, 0.2 / 1.5, 0.15])
    assert t.best.P == 4 and not t.at_edge()
    # the best's CI reaches down to 2 - 0.1333 = 1.8667: P = 8 (up to 1.9) is near it, P = 2 (1.68) is not
    assert t.near_best() == [4, 8]
    d = t.to_dict()
    assert d["best"]["P"] == 4 and d["near_best_P"] == [4, 8] and d["best"]["at_edge"] is False


def test_ties_go_to_the_smaller_budget_and_touching_intervals_are_near():
    flat = TableCost({0: 1.0, 2: 1.0, 4: 1.0, 8: 1.0})
    t = speedup_table([(2, 1.0, 0.25), (4, 1.5, 0.25), (8, 1.5, 0.25)], flat)
    assert t.best.P == 4  # speedups 2, 2.5, 2.5: the smaller of the tied budgets
    assert not t.at_edge()
    assert t.near_best() == [2, 4, 8]  # 2 + 0.25 == 2.5 - 0.25: intervals that touch count as near
    t = speedup_table([(2, 1.0, 0.25), (4, 1.5, 0.25)], flat)
    assert t.best.P == 4 and t.at_edge()


def test_no_gain_keeps_plain_decoding():
    t = speedup_table([(4, 0.2, 0.0)], COST)  # 1.2 / 1.5 = 0.8 < 1
    assert t.best.P == 0 and not t.at_edge() and t.near_best() == [0]


def test_nan_ci_counts_as_zero_and_bad_budgets_are_refused():
    t = speedup_table([(4, 2.0, math.nan)], COST)
    assert t.rows[1].speedup_ci95 == 0.0 and t.rows[1].ex_ci95 == 0.0
    with pytest.raises(BrwsimError):
        speedup_table([], COST)
    with pytest.raises(BrwsimError):
        speedup_table([(0, 1.0, 0.1)], COST)


def test_draft_cost_passes():
    per_token = DraftCost(t_pass=0.1)
    per_tree = DraftCost(t_pass=0.1, passes=3)
    assert per_token.t_draft(0) == 0 and per_token.t_draft(4) == pytest.approx(0.4)
    assert per_tree.t_draft(0) == 0 and per_tree.t_draft(8) == pytest.approx(0.3)
    t = speedup_table([(4, 2.0, 0.2)], COST, per_token)
    assert t.rows[1].t_draft == pytest.approx(0.4) and t.rows[1].speedup == pytest.approx(3.0 / 1.9)
    d = drafter_pass_cost(COST, 2, 8)  # a quarter of the model per drafted token
    assert d.t_pass == pytest.approx(0.25) and d.t_draft(4) == pytest.approx(1.0)
