"""Progress without a terminal: nothing for a short run, then lines with the trees done and an estimate of the
time left, from the rate after the first finished batch."""

from __future__ import annotations

import os

from brwsim import estimate
from brwsim._devices import default_devices, resolve_devices
from brwsim.oracle import _native

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_run_without_a_terminal_reports_trees_and_time_left(monkeypatch, capsys):
    clock = iter([0.0, 5.0, 40.0, 70.0, 185.0, 210.0])  # __init__, then one reading per update
    monkeypatch.setattr(estimate.time, "monotonic", lambda: next(clock))
    bar = estimate._SlowLines(100, "dirichlet P=256")
    bar.update(10)  # t = 5: the first batch (its compilation inside): the rate starts here
    bar.update(10)  # t = 40: past FIRST (30 s): 20 of 100, 10 trees in 35 s -> 80 trees in 280 s, 4.7 min
    bar.update(10)  # t = 70: within EVERY (60 s) of the last line: nothing
    bar.update(10)  # t = 185: 40 of 100, 30 trees in 180 s -> 60 trees in 360 s
    bar.update(60)  # t = 210: done: no line
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "brwsim: progress: dirichlet P=256: 20 of 100 trees after 40 s; about 5 min left (estimate)",
        "brwsim: progress: dirichlet P=256: 40 of 100 trees after 3 min; about 6 min left (estimate)",
    ]


def test_a_short_run_prints_nothing(monkeypatch, capsys):
    clock = iter([0.0, 1.0, 2.0, 29.0])
    monkeypatch.setattr(estimate.time, "monotonic", lambda: next(clock))
    bar = estimate._SlowLines(30, "fixed P=4")
    for _ in range(3):
        bar.update(10)
    assert capsys.readouterr().err == ""


def test_a_heavy_drawn_law_run_first_says_how_long_it_will_take(monkeypatch, capsys):
    monkeypatch.setattr(estimate, "HEAVY_VARIATES", 1000)  # a small law made "heavy": 3 trees x 5 rows x 100
    monkeypatch.setattr(estimate, "_node_seconds", lambda law, K, kernel: {"jax": 2.0, "native": 0.25}[kernel])
    monkeypatch.setattr(estimate, "native_built", lambda: True)  # the hint's kernel as if built (no compile here)
    devs = resolve_devices(default_devices())
    n = min(len(devs) if devs else 1, len(os.sched_getaffinity(0)))  # the run's 15 nodes over the cores it may use
    where = "one device" if n == 1 else f"{n} devices"
    estimate.simulate("dirichlet:V=100,alpha=0.5", P=[4], trees=3, seed=0, bounds=False)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("brwsim: progress: ")]
    head = (
        "brwsim: progress: oracle P=4: about 15 nodes of 100 variates; one node took 2 s here: the run about "
        f"{estimate._duration(30 / n)} on {where} (estimate)"
    )
    if _native.available():  # the JAX kernel's run offers the native kernel, timed too
        fast = estimate._duration(3.75 / n)
        head += f"; --kernel native (a stream of its own, the same law): 0.25 s a node, about {fast}"
    assert line == head
    monkeypatch.setattr(estimate, "native_built", lambda: False)  # never built: no hint, no build for it
    estimate.simulate("dirichlet:V=100,alpha=0.5", P=[4], trees=3, seed=0, bounds=False)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("brwsim: progress: ")]
    assert line.endswith(f"on {where} (estimate)")
    if _native.available():
        estimate.simulate("dirichlet:V=100,alpha=0.5", P=[4], trees=3, seed=0, bounds=False, kernel="native")
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("brwsim: progress: ")]
        assert line.endswith(
            f"one node took 0.25 s here: the run about {estimate._duration(3.75 / n)} on {where} (estimate)"
        )
    estimate.simulate("dirichlet:V=100,alpha=0.5", P=[4], trees=3, seed=0, bounds=False, progress=False)
    estimate.simulate("fixed:probs=0.6/0.4", P=[4], trees=3, seed=0, bounds=False)  # indexed: nothing drawn
    monkeypatch.setattr(estimate, "HEAVY_VARIATES", 1500)  # exactly at the threshold: not heavy
    estimate.simulate("dirichlet:V=100,alpha=0.5", P=[4], trees=3, seed=0, bounds=False)
    assert capsys.readouterr().err == ""


def test_a_node_timed_for_the_estimate_is_a_real_oracle_call():
    """One tree of one node, compiled and timed: a positive time for each kernel, for a drawn and a Markov law."""
    from brwsim.laws import parse_law

    kernels = ("jax", "native") if _native.available() else ("jax",)  # (no compiler: native would run JAX)
    for spec in ["dirichlet:V=100,alpha=0.5", os.path.join(ROOT, "examples", "two_state.json")]:
        for kernel in kernels:
            t = estimate._node_seconds(parse_law(spec), 4, kernel)
            assert t is not None and 0 < t < 30, (spec, kernel, t)
