"""Verification of a drafted token tree against the target's rows: greedy (T = 0) and exact sampling (T > 0).

A tree is a list of token paths below the current end of the text (parents
before children). ``rows[v]`` is the target's next-token log-probabilities
after path ``v`` (``()``: after the text itself). The walk starts at the
root; at each node it decides which child (if any) is accepted:

- **T = 0**: the target's argmax token; accepted when it is a drafted child.
- **T > 0**: recursive rejection sampling over the node's drafted children
  (SpecInfer's multi-draft rule, Miao et al. 2024; brwsim.specsampling has it
  on synthetic trees). Candidate j is accepted with probability
  min(1, r_{j-1}(x_j) / q_j(x_j)), else r_j = (r_{j-1} - q_j)^+ / Z. The fixed
  builders draft deterministically, so each sibling's proposal q_j is a point
  mass on x_j: acceptance is r_{j-1}(x_j) and the residual is r_{j-1} with x_j
  removed and renormalised. If every child is rejected, the correction token is
  drawn from the last residual; the output at the node is then distributed as
  p exactly, by induction over j (docs/drafters.md, "Stochastic verification").

The walk ends at a rejection or at a leaf, whose row gives the bonus token
(argmax at T = 0, a draw from p at T > 0). Tokens of one call: the accepted
path and that last token.

The walk reads a call's rows through :class:`TreeRows`: a node's argmax, or
its distribution at T (:class:`Distribution`: its total, its probabilities
at the candidates, a draw from it with some tokens removed). The target's
rows stay where the model computed them (:class:`~._target.DeviceRows`): a
call moves the argmax of every row (T = 0) or, per node the walk visits,
the candidates' probabilities and one drawn token (T > 0), never a whole
row. :class:`HostRows` answers the same from rows on the host.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

import numpy as np


def children_of(nodes: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], list[int]]:
    """Each drafted node's children tokens, in the tree's order (``()`` is the root)."""
    out: dict[tuple[int, ...], list[int]] = {}
    for v in nodes:
        out.setdefault(tuple(v[:-1]), []).append(int(v[-1]))
    return out


def probabilities(logp: np.ndarray, T: float) -> np.ndarray:
    """``softmax(logp / T)`` in float64 (T > 0)."""
    x = np.asarray(logp, np.float64) / T
    x = np.exp(x - x.max())
    return x / x.sum()


def _inverse_cdf(r: np.ndarray, u: float) -> int:
    c = np.cumsum(r)
    return int(min(np.searchsorted(c, u * c[-1], side="right"), len(r) - 1))


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from probabilities ``p`` (need not sum exactly to 1): inverse CDF."""
    return _inverse_cdf(p, rng.random())


class Distribution(abc.ABC):
    """A node's next-token probabilities at the verifier's temperature, as the rejection step reads them."""

    @property
    @abc.abstractmethod
    def total(self) -> float:
        """The probabilities' sum (1 up to rounding)."""

    @abc.abstractmethod
    def at(self, tokens: Sequence[int]) -> np.ndarray:
        """``f64[len(tokens)]``: the probabilities of these tokens."""

    @abc.abstractmethod
    def draw_without(self, removed: Sequence[int], u: float) -> int:
        """The token at ``u`` times the total of the probabilities with ``removed`` set to 0 (inverse CDF in
        float64; ``u`` uniform in [0, 1))."""


class HostDistribution(Distribution):
    """Probabilities ``f64[V]`` on the host."""

    def __init__(self, p: np.ndarray):
        self.p = np.asarray(p, np.float64)

    @property
    def total(self) -> float:
        return float(self.p.sum())

    def at(self, tokens: Sequence[int]) -> np.ndarray:
        return self.p[np.asarray(tokens, np.int64)]

    def draw_without(self, removed: Sequence[int], u: float) -> int:
        r = self.p.copy()
        r[np.asarray(removed, np.int64)] = 0.0
        return _inverse_cdf(r, u)


def rejection_step(p, candidates: Sequence[int], rng: np.random.Generator) -> tuple[bool, int]:
    """Recursive rejection over deterministic sibling candidates (point-mass proposals): (accepted, token).
    ``p``: a :class:`Distribution` or probabilities on the host. The token is distributed as ``p`` whatever the
    candidates are; one uniform per distinct candidate tried, and one for the correction token. A repeated
    candidate is tried once (its mass is already removed when it is rejected: trying it again would accept a
    token with the wrong probability)."""
    d = p if isinstance(p, Distribution) else HostDistribution(p)
    candidates = list(dict.fromkeys(int(x) for x in candidates))
    mass = d.total
    px = d.at(candidates) if candidates else np.zeros(0)
    removed: list[int] = []
    for x, q in zip(candidates, px, strict=True):
        if mass <= 0.0:
            break
        if rng.random() * mass < q:
            return True, x
        mass -= float(q)
        removed.append(x)
    return False, d.draw_without(removed, rng.random())


class TreeRows(abc.ABC):
    """The target's rows of one verifier call, by token path below the text (``()``: after the text itself)."""

    @abc.abstractmethod
    def argmax(self, path: tuple[int, ...]) -> int:
        """The most likely next token after ``path`` (the first of equals)."""

    @abc.abstractmethod
    def distribution(self, path: tuple[int, ...], T: float) -> Distribution:
        """The next-token distribution after ``path`` at temperature ``T > 0``."""


class HostRows(TreeRows):
    """Rows ``f32[V]`` of log-probabilities on the host, by path."""

    def __init__(self, rows: Mapping[tuple[int, ...], np.ndarray]):
        self.rows = rows

    def argmax(self, path: tuple[int, ...]) -> int:
        return int(np.argmax(self.rows[path]))

    def distribution(self, path: tuple[int, ...], T: float) -> Distribution:
        return HostDistribution(probabilities(self.rows[path], T))


def verify_tree(rows, nodes, T: float, rng: np.random.Generator | None = None) -> tuple[tuple[int, ...], int]:
    """(accepted path, the target's last token: correction or bonus) of one verifier call on ``nodes``.
    ``rows``: a :class:`TreeRows` (or a mapping of host rows by path)."""
    rows = rows if isinstance(rows, TreeRows) else HostRows(rows)
    kids = children_of(nodes)
    path: tuple[int, ...] = ()
    while True:
        cand = kids.get(path, [])
        if T == 0:
            y = rows.argmax(path)
            ok = y in cand
        else:
            ok, y = rejection_step(rows.distribution(path, T), cand, rng)
        if not ok:
            return path, y
        path = path + (y,)
