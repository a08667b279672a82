"""Prompt lookup (n-gram copy) drafting: proposals from the context itself, no q (docs/drafters.md).

As prompt-lookup decoding and the Spec-Bench baselines do: the last ``m``
tokens of the context (prompt + text so far) are searched for earlier in the
context, for m = n, n - 1, ..., 1; the tokens that followed an earlier
occurrence are proposed as the continuation. :meth:`LookupProposer.tree`
merges the continuations of every occurrence into one prefix tree, longest
match first and, within a match length, the most recent occurrence first;
its nodes are listed in the order they enter, so the first P nodes are the
tree at budget P (prefix-closed). :meth:`LookupProposer.chain` is the first
continuation alone (the classic single-sequence lookup).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._spec import Spec, number
from ._base import NO_PASS, PassFootprint, Proposer, register


@register("lookup")
class LookupProposer(Proposer):
    """``lookup:n=N``: continuations of earlier occurrences of the context's last m <= N tokens."""

    spec_keys = (set(), {"n"})
    example = "lookup:n=3"

    @classmethod
    def check(cls, spec: Spec) -> None:
        number(spec, "n", integer=True, lo=1, hi=16, default="3")

    @classmethod
    def open(cls, spec: Spec, target, log=None) -> LookupProposer:
        return cls(int(number(spec, "n", integer=True, lo=1, hi=16, default="3")))

    def footprint(self) -> PassFootprint:
        return NO_PASS

    def __init__(self, n: int = 3):
        self.n = int(n)
        self.name = f"lookup:n={self.n}"
        self.info = {"n": self.n}

    def continuations(self, ids: Sequence[int], P: int) -> list[tuple[int, ...]]:
        """Continuations (up to P tokens) of earlier occurrences of the last m tokens, best first."""
        ids = [int(t) for t in ids]
        L = len(ids)
        out: list[tuple[int, ...]] = []
        for m in range(min(self.n, L - 1), 0, -1):
            tail = ids[L - m :]
            for start in range(L - m - 1, -1, -1):  # most recent first; the tail itself excluded
                if ids[start : start + m] == tail:
                    cont = tuple(ids[start + m : start + m + P])
                    if cont:
                        out.append(cont)
        return out

    def tree(self, ids: Sequence[int], P: int) -> list[tuple[int, ...]]:
        """Up to P prefix-tree nodes (token paths after ``ids``), in the order they enter the tree."""
        nodes: list[tuple[int, ...]] = []
        seen: set[tuple[int, ...]] = set()
        for cont in self.continuations(ids, P):
            for d in range(1, len(cont) + 1):
                v = cont[:d]
                if v not in seen:
                    seen.add(v)
                    nodes.append(v)
                    if len(nodes) == P:
                        return nodes
        return nodes

    def chain(self, ids: Sequence[int], P: int) -> list[tuple[int, ...]]:
        """The first continuation's P (or fewer) nodes."""
        conts = self.continuations(ids, P)
        return [conts[0][:d] for d in range(1, len(conts[0]) + 1)] if conts else []
