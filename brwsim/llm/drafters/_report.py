"""Per-task summaries of real drafters (the ``drafters`` objects of ``brwsim llm --drafter``) and their table.

Every mean carries its 95% Student-t half-width over prompts. ``best`` is, per
P, the builder with the largest mean (chosen on the same prompts it is scored
on: optimistic, shown for context only). ``fraction_of_oracle`` uses the
builder fixed in advance (:data:`FIXED_BUILDERS`: top-P-by-Q for a drafter
with a q, the lookup tree for a proposer), so no selection touches the scored
prompts. The imperfect-knowledge columns (docs/theory.md, "Imperfect
knowledge"): ``ik_bound`` = C_q(s_P) from the target's walks (the estimate
plus its margin); C_q(s_P) equals the top-P-by-Q value up to ties, an
identity, so this is a consistency check of the valuation, not a bound on
anything else (valid only if no walk was truncated below the threshold) and ``ik_lorden`` = mean s_P / mu_q + mu_2q /
mu_q^2 - 1, the cross-entropy form (a prediction: rigorous only for i.i.d.
steps and a fixed threshold).
"""

from __future__ import annotations

import math

import numpy as np

from ..._stats import Z95, mean_ci95
from ...theory import lorden, threshold_bound
from ..results import CheckResult, DrafterResult, DrafterRow, TaskResult
from ._calibrate import STATS
from ._measure import DraftedPrompt


def _stats(results: list[DraftedPrompt]) -> dict:
    out: dict = {}
    per = [r.walk_stats for r in results if r.walk_stats is not None and len(r.walk_stats)]
    for s, name in enumerate(STATS):
        if per:
            out[name], out[name + "_ci95"] = mean_ci95([float(np.mean(w[:, s])) for w in per])
    xq = [r.xi_q[np.isfinite(r.xi_q)] for r in results if r.xi_q is not None]
    if xq and sum(len(x) for x in xq):
        x = np.concatenate(xq)
        out["mu_q"], out["mu2_q"] = float(x.mean()), float((x**2).mean())
    return out


def _check(results: list[DraftedPrompt]) -> CheckResult | None:
    """The direct check pooled over prompts: mean X of all calls vs the mean value, and its z; beside it the fixed
    builder's value at the check's P (the checked tree is each prompt's best builder there, not always that one)."""
    cs = [r.check for r in results if r.check]
    if not cs:
        return None
    n = len(cs)
    mean = float(np.mean([c.mean for c in cs]))
    value = float(np.mean([c.value for c in cs]))
    se = math.sqrt(sum(c.se**2 for c in cs)) / n
    z = (mean - value) / se if se > 0 else (0.0 if mean == value else math.inf)
    builders = sorted({c.builder for c in cs})
    max_z = max(abs(c.mean - c.value) / c.se if c.se > 0 else 0.0 for c in cs)
    calls = int(sum(c.samples for c in cs))
    fixed = fixed_builder(results[0].values)
    fv, fc = mean_ci95([r.values[fixed][cs[0].P - 1] for r in results])
    return CheckResult(cs[0].P, builders, calls, mean, Z95 * se, value, z, max_z, fixed, fv, fc)


def _ik(results: list[DraftedPrompt], P: int, stats: dict) -> dict:
    pairs = [(r.xi_q, float(r.s_P[P - 1])) for r in results if r.xi_q is not None and r.s_P is not None]
    if not pairs or any(not math.isfinite(s) for _, s in pairs):
        return {}
    b = threshold_bound(pairs)
    out = {"ik_bound": b["upper"], "ik_bound_point": b["point"], "ik_bound_se": b["se"]}
    out["ik_truncated_walks"] = b["truncated_walks"]
    out["s_P"] = float(np.mean([s for _, s in pairs]))
    if "mu_q" in stats:
        out["ik_lorden"] = lorden(out["s_P"], stats["mu_q"], stats["mu2_q"])
    return out


FIXED_BUILDERS = ("topq", "lookup_tree")  # the scored builder: the first of these a drafter has


def fixed_builder(builders) -> str:
    """The builder a drafter is scored with, fixed before any prompt is measured: top-P-by-Q (the tree the
    imperfect-knowledge identity values) for a drafter with a q, the lookup tree for a proposer."""
    return next((b for b in FIXED_BUILDERS if b in builders), list(builders)[0])


def _row(results: list[DraftedPrompt], oracle, builders, P: int, stats: dict) -> DrafterRow:
    values = {}
    for b in builders:
        vals = [r.values[b][P - 1] for r in results]
        if all(np.isfinite(vals)):
            values[b] = mean_ci95(vals)
    best = fr = None
    if values:
        best = max(values, key=lambda b: values[b][0])
        fixed = fixed_builder(builders)
        pairs = zip(results, oracle, strict=True)
        fr = mean_ci95([r.values[fixed][P - 1] / o[P - 1] if o[P - 1] > 0 else math.nan for r, o in pairs])
    return DrafterRow(P, values, best, *(fr or (None, None)), _ik(results, P, stats))


def summarize_drafter_task(
    results: list[DraftedPrompt], oracle: list[np.ndarray], P_list, info: dict, fraction: float | None = None
) -> DrafterResult:
    """One drafter on one task (``results`` and ``oracle`` per prompt, same order); ``fraction``: the drafter's
    modelled pass cost relative to a target decoding step."""
    P_list = sorted(set(int(P) for P in P_list))
    builders = list(results[0].values)
    stats = _stats(results)
    rows = [_row(results, oracle, builders, P, stats) for P in P_list]
    passes = int(sum(r.passes for r in results))
    return DrafterResult(results[0].name, len(results), info, builders, stats, rows, _check(results), passes, fraction)


def print_drafters(t: TaskResult, out) -> None:
    """Table lines for one task's drafters (under ``brwsim llm``'s own table)."""
    oracle = {r.P: r.mean for r in t.rows}
    nan = (math.nan, math.nan)
    for d in t.drafters:
        st = d.stats
        line = f"  drafter {d.name}"
        if "kl" in st:
            line += (
                f": H(p,q) = {st['cross_entropy']:.3f} +- {st['cross_entropy_ci95']:.3f}, KL = {st['kl']:.3f} "
                f"+- {st['kl_ci95']:.3f}, TV = {st['tv']:.3f}, top-1 agreement {st['top1_agree']:.3f} "
                "(nats, along the target's walks)"
            )
        print(line, file=out)
        heads = list(d.builders) + ["frac", "ik_bound:topq", "ik_lorden"]
        print(f"{'P':>5} {'oracle':>8} " + " ".join(f"{h:>12}" for h in heads), file=out)
        for r in d.rows:
            cells = [r.values.get(b, nan)[0] for b in d.builders]
            frac = math.nan if r.fraction_of_oracle is None else r.fraction_of_oracle
            cells += [frac, r.ik.get("ik_bound", math.nan), r.ik.get("ik_lorden", math.nan)]
            print(f"{r.P:>5} {oracle[r.P]:>8.3f} " + " ".join(f"{c:>12.3f}" for c in cells), file=out)
        c = d.check
        if c:
            fixed = math.nan if c.fixed_value is None else c.fixed_value
            print(
                f"  direct check ({c.calls} speculative calls, P = {c.P}, each prompt's best builder: "
                f"{'/'.join(c.builders)}): {c.accepted_per_call:.3f} +- {c.accepted_per_call_ci95:.3f} "
                f"accepted per call vs path-probability value {c.path_probability_value:.3f} (z = {c.z:+.2f}); "
                f"the fixed builder ({c.fixed_builder}) at P = {c.P}: {fixed:.3f}",
                file=out,
            )
    if t.drafters:
        print(
            "  ik_bound: C_q(s_P), equal to the topq value up to ties (a consistency check, not a bound); "
            "ik_lorden: prediction (i.i.d. steps); frac: the fixed builder (topq, or lookup_tree) / oracle; "
            "sequoia at powers of two only",
            file=out,
        )
