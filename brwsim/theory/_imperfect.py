"""The imperfect-knowledge bound for top-P-by-Q drafting (docs/theory.md, "Imperfect knowledge").

A drafter without oracle access picks the P nodes of largest drafter path
probability Q(v). Let s_P be the largest -log Q(v) among them (the drafter's
own threshold, known without the target) and xi_q = -log q(Y_d) the drafter's
surprisal of the target's own token along a target walk Y. Then, for any law
and any drafter (proved in docs/theory.md):

    E[X_topQ(P) | prompt] <= C_q(s_P) = E_walk[#{d >= 1 : xi_q(1) + ... + xi_q(d) <= s_P}]

and, when the steps xi_q are i.i.d. with mean mu_q = E[H(p, q)] (the
cross-entropy) and second moment mu_2q = E[sum_x p(x) log^2 q(x)], Wald and
Lorden give C_q(s) <= s/mu_q + mu_2q/mu_q^2 - 1 (:func:`lorden`), a
rigorous bound for such laws and a labelled prediction for a real model.
"""

from __future__ import annotations

import math

import numpy as np

from .._stats import Z95


def threshold_counts(xi_q, s: float) -> tuple[np.ndarray, np.ndarray]:
    """Per walk (rows of ``xi_q [walks, depth]``, NaN after the end): (#{d : S_d <= s}, truncated).

    ``truncated`` marks walks that reach their last sampled step still at or
    below s without having ended: their count is a lower value, not the count.
    """
    x = np.asarray(xi_q, np.float64)
    ended = np.isnan(x[:, -1]) if x.shape[1] else np.ones(x.shape[0], bool)
    S = np.cumsum(np.nan_to_num(x, nan=np.inf), axis=1)
    below = S <= s
    counts = below.sum(axis=1).astype(np.float64)
    truncated = below[:, -1] & ~ended if x.shape[1] else np.zeros(x.shape[0], bool)
    return counts, truncated


def threshold_bound(per_prompt: list[tuple[np.ndarray, float]]) -> dict:
    """C_q(s_P) averaged over prompts, each from its own walks and threshold: point, SE, upper 97.5% value.

    ``per_prompt``: ``(xi_q [walks, depth], s_P)`` per prompt (prompts weighted equally).
    """
    means, variances, trunc = [], [], 0
    for xq, s in per_prompt:
        c, t = threshold_counts(xq, s)
        means.append(c.mean())
        variances.append(c.var(ddof=1) / len(c) if len(c) > 1 else math.nan)
        trunc += int(t.sum())
    n = len(means)
    point = float(np.mean(means))
    se = float(math.sqrt(np.sum(variances)) / n)
    return {"point": point, "se": se, "upper": point + Z95 * se, "truncated_walks": trunc}


def lorden(s: float, mu_q: float, mu2_q: float) -> float:
    """s/mu_q + mu_2q/mu_q^2 - 1: Wald + Lorden's bound on C_q(s) for i.i.d. steps (a prediction otherwise)."""
    if mu_q <= 0:
        return math.inf
    return max(0.0, s / mu_q + mu2_q / mu_q**2 - 1.0)
