"""Held-out (teacher-forced) statistics of a draft model: divergences and Sequoia's positional rates."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Sequence

import numpy as np

from ...errors import BrwsimError
from ..sources import temper
from ._base import DraftModel

HELDOUT_MODULES = ("textwrap", "string", "shlex")  # stdlib sources: neither HumanEval nor the pydoc topics
STATS = ("cross_entropy", "kl", "tv", "top1_agree", "target_entropy")


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A drafter's held-out statistics: the means of :data:`STATS` over ``positions``, and ``rates[k]`` =
    E[p(x_k)] with x_k the drafter's k-th most likely token (Sequoia's positional acceptance rates)."""

    positions: int
    rates: np.ndarray
    stats: dict

    def to_dict(self) -> dict:
        return {"positions": self.positions} | self.stats


def heldout_ids(target, n_tokens: int = 256) -> list[int]:
    """Token ids of held-out text: the source of a few stdlib modules (code and docstrings; never a prompt)."""
    parts = []
    for mod in HELDOUT_MODULES:
        spec = importlib.util.find_spec(mod)
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            with open(spec.origin, encoding="utf-8") as f:
                parts.append(f.read())
    if not parts:
        raise BrwsimError(f"no held-out text: none of the stdlib modules {HELDOUT_MODULES} has a source file")
    ids = target.tokenize("\n\n".join(parts))
    return [int(t) for t in ids[: n_tokens + 1]]


def teacher_forced(model_or_ctx_rows, ids: Sequence[int]) -> np.ndarray:
    """Rows after ``ids[:1]``, ``ids[:2]``, ... (``[len(ids) - 1, V]``) from a context opened on ``ids[:1]``."""
    ctx = model_or_ctx_rows
    chain = [tuple(ids[1:i]) for i in range(1, len(ids))]
    return ctx.logprobs(chain)


def row_divergences(lp: np.ndarray, lq: np.ndarray) -> np.ndarray:
    """Per row: (cross-entropy H(p,q), KL(p||q), TV, top-1 agreement, H(p)) as ``[n, 5]`` (nats)."""
    lp = np.asarray(lp, np.float64)
    lq = np.asarray(lq, np.float64)
    p = np.exp(lp)
    H = -(p * np.where(p > 0, lp, 0.0)).sum(-1)
    ce = -(p * np.maximum(lq, -1e30)).sum(-1)
    tv = 0.5 * np.abs(p - np.exp(lq)).sum(-1)
    top = (np.argmax(lq, -1) == np.argmax(lp, -1)).astype(np.float64)
    return np.stack([ce, ce - H, tv, top, H], axis=-1)


DIVERGENCE_ROWS = 8  # rows of device_divergences' float64 temporaries at a time on a one-thread CPU


def _row_blocks(rows, step: int):
    """``rows`` (a tensor ``[n, V]``, or an iterable of such tensors read one after another, taken as they are
    needed) as blocks of at most ``step`` rows, in order; a block is a view where it lies in one tensor, a copy
    where it straddles two."""
    import torch

    parts = [rows] if isinstance(rows, torch.Tensor) else rows
    pending, have = [], 0
    for t in parts:
        s = 0
        while s < t.shape[0]:
            take = min(step - have, t.shape[0] - s)
            pending.append(t[s : s + take])
            have, s = have + take, s + take
            if have == step:
                yield pending[0] if len(pending) == 1 else torch.cat(pending)
                pending, have = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else torch.cat(pending)


def _float64(block, buf):
    """``block`` ``[k, V]`` copied into the first k rows of the float64 buffer ``buf`` (contiguous: rows summed as
    their own reductions), which is returned."""
    return buf[: block.shape[0]].copy_(block)


def _buffers(device, rows: int, V: int, count: int) -> list:
    """``count`` float64 temporaries ``[rows, V]`` on ``device``: allocated once a call and reused in place block
    after block (fresh allocations of a block's size cost page faults on every block)."""
    import torch

    return [torch.empty((rows, V), dtype=torch.float64, device=device) for _ in range(count)]


def block_rows(device, n: int) -> int:
    """The rows :func:`device_divergences` and :func:`target_side` take at a time, of ``n`` on ``device``:
    :data:`DIVERGENCE_ROWS` on a CPU with one torch thread, all of them elsewhere (at least 1)."""
    import torch

    one_thread = device.type == "cpu" and torch.get_num_threads() == 1
    return DIVERGENCE_ROWS if one_thread else max(1, n)


def _shape(lp) -> tuple[int, int | None]:
    """(rows, width) of ``lp``, a tensor ``[n, V]`` or a list of tensors ``[n_i, V]`` (width None: an empty list)."""
    import torch

    if isinstance(lp, torch.Tensor):
        return int(lp.shape[0]), int(lp.shape[1])
    widths = {int(t.shape[1]) for t in lp}
    if len(widths) > 1:
        raise ValueError(f"device_divergences: the target's row tensors are of widths {sorted(widths)}")
    return sum(int(t.shape[0]) for t in lp), (widths.pop() if widths else None)


def _block_step(lp) -> int:
    return block_rows(_device(lp), _shape(lp)[0])


def _device(rows):
    import torch

    return rows.device if isinstance(rows, torch.Tensor) else rows[0].device


@dataclasses.dataclass(frozen=True)
class TargetSide:
    """What :func:`device_divergences` needs of the target's rows alone, computed once for several drafters:
    each row's entropy ``H`` (``f64[n]``) and most likely token ``top`` (``i64[n]``), torch tensors on the rows'
    device, and the rows ``block`` summed at a time (H's bits are those of that blocking)."""

    H: object
    top: object
    block: int

    @property
    def n(self) -> int:
        return int(self.H.shape[0])


def target_side(lp) -> TargetSide:
    """:class:`TargetSide` of the target's rows ``lp`` (a tensor ``f32[n, V]``, or a list of such tensors read one
    after another): H as float64 sums of p log p (0 where p is 0), in the blocks of :func:`device_divergences`, so
    the numbers are those it would compute itself."""
    import torch

    n, V = _shape(lp)
    if n == 0:
        return TargetSide(torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.int64), 1)
    step = _block_step(lp)
    buf_a, buf_p = _buffers(_device(lp), min(step, n), V, 2)
    H, top = [], []
    with torch.inference_mode():
        for blk in _row_blocks(lp, step):
            a = _float64(blk, buf_a)
            p = torch.exp(a, out=buf_p[: a.shape[0]])
            H.append(-a.masked_fill_(~(p > 0), 0.0).mul_(p).sum(-1))  # p log p, 0 where p is 0
            top.append(torch.argmax(blk, -1))
        return TargetSide(torch.cat(H), torch.cat(top), step)


def device_divergences(lp, lq, target: TargetSide | None = None) -> np.ndarray:
    """:func:`row_divergences` of the target's rows ``lp`` and a drafter's rows ``lq``, torch tensors ``f32[n, V]``
    on the same device, computed there (float64 sums; only the ``[n, 5]`` result crosses to the host). ``lp`` may
    also be a list of tensors ``[n_i, V]`` read one after another, and ``lq`` an iterable of them (taken block by
    block: the drafter's rows need never be copied together). ``target``: :func:`target_side` of ``lp``, when
    several drafters are measured against the same rows (computed here otherwise).

    On a CPU with one torch thread (as the experiments run), :data:`DIVERGENCE_ROWS` rows at a time, their float64
    temporaries reused in place and kept in cache: each row's terms and its sum are then the same bits as over the
    whole block at once (every step is per element, and one thread sums each row as its own reduction), at about a
    sixth of the time for SmolLM2's 49,152-wide rows. With more threads or on another device the whole block at
    once: there the split of a sum over threads or a GPU's blocks can depend on how many rows are reduced."""
    import torch

    n, V = _shape(lp)
    if isinstance(lq, torch.Tensor) and (n, V if V is not None else lq.shape[1]) != tuple(lq.shape):
        raise ValueError(f"device_divergences: rows of shapes {(n, V)} and {tuple(lq.shape)}")
    if target is not None and target.n != n:
        raise ValueError(f"device_divergences: the target side is of {target.n} rows, the rows {n}")
    step = _block_step(lp) if n else 1
    q_blocks = _row_blocks(lq, step)
    if n == 0:
        if next(q_blocks, None) is not None:
            raise ValueError("device_divergences: the drafter's rows are more than the target's 0")
        return np.zeros((0, 5))
    if target is None:
        target = target_side(lp)
    elif target.block != step:
        raise ValueError(f"device_divergences: the target side was summed {target.block} rows at a time, these "
                         f"rows are read {step} at a time (the torch threads changed in between?)")  # fmt: skip
    buf_p, buf_b, buf_q = _buffers(_device(lp), min(step, n), V, 3)
    out = []
    with torch.inference_mode():
        s = 0
        for blk in _row_blocks(lp, step):
            k = blk.shape[0]
            lq_s = next(q_blocks, None)
            if lq_s is None or tuple(lq_s.shape) != (k, V):
                got = "none" if lq_s is None else f"a block of shape {tuple(lq_s.shape)}"
                raise ValueError(f"device_divergences: the drafter's rows after {s} of {n}: {got}, not ({k}, {V})")
            p = _float64(blk, buf_p).exp_()
            b = _float64(lq_s, buf_b)  # copies: the caller's rows are never written
            q = torch.exp(b.clamp_(min=-1e30), out=buf_q[:k])  # exp(-1e30) = exp(-inf) = 0
            ce = -b.mul_(p).sum(-1)
            tv = 0.5 * q.sub_(p).abs_().sum(-1)  # |q - p| = |p - q|, bit for bit
            H = target.H[s : s + k]
            # the argmax of the rows as given: their float64 copies order (and tie) the entries the same
            top = (torch.argmax(lq_s, -1) == target.top[s : s + k]).double()
            out.append(torch.stack([ce, ce - H, tv, top, H], dim=-1))
            s += k
        if next(q_blocks, None) is not None:
            raise ValueError(f"device_divergences: the drafter's rows are more than the target's {n}")
        return torch.cat(out).cpu().numpy()


def calibrate(target, draft: DraftModel, ids: Sequence[int], T: float = 1.0, K: int = 128, target_rows=None):
    """The :class:`Calibration` of a draft model at temperature T on the held-out positions of ``ids``
    (``target_rows``: the target's teacher-forced rows at temperature 1, if already computed)."""
    lp = temper(teacher_forced(target.open(ids[:1]), ids) if target_rows is None else target_rows, T)
    head_rows = draft.teacher_forced_rows(ids)
    if head_rows is not None:  # a head that reads the target's features: rows from ids[:2] on
        lp, lq = lp[1:], temper(head_rows, T)
    else:
        lq = temper(teacher_forced(draft.context(ids[:1]), ids), T)
    d = row_divergences(lp, lq)
    K = min(K, lq.shape[1])
    order = np.argpartition(-lq, K - 1, axis=1)[:, :K]
    order = np.take_along_axis(order, np.argsort(-np.take_along_axis(lq, order, 1), axis=1, kind="stable"), 1)
    rates = np.exp(np.take_along_axis(lp.astype(np.float64), order, 1)).mean(0)
    return Calibration(int(lp.shape[0]), rates, {n: float(v) for n, v in zip(STATS, d.mean(0), strict=True)})
