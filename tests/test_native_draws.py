"""The native kernel's drawn laws (dirichlet, logitnormal, zipf, temp of them): a stream of its own, the laws' own
node law, and each kernel bit-identical to itself whatever the batch or devices.

Statistical checks compare a Monte Carlo mean with a closed form, or two independent Monte Carlo means, and pass
within 4 standard errors (estimated from the samples; a two-sided false-failure rate of 6e-5 per comparison under
normality). Their power is stated with each test. All seeds are fixed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from brwsim import oracle as O
from brwsim import tree_keys
from brwsim.errors import BrwsimError
from brwsim.laws import TableLaw, dirichlet_moments, fixed_law, parse_law
from brwsim.oracle import _native
from brwsim.testing import stored_rows, table_law

pytestmark = pytest.mark.skipif(not _native.available(), reason="no C++ compiler: the JAX kernel serves every law")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Z = 4.0  # standard errors allowed


def _rows(spec: str, n: int, K: int | None = None, seed: int = 0) -> np.ndarray:
    """``[n, K]`` float64 log-probabilities of the native node law (draw keys of n nodes)."""
    law = parse_law(spec)
    keys = tree_keys(jax.random.key(seed), 0, n)
    return np.asarray(_native.draw_rows(law, keys, K or law.vocab), np.float64)


def _stats(lp: np.ndarray) -> dict:
    """Per-node H, M2, sum p^2 and max p of full rows ``lp [n, V]``."""
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):
        plp = np.where(p > 0, p * lp, 0.0)
        pl2 = np.where(p > 0, p * lp * lp, 0.0)
    return {"H": -plp.sum(1), "M2": pl2.sum(1), "S2": (p * p).sum(1), "max": p.max(1)}


def _close(a: np.ndarray, b, what: str) -> None:
    """mean(a) within Z standard errors of b (a number) or of mean(b) (independent samples)."""
    se2 = a.var(ddof=1) / a.size
    if isinstance(b, np.ndarray):
        se2 += b.var(ddof=1) / b.size
        b = b.mean()
    se = np.sqrt(se2)
    assert abs(a.mean() - b) <= Z * se, f"{what}: {a.mean():.6g} vs {b:.6g}, {abs(a.mean() - b) / se:.1f} se"


@pytest.mark.parametrize("alpha", [0.1, 2.5])
def test_dirichlet_node_law_against_closed_forms(alpha):
    """E[H] and E[M2] (dirichlet_moments) and E[sum p^2] = (alpha + 1) / (V alpha + 1), V = 50, 4000 nodes.

    alpha = 0.1 runs Gamma(alpha + 1) times the power of a uniform, alpha = 2.5 Marsaglia-Tsang directly. Power: the
    standard error of E[H] is 0.0045 at alpha = 0.1; Dirichlet(1.1) weights (the power step left out, or alpha + 1
    in its place) move E[H] from 2.13 to 3.52 (300 standard errors); Gamma(alpha) in place of Gamma(alpha + 1) in the
    squeeze makes d = alpha - 1/3 < 0 and NaN rows; a power of 1/(alpha + 1) instead of 1/alpha moves it by ~1.
    """
    V = 50
    lp = _rows(f"dirichlet:V={V},alpha={alpha}", 4000)
    assert np.all(np.diff(lp, axis=1) <= 0) and np.all(lp <= 0)
    np.testing.assert_allclose(np.exp(lp).sum(1), 1.0, atol=2e-6)
    st = _stats(lp)
    mu, mu2 = dirichlet_moments(V, alpha)
    _close(st["H"], mu, "E[H]")
    _close(st["M2"], mu2, "E[M2]")
    _close(st["S2"], (alpha + 1) / (V * alpha + 1), "E[sum p^2]")


def _numpy_rows(spec: str, n: int, rng) -> np.ndarray:
    """A numpy reference of the same laws (float64): log-probabilities ``[n, V]``, unsorted."""
    law = parse_law(spec)
    T = 1.0
    if law.family == "temp":
        T, law = law.T, law.law
    V = law.vocab
    if law.family == "dirichlet":
        w = np.log(rng.standard_gamma(law.alpha, size=(n, V)) + 1e-300)
    elif law.family == "logitnormal":
        w = law.sigma * rng.standard_normal((n, V))
    else:  # zipf
        s = law.s * np.exp(law.s_sd * rng.standard_normal((n, 1)))
        w = -s * np.log(np.arange(1, V + 1))
    w = w / T
    w -= w.max(1, keepdims=True)
    return w - np.log(np.exp(w).sum(1, keepdims=True))


@pytest.mark.parametrize(
    "spec",
    [
        "logitnormal:V=40,sigma=3",
        "logitnormal:V=40,sigma=0.7",
        "zipf:V=40,s=1.1,s_sd=0.5",
        "temp:T=0.7,law=dirichlet:V=40,alpha=0.3",
        "temp:T=2,law=logitnormal:V=40,sigma=2",
    ],
)
def test_node_law_against_a_numpy_reference(spec):
    """E[H], E[M2] and E[max p] of 3000 native nodes against 20000 numpy draws of the same law.

    Power: the standard errors are 0.5-2% of the means; a sigma, exponent or temperature off by 10% moves E[H] by
    5-20 standard errors (e.g. logitnormal sigma = 3.3 instead of 3: E[H] 1.45 -> 1.32, 9 se)."""
    lp = _rows(spec, 3000, seed=1)
    np.testing.assert_allclose(np.exp(lp).sum(1), 1.0, atol=2e-6)
    ref = _numpy_rows(spec, 20000, np.random.default_rng(5))
    a, b = _stats(lp), _stats(ref)
    for k in ("H", "M2", "max"):
        _close(a[k], b[k], f"{spec} E[{k}]")


def _values(law, keys, P: int, kernel: str) -> np.ndarray:
    t = O.oracle_batch(law, keys, P, min(P, law.vocab), kernel=kernel)
    return np.exp(np.asarray(t.logP, np.float64)).sum(1)


@pytest.mark.parametrize(
    "spec", ["dirichlet:V=10,alpha=0.3", "dirichlet:V=1000,alpha=0.1", "logitnormal:V=100,sigma=2"]
)
def test_expected_accepted_length_native_vs_jax(spec):
    """E[X] at P = 8 (the sum of the tree's path probabilities) of 400 trees, native vs JAX kernel: the two streams
    are independent, so the difference is within 4 combined standard errors. Power: the combined standard error is
    ~1.5% of E[X]; a node law with its alpha (or sigma) off by 20% moves E[X] by >= 5 standard errors."""
    law = parse_law(spec)
    keys = tree_keys(jax.random.key(3), 0, 400)
    nat, ref = _values(law, keys, 8, "native"), _values(law, keys, 8, "jax")
    _close(nat, ref, f"{spec} E[X]")


def _same(a, b) -> list:
    return [f for f in a._fields if not np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))]


SPECS = ["dirichlet:V=300,alpha=0.1", "temp:T=0.7,law=logitnormal:V=300,sigma=3", "zipf:V=300,s=1.1,s_sd=0.5"]


def test_same_trees_whatever_the_batch_and_devices(tmp_path):
    """Each tree is a function of its key: the same bits in any batch, and split over two devices (a process with
    two host devices); a Markov law (its states from the native stream) among them."""
    keys = tree_keys(jax.random.key(2), 0, 24)
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps(MIX))
    specs = [*SPECS, str(mix)]
    whole = {}
    for spec in specs:
        law = parse_law(spec)
        t = O.oracle_batch(law, keys, 40, 40, kernel="native")
        whole[spec] = t
        for lo, hi in [(0, 1), (1, 9), (9, 24)]:
            part = O.oracle_batch(law, keys[lo:hi], 40, 40, kernel="native")
            assert _same(part, jax.tree.map(lambda x, lo=lo, hi=hi: x[lo:hi], t)) == [], (spec, lo, hi)
    out = tmp_path / "two.npz"
    code = (
        "import jax, numpy as np, sys\n"
        "from brwsim import oracle as O, tree_keys\n"
        "from brwsim.laws import parse_law\n"
        "assert len(jax.devices()) == 2\n"
        "keys = tree_keys(jax.random.key(2), 0, 24)\n"
        "res = {}\n"
        f"for i, spec in enumerate({specs!r}):\n"
        "    t = O.oracle_batch(parse_law(spec), keys, 40, 40, kernel='native', devices=jax.devices())\n"
        "    res.update({f'{i}_{f}': np.asarray(getattr(t, f)) for f in t._fields})\n"
        "np.savez(sys.argv[1], **res)\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    p = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    two = np.load(out)
    for i, spec in enumerate(specs):
        for f in whole[spec]._fields:
            assert np.array_equal(two[f"{i}_{f}"], np.asarray(getattr(whole[spec], f))), (spec, f)


def test_exact_cases():
    keys = tree_keys(jax.random.key(4), 0, 5)
    P = 12
    chain = np.arange(-1, P - 1)
    # a point mass at every node: a chain of rank-0 children, log P = 0 (V = 1; alpha below float32's range,
    # sigma above it, a temperature whose 1/T overflows)
    for spec in [
        "dirichlet:V=1,alpha=0.5",
        "dirichlet:V=30,alpha=1e-40",
        "logitnormal:V=30,sigma=1e39",
        "temp:T=1e-40,law=dirichlet:V=30,alpha=0.5",
        "zipf:V=30,s=1e39,s_sd=0.5",
    ]:
        t = O.oracle_batch(parse_law(spec), keys, P, P, kernel="native")
        assert np.all(np.asarray(t.logP) == 0), spec
        assert np.all(np.asarray(t.parent) == chain) and np.all(np.asarray(t.rank) == 0), spec
    # zipf with s_sd = 0 is deterministic: the tree's path probabilities are those of the enumerated tree
    law = parse_law("zipf:V=6,s=1.3")
    q = np.arange(1, 7) ** -1.3
    from brwsim.testing import enumerate_fixed

    want = np.diff(enumerate_fixed(q / q.sum(), 30), prepend=0.0)
    t = O.oracle_batch(law, keys, 30, 6, kernel="native")
    np.testing.assert_allclose(np.exp(np.asarray(t.logP, np.float64)), np.broadcast_to(want, (5, 30)), rtol=2e-5)
    # a uniform law (temperature so large that 1/T underflows to 0): every entry -log V
    lp = _rows("temp:T=1e300,law=dirichlet:V=7,alpha=0.5", 3)
    np.testing.assert_allclose(lp, -np.log(7), rtol=1e-6)
    # Dirichlet(1) is uniform on the simplex: the largest of V = 3 entries has mean 11/18
    lp = _rows("dirichlet:V=3,alpha=1", 4000, seed=9)
    _close(np.exp(lp[:, 0]), 11 / 18, "E[max p], Dirichlet(1, 1, 1)")


def test_kernels_declared_by_the_laws(tmp_path):
    two_state = parse_law(os.path.join(ROOT, "examples", "two_state.json"))
    assert fixed_law([0.5, 0.5]).kernels == ("native", "jax")
    assert table_law(8, n_rows=4).kernels == ("native", "jax")
    assert stored_rows(table_law(8, n_rows=4)).kernels == ("jax",)
    for spec in ["dirichlet:V=8,alpha=0.5", "logitnormal:V=8,sigma=1", "zipf:V=8,s=1,s_sd=0.2"]:
        assert parse_law(spec).kernels == ("jax", "native")
    assert parse_law("temp:T=0.5,law=dirichlet:V=8,alpha=0.5").kernels == ("jax", "native")
    assert parse_law("temp:T=0.5,law=fixed:probs=0.5/0.5").kernels == ("jax",)
    assert two_state.kernels == ("jax", "native")  # a Markov law of drawn states: the native kernel's own stream
    unserved = stored_rows(table_law(8, n_rows=4))
    keys = tree_keys(jax.random.key(0), 0, 2)
    drawn = parse_law("dirichlet:V=8,alpha=0.5")
    assert not _native.use_native(drawn, keys, "auto", None)  # auto: the JAX kernel's numbers for drawn laws
    assert _native.use_native(drawn, keys, "native", None)
    assert not _native.use_native(two_state, keys, "auto", None) and _native.use_native(two_state, keys, "native", None)
    with pytest.raises(BrwsimError, match="^the native oracle kernel serves only the laws fixed, pool"):
        _native.use_native(unserved, keys, "native", None)
    with pytest.raises(BrwsimError, match="^the native kernel draws the nodes of"):
        _native.draw_rows(two_state, keys, 4)
    # TableLaw lives in brwsim.laws (brwsim.testing re-exports it); no production module imports brwsim.testing
    from brwsim import testing

    assert testing.TableLaw is TableLaw
    pkg = os.path.join(ROOT, "brwsim")
    for dirpath, _, files in os.walk(pkg):
        for f in files:
            path = os.path.join(dirpath, f)
            if f.endswith(".py") and path != os.path.join(pkg, "testing.py"):
                with open(path) as fh:
                    text = fh.read()
                assert not re.search(r"(from|import)\s+(brwsim|\.+)\.?testing\b", text), path


def test_memory_guard_is_one_line(monkeypatch):
    """A tree's rows past the native kernel's limit (2 GiB; lowered here) are a one-line error, not a crash."""
    monkeypatch.setattr(_native, "ROW_BYTES_MAX", 1000)
    keys = tree_keys(jax.random.key(0), 0, 1)
    with pytest.raises(
        BrwsimError, match=r"^P=30: the native kernel keeps every node's 30 largest entries, .*kernel jax$"
    ):
        O.oracle_batch(parse_law("dirichlet:V=100,alpha=0.1"), keys, 30, 30, kernel="native")


def test_cli_native_kernel_on_a_drawn_law(capsys):
    from brwsim.cli import main

    args = ["simulate", "--law", "dirichlet:V=20,alpha=0.5", "--P", "4", "--trees", "16", "--json"]
    assert main([*args, "--kernel", "native"]) == 0
    assert json.loads(capsys.readouterr().out)["law"] == "dirichlet:V=20,alpha=0.5"


def test_check_refuses_the_native_sampler():
    """--check re-samples the JAX kernel's node draws: with the native sampler's own stream it would score other
    trees, so the combination is a one-line error (an indexed law, whose trees are the JAX kernel's, is allowed)."""
    import brwsim
    from brwsim.errors import BrwsimError

    with pytest.raises(BrwsimError, match="--check re-samples the JAX kernel's node draws"):
        brwsim.simulate("dirichlet:V=10,alpha=0.5", P=(1,), trees=4, seed=0, check=True, kernel="native",
                        bounds=False, progress=False)  # fmt: skip


# -- Markov laws of drawn and fixed states: the states from the native kernel's own stream -----------------------

MIX = {
    "states": {
        "z": "zipf:V=50,s=1.1,s_sd=0.5",
        "l": "temp:T=0.7,law=logitnormal:V=80,sigma=2",
        "f": "fixed:probs=0.7/0.2/0.1",
    },
    "initial": {"z": 0.5, "l": 0.3, "f": 0.2},
    "kernel": {
        "z": [[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]],
        "l": [[0.2, 0.7, 0.1]],
        "f": [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]],
    },
}


@pytest.mark.parametrize("cfg", ["two_state", "mix"])
def test_markov_expected_accepted_length_native_vs_jax(cfg):
    """E[X] at P = 8 of 400 trees of a Markov law, native vs JAX kernel (independent streams, within 4 combined
    standard errors; the combined standard error is ~2% of E[X]). ``mix``: zipf, a tempered logit-normal and a fixed
    law of three vocabularies, rank-dependent kernel rows, a random root state. Power (``two_state``, native,
    measured): children kept in their parent's state move E[X] by 10% (3.6 combined standard errors: caught about
    half the time); kernel row 0 read for every rank moves it by 4% (not caught here). The state process itself is
    pinned by the two tests below, this one checks the node laws and states together."""
    from brwsim.laws import markov_law

    law = parse_law(os.path.join(ROOT, "examples", "two_state.json")) if cfg == "two_state" else markov_law(MIX)
    keys = tree_keys(jax.random.key(3), 0, 400)
    _close(_values(law, keys, 8, "native"), _values(law, keys, 8, "jax"), f"{cfg} E[X]")


def test_markov_states_follow_the_kernel():
    """Three states with the same fixed law: the tree is deterministic, so each node's rank and parent are known and
    its state's law is the chain's marginal along its path (initial row, then the kernel row of each step's rank).
    Per node and state, the frequency over 4000 trees is within 4 binomial standard errors of it, for both kernels.
    Power: the standard error is at most 0.008; reading the kernel row of another rank, or the initial row wrongly,
    moves some marginal by >= 0.1 (12 standard errors)."""
    from brwsim.laws import markov_law

    same = "fixed:probs=0.5/0.3/0.2"
    init = np.array([0.2, 0.5, 0.3])
    kern = [[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], [[0.3, 0.3, 0.4]], [[0.05, 0.9, 0.05], [0.6, 0.2, 0.2]]]
    law = markov_law(
        {
            "states": {"a": same, "b": same, "c": same},
            "initial": dict(zip("abc", init, strict=True)),
            "kernel": dict(zip("abc", kern, strict=True)),
        }
    )
    K3 = np.array([[row[min(r, len(row) - 1)] for r in range(2)] for row in kern])  # [S, R, S]
    n, P = 4000, 12
    keys = tree_keys(jax.random.key(6), 0, n)
    for kernel in ("native", "jax"):
        t = O.oracle_batch(law, keys, P, 3, kernel=kernel)
        parent, rank, state = (np.asarray(x)[0] for x in (t.parent, t.rank, t.state))
        assert np.all(np.asarray(t.parent) == parent) and np.all(np.asarray(t.rank) == rank)  # deterministic shape
        marg = []
        for i in range(P):
            up = init if parent[i] < 0 else marg[parent[i]]
            marg.append(up @ K3[:, min(rank[i], 1)])
        freq = np.stack([(np.asarray(t.state) == s).mean(0) for s in range(3)], 1)  # [P, S]
        want = np.array(marg)
        se = np.sqrt(want * (1 - want) / n) + 1e-12
        assert np.all(np.abs(freq - want) <= Z * se), (kernel, np.abs(freq - want) / se)


def test_markov_exact_cases():
    """A kernel of point masses over fixed states is a deterministic tree: the native kernel's is the JAX kernel's,
    every field bit for bit. A Markov law of one drawn state is that law: the native trees of both are the same."""
    from brwsim.laws import markov_law

    law = markov_law(
        {
            "states": {"a": "fixed:probs=0.6/0.4", "b": "fixed:probs=0.9/0.05/0.05", "c": "fixed:probs=0.5/0.5"},
            "initial": {"a": 0, "b": 0, "c": 1},  # point masses with zeros first, in the middle and last
            "kernel": {"a": [[0, 1, 0], [1, 0, 0]], "b": [[0, 0, 1], [1, 0, 0]], "c": [[0, 1, 0], [1, 0, 0]]},
        }
    )
    keys = tree_keys(jax.random.key(5), 0, 6)
    nat, ref = (O.oracle_batch(law, keys, 20, 20, kernel=k) for k in ("native", "jax"))
    assert _same(nat, ref) == []
    assert set(np.unique(np.asarray(nat.state))) == {0, 1, 2}
    one = markov_law({"states": {"d": "dirichlet:V=60,alpha=0.3"}, "initial": "d", "kernel": {"d": [[1.0]]}})
    a = O.oracle_batch(one, keys, 20, 20, kernel="native")
    b = O.oracle_batch(parse_law("dirichlet:V=60,alpha=0.3"), keys, 20, 20, kernel="native")
    assert _same(a, b) == []


def test_markov_with_a_pool_state_stays_on_the_jax_kernel(tmp_path):
    from brwsim.laws import markov_law

    pool = tmp_path / "pool.npz"
    np.savez(pool, logp=np.log(np.array([[0.5, 0.5], [0.9, 0.1]])))
    law = markov_law({"states": {"p": str(pool), "f": "fixed:probs=0.5/0.5"}, "initial": "p",
                      "kernel": {"p": [[0.5, 0.5]], "f": [[0.5, 0.5]]}})  # fmt: skip
    assert law.native_program() is None and law.kernels == ("jax",)


def test_the_k_largest_whatever_k():
    """A node's K largest entries are the first K of its whole sorted row, for every K: a K of 1 to 120 takes the
    selection's first threshold from the maxima of 120 groups of 16 (V = 2000: 15 chunks of 128 entries, 80 in no
    group), 121 and more the first K entries, K >= V no selection at all."""
    for spec in ["dirichlet:V=2000,alpha=0.1", "logitnormal:V=2000,sigma=3", "temp:T=2,law=dirichlet:V=1000,alpha=5"]:
        law = parse_law(spec)
        keys = jax.random.split(jax.random.key(8), 40)
        full = np.asarray(_native.draw_rows(law, keys, law.vocab))
        for K in (1, 5, 16, 100, 119, 120, 121, 500, law.vocab - 1):
            assert np.array_equal(np.asarray(_native.draw_rows(law, keys, K)), full[:, :K]), (spec, K)
