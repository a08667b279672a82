"""Exact answers for deterministic trees, computed independently of brwsim."""

from __future__ import annotations

import heapq

import numpy as np


def enumerate_fixed(probs, P):
    """Values of the oracle trees T*_1..T*_P of the tree with ``probs`` at every node.

    A float64 heap over (path probability, path): entry ``n - 1`` is the sum of
    the ``n`` largest path probabilities. Zero probabilities are skipped.
    """
    probs = [p for p in probs if p > 0]
    heap = [(-p, (i,)) for i, p in enumerate(probs)]
    heapq.heapify(heap)
    out = []
    while len(out) < P:
        negq, path = heapq.heappop(heap)
        out.append(-negq)
        for i, p in enumerate(probs):
            heapq.heappush(heap, (negq * p, path + (i,)))
    return np.cumsum(out)
