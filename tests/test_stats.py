"""Intervals over a small sample (prompts, timing repeats) are Student t intervals, never z."""

from __future__ import annotations

import math

import pytest

from brwsim._stats import Z95, mean_ci95, paired_ci95, t95


def test_t_quantile_table_values():
    # printed t tables: t_{0.975, df} for df = 1, 3, 4, 63
    assert t95(2) == pytest.approx(12.7062047, abs=1e-6)
    assert t95(4) == pytest.approx(3.1824463, abs=1e-6)
    assert t95(5) == pytest.approx(2.7764451, abs=1e-6)
    assert t95(64) == pytest.approx(1.9983405, abs=1e-6)
    assert t95(10**7) == pytest.approx(Z95, abs=1e-5)
    with pytest.raises(ValueError):
        t95(1)


def test_mean_ci95_is_t_on_a_hand_sample():
    # 1, 2, 3, 4: mean 2.5, s^2 = 5/3, half-width = t_{0.975,3} * s / 2 (z would give 1.265)
    m, h = mean_ci95([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5
    assert h == pytest.approx(3.182446305284263 * math.sqrt(5 / 3) / 2, rel=1e-12)
    assert h == pytest.approx(2.0542603, abs=1e-6)
    # two values 0, 1: s = 1/sqrt(2), half-width = 12.706 * 0.5
    assert mean_ci95([0.0, 1.0])[1] == pytest.approx(12.7062047 * 0.5, abs=1e-6)
    assert math.isnan(mean_ci95([3.0])[1]) and mean_ci95([3.0])[0] == 3.0
    assert all(math.isnan(v) for v in mean_ci95([]))


def test_paired_interval_uses_the_differences():
    a = [1.0, 2.0, 3.0, 4.0]
    b = [0.0, 1.0, 2.0, 3.5]  # differences 1, 1, 1, 0.5: mean 0.875, s^2 = 1/16
    m, h = paired_ci95(a, b)
    assert m == pytest.approx(0.875, abs=1e-15)
    assert h == pytest.approx(3.182446305284263 * 0.25 / 2, rel=1e-12)
    # the unpaired interval on a alone is far wider than the paired one
    assert mean_ci95(a)[1] > 5 * h
    with pytest.raises(ValueError):
        paired_ci95([1.0, 2.0], [1.0])
