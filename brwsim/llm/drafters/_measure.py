"""Real drafters on the real token tree: one prompt's measurement (docs/drafters.md, "Real drafters"); the tree
builders are in :mod:`._builders`, values and the direct check in :mod:`._values`, the drafter's q as a context in
:mod:`._view`.

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
import threading
import time

import numpy as np

from ..measure import PromptResult, open_walks_oracle
from ..sources import Context, NodeQuery, Prompt, TempSource, Walker, WrappedWalker
from ..sources._query import answer_tensor
from ..sources.rounds import attributed, fork, phase
from ._base import Drafter, Proposer
from ._builders import EAGLE_DEPTH, EAGLE_TOP_K, ChainGuess, chain_nodes, eagle_nodes, sequoia_trees, topq_nodes
from ._calibrate import TargetSide, block_rows, device_divergences, row_divergences, target_side
from ._values import PromptCheck, prefix_values, speculative_check, target_logP, warm_target
from ._view import DraftView

BUILDERS = ("topq", "chain", "eagle", "sequoia")
PROPOSER_BUILDERS = ("lookup_tree", "lookup_chain")


# ---------------------------------------------------------------------------
# walks that also measure the drafters


class _StatsContext(Context):
    """The target's context whose walks record their rows; :meth:`divergences` then measures
    :func:`row_divergences` against a drafter view (asked for all the walks' nodes at once, not step by step).
    Where the target's walker and the drafter keep their rows on the model's device, the rows are recorded there
    and the divergences computed there (:func:`device_divergences`): no whole row crosses to the host."""

    def __init__(self, inner: Context, views: list):
        self.inner, self.views = inner, views
        self.steps: list[tuple[list, object]] = []  # (prefixes, target rows: NumPy, or a device tensor) per step
        self._side: TargetSide | None = None  # the recorded rows' own part of the divergences, once computed
        self._side_lock = threading.Lock()

    @property
    def root(self):
        return self.inner.root

    def logprobs(self, prefixes):
        return self.inner.logprobs(prefixes)

    def query(self, prefixes, q):
        return self.inner.query(prefixes, q)

    def transfer(self):
        return self.inner.transfer()

    def record(self, prefixes, rows) -> None:
        self.steps.append((list(prefixes), rows))

    def divergences(self, i: int) -> np.ndarray | None:
        """:func:`row_divergences` of drafter view ``i`` on every recorded step (its rows asked in one call)."""
        v = self.views[i]
        every = [p for prefixes, _ in self.steps for p in prefixes]
        if v is None or not every:
            return None
        if all(not isinstance(rows, np.ndarray) for _, rows in self.steps):
            first = v.device_rows(every[:1])  # (the prompt's row: the walks' first step)
            if first is not None and first.device == self.steps[0][1].device:
                v.query(every, NodeQuery())  # the drafter's rows evaluated together (nothing asked back)
                # taken a block at a time as the divergences read them: the rows are never copied together
                k = block_rows(first.device, len(every))
                lq = (v.device_rows(every[s : s + k]) for s in range(0, len(every), k))
                return device_divergences([rows for _, rows in self.steps], lq, self._target_side())
        lq, at, out = v.logprobs(every), 0, []
        for prefixes, rows in self.steps:
            out.append(row_divergences(self._host(rows), lq[at : at + len(prefixes)]))
            at += len(prefixes)
        return np.concatenate(out)

    def _target_side(self) -> TargetSide:
        """:func:`target_side` of the recorded rows, computed once for all the drafters (their jobs run in threads
        of their own: the first to ask computes it, in its own host time)."""
        with self._side_lock:
            rows = [rows for _, rows in self.steps]
            n = sum(len(prefixes) for prefixes, _ in self.steps)
            if self._side is None or self._side.n != n or self._side.block != block_rows(rows[0].device, n):
                self._side = target_side(rows)
            return self._side

    def _host(self, rows) -> np.ndarray:
        if isinstance(rows, np.ndarray):
            return rows
        a = rows.detach().cpu().numpy()
        moved = self.transfer()
        if moved is not None:
            moved.add(a.nbytes, a.shape[0])
        return a

    def walker(self, n: int) -> Walker:
        return _StatsWalker(self, n)


class _StatsWalker(WrappedWalker):
    """The target's walker, every step's whole rows recorded: on the model's device where the walker keeps them
    there (the walk's own query then answered there too), else on the host."""

    def __init__(self, ctx: _StatsContext, n: int):
        super().__init__(ctx, ctx.inner.walker(n))
        root = ctx.inner.device_rows([()])
        if root is None:
            ctx.record([()] * n, np.broadcast_to(ctx.root, (n, ctx.root.shape[0])))
        else:
            ctx.record([()] * n, root.expand(n, root.shape[1]))

    def rows(self, rows):
        self.ctx.record(self.prefixes, rows)
        return rows

    def query(self, tokens, q):
        rows = self.inner.device_step(tokens)
        if rows is None:
            return super().query(tokens, q)
        self._append(tokens)
        self.ctx.record(self.prefixes, rows)
        got = answer_tensor(rows, q)
        moved = self.ctx.transfer()
        if moved is not None:
            moved.add(got.host_bytes, len(tokens))
        return got


def q_surprisals(view: DraftView, tokens: list, depth: int) -> np.ndarray:
    """``[walks, depth]``: -log q of every sampled token of the target's walks (NaN after a walk ends)."""
    xq = np.full((len(tokens), depth), np.nan)
    nodes = [(w, d, tuple(t[:d]), t[d]) for w, t in enumerate(tokens) for d in range(len(t))]
    if nodes:
        at = np.array([(i, n[3]) for i, n in enumerate(nodes)], np.int64)
        lq = view.query([n[2] for n in nodes], NodeQuery(at=at)).at_logp
        for (w, d, _, _), x in zip(nodes, lq, strict=True):
            xq[w, d] = -float(x)
    return xq


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
    # the walks run on a context that records their rows, for the draft models' statistics along them (without
    # one, they ask the target only what they read: no whole row crosses to the host)
    walk_ctx = None
    if any(not isinstance(d, Proposer) for d in drafters):
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
    if built:
        with phase("values"):
            warm_target(tctx, [n for _, trees in built for n in [*trees.nodes.values(), *trees.sequoia.values()]])
    for d, (passes, trees) in zip(drafters, built, strict=True):
        with phase(f"drafter:{d.name}"):
            values = _values(tctx, trees, P_max)
        with phase(f"check:{d.name}"):
            check = _checked(trees.nodes, values, tctx, st, rng, P_max) if st.check_samples > 0 else None
        out.append(DraftedPrompt(d.name, values, trees.stats, trees.xi_q, trees.s_P, check, passes))
    return m.result(prompt, time.perf_counter() - t0), out
