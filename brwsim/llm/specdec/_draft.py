"""The drafter's side: a session per prompt that drafts a tree below the current text with the fixed builder.

Every session answers ``tree(P)`` (token paths below the text, parents first,
at most P) and ``advance(tokens, features)`` (the text grew by ``tokens``:
the accepted path and the target's last token). The builder is the one fixed
in advance for the measurements (:func:`brwsim.llm.drafters._report.fixed_builder`):
top-P-by-Q (:func:`~brwsim.llm.drafters.topq_nodes`, the drafter's q at
temperature 1, four rows a search step, as measured) for a drafter with a q,
the lookup tree for a proposer.

- :class:`PackedChain`: a draft model on the packed engine (layer skipping,
  low-bit copies, ``model:DIR`` Llamas) keeps the text's keys and values; the
  tokens appended since its last pass are run as a chain in front of the next
  pass's nodes, and a new round's nodes overwrite the last round's slots.
- :class:`HeadChain`: the EAGLE-style head reads the target's features of the
  verified tokens (from the verifier's pass) and its own predicted features
  inside the tree.
- any other draft model: a new context on the whole text each round (correct, slower).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..drafters import DraftView, Proposer, topq_nodes
from ..drafters._report import fixed_builder
from ..sources import DeviceQuery, Transfer, _packed, to_evaluate
from ..sources._device import _torch

SEARCH_BATCH = 4  # rows per best-first step, as experiments/real_drafters.py measures (its ``batch``)


class PackedChain(DeviceQuery):
    """A draft context whose root moves along the generated text (packed engine, :mod:`..sources._packed`); its
    rows stay on the model's device and the node query is reduced there (:class:`~..sources.DeviceQuery`)."""

    def __init__(self, engine, prompt: Sequence[int], vocab: int):
        self.engine, self.vocab, self.moved, self.device = engine, vocab, Transfer(), engine.device
        self.kv, root, _ = engine.run([_packed.Open([int(t) for t in prompt], on_device=True)])[0]
        self.L = len(prompt)
        self.committed = 0  # node slots holding generated text
        self.pending: tuple[int, ...] = ()
        self.slots: dict[tuple[int, ...], int] = {}
        self.answers: dict = {(): root}  # prefix -> its row f32[V] on the device
        self.passes, self.rows = 1, 0  # passes (the prompt's prefill is the first); rows: new tokens in later ones

    def advance(self, tokens: Sequence[int]) -> None:
        self.pending += tuple(int(t) for t in tokens)
        self.kv.used = self.committed
        self.slots, self.answers = {}, {}

    def _step(self, keys: list[tuple[int, ...]]) -> None:
        base = self.kv.used
        new = {v: base + i for i, v in enumerate(keys)}
        done = list(range(self.committed))
        sees = [done + [new.get(v[:d], self.slots.get(v[:d])) for d in range(1, len(v))] for v in keys]
        pos = [self.L + self.committed + len(v) - 1 for v in keys]
        req = _packed.Extend(self.kv, [v[-1] for v in keys], pos, sees, on_device=True)
        rows = self.engine.run([req])[0]
        self.passes, self.rows = self.passes + 1, self.rows + len(keys)
        for i, v in enumerate(keys):
            self.slots[v], self.answers[v] = base + i, rows[i]
        k = len(self.pending)
        if k and self.pending in self.slots:  # the text's new tokens are in slots committed .. committed + k - 1
            assert [self.slots[self.pending[:d]] for d in range(1, k + 1)] == list(range(self.committed, base + k))
            self.committed += k
            strip = lambda m: {v[k:]: x for v, x in m.items() if v[:k] == self.pending and len(v) > k}  # noqa: E731
            self.answers = {(): self.answers[self.pending]} | strip(self.answers)
            self.slots = strip(self.slots)
            self.pending = ()

    def _rows(self, prefixes) -> list | None:
        prefixes = [tuple(int(t) for t in p) for p in prefixes]
        keys = {self.pending + p for p in prefixes}
        need = {k[:d] for k in keys for d in range(1, len(k) + 1)} - set(self.slots)
        need |= {k for k in keys if k not in self.answers and k}
        order, pend = sorted(need, key=lambda v: (len(v), v)), self.pending
        for i in range(0, len(order), 256):
            chunk = order[i : i + 256]
            self._step([v[len(pend) :] for v in chunk] if pend and not self.pending else chunk)
        return [self.answers[self.pending + p] for p in prefixes] or None

    def forget(self, prefixes) -> None:
        for p in prefixes:
            if p:
                self.answers.pop(self.pending + tuple(p), None)


class HeadChain(DeviceQuery):
    """The EAGLE-style head's draft context along the generated text: verified tokens read the target's features
    (one head pass for the tokens of a call, whose last answer is the root), drafted nodes the head's own. Its rows
    stay on the model's device and the node query is reduced there (:class:`~..sources.DeviceQuery`)."""

    def __init__(self, dm, prompt: Sequence[int], prompt_features):
        from ..drafters.eagle_head._drafter import HeadOpen

        self.dm, self.vocab, self.moved, self.device = dm, int(dm.vocab_size), Transfer(), dm.device
        prompt = [int(t) for t in prompt]
        self.kv, rows, feat = dm.engine.run([HeadOpen(prompt, prompt_features, 1.0, on_device=True)])[0]
        self.n = len(prompt)  # tokens of the text
        self.committed = 0  # node slots holding verified reads
        self.feat = {(): feat[0]}
        self.slot: dict[tuple[int, ...], int] = {}
        self.answers: dict = {(): rows[0]}  # prefix -> its row f32[V] on the device
        self.passes, self.rows = 1, 0  # passes (the prompt's prefill is the first); rows: new tokens in later ones

    def advance(self, tokens: Sequence[int], features) -> None:
        """The text grew by ``tokens``; ``features [len(tokens), H]``: the target's at the token before each."""
        from ..drafters.eagle_head._drafter import HeadExtend

        tokens = [int(t) for t in tokens]
        self.kv.used = self.committed
        c = self.committed
        sees = [list(range(c + i)) for i in range(len(tokens))]
        pos = [self.n - 1 + i for i in range(len(tokens))]
        _, rows, feats = self.dm.engine.run([HeadExtend(self.kv, tokens, pos, sees, features, 1.0, on_device=True)])[0]
        self.passes, self.rows = self.passes + 1, self.rows + len(tokens)
        self.committed += len(tokens)
        self.n += len(tokens)
        self.feat, self.slot, self.answers = {(): feats[-1]}, {}, {(): rows[-1]}

    def _step(self, nodes: list[tuple[int, ...]]) -> None:
        from ..drafters.eagle_head._drafter import HeadExtend

        torch = _torch()
        base = self.kv.used
        done = list(range(self.committed))
        sees = [done + [self.slot[v[:d]] for d in range(1, len(v))] for v in nodes]
        fin = torch.stack([self.feat[v[:-1]] for v in nodes])
        pos = [self.n - 2 + len(v) for v in nodes]
        req = HeadExtend(self.kv, [v[-1] for v in nodes], pos, sees, fin, 1.0, on_device=True)
        _, rows, feats = self.dm.engine.run([req])[0]
        for i, v in enumerate(nodes):
            self.slot[v], self.feat[v], self.answers[v] = base + i, feats[i], rows[i]
        self.passes, self.rows = self.passes + 1, self.rows + len(nodes)

    def _rows(self, prefixes) -> list | None:
        prefixes = [tuple(int(t) for t in p) for p in prefixes]
        need = to_evaluate(prefixes, self.answers, self.slot)
        while need:
            ready = sorted(v for v in need if v[:-1] in self.feat)
            self._step(ready)
            need.difference_update(ready)
        return [self.answers[p] for p in prefixes] or None

    def forget(self, prefixes) -> None:
        for p in prefixes:
            if p:
                self.answers.pop(tuple(p), None)


class DraftSession:
    """One prompt's drafter: ``tree(P)`` with the fixed builder, ``advance(tokens, features)`` after each call."""

    def __init__(self, drafter, target_src, prompt: Sequence[int], prompt_features=None, eos=frozenset()):
        self.drafter, self.eos = drafter, frozenset(eos)
        self.ids = [int(t) for t in prompt]
        self.builder = fixed_builder(["lookup_tree"] if isinstance(drafter, Proposer) else ["topq"])
        self.ctx = None
        if not isinstance(drafter, Proposer):
            self.ctx = open_chain(drafter, self.ids, prompt_features)

    @property
    def needs_features(self) -> bool:
        return isinstance(self.ctx, HeadChain)

    @property
    def passes(self) -> int:
        return 0 if self.ctx is None else self.ctx.passes

    @property
    def rows(self) -> int:
        """New tokens scored in the drafter's passes after the prompt's prefill (0 where not counted: a proposer, or
        a draft model without the packed engine)."""
        return 0 if self.ctx is None else self.ctx.rows

    def transfer(self) -> Transfer | None:
        """What the drafter's context sent from its device to the host (None where not counted: a proposer, or a
        draft model without the packed engine)."""
        return None if self.ctx is None else self.ctx.transfer()

    def tree(self, P: int) -> list[tuple[int, ...]]:
        if P <= 0:
            return []
        if self.ctx is None:
            return [tuple(v) for v in self.drafter.tree(self.ids, P)]
        if isinstance(self.ctx, _Fresh):
            self.ctx.reopen(self.ids)
        return topq_nodes(DraftView(self.ctx, 1.0), P, SEARCH_BATCH, self.eos)[0]

    def advance(self, tokens: Sequence[int], features=None) -> None:
        tokens = [int(t) for t in tokens]
        self.ids += tokens
        if isinstance(self.ctx, HeadChain):
            self.ctx.advance(tokens, features)
        elif isinstance(self.ctx, PackedChain):
            self.ctx.advance(tokens)


class _Fresh:
    """Any other draft model: a new context on the whole text each round."""

    rows = 0  # its passes' rows are not counted

    def __init__(self, drafter):
        self.drafter, self.inner, self.passes = drafter, None, 0

    def reopen(self, ids) -> None:
        if self.inner is not None:
            self.passes += self.inner.passes
        self.inner = self.drafter.context(ids)

    def logprobs(self, prefixes):
        return self.inner.logprobs(prefixes)

    def query(self, prefixes, q):
        """The new context's own answer (reduced on its device where it keeps its rows there)."""
        return self.inner.query(prefixes, q)

    def device_rows(self, prefixes):
        return self.inner.device_rows(prefixes)

    def transfer(self) -> None:
        """None: what crosses to the host is not counted (a new context each round; like its rows)."""
        return None

    def known(self, prefix) -> bool | None:
        return self.inner.known(prefix)

    def forget(self, prefixes) -> None:
        self.inner.forget(prefixes)


def reads_features(drafter) -> bool:
    """Whether the drafter reads the target's features (the EAGLE-style head)."""
    from ..drafters.eagle_head._drafter import EagleDraftModel

    return isinstance(drafter, EagleDraftModel)


def open_chain(drafter, ids: list[int], prompt_features=None):
    """The draft context that follows the text: :class:`HeadChain`, :class:`PackedChain` or :class:`_Fresh`."""
    if reads_features(drafter):
        if prompt_features is None:
            prompt_features = drafter.prompt_features(ids)
        return HeadChain(drafter, ids, prompt_features)
    from ..drafters._hf import HFDraftModel

    if isinstance(drafter, HFDraftModel) and drafter.src.engine is not None:
        return PackedChain(drafter.src.engine, ids, int(drafter.src.vocab_size))
    return _Fresh(drafter)
