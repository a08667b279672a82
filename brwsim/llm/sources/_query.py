"""The node query: what a context answers about a batch of token-tree nodes (:class:`NodeQuery`, :class:`NodeAnswer`).

A measurement rarely needs a node's whole next-token row (V log-probabilities;
V = 49,152 for the shipped model, 128k-262k for current targets): the oracle
search reads a node's top-K children, the walks its entropy moments H and M2,
one sampled token and that token's log-probability. :meth:`Context.query`
answers exactly that, and a context that runs a model answers it next to the
model, on its device, so that only K-sized results cross to the host
(:func:`answer_tensor`; the packed engine's and transformers' contexts). Any
other context answers from its rows on the host (:func:`answer_rows`, the
same numbers). ``rows=True`` asks for the whole rows as well, for the callers
that need every token's probability (divergences between two models,
recording a model's rows to a file).

The two reductions agree within float rounding: the top-K ids and
log-probabilities are the same float32 values (ties at equal log-probability
ordered by token id on the device; by NumPy's partition order on the host),
H and M2 are float64 sums of float32 terms p log p whose float32 ``exp`` may
round differently in torch and NumPy (a few float32 epsilons relative), and the sample is the same inverse-CDF
draw of the same uniform (it can differ only when the uniform falls within
rounding of a boundary of the float64 cumulative sum).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..._moments import entropy_moments


@dataclasses.dataclass(frozen=True)
class NodeQuery:
    """What to return for each node of a batch.

    ``K``: the top-K children (token ids and log-probabilities, by decreasing log-probability; K <= 0: none;
    K >= V: the whole sorted row). ``moments``: H and M2 of the row. ``u``: uniforms in [0, 1), ``f64[N]``, each
    drawn on row ``u_rows[i]`` (default: one per node, in order): the token at that point of the row's cumulative
    distribution (inverse-CDF sampling in float64) and its log-probability. ``at``: ``(row, token)`` pairs,
    ``i64[N, 2]``: those tokens' log-probabilities. ``rows``: the whole rows too (``f32[B, V]`` on the host).
    ``T``: every row at temperature T first (:func:`temper`; 1: as the model gives it)."""

    K: int = 0
    moments: bool = False
    u: np.ndarray | None = None
    u_rows: np.ndarray | None = None
    at: np.ndarray | None = None
    rows: bool = False
    T: float = 1.0

    def __post_init__(self):
        if self.u_rows is not None and (self.u is None or np.shape(self.u_rows) != np.shape(self.u)):
            raise ValueError("NodeQuery: u_rows must give one row for each uniform of u")

    def __eq__(self, other):  # arrays compared by value (the dataclass default compares them with ==)
        if not isinstance(other, NodeQuery):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self))

    __hash__ = None


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is not None and b is not None and np.array_equal(a, b)
    return a == b


@dataclasses.dataclass(frozen=True)
class NodeAnswer:
    """The answer to a :class:`NodeQuery` for B nodes; a field not asked for is None.

    ``ids`` ``i64[B, K]`` and ``logp`` ``f32[B, K]``: the top-K children; ``H``, ``M2`` ``f64[B]``;
    ``sample`` ``i64[N]`` and ``sample_logp`` ``f32[N]``, one per uniform; ``at_logp`` ``f32[N]``, one per pair of
    ``at``; ``rows`` ``f32[B, V]``.
    ``host_bytes``: the bytes that crossed from the model's device to the host to answer it (on the CPU, the
    bytes that would cross; 0 for a context whose rows are already on the host)."""

    ids: np.ndarray | None = None
    logp: np.ndarray | None = None
    H: np.ndarray | None = None
    M2: np.ndarray | None = None
    sample: np.ndarray | None = None
    sample_logp: np.ndarray | None = None
    at_logp: np.ndarray | None = None
    rows: np.ndarray | None = None
    host_bytes: int = 0


@dataclasses.dataclass
class Transfer:
    """What crossed from a model's device to the host for one context: ``bytes``, and the node answers (rows or
    query answers) they carried, ``nodes``."""

    bytes: int = 0
    nodes: int = 0

    def add(self, nbytes: int, nodes: int) -> None:
        self.bytes += int(nbytes)
        self.nodes += int(nodes)

    @property
    def per_node(self) -> float | None:
        return self.bytes / self.nodes if self.nodes else None


class HostQuery:
    """For a class with ``logprobs(prefixes)`` whose rows are on the host (every :class:`Context` by default): the
    node query answered from them, and no device rows."""

    def query(self, prefixes, q: NodeQuery) -> NodeAnswer:
        """The answer to ``q`` for the nodes after the prompt and each prefix, from :meth:`logprobs` on the
        host (a context that runs a model answers next to it instead)."""
        return answer_rows(self.logprobs(prefixes), q)

    def device_rows(self, prefixes):
        """The rows of ``prefixes`` as a tensor ``f32[B, V]`` on the model's device (missing ones evaluated), for a
        computation that needs whole rows without moving them; None where the rows are on the host."""
        return None


def to_host(t, moved: Transfer, nodes: int = 0) -> np.ndarray:
    """The tensor ``t`` copied to the host, its bytes (and the ``nodes`` whose answers they carry) counted in
    ``moved``."""
    a = t.detach().cpu().numpy()
    moved.add(a.nbytes, nodes)
    return a


def to_evaluate(prefixes, answers, slots) -> set:
    """The nodes a context with a slot per evaluated node must evaluate to answer ``prefixes``: each prefix whose row
    it does not hold (a forgotten row is evaluated again) and each ancestor with no slot yet (a forgotten
    ancestor keeps its slot: its children need nothing more of it)."""
    need = {p for p in prefixes if p not in answers}
    return need | {p[:d] for p in prefixes for d in range(1, len(p)) if p[:d] not in slots}


class DeviceQuery:
    """For a class whose rows are tensors on the model's device: :meth:`_rows` gives the rows of some prefixes
    (the missing ones evaluated first), ``vocab`` is their length and ``moved`` the :class:`Transfer` that counts
    what crosses to the host. The node query is reduced on the device (:func:`answer_tensor`: only K-sized
    results cross); whole rows cross only through :meth:`logprobs`."""

    vocab: int
    moved: Transfer
    device: Any  # the torch device the rows live on

    def _rows(self, prefixes) -> list | None:
        """The device rows ``f32[V]`` of ``prefixes`` (None for none), evaluated where missing."""
        raise NotImplementedError

    def _host(self, rows) -> np.ndarray:
        return to_host(rows, self.moved, rows.shape[0])

    def transfer(self) -> Transfer:
        return self.moved

    def device_rows(self, prefixes):
        """Whole rows of any prefixes as one tensor on the model's device (nothing crosses to the host)."""
        import torch

        rows = self._rows(prefixes)
        return torch.zeros((0, self.vocab), device=self.device) if rows is None else torch.stack(rows)

    def logprobs(self, prefixes) -> np.ndarray:
        """Whole rows of any prefixes, on the host (missing nodes and their missing ancestors evaluated first)."""
        import torch

        rows = self._rows(prefixes)
        return np.zeros((0, self.vocab), np.float32) if rows is None else self._host(torch.stack(rows))

    def query(self, prefixes, q: NodeQuery) -> NodeAnswer:
        """The answer to ``q``, reduced on the model's device (only K-sized results cross to the host)."""
        import torch

        rows = self._rows(prefixes)
        if rows is None:
            return answer_rows(np.zeros((0, self.vocab), np.float32), q)
        if _asks_nothing(q):  # nodes evaluated, nothing asked back
            return NodeAnswer()
        if _only_at(q) and rows[0].device.type == "cpu":  # a few entries of each row, gathered row by row: on a
            got = answer_at(rows, q.at)  # CPU, stacking wide rows costs far more (on a GPU, launches per row)
        else:
            got = answer_tensor(torch.stack(rows), q)
        if got.host_bytes:  # (an answer with nothing in it, as of no pairs, moved nothing)
            self.moved.add(got.host_bytes, len(rows))
        return got


def top_k_rows(logp: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``logp [B, V]``: the top-K (ids, log-probs), sorted by decreasing log-probability."""
    B, V = logp.shape
    K = min(K, V)
    if K < V:
        part = np.argpartition(-logp, K - 1, axis=1)[:, :K]
    else:
        part = np.broadcast_to(np.arange(V), (B, V))
    vals = np.take_along_axis(logp, part, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1), np.take_along_axis(vals, order, axis=1)


def inverse_cdf(logp: np.ndarray, u: np.ndarray, index=None) -> np.ndarray:
    """The token at ``u[i] * total`` of the float64 cumulative distribution of row ``index[i]`` of ``logp`` (every
    row once, in order, without ``index``); each distinct row is summed once."""
    p = np.exp(np.asarray(logp, np.float64))
    cdf = np.cumsum(p, axis=1)
    index = np.arange(p.shape[0]) if index is None else np.asarray(index)
    u = np.asarray(u, np.float64) * cdf[index, -1]
    tok = np.array([np.searchsorted(cdf[r], u[i], side="right") for i, r in enumerate(index)], dtype=np.int64)
    return np.minimum(tok, p.shape[1] - 1)


def temper(rows, T: float) -> np.ndarray:
    """``log_softmax(rows / T)`` along the last axis, float32 (rows unchanged at T = 1)."""
    rows = np.asarray(rows, np.float32)
    if T == 1.0:
        return rows
    x = rows.astype(np.float64) / T
    m = np.max(x, axis=-1, keepdims=True)
    out = x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))
    return out.astype(np.float32)


def temper_tensor(logp, T: float):
    """:func:`temper` of a torch tensor, where it lives (float64 inside, float32 out)."""
    import torch

    if T == 1.0:
        return logp
    x = logp.double() / T
    m = torch.amax(x, dim=-1, keepdim=True)
    return (x - m - torch.log(torch.sum(torch.exp(x - m), dim=-1, keepdim=True))).float()


def answer_rows(rows: np.ndarray, q: NodeQuery, host_bytes: int = 0) -> NodeAnswer:
    """The answer to ``q`` computed on the host from the whole rows ``f32[B, V]``."""
    rows = temper(rows, q.T)
    out: dict = {"host_bytes": host_bytes}
    if q.K > 0:
        out["ids"], out["logp"] = top_k_rows(rows, q.K)
    if q.moments:
        out["H"], out["M2"] = entropy_moments(rows, sum_dtype=np.float64)
    if q.u is not None:
        index = np.arange(rows.shape[0]) if q.u_rows is None else np.asarray(q.u_rows, np.int64)
        tok = inverse_cdf(rows, q.u, index)
        out["sample"], out["sample_logp"] = tok, rows[index, tok]
    if q.at is not None:
        at = np.asarray(q.at, np.int64).reshape(-1, 2)
        out["at_logp"] = rows[at[:, 0], at[:, 1]]
    if q.rows:
        out["rows"] = rows
    return NodeAnswer(**out)


def _asks_nothing(q: NodeQuery) -> bool:
    """Whether ``q`` asks for nothing back (at any temperature): a request to evaluate nodes."""
    return q.K <= 0 and not q.moments and q.u is None and q.at is None and not q.rows


def _only_at(q: NodeQuery) -> bool:
    """Whether ``q`` asks for the log-probabilities of given tokens alone, in the rows as the model gives them."""
    return q.at is not None and q.K <= 0 and not q.moments and q.u is None and not q.rows and q.T == 1.0


def answer_at(rows, at) -> NodeAnswer:
    """``at_logp`` of the ``(row, token)`` pairs ``at`` from ``rows``, a list of torch tensors ``f32[V]`` on one device
    (:func:`answer_tensor`'s numbers for a query of ``at`` alone, without stacking the rows; a negative row or
    token counts from the end, as in indexing): each row's tokens gathered where it lives, only those entries
    copied to the host."""
    import torch

    at = np.asarray(at.cpu() if isinstance(at, torch.Tensor) else at, np.int64).reshape(-1, 2).copy()
    if not len(at):
        return NodeAnswer(at_logp=np.zeros(0, np.float32))
    at[:, 0] = np.where(at[:, 0] < 0, at[:, 0] + len(rows), at[:, 0])
    if at[:, 0].min() < 0 or at[:, 0].max() >= len(rows):
        raise IndexError(f"answer_at: a pair's row is out of range ({len(rows)} rows)")
    order = np.argsort(at[:, 0], kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(at[order, 0]) != 0])
    with torch.inference_mode():
        tokens = torch.as_tensor(at[order, 1], device=rows[0].device)  # moved at once, sliced per row
        ends = [*starts[1:], len(order)]
        parts = [rows[int(at[order[s], 0])][tokens[s:e]] for s, e in zip(starts, ends, strict=True)]
        got = torch.cat(parts).cpu().numpy()
    out = np.empty(len(at), np.float32)
    out[order] = got
    return NodeAnswer(at_logp=out, host_bytes=out.nbytes)


def answer_tensor(logp, q: NodeQuery) -> NodeAnswer:
    """The answer to ``q`` computed where the torch tensor ``logp [B, V]`` (float32 log-probabilities) lives;
    only the asked results are copied to the host (counted in ``host_bytes``)."""
    import torch

    out: dict = {}
    moved = 0

    def host(t):
        nonlocal moved
        a = t.detach().cpu().numpy()
        moved += a.nbytes
        return a

    B, V = logp.shape
    with torch.inference_mode():
        logp = temper_tensor(logp, q.T)
        if q.K > 0:
            K = min(q.K, V)
            vals, ids = torch.topk(logp, K, dim=1, sorted=True)
            # ties at equal log-probability by token id (topk leaves their order open)
            by_id = torch.argsort(ids, dim=1, stable=True)
            vals, ids = vals.gather(1, by_id), ids.gather(1, by_id)
            by_val = torch.argsort(-vals, dim=1, stable=True)
            out["ids"], out["logp"] = host(ids.gather(1, by_val)), host(vals.gather(1, by_val))
        if q.moments:
            p = torch.exp(logp)
            safe = torch.where(p > 0, logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
            ps = p * safe
            out["H"] = host(-torch.sum(ps, dim=1, dtype=torch.float64))
            out["M2"] = host(torch.sum(ps * safe, dim=1, dtype=torch.float64))
        if q.u is not None:
            index = np.arange(B) if q.u_rows is None else np.asarray(q.u_rows, np.int64)
            cdf = torch.cumsum(torch.exp(logp.double()), dim=1)
            u = torch.as_tensor(np.asarray(q.u, np.float64), device=logp.device)
            rows_of = torch.as_tensor(index, device=logp.device)
            tok = torch.empty(len(index), dtype=torch.int64, device=logp.device)
            for r in np.unique(index):  # each row's draws at once (no copy of a row per draw)
                at = torch.as_tensor(np.flatnonzero(index == r), device=logp.device)
                tok[at] = torch.searchsorted(cdf[r], u[at] * cdf[r, -1], right=True)
            tok = torch.clamp(tok, max=V - 1)
            out["sample"] = host(tok)
            out["sample_logp"] = host(logp[rows_of, tok])
        if q.at is not None:
            at = torch.as_tensor(np.asarray(q.at, np.int64).reshape(-1, 2), device=logp.device)
            out["at_logp"] = host(logp[at[:, 0], at[:, 1]])
        if q.rows:
            out["rows"] = host(logp)
    return NodeAnswer(**out, host_bytes=moved)


__all__ = ["DeviceQuery", "HostQuery", "NodeAnswer", "NodeQuery", "Transfer", "answer_at", "answer_rows",
           "answer_tensor", "inverse_cdf", "temper", "to_host", "top_k_rows"]  # fmt: skip
