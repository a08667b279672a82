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

import jax
import jax.numpy as jnp
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


# Outward rounding (docs/theory.md, "Bounds"). A step arrives as a float of ``step_dtype`` (float32 from a law's
# tables or a model's log-softmax): a log-probability read from a table or made by a few operations on numbers
# of size max(xi, 1), so within STEP_ULPS of its dtype's eps times max(xi, 1) of the exact value. Each step is
# lowered by that much and each float64 partial sum of d steps by (d + 2) float64 eps of itself. Every bound's
# per-walk summand (C_i(s) + P e^-s, and C_i(s) - e^-s N_i(s) + e^-s P) is non-increasing in each S_{i,d}, so
# bounds computed on the lowered walks are no lower than on the exact ones. The float64 sums behind a bound
# carry at most (points + 8) eps of the sum of magnitudes; that is added and the result rounded up once more.
STEP_ULPS = 4
EPS64 = float(np.finfo(np.float64).eps)

# A threshold s is a candidate only when at least this many walks have a point below it (or the law itself
# rules any point out there, ``floor``): with fewer, the normal-theory margin means little, and with none the
# sample says E[tau_s] - 1 = 0 with se 0 while the law puts mass there (found at V = 10^7, where the minimum
# sat at the smallest sampled point, below E[X]).
MIN_WALKS_BELOW = 16

MAX_WALK_RUNS = 8  # law_curves runs its walks at most this often, each time further (the last run is kept)


def _partial_sums(xi: np.ndarray):
    """(ended, S): where each walk has ended (NaN from there on) and its float64 partial sums."""
    ended = np.cumsum(~np.isfinite(xi), axis=1) > 0
    return ended, np.cumsum(np.where(ended, 0.0, xi), axis=1)


def _lowered(xi: np.ndarray, ended: np.ndarray, eps: float, floor: float):
    """(S_lo, floor_lo): partial sums and floor no larger than their exact values (STEP_ULPS above)."""
    D = xi.shape[1]
    x = np.where(ended, 0.0, xi)
    x_lo = np.maximum(x - STEP_ULPS * eps * np.maximum(x, 1.0), 0.0)
    shrink = 1.0 - (D + 2) * EPS64
    f_lo = max(floor - STEP_ULPS * eps * max(floor, 1.0), 0.0) * shrink
    return np.cumsum(x_lo, axis=1) * shrink, f_lo


class _Points:
    """Every kept point S_{i,d}, sorted, with the cumulative sums of the increments of C_i, N_i, C_i^2,
    C_i N_i and N_i^2 over walks (divided by the number of walks)."""

    def __init__(self, S: np.ndarray, keep: np.ndarray, raw: np.ndarray):
        n, D = S.shape
        d = np.broadcast_to(np.arange(1, D + 1, dtype=np.float64), S.shape)
        with np.errstate(over="ignore"):
            e = np.where(keep, np.exp(np.where(keep, S, 0.0)), 0.0)
        N_prev = np.cumsum(e, axis=1) - e
        order = np.argsort(S[keep], kind="stable")
        self.v = S[keep][order]
        self.raw = raw[keep][order]  # the same points as observed (before any lowering)
        dC = np.ones_like(self.v)
        dN = e[keep][order]
        dC2 = (2 * d - 1)[keep][order]
        dCN = (N_prev + d * e)[keep][order]
        dN2 = (2 * N_prev * e + e * e)[keep][order]
        zero = np.zeros(1)
        self.cum = [np.concatenate([zero, np.cumsum(a)]) / n for a in (dC, dN, dC2, dCN, dN2)]
        # each walk's first kept point, sorted: how many walks have a point below a threshold
        first = keep[:, 0] if D else np.zeros(n, bool)
        self.firsts = np.sort(S[first, 0]) if D else np.zeros(0)


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

    The bounds are computed with outward rounding on the walks lowered by
    their rounding error (``step_dtype``: the dtype the steps were computed
    in, by default ``xi``'s own; :data:`STEP_ULPS`), and minimised only over
    thresholds with at least ``min_walks_below`` walks below them or at most
    ``floor``, a surprisal no first step can fall below (the law's
    -log max p; 0 when unknown).
    """

    def __init__(self, xi, cover=None, s_cap: float | None = None, *, step_dtype=None, floor: float = 0.0,
                 min_walks_below: int = MIN_WALKS_BELOW):  # fmt: skip
        eps = float(np.finfo(step_dtype if step_dtype is not None else np.asarray(xi).dtype).eps)
        xi = np.asarray(xi, np.float64)
        if xi.ndim != 2 or xi.shape[0] < 2:
            raise BrwsimError(f"xi must be a [walks, depth] array with at least 2 walks, got shape {xi.shape}")
        if np.any(xi[np.isfinite(xi)] < 0):
            raise BrwsimError("xi must hold surprisals -log p >= 0 (NaN for 'walk ended')")
        if np.any(np.isinf(xi)):
            raise BrwsimError("xi must be finite surprisals or NaN (a probability-0 step cannot be sampled)")
        n, D = xi.shape
        ended, S = _partial_sums(xi)
        if cover is None:
            cover = np.where(ended[:, -1], np.inf, S[:, -1]) if D else np.zeros(n)
        cover = np.asarray(cover, np.float64)
        self.walks = n
        self.coverage = float(cover.min()) if n else 0.0
        lim = self.coverage if s_cap is None else min(self.coverage, s_cap)
        self.limit = lim
        self._raw = _Points(S, ~ended & (S <= lim), S)
        S_lo, self._floor = _lowered(xi, ended, eps, float(floor))
        drop = S[:, -1] - S_lo[:, -1] if D else np.zeros(n)  # each walk's observed range shrinks with it
        lim_lo = min(float((cover - drop).min()) if n else 0.0, lim)
        self._lo = _Points(S_lo, ~ended & (S_lo <= lim_lo), S)
        self._lo_limit = (lim_lo, lim)
        self._min_below = max(int(min_walks_below), 0)

    # means and variances of C(t) and N(t) at given positions of the sorted points
    def _at(self, pos, pts: _Points | None = None):
        C, N, C2, CN, N2 = (c[pos] for c in (pts or self._raw).cum)
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
        C, _, C2, _, _ = self._at(np.searchsorted(self._raw.v, t, side="right"))
        return 1.0 + C, np.sqrt(np.maximum(C2 - C * C, 0.0) / self.walks)

    def N(self, t):
        """(E[N(t)], se): mean number of non-root nodes with V(v) <= t."""
        t = self._check_t(t)
        _, N, _, _, N2 = self._at(np.searchsorted(self._raw.v, t, side="right"))
        return N, np.sqrt(np.maximum(N2 - N * N, 0.0) / self.walks)

    def nodes_below_limit(self) -> float:
        """The estimated E[N(s)] just below the limit (every node the curves see)."""
        return float(self._raw.cum[1][np.searchsorted(self._raw.v, self.limit, side="left")])

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
        """(u, s, pos) on the lowered walks: left limits at every distinct point value u in (0, limit], and at
        the limit itself, kept where enough walks lie below u (or u is at most the floor).

        The cumulative sums up to ``pos`` (exclusive) are the left limits at
        ``u``; ``s`` is the threshold as observed (before lowering). An
        infinite limit (every walk ended) contributes s = +inf.
        """
        pts, (lim, raw_lim) = self._lo, self._lo_limit
        v = pts.v
        first = np.ones(v.size, bool)
        first[1:] = v[1:] != v[:-1]
        pos = np.nonzero(first & (v > 0) & (v <= lim))[0]
        u, s = v[pos], pts.raw[pos]
        if lim > 0 and (pos.size == 0 or lim > u[-1]):
            u, s = np.append(u, lim), np.append(s, raw_lim)
            pos = np.append(pos, np.searchsorted(v, lim, side="left"))
        below = np.searchsorted(pts.firsts, u, side="left")  # walks with a point below u
        ok = (below >= self._min_below) | (u <= self._floor)
        return u[ok], s[ok], pos[ok]

    def splitting(self, P: float, z: float = MARGIN_Z) -> BoundResult:
        """Bound (b) of docs/theory.md: min over s of E[tau_s] - 1 + P e^-s, at left limits, + z se.

        g(s) jumps up at every atom of S and decreases in between, so its
        infimum over s is approached from the left of a point; s -> 0^-
        gives the trivial value P.
        """
        u, s, pos = self._candidates()
        C, _, C2, _, _ = self._at(pos, self._lo)
        a = np.exp(-u)
        est = C + P * a
        se = np.sqrt(np.maximum(C2 - C * C, 0.0) / self.walks)
        return self._pick(s, est, se, P, z, C + P * a)

    def dual(self, P: float, z: float = MARGIN_Z) -> BoundResult:
        """Bound (b') of docs/theory.md: min over s of E[tau_s] - 1 + e^-s (P - E[N(s)]), + z se.

        Per walk the summand C_i(s) - e^-s N_i(s) + e^-s P is continuous in s
        (a point at u adds 1 to C_i and e^u to N_i) and monotone between
        points, so the minimum is attained at a point value: evaluating at
        left limits is exact, atoms included.
        """
        u, s, pos = self._candidates()
        C, N, C2, CN, N2 = self._at(pos, self._lo)
        a = np.exp(-u)
        est = C - a * N + a * P
        var = (C2 - 2 * a * CN + a * a * N2) - (C - a * N) ** 2
        se = np.sqrt(np.maximum(var, 0.0) / self.walks)
        return self._pick(s, est, se, P, z, C + a * N + a * P)

    def _pick(self, s, est, se, P, z, magnitude) -> BoundResult:
        """The smallest est + z se + its rounding error (at most (points + 8) eps64 of ``magnitude``), rounded
        up; the trivial bound P (s -> 0^-) unless a candidate is strictly below it."""
        best = BoundResult(upper=float(P), estimate=float(P), se=0.0, s=0.0)
        if s.size:
            up = est + z * se + (self._lo.v.size + 8) * EPS64 * magnitude
            i = int(np.argmin(up))
            top = float(np.nextafter(up[i], np.inf))
            if top < best.upper:
                best = BoundResult(upper=top, estimate=float(est[i]), se=float(se[i]), s=float(s[i]))
        return best


def curves_from_xi(xi, cover=None, P_max: float | None = None, step_dtype=np.float32) -> SpineCurves:
    """Law-free curves from per-step surprisals ``xi`` [walks, depth] (NaN = ended).

    ``step_dtype``: the dtype the surprisals were computed in (float32 for a model's log-softmax, even when
    handed over in a float64 array), which sets their rounding error (:data:`STEP_ULPS`).
    """
    cap = None if P_max is None else math.log(max(P_max, 1.0)) + 60.0
    return SpineCurves(xi, cover=cover, s_cap=cap, step_dtype=step_dtype)


def law_curves(key, law: Law, P_max: float, walks: int = 8192, mu_hint: float | None = None) -> SpineCurves:
    """Spine curves of a law, walks run until S > ln(mu P_max) + 3 (or 4000 steps), and further while fewer
    than P_max nodes lie below the level reached.

    Both bounds are minimised near the level s where E[N(s)] = P (their slope in s has the sign of
    E[N(s)] - P), which is near ln(mu P) once the steps are small against it (docs/theory.md) but can lie
    far beyond it when single steps are large (a high-entropy law at small P): then the walks are run again,
    each time 3 past the level the last run reached, until E[N] at that level is at least P_max (at most
    :data:`MAX_WALK_RUNS` runs: shorter walks only loosen the bounds).
    """
    mu = mu_hint if mu_hint and mu_hint > 0 else 1.0
    s_max = max(math.log(mu * P_max), 0.0) + 3.0
    dtype, floor = jnp.zeros(()).dtype, law_floor(law)
    for _ in range(MAX_WALK_RUNS):
        w = sample_walks(key, law, walks, s_max=s_max, stream=Stream.SPINE)
        c = SpineCurves(w.xi, cover=w.cover, step_dtype=dtype, floor=floor)
        if not math.isfinite(c.limit) or c.limit <= s_max or c.nodes_below_limit() >= P_max:
            break
        s_max = c.limit + 3.0
    return c


def law_floor(law: Law) -> float:
    """A surprisal no step of ``law`` falls below: -log of its largest probability when every node's
    distribution is known without sampling (a deterministic law, or a Markov law of them), else 0."""
    subs = law.sub_laws()
    if not all(sub.deterministic for sub in subs):
        return 0.0
    top = max(float(jnp.max(sub.full_logp(jax.random.key(0), 0))) for sub in subs)
    return max(-top, 0.0)
