"""The Monte Carlo driver: keys, batches, means and confidence intervals.

Tree ``n`` (0-based) of a run with seed ``S`` has key
``fold_in(fold_in(key(S), 0), n)``; its sampled-continuation check uses
``fold_in(fold_in(key(S), 1), n)``. A run's numbers therefore depend on the
seed and the number of trees only, never on the batch size: batches are
padded to a fixed size (so a run compiles once) and the padding is dropped.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np

from . import tree as tree_mod
from .errors import BrwsimError, check_P_list, check_positive_int
from .laws import Law, Pool, law_spec, parse_law
from .lowering import with_unrolled_threefry

CONVENTION = "X = accepted draft tokens per verifier call (tokens per call = X + 1)"
Z95 = 1.959963984540054


@dataclasses.dataclass(frozen=True)
class Stat:
    """A Monte Carlo mean with its standard error (95% CI = 1.96 se)."""

    mean: float
    se: float
    n: int

    @property
    def ci95(self) -> float:
        return Z95 * self.se

    @classmethod
    def of(cls, x) -> Stat:
        x = np.asarray(x, np.float64)
        n = x.shape[0]
        se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
        return cls(float(x.mean()), se, n)


def tree_keys(seed: int, start: int, count: int, stream: int = 0):
    """Keys of trees ``start .. start + count - 1`` of the run with this seed."""
    base = jax.random.fold_in(jax.random.key(seed), stream)
    idx = jnp.arange(start, start + count, dtype=jnp.uint32)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(idx)


def default_devices():
    """``"all"`` when the default backend is the CPU with several devices (one per core), else None.

    The command line sets up one XLA CPU device per core before jax starts
    (:func:`brwsim.cli._one_cpu_device_per_core`); a plain ``import jax`` has
    one CPU device, and accelerators are used one unless ``devices`` says more.
    """
    if jax.default_backend() == "cpu" and jax.device_count() > 1:
        return "all"
    return None


def _progress(total: int, desc: str, enabled: bool | None):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    disable = (not sys.stderr.isatty()) if enabled is None else (not enabled)
    return tqdm(total=total, desc=desc, unit="tree", disable=disable, file=sys.stderr, leave=False)


def oracle_values(
    law: Law,
    P_max: int,
    trees: int,
    seed: int,
    batch: int | None = None,
    check: bool = False,
    progress: bool | None = None,
    devices=None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-tree values of the oracle trees T*_1 .. T*_Pmax.

    Returns ``values`` (float64 [trees, P_max]; column ``P - 1`` is
    E[L(T*_P) | U] of each tree) and, with ``check``, the accepted lengths
    of one sampled continuation per tree through T*_Pmax (int [trees]).
    ``devices`` (``"all"``, a count or a list) shards each batch of trees over
    several devices; tree n's key depends on n only, so the values are those
    of one device.
    """
    K = min(law.vocab, P_max)
    devs = tree_mod.resolve_devices(default_devices() if devices is None else devices)
    n_dev = len(devs) if devs else 1
    B = min(batch or tree_mod.default_batch(law, P_max) * n_dev, trees)
    B = -(-B // n_dev) * n_dev  # equal shares; padding trees are dropped
    values = np.empty((trees, P_max), np.float64)
    accepted = np.empty((trees,), np.int64) if check else None
    bar = _progress(trees, f"oracle P={P_max}", progress)
    for start in range(0, trees, B):
        n = min(B, trees - start)
        keys = tree_keys(seed, start, B)
        t = tree_mod.oracle_batch(law, keys, P=P_max, K=K, devices=devs)
        values[start : start + n] = np.asarray(tree_mod.prefix_values(t), np.float64)[:n]
        if check:
            wk = tree_keys(seed, start, B, stream=1)
            acc = tree_mod.sample_accepted_batch(law, keys, t, wk, K=K)
            accepted[start : start + n] = np.asarray(acc)[:n]
        if bar is not None:
            bar.update(n)
    if bar is not None:
        bar.close()
    tree_mod.release_scratch()
    return values, accepted


@dataclasses.dataclass
class PResult:
    P: int
    stat: Stat
    check: Stat | None = None
    bounds: dict[str, float] | None = None

    def to_dict(self) -> dict:
        d = {"P": self.P, "mean": self.stat.mean, "ci95": self.stat.ci95, "se": self.stat.se}
        if self.check is not None:
            d["check_mean"] = self.check.mean
            d["check_ci95"] = self.check.ci95
        if self.bounds is not None:
            d["bounds"] = self.bounds
        return d


@dataclasses.dataclass
class SimulationResult:
    """What :func:`simulate` returns; ``to_dict()`` is the CLI's JSON object."""

    law: str
    mu: float
    mu2: float
    mu_se: float
    mu2_se: float
    trees: int
    seed: int
    results: list[PResult]
    drafter: str = "oracle"
    seconds: float = 0.0
    draft: dict | None = None  # non-oracle drafters: draft law and its divergences

    def to_dict(self) -> dict:
        extra = {"draft": self.draft} if self.draft is not None else {}
        return {
            "law": self.law,
            "convention": CONVENTION,
            "drafter": self.drafter,
            "mu": self.mu,
            "mu2": self.mu2,
            "mu_se": self.mu_se,
            "mu2_se": self.mu2_se,
            "trees": self.trees,
            "seed": self.seed,
            "results": [r.to_dict() for r in self.results],
        } | extra

    def __getitem__(self, P: int) -> PResult:
        for r in self.results:
            if r.P == P:
                return r
        raise KeyError(P)


@with_unrolled_threefry
def simulate(
    law: str | Law,
    P: int | Iterable[int] = (1, 4, 16, 64),
    trees: int = 1000,
    seed: int = 0,
    batch: int | None = None,
    check: bool = False,
    bounds: bool = True,
    progress: bool | None = None,
    drafter: str | None = None,
    draft_law: str | None = None,
    devices=None,
) -> SimulationResult:
    """E[X] of the oracle tree at each budget P, with 95% confidence intervals.

    ``drafter`` (``NAME[:key=value,...]``, default ``oracle``) and ``draft_law``
    (the drafter's q, default ``exact``) select another drafter: see
    :mod:`brwsim.drafters` and :mod:`brwsim.draftlaws`. ``devices`` (``"all"``
    or a count) shards the oracle's trees over devices (same results).

    ``law`` is a SPEC string (see :func:`brwsim.laws.parse_law`) or a law
    object. X counts accepted draft tokens per verifier call; tokens per call
    are X + 1. With ``check`` each result also carries the mean accepted
    length of one simulated target continuation per tree, an independent
    estimator of the same quantity.
    """
    law_obj = parse_law(law)
    spec = law if isinstance(law, str) else law_spec(law_obj)
    P_list = check_P_list(P)
    trees = check_positive_int("trees", trees)
    seed = check_positive_int("seed", seed, minimum=0)
    if batch is not None:
        batch = check_positive_int("batch", batch)
    if isinstance(law_obj, Pool) and law_obj.truncated and max(P_list) > law_obj.vocab:
        raise BrwsimError(
            f"pool {law_obj.path!r} keeps {law_obj.vocab} entries per row, but P={max(P_list)} may need "
            f"{max(P_list)} children of one node; save more entries per row or use P <= {law_obj.vocab}"
        )
    t0 = time.perf_counter()
    P_max = max(P_list)
    draft = None
    if drafter is None or drafter.strip().lower() == "oracle":
        if draft_law is not None:
            raise BrwsimError("--draft-law applies to a drafter other than the oracle; add e.g. --drafter topq")
        values, accepted = oracle_values(law_obj, P_max, trees, seed, batch, check, progress, devices=devices)
    else:
        from . import drafters

        values, accepted, draft = drafters.simulate_values(
            drafter, law_obj, draft_law, P_list, trees, seed, batch, check
        )
    from . import theory

    mom = theory.moments(law_obj, seed=seed)
    results = []
    for p in P_list:
        res = PResult(P=p, stat=Stat.of(values[:, p - 1]))
        results.append(res)
    if check:
        # the check walks the largest tree only
        results[-1].check = Stat.of(accepted)
    if bounds:
        theory.attach_bounds(law_obj, results, mom, seed=seed)
    return SimulationResult(
        law=spec,
        mu=mom.mu,
        mu2=mom.mu2,
        mu_se=mom.mu_se,
        mu2_se=mom.mu2_se,
        trees=trees,
        seed=seed,
        results=results,
        seconds=time.perf_counter() - t0,
        drafter=draft["drafter"] if draft else "oracle",
        draft=draft,
    )
