"""The hostile-input harness (tools/hostile.py) judges runs as documented: exact checks, refusals, signals."""

from __future__ import annotations

import importlib.util
import json
import random
import signal
import sys
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("hostile", Path(__file__).parents[1] / "tools" / "hostile.py")
hostile = importlib.util.module_from_spec(SPEC)
sys.modules["hostile"] = hostile  # dataclasses look their module up
SPEC.loader.exec_module(hostile)


def _r(code=0, out="", err="", killed=None):
    return {"code": code, "out": out, "err": err, "killed": killed, "seconds": 0.1, "peak": 0}


def _sim(mean, dual, dual_se=0.0):
    row = {"P": 1, "mean": mean, "bounds": {"dual": dual, "renewal": 1.0}, "dual_se": dual_se}
    return json.dumps({"results": [row]})


def test_exact_fixed_is_the_sum_of_the_largest_path_probabilities():
    # (0.6, 0.3, 0.1): paths 0.6, 0.36, 0.3, 0.216 -> 0.6, 1.26, 1.476 at P = 1, 3, 4 (by hand)
    assert hostile.exact_fixed([0.6, 0.3, 0.1], [1, 3, 4]) == pytest.approx([0.6, 1.26, 1.476], abs=1e-12)


def test_judge_exact_law():
    case = hostile.Case("laws", ["simulate", "--json"], expect="valid", exact=[0.6])
    assert hostile.judge(case, _r(out=_sim(0.6000000238, 0.6000001))) == "ok"
    # a deterministic walk's bound below the exact value is wrong by any amount; a mean off the exact value too
    assert hostile.judge(case, _r(out=_sim(0.6000000238, 0.599999994))) == "wrong"
    assert hostile.judge(case, _r(out=_sim(0.61, 0.7))) == "wrong"
    # a Monte Carlo bound may fall below by chance, but not by 4 standard errors
    assert hostile.judge(case, _r(out=_sim(0.6, 0.599, dual_se=0.001))) == "ok"
    assert hostile.judge(case, _r(out=_sim(0.6, 0.59, dual_se=0.001))) == "wrong"
    assert hostile.judge(case, _r(out='{"results": [{"mean": NaN}]}')) == "wrong"  # not strict JSON


def test_judge_refusals_and_failures():
    valid = hostile.Case("laws", ["laws"], expect="valid")
    either = hostile.Case("laws", ["laws"])
    one = "brwsim: error: V must be <= 10^8\n"
    assert hostile.judge(either, _r(2, err=one)) == "refused"
    assert hostile.judge(valid, _r(2, err=one)) == "false_refusal"
    assert hostile.judge(either, _r(2, err="Loading weights: 100%\n" + one)) == "noisy"
    assert hostile.judge(either, _r(2, err="brwsim plan: error: argument --P: invalid\n")) == "refused"  # argparse
    assert hostile.judge(either, _r(2, err="error: x\n")) == "noisy"
    assert hostile.judge(either, _r(1, err="Traceback (most recent call last):\n  x\nValueError: y\n")) == "traceback"
    assert hostile.judge(either, _r(1, err="jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED")) == "blowup"
    assert hostile.judge(either, _r(killed="hang")) == "hang"


def test_judge_draft_laws_and_warnings():
    """A drafter's E[X] on the fixed law must lie in (0, the oracle's exact value]; a success that prints a
    warning is noisy."""
    rng = random.Random(0)
    cases = [hostile.case_draft_laws(rng) for _ in range(20)]
    assert {c.argv[c.argv.index("--draft-law") + 1] for c in cases} <= set(hostile.DRAFT_LAWS)
    case = cases[0]

    def rows(m1, m4):
        return json.dumps({"results": [{"P": 1, "mean": m1, "se": 0.0}, {"P": 4, "mean": m4, "se": 0.0}]})

    assert hostile.judge(case, _r(out=rows(0.6, 1.3056))) == "ok"
    assert hostile.judge(case, _r(out=rows(0.0, 0.0))) == "wrong"  # every log q -inf: nothing accepted
    assert hostile.judge(case, _r(out=rows(0.6, 1.6))) == "wrong"  # above the optimal tree's 1.476
    warned = "lax.py:5304: RuntimeWarning: overflow encountered in cast\n  out = out.astype(new_dtype)\n"
    assert hostile.judge(case, _r(out=rows(0.6, 1.3056), err=warned)) == "noisy"


def test_judge_signals():
    case = hostile.Case("signals", ["simulate"], send=(signal.SIGTERM, 1.0))
    assert hostile.judge(case, _r(143, out="{}", err="brwsim: interrupted by SIGTERM\n")) == "stopped"
    assert hostile.judge(case, _r(-15)) == "traceback"  # killed silently
    assert hostile.judge(case, _r(143, err="a\nb\n")) == "noisy"
    pending = "brwsim: SIGTERM: stopping after the computation in progress (it cannot be cut short); ...\n"
    assert hostile.judge(case, _r(143, out="{}", err=pending + "brwsim: interrupted by SIGTERM\n")) == "stopped"


def test_cases_are_a_function_of_the_seed(tmp_path):
    def argv(seed):
        rng = random.Random(seed)
        return [hostile.CLASSES[c](rng, str(tmp_path)).argv for c in ("laws", "drafters", "plan")]

    first = argv(3)
    assert argv(3) == first
    assert argv(4) != first
