"""Early-exit self-speculation (brwsim.llm.early_exit): a tiny random Llama, then the shipped model."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
from tiny_llm import tiny_llama

from brwsim.errors import BrwsimError
from brwsim.llm import missing_llm_modules

HAVE_LLM = not missing_llm_modules()
needs_llm = pytest.mark.skipif(not HAVE_LLM and not os.environ.get("CI"), reason="llm extra not installed")

V = 7
LAYERS = 3
PROMPT = [3, 1, 4, 1, 5]


def tiny_model(n_layers=LAYERS, seed=0):
    return tiny_llama(V, n_layers=n_layers, seed=seed)


@pytest.fixture(scope="module")
def tiny():
    from brwsim.llm.hf import HFSource

    return HFSource(tiny_model(), None, name="tiny", threads=1)


def truncated_logp(model, k, seqs):
    """Next-token log-probs of a separately built model that keeps only the first k layers (no cache)."""
    import torch

    cut = copy.deepcopy(model)
    cut.model.layers = cut.model.layers[:k]
    cut.config.num_hidden_layers = k
    with torch.no_grad():
        return np.stack(
            [torch.log_softmax(cut(input_ids=torch.tensor([list(s)])).logits[0, -1].float(), -1).numpy() for s in seqs]
        )


def test_one_pass_exits_equal_truncated_models(tiny):
    from brwsim.llm.early_exit import EarlyExitSource

    src = EarlyExitSource(tiny, [1, 2, LAYERS])
    ctx = src.open(PROMPT)
    rng = np.random.default_rng(1)
    prefixes = [tuple(int(t) for t in rng.integers(0, V, size=d)) for d in (1, 3, 2, 4, 1)]
    both = ctx.both(prefixes)  # tree passes on the shared KV cache, several depths per pass
    assert both.shape == (len(prefixes), 4, V)
    seqs = [PROMPT + list(p) for p in prefixes]
    for j, k in enumerate(src.ks, start=1):
        np.testing.assert_allclose(ctx.root_both[j], truncated_logp(tiny.model, k, [PROMPT])[0], atol=1e-4)
        np.testing.assert_allclose(both[:, j], truncated_logp(tiny.model, k, seqs), atol=1e-4)
    # row 0 is the target, and the exit after all layers is the target itself
    np.testing.assert_allclose(both[:, 0], truncated_logp(tiny.model, LAYERS, seqs), atol=1e-4)
    np.testing.assert_array_equal(both[:, 0], both[:, 3])
    # the walker: target rows returned, exits recorded along the visited nodes (root once per walk)
    w = ctx.walker(2)
    got = w.step([2, 6])
    np.testing.assert_allclose(got, truncated_logp(tiny.model, LAYERS, [PROMPT + [2], PROMPT + [6]]), atol=1e-4)
    assert [s.shape for s in ctx.walk_stats] == [(2, 3, 5), (2, 3, 5)]
    q1 = truncated_logp(tiny.model, 1, [PROMPT + [2]])[0]
    p = np.exp(got[0])
    np.testing.assert_allclose(ctx.walk_stats[1][0, 0, 0], -(p * q1).sum(), rtol=1e-4)  # cross-entropy, k=1
    np.testing.assert_allclose(ctx.walk_stats[1][:, 2, 1], 0.0, atol=1e-6)  # KL at k = all layers


def test_exit_at_all_layers_is_the_oracle(tiny):
    from brwsim.llm.early_exit import EarlyExitSource, chains, topq_tree
    from brwsim.llm.measure import oracle_tree

    src = EarlyExitSource(tiny, [1, LAYERS])
    ctx = src.open(PROMPT)
    o = oracle_tree(ctx, 16, batch=3)
    v, oq = topq_tree(ctx, 2, 16, batch=3)  # q == p: top-P-by-Q is T*_P exactly
    np.testing.assert_array_equal(v, o.values)
    assert oq.prefixes == o.prefixes
    v1, _ = topq_tree(ctx, 1, 16, batch=3)  # an imperfect drafter: never above the oracle
    assert np.all(v1 <= o.values + 1e-9) and v1[-1] < o.values[-1]
    ch = chains(ctx, [1, 2], 16)
    assert np.all(ch[1] <= o.values + 1e-9) and np.all(ch[2] <= o.values + 1e-9)
    assert ch[2][0] == o.values[0]  # greedy by p = the top child of the root


def test_spec_and_errors(tiny, capsys):
    from brwsim.llm.early_exit import EarlyExitSource, parse_early_exit

    assert parse_early_exit("early-exit:k=12") == [12]
    assert parse_early_exit("early-exit:k=18/6/12") == [6, 12, 18]
    for bad, msg in [
        ("eagle:k=3", "unknown LLM drafter"),
        ("early-exit", "needs k"),
        ("early-exit:depth=3", "unknown key"),
        ("early-exit:k=x", "positive integer"),
        ("early-exit:k=0", ">= 1"),
    ]:
        with pytest.raises(BrwsimError, match=msg):
            parse_early_exit(bad)
    with pytest.raises(BrwsimError, match=r"k must be in 1\.\.3"):
        EarlyExitSource(tiny, [4])
    with pytest.raises(BrwsimError, match="needs a transformers model"):
        EarlyExitSource(object(), [1])
    from brwsim.cli import main

    for argv in (["--drafter", "eagle:k=3"], ["--drafter", "early-exit:k=3", "--record", "x.npz"]):
        assert main(["llm", "--n", "1", "--P", "1", *argv]) == 2  # before any model load
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("unknown LLM drafter" in err[0] or "cannot be combined" in err[0])


@needs_llm
def test_shipped_model_early_exit():
    """SmolLM2-135M: exits after 12 and 30 of 30 layers on one prompt, P <= 8."""
    from brwsim.llm.early_exit import EarlyExitSource, measure_prompt_with_drafter, summarize_drafter
    from brwsim.llm.models import load_source
    from brwsim.llm.prompts import Prompt

    src = EarlyExitSource(load_source("smollm2-135m", threads=1), [12, 30])
    assert src.n_layers == 30
    pr, dr = measure_prompt_with_drafter(src, Prompt("t", "0", "def add(a, b):\n"), 8, walks=2, depth=4, seed=0)
    np.testing.assert_allclose(dr.topq[1], dr.oracle, rtol=1e-6)  # k = 30: q == p
    assert np.all(dr.topq[0] <= dr.oracle + 1e-9) and np.all(dr.chain[0] <= dr.oracle + 1e-9)
    assert np.all(np.diff(dr.topq[0]) >= 0) and 0 < dr.topq[0][-1] <= 8
    assert dr.walk_stats.shape == (8, 2, 5)  # 2 walks x 4 visited nodes
    ce, kl, tv = dr.walk_stats[:, 0, 0], dr.walk_stats[:, 0, 1], dr.walk_stats[:, 0, 2]
    assert np.all(kl > 0) and np.all(ce > kl) and np.all((tv > 0) & (tv <= 1))
    np.testing.assert_allclose(dr.walk_stats[:, 1, 1], 0.0, atol=1e-4)
    H = pr.walks.H.T.ravel()  # step-major, as recorded
    np.testing.assert_allclose(H[np.isfinite(H)], dr.walk_stats[:, 0, 4], rtol=1e-5)  # the same visited nodes
    d = summarize_drafter([dr], [1, 8], n_layers=30)
    assert d["per_k"][0]["kl"] > 0.1 and d["per_k"][0]["results"][1]["topq"] <= pr.oracle.values[7] + 1e-9
