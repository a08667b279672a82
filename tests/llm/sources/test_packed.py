"""The packed engine (brwsim.llm.sources._packed) and the rounds that gather many prompts' requests (rounds).

Exact where it can be: a request's rows are the same bits alone and packed with
other prompts' requests (so a prompt's numbers do not depend on what was
measured beside it), and the packed engine agrees with the generic
transformers path and with full recomputation to float rounding.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tiny_llm import tiny_gemma3, tiny_llama

from brwsim.errors import BrwsimError

pytestmark = pytest.mark.needs_llm

V = 13
PROMPTS = [[3, 1, 4, 1, 5], [2, 7], [9, 2, 6, 5, 3, 5, 8, 9, 7], [11, 12, 0, 4]]
QUESTIONS = [[(1,), (1, 2), (3,)], [(1, 2, 4), (5,), (5, 6, 7, 8)], [(0,) * 6]]


@pytest.fixture(scope="module")
def tiny():
    from brwsim.llm.sources._hf import HFSource

    return HFSource(tiny_llama(V, n_layers=3, seed=1), None, name="tiny-packed", threads=1)


def assert_same_rows(a, b, model=None):
    """Bit for bit where this machine's kernels are batch-invariant (``rows_are_batch_invariant``), else to float
    rounding."""
    from brwsim.llm.sources._packed import rows_are_batch_invariant

    widths = None
    if model is not None:
        widths = {(m.in_features, m.out_features) for m in model.modules() if type(m).__name__ == "Linear"}
    if rows_are_batch_invariant(*([tuple(sorted(widths))] if widths else [])):
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _measure(src, prompt):
    """One prompt's root and rows for a fixed series of questions (several requests, several depths each)."""
    ctx = src.open(prompt)
    return [ctx.root[None]] + [ctx.logprobs(q) for q in QUESTIONS]


@pytest.fixture(scope="module")
def gemma():
    from brwsim.llm.sources._hf import HFSource

    return HFSource(tiny_gemma3(V, n_layers=3, seed=2), None, name="tiny-gemma", threads=1)


@pytest.mark.parametrize("model", ["tiny", "gemma"])
def test_packed_context_is_the_generic_one(model, request):
    from brwsim.llm.sources._contexts import HFContext, PackedContext

    tiny = request.getfixturevalue(model)
    assert tiny.engine is not None  # both architectures run on the packed engine
    for prompt in PROMPTS:
        p, g = PackedContext(tiny, prompt), HFContext(tiny, prompt)
        np.testing.assert_allclose(p.root, g.root, atol=2e-5)
        for q in QUESTIONS:
            np.testing.assert_allclose(p.logprobs(q), g.logprobs(q), atol=2e-5)
        assert p.passes == 1 + len(QUESTIONS) and p.kv.used == len(p.slots)


@pytest.mark.parametrize("width", [2, 4])
def test_rows_are_the_same_bits_alone_and_packed(tiny, width):
    from brwsim.llm.sources.rounds import run_concurrently

    alone = [_measure(tiny, p) for p in PROMPTS]
    passes = tiny.engine.passes
    packed = run_concurrently([lambda p=p: _measure(tiny, p) for p in PROMPTS], width)
    for a, b in zip(alone, packed, strict=True):
        for x, y in zip(a, b, strict=True):
            assert_same_rows(x, y, tiny.model)
    # four prompts of four requests each: fewer passes when several prompts share them
    assert tiny.engine.passes - passes < 4 * (1 + len(QUESTIONS))


def test_shipped_model_rows_are_the_same_bits_alone_and_packed(shipped):
    """The shipped model's real widths (the matrix products' kernels differ with the row count)."""
    from brwsim.llm.sources.rounds import run_concurrently

    texts = ["def add(a, b):\n    return", "The capital of France is", "import os\nimport sys\n"]
    prompts = [shipped.encode(t) for t in texts]

    def measure(prompt):
        ctx = shipped.open(prompt)
        a, b = (int(t) for t in np.argsort(-ctx.root)[:2])
        w = ctx.walker(3)
        return [ctx.root, ctx.logprobs([(a,), (b,), (a, b)]), w.step([a, b, a]), w.step([b, a, 7])]

    alone = [measure(p) for p in prompts]
    packed = run_concurrently([lambda p=p: measure(p) for p in prompts], 3)
    for a, b in zip(alone, packed, strict=True):
        for x, y in zip(a, b, strict=True):
            assert_same_rows(x, y, shipped.model)


def test_the_invariance_probe_sees_a_kernel_that_depends_on_its_neighbours(monkeypatch):
    """The probe the bit-for-bit tests rest on is not vacuous: a product whose rows depend on the row count
    (here: each row scaled by 1 + 1e-7 x rows) is reported as not batch-invariant."""
    import torch

    from brwsim.llm.sources import _packed

    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda x, w, b=None: real(x, w, b) * (1 + 1e-7 * x.shape[0]))
    monkeypatch.setattr(_packed, "_INVARIANT", {})
    assert _packed.rows_are_batch_invariant(((16, 32),)) is False


def test_rounds_keep_order_attribute_time_and_stop_on_an_error(tiny):
    from brwsim.llm.sources import rounds

    def job(i):
        def run():
            with rounds.phase(f"job{i % 2}"):
                _measure(tiny, PROMPTS[i % len(PROMPTS)])
            return i, rounds.attributed(reset=True)

        return run

    done = []
    out = rounds.run_concurrently([job(i) for i in range(6)], 3, on_done=lambda i, r: done.append(i))
    assert [r[0] for r in out] == list(range(6)) and sorted(done) == list(range(6))
    for i, (_, secs) in enumerate(out):
        assert set(secs.model) == {f"job{i % 2}"} and secs.model[f"job{i % 2}"] > 0
        assert set(secs.host) <= {f"job{i % 2}", "other"} and secs.total("tokens") == sum(secs.tokens.values())

    started = threading.Event()

    def bad():
        tiny.open(PROMPTS[0])
        started.set()
        raise ValueError("broken prompt")

    def slow():
        ctx = tiny.open(PROMPTS[1])
        for d in range(1, 50):
            ctx.logprobs([(1,) * d])
        return "finished"

    with pytest.raises(ValueError, match="broken prompt"):
        rounds.run_concurrently([slow, bad, slow], 3)
    assert started.is_set()
    for w in (0, -1, 1.5, True, "2"):
        with pytest.raises(BrwsimError, match="integer >= 1"):
            rounds.run_concurrently([slow], w)
    assert rounds.run_concurrently([], 4) == []


def test_open_with_hidden_states_is_the_last_layer_before_the_norm(tiny):
    import copy

    import torch

    from brwsim.llm.sources._packed import Open
    from brwsim.llm.sources.rounds import ask

    cut = copy.deepcopy(tiny.model)
    cut.model.norm = torch.nn.Identity()
    prompt = PROMPTS[2]
    with torch.no_grad():
        want = cut.model(input_ids=torch.tensor([prompt[:-1]])).last_hidden_state[0]
    kv, root, hidden = ask(tiny.engine, Open(prompt, hidden=True))
    np.testing.assert_allclose(hidden.numpy(), want.numpy(), atol=1e-5)
    np.testing.assert_allclose(root, tiny.open(prompt).root, atol=0)
    assert kv.prompt_len == len(prompt) and kv.used == 0


def test_gemma_rows_are_the_same_bits_alone_and_packed_and_the_window_is_checked(gemma):
    from brwsim.llm.sources._hf import HFSource
    from brwsim.llm.sources.rounds import run_concurrently

    alone = [_measure(gemma, p) for p in PROMPTS]
    packed = run_concurrently([lambda p=p: _measure(gemma, p) for p in PROMPTS], 4)
    for a, b in zip(alone, packed, strict=True):
        for x, y in zip(a, b, strict=True):
            assert_same_rows(x, y, gemma.model)
    narrow = HFSource(tiny_gemma3(V, n_layers=2, seed=2, window=8), None, name="narrow", threads=1)
    ctx = narrow.open(PROMPTS[0])  # 5 prompt tokens: positions 0-4
    ctx.logprobs([(1, 1, 1)])  # positions 5-7: inside a window of 8
    with pytest.raises(BrwsimError, match="sliding attention window") as e:
        ctx.logprobs([(1, 1, 1, 1)])  # position 8
    assert "\n" not in str(e.value)
