"""The trained head as a draft model: one context per prompt, a cached tree of drafted features.

Semantics (EAGLE's): the verified context is the prompt. Its last token is
the one the verifier has just produced (sampled from the target), so the
target's features are known for every prompt position but the last; the head
reads (f_i, x_{i+1}) for i = 0 .. L - 2 in one pass (its keys and values are
kept), and its prediction at the last of them is the root's feature: the
distribution of the first draft token is the head's, not the target's. A
drafted node (prefix ``(t_1, .., t_d)`` after the prompt) reads its parent's
*predicted* feature and its own token ``t_d`` at position ``L - 2 + d``,
attending to the prompt's keys, its ancestors' and its own; the target is
never run inside the draft tree. Every node's feature, keys and answer are
kept, so asking for the children of evaluated prefixes costs one head step
per new node, and a batch of new nodes whose parents are known is one pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ....errors import BrwsimError
from ...sources._hf import to_numpy
from .._base import DraftModel
from ._config import HeadConfig
from ._model import Head
from ._target import decode, features, parts, rope


class EagleDraftModel(DraftModel):
    """A draft model: ``name`` and ``context(prompt_ids)``; ``meta`` describes the trained head. The head runs on
    the target's device."""

    def __init__(self, target, head: Head, meta: dict, name: str = "eagle-head"):
        self.target, self.head, self.meta, self.name = target, head.to(target.device).eval(), meta, name
        self.device = target.device
        self.info: dict = {}
        self.head_config = HeadConfig(**meta["config"])
        self.vocab_size = int(target.vocab_size)
        self.eos_ids = target.eos_ids

    @classmethod
    def open(cls, spec, target, log=None):  # pragma: no cover - opened through the eagle-head registration
        raise NotImplementedError

    def cost_fraction(self) -> float:
        """One head pass (one decoder layer and the LM head) as a fraction of the target's step: 1 / layers."""
        return 1.0 / len(parts(self.target.model)[0])

    def context(self, prompt_ids: Sequence[int], temperature: float = 1.0) -> EagleContext:
        return EagleContext(self, [int(t) for t in prompt_ids], float(temperature))

    def teacher_forced_rows(self, ids: Sequence[int]) -> np.ndarray:
        """Held-out rows: the head's next-token log-probs after ``ids[:2]``, ..., ``ids[:-1]`` (``[len(ids) - 2, V]``),
        each from the target's features of every token before it (drafting depth 1, as at the root of a tree)."""
        if len(ids) < 3:
            raise BrwsimError("the eagle head's held-out rows need at least 3 tokens")
        model = self.target.model
        dev = self.device
        t = torch.tensor([[int(x) for x in ids]], device=dev)
        n = t.shape[1] - 1
        with torch.inference_mode():
            f = features(model, t[:, :-1])
            cos, sin = rope(model, torch.arange(n, device=dev)[None])
            mask = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
            out, _, _ = self.head.layer(self.head.embed_in(f, parts(model)[3](t[:, 1:])), cos, sin, mask=mask)
            return to_numpy(torch.log_softmax(decode(model, out[0, :-1]).float(), dim=-1))


class EagleContext:
    """Questions about the drafter's tree below one prompt; ``passes`` counts head forward passes."""

    def __init__(self, dm: EagleDraftModel, prompt: list[int], temperature: float = 1.0):
        if len(prompt) < 2:
            raise BrwsimError("the eagle head needs a prompt of at least 2 tokens (it reads the target's features)")
        if not temperature > 0:
            raise BrwsimError(f"temperature must be > 0, got {temperature}")
        self.dm, self.T = dm, temperature
        self.model = dm.target.model
        self.L = len(prompt)
        self.device = dev = dm.device
        ids = torch.tensor([prompt], device=dev)
        with torch.inference_mode():
            self.features = features(self.model, ids[:, :-1])[0]  # [L - 1, H]: the target's, verified context
            emb = parts(self.model)[3](ids[:, 1:])
            cos, sin = rope(self.model, torch.arange(self.L - 1, device=dev)[None])
            mask = torch.ones(self.L - 1, self.L - 1, dtype=torch.bool, device=dev).tril()
            out, self.k, self.v = dm.head.layer(dm.head.embed_in(self.features[None], emb), cos, sin, mask=mask)
        self.passes = 1
        self.nodes = 0
        self.feat: dict[tuple[int, ...], torch.Tensor] = {(): out[0, -1]}
        self.slot: dict[tuple[int, ...], int] = {(): -1}
        self.answers: dict[tuple[int, ...], np.ndarray] = {(): self._logp(out[0, -1:])[0]}
        self.root = self.answers[()]

    def _logp(self, feat: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            return to_numpy(torch.log_softmax(decode(self.model, feat).float() / self.T, dim=-1))

    def _step(self, nodes: list[tuple[int, ...]]) -> None:
        """One head pass for ``nodes`` (their parents all evaluated)."""
        P, S, B = self.L - 1, self.k.shape[2] - (self.L - 1), len(nodes)
        allowed = torch.zeros((B, P + S + B), dtype=torch.bool)  # built here, moved once
        allowed[:, :P] = True
        for i, n in enumerate(nodes):
            for d in range(1, len(n)):
                allowed[i, P + self.slot[n[:d]]] = True
            allowed[i, P + S + i] = True
        with torch.inference_mode():
            fin = torch.stack([self.feat[n[:-1]] for n in nodes])[None]
            dev = self.device
            emb = parts(self.model)[3](torch.tensor([[n[-1] for n in nodes]], device=dev))
            cos, sin = rope(self.model, torch.tensor([[self.L - 2 + len(n) for n in nodes]], device=dev))
            emb_in = self.dm.head.embed_in(fin, emb)
            out, k, v = self.dm.head.layer(emb_in, cos, sin, self.k, self.v, allowed.to(dev))
        self.k, self.v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
        rows = self._logp(out[0])
        for i, n in enumerate(nodes):
            self.slot[n], self.feat[n], self.answers[n] = S + i, out[0, i], rows[i]
        self.passes += 1
        self.nodes += B

    def logprobs(self, prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
        """``float32 [len(prefixes), V]``: the drafter's next-token log-probabilities after each prefix."""
        prefixes = [tuple(int(t) for t in p) for p in prefixes]
        need = {p[:d] for p in prefixes for d in range(1, len(p) + 1)} - set(self.answers)
        while need:
            ready = sorted(n for n in need if n[:-1] in self.answers)
            self._step(ready)
            need.difference_update(ready)
        if not prefixes:
            return np.zeros((0, self.dm.vocab_size), np.float32)
        return np.stack([self.answers[p] for p in prefixes]).astype(np.float32, copy=False)
