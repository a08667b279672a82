"""Real drafters on real token trees (brwsim.llm.drafters): a tiny random Llama, then
the shipped model with tiny budgets."""

from __future__ import annotations

import copy
import json
import math
import os

import numpy as np
import pytest
from tiny_llm import tiny_llama

from brwsim.errors import BrwsimError
from brwsim.llm import missing_llm_modules

HAVE_LLM = not missing_llm_modules()
needs_llm = pytest.mark.needs_llm

V = 7
LAYERS = 4
PROMPT = [3, 1, 4, 1, 5]


def word_tokenizer(words):
    """A transformers tokenizer over the given words (one id each, in order)."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0])


WORDS = ["<unk>", "def", "return", "x", "(", ")", ":"]


@pytest.fixture(scope="module")
def tiny():
    from brwsim.llm.sources._hf import HFSource

    return HFSource(tiny_llama(V, n_layers=LAYERS, seed=0), word_tokenizer(WORDS), name="tiny", threads=1)


def full_logp(model, seqs):
    """Next-token log-probs by full recomputation (no cache)."""
    import torch

    with torch.no_grad():
        rows = [model(input_ids=torch.tensor([list(s)])).logits[0, -1].float() for s in seqs]
        return np.stack([torch.log_softmax(r, -1).numpy() for r in rows])


def test_specs_and_one_line_errors(capsys):
    from brwsim.llm.drafters import parse_drafter

    assert parse_drafter("layerskip:skip=8-12/20").params == {"skip": "8-12/20"}
    assert parse_drafter("layerskip:auto,n=6").params == {"auto": "1", "n": "6"}
    assert parse_drafter("lowbit:bits=4").params == {"bits": "4"}
    assert parse_drafter("model:/some/dir").params == {"path": "/some/dir"}
    assert parse_drafter("lookup").params == {}
    assert parse_drafter("eagle-head:quick").params == {"quick": "1"}
    assert parse_drafter("early-exit:k=12").params == {"k": "12"}
    for bad, msg in [
        ("medusa", "unknown family 'medusa'; examples: .*early-exit:k=12"),
        ("layerskip", "give skip=A-B or auto"),
        ("layerskip:skip=9-3", "is empty"),
        ("layerskip:skip=a-3", "layer ranges"),
        ("layerskip:skip=3,n=2", "n= goes with auto"),
        ("lowbit", "missing key"),
        ("lowbit:bits=1", ">= 2"),
        ("lowbit:bit=4", "unknown key"),
        ("model:", "missing key"),
        ("lookup:n=0", ">= 1"),
        ("eagle-head:fast", "is not key=value"),
    ]:
        with pytest.raises(BrwsimError, match=msg) as e:
            parse_drafter(bad)
        assert "\n" not in str(e.value)
    from brwsim.cli import main

    assert main(["llm", "--n", "1", "--P", "1", "--drafter", "lowbit:bits=99"]) == 2  # before any model load
    assert main(["llm", "--n", "1", "--P", "1", "--temperature", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "bits must be <= 16" in err[0] and "temperature" in err[1]


def test_layer_subset_and_lowbit_are_the_models_they_claim(tiny):
    import torch

    from brwsim.llm.drafters import open_drafter as open_llm_drafter
    from brwsim.llm.drafters._hf import HFDraftModel, layer_subset, quantize_weights

    d = open_llm_drafter("layerskip:skip=2-3", tiny)
    assert d.info["skipped"] == [2, 3] and d.info["kept"] == 2
    cut = copy.deepcopy(tiny.model)
    cut.model.layers = torch.nn.ModuleList([cut.model.layers[0], cut.model.layers[3]])
    cut.config.num_hidden_layers = 2
    for L, layer in enumerate(cut.model.layers):
        layer.self_attn.layer_idx = L
    ctx = d.context(PROMPT)
    prefixes = [(), (2,), (2, 6), (2, 6, 1), (5,)]
    got = ctx.logprobs(prefixes)  # tree passes on the drafter's own KV cache
    np.testing.assert_allclose(got, full_logp(cut, [PROMPT + list(p) for p in prefixes]), atol=1e-4)
    assert ctx.passes == 2  # the prompt, then the whole tree of missing nodes in one pass
    # the target is untouched and shares its weights with the drafter
    assert tiny.model.config.num_hidden_layers == LAYERS and len(tiny.model.model.layers) == LAYERS
    sub = layer_subset(tiny.model, [0, 1])
    assert sub.model.layers[0].mlp.up_proj.weight is tiny.model.model.layers[0].mlp.up_proj.weight
    q = quantize_weights(tiny.model, 3)
    w, w0 = q.model.layers[1].mlp.down_proj.weight, tiny.model.model.layers[1].mlp.down_proj.weight
    assert not torch.equal(w, w0)
    for row in w:  # per-row symmetric: at most 2 * 3 + 1 levels, the largest magnitude kept
        assert len(torch.unique(row)) <= 7
    np.testing.assert_allclose(w.detach().abs().amax(1).numpy(), w0.detach().abs().amax(1).numpy(), rtol=1e-5)
    lb = open_llm_drafter("lowbit:bits=16", tiny)
    np.testing.assert_allclose(lb.context(PROMPT).logprobs([(2,)]), full_logp(tiny.model, [PROMPT + [2]]), atol=2e-3)
    assert isinstance(lb, HFDraftModel) and lb.name == "lowbit:bits=16"
    with pytest.raises(BrwsimError, match="keep at least one"):
        open_llm_drafter("layerskip:skip=1-4", tiny)


def test_layerskip_auto_chooses_on_heldout_text(tiny):
    from brwsim.llm.drafters import open_drafter as open_llm_drafter

    d = open_llm_drafter("layerskip:auto,n=2", tiny)
    assert d.info["skipped"] in ([2, 3], [3, 4]) or len(d.info["skipped"]) == 2
    assert 1 not in d.info["skipped"] and LAYERS not in d.info["skipped"]  # first and last layers kept
    assert d.info["heldout_kl_choice"] >= 0
    with pytest.raises(BrwsimError, match=r"n must be in 1\.\.2"):
        open_llm_drafter("layerskip:auto,n=3", tiny)


def test_model_dir_tokenizer_check(tiny, tmp_path):
    from brwsim.llm.drafters import open_drafter as open_llm_drafter

    good, bad = tmp_path / "good", tmp_path / "bad"
    m = tiny_llama(V, n_layers=1, seed=3)
    m.save_pretrained(good)
    word_tokenizer(WORDS).save_pretrained(good)
    m.save_pretrained(bad)
    word_tokenizer(WORDS[:1] + list(reversed(WORDS[1:]))).save_pretrained(bad)
    d = open_llm_drafter(f"model:{good}", tiny)
    np.testing.assert_allclose(d.context(PROMPT).logprobs([(4,)]), full_logp(m, [PROMPT + [4]]), atol=1e-4)
    with pytest.raises(BrwsimError, match="tokenizer does not match") as e:
        open_llm_drafter(f"model:{bad}", tiny)
    assert "\n" not in str(e.value)
    with pytest.raises(BrwsimError, match="not a directory"):
        open_llm_drafter(f"model:{tmp_path / 'absent'}", tiny)


def test_builders_direct_check_and_imperfect_knowledge_bound(tiny):
    """q = p gives the oracle; every builder stays below it; the speculative calls agree with the sum of path
    probabilities within 4 standard errors; top-P-by-Q never exceeds C_q(s_P)."""
    from brwsim.llm.drafters import DrafterSettings, calibrate, measure_prompt_drafters
    from brwsim.llm.drafters import open_drafter as open_llm_drafter
    from brwsim.llm.sources._prompts import Prompt
    from brwsim.theory import threshold_bound

    ds = [open_llm_drafter(s, tiny) for s in (f"early-exit:k={LAYERS}", "layerskip:skip=2-3", "lowbit:bits=3")]
    rates = [calibrate(tiny, d, [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1], 1.0).rates for d in ds]
    st = DrafterSettings(walks=64, depth=24, check_samples=1500, check_P=8, top_k=3, eagle_depth=4)
    pr, out = measure_prompt_drafters(tiny, ds, Prompt("t", "0", "def x ( ) :"), 16, st, rates)
    oracle = pr.oracle.values
    np.testing.assert_allclose(out[0].values["topq"], oracle, rtol=1e-6)  # skip nothing: q == p
    for o in out:
        for b, v in o.values.items():
            ok = np.isfinite(v)
            assert np.all(v[ok] <= oracle[ok] + 1e-6), (o.name, b)
        c = o.check
        assert abs(c.mean - c.value) <= 4 * c.se + 1e-9, (o.name, c)
        for P in (1, 4, 16):
            b = threshold_bound([(o.xi_q, float(o.s_P[P - 1]))])
            assert b["truncated_walks"] == 0
            assert o.values["topq"][P - 1] <= b["point"] + 4 * b["se"] + 1e-9, (o.name, P, b)
    assert out[0].walk_stats[:, 1].mean() < 1e-5 < out[1].walk_stats[:, 1].mean()  # KL: none, then some
    assert min(o.values["topq"][-1] for o in out[1:]) < oracle[-1] - 1e-3  # an imperfect drafter loses


def test_guessed_chain_and_shared_check_rows_change_nothing(tiny):
    """The chain with guessed continuations is the chain without them (in fewer passes when the guesses are
    right); the direct check with one KV-cache row per distinct accepted path draws exactly what one row per
    call draws; sampling through a row index equals sampling the indexed rows."""
    from brwsim.llm.drafters import open_drafter as open_llm_drafter
    from brwsim.llm.drafters._builders import ChainGuess, chain_nodes
    from brwsim.llm.drafters._values import speculative_check
    from brwsim.llm.drafters._view import DraftView
    from brwsim.llm.measure import sample_rows

    d = open_llm_drafter("layerskip:skip=2-3", tiny)
    calls = d.src.forward_calls
    plain = chain_nodes(DraftView(d.context(PROMPT)), 12)
    plain_passes, calls = d.src.forward_calls - calls, d.src.forward_calls
    guess = ChainGuess(PROMPT)
    guess.add(plain[:8])
    assert chain_nodes(DraftView(d.context(PROMPT)), 12, guess=guess, ahead=4) == plain
    assert d.src.forward_calls - calls < plain_passes == 12  # the prompt's pass, then one per node but the last
    assert chain_nodes(DraftView(d.context(PROMPT)), 12, guess=ChainGuess([0, 6]), ahead=4) == plain  # bad guesses

    rng = np.random.default_rng(5)
    logp = np.log(rng.dirichlet(np.ones(V), size=3)).astype(np.float32)
    index = rng.integers(0, 3, size=40)
    a = sample_rows(logp, np.random.default_rng(1), index)
    np.testing.assert_array_equal(a, sample_rows(logp[index], np.random.default_rng(1)))

    class OneRowPerCall:  # the check's reference: every call decodes its own copy of the prompt's cache
        def __init__(self, inner):
            self.inner, self.root = inner, inner.root

        def walker(self, n):
            from brwsim.llm.sources import Walker

            return Walker(self.inner, n)

    tctx = tiny.open(PROMPT)
    tree = [(0,), (1,), (0, 1), (0, 2), (1, 1), (0, 1, 3), (0, 1, 3, 2)]
    X = speculative_check(tctx, tree, 300, np.random.default_rng(2))
    ref = _check_one_row_per_call(OneRowPerCall(tiny.open(PROMPT)), tree, 300, np.random.default_rng(2))
    np.testing.assert_array_equal(X, ref)
    assert X.max() >= 2


def _check_one_row_per_call(tctx, nodes, samples, rng):
    """The direct check with one KV-cache row per call (the plain definition)."""
    from brwsim.llm.measure import sample_rows

    tree, X = set(nodes), np.zeros(samples)
    walker, alive, prefixes = tctx.walker(samples), np.arange(samples), [()] * samples
    rows = np.broadcast_to(tctx.root, (samples, tctx.root.shape[0]))
    while True:
        tok = sample_rows(rows, rng)
        keep = [j for j in range(len(alive)) if prefixes[j] + (int(tok[j]),) in tree]
        if not keep:
            return X
        X[alive[keep]] += 1
        walker.keep(keep)
        alive, prefixes = alive[keep], [prefixes[j] + (int(tok[j]),) for j in keep]
        rows = walker.step([int(tok[j]) for j in keep])


def test_temperature_and_lookup():
    from brwsim.llm.drafters.lookup import LookupProposer
    from brwsim.llm.sources import check_temperature, temper

    rows = np.log(np.array([[0.5, 0.3, 0.2], [0.9, 0.05, 0.05]], np.float32))
    np.testing.assert_array_equal(temper(rows, 1.0), rows)
    hot, cold = np.exp(temper(rows, 2.0)), np.exp(temper(rows, 0.25))
    np.testing.assert_allclose(hot.sum(1), 1, rtol=1e-6)
    np.testing.assert_allclose(hot[0], np.array([0.5, 0.3, 0.2]) ** 0.5 / np.sum(np.array([0.5, 0.3, 0.2]) ** 0.5))
    assert cold[1, 0] > 0.99 and hot[1, 0] < 0.9
    for bad in (0, -1, "x", math.inf):
        with pytest.raises(BrwsimError, match="temperature"):
            check_temperature(bad)
    lk = LookupProposer(2)
    ids = [5, 6, 7, 8, 1, 5, 6, 9, 2, 5, 6]  # the last 2-gram (5, 6) occurred twice before
    assert lk.continuations(ids, 3)[:2] == [(9, 2, 5), (7, 8, 1)]
    assert lk.chain(ids, 3) == [(9,), (9, 2), (9, 2, 5)]
    tree = lk.tree(ids, 5)
    assert tree == [(9,), (9, 2), (9, 2, 5), (9, 2, 5, 6), (7,)]
    assert all(len(t) == 1 or t[:-1] in tree[: tree.index(t)] for t in tree)  # parents first
    assert lk.tree([1, 2, 3], 4) == []  # nothing repeats


@needs_llm
def test_shipped_model_drafters_cli(capsys):
    """SmolLM2-135M with a layer-skip, a 4-bit copy and prompt lookup: one prompt per task, P <= 8."""
    from brwsim.cli import main

    argv = ["llm", "--n", "1", "--prompts", "humaneval", "--P", "1,8", "--walks", "16", "--depth", "6"]
    argv += ["--trees", "100", "--check-samples", "60", "--check-P", "4", "--json", "--temperature", "0.7"]
    argv += ["--heldout-tokens", "48"]
    argv += ["--drafter", "layerskip:skip=14-17", "--drafter", "lowbit:bits=4", "--drafter", "lookup:n=2"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["temperature"] == 0.7
    t = d["tasks"][0]
    oracle = {r["P"]: r["mean"] for r in t["results"]}
    names = [x["name"] for x in t["drafters"]]
    assert names == ["layerskip:skip=14-17", "lowbit:bits=4", "lookup:n=2"]
    for x in t["drafters"]:
        for r in x["results"]:
            assert r["best"] <= oracle[r["P"]] + 1e-9
        assert abs(x["check"]["z"]) <= 4
    lb = t["drafters"][1]
    assert lb["stats"]["kl"] > 0 and t["drafters"][0]["stats"]["kl"] > 0
    assert lb["info"]["heldout"]["positions"] == 48 and 0 <= lb["info"]["heldout"]["top1_agree"] <= 1
    r = lb["results"][1]  # C_q(s_P) bounds top-P-by-Q (a 16-walk estimate: 4 standard errors)
    assert r["ik_truncated_walks"] > 0 or r["topq"] <= r["ik_bound_point"] + 4 * r["ik_bound_se"] + 1e-9


def test_temperature_law_for_synthetic_trees():
    import jax

    from brwsim.laws import parse_law

    inner = parse_law("dirichlet:V=50,alpha=0.5")
    key = jax.random.key(3)
    same = parse_law("temp:T=1,law=dirichlet:V=50,alpha=0.5")
    np.testing.assert_allclose(same.full_logp(key, 0), inner.full_logp(key, 0), atol=1e-5)
    cold = parse_law("temp:T=0.5,law=dirichlet:V=50,alpha=0.5")
    lp, lc = np.asarray(inner.full_logp(key, 0), np.float64), np.asarray(cold.full_logp(key, 0), np.float64)
    np.testing.assert_allclose(np.exp(lc), np.exp(2 * lp) / np.exp(2 * lp).sum(), rtol=1e-4, atol=1e-7)
    H = lambda x: -(np.exp(x) * x).sum()  # noqa: E731
    assert H(lc) < H(lp)
    assert parse_law(cold.spec()).T == 0.5
    with pytest.raises(BrwsimError, match="must be i.i.d"):
        two_state = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "two_state.json")
        parse_law(f"temp:T=0.5,law={two_state}")
    with pytest.raises(BrwsimError, match="T"):
        parse_law("temp:T=0,law=dirichlet:V=50,alpha=0.5")


def test_threshold_counts_and_lorden_on_iid_steps():
    """C_q(s) from i.i.d. steps stays below Wald + Lorden's s/mu + mu_2/mu^2 - 1 (fixed s), and counts are exact."""
    from brwsim.theory import lorden, threshold_bound, threshold_counts

    xq = np.array([[0.5, 0.5, 3.0, np.nan], [2.5, 0.1, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2]])
    c, t = threshold_counts(xq, 1.0)
    np.testing.assert_array_equal(c, [2, 0, 4])
    np.testing.assert_array_equal(t, [False, False, True])  # the third walk is still below s at its end
    rng = np.random.default_rng(0)
    steps = rng.gamma(0.5, 2.0, size=(20000, 200))  # mean 1, second moment 3
    for s in (0.5, 2.0, 6.0):
        b = threshold_bound([(steps, s)])
        assert b["truncated_walks"] == 0
        assert b["point"] - 4 * b["se"] <= lorden(s, 1.0, 3.0)
        assert b["point"] + 4 * b["se"] >= s / 1.0 - 1  # Wald: E[tau_s] >= s / mu


def test_eagle_head_contract_with_a_stand_in(tiny, monkeypatch):
    """``eagle-head`` calls ``eagle_head.open_drafter(target, log=..., config=config_from(quick, ...))``; any object
    that keeps the draft-model contract (here a stand-in without a KV cache: full recomputation per prefix)."""
    import importlib.machinery
    import sys
    import types

    from brwsim.llm.drafters import DrafterSettings, measure_prompt_drafters
    from brwsim.llm.drafters import open_drafter as open_llm_drafter
    from brwsim.llm.sources import HostQuery
    from brwsim.llm.sources._prompts import Prompt

    class Ctx(HostQuery):
        def __init__(self, ids):
            self.ids, self.passes = list(ids), 0

        def logprobs(self, prefixes):
            self.passes += len(prefixes)
            return full_logp(tiny.model, [self.ids + list(p) for p in prefixes]).astype(np.float32)

        def known(self, prefix):  # the DraftContext contract: it cannot tell, and it stores no rows
            return None

        def forget(self, prefixes):
            return None

    class Head:
        name, info = "stand-in", {}  # not a Proposer: a draft model with a q

        def context(self, prompt_ids):
            return Ctx(prompt_ids)

    calls = []
    mod = types.ModuleType("brwsim.llm.drafters.eagle_head")
    mod.__spec__ = importlib.machinery.ModuleSpec("brwsim.llm.drafters.eagle_head", None)
    mod.config_from = lambda quick, **overrides: ("config", quick, overrides)
    mod.open_drafter = lambda target, log=None, config=None: calls.append((target, config)) or Head()
    monkeypatch.setitem(sys.modules, "brwsim.llm.drafters.eagle_head", mod)
    import brwsim.llm.drafters as drafters_pkg  # an imported real head is the package's attribute: replace it too

    monkeypatch.setattr(drafters_pkg, "eagle_head", mod, raising=False)
    d = open_llm_drafter("eagle-head:quick", tiny)
    assert calls == [(tiny, ("config", True, {"corpus": "stdlib"}))] and d.name == "stand-in"
    st = DrafterSettings(walks=4, depth=4, check_samples=50, check_P=4, top_k=3, eagle_depth=2)
    pr, (out,) = measure_prompt_drafters(tiny, [d], Prompt("t", "0", "def x"), 8, st)
    np.testing.assert_allclose(out.values["topq"], pr.oracle.values, rtol=1e-5)  # the stand-in is the target
    assert out.passes > 0 and "sequoia" not in out.values  # no calibration rates given


def test_prompts_measured_together_give_the_numbers_of_one_at_a_time(tiny):
    """The whole measurement (walks, oracle, every drafter's trees in threads of their own, values, direct checks)
    of several prompts at once, their passes packed, equals one prompt at a time, bit for bit."""
    from brwsim.llm.drafters import DrafterSettings, measure_prompt_drafters
    from brwsim.llm.drafters import open_drafter as open_llm_drafter
    from brwsim.llm.sources._packed import rows_are_batch_invariant
    from brwsim.llm.sources._prompts import Prompt
    from brwsim.llm.sources.rounds import run_concurrently

    widths = tuple(sorted({(m.in_features, m.out_features) for m in tiny.model.modules() if hasattr(m, "in_features")}))
    # (where not, packed rows agree to float rounding: tests/llm/sources/test_packed.py)
    if not rows_are_batch_invariant(widths):
        pytest.skip("this machine's matrix kernels give a row other bits beside other rows")
    ds = [open_llm_drafter(s, tiny) for s in ("layerskip:skip=2-3", "lowbit:bits=4", "lookup:n=2")]
    st = DrafterSettings(walks=6, depth=8, check_samples=40, check_P=4, top_k=3, eagle_depth=3)
    prompts = [Prompt("t", str(i), text) for i, text in enumerate(["def x ( ) :", "return x", "x ( x ) : return"])]

    def measure(p):
        r, drs = measure_prompt_drafters(tiny, ds, p, 8, st)
        return r.oracle.values, r.walks.xi, [(d.values, d.xi_q, d.s_P, d.check, d.passes) for d in drs]

    def same(a, b):
        if isinstance(a, dict):
            assert a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        elif isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b
        return True

    alone = [measure(p) for p in prompts]
    for width in (2, 3):
        assert same(alone, run_concurrently([lambda p=p: measure(p) for p in prompts], width))


def test_summary_check_names_its_builders_and_the_fixed_value():
    """The pooled direct check says whose trees it speculated on (each prompt's best builder) and gives the fixed
    builder's mean value at the same P beside it, in the JSON and in the printed table."""
    import io

    from brwsim.llm.drafters._measure import DraftedPrompt
    from brwsim.llm.drafters._report import print_drafters, summarize_drafter_task
    from brwsim.llm.drafters._values import PromptCheck
    from brwsim.llm.results import OracleRow, TaskResult

    values = {"topq": np.linspace(0.1, 1.0, 8), "eagle": np.linspace(0.2, 1.1, 8)}
    check = PromptCheck("eagle", 4, 10, 1.0, 0.1, 1.05, 0.1)
    res = [DraftedPrompt("d", values, None, None, None, check, 3) for _ in range(3)]
    summary = summarize_drafter_task(res, [np.linspace(0.3, 1.5, 8)] * 3, [1, 2, 4, 8], {})
    d = summary.to_dict()
    assert d["check"]["builders"] == ["eagle"] and d["check"]["fixed_builder"] == "topq"
    assert d["check"]["fixed_value"] == pytest.approx(values["topq"][3])
    out = io.StringIO()
    rows = [OracleRow(P, 1.0, 0.0) for P in (1, 2, 4, 8)]
    print_drafters(TaskResult("task", 3, rows, drafters=[summary]), out)
    text = out.getvalue()
    assert "each prompt's best builder: eagle" in text and "fixed builder (topq) at P = 4: 0.486" in text
