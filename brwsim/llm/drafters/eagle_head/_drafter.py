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
from torch.nn import functional as F

from ....errors import BrwsimError
from ...sources import DeviceQuery, NodeQuery, Transfer, _packed, rounds, to_evaluate
from ...sources._device import to_numpy
from .._base import DraftModel, PassFootprint
from .._hf import model_footprint
from ._config import HeadConfig
from ._model import Head
from ._target import decode, features, parts, rope


class EagleDraftModel(DraftModel):
    """A draft model: ``name`` and ``context(prompt_ids)``; ``meta`` describes the trained head. The head runs on
    the target's device and in the target's dtype (a bfloat16 target gets a bfloat16 head: the features it reads
    and the target's norm and LM head it ends with are bfloat16 too)."""

    def __init__(self, target, head: Head, meta: dict, name: str = "eagle-head"):
        head = head.to(device=target.device, dtype=target.dtype).eval()
        self.target, self.head, self.meta, self.name = target, head, meta, name
        self.device = target.device
        self.info: dict = {}
        self.head_config = HeadConfig(**meta["config"])
        self.vocab_size = int(target.vocab_size)
        self.eos_ids = target.eos_ids
        self.engine = HeadEngine(self)

    def prompt_features(self, prompt: Sequence[int]):
        """``[L - 1, H]``: the target's last hidden state before its final norm at every prompt position but the
        last (the target's packed engine when it has one: a request of the current round)."""
        eng = self.target.engine
        if eng is not None:
            return rounds.ask(eng, _packed.Open([int(t) for t in prompt], hidden=True))[2]
        with torch.inference_mode():
            return features(self.target.model, torch.tensor([list(prompt)[:-1]], device=self.device))[0]

    @classmethod
    def open(cls, spec, target, log=None):  # pragma: no cover - opened through the eagle-head registration
        raise NotImplementedError

    @property
    def target_footprint(self) -> PassFootprint:
        return model_footprint(self.target.model, what="the target's decoding step")

    @property
    def target_bits(self) -> float:
        return 8.0 * float(next(self.target.model.parameters()).element_size())

    def footprint(self) -> PassFootprint:
        """One head pass: the head's own weights (its fc map and one decoder layer), the target's final norm and LM
        head (a [vocab, hidden] matrix: 28.3M of SmolLM2-135M's 134.5M parameters), all at the target's dtype, and
        the head's one-layer KV cache. The token's embedding row is a lookup (not a matrix read)."""
        _, norm, lm_head, _, _ = parts(self.target.model)
        own = {id(p): p for m in (self.head, norm, lm_head) for p in m.parameters()}
        n = float(sum(p.numel() for p in own.values()))
        h = self.head
        return PassFootprint(((n, None),), 2 * h.kv_heads * h.head_dim, 1, h.heads * h.head_dim,
                             "one decoder layer and its fc map, the target's final norm and LM head")  # fmt: skip

    def pass_timer(self, context: int, seed: int = 0):
        """One head pass for one new drafted node below a prompt of ``context`` random tokens (the target's
        features of the prompt computed once, outside the timing); each call drafts a new child of the root. Like
        the target's timed step, the pass computes its row on the device and sends nothing back (an empty node
        query); the row is then dropped, so the timed calls do not pile rows up on the device."""
        rng = np.random.default_rng(seed)
        prompt = rng.integers(0, self.vocab_size, size=context + 1).tolist()
        ctx = self.context(prompt)
        tokens = iter(rng.permutation(self.vocab_size).tolist())

        def one_pass():
            node = (next(tokens),)
            ctx.query([node], NodeQuery())
            ctx.forget([node])

        return one_pass

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
            f = features(model, t[:, :-1]).to(self.target.dtype)
            cos, sin = rope(model, torch.arange(n, device=dev)[None], self.target.dtype)
            mask = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
            out, _, _ = self.head.layer(self.head.embed_in(f, parts(model)[3](t[:, 1:])), cos, sin, mask=mask)
            return to_numpy(torch.log_softmax(decode(model, out[0, :-1]).float(), dim=-1))


class HeadOpen(_packed.Open):
    """The head's prompt pass: it reads (feature i, token i + 1) at position i for i = 0 .. L - 2."""

    def __init__(self, prompt: list[int], features, T: float, on_device: bool = False):
        super().__init__(prompt[1:], on_device=on_device)
        self.features, self.T = features, T


class HeadExtend(_packed.Extend):
    """New drafted nodes: each reads its parent's predicted feature (``feats [n, H]``) and its own token."""

    def __init__(self, kv, tokens, positions, sees, feats, T: float, on_device: bool = False):
        super().__init__(kv, tokens, positions, sees, on_device=on_device)
        self.feats, self.T = feats, T


class HeadEngine:
    """The head's passes for many drafting contexts at once, packed like the target's (``sources._packed``:
    one decoder layer, per-request tree attention, the same bits alone or packed). An answer is (keys and values
    (HeadOpen only), log-probs ``f32[rows, V]``, predicted features ``[rows, H]``)."""

    def __init__(self, dm: EagleDraftModel):
        head, model = dm.head, dm.target.model
        self.head, self.model, self.device = head, model, dm.device
        _, self.norm, self.lm_head, self.embed, self.rotary = parts(model)
        mlp = _Mlp(head)
        self.parts = _packed.LayerParts(head.in_norm, head.q, head.k, head.v, head.o, head.post_norm, mlp)
        self.scale_attn = head.head_dim**-0.5
        self.dtype = next(head.parameters()).dtype
        self.max_tokens = 1024
        self.passes = 0
        per_token = [head.fc, head.q, head.k, head.v, head.o, head.gate, head.up, head.down]
        self.work = _packed.work_of([head, self.norm, self.lm_head], self.lm_head, 1, head.heads, head.kv_heads,
                                    head.head_dim, per_token)  # fmt: skip
        self.last_floor: float | None = None

    def tokens(self, request) -> int:
        return len(request.ids) if isinstance(request, HeadOpen) else len(request.tokens)

    def run(self, requests: list) -> list:
        self.last_floor = 0.0 if _packed.RATES else None
        return _packed.split_run(requests, self.tokens, self.max_tokens, self._pass)

    def _pass(self, requests: list) -> list:
        head, dev = self.head, self.device
        batch = _packed.Batch(requests, 1, head.heads, head.kv_heads, head.head_dim, self.dtype, dev)
        with torch.inference_mode():
            emb = self.embed(torch.tensor(batch.tokens, dtype=torch.long, device=dev))
            feats = torch.cat([r.features if isinstance(r, HeadOpen) else r.feats for r in requests]).to(self.dtype)
            x = _packed._linear(head.fc, torch.cat([feats / head.scale, emb], dim=-1))
            cos, sin = self.rotary(torch.zeros((), dtype=self.dtype, device=dev), batch.pos[None])
            x = _packed.decoder_layer(x, cos, sin, self.parts, 0, batch, head.heads, self.scale_attn)
            out = x * head.scale  # predicted features, at the target's scale
            decode = lambda rows: _packed._linear(self.lm_head, _packed._linear(self.norm, rows))  # noqa: E731
            logp = batch.logp(decode, out, [r.T for r in requests])
            answers = []
            for r, (a, b), kv, lp in zip(requests, batch.spans, batch.kvs, logp, strict=True):
                answers.append((kv, lp, out[b - 1 : b].clone() if isinstance(r, HeadOpen) else out[a:b].clone()))
        batch.commit()
        self.passes += 1
        if self.last_floor is not None:
            self.last_floor += self.work.floor(batch)
        return answers


class _Mlp:
    def __init__(self, head):
        self.head = head

    def __call__(self, h):
        hd = self.head
        return hd.down(F.silu(hd.gate(h)) * hd.up(h))


class EagleContext(DeviceQuery):
    """Questions about the drafter's tree below one prompt; ``passes`` counts head forward passes. The head's rows
    stay on the model's device and the node query is reduced there (:class:`~...sources.DeviceQuery`)."""

    def __init__(self, dm: EagleDraftModel, prompt: list[int], temperature: float = 1.0):
        if len(prompt) < 2:
            raise BrwsimError("the eagle head needs a prompt of at least 2 tokens (it reads the target's features)")
        if not temperature > 0:
            raise BrwsimError(f"temperature must be > 0, got {temperature}")
        self.dm, self.T = dm, temperature
        self.L = len(prompt)
        self.features = dm.prompt_features(prompt)  # [L - 1, H]: the target's, verified context
        self.vocab, self.moved, self._root, self.device = int(dm.vocab_size), Transfer(), None, dm.device
        self.kv, rows, feat = rounds.ask(dm.engine, HeadOpen(prompt, self.features, temperature, on_device=True))
        self.passes = 1
        self.nodes = 0
        self.feat: dict[tuple[int, ...], torch.Tensor] = {(): feat[0]}
        self.slot: dict[tuple[int, ...], int] = {}
        self.answers: dict = {(): rows[0]}  # prefix -> its row f32[V] on the device

    @property
    def root(self) -> np.ndarray:
        """The prompt's row on the host (copied once)."""
        if self._root is None:
            self._root = self._host(self.answers[()][None])[0]
        return self._root

    def _step(self, nodes: list[tuple[int, ...]]) -> None:
        """One head pass for ``nodes`` (their parents all evaluated)."""
        base = self.kv.used
        sees = [[self.slot[n[:d]] for d in range(1, len(n))] for n in nodes]
        fin = torch.stack([self.feat[n[:-1]] for n in nodes])
        pos = [self.L - 2 + len(n) for n in nodes]
        req = HeadExtend(self.kv, [n[-1] for n in nodes], pos, sees, fin, self.T, on_device=True)
        _, rows, feats = rounds.ask(self.dm.engine, req)
        for i, n in enumerate(nodes):
            self.slot[n], self.feat[n], self.answers[n] = base + i, feats[i], rows[i]
        self.passes += 1
        self.nodes += len(nodes)

    def known(self, prefix: tuple[int, ...]) -> None:
        """None: the head evaluates a chain one level a pass, so asking a guessed chain ahead saves no pass
        (:func:`~brwsim.llm.drafters.chain_nodes` guesses only where the context says False)."""
        return None

    def forget(self, prefixes: Sequence[tuple[int, ...]]) -> None:
        """Drop the stored rows of these prefixes (device memory: a row is V floats); their slots and predicted
        features stay, so their children cost nothing more, and a forgotten row asked again is evaluated again (a
        new slot, the same keys, values and row)."""
        for p in prefixes:
            if p:
                self.answers.pop(tuple(p), None)

    def _rows(self, prefixes: Sequence[tuple[int, ...]]) -> list | None:
        """The device rows ``f32[V]`` of the drafter's next-token log-probabilities after each prefix (missing ones
        evaluated, parents first; an ancestor whose row was forgotten keeps its slot and is not evaluated again)."""
        prefixes = [tuple(int(t) for t in p) for p in prefixes]
        need = to_evaluate(prefixes, self.answers, self.slot)
        while need:
            ready = sorted(n for n in need if len(n) == 1 or n[:-1] in self.slot)
            self._step(ready)
            need.difference_update(ready)
        return [self.answers[p] for p in prefixes] or None
