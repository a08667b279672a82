"""The contexts of a transformers causal LM (:class:`~._hf.HFSource`): one prompt's token tree and walks.

One :class:`HFContext` per prompt. The prompt is run once (``logits_to_keep=1``:
only its last position goes through the LM head) and its KV cache is kept.

Tree questions (:meth:`HFContext.logprobs`) share one growing KV cache: each
evaluated node of the token tree occupies one cache slot after the prompt,
and a batch of new nodes (each a child of the prompt, of an evaluated node or
of a node earlier in the same batch, so a whole chain fits) is run in ONE
forward pass of B query tokens with a 4D attention mask (each new token sees
the prompt, the slots of its own ancestors and itself) and
``position_ids = len(prompt) + depth - 1``. Every node's token therefore goes
through the model exactly once, and the answer equals full recomputation up
to float rounding (tests/llm/test_llm.py checks it).

Walks (:meth:`HFContext.walker`) copy the prompt cache ``n`` times along the
batch axis and decode the ``n`` continuations in lock-step; finished rows are
dropped from the cache.

Both contexts keep each node's row where the model computed it (a tensor on
its device) and answer a :class:`~._query.NodeQuery` there
(:func:`~._query.answer_tensor`): only K-sized results cross to the host.
Whole rows cross only when asked (:meth:`Context.logprobs`, ``rows=True``,
the prompt's ``root``); :meth:`transfer` counts every byte that crossed and the node answers it carried.

A Llama-architecture model (SmolLM2 and every drafter made from it) is run by
the packed engine instead (:mod:`._packed`, :class:`PackedContext`): the same
tree of slots, but each question is a request that :mod:`.rounds` can pack
with other prompts' questions into one forward pass; walks are tree nodes
too. Other architectures take the path above, one prompt per pass.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

from . import _packed, rounds
from ._base import Context, Walker
from ._device import _torch, additive_mask, returned_cache, with_cache
from ._query import DeviceQuery, NodeAnswer, NodeQuery, Transfer, answer_tensor

if TYPE_CHECKING:
    from ._hf import HFSource


class _DeviceRows(DeviceQuery, Context):
    """A context whose rows are tensors on the model's device (``answers``: prefix -> ``f32[V]``, the prompt's row
    at ``()``): :meth:`logprobs` copies whole rows to the host, :meth:`query` reduces them on the device
    (:class:`~._query.DeviceQuery`). Subclasses evaluate missing nodes in :meth:`_tree_step`; ``_evaluated`` is
    the set of nodes with a slot."""

    src: HFSource
    answers: dict
    moved: Transfer
    _root: np.ndarray | None

    @property
    def vocab(self) -> int:
        return self.src.vocab_size

    @property
    def device(self):
        return self.src.device

    @property
    def root(self) -> np.ndarray:
        """The prompt's row on the host (copied once)."""
        if self._root is None:
            self._root = self._host(self.answers[()][None])[0]
        return self._root

    def _evaluated(self):
        return self.answers

    def _rows(self, prefixes) -> list | None:
        """The device rows of ``prefixes`` (None for none), the missing ones evaluated first, parents first, up
        to ``max_pass_nodes`` per pass (a whole chain in one pass)."""
        prefixes = [tuple(int(t) for t in p) for p in prefixes]
        evaluated = self._evaluated()
        need = {p for p in prefixes if p not in self.answers}
        for p in prefixes:
            for d in range(1, len(p)):
                if p[:d] not in evaluated and p[:d] not in self.answers:
                    need.add(p[:d])
        order = sorted(need, key=lambda n: (len(n), n))
        step = self.src.max_pass_nodes
        for i in range(0, len(order), step):
            self._tree_step(order[i : i + step])
        return [self.answers[p] for p in prefixes] or None

    def _tree_step(self, nodes: list[tuple[int, ...]]) -> None:
        raise NotImplementedError

    def known(self, prefix) -> bool:
        return tuple(prefix) in self.answers


class PackedContext(_DeviceRows):
    """One prompt's tree on the packed engine: the prompt's keys and values, one slot per evaluated node, every
    row kept on the device unless :meth:`forget` drops it. ``passes`` counts the requests this context made (the
    prompt's included)."""

    def __init__(self, src: HFSource, prompt: list[int]):
        if not prompt:
            raise ValueError("empty prompt")
        self.src = src
        self.L = len(prompt)
        self.moved, self._root = Transfer(), None
        self.kv, root, _ = rounds.ask(src.engine, _packed.Open(prompt, on_device=True))
        self.passes = 1
        self.slots: dict[tuple[int, ...], int] = {}
        self.answers = {(): root}

    def _evaluated(self):
        return self.slots  # a forgotten row asked again is evaluated again (a new slot, the same keys and values)

    def _tree_step(self, nodes: list[tuple[int, ...]]) -> None:
        """Evaluate nodes in one request; each node's parent is evaluated or comes earlier in ``nodes``."""
        base = self.kv.used
        new = {n: base + i for i, n in enumerate(nodes)}  # (a node asked again takes its new slot)
        sees = [[new[a] if a in new else self.slots[a] for a in (n[:d] for d in range(1, len(n)))] for n in nodes]
        pos = [self.L + len(n) - 1 for n in nodes]
        rows = rounds.ask(self.src.engine, _packed.Extend(self.kv, [n[-1] for n in nodes], pos, sees, on_device=True))
        self.passes += 1
        for i, n in enumerate(nodes):
            self.slots[n] = base + i
            self.answers[n] = rows[i]

    def forget(self, prefixes) -> None:
        """Drop the stored rows of these prefixes (their slots stay: their children cost nothing more)."""
        for p in prefixes:
            if p:
                self.answers.pop(tuple(p), None)


class HFContext(_DeviceRows):
    """One prompt's tree on the model's own forward (one prompt per pass): one growing KV cache of node slots."""

    def __init__(self, src: HFSource, prompt: list[int]):
        torch = _torch()
        if not prompt:
            raise ValueError("empty prompt")
        self.src = src
        self.L = len(prompt)
        self.moved, self._root = Transfer(), None
        ids = torch.tensor([prompt], device=src.device)
        out = src.ask_forward(input_ids=ids, logits_to_keep=1)
        self.passes = 1
        self.prompt_cache = returned_cache(out)
        self.tree_cache = None
        self.slots: dict[tuple[int, ...], int] = {(): -1}
        self.answers = {(): src.logp_tensor(out.logits[0, -1:])[0]}

    def _tree_step(self, nodes: list[tuple[int, ...]]) -> None:
        """Evaluate nodes in one forward pass; each node's parent has a slot or comes earlier in ``nodes``."""
        torch = _torch()
        src = self.src
        if self.tree_cache is None:
            self.tree_cache = copy.deepcopy(self.prompt_cache)
        S = len(self.slots) - 1  # slots used so far
        B = len(nodes)
        slots = {n: S + i for i, n in enumerate(nodes)}
        allowed = torch.zeros((B, self.L + S + B), dtype=torch.bool)
        allowed[:, : self.L] = True
        rows, cols = [], []
        for i, node in enumerate(nodes):
            for d in range(1, len(node) + 1):
                a = node[:d]
                rows.append(i)
                cols.append(self.L + (self.slots[a] if a in self.slots else slots[a]))
        allowed[torch.tensor(rows), torch.tensor(cols)] = True
        mask = additive_mask(allowed, src.dtype)
        ids = torch.tensor([[n[-1] for n in nodes]], device=src.device)
        pos = torch.tensor([[self.L + len(n) - 1 for n in nodes]], device=src.device)
        out = src.ask_forward(
            input_ids=ids,
            position_ids=pos,
            attention_mask=mask[None, None].to(src.device),
            **with_cache(src.model, self.tree_cache),
        )
        self.passes += 1
        self.tree_cache = returned_cache(out)
        rows = src.logp_tensor(out.logits[0])
        for i, n in enumerate(nodes):
            self.slots[n] = S + i
            self.answers[n] = rows[i]

    def walker(self, n: int) -> HFWalker:
        return HFWalker(self, n)


class HFWalker(Walker):
    def __init__(self, ctx: HFContext, n: int):
        super().__init__(ctx, n)
        self.cache = copy.deepcopy(ctx.prompt_cache)
        if n > 1:
            self.cache.batch_repeat_interleave(n)
        self.depth = 0

    def step(self, tokens):
        return self.ctx._host(self._step(tokens))

    def device_step(self, tokens):
        return self._step(tokens)

    def query(self, tokens, q: NodeQuery) -> NodeAnswer:
        """One token appended to each continuation, ``q`` answered on the model's device."""
        got = answer_tensor(self._step(tokens), q)
        self.ctx.moved.add(got.host_bytes, len(tokens))
        return got

    def _step(self, tokens):
        """The new rows as a tensor on the model's device."""
        torch = _torch()
        src = self.ctx.src
        self._append(tokens)
        n = len(tokens)
        ids = torch.tensor([[int(t)] for t in tokens], device=src.device)
        pos = torch.full((n, 1), self.ctx.L + self.depth, device=src.device)
        out = src.ask_forward(input_ids=ids, position_ids=pos, **with_cache(src.model, self.cache))
        self.ctx.passes += 1
        self.cache = returned_cache(out)
        self.depth += 1
        return src.logp_tensor(out.logits[:, -1])

    def keep(self, rows):
        torch = _torch()
        rows = list(rows)
        if rows != list(range(len(self.prefixes))):
            self.cache.batch_select_indices(torch.tensor(rows, dtype=torch.long, device=self.ctx.src.device))
        self.prefixes = [self.prefixes[i] for i in rows]
