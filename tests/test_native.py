"""The native CPU oracle kernel: the JAX kernel's and the reference search's trees, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from brwsim import oracle as O
from brwsim import simulate, tree_keys
from brwsim.cli import main
from brwsim.errors import BrwsimError
from brwsim.laws import fixed_law, parse_law
from brwsim.oracle import _native
from brwsim.testing import stored_rows, table_law

# BRWSIM_REQUIRE_NATIVE=1 (tools/mutation_check.py native): a library that does not build fails, not skips, this file
REQUIRED = os.environ.get("BRWSIM_REQUIRE_NATIVE") == "1"
pytestmark = pytest.mark.skipif(
    not REQUIRED and not _native.available(), reason="no C++ compiler: the JAX kernel serves every law"
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_library_builds():
    assert _native.available(), "the native library did not build (the notice on stderr says why)"


def _laws(tmp_path) -> dict:
    rng = np.random.default_rng(0)
    g = rng.gamma(0.3, size=(40, 90)) + 1e-30
    np.savez(tmp_path / "pool.npz", probs=g / g.sum(1, keepdims=True))
    return {
        "fixed_ties": fixed_law([0.25, 0.25, 0.2, 0.2, 0.1, 0.0]),  # equal children: the tie-break
        "fixed_one": fixed_law([1.0]),  # a chain of zero log-probs
        "pool": parse_law(f"pool:path={tmp_path / 'pool.npz'}"),
        "table": table_law(64, n_rows=128),
    }


def _same(a, b, fields=None) -> list:
    """Fields of two DraftTrees that differ (bitwise)."""
    names = fields or a._fields
    return [f for f in names if not np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))]


# (P, batch): P = 1, flat-frontier P (the largest is 135), heap P; batches that fill and that do not
# fill a block of eight trees or a group of sixteen (the flat search of fixed and table laws runs
# sixteen trees together, and their node keys come sixteen trees at a time up to P = 2047, eight past it).
# tests/test_oracle.py checks the default (native) kernel against the reference search on every
# indexed law too.
CASES = {
    "fixed_ties": [(1, 3), (40, 16), (135, 9), (300, 5), (2048, 2)],
    "fixed_one": [(17, 2)],
    "pool": [(135, 9), (300, 5)],
    "table": [(16, 13), (16, 37), (40, 16), (135, 11), (136, 3), (200, 3)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_equals_jax_kernel(tmp_path, name):
    law = _laws(tmp_path)[name]
    assert _native.program(law) is not None
    for P, B in CASES[name]:
        keys = tree_keys(jax.random.key(11), 0, B)
        K = min(P, law.vocab)
        nat = O.oracle_batch(law, keys, P, K, kernel="native")
        assert _same(nat, O.oracle_batch(law, keys, P, K, kernel="jax")) == [], (name, P, B)
        if name == "fixed_ties" and P == 40:  # ties: the reference search's tie-break too
            ref = jax.vmap(lambda k, P=P, K=K: O.oracle_one(law, k, P, K))(keys)
            assert _same(nat, ref) == [], (name, P, B)


def test_native_batch_sizes_and_devices():
    """Every tree is the same whatever the batch it came in and the devices it ran on."""
    law = table_law(16, n_rows=64)
    keys = tree_keys(jax.random.key(2), 0, 24)
    whole = O.oracle_batch(law, keys, 50, 16, kernel="native")
    for lo, hi in [(0, 1), (1, 9), (9, 24)]:
        part = O.oracle_batch(law, keys[lo:hi], 50, 16, kernel="native")
        assert _same(part, jax.tree.map(lambda x, lo=lo, hi=hi: x[lo:hi], whole)) == []
    devs = jax.local_devices()
    if len(devs) > 1:
        n = len(devs) * 4
        split = O.oracle_batch(law, keys[:n], 50, 16, kernel="native", devices=devs)
        assert _same(split, jax.tree.map(lambda x: x[:n], whole)) == []


def test_native_inside_jit():
    law = fixed_law([0.6, 0.3, 0.1])
    keys = tree_keys(jax.random.key(4), 0, 6)
    inner = jax.jit(lambda k: O.oracle_batch(law, k, 20, 3, kernel="native").logP)(keys)
    assert np.array_equal(np.asarray(inner), np.asarray(O.oracle_batch(law, keys, 20, 3, kernel="jax").logP))


def test_kernel_choice():
    keys = tree_keys(jax.random.key(0), 0, 2)
    table, drawn = table_law(8, n_rows=4), parse_law("dirichlet:V=8,alpha=0.5")
    assert _native.use_native(table, keys, "auto", None)
    assert not _native.use_native(table, keys, "jax", None)
    assert not _native.use_native(drawn, keys, "auto", None)  # auto keeps drawn laws on the JAX kernel
    assert _native.use_native(drawn, keys, "native", None)  # asked for: the native kernel's own stream
    markov = parse_law(os.path.join(ROOT, "examples", "two_state.json"))
    assert not _native.use_native(markov, keys, "auto", None) and _native.use_native(markov, keys, "native", None)
    with pytest.raises(BrwsimError, match="serves only"):
        _native.use_native(stored_rows(table), keys, "native", None)
    with pytest.raises(BrwsimError, match="kernel must be one of"):
        _native.use_native(table, keys, "fast", None)
    with O.kernel_choice("jax"):
        assert not _native.use_native(table, keys, None, None)
    assert _native.use_native(table, keys, None, None)
    # a Markov law of drawn states: not the JAX kernel's trees (its state draws are the native stream's)
    assert _native.program(markov) is None and markov.kernels == ("jax", "native")


def test_simulate_same_numbers_either_kernel():
    kw = dict(P=[1, 4, 32], trees=96, seed=3, batch=40, bounds=False, progress=False)
    law = "fixed:probs=0.4/0.3/0.2/0.1"
    a = simulate(law, kernel="jax", **kw).to_dict()
    b = simulate(law, kernel="native", **kw).to_dict()
    a.pop("seconds", None), b.pop("seconds", None)
    assert json.dumps(a) == json.dumps(b)


def _cli(args, **env):
    e = dict(os.environ, PYTHONPATH=ROOT, **env)
    cmd = [sys.executable, "-m", "brwsim", "simulate", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)


def test_cli_json_identical_and_no_compiler_fallback():
    """--kernel native and, without a compiler, the JAX kernel (auto falls back): the same JSON."""
    args = ["--law", "fixed:probs=0.5/0.3/0.2", "--P", "1,8,64", "--trees", "200", "--json"]
    nat = _cli(args + ["--kernel", "native"])
    nocc = _cli(args, CXX="/nonexistent/c++")
    assert nat.returncode == nocc.returncode == 0, (nat.stderr, nocc.stderr)
    assert json.loads(nat.stdout) == json.loads(nocc.stdout)
    assert "native oracle kernel unavailable" not in nat.stderr
    notice = [ln for ln in nocc.stderr.splitlines() if "native oracle kernel unavailable" in ln]
    assert len(notice) == 1 and "using the JAX kernel" in notice[0]


def test_cli_native_on_a_markov_law(capsys, tmp_path):
    """A Markov law of drawn states runs natively when asked; one with a pool state is a one-line error."""
    law = os.path.join(ROOT, "examples", "two_state.json")
    assert main(["simulate", "--law", law, "--P", "4", "--trees", "4", "--kernel", "native", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["law"] == law
    pool = tmp_path / "pool.npz"
    np.savez(pool, logp=np.log(np.array([[0.5, 0.5], [0.9, 0.1]])))
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({"states": {"p": str(pool), "f": "fixed:probs=0.5/0.5"}, "initial": "p",
                                 "kernel": {"p": [[0.5, 0.5]], "f": [[0.5, 0.5]]}}))  # fmt: skip
    rc = main(["simulate", "--law", str(mixed), "--P", "4", "--trees", "4", "--kernel", "native"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "serves only" in err
