"""brwsim/llm: tests written against the survivors of a random sample of mutmut's mutants (docs/testing.md,
"The real-model side"). No real model is loaded: tiny random Llamas, fake views and recorded calls."""

from __future__ import annotations

import types

import numpy as np
import pytest

import brwsim.llm
from brwsim.errors import BrwsimError
from brwsim.llm import missing_llm_modules

needs_llm = pytest.mark.skipif(bool(missing_llm_modules()), reason="llm extra not installed")


def test_the_llm_package_imports_without_loading_a_model():
    assert brwsim.llm.__name__ == "brwsim.llm"


# --- prompts -------------------------------------------------------------------------------------------------------


def test_development_prompts_of_an_unknown_task_name_every_task():
    from brwsim.llm.sources._devset import _source

    assert _source("code") == "humaneval" and _source("pydoc") == "pydoc"
    with pytest.raises(BrwsimError) as e:
        _source("mtbench")
    assert str(e.value) == (
        "no development prompts for 'mtbench'; tasks: code (humaneval), prose (pydoc), chat (sharegpt)"
    )


def test_prose_paragraphs_leave_out_lists_grammar_and_short_ones():
    from brwsim.llm.sources._prompts import _prose_paragraphs

    words = "a plain sentence of prose that goes on long enough to be a paragraph worth a prompt " * 3
    paras = [words, "- " + words, "* " + words, "= " + words, "x ::= " + words, words[:150], "  " + words, words + ":"]
    assert list(_prose_paragraphs("\n\n".join(paras))) == [words.strip()]


# --- results -------------------------------------------------------------------------------------------------------


def test_a_prompts_result_reads_back_its_floor_seconds():
    from brwsim.llm.measure._search import OracleTree
    from brwsim.llm.measure._walks import PromptResult, Walks
    from brwsim.llm.sources._prompts import Prompt

    nan = np.nan
    walks = Walks(np.array([[1.0, nan]]), np.array([[0.5, nan]]), np.array([[0.25, nan]]),
                  np.array([[-0.5, -np.inf]], np.float32), [[3]])  # fmt: skip
    oracle = OracleTree(np.array([0.5]), np.array([-0.5]), np.array([1]), [(3,)], 2, 1)
    r = PromptResult(Prompt("code", "p1", "def f():"), 4, walks, oracle, 1.5, {"walks": 0.5}, {"walks": 0.1},
                     {"walks": 9}, {"walks": 0.25}, 64, 2)  # fmt: skip
    back = PromptResult.from_dict(r.to_dict())
    assert back.floor == {"walks": 0.25} and back.host_bytes == 64 and back.host_nodes == 2
    assert back.to_dict() == r.to_dict()


# --- drafters ------------------------------------------------------------------------------------------------------


def test_sequoias_trees_stop_below_an_end_token():
    from brwsim.llm.drafters._builders import sequoia_trees

    view = types.SimpleNamespace(tops=lambda parents: [(np.array([5, 6, 7]), None) for _ in parents])
    trees = sequoia_trees(view, [0.9, 0.5, 0.3], 4, 3, eos={5})
    assert sorted(trees) == [1, 2, 3, 4]
    for P, paths in trees.items():
        assert paths and all(5 not in p[:-1] for p in paths), (P, paths)  # nothing drafted after an end token
    assert trees[1] == [(5,)]
    free = sequoia_trees(view, [0.9, 0.5, 0.3], 4, 3)
    assert any(len(p) > 1 for p in free[4])


def test_a_tokenizer_that_differs_says_how_many_entries_do():
    from brwsim.llm.drafters._hf import check_same_tokenizer

    def tok(vocab):
        return types.SimpleNamespace(get_vocab=lambda: dict(vocab))

    target = types.SimpleNamespace(vocab_size=3, tokenizer=tok({"a": 0, "b": 1, "c": 2}))
    check_same_tokenizer(target, tok({"a": 0, "b": 1, "c": 2}), 3, "d")
    with pytest.raises(BrwsimError) as e:
        check_same_tokenizer(target, tok({"a": 0, "c": 1, "b": 2}), 3, "drafter x")
    assert str(e.value) == ("drafter x: its tokenizer does not match the target's (4 entries differ); use the same "
                            "family")  # fmt: skip
    with pytest.raises(BrwsimError) as e:
        check_same_tokenizer(target, None, 3, "d")
    assert "(no tokenizer differ)" in str(e.value)
    with pytest.raises(BrwsimError) as e:
        check_same_tokenizer(target, None, 4, "d")
    assert str(e.value) == ("d: its LM head has 4 tokens but the target's has 3; a drafter must share the target's "
                            "tokenizer")  # fmt: skip


WORDS = ["<unk>", "def", "return", "x", "(", ")", ":"]


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token=WORDS[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=WORDS[0])


@needs_llm
def test_a_model_dir_drafter_keeps_its_own_footprint_and_the_targets(tmp_path):
    from tiny_llm import tiny_llama

    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.sources._hf import HFSource

    target = HFSource(tiny_llama(len(WORDS), n_layers=2, seed=0), _word_tokenizer(), name="tiny", threads=1)
    tiny_llama(len(WORDS), n_layers=1, seed=3).save_pretrained(tmp_path / "d")
    _word_tokenizer().save_pretrained(tmp_path / "d")
    d = open_drafter(f"model:{tmp_path / 'd'}", target)
    fp = d.footprint()
    assert d.name == "model:d" and d.info == {"path": str(tmp_path / "d")}
    assert fp.weights == ((fp.params, 32.0),) and fp.params > 0
    assert d.target_bits == 32.0 and d.target_footprint.params > fp.params


@needs_llm
def test_bench_times_the_prompt_it_names(monkeypatch):
    from tiny_llm import tiny_llama

    from brwsim.llm import bench
    from brwsim.llm.sources._prompts import humaneval

    texts = []

    def encode(text):
        texts.append(text)
        return [1, 2, 3, 4]

    src = types.SimpleNamespace(device="cpu", encode=encode, model=tiny_llama(len(WORDS), n_layers=1, seed=0))
    monkeypatch.setattr(bench, "load_source", lambda model, threads, device: src)
    monkeypatch.setattr(bench, "_decode_and_tree", lambda src, ids, repeat: {"tree": ids})
    out = bench.run("tiny", repeat=1, prompt_index=5)
    assert texts == [humaneval()[5].text] and out["prompt_tokens"] == 4 and out["tree"] == [1, 2, 3, 4]
    assert out["model"] == "tiny" and out["repeat"] == 1 and out["device"] == "cpu"


@needs_llm
def test_eagle_head_training_says_whether_its_features_were_cached(tmp_path, monkeypatch):
    from tiny_llm import tiny_llama
    from transformers import AutoTokenizer

    from brwsim.llm.drafters import eagle_head
    from brwsim.llm.sources._hf import HFSource
    from brwsim.llm.sources._models import converted

    tok = AutoTokenizer.from_pretrained(str(converted("smollm2-135m")))  # the shipped tokenizer, not its model
    tiny = HFSource(tiny_llama(49152, n_layers=2, seed=3), tok, name="tiny-eagle-mutants")
    monkeypatch.setenv("BRWSIM_CACHE", str(tmp_path))
    meta = eagle_head.open_drafter(tiny, quick=True, progress=False).meta
    assert meta["features_cached"] is False
    for head in tmp_path.glob("eagle-head/*/head.pt"):  # the head trained again from the features kept
        head.unlink()
    assert eagle_head.open_drafter(tiny, quick=True, progress=False).meta["features_cached"] is True


def _walked(pool_logp):
    with np.errstate(divide="ignore"):  # log 0 = -inf: a token of no probability
        logp = np.log(np.array(pool_logp))
    walks = types.SimpleNamespace(pool_logp=logp, H=np.array([[0.5, np.nan]]),
                                  M2=np.array([[0.25, np.nan]]))  # fmt: skip
    return types.SimpleNamespace(walks=walks)


def test_a_surrogate_pool_is_truncated_only_where_a_row_misses_mass():
    from brwsim.llm.measure._task import pool_law

    law, mu, mu2 = pool_law("code", [_walked([[0.5, 0.5], [0.25, 0.75]]), _walked([[1.0, 0.0]])])
    assert law.truncated is False and (mu, mu2) == (0.5, 0.25)
    assert law.logp.shape == (3, 2)
    law, _, _ = pool_law("code", [_walked([[0.5, 0.5]]), _walked([[0.5, 0.25]])])
    assert law.truncated is True


@needs_llm
def test_a_model_transformers_cannot_load_is_one_line_naming_the_offline_names(tmp_path):
    from brwsim.llm.sources._models import MODELS, _load_hf

    with pytest.raises(BrwsimError) as e:
        _load_hf("my-model", str(tmp_path), {}, None)  # an empty directory
    msg = str(e.value)
    assert msg.startswith("cannot load model 'my-model': ") and "\n" not in msg
    assert msg.endswith(f" (names known offline: {', '.join(MODELS)})")


def test_a_speculative_session_names_the_builder_it_drafts_with(monkeypatch):
    from brwsim.llm.drafters import Proposer
    from brwsim.llm.specdec import _draft

    class Paths(Proposer):
        def tree(self, ids, P):
            return [(7,), (7, 8)][:P]

        def chain(self, ids, P):
            return self.tree(ids, P)

        @classmethod
        def open(cls, spec, target, log=None):
            return cls()

    s = _draft.DraftSession(Paths(), None, [1, 2])
    assert s.builder == "lookup_tree" and s.ctx is None and s.tree(2) == [(7,), (7, 8)] and s.tree(0) == []
    opened = []
    monkeypatch.setattr(_draft, "open_chain", lambda drafter, ids, features: opened.append((drafter, ids)) or "ctx")
    s = _draft.DraftSession("a drafter with a q", None, [1, 2])
    assert s.builder == "topq" and s.ctx == "ctx" and opened == [("a drafter with a q", [1, 2])]


def test_a_model_directory_that_does_not_exist_is_named_as_the_model(tmp_path):
    from brwsim.llm.sources._check import check_model_shapes

    with pytest.raises(BrwsimError) as e:
        check_model_shapes(tmp_path / "absent")
    assert (
        str(e.value) == f"model: {str(tmp_path / 'absent')!r} is not a directory (give a transformers model directory)"
    )
