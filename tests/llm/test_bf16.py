"""bfloat16 end to end on the CPU: a bfloat16 target with every drafter kind, the EAGLE-style head included (it
runs in the target's dtype: the features it reads, its layer, the target's norm and LM head), drafts, verifies and
generates; at T = 0 speculative decoding's output is plain greedy decoding's on the same bfloat16 target."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tiny_llm import PROMPTS, WORDS, V, tiny_llama, word_tokenizer

pytestmark = pytest.mark.needs_llm


@pytest.fixture(scope="module")
def bf16(tmp_path_factory):
    import torch

    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters.eagle_head import QUICK
    from brwsim.llm.drafters.eagle_head._drafter import EagleDraftModel
    from brwsim.llm.drafters.eagle_head._model import head_for
    from brwsim.llm.sources._hf import HFSource

    m = tiny_llama(V, n_layers=3, seed=1).to(torch.bfloat16)
    src = HFSource(m, word_tokenizer(WORDS), name="tiny-bf16", threads=1, device="cpu")
    d = tmp_path_factory.mktemp("draft-dir-bf16")
    tiny_llama(V, n_layers=1, seed=5).to(torch.bfloat16).save_pretrained(d)
    word_tokenizer(WORDS).save_pretrained(d)
    torch.manual_seed(0)
    head = EagleDraftModel(src, head_for(src.model), {"config": dataclasses.asdict(QUICK)}, name="eagle-head-bf16")
    specs = ["layerskip:skip=2-2", "lookup:n=2", f"model:{d}"]
    return src, [open_drafter(s, src) for s in specs] + [head]


def test_the_head_runs_in_the_targets_dtype(bf16):
    import torch

    src, drafters = bf16
    head = drafters[-1]
    assert src.dtype == torch.bfloat16
    assert {p.dtype for p in head.head.parameters()} == {torch.bfloat16}
    ctx = head.context(PROMPTS[0])
    rows = ctx.logprobs([(), (3,), (3, 1)])
    assert rows.dtype == np.float32 and rows.shape == (3, V) and np.isfinite(rows).all()
    np.testing.assert_allclose(np.exp(rows).sum(-1), 1.0, atol=1e-4)
    held = head.teacher_forced_rows(PROMPTS[0])
    assert held.shape == (len(PROMPTS[0]) - 2, V) and np.isfinite(held).all()


def test_greedy_speculative_decoding_in_bf16_is_plain_greedy(bf16):
    from brwsim.llm.specdec import plain_generate, speculative_generate

    src, drafters = bf16
    n = 16
    for prompt in PROMPTS[:2]:
        ref = plain_generate(src, prompt, n, T=0).tokens
        assert len(set(ref)) >= 3
        for d in drafters:
            for P in (1, 4):
                g = speculative_generate(src, d, prompt, n, P, T=0)
                assert g.tokens == ref, (d.name, P, prompt)
