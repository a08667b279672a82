"""The node query (brwsim.llm.sources NodeQuery / NodeAnswer): the same answers on the host and next to the model.

The host reduction (``answer_rows``) is the reference: the device reduction (``answer_tensor``, run by the
contexts of a transformers model) must give the same top-K ids and log-probabilities bit for bit, the same
samples, and H, M2 within float32 rounding of their terms; the contexts answer it with only K-sized results
crossing to the host, and count what crossed.
"""

from __future__ import annotations

import numpy as np
import pytest
from tiny_llm import tiny_llama

from brwsim.llm.sources import NodeAnswer, NodeQuery, TempSource, answer_rows, temper

pytestmark = pytest.mark.needs_llm

V = 13
PROMPT = [3, 1, 4, 1, 5]
NODES = [(), (1,), (1, 2), (3,), (1, 2, 4)]
# H and M2 sum float32 terms p log p whose exp may round differently in torch and NumPy (one float32 ulp per
# term): a relative difference of a few float32 epsilons
RTOL = 8 * np.finfo(np.float32).eps


def _rows(seed: int, B: int = 6, width: int = 500) -> np.ndarray:
    x = np.random.default_rng(seed).normal(0, 3, (B, width)).astype(np.float32)
    x[0, :7] = x[0, 7]  # ties in the top-K of the first row
    x[1, 5] = -np.inf  # a zero-probability token
    return (x - np.log(np.exp(x.astype(np.float64)).sum(1, keepdims=True))).astype(np.float32)


def _same(host, dev, rows=None):
    """The same answer; with ``rows`` (the tempered rows, which have ties), the top-K ids may order equal
    log-probabilities differently (the device by token id): then each id must carry its log-probability."""
    np.testing.assert_array_equal(host.logp, dev.logp)
    if rows is None:
        np.testing.assert_array_equal(host.ids, dev.ids)
    else:
        np.testing.assert_array_equal(np.take_along_axis(rows, dev.ids, axis=1), dev.logp)
        assert all(len(set(r)) == len(r) for r in dev.ids)
    np.testing.assert_allclose(host.H, dev.H, rtol=RTOL)
    np.testing.assert_allclose(host.M2, dev.M2, rtol=RTOL)
    np.testing.assert_array_equal(host.sample, dev.sample)
    np.testing.assert_array_equal(host.sample_logp, dev.sample_logp)


@pytest.mark.parametrize("T", [1.0, 0.7])
def test_device_answer_is_the_host_answer(T):
    torch = pytest.importorskip("torch")
    from brwsim.llm.sources._query import answer_tensor

    rows = _rows(0)
    u = np.random.default_rng(1).random(3 * rows.shape[0])
    u_rows = np.repeat(np.arange(rows.shape[0]), 3)[::-1].copy()  # three draws a row, rows in any order
    at = np.array([(i, t) for i in range(rows.shape[0]) for t in (0, 5, 499)], np.int64)
    for K in (1, 16, 500, 900):
        q = NodeQuery(K=K, moments=True, u=u, u_rows=u_rows, at=at, T=T)
        host, dev = answer_rows(rows, q), answer_tensor(torch.from_numpy(rows), q)
        _same(host, dev, temper(rows, T))
        assert host.ids.shape == (rows.shape[0], min(K, 500)) and host.sample.shape == u.shape
        # the device orders equal log-probabilities by token id
        first = dev.ids[0][dev.logp[0] == dev.logp[0][0]]
        assert list(first) == sorted(first)
        np.testing.assert_array_equal(host.at_logp, dev.at_logp)
        np.testing.assert_array_equal(host.at_logp, temper(rows, T)[at[:, 0], at[:, 1]])
        # only what was asked crosses: ids, log-probs, H, M2, samples and their log-probs, the pairs' log-probs
        assert dev.host_bytes == dev.ids.nbytes + dev.logp.nbytes + 16 * rows.shape[0] + 12 * u.size + 4 * len(at)
    host = answer_rows(rows, NodeQuery(rows=True, T=T))
    np.testing.assert_array_equal(host.rows, temper(rows, T))
    assert host.ids is None and host.H is None and host.sample is None


def test_host_answer_is_the_row_reductions():
    """answer_rows is the reductions the measurements always made: top-K by decreasing log-probability, the entropy
    moments of the row, and the token at u of the cumulative distribution."""
    rows = _rows(2, B=3, width=40)
    a = answer_rows(rows, NodeQuery(K=5, moments=True, u=np.array([0.0, 0.5, 0.999999])))
    p = np.exp(rows.astype(np.float64))
    for i in range(3):
        assert np.all(np.diff(a.logp[i]) <= 0) and np.all(rows[i][a.ids[i]] == a.logp[i])
        assert a.logp[i][-1] >= np.sort(rows[i])[-5]
        np.testing.assert_allclose(a.H[i], -(p[i][p[i] > 0] * np.log(p[i][p[i] > 0])).sum(), rtol=1e-5)
        c = np.cumsum(p[i])
        assert a.sample[i] == min(np.searchsorted(c, [0.0, 0.5, 0.999999][i] * c[-1], side="right"), 39)
    assert a.sample[0] == np.argmax(p[0] > 0)  # u = 0: the first token of positive probability


@pytest.fixture(scope="module")
def tiny():
    from brwsim.llm.sources._hf import HFSource

    return HFSource(tiny_llama(V, n_layers=3, seed=1), None, name="tiny-query", threads=1)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("T", [1.0, 0.5])
def test_context_query_on_the_device_equals_the_host_answer_of_its_rows(tiny, packed, T):
    from brwsim.llm.sources._contexts import HFContext, PackedContext
    from brwsim.llm.sources._temperature import TempContext

    ctx = (PackedContext if packed else HFContext)(tiny, PROMPT)
    ctx = TempContext(ctx, T) if T != 1.0 else ctx
    u = np.random.default_rng(3).random(len(NODES))
    q = NodeQuery(K=4, moments=True, u=u)
    before = ctx.transfer().bytes  # the temperature wrapper copies the prompt's row once
    dev = ctx.query(NODES, q)
    moved = ctx.transfer()
    assert moved.bytes - before == dev.ids.nbytes + dev.logp.nbytes + 28 * len(NODES)
    _same(answer_rows(ctx.logprobs(NODES), q), dev)
    assert moved.bytes - before > len(NODES) * V * 4  # whole rows cross when asked for


def test_walker_query_equals_its_steps(tiny):
    """A walker's query appends the tokens like step and answers the new nodes (on the device for the packed and
    the generic context, through a temperature wrapper too)."""
    from brwsim.llm.sources._contexts import HFContext

    opens = [tiny.open, TempSource(tiny, 0.5).open, lambda p: HFContext(tiny, p)]  # packed, tempered, generic
    for open_ in opens:
        wa, wb = open_(PROMPT).walker(3), open_(PROMPT).walker(3)
        for tokens in ([1, 2, 3], [4, 4, 0], [7, 8, 9]):
            u = np.random.default_rng(sum(tokens)).random(3)
            q = NodeQuery(K=5, moments=True, u=u)
            _same(answer_rows(wa.step(tokens), q), wb.query(tokens, q))
            assert wa.prefixes == wb.prefixes


def test_device_divergences_equal_the_host_ones():
    torch = pytest.importorskip("torch")
    from brwsim.llm.drafters._calibrate import device_divergences, row_divergences

    lp, lq = _rows(4), _rows(5)
    lq[2, :] = lp[2, :]  # identical rows: KL 0, TV 0, top-1 agreement 1
    want = row_divergences(lp, lq)
    got = device_divergences(torch.from_numpy(lp), torch.from_numpy(lq))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert got[2, 1] == pytest.approx(0.0, abs=1e-12) and got[2, 3] == 1.0


@pytest.mark.parametrize("T", [1.0, 0.5])
def test_walk_divergences_stay_on_the_device(tiny, T):
    """The real-drafters walks on a device target record its rows there and measure a draft model's divergences
    there: the same numbers as from whole rows on the host, and only K-sized answers cross."""
    from brwsim.llm.drafters._calibrate import row_divergences
    from brwsim.llm.drafters._hf import HFDraftContext
    from brwsim.llm.drafters._measure import _StatsContext
    from brwsim.llm.drafters._view import DraftView
    from brwsim.llm.measure._walks import sample_walks

    src = TempSource(tiny, T) if T != 1.0 else tiny
    stats = _StatsContext(src.open(PROMPT), [DraftView(HFDraftContext(tiny, PROMPT), T)])
    w = sample_walks(stats, 4, 5, np.random.default_rng(0), 6)
    assert all(not isinstance(rows, np.ndarray) for _, rows in stats.steps)  # recorded on the device
    moved = stats.transfer()
    # only K-sized answers crossed: the root's (6 children, H, M2, 4 samples) and 4 steps of 4 nodes each
    K, per_node = 6, 6 * 12 + 28
    assert (moved.nodes, moved.bytes) == (1 + 16, K * 12 + 16 + 4 * 12 + 16 * per_node)
    got = stats.divergences(0)
    every = [p for prefixes, _ in stats.steps for p in prefixes]
    host = src.open(PROMPT)
    want = row_divergences(host.logprobs(every), stats.views[0].logprobs(every))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert len(every) == 4 + sum(len(t) - 1 for t in w.tokens)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 21])
def test_device_divergences_bit_identical_to_the_whole_block(n):
    """A few rows at a time, in place, gives each row's five numbers bit for bit as the whole block in float64 at
    once (the formula written out), with -inf entries on either side, a probability that underflows to 0 in
    float64 and ties at the maximum."""
    torch = pytest.importorskip("torch")
    from brwsim.llm.drafters._calibrate import device_divergences

    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, 300, generator=g) * 3
    lp = torch.log_softmax(a, -1)
    lq = torch.log_softmax(a + torch.randn(n, 300, generator=g), -1)
    lq[0, :100] = -float("inf")
    lp[-1, 200:] = -float("inf")
    lp[0, 5] = -800.0  # exp underflows to 0 in float64
    lq[n // 2, 3] = lq[n // 2, 4] = lq[n // 2].max()  # tied maxima: argmax takes the first either way
    want = _divergences_whole(lp, lq)
    got = device_divergences(lp, lq)
    assert got.shape == (n, 5) and got.dtype == np.float64
    assert np.array_equal(got, want), np.abs(got - want).max()
    assert device_divergences(lp[:0], lq[:0]).shape == (0, 5)


def _divergences_whole(lp, lq):
    """The five numbers of every row over the whole block at once, in float64 (the formula written out)."""
    import torch

    with torch.inference_mode():
        P, Q = lp.double(), lq.double()
        p = torch.exp(P)
        H = -(p * torch.where(p > 0, P, torch.zeros_like(P))).sum(-1)
        ce = -(p * torch.clamp(Q, min=-1e30)).sum(-1)
        tv = 0.5 * torch.abs(p - torch.exp(Q)).sum(-1)
        top = (torch.argmax(Q, -1) == torch.argmax(P, -1)).double()
        return torch.stack([ce, ce - H, tv, top, H], dim=-1).numpy()


@pytest.mark.parametrize("threads", [1, 2])
def test_device_divergences_leave_float64_rows_alone_and_match_at_any_thread_count(threads):
    """Rows already in float64 are read, never written (the float64 copies are the method's own), and the numbers
    match the whole block's bit for bit with one torch thread or two, on rows wide enough (49,152) for torch to
    split a sum over threads and a row count that leaves one row past the last block of eight."""
    torch = pytest.importorskip("torch")
    from brwsim.llm.drafters._calibrate import device_divergences

    g = torch.Generator().manual_seed(9)
    a = torch.randn(9, 49152, generator=g, dtype=torch.float64) * 3
    lp = torch.log_softmax(a, -1)
    lq = torch.log_softmax(a + torch.randn(9, 49152, generator=g, dtype=torch.float64), -1)
    lq[0, :1000] = -float("inf")
    keep_p, keep_q = lp.clone(), lq.clone()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        want = _divergences_whole(lp, lq)
        got = device_divergences(lp, lq)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(lp, keep_p) and torch.equal(lq, keep_q)
    assert np.array_equal(got, want), np.abs(got - want).max()
    assert got[:, 3].tolist() == (torch.argmax(lq, -1) == torch.argmax(lp, -1)).double().tolist()
    with pytest.raises(ValueError, match=r"rows of shapes \(9, 49152\) and \(8, 49152\)"):
        device_divergences(lp, lq[:8])


@pytest.mark.parametrize("cuts", [(9,), (1, 8), (3, 3, 3), (7, 2), (4, 5)])
def test_device_divergences_of_row_parts_equal_those_of_the_whole_tensor(cuts):
    """The target's rows as several tensors read one after another (a walk's steps; the first one the prompt's
    row repeated, a stride-0 view), blocks straddling them, and the target's side computed once and passed in:
    every number bit for bit that of the rows as one tensor."""
    torch = pytest.importorskip("torch")

    g = torch.Generator().manual_seed(sum(cuts))
    lp = torch.log_softmax(torch.randn(9, 300, generator=g) * 3, -1)
    lp[: cuts[0]] = lp[0]  # the first part: one row repeated
    lq = torch.log_softmax(torch.randn(9, 300, generator=g) * 3, -1)
    lq[4, :50] = -float("inf")
    parts, at = [lp[0].expand(cuts[0], 300)], cuts[0]
    for c in cuts[1:]:
        parts.append(lp[at : at + c].clone())
        at += c
    want = _divergences_whole(lp, lq)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # blocks of 8 rows (as the experiments run)
    try:
        _check_parts(parts, lp, lq, want)
    finally:
        torch.set_num_threads(before)


def _check_parts(parts, lp, lq, want):
    import torch

    from brwsim.llm.drafters._calibrate import device_divergences, target_side

    side = target_side(parts)
    assert side.n == 9 and side.block == 8
    blocks = lambda k: (lq[s : s + k] for s in range(0, 9, k))  # noqa: E731 - the drafter's rows block by block
    for got in (device_divergences(parts, lq), device_divergences(parts, lq, side), device_divergences(lp, lq, side),
                device_divergences(parts, blocks(8), side), device_divergences(lp, blocks(3))):  # fmt: skip
        assert np.array_equal(got, want), np.abs(got - want).max()
    with pytest.raises(ValueError, match=r"drafter's rows after 8 of 9: none, not \(1, 300\)"):
        device_divergences(parts, iter([lq[:8]]))
    with pytest.raises(ValueError, match=r"drafter's rows after 8 of 9: a block of shape \(2, 300\), not \(1, 300\)"):
        device_divergences(parts, iter([lq, lq[:1]]))
    with pytest.raises(ValueError, match="drafter's rows are more than the target's 8"):
        device_divergences(lp[:8], iter([lq[:8], lq[:8]]))
    with pytest.raises(ValueError, match="target side is of 9 rows, the rows 8"):
        device_divergences(lp[:8], lq[:8], side)
    torch.set_num_threads(2)  # the whole block at once: the side's blocks of 8 no longer match
    with pytest.raises(ValueError, match="summed 8 rows at a time, these rows are read 9 at a time"):
        device_divergences(parts, lq, side)
    with pytest.raises(ValueError, match=r"rows of shapes \(9, 300\) and \(8, 300\)"):
        device_divergences(parts, lq[:8])
    with pytest.raises(ValueError, match=r"the target's row tensors are of widths \[299, 300\]"):
        device_divergences([*parts, lp[:1, :299]], lq)
    assert device_divergences([], lq[:0]).shape == device_divergences([], iter([])).shape == (0, 5)


def test_a_query_of_given_tokens_is_gathered_row_by_row():
    """``answer_at`` (a query of ``at`` alone, on a list of device rows) gives ``answer_tensor``'s numbers on the
    stacked rows: pairs in any order, rows asked several times or not at all, and the same bytes counted."""
    torch = pytest.importorskip("torch")
    from brwsim.llm.sources._query import answer_at, answer_tensor

    rows = _rows(3)
    at = np.array([(4, 7), (0, 499), (4, 0), (2, 5), (0, 0), (4, 7), (1, 5)], np.int64)
    want = answer_tensor(torch.from_numpy(rows), NodeQuery(at=at))
    got = answer_at(list(torch.from_numpy(rows)), at)
    np.testing.assert_array_equal(got.at_logp, want.at_logp)
    assert got.at_logp.dtype == np.float32 and got.host_bytes == want.host_bytes == 7 * 4
    assert got.at_logp[6] == -np.inf  # row 1's token 5 has probability 0
    empty = answer_at(list(torch.from_numpy(rows)), np.zeros((0, 2), np.int64))
    assert empty.at_logp.shape == (0,) and empty.host_bytes == 0
    with pytest.raises(IndexError, match="row is out of range"):
        answer_at(list(torch.from_numpy(rows)), np.array([(6, 0)]))
    back = np.array([(-1, 3), (0, -1), (-6, -500)], np.int64)  # from the end, as in indexing
    want = answer_tensor(torch.from_numpy(rows), NodeQuery(at=back)).at_logp
    np.testing.assert_array_equal(answer_at(list(torch.from_numpy(rows)), back).at_logp, want)
    np.testing.assert_array_equal(answer_at(list(torch.from_numpy(rows)), torch.from_numpy(back)).at_logp, want)


def test_a_device_context_stacks_no_rows_for_given_tokens_or_for_nothing(tiny, monkeypatch):
    """On a device context a query of given tokens (a tree's values) or of nothing (nodes evaluated ahead) never
    copies the rows together: the answers are those of the whole rows on the host."""
    torch = pytest.importorskip("torch")
    ctx = tiny.open(PROMPT)
    want = ctx.logprobs(NODES)
    at = np.array([(i, t) for i in range(len(NODES)) for t in (0, 3, V - 1)], np.int64)
    stacked = []
    real_stack = torch.stack
    monkeypatch.setattr(torch, "stack", lambda *a, **k: stacked.append(1) or real_stack(*a, **k))
    fresh = tiny.open(PROMPT)
    assert fresh.query(NODES, NodeQuery()) == NodeAnswer()
    before = fresh.transfer().bytes
    got = fresh.query(NODES, NodeQuery(at=at))
    assert fresh.query(NODES, NodeQuery(T=0.5)) == NodeAnswer()  # nothing asked, at any temperature
    assert not stacked
    np.testing.assert_array_equal(got.at_logp, want[at[:, 0], at[:, 1]])
    assert fresh.transfer().bytes - before == at.shape[0] * 4
    as_tensor = fresh.query(NODES, NodeQuery(at=torch.from_numpy(at)))  # pairs given as a tensor
    np.testing.assert_array_equal(as_tensor.at_logp, got.at_logp)
