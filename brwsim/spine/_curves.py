"""The many-to-one curves t -> E[tau_t], E[N(t)] from spine walks, and the bounds minimised over s.

For walk i with cumulative surprisals S_{i,1} <= S_{i,2} <= ..., let
C_i(t) = #{d >= 1 : S_{i,d} <= t} and N_i(t) = sum_d e^{S_{i,d}} 1{S_{i,d} <= t}.
By the many-to-one lemma (docs/theory.md, "The spine") E[tau_t] - 1 = E[C(t)]
and E[N(t)] = E[N_i(t)], with no independence between nodes needed: the
same curves serve i.i.d. and Markov laws and sampled continuations of a real
model (:func:`curves_from_xi`). The splitting and dual bounds (docs/theory.md,
"Bounds") are minimised over s on these curves.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .._keys import Stream
from .._stats import MARGIN_Z
from ..errors import BrwsimError
from ..laws import Law
from ._walks import sample_walks


@dataclasses.dataclass
class BoundResult:
    """A bound minimised over s: ``upper = estimate + z * se`` at the chosen s."""

    upper: float
    estimate: float
    se: float
    s: float


class SpineCurves:
    """Many-to-one curves from spine walks, exact step functions of t.

    Let ``C_i(t) = #{d >= 1 : S_{i,d} <= t}`` and ``N_i(t) = sum_d e^{S_{i,d}}
    1{S_{i,d} <= t}`` for walk ``i``. Then ``E[tau_t] - 1 = E[C(t)]`` and
    ``E[N(t)] = E[N_i(t)]``; both are estimated by means over walks, with
    standard errors from the spread over walks (walks are independent). A
    walk is observed up to ``cover_i``; the curves are valid for
    ``t < coverage = min_i cover_i``.

    Internally every point ``S_{i,d}`` carries the increments of ``C_i``,
    ``N_i``, ``C_i^2``, ``C_i N_i`` and ``N_i^2`` (a walk's points come in
    increasing order, so these depend only on the walk's own earlier points);
    cumulative sums over all points sorted by value give every mean and
    variance at once.
    """

    def __init__(self, xi, cover=None, s_cap: float | None = None):
        xi = np.asarray(xi, np.float64)
        if xi.ndim != 2 or xi.shape[0] < 2:
            raise BrwsimError(f"xi must be a [walks, depth] array with at least 2 walks, got shape {xi.shape}")
        if np.any(xi[np.isfinite(xi)] < 0):
            raise BrwsimError("xi must hold surprisals -log p >= 0 (NaN for 'walk ended')")
        if np.any(np.isinf(xi)):
            raise BrwsimError("xi must be finite surprisals or NaN (a probability-0 step cannot be sampled)")
        n, D = xi.shape
        ended = ~np.isfinite(xi)
        ended = np.cumsum(ended, axis=1) > 0  # NaN: the walk ended, all later steps too
        x = np.where(ended, 0.0, xi)
        S = np.cumsum(x, axis=1)
        if cover is None:
            cover = np.where(ended[:, -1], np.inf, S[:, -1]) if D else np.zeros(n)
        cover = np.asarray(cover, np.float64)
        self.walks = n
        self.coverage = float(cover.min()) if n else 0.0
        lim = self.coverage if s_cap is None else min(self.coverage, s_cap)
        self.limit = lim
        keep = ~ended & (S <= lim)
        d = np.broadcast_to(np.arange(1, D + 1, dtype=np.float64), S.shape)
        with np.errstate(over="ignore"):
            e = np.where(keep, np.exp(np.where(keep, S, 0.0)), 0.0)
        N_prev = np.cumsum(e, axis=1) - e
        v = S[keep]
        order = np.argsort(v, kind="stable")
        self._v = v[order]
        dC = np.ones_like(self._v)
        dN = e[keep][order]
        dC2 = (2 * d - 1)[keep][order]
        dCN = (N_prev + d * e)[keep][order]
        dN2 = (2 * N_prev * e + e * e)[keep][order]
        zero = np.zeros(1)
        self._cum = [np.concatenate([zero, np.cumsum(a)]) / n for a in (dC, dN, dC2, dCN, dN2)]

    # means and variances of C(t) and N(t) at given positions of the sorted points
    def _at(self, pos):
        C, N, C2, CN, N2 = (c[pos] for c in self._cum)
        return C, N, C2, CN, N2

    def _check_t(self, t):
        t = np.asarray(t, np.float64)
        if np.any(t >= self.coverage):
            raise BrwsimError(f"t must be below the walks' coverage {self.coverage:.4g} (sample longer walks)")
        if self.limit < self.coverage and np.any(t > self.limit):
            raise BrwsimError(f"t must be <= {self.limit:.4g}, the cap these curves were built with")
        return t

    def tau(self, t):
        """(E[tau_t], se) for an array of t (right-continuous in t)."""
        t = self._check_t(t)
        C, _, C2, _, _ = self._at(np.searchsorted(self._v, t, side="right"))
        return 1.0 + C, np.sqrt(np.maximum(C2 - C * C, 0.0) / self.walks)

    def N(self, t):
        """(E[N(t)], se): mean number of non-root nodes with V(v) <= t."""
        t = self._check_t(t)
        _, N, _, _, N2 = self._at(np.searchsorted(self._v, t, side="right"))
        return N, np.sqrt(np.maximum(N2 - N * N, 0.0) / self.walks)

    def threshold_curve(self, t):
        """The threshold tree {V <= t}: (E[N(t)], se, E[sum P(v) over it], se) per t.

        By the many-to-one lemma the second is E[tau_t] - 1. Reading the first
        against the second traces the value of threshold trees against their
        mean size, for sizes far beyond what a tree simulation can reach.
        """
        N, N_se = self.N(t)
        tau, tau_se = self.tau(t)
        return N, N_se, tau - 1.0, tau_se

    def _candidates(self):
        """Left limits at every distinct point value u in (0, limit], and at the limit itself.

        The cumulative sums up to ``pos`` (exclusive) are the left limits at
        ``u``. An infinite limit (every walk ended) contributes s = +inf.
        """
        v = self._v
        first = np.ones(v.size, bool)
        first[1:] = v[1:] != v[:-1]
        pos = np.nonzero(first & (v > 0))[0]
        u = v[pos]
        if self.limit > 0 and (v.size == 0 or self.limit > v[-1]):
            u = np.append(u, self.limit)
            pos = np.append(pos, np.searchsorted(v, self.limit, side="left"))
        return u, pos

    def splitting(self, P: float, z: float = MARGIN_Z) -> BoundResult:
        """Bound (b) of docs/theory.md: min over s of E[tau_s] - 1 + P e^-s, at left limits, + z se.

        g(s) jumps up at every atom of S and decreases in between, so its
        infimum over s is approached from the left of a point; s -> 0^-
        gives the trivial value P.
        """
        u, pos = self._candidates()
        C, _, C2, _, _ = self._at(pos)
        est = C + P * np.exp(-u)
        se = np.sqrt(np.maximum(C2 - C * C, 0.0) / self.walks)
        return self._pick(u, est, se, P, z)

    def dual(self, P: float, z: float = MARGIN_Z) -> BoundResult:
        """Bound (b') of docs/theory.md: min over s of E[tau_s] - 1 + e^-s (P - E[N(s)]), + z se.

        Per walk the summand C_i(s) - e^-s N_i(s) + e^-s P is continuous in s
        (a point at u adds 1 to C_i and e^u to N_i) and monotone between
        points, so the minimum is attained at a point value: evaluating at
        left limits is exact, atoms included.
        """
        u, pos = self._candidates()
        C, N, C2, CN, N2 = self._at(pos)
        a = np.exp(-u)
        est = C - a * N + a * P
        var = (C2 - 2 * a * CN + a * a * N2) - (C - a * N) ** 2
        se = np.sqrt(np.maximum(var, 0.0) / self.walks)
        return self._pick(u, est, se, P, z)

    @staticmethod
    def _pick(u, est, se, P, z) -> BoundResult:
        best = BoundResult(upper=float(P), estimate=float(P), se=0.0, s=0.0)  # s -> 0^-: the trivial bound
        if u.size:
            up = est + z * se
            i = int(np.argmin(up))
            if up[i] < best.upper:
                best = BoundResult(upper=float(up[i]), estimate=float(est[i]), se=float(se[i]), s=float(u[i]))
        return best


def curves_from_xi(xi, cover=None, P_max: float | None = None) -> SpineCurves:
    """Law-free curves from per-step surprisals ``xi`` [walks, depth] (NaN = ended)."""
    cap = None if P_max is None else math.log(max(P_max, 1.0)) + 60.0
    return SpineCurves(xi, cover=cover, s_cap=cap)


def law_curves(key, law: Law, P_max: float, walks: int = 8192, mu_hint: float | None = None) -> SpineCurves:
    """Spine curves of a law, walks run until S > ln(mu P_max) + 3 (or 4000 steps).

    Both bounds are minimised near s = ln(mu P) (docs/theory.md), well inside.
    """
    mu = mu_hint if mu_hint and mu_hint > 0 else 1.0
    s_max = max(math.log(mu * P_max), 0.0) + 3.0
    w = sample_walks(key, law, walks, s_max=s_max, stream=Stream.SPINE)
    return SpineCurves(w.xi, cover=w.cover)
