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


def test_task_mu_is_one_estimator_over_prompts():
    """A task's mu and mu_2: the mean of the per-prompt means with the t interval of those same means (not the
    mean pooled over visited nodes, which weighs a prompt by its walks' length)."""
    from types import SimpleNamespace

    from brwsim._stats import mean_ci95
    from brwsim.llm.measure._task import prompt_moments

    nan = np.nan
    H = [np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]), np.array([[3.0, nan, nan, nan], [3.0, nan, nan, nan]])]
    H.append(np.array([[2.0, 2.5, nan, nan], [2.0, 1.5, 2.0, nan]]))
    rs = [SimpleNamespace(walks=SimpleNamespace(H=h, M2=h**2 + 1)) for h in H]
    m = prompt_moments(rs)
    per = [1.0, 3.0, 2.0]
    assert (m["mu"], m["mu_ci95"]) == pytest.approx(mean_ci95(per))
    assert m["mu"] == pytest.approx(2.0) and np.nanmean(np.concatenate([h.ravel() for h in H])) < 1.8
    assert (m["mu2"], m["mu2_ci95"]) == pytest.approx(mean_ci95([float(np.nanmean(h**2 + 1)) for h in H]))
