"""Real speculative decoding (brwsim.llm.specdec): exactness at T = 0 (the output is plain greedy decoding's, token
for token, for every drafter kind) and at T = 1 (the output is distributed as the target's), each with a
deliberately broken verification beside it that the same check must catch."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from tiny_llm import PROMPTS, WORDS, V, tiny_llama, word_tokenizer

pytestmark = pytest.mark.needs_llm


def _source(vocab: int, layers: int, seed: int, head_scale: float, tok=None):
    import torch

    from brwsim.llm.sources._hf import HFSource

    m = tiny_llama(vocab, n_layers=layers, seed=seed)
    with torch.no_grad():
        m.lm_head.weight.mul_(head_scale)  # tiny_llama scales it by 10 (peaked); less peaked: varied text
    return HFSource(m, tok, name=f"tiny-specdec-{vocab}", threads=1, device="cpu")


@pytest.fixture(scope="module")
def tiny():
    return _source(V, 3, 1, 1.0, word_tokenizer(WORDS))


@pytest.fixture(scope="module")
def drafters(tiny, tmp_path_factory):
    """Every drafter kind on the tiny target: layer skipping, a low-bit copy, prompt lookup, a model directory
    (a 1-layer Llama with the target's tokenizer) and the EAGLE-style head (untrained: its trees are arbitrary,
    which exactness must not depend on)."""
    import torch

    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters.eagle_head import QUICK
    from brwsim.llm.drafters.eagle_head._drafter import EagleDraftModel
    from brwsim.llm.drafters.eagle_head._model import head_for

    d = tmp_path_factory.mktemp("draft-dir")
    tiny_llama(V, n_layers=1, seed=5).save_pretrained(d)
    word_tokenizer(WORDS).save_pretrained(d)
    torch.manual_seed(0)
    head = EagleDraftModel(tiny, head_for(tiny.model), {"config": dataclasses.asdict(QUICK)}, name="eagle-head-test")
    specs = ["layerskip:skip=2-2", "lowbit:bits=3", "lookup:n=2", f"model:{d}"]
    return [open_drafter(s, tiny) for s in specs] + [head]


def hf_greedy(src, prompt, n):
    """Plain greedy decoding by transformers' own ``generate`` (the reference)."""
    import torch

    out = src.model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def test_greedy_output_is_plain_greedy_decoding_for_every_drafter(tiny, drafters):
    from brwsim.llm.specdec import plain_generate, speculative_generate

    n = 24
    for prompt in PROMPTS:
        ref = hf_greedy(tiny, prompt, n)
        assert plain_generate(tiny, prompt, n, T=0).tokens == ref
        assert len(set(ref)) >= 4  # a varied text, not one repeated token
        for d in drafters:
            for P in (1, 4, 16):
                g = speculative_generate(tiny, d, prompt, n, P, T=0)
                assert g.tokens == ref, (d.name, P, prompt)
                assert g.calls == len(g.accepted) and sum(g.accepted) + g.calls >= n
                assert max(g.drafted) <= P


def _accept_any_drafted_child(rows, nodes, T, rng):
    """A broken verifier: the drafter's first child is accepted whenever there is one (no check at all)."""
    from brwsim.llm.specdec import children_of

    kids, path = children_of(nodes), ()
    while path in kids:
        path = path + (kids[path][0],)
    return path, rows.argmax(path)


def test_greedy_check_catches_a_broken_verifier(tiny, drafters, monkeypatch):
    from brwsim.llm.specdec import _loop, speculative_generate

    monkeypatch.setattr(_loop, "verify_tree", _accept_any_drafted_child)
    prompt = PROMPTS[0]
    ref = hf_greedy(tiny, prompt, 24)
    assert any(speculative_generate(tiny, d, prompt, 24, 4, T=0).tokens != ref for d in drafters)


@pytest.mark.slow
def test_greedy_on_the_shipped_model(shipped):
    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.specdec import speculative_generate

    prompt = shipped.encode("def fibonacci(n):\n    ")
    ref = hf_greedy(shipped, prompt, 16)
    for spec, P in (("layerskip:skip=14-17", 8), ("lookup:n=3", 4)):
        g = speculative_generate(shipped, open_drafter(spec, shipped), prompt, 16, P, T=0)
        assert g.tokens == ref, spec
        assert sum(g.accepted) > 0  # the tree did something: some draft tokens accepted


# ---------------------------------------------------------------------------
# T = 1: the distribution of the first H tokens

SV, H = 4, 2  # vocabulary and horizon: SV ** H = 16 sequences, enumerated exactly
RUNS, BROKEN_RUNS, ALPHA = 1000, 100, 1e-3


def exact_distribution(src, prompt) -> np.ndarray:
    """The target's probability of each of the SV ** H continuations (full recomputation, no cache)."""
    import torch

    out = np.ones(SV**H)
    with torch.no_grad():
        for i, seq in enumerate(itertools.product(range(SV), repeat=H)):
            ids = torch.tensor([list(prompt) + list(seq)])
            lp = torch.log_softmax(src.model(input_ids=ids).logits[0].double(), -1)
            out[i] = float(torch.exp(sum(lp[len(prompt) - 1 + d, seq[d]] for d in range(H))))
    return out


def chi_square_p(counts: np.ndarray, p: np.ndarray) -> float:
    from scipy.stats import chi2

    e = counts.sum() * p
    return float(chi2.sf(((counts - e) ** 2 / e).sum(), len(p) - 1))


def _sample(src, drafter, prompt, runs, seed):
    from brwsim.llm.specdec import speculative_generate

    rng = np.random.default_rng(seed)
    counts = np.zeros(SV**H)
    for _ in range(runs):
        toks = speculative_generate(src, drafter, prompt, H, 3, T=1.0, rng=rng).tokens
        counts[int(np.ravel_multi_index(toks, (SV,) * H))] += 1
    return counts


def test_sampling_output_is_distributed_as_the_target(monkeypatch):
    """RUNS generations of H tokens (tree of P = 3 nodes from a layer-skip drafter); a chi-square test over the
    SV ** H = 16 sequences against the target's exact distribution, false-alarm rate ALPHA = 1e-3 (the seed is
    fixed, so the test is deterministic; every expected count >= 5). Power: for output probabilities q with
    TV(p, q) = delta, the noncentrality is N sum (q - p)^2 / p >= N (2 delta)^2 (Cauchy-Schwarz), so at N = 1000
    a deviation of delta = 0.12 is detected with probability >= 0.993 (noncentral chi-square, 15 degrees of
    freedom, lambda = 57.6; delta = 0.15: >= 0.9999). The same test run on a broken verifier (the drafter's first
    child always accepted) rejects it: BROKEN_RUNS = 100 generations already give p < 1e-200 there."""
    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.specdec import _loop

    src = _source(SV, 2, 1, 0.1)
    d = open_drafter("layerskip:skip=2-2", src)
    prompt = [1, 2, 3]
    p = exact_distribution(src, prompt)
    assert RUNS * p.min() >= 5
    counts = _sample(src, d, prompt, RUNS, 0)
    assert chi_square_p(counts, p) > ALPHA
    monkeypatch.setattr(_loop, "verify_tree", _accept_any_drafted_child)
    assert chi_square_p(_sample(src, d, prompt, BROKEN_RUNS, 1), p) < ALPHA


def test_rejection_step_is_exact_for_any_candidates():
    """One node: the output of recursive rejection over deterministic candidates is distributed as p, whatever
    the candidates (none, one, several, including tokens of probability zero); chi-square at 1e-3 on 20,000 draws
    per case, and the acceptance rate equals p's mass on the candidates within 4 standard errors."""
    from brwsim.llm.specdec import rejection_step

    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05, 0.0])
    rng = np.random.default_rng(0)
    n = 20000
    for cand in ([], [0], [3, 1], [5, 4, 0, 2], [1, 2, 3, 4, 5, 0], [1, 1, 3, 1]):  # the last repeats a token
        out = [rejection_step(p, cand, rng) for _ in range(n)]
        counts = np.bincount([t for _, t in out], minlength=len(p))[:5]
        assert chi_square_p(counts, p[:5]) > 1e-3, cand
        acc = np.mean([a for a, _ in out])
        want = p[sorted(set(cand))].sum()
        assert abs(acc - want) <= 4 * np.sqrt(want * (1 - want) / n) + 1e-12, cand


def test_draft_passes_and_rows_are_counted_per_generation(tiny, drafters):
    """Every token the target accepted is scored once by a draft model that follows the text (its catch-up rows),
    passes and rows start after the prompt's prefill, and P = 0 drafts nothing at all."""
    from brwsim.llm.specdec import speculative_generate

    prompt, n = PROMPTS[0], 16
    for d in drafters:
        none = speculative_generate(tiny, d, prompt, n, 0, T=0)
        assert none.draft_passes == none.draft_rows == 0 and none.accepted == [0] * n, d.name
        g = speculative_generate(tiny, d, prompt, n, 4, T=0)
        if d.name.startswith("lookup"):  # a proposer: no model pass
            assert g.draft_passes == g.draft_rows == 0
            continue
        caught_up = sum(a + 1 for a in g.accepted[:-1])  # the text's new tokens before the last call
        assert g.draft_passes >= g.calls - 1 and g.draft_rows >= caught_up + (g.calls - 1), d.name  # + >= 1 node


def test_measured_draft_calls_on_a_tiny_target(tiny, drafters):
    """brwsim.speedup.measure_draft_calls runs the real loop: fractions, passes and rows per budget, and the cost
    it gives a table is that fraction times the table's step."""
    from brwsim.speedup import measure_draft_calls

    skip, lookup = drafters[0], drafters[2]
    dc = measure_draft_calls(skip, tiny, PROMPTS[:2], [1, 4], new_tokens=8, T=1.0, seed=3)
    assert dc.P == (1, 4) and dc.prompts == 2 and dc.new_tokens == 8 and dc.t_step > 0
    assert all(f > 0 for f in dc.fraction) and all(c is not None and c >= 0 for c in dc.fraction_ci95)
    assert all(n > 0 for n in dc.passes) and all(r >= 1 for r in dc.rows) and dc.passes[1] > dc.passes[0]
    cost = dc.cost(2.0)
    assert cost.t_draft(4) == pytest.approx(2.0 * dc.fraction[1]) and cost.n_passes(1) == pytest.approx(dc.passes[0])
    assert cost.t_draft(0) == 0.0 and cost.kind == "measured"
    lk = measure_draft_calls(lookup, tiny, PROMPTS[:1], [2], new_tokens=6, seed=3)
    assert lk.passes == (0.0,) and lk.rows == (0.0,) and lk.fraction_ci95 == (None,)


def test_the_loop_drafts_from_the_drafters_own_distribution_on_the_text(tiny, drafters):
    # exactness does not see a drafter that follows the text wrongly (its trees would only be worse); so after
    # each call, the accepted path (a random path of its own tree, or none) and the target's token appended, the
    # session's q at the root and below it must be a fresh context's q on the whole text
    from brwsim.llm.drafters import Proposer
    from brwsim.llm.specdec._draft import DraftSession

    rng = np.random.default_rng(4)
    for d in drafters:
        if isinstance(d, Proposer):
            continue
        text = list(PROMPTS[0])
        session = DraftSession(d, tiny, text)
        for _ in range(4):
            tree = session.tree(8)
            path = list(tree[rng.integers(len(tree))]) if rng.random() < 0.8 else []
            path = path[: rng.integers(len(path) + 1)]
            tokens = path + [int(rng.integers(1, V))]
            feats = d.prompt_features(text + tokens)[-len(tokens) :] if session.needs_features else None
            session.advance(tokens, feats)
            text += tokens
            a, b = (int(x) for x in rng.integers(1, V, 2))
            prefixes = [(), (a,), (a, b)]
            got = np.asarray(session.ctx.logprobs(prefixes))
            want = np.asarray(d.context(text).logprobs(prefixes))
            np.testing.assert_allclose(got, want, atol=2e-4, err_msg=f"{d.name} after {len(text)} tokens")


def test_the_loop_hands_the_head_the_targets_features_of_the_text(tiny, drafters, monkeypatch):
    # the verifier's pass gives the head the target's features of the tokens it appends (the token before each);
    # they must be the features of the same positions in one pass over the whole text
    from brwsim.llm.specdec import _draft, speculative_generate

    head = drafters[-1]
    seen = []
    advance = _draft.HeadChain.advance

    def recording(self, tokens, features):
        seen.append((list(tokens), features.clone(), self.n))
        return advance(self, tokens, features)

    monkeypatch.setattr(_draft.HeadChain, "advance", recording)
    prompt = PROMPTS[0]
    g = speculative_generate(tiny, head, prompt, 24, 4, 1.0, 3)
    text = list(prompt) + g.tokens
    full = head.prompt_features(text + [0]).float().numpy()  # row i: the feature at text position i
    assert seen
    for tokens, features, n in seen:  # the chain held n tokens before these
        np.testing.assert_allclose(features.numpy(), full[n - 1 : n - 1 + len(tokens)], atol=1e-4)


def test_the_loops_draft_contexts_answer_on_the_device(tiny, drafters):
    """The draft contexts of the loop (a packed draft model, the head) and the head's own context keep their rows
    on the model's device: drafting a tree of P nodes moves only the search's top-P children of each node it
    opens to the host (12 bytes a child: an int64 id and a float32 log-probability), never a whole row, and their
    node query equals the host answer of their rows."""
    from brwsim.llm.drafters import Proposer
    from brwsim.llm.sources import NodeQuery, answer_rows
    from brwsim.llm.specdec._draft import DraftSession

    P = 8
    for d in drafters:
        if isinstance(d, Proposer):
            continue
        session = DraftSession(d, tiny, list(PROMPTS[1]))
        tree = session.tree(P)
        moved = session.ctx.transfer()
        assert tree and moved.nodes > 0 and moved.bytes == moved.nodes * 12 * min(P, V), d.name
        for ctx in (session.ctx, d.context(list(PROMPTS[1]))):
            prefixes = [(), tree[0], tree[-1]]
            q = NodeQuery(K=3, moments=True, u=np.array([0.1, 0.5, 0.9]))
            got, want = ctx.query(prefixes, q), answer_rows(ctx.logprobs(prefixes), q)
            np.testing.assert_array_equal(got.ids, want.ids)
            np.testing.assert_array_equal(got.logp, want.logp)
            np.testing.assert_allclose(got.H, want.H, rtol=1e-5)
            np.testing.assert_array_equal(got.sample, want.sample)


@pytest.mark.parametrize("T", [0.0, 1.0, 0.6])
def test_the_verifier_reads_its_rows_on_the_device_as_on_the_host(T):
    """One verifier call's rows stay on the model's device: the walk gives the path and token that the same walk
    over the whole rows on the host gives (same uniforms), and reads from the device only the argmax of each row
    (T = 0: 8 bytes a row) or, per node it visits, its candidates' probabilities, their total and at most one
    drawn token (T > 0)."""
    from brwsim.llm.specdec import HostRows, children_of, plain_generate, verify_tree
    from brwsim.llm.specdec._target import TargetSession

    src = _source(500, 2, 1, 3.0)  # a vocabulary of 500: a whole row (2,000 bytes) is larger than what is read
    prompt = [3, 1, 4, 1, 5]
    g = plain_generate(src, prompt, 3, T=0).tokens  # the greedy chain and siblings: walks that accept some
    top = np.argsort(-TargetSession(src, prompt).verify([]).logp[0].numpy())[:3].tolist()
    ts = TargetSession(src, prompt)
    nodes = [(g[0],), (top[1],), (g[0], g[1]), (g[0], 7), (top[1], 5), (g[0], g[1], g[2]), (top[2],)]
    rows = ts.verify(nodes)
    host = HostRows({p: rows.logp[i].numpy() for p, i in rows.index.items()})
    kids, paths = children_of(nodes), set()
    for seed in range(40 if T > 0 else 1):
        before = ts.moved.bytes
        got = verify_tree(rows, nodes, T, np.random.default_rng(seed) if T > 0 else None)
        assert got == verify_tree(host, nodes, T, np.random.default_rng(seed) if T > 0 else None)
        paths.add(got[0])
        moved = ts.moved.bytes - before
        if T == 0:
            assert moved == (8 * (len(nodes) + 1) if seed == 0 else 0)  # every row's argmax, once a call
        else:
            visited = [got[0][:d] for d in range(len(got[0]) + 1)]
            most = sum(8 + 8 * len(kids.get(v, [])) for v in visited) + 8
            assert 0 < moved <= most < 4 * 500, (seed, got, moved)
    assert T == 0 or len(paths) >= 3 and max(map(len, paths)) >= 2  # walks that accept, at several depths
