"""The real tree's best-first search (brwsim.llm.measure) against the synthetic oracle (brwsim.oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import brwsim
from brwsim.llm.measure import oracle_tree
from brwsim.llm.sources import Context

PROBS = (0.5, 0.25, 0.15, 0.1)


class FixedContext(Context):
    """Every node's next-token distribution is ``PROBS`` (the law ``fixed:probs=...``): a deterministic tree."""

    def __init__(self):
        self.root = np.log(np.array(PROBS, np.float32))
        self.asked = 0

    def logprobs(self, prefixes):
        self.asked += len(prefixes)
        return np.broadcast_to(self.root, (len(prefixes), len(PROBS))).copy()


@pytest.mark.parametrize("batch", [1, 4])
def test_real_search_equals_the_synthetic_oracle(batch):
    """On the same (deterministic) tree, the host-side search commits the nodes brwsim.oracle's search takes:
    E[X] at every P equals the simulated oracle's (one tree suffices: the tree is not random)."""
    P = [1, 2, 3, 5, 8, 13, 21]
    ctx = FixedContext()
    o = oracle_tree(ctx, max(P), batch=batch)
    law = "fixed:probs=" + "/".join(str(p) for p in PROBS)
    sim = brwsim.simulate(law, P=P, trees=1, seed=0, bounds=False, progress=False)
    want = {r.P: r.stat.mean for r in sim.results}
    np.testing.assert_allclose([o.values[p - 1] for p in P], [want[p] for p in P], rtol=1e-5)
    assert np.all(np.diff(o.logP) <= 1e-6)  # committed best first
    assert all(pre[:-1] in [()] + [tuple(x) for x in o.prefixes[:i]] for i, pre in enumerate(o.prefixes))
    assert ctx.asked >= o.evaluated - 1  # every evaluated node was asked of the context
