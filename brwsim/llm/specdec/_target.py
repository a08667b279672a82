"""The target's side of speculative decoding: one KV cache, one forward pass per verifier call.

The cache holds every token of the text but the last (the *pending* tokens:
the last prompt token at the start, then each call's correction or bonus
token), as in plain decoding, where a step runs the newest token. A call
runs, in ONE forward pass of the transformers model, the pending tokens and
every drafted node, with a 4D attention mask over the cache and the new
tokens: a pending token sees the cache and the pending tokens up to itself;
a drafted node sees the cache, every pending token, its ancestors and itself,
at position ``len(cache) + len(pending) + depth - 1``. This is the pass that
:func:`brwsim.speedup._timing.verify_times` times for the planner
(``P = 0``: one plain decoding step). After the call the cache keeps the
pending tokens and the accepted path (their keys and values are gathered into
place) and drops the rest of the tree.

A call's rows stay on the model's device (:class:`DeviceRows`); the
verification walk reads from them only what it decides on (the argmax of
each row at T = 0; at T > 0, per node it visits, the candidates'
probabilities, their total and one drawn token), counted in
:attr:`TargetSession.moved`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..sources._device import _torch, additive_mask, returned_cache, synchronize, with_cache
from ..sources._query import Transfer
from ..sources._query import to_host as _host
from ._verify import Distribution, TreeRows


class DeviceDistribution(Distribution):
    """A node's probabilities ``softmax(logp / T)`` in float64, on the model's device."""

    def __init__(self, logp, T: float, moved: Transfer):
        torch = _torch()
        with torch.inference_mode():
            x = logp.double() / T
            x = torch.exp(x - torch.max(x))
            self.p, self.moved = x / torch.sum(x), moved
        self._total = None

    @property
    def total(self) -> float:
        if self._total is None:
            self._total = float(_host(_torch().sum(self.p), self.moved))
        return self._total

    def at(self, tokens: Sequence[int]) -> np.ndarray:
        torch = _torch()
        idx = torch.as_tensor(np.asarray(tokens, np.int64), device=self.p.device)
        return _host(self.p[idx], self.moved)

    def draw_without(self, removed: Sequence[int], u: float) -> int:
        torch = _torch()
        with torch.inference_mode():
            r = self.p
            if len(removed):
                r = r.clone()
                r[torch.as_tensor(np.asarray(removed, np.int64), device=r.device)] = 0.0
            c = torch.cumsum(r, dim=0)
            tok = torch.searchsorted(c, (float(u) * c[-1])[None], right=True)
        return int(min(int(_host(tok, self.moved)[0]), r.shape[0] - 1))


class DeviceRows(TreeRows):
    """One verifier call's rows ``f32[n, V]`` on the model's device, by path (``index``: path -> row)."""

    def __init__(self, logp, index: dict, moved: Transfer):
        self.logp, self.index, self.moved = logp, index, moved
        self._argmax: np.ndarray | None = None

    def argmax(self, path: tuple[int, ...]) -> int:
        if self._argmax is None:  # every row's at once: n ints cross
            self._argmax = _host(_torch().argmax(self.logp, dim=1), self.moved, self.logp.shape[0])
        return int(self._argmax[self.index[path]])

    def distribution(self, path: tuple[int, ...], T: float) -> Distribution:
        self.moved.add(0, 1)
        return DeviceDistribution(self.logp[self.index[path]], T, self.moved)


class TargetSession:
    """One prompt's generation on the target (an :class:`~brwsim.llm.sources._hf.HFSource`); ``features``: keep
    the last decoder layer's output (before the final norm) of every pending token and node, for a head drafter."""

    def __init__(self, src, prompt_ids: Sequence[int], features: bool = False):
        torch = _torch()
        ids = [int(t) for t in prompt_ids]
        if len(ids) < 2:
            raise ValueError("speculative decoding needs a prompt of at least 2 tokens")
        self.src, self.model = src, src.model
        self.passes = 0
        self.moved = Transfer()  # what the verification walk read from the device (bytes, rows it read from)
        self._hidden = None
        self._hook = None
        if features:
            layer = self.model.model.layers[-1]
            self._hook = layer.register_forward_hook(self._keep_hidden)
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids[:-1]], device=src.device), use_cache=True, logits_to_keep=1)
        self.cache = returned_cache(out)
        self.prompt_features = self._hidden[0].float() if features else None  # [L - 1, H]
        self.n = len(ids) - 1  # tokens in the cache
        self.pending = [ids[-1]]

    def _keep_hidden(self, _mod, _inp, out):
        self._hidden = out[0] if isinstance(out, tuple) else out

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _inputs(self, nodes):
        torch = _torch()
        k, n = len(self.pending), self.n
        index = {v: k + i for i, v in enumerate(nodes)}
        Q = k + len(nodes)
        allowed = torch.zeros((Q, n + Q), dtype=torch.bool)
        allowed[:, :n] = True
        for i in range(k):
            allowed[i, n : n + i + 1] = True
        pos = list(range(n, n + k))
        for v, i in index.items():
            allowed[i, n : n + k] = True
            allowed[i, [n + index[v[:d]] for d in range(1, len(v) + 1)]] = True
            pos.append(n + k + len(v) - 1)
        mask = additive_mask(allowed, self.src.dtype)
        dev = self.src.device
        ids = torch.tensor([self.pending + [int(v[-1]) for v in nodes]], device=dev)
        return ids, torch.tensor([pos], device=dev), mask[None, None].to(dev), index

    def verify(self, nodes: Sequence[tuple[int, ...]]) -> DeviceRows:
        """The target's rows (float32 log-probabilities, on the model's device) after the text (``()``) and after
        each drafted node, from one forward pass; nodes are token paths below the text, parents first."""
        torch = _torch()
        nodes = [tuple(int(t) for t in v) for v in nodes]
        ids, pos, mask, index = self._inputs(nodes)
        with torch.inference_mode():
            out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                             **with_cache(self.model, self.cache))  # fmt: skip
            logp = torch.log_softmax(out.logits[0, len(self.pending) - 1 :].float(), dim=-1)
        synchronize(self.src.device)
        self.passes += 1
        self._index = index
        rows = {(): 0} | {v: i - len(self.pending) + 1 for v, i in index.items()}
        return DeviceRows(logp, rows, self.moved)

    def features(self, path: Sequence[int]) -> object:
        """``[len(pending) + len(path), H]``: the features of the pending tokens and of the accepted path's nodes,
        from the last :meth:`verify`."""
        k = len(self.pending)
        rows = list(range(k)) + [self._index[tuple(path[:d])] for d in range(1, len(path) + 1)]
        return self._hidden[0, rows].float()

    def commit(self, path: Sequence[int], last: int) -> None:
        """Keep the pending tokens and the accepted ``path`` in the cache (drop the other nodes); ``last`` (the
        correction or bonus token) is the new pending token."""
        torch = _torch()
        path = [int(t) for t in path]
        k = len(self.pending)
        keep = list(range(self.n + k)) + [self.n + self._index[tuple(path[:d])] for d in range(1, len(path) + 1)]
        idx = torch.tensor(keep, dtype=torch.long, device=self.src.device)
        for layer in self.cache.layers:
            if layer.keys.shape[-2] != len(keep):
                layer.keys = layer.keys.index_select(-2, idx)
                layer.values = layer.values.index_select(-2, idx)
        self.n += k + len(path)
        self.pending = [int(last)]
