"""Speculative sampling with several widths against exact enumeration on a deterministic tree.

Target: the fixed law p = (0.6, 0.3, 0.1) at every node; drafter q_i = p_{V-1-i} = (0.1, 0.3, 0.6).
With m i.i.d. candidates, recursive rejection accepts one with probability
a(m) = 1 - prod_{j<m} (1 - sum_x min(r_j(x), q(x))), r_0 = p, r_{j+1} = (r_j - q)^+ / Z; the number of
candidates equal to the accepted token (which sets the next depth's candidates) is enumerated exactly.
"""

from __future__ import annotations

import itertools
import math

import jax
import numpy as np
import pytest

from brwsim._registry import registrar
from brwsim.drafters import DraftLaw
from brwsim.laws import fixed_law
from brwsim.specsampling import call_accepted, drafted_count, generate, max_candidates, shape
from brwsim.specsampling._rejection import first_call_accepted

_register = registrar({})
p = np.array([0.6, 0.3, 0.1])
q = p[::-1].copy()


@_register("reverse_spec")
class Reverse(DraftLaw):
    deterministic = True

    def logq(self, key, lp):
        return lp[::-1]


def residuals(m):
    rs = [p]
    for _ in range(m):
        res = np.maximum(rs[-1] - q, 0)
        rs.append(res / res.sum() if res.sum() > 0 else rs[-1])
    return rs


def accept_prob(m):
    rs = residuals(m)
    return 1 - math.prod(1 - np.minimum(rs[j], q).sum() for j in range(m))


def accepted_with_count(m):
    """{c: P(a candidate is accepted and c of the m candidates equal it)}, by enumerating the candidates."""
    rs, out = residuals(m), {}
    for xs in itertools.product(range(3), repeat=m):
        pr, reach = math.prod(q[x] for x in xs), 1.0
        for j, x in enumerate(xs):
            acc = min(1.0, rs[j][x] / q[x])
            c = xs.count(x)
            out[c] = out.get(c, 0.0) + pr * reach * acc
            reach *= 1 - acc
    return out


def expected_x(widths):
    """E[X] of one call: depth by depth, the candidates are (count of the accepted token) x the next width."""
    dist, ex = {widths[0]: 1.0}, 0.0  # {candidates at this depth: probability of reaching it}
    for d in range(len(widths)):
        nxt = {}
        for m, pm in dist.items():
            for c, pc in accepted_with_count(m).items():
                ex += pm * pc
                if d + 1 < len(widths):
                    nxt[c * widths[d + 1]] = nxt.get(c * widths[d + 1], 0.0) + pm * pc
        dist = nxt
    return ex


def test_enumeration_matches_the_closed_acceptance():
    for m in (1, 2, 3):
        assert sum(accepted_with_count(m).values()) == pytest.approx(accept_prob(m), rel=1e-12)
    assert accept_prob(1) == pytest.approx(0.1 + 0.3 + 0.1)  # sum min(p, q)


@pytest.mark.parametrize("widths", [(1, 1, 1), (2, 1), (1, 3)])
def test_one_call_accepts_as_enumerated_and_outputs_the_target(widths):
    # E[X]: 0.875, 0.833, 0.798; a width read at the wrong depth gives 0.75 to 0.87, more than 4 se away
    n = 16000
    g = generate(jax.random.key(5), fixed_law(p), Reverse(), widths, T=len(widths) + 1, runs=n)
    x = first_call_accepted(g.event).astype(np.float64)
    assert abs(x.mean() - expected_x(widths)) <= 4 * x.std(ddof=1) / math.sqrt(n)
    for r in range(3):  # every position's token follows p, whatever was drafted
        f = np.mean(g.token[:, 1] == r)
        assert abs(f - p[r]) <= 4 * math.sqrt(p[r] * (1 - p[r]) / n)
    np.testing.assert_allclose(g.tv, 0.5, atol=1e-6)  # TV(p, q) = (0.5 + 0 + 0.5) / 2
    assert np.all(g.verified[:, 0])
    np.testing.assert_array_equal(call_accepted(jax.random.key(5), fixed_law(p), Reverse(), widths, n), x)


def test_shapes_by_hand():
    assert drafted_count((2, 1, 2)) == 2 + 2 + 4 and max_candidates((2, 1, 2)) == 4
    assert drafted_count((3,)) == 3 and max_candidates((1, 1, 1)) == 1
    assert shape("sequence", 3) == (1, 1, 1)
    assert shape("batch", 8) == (4, 1) and shape("batch", 3) == (3,)
    assert [shape("tree", k) for k in (1, 2, 4, 8, 12)] == [(1,), (2,), (2, 1), (2, 1, 2), (2, 1, 2, 1)]
