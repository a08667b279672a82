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
"""

from __future__ import annotations

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


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One token from probabilities ``p`` (need not sum exactly to 1): inverse CDF."""
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


def rejection_step(p: np.ndarray, candidates: Sequence[int], rng: np.random.Generator) -> tuple[bool, int]:
    """Recursive rejection over deterministic sibling candidates (point-mass proposals): (accepted, token).
    The token is distributed as ``p`` whatever the candidates are."""
    r = np.array(p, np.float64)
    mass = float(r.sum())
    for x in candidates:
        if mass <= 0.0:
            break
        if rng.random() * mass < r[x]:
            return True, int(x)
        mass -= float(r[x])
        r[x] = 0.0
    return False, draw(r, rng)


def verify_tree(
    rows: Mapping[tuple[int, ...], np.ndarray], nodes, T: float, rng: np.random.Generator | None = None
) -> tuple[tuple[int, ...], int]:
    """(accepted path, the target's last token: correction or bonus) of one verifier call on ``nodes``."""
    kids = children_of(nodes)
    path: tuple[int, ...] = ()
    while True:
        row = rows[path]
        cand = kids.get(path, [])
        if T == 0:
            y = int(np.argmax(row))
            ok = y in cand
        else:
            ok, y = rejection_step(probabilities(row, T), cand, rng)
        if not ok:
            return path, y
        path = path + (y,)
