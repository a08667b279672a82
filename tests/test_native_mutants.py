"""The native kernel's own stream, checked exactly: what the statistical tests of tests/test_native_draws.py cannot see.

The drawn laws' native trees are not the JAX kernel's bits, so tests/test_native_draws.py compares their law with
closed forms and with the JAX kernel, within standard errors. A mistake that keeps the law (a state drawn from
another key, the sibling's uniform, a quadrant's sign in Box-Muller, a stream read twice) or moves it by less than
the tests' power (the best-first order broken at one child in a hundred) passes those. Here the native kernel is
checked against what its source documents, number by number (tools/mutation_check.py native, docs/testing.md):

* node keys: fold_in(parent key, 2 + rank), by a NumPy threefry2x32 (itself checked against jax.random.fold_in);
* a Markov node's state: the first s with U < F(s), U the 53-bit uniform of threefry2x32 (0, 4) under
  fold_in(node key, 1), F the float64 cumulative row (the initial row at the root, else the kernel row of the
  parent's state and min(rank, R - 1));
* the search: the best-first tree of the rows the kernel draws at those keys (float32 path sums, ties to the lowest
  slot), whole rows sorted (``_native.draw_rows``), so a row the search sorts only as far as it needs must agree;
* the rows: the documented sampler (Box-Muller, Marsaglia-Tsang, the power step, zipf's exponent) in float64 NumPy
  on the same threefry words, to float32 accuracy;
* the FFI handlers' refusals of bad operands, each with its message.

Everything is deterministic (fixed keys); no tolerance is statistical.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_native_draws import MIX  # the Markov mix of three laws and vocabularies

from brwsim import oracle as O
from brwsim import tree_keys
from brwsim.laws import NativeDrawn, fixed_law, markov_law, parse_law
from brwsim.oracle import _native

pytestmark = pytest.mark.skipif(not _native.available(), reason="no C++ compiler: the JAX kernel serves every law")

U32 = np.uint32
ROT = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry(k0, k1, x0, x1):
    """threefry2x32 (20 rounds) of counts (x0, x1) under keys (k0, k1): uint32 arrays, broadcast."""
    k0, k1, x0, x1 = (np.atleast_1d(np.asarray(a, U32)) for a in (k0, k1, x0, x1))  # arrays wrap silently
    ks = (k0, k1, k0 ^ k1 ^ U32(0x1BD11BDA))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for d in ROT[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << U32(d)) | (x1 >> U32(32 - d))) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + U32(i + 1)
    return x0, x1


def fold_in(k, d):
    """fold_in of key words ``k [..., 2]`` with data d: threefry(k, (0, d))."""
    o0, o1 = threefry(k[..., 0], k[..., 1], 0, d)
    return np.stack([o0, o1], -1).reshape(np.shape(k))


def key_words(keys) -> np.ndarray:
    return np.asarray(jax.random.key_data(keys)).astype(U32)


def test_numpy_threefry_is_jax_fold_in():
    keys = tree_keys(jax.random.key(7), 0, 5)
    for d in (0, 1, 2, 7, 2**31 + 5):
        want = key_words(jax.vmap(lambda k, d=d: jax.random.fold_in(k, d))(keys))
        np.testing.assert_array_equal(fold_in(key_words(keys), d), want)


# -- the documented sampler in NumPy -----------------------------------------------------------------------------------


def u01_open0(w):
    """(0, 1]: (w >> 1) 2^-31 + 2^-32, in float32 as the kernel computes it."""
    return (np.asarray(w >> U32(1)).astype(np.int32).astype(np.float32) * np.float32(2.0**-31)
            + np.float32(2.0**-32))  # fmt: skip


def u01_24(w):
    return np.asarray(w >> U32(8)).astype(np.float32) * np.float32(2.0**-24)


def normals(k, n):
    """Normals 0 .. 2n - 1 of stream 1 under draw key ``k`` (two words): Box-Muller on counter j, in float64."""
    a, b = threefry(k[0], k[1], np.arange(n, dtype=U32), 1)
    r = np.sqrt(-2.0 * np.log(u01_open0(a).astype(np.float64)))
    t = 2.0 * np.pi * u01_24(b).astype(np.float64)
    return np.stack([r * np.cos(t), r * np.sin(t)], 1).ravel()


def words(k, n, stream):
    """Words 0 .. 2n - 1 of a stream: word w of counter j is number 2j + w."""
    a, b = threefry(k[0], k[1], np.arange(n, dtype=U32), stream)
    return np.stack([a, b], 1).ravel()


def reference_row(law, k) -> tuple[np.ndarray, float]:
    """The log-probabilities (sorted decreasing, float64) the kernel documents for draw key ``k``, and the smallest
    distance of a Marsaglia-Tsang test from its threshold (inf for the other laws)."""
    prog = law.native_program()
    V, c = int(law.vocab), float(np.float32(prog.scale))
    margin = np.inf
    if prog.family == "zipf":
        z0 = normals(k, 1)[0]
        s = float(np.float32(np.exp(prog.a + prog.b * z0)))  # a = log s
        w, c = -np.log(np.arange(1, V + 1)), float(np.float32(s) * np.float32(c))
    elif prog.family == "logitnormal":
        w = normals(k, (V + 1) // 2)[:V]
    else:  # dirichlet: Marsaglia-Tsang on alpha (alpha >= 1) or alpha + 1, candidates in counter order
        a = prog.a + 1.0 if prog.a < 1 else prog.a
        d64 = a - 1.0 / 3.0
        d, cg = float(np.float32(d64)), float(np.float32(1.0 / np.sqrt(9.0 * d64)))
        n = 4 * V + 64
        z, u = normals(k, n), u01_open0(words(k, n, 2)).astype(np.float64)
        v = (1.0 + cg * z) ** 3
        pos = v > 0
        lv = np.log(np.where(pos, v, 1.0))
        gap = np.log(u) - (0.5 * z * z + d - d * v + d * lv)
        ok = pos & (gap < 0)
        assert ok.sum() >= V
        last = np.flatnonzero(ok)[V - 1]
        margin = np.abs(gap[: last + 1][pos[: last + 1]]).min()
        w = float(np.float32(np.log(d64))) + lv[ok][:V]
        if prog.a < 1:  # the power step: alpha log G' + log U, U from stream 3 (word i for entry i)
            w = prog.a * w + np.log(u01_open0(words(k, (V + 1) // 2, 3)[:V]).astype(np.float64))
    y = c * (w - w.max())
    return np.sort(y - np.log(np.exp(y).sum()))[::-1], margin


@pytest.mark.parametrize(
    "spec",
    [
        "logitnormal:V=50,sigma=2",
        "dirichlet:V=50,alpha=2.5",
        "temp:T=0.7,law=dirichlet:V=50,alpha=0.3",
        "zipf:V=50,s=1.1,s_sd=0.5",
    ],
)
def test_rows_are_the_documented_sampler(spec):
    """Eight rows of each law (whole, K = V) against the float64 NumPy sampler on the same threefry words: within
    float32 accuracy (log-probabilities within 1e-5 relative + 1e-5; a changed uniform, angle, logarithm coefficient
    or acceptance test moves them by 1e-3 or more). Marsaglia-Tsang's decisions are the same in float32 and float64
    here: every test used is at least 1e-4 from its threshold (checked)."""
    law = parse_law(spec)
    keys = tree_keys(jax.random.key(21), 0, 8)
    got = np.asarray(_native.draw_rows(law, keys, law.vocab), np.float64)
    for row, k in zip(got, key_words(keys), strict=True):
        want, margin = reference_row(law, k)
        assert margin > 1e-4, margin
        np.testing.assert_allclose(row, want, rtol=1e-5, atol=1e-5, err_msg=spec)


def test_temperatures_compose_with_the_law_scale_in_float64():
    """A temperature's 1/T and the law's own scale multiply in float64 before any float32 rounding, in both kernels:
    zipf's exponent 1e39 at T = 1e300 is 1e-261 (uniform: -log V at each of the K entries kept), 1e-60 at T = 1e-300 is
    1e240 (a point mass), and temperatures 1e300 and 1e-300 nested cancel (the Dirichlet law itself, not a uniform
    row made a point mass). A temperature that makes a Dirichlet uniform keeps -log V."""
    keys = tree_keys(jax.random.key(2), 0, 3)
    point = np.broadcast_to([0.0, -np.inf, -np.inf, -np.inf, -np.inf], (3, 5))
    cases = [
        ("temp:T=1e300,law=zipf:V=30,s=1e39,s_sd=0.5", np.full((3, 5), -np.log(30.0))),
        ("temp:T=1e-300,law=zipf:V=30,s=1e-60", point),
        ("temp:T=1e-300,law=zipf:V=30,s=1e-60,s_sd=0.5", point),
        ("temp:T=1e-300,law=logitnormal:V=30,sigma=1e-60", point),
        ("temp:T=1e300,law=dirichlet:V=7,alpha=0.5", np.full((3, 3), -np.log(7.0))),
    ]
    for spec, want in cases:
        law = parse_law(spec)
        native = np.asarray(_native.draw_rows(law, keys, want.shape[1]))
        jax_rows = np.stack([np.asarray(law.node_logp(k, 0, want.shape[1])) for k in keys])
        for rows in (native, jax_rows):
            np.testing.assert_allclose(rows, want, rtol=1e-6, err_msg=spec)
    nested = parse_law("temp:T=1e-300,law=temp:T=1e300,law=dirichlet:V=7,alpha=0.5")
    plain = parse_law("dirichlet:V=7,alpha=0.5")
    assert nested.native_program() == plain.native_program() and nested.exact_moments() == plain.exact_moments()
    np.testing.assert_array_equal(
        np.asarray(_native.draw_rows(nested, keys, 7)), np.asarray(_native.draw_rows(plain, keys, 7))
    )


def test_point_mass_splits_among_tied_largest_entries():
    """1/T past float32 on a row with tied largest entries: the limit of p^(1/T), equal shares among the ties, in
    JAX kernel, where rows with explicit ties (fixed, pool) meet a temperature (the native kernel serves no such
    law; a drawn row's largest entries tie with probability 0 but for float32 rounding)."""
    law = parse_law("temp:T=1e-300,law=fixed:probs=0.4/0.2/0.4")
    assert np.exp(np.asarray(law.full_logp(None, 0))).tolist() == [0.5, 0.5, 0.0]  # the row as fixed keeps it
    assert np.exp(np.asarray(law.node_logp(None, 0, 3))).tolist() == [0.5, 0.5, 0.0]


# -- the search, the keys and the states, node by node -------------------------------------------------------------


def best_first(rows: np.ndarray, P: int):
    """The best-first tree of P nodes whose node n (0: the root) has row ``rows[n]`` (float32, decreasing, -inf
    padded): (parent, rank, depth, log P), float32 path sums, ties to the lowest slot."""
    K = rows.shape[1]
    lp, ptr, depth = [np.float32(0.0)], [0], [0]
    out = []
    for n in range(1, P + 1):
        j, best = 0, np.float32(-np.inf)
        for s in range(n):
            v = lp[s] + rows[s][ptr[s]] if ptr[s] < K else np.float32(-np.inf)
            if v > best:
                j, best = s, v
        r = ptr[j]
        ptr[j] += 1
        lp.append(best)
        ptr.append(0)
        depth.append(depth[j] + 1)
        out.append((j - 1, r, depth[-1], best))
    return [np.array(x) for x in zip(*out, strict=True)]


def cdf(lp) -> np.ndarray:
    """The cumulative row of float32 log-probabilities, as the kernel makes it (float64, 1 from the last positive)."""
    lp = np.asarray(lp, np.float64)
    p = np.where(lp == -np.inf, 0.0, np.exp(lp - lp.max()))
    F = np.cumsum(p)
    F = F / F[-1]
    F[np.flatnonzero(p > 0)[-1] :] = 1.0
    return F


def draw_state(F, node_key) -> int:
    sk = fold_in(node_key, 1)
    a, b = (int(x[0]) for x in threefry(sk[0], sk[1], 0, 4))
    u = ((a >> 5) * 67108864.0 + (b >> 6)) / 9007199254740992.0
    return int(np.searchsorted(F, u, side="right"))


def node_rows(law, keys: np.ndarray, states: np.ndarray, K: int) -> np.ndarray:
    """Rows ``[n, K]`` of nodes with these keys ``[n, 2]`` and states (a Markov law's, else zeros)."""
    draw = jax.random.wrap_key_data(jnp.asarray(fold_in(keys, 0)))
    if not hasattr(law, "sub_laws"):
        return np.asarray(_native.draw_rows(law, draw, K))
    out = np.zeros((len(keys), K), np.float32)
    for s, sub in enumerate(law.sub_laws()):
        if isinstance(sub.native_program(), NativeDrawn):
            rows = np.asarray(_native.draw_rows(sub, draw, K))
        else:  # a fixed state: its row at every node
            rows = np.broadcast_to(np.asarray(sub.row_table(K)[0], np.float32), (len(keys), K))
        out[states == s] = rows[states == s]
    return out


FLAT = {
    "states": {"a": "logitnormal:V=100,sigma=0.3", "b": "dirichlet:V=120,alpha=50"},
    "initial": {"a": 0.5, "b": 0.5},
    "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
}


@pytest.mark.parametrize(
    "spec,P,K,B",
    [
        ("dirichlet:V=3,alpha=0.5", 20, 3, 3),  # every child of a node taken: its next candidate is -inf
        # flat rows, the root's children sorted as the search reaches them (16, then 32, ...): K < V / 8 (a running
        # threshold over the row) and K >= V / 8 (a selection over the whole row)
        ("logitnormal:V=300,sigma=0.5", 60, 30, 2),
        ("logitnormal:V=300,sigma=0.5", 60, 60, 2),
        ("mix", 30, 30, 6),  # a Markov law: zipf, a tempered logit-normal and a fixed state
        # flat states of two laws and sizes: a node of either state drawn again whole past its first 16 entries
        ("flat", 60, 60, 4),
    ],
)
def test_native_tree_node_by_node(spec, P, K, B):
    """Each node's key is fold_in(parent key, 2 + rank); a Markov node's state is the documented draw from its key;
    and the tree is the best-first tree of the rows drawn at its nodes (every field, bit for bit)."""
    law = markov_law(MIX) if spec == "mix" else markov_law(FLAT) if spec == "flat" else parse_law(spec)
    keys = tree_keys(jax.random.key(8), 0, B)
    t = O.oracle_batch(law, keys, P, K, kernel="native")
    parent, rank, depth, state = (np.asarray(x) for x in (t.parent, t.rank, t.depth, t.state))
    logp, nkey = np.asarray(t.logP), np.asarray(t.key).astype(U32)
    markov = spec in ("mix", "flat")
    if markov:
        init = cdf(law.log_init)
        kern = np.asarray(law.log_kernel, np.float32)
    for b, tk in enumerate(key_words(keys)):
        allk = np.concatenate([tk[None], nkey[b]])  # slot 0: the root
        root = draw_state(init, tk) if markov else 0
        states = np.concatenate([[root], state[b]])
        for i in range(P):
            p, r = parent[b, i] + 1, rank[b, i]
            np.testing.assert_array_equal(nkey[b, i], fold_in(allk[p], 2 + r), f"{spec}: key of node {i}")
            if markov:
                F = cdf(kern[states[p], min(r, kern.shape[1] - 1)])
                assert states[i + 1] == draw_state(F, allk[i + 1]), (spec, b, i)
        want = best_first(node_rows(law, allk, states, K), P)
        for name, got, w in zip(("parent", "rank", "depth", "logP"), (parent, rank, depth, logp), want, strict=True):
            np.testing.assert_array_equal(got[b], w, f"{spec}: tree {b}, {name}")
    if spec.startswith("logitnormal"):  # the search read past the first sorted entries (16, then 32)
        assert (parent == -1).sum(1).min() >= min(K, 33)
    if spec.startswith("dirichlet"):  # some node had all K children taken
        assert max(np.bincount(parent[b] + 1).max() for b in range(B)) == K
    if spec == "mix":
        assert len(np.unique(state)) == 3
    if spec == "flat":  # nodes of both states had more children than a fresh row keeps (16)
        wide = set()
        for b in range(B):
            counts = np.bincount(parent[b] + 1, minlength=P + 1)
            states = np.concatenate([[-1], state[b]])
            wide |= {int(states[i]) for i in np.flatnonzero(counts > 16) if i > 0}
            if counts[0] > 16:
                wide.add(int(draw_state(cdf(law.log_init), key_words(keys)[b])))
        assert wide == {0, 1}, wide


@pytest.mark.parametrize("which,P", [("pool", 40), ("pool", 200), ("uniform", 40)])
def test_indexed_trees_where_children_run_out_and_ties_abound(tmp_path, which, P):
    """The best-first tree of the law's own rows (``law.node_logp`` at each node's draw key), where
    tests/test_native.py's laws rarely go: a pool law of three entries a row (every child of a node taken, then its
    next candidate is -inf, not the next row's first entry), flat (P + 1 <= 136) and heap frontiers; the uniform law
    on three symbols, whose equal candidates sit in odd and even slots alike (the flat search's tie-break: the lowest
    slot, the odd slot left over included)."""
    if which == "pool":
        g = np.random.default_rng(1).gamma(1.0, size=(6, 3)) + 1e-3
        np.savez(tmp_path / "pool.npz", probs=g / g.sum(1, keepdims=True))
        law = parse_law(f"pool:path={tmp_path / 'pool.npz'}")
    else:
        law = fixed_law([1 / 3] * 3)
    keys = tree_keys(jax.random.key(3), 0, 9)
    t = O.oracle_batch(law, keys, P, 3, kernel="native")
    rank = np.asarray(t.rank)
    assert (rank == 2).any(1).all()  # in every tree, a node with every child taken
    allk = np.concatenate([key_words(keys)[:, None], np.asarray(t.key).astype(U32)], 1)  # [B, P + 1, 2]
    draw = jax.random.wrap_key_data(jnp.asarray(fold_in(allk.reshape(-1, 2), 0)))
    rows = np.asarray(jax.vmap(lambda k: law.node_logp(k, 0, 3))(draw)).reshape(len(allk), P + 1, 3)
    for b in range(len(allk)):
        want = best_first(rows[b], P)
        for name, w in zip(("parent", "rank", "depth", "logP"), want, strict=True):
            np.testing.assert_array_equal(np.asarray(getattr(t, name))[b], w, f"{which} P={P}: tree {b}, {name}")


# -- the handlers' refusals ----------------------------------------------------------------------------------------


def _outs(B, P):
    i32 = jnp.int32
    return (*(jax.ShapeDtypeStruct((B, P), t) for t in (i32, i32, jnp.float32, i32, i32)),
            jax.ShapeDtypeStruct((B, P, 2), jnp.uint32))  # fmt: skip


def _refused(target, outs, operands, attrs, message):
    with pytest.raises(Exception, match=f"brwsim native oracle: {message}"):
        jax.block_until_ready(jax.ffi.ffi_call(target, outs)(*operands, **attrs))


def test_handlers_refuse_bad_operands():
    f32, kd = jnp.float32, jnp.zeros((2, 2), jnp.uint32)
    table = jnp.log(jnp.float32([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]))
    indexed = dict(init_kind=np.int64(0), child_kind=np.int64(0), row_kind=np.int64(0), n_init=np.int64(0),
                   n_hash=np.int64(0))  # fmt: skip
    outs = _outs(2, 4)
    _refused(_native.TARGET, outs, (table[0], kd), indexed, "bad operand shapes")  # a table of one dimension
    _refused(_native.TARGET, outs, (table, jnp.zeros((2, 3), jnp.uint32)), indexed, "bad operand shapes")
    _refused(_native.TARGET, outs, (table, kd), indexed | dict(child_kind=np.int64(1)), "empty state space")
    bad = indexed | dict(row_kind=np.int64(2), child_kind=np.int64(1), n_hash=np.int64(2))
    _refused(_native.TARGET, outs, (table, kd), bad, "unsupported law program")
    drawn = dict(kind=np.int64(1), V=np.int64(5), K=np.int64(3), a=0.0, b=0.0, scale=1.0)
    dummy = jnp.zeros((1, 1), f32)
    _refused(_native.TARGET_DRAWN, outs, (dummy, kd), drawn | dict(V=np.int64(0)), "bad operand shapes")
    _refused(_native.TARGET_DRAWN, outs, (dummy, kd), drawn | dict(kind=np.int64(2)), "zipf needs its -log")
    _refused(_native.TARGET_DRAWN, outs, (dummy, kd), drawn | dict(kind=np.int64(3)), "unknown drawn law")
    rows = jax.ShapeDtypeStruct((2, 4), f32)  # K = 3 asked for
    _refused(_native.TARGET_ROWS, rows, (dummy, kd), drawn, "bad operand shapes")
    # a Markov law: two fixed states over one row of `fixed` [1, 3], kernel [S, R, S]
    fixed, init, kern = table[:1], jnp.log(f32([0.5, 0.5])), jnp.log(jnp.full((2, 1, 2), 0.5, f32))
    state = [3, 3, 0, 0, 1, 0]  # kind fixed, V = 3, a, b, scale, row 0
    params = np.array(state + state, np.float64)

    def markov(message, fixed=fixed, init=init, kern=kern, params=params, K=3):
        ops = (jnp.zeros((1,), f32), fixed, init, kern, kd)
        _refused(_native.TARGET_MARKOV, outs, ops, dict(K=np.int64(K), params=params), message)

    markov("bad row", params=np.array(state + state[:5] + [1], np.float64))  # row 1 of one row
    markov("bad row", params=np.array(state + state[:5] + [-1], np.float64))
    markov("bad operand shapes", params=params[:-1])
    markov("bad operand shapes", K=4)  # the fixed rows are not K long
    markov("bad Markov operand shapes", kern=jnp.log(jnp.full((2, 1, 3), 1 / 3, f32)))
    markov("bad Markov operand shapes", init=jnp.zeros((3,), f32))
    markov("bad state vocabulary", params=np.array(state + [3, 0, 0, 0, 1, 0], np.float64))
    markov("zipf needs its -log", params=np.array(state + [2, 5, 1.1, 0, 1, 0], np.float64))
    markov("unknown drawn law", params=np.array(state + [7, 3, 0, 0, 1, 0], np.float64))
