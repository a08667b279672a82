"""Drafters by name: ``NAME[:key=value,...]``, each building its P-node trees for a batch of tree keys.

``oracle``                      T*_P, the P nodes of largest P(v) (perfect knowledge).
``topq``                        the P nodes of largest drafter path probability Q(v).
``eagle[:top_k=10,depth=7]``    EAGLE-2/3's dynamic tree (P = total_tokens).
``chain``                       greedy by q: the drafter's most likely child, P times.
``static:path=FILE|k=K``        a fixed tree of drafter-rank paths (file, or the K-ary tree).
``sequoia[:depth=D,samples=N]`` Sequoia's static tree from positional acceptance rates.

docs/drafters.md describes each; :mod:`._builders`, :mod:`._static` and
:mod:`._sequoia` build the trees.
"""

from __future__ import annotations

import math
from functools import partial
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._devices import available_memory
from .._keys import Stream, tree_keys
from .._registry import registrar
from .._spec import Spec, number, parse_spec
from ..errors import BrwsimError
from ..laws import Law, parse_law
from ..oracle import oracle_batch
from ..tree import DraftTree, prefix_values
from ._builders import chain_one, eagle_effective, eagle_one, topq_one
from ._draftlaws import DraftLaw, parse_draft_law
from ._sequoia import sequoia_paths
from ._static import kary_paths, load_paths, static_one, tree_arrays

MEMORY_FRACTION = 0.8  # of the memory available, what one tree may use
SEQUOIA_STEPS_MAX = 2**21  # steps of Sequoia's dynamic program (levels x P x ranks; ~40 us each): about a minute
DRAFTERS: dict[str, type] = {}  # SPEC name -> drafter class
register = registrar(DRAFTERS)


@partial(jax.jit, static_argnames=("P", "K"))
def topq_batch(law, dlaw, keys, P: int, K: int) -> DraftTree:
    return jax.vmap(lambda k: topq_one(law, dlaw, k, P, K))(keys)


@partial(jax.jit, static_argnames=("P",))
def chain_batch(law, dlaw, keys, P: int) -> DraftTree:
    return jax.vmap(lambda k: chain_one(law, dlaw, k, P))(keys)


@partial(jax.jit, static_argnames=("P", "top_k", "depth"))
def eagle_batch(law, dlaw, keys, P: int, top_k: int, depth: int) -> DraftTree:
    return jax.vmap(lambda k: eagle_one(law, dlaw, k, P, top_k, depth))(keys)


@partial(jax.jit, static_argnames=("K",))
def static_batch(law, dlaw, keys, parents, qranks, K: int) -> DraftTree:
    return jax.vmap(lambda k: static_one(law, dlaw, k, parents, qranks, K))(keys)


class Drafter:
    """Base class: a parsed drafter SPEC (``text``) that builds P-node trees for a batch of tree keys."""

    family: ClassVar[str] = "drafter"
    spec_keys: ClassVar[tuple[set[str], set[str]]] = (set(), set())
    nested: ClassVar[bool] = True  # the first n nodes of its P-node tree are its n-node tree, for every n

    @classmethod
    def from_spec(cls, spec: Spec) -> Drafter:
        return cls(text=spec.text)

    def trees(self, key, law: Law, dlaw: DraftLaw, keys, P: int) -> DraftTree:  # pragma: no cover - overridden
        """The P-node trees on the trees with keys ``keys`` (``key``: the run key, for drafters that sample)."""
        raise NotImplementedError

    def tree_bytes(self, law: Law, P: int) -> int:
        """Approximate bytes one tree needs: a node's whole distributions, the node tables, the output."""
        V = law.vocab
        return 4 * (8 * V + 6 * (P + 1) * min(V, P)) + 64 * P

    def batch_size(self, law: Law, P: int) -> int:
        """Trees per call: about 96 MB in all, at most 512."""
        return int(max(1, min(512, 96 * 2**20 // self.tree_bytes(law, P))))

    def check_budget(self, law: Law, P: int) -> None:
        """Before any tree: a one-line error if one tree at budget P cannot fit in the memory available (naming
        the largest P that fits), or if the drafter's own work at P is out of reach."""
        avail = available_memory()
        if avail is None or self.tree_bytes(law, P) <= MEMORY_FRACTION * avail:
            return
        lo, hi = 1, P
        while lo < hi:  # tree_bytes grows with P
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.tree_bytes(law, mid) <= MEMORY_FRACTION * avail else (lo, mid - 1)
        fits = (
            f"the largest P that fits is about {lo}"
            if self.tree_bytes(law, lo) <= MEMORY_FRACTION * avail
            else (f"not even P=1 fits (V={law.vocab}): use a smaller vocabulary")
        )
        raise BrwsimError(
            f"drafter {self.text!r} at P={P} needs about {self.tree_bytes(law, P) / 1e9:.3g} GB for one tree "
            f"({law.spec()}), more than the {MEMORY_FRACTION * avail / 1e9:.3g} GB a run may use here: {fits}"
        )


@register("oracle")
class Oracle(Drafter):
    text: str = "oracle"

    def trees(self, key, law, dlaw, keys, P):
        return oracle_batch(law, keys, P=P, K=min(law.vocab, P))


@register("topq")
class TopQ(Drafter):
    text: str = "topq"

    def trees(self, key, law, dlaw, keys, P):
        return topq_batch(law, dlaw, keys, P=P, K=min(law.vocab, P))


@register("chain")
class Chain(Drafter):
    text: str = "chain"

    def trees(self, key, law, dlaw, keys, P):
        return chain_batch(law, dlaw, keys, P=P)


@register("eagle")
class Eagle(Drafter):
    top_k: int = 10
    depth: int = 7
    text: str = "eagle"

    spec_keys = (set(), {"top_k", "depth"})

    @classmethod
    def from_spec(cls, spec: Spec) -> Eagle:
        top_k = number(spec, "top_k", integer=True, lo=1, default="10")
        return cls(top_k=top_k, depth=number(spec, "depth", integer=True, lo=0, default="7"), text=spec.text)

    def tree_bytes(self, law, P):
        V = law.vocab
        kc, f, depth = eagle_effective(V, P, self.top_k, self.depth)  # what the tree is built from
        return 4 * (8 * V * f + 6 * (P + 1) * min(V, P)) + 64 * P + 64 * (kc + depth * f * kc)

    def trees(self, key, law, dlaw, keys, P):
        return eagle_batch(law, dlaw, keys, P=P, top_k=self.top_k, depth=self.depth)


@register("static")
class Static(Drafter):
    k: int | None = None
    path: str | None = None
    text: str = "static"

    spec_keys = (set(), {"path", "k"})

    @classmethod
    def from_spec(cls, spec: Spec) -> Static:
        if ("path" in spec.params) == ("k" in spec.params):
            raise BrwsimError(f"{spec.where}: give exactly one of path=FILE (rank-path list) or k=K (K-ary tree)")
        if "k" in spec.params:
            return cls(k=number(spec, "k", integer=True, lo=1), text=spec.text)
        load_paths(spec.params["path"])  # validate early
        return cls(path=spec.params["path"], text=spec.text)

    def paths(self, key, law: Law, dlaw: DraftLaw, P: int) -> list[tuple[int, ...]]:
        paths = kary_paths(self.k, P) if self.k is not None else load_paths(self.path)
        if len(paths) < P:
            raise BrwsimError(f"drafter {self.text!r}: the static tree has {len(paths)} nodes, fewer than P={P}")
        return paths[:P]

    def trees(self, key, law, dlaw, keys, P):
        paths = self.paths(key, law, dlaw, P)
        too_deep = max(max(p) for p in paths)
        if too_deep >= law.vocab:
            raise BrwsimError(
                f"drafter {self.text!r}: a path uses rank {too_deep} but the vocabulary has {law.vocab} tokens"
            )
        par, qr = tree_arrays(paths)
        K = min(law.vocab, too_deep + 1)
        return static_batch(law, dlaw, keys, jnp.asarray(par), jnp.asarray(qr), K=K)


@register("sequoia")
class Sequoia(Static):
    depth: int | None = None
    samples: int = 4096
    text: str = "sequoia"

    spec_keys = (set(), {"depth", "samples"})
    nested = False

    @classmethod
    def from_spec(cls, spec: Spec) -> Sequoia:
        depth = number(spec, "depth", integer=True, lo=1) if "depth" in spec.params else None
        samples = number(spec, "samples", integer=True, lo=2, default="4096")
        return cls(depth=depth, samples=samples, text=spec.text)

    def check_budget(self, law, P):
        super().check_budget(law, P)
        levels, ranks = 1 if self.depth is None else min(self.depth, P), min(law.vocab, P)
        if levels * P * ranks > SEQUOIA_STEPS_MAX:
            most = SEQUOIA_STEPS_MAX // (P * ranks)
            if self.depth is not None and most >= 1:
                fix = f"the largest depth that fits is {most}"
            else:  # one level: P x min(V, P) steps
                top = (
                    math.isqrt(SEQUOIA_STEPS_MAX)
                    if law.vocab >= math.isqrt(SEQUOIA_STEPS_MAX)
                    else (SEQUOIA_STEPS_MAX // law.vocab)
                )
                fix = f"the largest P that fits with no depth limit is {top}"
            raise BrwsimError(
                f"drafter {self.text!r} at P={P}: Sequoia's dynamic program would take {levels} levels x {P} nodes x "
                f"{ranks} ranks = {levels * P * ranks:.3g} steps, more than the {SEQUOIA_STEPS_MAX} (about a minute) "
                f"allowed; {fix}"
            )

    def paths(self, key, law, dlaw, P):
        # P nodes reach depth P at most: a deeper limit gives the same dynamic program, step for step
        depth = None if self.depth is None else min(self.depth, P)
        return sequoia_paths(key, law, dlaw, P, depth, self.samples)


def parse_drafter(spec: str | Drafter | None) -> Drafter:
    """``NAME[:key=value,...]`` with NAME one of :data:`DRAFTERS` (None is the oracle)."""
    if spec is None:
        return Oracle()
    if isinstance(spec, Drafter):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise BrwsimError(f"drafter must be NAME[:key=value,...] with NAME one of {', '.join(DRAFTERS)}; got {spec!r}")
    parsed = parse_spec(spec.strip(), "drafter", {n: c.spec_keys for n, c in DRAFTERS.items()}, kind="name")
    return DRAFTERS[parsed.family].from_spec(parsed)


def drafter_batches(key, d: Drafter, law: Law, dlaw: DraftLaw, P_list, trees: int, batch: int | None = None, lo=0):
    """The drafter's values of trees ``lo .. trees - 1``, batch by batch: yields ``(columns, start, values [n,
    len(columns)])``, ``start`` counted from ``lo``.

    ``columns`` index ``P_list``; tree n is item n of stream ``TREES`` of the
    run key, the same realised tree the oracle sees, so differences to the
    oracle are paired. A nested drafter builds its largest tree once for
    every P; the others (Sequoia) run once per P.
    """
    P_list = [int(p) for p in P_list]
    runs = [(max(P_list), list(range(len(P_list))))] if d.nested else [(p, [i]) for i, p in enumerate(P_list)]
    for P, cols in runs:
        B = min(batch or d.batch_size(law, P), trees - lo)
        for start in range(lo, trees, B):
            n = min(B, trees - start)
            t = d.trees(key, law, dlaw, tree_keys(key, start, B, Stream.TREES), P)
            pv = np.asarray(prefix_values(t), np.float64)[:n]
            yield cols, start - lo, pv[:, [P_list[c] - 1 for c in cols]]


def drafter_values(key, drafter, law, draft_law, P_list, trees: int, batch: int | None = None) -> np.ndarray:
    """Per-tree values E[L(T) | U] of the drafter's tree at each budget: float64 ``[trees, len(P_list)]``.

    Holds every tree's values (an experiment that pairs drafters tree by tree
    needs them); :func:`brwsim.simulate` keeps running sums instead.
    """
    d, law, dlaw = parse_drafter(drafter), parse_law(law), parse_draft_law(draft_law)
    dlaw.check(law)
    out = np.empty((trees, len(P_list)), np.float64)
    for cols, start, v in drafter_batches(key, d, law, dlaw, P_list, trees, batch):
        out[start : start + v.shape[0], cols] = v
    return out
