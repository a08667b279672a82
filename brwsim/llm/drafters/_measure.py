"""Real drafters on the real token tree: tree builders, values, the direct check (docs/drafters.md, "Real drafters").

Per prompt (:func:`measure_prompt_drafters`), with the target and every
drafter at temperature T:

- the target's walks and the real oracle tree T*_P (as :mod:`brwsim.llm.measure`);
  along the walks, each drafter's cross-entropy, KL, TV, top-1 agreement,
  and the q-surprisal ``xi_q = -log q(Y_d)`` of every sampled token
  (for the imperfect-knowledge bound, docs/theory.md);
- per model drafter, trees chosen from its q alone: ``topq`` (exact
  best-first search by the drafter's path probability Q(v)), ``chain``
  (greedy by q), ``eagle`` (EAGLE-2/3's dynamic tree: top_k, depth,
  total_tokens = P) and ``sequoia`` (Sequoia's static tree from positional
  acceptance rates measured on held-out text); per proposer (``lookup``)
  its tree and its chain;
- the value of a tree = sum over its nodes of the target's path probability
  P(v) (docs/theory.md), at every P <= P_max for the nested builders;
- the direct check: real speculative decoding of one call (sample the
  target at T with its ordinary KV cache, accept the longest drafted path
  that matches) ``samples`` times; its mean accepted length must equal the
  tree's value up to Monte Carlo error.

X counts accepted draft tokens per verifier call (tokens per call = X + 1).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from ...drafters import sequoia_dp
from ..measure import PromptResult, open_walks_oracle, oracle_tree, row_stats, sample_rows
from ..sources import Context, Prompt, TempSource, Walker, temper
from ..sources.rounds import attributed, fork, phase
from ._base import Drafter, Proposer
from ._calibrate import row_divergences
from .lookup import LookupProposer

BUILDERS = ("topq", "chain", "eagle", "sequoia")
PROPOSER_BUILDERS = ("lookup_tree", "lookup_chain")
EAGLE_TOP_K, EAGLE_DEPTH = 10, 7


class DraftView(Context):
    """A draft context seen as a :class:`Context` at temperature T (rows cached as top-K lists for the builders)."""

    def __init__(self, dctx, T: float = 1.0, K: int = 128):
        self.dctx, self.T, self.K = dctx, float(T), K
        self.root = temper(dctx.logprobs([()])[0], self.T)
        self._tops: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def logprobs(self, prefixes):
        return temper(self.dctx.logprobs([tuple(p) for p in prefixes]), self.T)

    def known(self, prefix: tuple[int, ...]) -> bool | None:
        """Whether the prefix's row is already computed (free to ask); None: the draft context cannot tell."""
        known = self.dctx.known(prefix)
        return None if known is None else prefix in self._tops or known

    def tops(self, prefixes) -> list[tuple[np.ndarray, np.ndarray]]:
        """(token ids, log q) of each prefix's K most likely children, by decreasing q. The draft context may
        then drop those prefixes' whole rows (the builders need only these): a prompt in flight keeps
        kilobytes per drafted node instead of a row of the vocabulary."""
        need = [p for p in dict.fromkeys(tuple(p) for p in prefixes) if p not in self._tops]
        if need:
            ids, vals, _, _ = row_stats(self.logprobs(need), self.K)
            for j, p in enumerate(need):
                self._tops[p] = (ids[j], vals[j].astype(np.float64))
            self.dctx.forget(need)
        return [self._tops[tuple(p)] for p in prefixes]


# ---------------------------------------------------------------------------
# builders (each returns the tree's nodes as token paths, parents first; the first P are the tree at P)


def chain_nodes(view: DraftView, P: int, eos=frozenset(), guess=None, ahead: int = 4) -> list[tuple[int, ...]]:
    """The drafter's greedy path of P tokens (shorter if it ends in an end token).

    ``guess(tip, k)``: up to k guessed next tokens of the path below ``tip``; where the tip's row is not yet
    computed, the tip and its guessed continuation are asked together (one pass of a chain), and every guess
    that matches the drafter's own choice saves a pass. The path is the same with or without guesses."""
    out, tip = [], ()
    for _ in range(P):
        if tip and tip[-1] in eos:
            break
        if guess is not None and view.known(tip) is False:
            g = guess(tip, min(ahead, P - len(out) - 1))
            view.logprobs([tip + tuple(g[:i]) for i in range(len(g) + 1)])
        tip = tip + (int(view.tops([tip])[0][0][0]),)
        out.append(tip)
    return out


class ChainGuess:
    """Guessed greedy continuations for :func:`chain_nodes`: the next token after a prefix as first seen in
    earlier paths (other drafters' chains, the oracle tree's first children), else the context's own
    continuation after the last occurrence of its final tokens (prompt lookup)."""

    def __init__(self, ids, n: int = 3):
        self.ids, self.lookup, self.next = [int(t) for t in ids], LookupProposer(n), {}

    def add(self, nodes) -> None:
        for v in nodes:
            self.next.setdefault(tuple(v[:-1]), int(v[-1]))

    def __call__(self, tip: tuple[int, ...], k: int) -> list[int]:
        out, p = [], tuple(tip)
        while len(out) < k:
            if p not in self.next:
                conts = self.lookup.continuations(self.ids + list(p), k - len(out))
                return out + list(conts[0]) if conts else out
            out.append(self.next[p])
            p = p + (out[-1],)
        return out


def topq_nodes(view: DraftView, P: int, batch: int = 4, eos=frozenset()) -> tuple[list, np.ndarray]:
    """Top-P-by-Q: exact best-first search on the drafter's q; (nodes, their log Q)."""
    o = oracle_tree(view, P, batch=batch, eos=eos)
    return [tuple(p) for p in o.prefixes], o.logP[: len(o.prefixes)]


def eagle_nodes(view: DraftView, P: int, top_k: int = EAGLE_TOP_K, depth: int = EAGLE_DEPTH, eos=frozenset()):
    """EAGLE-2's ``topK_genrate`` on the real tree: a beam of ``top_k`` nodes by cumulative log q expanded
    ``depth`` times into ``top_k`` children each; the best P candidates by score (ties shallow first)."""
    cands = []  # (-score, depth, path)
    ids, vals = view.tops([()])[0]
    frontier = [(float(vals[i]), (int(ids[i]),)) for i in range(min(top_k, len(ids))) if np.isfinite(vals[i])]
    cands += [(-s, 1, p) for s, p in frontier]
    for d in range(depth):
        live = [(s, p) for s, p in frontier if p[-1] not in eos]
        if not live:
            break
        new = []
        for (s, p), (ci, cv) in zip(live, view.tops([p for _, p in live]), strict=True):
            new += [(s + float(cv[i]), p + (int(ci[i]),)) for i in range(min(top_k, len(ci))) if np.isfinite(cv[i])]
        cands += [(-s, d + 2, p) for s, p in new]
        frontier = sorted(new, key=lambda x: -x[0])[:top_k]
    cands.sort()
    return [p for _, _, p in cands[:P]]


def realize_rank_paths(view: DraftView, paths: Sequence[tuple[int, ...]], eos=frozenset()) -> list[tuple[int, ...]]:
    """Token paths of drafter-rank paths (rank 0 = the drafter's top child), parents first; paths below an
    end token, or past the drafter's K ranks, are dropped."""
    tok: dict[tuple[int, ...], tuple[int, ...]] = {(): ()}
    for depth in sorted({len(r) for r in paths}):
        level = [r for r in paths if len(r) == depth and r[:-1] in tok]
        parents = [tok[r[:-1]] for r in level]
        for r, par, (ci, _) in zip(level, parents, view.tops(parents), strict=True):
            if (par and par[-1] in eos) or r[-1] >= len(ci):
                continue
            tok[r] = par + (int(ci[r[-1]]),)
    return [tok[r] for r in paths if r in tok]


def sequoia_nodes(view: DraftView, rates, P: int, eos=frozenset()) -> list[tuple[int, ...]]:
    """Sequoia's best static tree of P nodes for positional acceptance rates ``rates`` (no depth limit)."""
    return realize_rank_paths(view, sequoia_dp(np.asarray(rates)[:P], P, None)[1], eos)


# ---------------------------------------------------------------------------
# values and the direct check


def target_logP(tctx: Context, nodes) -> np.ndarray:
    """log P(v) under the target (its ancestors' rows) of each node."""
    need = sorted({p[:d] for p in nodes for d in range(len(p))})
    rows = dict(zip(need, tctx.logprobs(need), strict=True)) if need else {}
    return np.array([sum(float(rows[p[:d]][p[d]]) for d in range(len(p))) for p in nodes])


def prefix_values(tctx: Context, nodes, P_max: int) -> np.ndarray:
    """E[X | prompt] of the first P nodes, P = 1..P_max (a smaller tree keeps its total)."""
    v = np.cumsum(np.exp(target_logP(tctx, nodes))) if nodes else np.zeros(0)
    if len(v) < P_max:
        v = np.concatenate([v, np.full(P_max - len(v), v[-1] if len(v) else 0.0)])
    return v[:P_max]


def speculative_check(tctx: Context, nodes, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted draft tokens of ``samples`` independent verifier calls on one drafted tree.

    Each call samples the target's continuation token by token through an
    ordinary (non-tree) KV cache and accepts while the continuation so far is
    a node of the tree; returns X per call (float64 ``[samples]``). Calls
    whose accepted paths are the same share one row of the KV cache (its
    rows are the distinct accepted paths, at most the tree's nodes at that
    depth); every call draws its own token.
    """
    tree = set(nodes)
    X = np.zeros(samples)
    if not tree:
        return X
    walker = tctx.walker(1)
    alive = np.arange(samples)
    paths: list[tuple[int, ...]] = [()]  # the walker's rows: distinct accepted paths
    row_of = np.zeros(samples, dtype=np.int64)  # each live call's row
    rows = tctx.root[None]
    while True:
        tok = sample_rows(rows, rng, row_of)
        nxt = [paths[r] + (int(t),) for r, t in zip(row_of, tok, strict=True)]
        keep = [j for j, v in enumerate(nxt) if v in tree]
        if not keep:
            return X
        X[alive[keep]] += 1
        alive = alive[keep]
        new = list(dict.fromkeys(nxt[j] for j in keep))
        at = {v: i for i, v in enumerate(paths)}
        walker.keep([at[v[:-1]] for v in new])
        rows = walker.step([v[-1] for v in new])
        paths, at = new, {v: i for i, v in enumerate(new)}
        row_of = np.array([at[nxt[j]] for j in keep], dtype=np.int64)


# ---------------------------------------------------------------------------
# walks that also measure the drafters


class _StatsContext(Context):
    """The target's context whose walks record their rows; :meth:`divergences` then measures
    :func:`row_divergences` against a drafter view (asked for all the walks' nodes at once, not step by step)."""

    def __init__(self, inner: Context, views: list):
        self.inner, self.views = inner, views
        self.root = inner.root
        self.steps: list[tuple[list, np.ndarray]] = []  # (prefixes, target rows) of each walk step

    def logprobs(self, prefixes):
        return self.inner.logprobs(prefixes)

    def record(self, prefixes, rows) -> None:
        self.steps.append((list(prefixes), rows))

    def divergences(self, i: int) -> np.ndarray | None:
        """:func:`row_divergences` of drafter view ``i`` on every recorded step (its rows asked in one call)."""
        v = self.views[i]
        every = [p for prefixes, _ in self.steps for p in prefixes]
        if v is None or not every:
            return None
        lq, at, out = v.logprobs(every), 0, []
        for prefixes, rows in self.steps:
            out.append(row_divergences(rows, lq[at : at + len(prefixes)]))
            at += len(prefixes)
        return np.concatenate(out)

    def walker(self, n: int) -> Walker:
        return _StatsWalker(self, n)


class _StatsWalker(Walker):
    def __init__(self, ctx: _StatsContext, n: int):
        super().__init__(ctx, n)
        self.inner = ctx.inner.walker(n)
        ctx.record([()] * n, np.broadcast_to(ctx.root, (n, ctx.root.shape[0])))

    def step(self, tokens):
        rows = self.inner.step(tokens)
        self.prefixes = [p + (int(t),) for p, t in zip(self.prefixes, tokens, strict=True)]
        self.ctx.record(self.prefixes, rows)
        return rows

    def keep(self, rows):
        self.inner.keep(rows)
        self.prefixes = [self.prefixes[i] for i in rows]


def q_surprisals(view: DraftView, tokens: list, depth: int) -> np.ndarray:
    """``[walks, depth]``: -log q of every sampled token of the target's walks (NaN after a walk ends)."""
    xq = np.full((len(tokens), depth), np.nan)
    nodes = [(w, d, tuple(t[:d]), t[d]) for w, t in enumerate(tokens) for d in range(len(t))]
    if nodes:
        rows = view.logprobs([n[2] for n in nodes])
        for (w, d, _, tok), row in zip(nodes, rows, strict=True):
            xq[w, d] = -float(row[tok])
    return xq


@dataclasses.dataclass(frozen=True)
class PromptCheck:
    """The direct check on one prompt: ``samples`` speculative calls on the ``builder``'s tree at budget ``P``; the
    mean X, its exact standard error under the path probabilities (``se``) and the sample one, the tree's value."""

    builder: str
    P: int
    samples: int
    mean: float
    se: float
    value: float
    sample_se: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class DraftedPrompt:
    """One drafter on one prompt."""

    name: str
    values: dict  # builder -> [P_max] E[X | prompt]
    walk_stats: np.ndarray | None  # [visited nodes, len(STATS)]
    xi_q: np.ndarray | None  # [walks, depth] q-surprisals along the target's walks
    s_P: np.ndarray | None  # [P_max] the top-Q tree's threshold -log Q of its P-th node
    check: PromptCheck | None  # the direct check (None: not run)
    passes: int  # drafter forward passes in this prompt's context


@dataclasses.dataclass
class DrafterSettings:
    T: float = 1.0
    walks: int = 16
    depth: int = 48
    seed: int = 0
    batch: int = 4
    check_samples: int = 200
    check_P: int = 32
    top_k: int = EAGLE_TOP_K
    eagle_depth: int = EAGLE_DEPTH
    heldout_tokens: int = 256  # held-out positions of each drafter's calibration


@dataclasses.dataclass
class _Trees:
    """One drafter's trees on one prompt, before the target values them."""

    nodes: dict  # builder -> nodes at P_max (Sequoia: its tree at the check's budget)
    sequoia: dict  # P -> Sequoia's tree at P (its trees are not nested)
    s_P: np.ndarray | None
    stats: np.ndarray | None = None
    xi_q: np.ndarray | None = None


def _model_trees(view: DraftView, P_max: int, rates, st: DrafterSettings, eos, guess=None) -> _Trees:
    """One model drafter's trees from its q alone (``guess``: the chain's guesses)."""
    topq, logQ = topq_nodes(view, P_max, st.batch, eos)
    nodes = {
        "topq": topq,
        "chain": chain_nodes(view, P_max, eos, guess),
        "eagle": eagle_nodes(view, P_max, st.top_k, st.eagle_depth, eos),
    }
    seq = sequoia_trees(view, rates, P_max, min(st.check_P, P_max), eos) if rates is not None else {}
    if rates is not None:
        nodes["sequoia"] = seq[min(st.check_P, P_max)]
    s_P = np.full(P_max, np.inf)
    s_P[: len(logQ)] = -logQ
    return _Trees(nodes, seq, s_P)


def _values(tctx, trees: _Trees, P_max: int) -> dict:
    """builder -> E[X | prompt] at P = 1..P_max (Sequoia: at its own trees' budgets, NaN between)."""
    values = {b: prefix_values(tctx, n, P_max) for b, n in trees.nodes.items() if b != "sequoia"}
    if trees.sequoia:
        seq = trees.sequoia
        values["sequoia"] = np.array([prefix_values(tctx, seq[P], P)[-1] if P in seq else np.nan
                                      for P in range(1, P_max + 1)])  # fmt: skip
    return values


def sequoia_trees(view: DraftView, rates, P_max: int, P_check: int, eos=frozenset()) -> dict:
    """P -> Sequoia's tree at P, for P a power of two or P_max (its trees are not nested) and the check's
    budget; the drafter's rows of all of them asked together, level by level."""
    Ps = sorted({P for P in range(1, P_max + 1) if P & (P - 1) == 0 or P == P_max} | {P_check})
    paths = {P: sequoia_dp(np.asarray(rates)[:P], P, None)[1] for P in Ps}
    realize_rank_paths(view, list(dict.fromkeys(r for P in Ps for r in paths[P])), eos)  # rows, in few passes
    return {P: realize_rank_paths(view, paths[P], eos) for P in Ps}


def warm_target(tctx: Context, trees) -> None:
    """Ask the target, in one call, for the rows every tree's values need (the ancestors of its nodes)."""
    need = sorted({v[:d] for nodes in trees for v in nodes for d in range(len(v))}, key=lambda n: (len(n), n))
    if need:
        tctx.logprobs(need)


def _checked(nodes: dict, values: dict, tctx, st: DrafterSettings, rng, P_max: int) -> PromptCheck:
    """The direct check on the builder with the largest value at the check budget: ``se`` is the exact standard
    error of the mean of X under the path probabilities (so ``z = (mean - value) / se`` tests the claim)."""
    P = min(st.check_P, P_max)
    best = max((b for b in nodes if np.isfinite(values[b][P - 1])), key=lambda b: values[b][P - 1])
    tree = nodes[best][:P]
    X = speculative_check(tctx, tree, st.check_samples, rng)
    Pv = np.exp(target_logP(tctx, tree)) if tree else np.zeros(0)
    value = float(Pv.sum())
    # the exact variance of X under the path probabilities: X^2 = sum over accepted v of (2 depth(v) - 1)
    var = float(np.sum(Pv * (2 * np.array([len(v) for v in tree]) - 1))) - value**2 if tree else 0.0
    se = float(np.sqrt(max(var, 0.0) / len(X)))
    sample_se = float(X.std(ddof=1) / np.sqrt(len(X))) if len(X) > 1 else float("nan")
    return PromptCheck(best, P, len(X), float(X.mean()), se, value, sample_se)


def measure_prompt_drafters(
    target, drafters: list[Drafter], prompt: Prompt, P_max: int, st: DrafterSettings, rates: list | None = None
) -> tuple[PromptResult, list[DraftedPrompt]]:
    """Walks, the oracle and every drafter's trees, values, statistics and direct check on one prompt.

    ``drafters``: draft models (a q) or proposers (paths only: a :class:`Proposer`);
    ``rates[i]``: drafter i's positional acceptance rates for Sequoia (None: no Sequoia tree).
    """
    t0 = time.perf_counter()
    attributed(reset=True)
    tsrc = TempSource(target, st.T) if st.T != 1.0 else target
    eos = target.eos_ids
    # the walks run on a context that records their rows, for the drafters' statistics along them
    walk_ctx = lambda c: _StatsContext(c, [None] * len(drafters))  # noqa: E731
    m = open_walks_oracle(tsrc, prompt, P_max, st.walks, st.depth, st.seed, st.batch, walk_ctx=walk_ctx)
    ids, tctx, w, o, rng, sctx = m.ids, m.ctx, m.walks, m.oracle, m.rng, m.walked_on
    walked = [tuple(t[: d + 1]) for t in (w.tokens if w is not None else []) for d in range(len(t))]

    def drafter_job(i: int, d: Drafter):
        def job() -> tuple:
            with phase(f"drafter:{d.name}"):
                if isinstance(d, Proposer):
                    return 0, _Trees({"lookup_tree": d.tree(ids, P_max), "lookup_chain": d.chain(ids, P_max)},
                                     {}, None)  # fmt: skip
                view = sctx.views[i] = DraftView(d.context(ids), st.T)
                guess = ChainGuess(ids)  # the chain's guesses: the oracle tree and the walks (the same for all)
                guess.add(o.prefixes)
                guess.add(walked)
                trees = _model_trees(view, P_max, rates[i] if rates else None, st, eos, guess)
                trees.stats = sctx.divergences(i)
                trees.xi_q = q_surprisals(view, w.tokens, st.depth) if w is not None else None
                sctx.views[i] = None  # the draft context's rows and keys are freed when the job ends
                return int(view.dctx.passes), trees

        return job

    # every drafter builds its trees in a thread of its own: in a concurrent run its passes join other prompts'
    built = fork([drafter_job(i, d) for i, d in enumerate(drafters)])
    out = []
    with phase("values"):
        warm_target(tctx, [n for _, trees in built for n in [*trees.nodes.values(), *trees.sequoia.values()]])
    for d, (passes, trees) in zip(drafters, built, strict=True):
        with phase(f"drafter:{d.name}"):
            values = _values(tctx, trees, P_max)
        with phase(f"check:{d.name}"):
            check = _checked(trees.nodes, values, tctx, st, rng, P_max) if st.check_samples > 0 else None
        out.append(DraftedPrompt(d.name, values, trees.stats, trees.xi_q, trees.s_P, check, passes))
    return m.result(prompt, time.perf_counter() - t0), out
