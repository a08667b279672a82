"""simulate on the binary tree p = (1/2, 1/2), where everything is known by hand.

Every node has two children of probability 1/2. The best P-node trees take the shallowest nodes:
E[X] = 1/2, 1, 5/4 at P = 1, 2, 3 (the P(v) of the nodes taken), with no spread between trees. The
target's sampled continuation through the 3-node tree {a, b, aa} accepts 1 token, and a second with
probability 1/2 * 1/2: mean 5/4, variance 3/16. Along the spine S_d = d ln 2 on every walk, so the
splitting bound min_d (d - 1) + P 2^-d and the dual bound min_d (d - 2) + (P + 2) 2^-d are exact.
"""

from __future__ import annotations

import math

import pytest

from brwsim import simulate

LN2 = math.log(2)


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
