"""One task's summary: the oracle over prompts, the i.i.d. surrogate, the bounds (a :class:`TaskResult`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..._stats import MARGIN_Z, mean_ci95
from ...estimate import simulate
from ...laws import Pool
from ...laws._pool import PROB_TOL
from ...spine import curves_from_xi
from ...theory import bounds_from_curves, check_walks
from ..results import OracleRow, TaskResult
from ._walks import PromptResult


def save_pool(path: str, results: list[PromptResult]) -> tuple[float, float]:
    """Write the task's i.i.d. surrogate pool (see :class:`brwsim.laws.Pool`); return (mu, mu2)."""
    logp = np.concatenate([r.walks.pool_logp for r in results])
    H = np.concatenate([r.walks.H[np.isfinite(r.walks.H)] for r in results])
    M2 = np.concatenate([r.walks.M2[np.isfinite(r.walks.M2)] for r in results])
    if logp.shape[0] != H.shape[0]:  # pragma: no cover - bookkeeping invariant
        raise RuntimeError("pool rows and moments disagree")
    np.savez(path, logp=np.maximum(logp, -1e30).astype(np.float32), entropy=H, m2=M2)
    return float(H.mean()), float(M2.mean())


def pool_law(task: str, results: list[PromptResult]) -> tuple[Pool, float, float]:
    """(the task's i.i.d. surrogate as an in-memory :class:`brwsim.laws.Pool`, mu, mu2); the same law
    :func:`save_pool` writes and ``pool:path=FILE`` reads back (float32 rows, float64 moments)."""
    logp = np.concatenate([r.walks.pool_logp for r in results])
    H = np.concatenate([r.walks.H[np.isfinite(r.walks.H)] for r in results])
    M2 = np.concatenate([r.walks.M2[np.isfinite(r.walks.M2)] for r in results])
    rows = np.maximum(logp, -1e30).astype(np.float32).astype(np.float64)
    truncated = bool(np.any(np.abs(np.exp(rows).sum(axis=1) - 1) > PROB_TOL))
    law = Pool(
        logp=jnp.asarray(-np.sort(-rows, axis=1), jnp.float32),
        entropy=jnp.asarray(H, jnp.float32),
        m2=jnp.asarray(M2, jnp.float32),
        truncated=truncated,
        path=f"{task} (in memory)",
    )
    return law, float(H.mean()), float(M2.mean())


def _surrogate(task, results, P_list, surrogate_trees, seed, pool_path):
    """{P: (surrogate mean, ci95)}: the task's i.i.d. surrogate pool, simulated (saved if ``pool_path``)."""
    if pool_path is not None:
        save_pool(pool_path, results)
    law, _, _ = pool_law(task, results)
    sim = simulate(law, P=P_list, trees=surrogate_trees, seed=seed, bounds=False, progress=False)
    return {res.P: (res.stat.mean, res.stat.ci95) for res in sim.results}


def prompt_moments(results: list[PromptResult]) -> dict:
    """mu and mu_2 of a task: each the mean over prompts of the prompt's own mean along its walks, with the
    Student-t 95% half-width of those per-prompt means (one estimator for the centre and its interval; every
    prompt weighs the same, as in the oracle's mean over prompts). The surrogate pool's own moments pool every
    visited node instead, so prompts with longer walks weigh more there."""
    mu, mu_ci = mean_ci95([float(np.nanmean(r.walks.H)) for r in results])
    mu2, mu2_ci = mean_ci95([float(np.nanmean(r.walks.M2)) for r in results])
    return {"mu": mu, "mu_ci95": mu_ci, "mu2": mu2, "mu2_ci95": mu2_ci}


def _walk_summary(task, results, P_list, surrogate_trees, seed, pool_path, margin_z):
    """(walk fields, surrogate per P, bounds per P) of a task whose prompts were walked."""
    surrogate = _surrogate(task, results, P_list, surrogate_trees, seed, pool_path)
    w = prompt_moments(results)
    mu, mu2 = w["mu"], w["mu2"]
    w["spine_nodes"] = int(sum(np.isfinite(r.walks.H).sum() for r in results))
    w["walks"] = int(sum(r.walks.xi.shape[0] for r in results))
    xi = np.concatenate([r.walks.xi for r in results])
    check_walks(xi.shape[0])
    curves = curves_from_xi(xi, P_max=max(P_list))
    bounds = {b.P: b for b in bounds_from_curves(curves, P_list, mu, mu2, iid=False, margin_z=margin_z)}
    return w, surrogate, bounds


def summarize_task(
    task: str,
    results: list[PromptResult],
    P_list: list[int],
    surrogate_trees: int = 2000,
    seed: int = 0,
    pool_path: str | None = None,
    margin_z: float = MARGIN_Z,
) -> TaskResult:
    """One task's :class:`~brwsim.llm.results.TaskResult` (see docs/llm.md).

    Per P: the real oracle's mean over prompts with its 95% CI, the i.i.d.
    surrogate, and the :class:`brwsim.theory.Bounds` of the task's walks (a
    real model is not i.i.d.: only ``dual`` and ``splitting`` are bounds; the
    closed forms are reported as ``iid_only``).
    """
    P_list = sorted(set(P_list))
    walks, surrogate, bounds = {}, {}, {}
    if all(r.walks is not None for r in results):
        walks, surrogate, bounds = _walk_summary(task, results, P_list, surrogate_trees, seed, pool_path, margin_z)
    rows = []
    for P in P_list:
        mean, ci = mean_ci95([r.oracle.values[P - 1] for r in results])
        sur = surrogate.get(P, (None, None))
        rows.append(OracleRow(P, mean, ci, *sur, bounds[P].to_dict() if P in bounds else {}))
    evaluated = int(sum(r.oracle.evaluated for r in results))
    passes = int(sum(r.oracle.passes for r in results))
    return TaskResult(task, len(results), rows, evaluated, passes, walks, pool_path if walks else None)
