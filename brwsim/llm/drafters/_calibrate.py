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


def device_divergences(lp, lq) -> np.ndarray:
    """:func:`row_divergences` of two torch tensors ``f32[n, V]`` on the same device, computed there (float64
    sums; only the ``[n, 5]`` result crosses to the host).

    On a CPU with one torch thread (as the experiments run), :data:`DIVERGENCE_ROWS` rows at a time, their float64
    temporaries reused in place and kept in cache: each row's terms and its sum are then the same bits as over the
    whole block at once (every step is per element, and one thread sums each row as its own reduction), at about a
    sixth of the time for SmolLM2's 49,152-wide rows. With more threads or on another device the whole block at
    once: there the split of a sum over threads or a GPU's blocks can depend on how many rows are reduced."""
    import torch

    if lp.shape != lq.shape:
        raise ValueError(f"device_divergences: rows of shapes {tuple(lp.shape)} and {tuple(lq.shape)}")
    one_thread = lp.device.type == "cpu" and torch.get_num_threads() == 1
    step = DIVERGENCE_ROWS if one_thread else max(1, lp.shape[0])
    out = []
    with torch.inference_mode():
        for s in range(0, lp.shape[0], step):
            lp_s, lq_s = lp[s : s + step], lq[s : s + step]
            a = lp_s.to(torch.float64, copy=True)  # copies: the caller's rows are never written
            b = lq_s.to(torch.float64, copy=True)
            p = torch.exp(a)
            H = -a.masked_fill_(~(p > 0), 0.0).mul_(p).sum(-1)  # p log p, 0 where p is 0
            q = torch.exp(b.clamp_(min=-1e30))  # exp(-1e30) = exp(-inf) = 0
            ce = -b.mul_(p).sum(-1)
            tv = 0.5 * q.sub_(p).abs_().sum(-1)  # |q - p| = |p - q|, bit for bit
            # the argmax of the rows as given: their float64 copies order (and tie) the entries the same
            top = (torch.argmax(lq_s, -1) == torch.argmax(lp_s, -1)).double()
            out.append(torch.stack([ce, ce - H, tv, top, H], dim=-1))
        return torch.cat(out).cpu().numpy() if out else np.zeros((0, 5))


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
