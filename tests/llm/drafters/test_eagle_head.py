"""The trained EAGLE-style draft head (brwsim.llm.drafters.eagle_head) on a tiny random Llama, shipped tokenizer.

The tiny target (hidden 16, 2 layers, the shipped model's 49,152-token
vocabulary) makes training take seconds; the code paths are those of the
shipped model (tools/eagle_head_value.py and docs/drafters.md, "A trained
draft head", cover the real one).
"""

from __future__ import annotations

import copy
import hashlib
import os

import numpy as np
import pytest
from tiny_llm import tiny_llama

from brwsim.errors import BrwsimError
from brwsim.llm import missing_llm_modules

HAVE_LLM = not missing_llm_modules()
pytestmark = pytest.mark.needs_llm

V = 49152
PROMPT = [1, 563, 4017, 42, 9, 77, 1020]


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    from brwsim.llm.sources._hf import HFSource
    from brwsim.llm.sources._models import converted

    tok = AutoTokenizer.from_pretrained(str(converted("smollm2-135m")))
    return HFSource(tiny_llama(V, n_layers=2, seed=3), tok, name="tiny-eagle-test")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("eagle-cache")


@pytest.fixture(scope="module")
def drafter(tiny, cache):
    from brwsim.llm.drafters import eagle_head

    old = os.environ.get("BRWSIM_CACHE")
    os.environ["BRWSIM_CACHE"] = str(cache)
    try:
        return eagle_head.open_drafter(tiny, quick=True, progress=False)
    finally:
        os.environ.pop("BRWSIM_CACHE") if old is None else os.environ.__setitem__("BRWSIM_CACHE", old)


def test_quick_training_is_reproducible_and_cached(tiny, drafter, cache, tmp_path, monkeypatch):
    from brwsim.llm.drafters import eagle_head

    meta = drafter.meta
    assert drafter.name == "eagle-head-quick" and len(meta["sha256"]) == 64
    monkeypatch.setenv("BRWSIM_CACHE", str(tmp_path))  # an empty cache: trained again, same weights
    again = eagle_head.open_drafter(tiny, quick=True, progress=False)
    assert again.meta["sha256"] == meta["sha256"] and again.meta["key"] == meta["key"]
    monkeypatch.setenv("BRWSIM_CACHE", str(cache))
    said = []
    hit = eagle_head.open_drafter(tiny, quick=True, progress=False, log=said.append)
    assert hit.meta["sha256"] == meta["sha256"] and said and said[0].startswith("eagle head: loaded")
    assert list(cache.glob("eagle-head/tiny-eagle-test-*/head.pt"))  # in the user cache, not the repository
    other = eagle_head.open_drafter(tiny, config=eagle_head.config_from(True, seed=1), progress=False)
    assert other.meta["sha256"] != meta["sha256"] and other.meta["key"] != meta["key"]


def test_loss_decreases_and_heldout_is_reported(tiny, drafter):
    """The training loss on all the training windows (no noise): the trained head below its seeded initial state."""
    import dataclasses

    import torch

    from brwsim.llm.drafters.eagle_head import _data
    from brwsim.llm.drafters.eagle_head._model import head_for
    from brwsim.llm.drafters.eagle_head._train import target_tables
    from brwsim.llm.drafters.eagle_head._unroll import loss

    cfg = dataclasses.replace(drafter.head_config, noise=0.0)
    ids, _ = _data.chunks(tiny.tokenizer, cfg.train_chunks, cfg.seq_len, cfg.chunks_per_file, cfg.seed, False)
    f, tops = target_tables(tiny.model, ids, cfg.topk, "", False)
    init = head_for(tiny.model, drafter.meta["scale"])
    init.reset(torch.Generator().manual_seed(cfg.seed))
    with torch.no_grad():
        before = float(loss(init, tiny.model, f, torch.as_tensor(ids), tops, cfg)[0])
        after = float(loss(drafter.head, tiny.model, f, torch.as_tensor(ids), tops, cfg)[0])
    assert after < before - 0.01, (before, after)
    assert len(drafter.meta["loss"]) == cfg.steps and np.all(np.isfinite(drafter.meta["loss"]))
    rows = drafter.meta["heldout"]
    assert [r["depth"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["kl"] > 0 and 0 <= r["top1_agree"] <= 1 and r["kl_ci95"] >= 0


def test_contract_shapes_and_normalisation(drafter):
    ctx = drafter.context(PROMPT)
    a, b = (int(t) for t in np.argsort(-ctx.root)[:2])
    rows = ctx.logprobs([(), (a,), (a, b), (b,)])
    assert rows.shape == (4, V) and rows.dtype == np.float32
    np.testing.assert_allclose(np.log(np.exp(rows.astype(np.float64)).sum(-1)), 0.0, atol=1e-4)
    np.testing.assert_array_equal(rows[0], ctx.root)
    assert ctx.logprobs([]).shape == (0, V)


def test_prompt_features_come_from_the_target(tiny, drafter):
    """The verified prompt's features are the target's last hidden states before its final norm."""
    import torch

    cut = copy.deepcopy(tiny.model)
    cut.model.norm = torch.nn.Identity()
    with torch.no_grad():
        want = cut.model(input_ids=torch.tensor([PROMPT[:-1]])).last_hidden_state[0]
    ctx = drafter.context(PROMPT)
    assert ctx.features.shape == (len(PROMPT) - 1, tiny.model.config.hidden_size)
    np.testing.assert_allclose(ctx.features.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_prefixes_are_cached_one_head_step_per_new_node(drafter):
    ctx = drafter.context(PROMPT)
    assert ctx.passes == 1 and ctx.nodes == 0  # the prompt's pass gives the root
    a, b, c = (int(t) for t in np.argsort(-ctx.root)[:3])
    ctx.logprobs([(a,), (b,)])
    assert (ctx.passes, ctx.nodes) == (2, 2)
    ctx.logprobs([(), (a,), (b,)])
    assert (ctx.passes, ctx.nodes) == (2, 2)  # all known: no pass
    deep = ctx.logprobs([(a, c), (b, a, c)])  # (a, c) and (b, a) have known parents: one pass, then (b, a, c)
    assert (ctx.passes, ctx.nodes) == (4, 5)
    fresh = drafter.context(PROMPT)  # the same nodes asked alone: each a plain chain
    np.testing.assert_allclose(fresh.logprobs([(a, c)])[0], deep[0], atol=2e-4)
    np.testing.assert_allclose(drafter.context(PROMPT).logprobs([(b, a, c)])[0], deep[1], atol=2e-4)


def test_a_forgotten_row_is_dropped_and_evaluated_again_when_asked(drafter):
    ctx = drafter.context(PROMPT)
    a, b = (int(t) for t in np.argsort(-ctx.root)[:2])
    first = ctx.logprobs([(a,), (a, b)])
    ctx.forget([(a,), (a, b), ()])  # the prompt's row stays
    assert set(ctx.answers) == {()} and (a,) in ctx.slot and (a, b) in ctx.slot
    passes = ctx.passes
    deeper = ctx.logprobs([(a, b, a)])  # its ancestors keep their slots and features: one pass, no re-evaluation
    assert ctx.passes == passes + 1 and set(ctx.answers) == {(), (a, b, a)}
    again = ctx.logprobs([(a,), (a, b)])  # asked again: evaluated again, the same rows
    assert ctx.passes == passes + 2
    np.testing.assert_allclose(again, first, atol=2e-4)
    np.testing.assert_allclose(drafter.context(PROMPT).logprobs([(a, b, a)])[0], deeper[0], atol=2e-4)


def test_drafting_equals_the_training_unroll(tiny, drafter):
    """A depth-d node of a drafted tree is the head's depth-(d + 1) prediction of training (same inputs, same mask)."""
    import torch

    from brwsim.llm.drafters.eagle_head._target import decode, features
    from brwsim.llm.drafters.eagle_head._unroll import unroll

    ids = PROMPT + [311]
    toks = torch.tensor([ids])
    with torch.no_grad():
        outs = unroll(drafter.head, tiny.model, features(tiny.model, toks), toks, 3)
        want_root = torch.log_softmax(decode(tiny.model, outs[0][0, 4]), -1).numpy()
        want_child = torch.log_softmax(decode(tiny.model, outs[1][0, 5]), -1).numpy()
        want_grandchild = torch.log_softmax(decode(tiny.model, outs[2][0, 6]), -1).numpy()
    ctx = drafter.context(PROMPT[:6])  # features of tokens 0..4, last token PROMPT[5]
    np.testing.assert_allclose(ctx.root, want_root, atol=2e-4)
    np.testing.assert_allclose(ctx.logprobs([(PROMPT[6],)])[0], want_child, atol=2e-4)
    np.testing.assert_allclose(ctx.logprobs([(ids[6], ids[7])])[0], want_grandchild, atol=2e-4)


def test_bad_config_and_inputs_are_one_line_errors(tiny, drafter):
    from brwsim.llm.drafters import eagle_head
    from brwsim.llm.sources import FileSource

    cases = [
        (lambda: eagle_head.HeadConfig(steps=0), "steps must be a positive integer"),
        (lambda: eagle_head.HeadConfig(lr=float("nan")), "lr must be a finite number"),
        (lambda: eagle_head.HeadConfig(seq_len=4, unroll=2), "seq_len must be >= 2 \\* unroll \\+ 2"),
        (lambda: eagle_head.config_from(True, stepz=3), "unknown field 'stepz'"),
        (lambda: eagle_head.open_drafter(FileSource.__new__(FileSource)), "needs a transformers target"),
        (lambda: eagle_head.open_drafter(tiny, config={"steps": 1}), "must be a HeadConfig"),
        (lambda: drafter.context([5]), "at least 2 tokens"),
    ]
    for make, msg in cases:
        with pytest.raises(BrwsimError, match=msg) as e:
            make()
        assert "\n" not in str(e.value)


def test_sharegpt_windows_come_from_training_conversations_with_a_disjoint_heldout_side():
    from brwsim.llm.drafters.eagle_head import _data

    # 60 conversations of two chunks each: a conversation's chunks are on one side
    body = "word " * 40
    texts = [(f"conv{i // 2}", "", f"User: question {i} {body}\n\nAssistant: answer {i}") for i in range(120)]

    def tok(text, add_special_tokens=False):
        return {"input_ids": [len(w) + 7 * (i % 3) for i, w in enumerate(text.split())]}

    train, used = _data.sharegpt_chunks(tok, 8, 16, 1, seed=0, heldout=False, texts=texts)
    held, hused = _data.sharegpt_chunks(tok, 2, 16, 1, seed=0, heldout=True, texts=texts)
    assert train.shape == (8, 16) and held.shape == (2, 16)
    assert len(used) == 8 and not set(used) & set(hused)  # one window per chunk; the sides are disjoint
    held_convs = {c for c, _, _ in texts if _data._conversation_heldout(c)}
    assert 0 < len(held_convs) < 60
    side = {hashlib.sha256(t.encode()).hexdigest()[:12]: c in held_convs for c, _, t in texts}
    assert all(not side[u.split(":")[1]] for u in used) and all(side[u.split(":")[1]] for u in hused)
    again, _ = _data.sharegpt_chunks(tok, 8, 16, 1, seed=0, heldout=False, texts=texts)
    assert np.array_equal(train, again)
    with pytest.raises(BrwsimError, match="gave only"):
        _data.sharegpt_chunks(tok, 200, 16, 1, seed=0, heldout=False, texts=texts)


def test_chat_corpus_option_trains_the_quick_head_on_sharegpt(tiny, cache, monkeypatch):
    from brwsim.llm.drafters import eagle_head, open_drafter
    from brwsim.llm.drafters.eagle_head import _data
    from brwsim.llm.sources._sharegpt import chat_prompts

    with pytest.raises(BrwsimError, match="corpus must be"):
        eagle_head.config_from(True, corpus="wiki")
    cfg = eagle_head.config_from(True, corpus="sharegpt")
    assert cfg.key({}) != eagle_head.QUICK.key({})
    monkeypatch.setenv("BRWSIM_CACHE", str(cache))
    d = open_drafter("eagle-head:quick,chat", tiny)
    assert d.name == "eagle-head-quick-chat" and d.meta["config"]["corpus"] == "sharegpt"
    # no training chunk opens with an evaluation prompt (ShareGPT repeats conversations under other ids)
    train = _data.chat_training_texts()
    starts = {f"User: {t}\n\nAssistant: " for _, t in chat_prompts()}
    assert len(train) > 8_000 and not any(t.text[: t.text.find("\n\nAssistant: ") + 13] in starts for t in train)
    assert _data.CORPORA == ("stdlib", "sharegpt")
