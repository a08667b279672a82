"""Experiment: a threshold-then-select oracle, measured against ``oracle_batch``.

    python benchmarks/threshold_select.py [--P 16,64,256,1024,4096] [--repeats 2]

Not used by the library: a prototype kept so the negative result can be re-measured.
For each tree it enumerates every node with log P(v) >= thr (a per-tree threshold)
breadth first: a window of W queued nodes draws its distributions, each keeps the
prefix of its children above thr, the kept children are compacted (exclusive cumsum,
a scatter-max of segment starts and a cummax) and appended to a node store
``int32[B, C, 7]`` (log P bits, key, state, parent, rank, depth). Then ``lax.top_k``
takes the P + 1 largest; ties go to the lower store index (BFS order), so a tree is
flagged ``bad`` (to be recomputed by the best-first kernel) when the store overflowed,
fewer than P nodes passed thr, the P-th and (P+1)-th values tie, or two adjacent
equal values are not in the oracle's tie order (earliest-taken parent, then rank).
Trees not flagged are checked here to be bit-identical to ``oracle_batch``.

The threshold is the best case: the minimum over the batch of the oracle's own P-th
log P minus ``--margin`` (a real implementation must estimate it, e.g. from a pilot).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference_heapq import table_law  # noqa: E402

from brwsim import oracle as O  # noqa: E402
from brwsim import tree as T  # noqa: E402
from brwsim import tree_keys  # noqa: E402
from brwsim._lowering import threefry_fold_in_words  # noqa: E402

F = 7  # fields of a stored node: log P bits, key[0], key[1], state, parent, rank, depth


@partial(jax.jit, static_argnames=("P", "K", "C", "W", "M"))
def _fold(kd, data):
    return jnp.stack(threefry_fold_in_words(kd[..., 0], kd[..., 1], data), axis=-1)


def thresh_kernel(law, tree_keys, thr, P, K, C, W, M):
    B = tree_keys.shape[0]
    impl = jax.random.key_impl(tree_keys)
    kd_root = jax.random.key_data(tree_keys).astype(jnp.uint32)
    wrap = lambda x: jax.random.wrap_key_data(x, impl=impl)
    s0 = jax.vmap(lambda k: law.init_state(jax.random.fold_in(k, 1)))(tree_keys)
    i32 = jnp.int32
    root = jnp.stack(
        [
            jnp.zeros((B,), i32),
            kd_root[:, 0].view(i32),
            kd_root[:, 1].view(i32),
            s0.astype(i32),
            jnp.full((B,), -1, i32),
            jnp.zeros((B,), i32),
            jnp.zeros((B,), i32),
        ],
        -1,
    )
    nodes = jnp.zeros((B, C, F), i32).at[:, 0].set(root)
    count = jnp.ones((B,), i32)
    rp = jnp.zeros((B,), i32)
    over = jnp.zeros((B,), bool)
    b_ix = jnp.arange(B, dtype=i32)[:, None]
    w_ix = jnp.arange(W, dtype=i32)
    m_ix = jnp.arange(M, dtype=i32)
    thr3 = thr[:, None, None]

    def cond(c):
        nodes, count, rp, over = c
        return jnp.any((rp < count) & ~over)

    def body(c):
        nodes, count, rp, over = c
        idx = rp[:, None] + w_ix  # [B,W]
        valid = (idx < count[:, None]) & ~over[:, None]
        win = jnp.take_along_axis(nodes, jnp.minimum(idx, C - 1)[..., None], axis=1)  # [B,W,F]
        lp = jax.lax.bitcast_convert_type(win[..., 0], jnp.float32)
        kd = jax.lax.bitcast_convert_type(win[..., 1:3], jnp.uint32)
        st = win[..., 3]
        dep = win[..., 6]
        dk = _fold(kd, 0)
        d = jax.vmap(jax.vmap(lambda k, s: law.node_logp(wrap(k), s, K)))(dk, st).astype(jnp.float32)
        cv = lp[..., None] + d  # [B,W,K]
        n = jnp.where(valid, jnp.sum(cv >= thr3, axis=-1, dtype=i32), 0)
        incl = jnp.cumsum(n, axis=1)
        fits = valid & (incl <= M)
        n = jnp.where(fits, n, 0)
        incl = jnp.where(fits, incl, 0)
        off = incl - n
        nproc = jnp.sum(fits, axis=1, dtype=i32)
        total = jnp.max(incl, axis=1)
        # parent window slot of child slot j: last w with off[w] <= j and n[w] > 0
        mark = (
            jnp.full((B, M), -1, i32)
            .at[b_ix, jnp.where(n > 0, off, M)]
            .max(jnp.broadcast_to(w_ix, (B, W)), mode="drop")
        )
        pw = jax.lax.cummax(mark, axis=1)
        pw = jnp.maximum(pw, 0)
        offp = jnp.take_along_axis(off, pw, axis=1)
        r = m_ix - offp
        ok = m_ix < total[:, None]
        pr = jnp.clip(r, 0, K - 1)
        clp = jnp.take_along_axis(cv.reshape(B, W * K), pw * K + pr, axis=1)
        pkd = jnp.take_along_axis(kd, pw[..., None], axis=1)
        pst = jnp.take_along_axis(st, pw, axis=1)
        pdep = jnp.take_along_axis(dep, pw, axis=1)
        ckd = _fold(pkd, 2 + pr)
        sk = _fold(ckd, 1)
        cst = jax.vmap(jax.vmap(lambda k, s, rr: law.child_state(wrap(k), s, rr)))(sk, pst, pr)
        ckdi = jax.lax.bitcast_convert_type(ckd, i32)
        vals = jnp.stack(
            [
                jax.lax.bitcast_convert_type(clp, i32),
                ckdi[..., 0],
                ckdi[..., 1],
                cst.astype(i32),
                rp[:, None] + pw,
                pr,
                pdep + 1,
            ],
            -1,
        )
        newover = over | (count + total > C)
        pos = jnp.where(ok & ~newover[:, None], count[:, None] + m_ix, C)
        nodes = nodes.at[b_ix, pos].set(vals, mode="drop")
        count = jnp.where(newover, count, count + total)
        rp = rp + nproc
        return nodes, count, rp, newover

    nodes, count, rp, over = jax.lax.while_loop(cond, body, (nodes, count, rp, over))
    lp_all = jax.lax.bitcast_convert_type(nodes[..., 0], jnp.float32)
    c_ix = jnp.arange(C, dtype=i32)
    lp_all = jnp.where((c_ix >= 1) & (c_ix < count[:, None]), lp_all, T.NEG_INF)
    vals, sel = jax.lax.top_k(lp_all, P + 1)
    sel = sel[:, :P]
    lpo = vals[:, :P]
    pos = jnp.full((B, C), -1, i32).at[b_ix, sel].set(jnp.broadcast_to(jnp.arange(P, dtype=i32), (B, P)))
    rows = jnp.take_along_axis(nodes, sel[..., None], axis=1)
    par = jnp.take_along_axis(pos, rows[..., 4], axis=1)  # parent index 0 (root) -> pos -1
    rank = rows[..., 5]
    # exactness checks
    bad = over | (count - 1 < P) | (vals[:, P] == vals[:, P - 1]) | jnp.any(par < -1 + 0 * par, axis=1)
    eq = lpo[:, 1:] == lpo[:, :-1]
    inorder = (par[:, 1:] > par[:, :-1]) | ((par[:, 1:] == par[:, :-1]) & (rank[:, 1:] > rank[:, :-1]))
    bad = bad | jnp.any(eq & ~inorder, axis=1)
    kdo = jax.lax.bitcast_convert_type(rows[..., 1:3], jnp.uint32)
    tree = T.DraftTree(parent=par, depth=rows[..., 6], logP=lpo, rank=rank, state=rows[..., 3], key=kdo)
    return tree, bad, count - 1, over


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--P", default="16,64,256,1024,4096")
    ap.add_argument("--V", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--margin", type=float, default=0.3, help="nats below the batch's lowest P-th log P")
    args = ap.parse_args(argv)
    law = table_law(args.V)
    print(
        f"{'P':>6} {'batch':>6} {'N/P med':>8} {'bad':>5} {'new t/s':>9} {'old t/s':>9} {'new/old':>8} {'top_k s':>8}"
    )
    for P in [int(x) for x in args.P.split(",")]:
        B, K = O.default_batch(law, P), min(args.V, P)
        keys = tree_keys(jax.random.key(0), 0, B)
        C, W = int(1.6 * P) + 64, max(16, min(256, P // 4))
        M = max(K, W)
        ref = jax.block_until_ready(O.oracle_batch(law, keys, P, K))
        thr = jnp.full((B,), float(jnp.min(ref.logP[:, -1])) - args.margin, jnp.float32)
        run = partial(thresh_kernel, law, keys, thr, P=P, K=K, C=C, W=W, M=M)
        tree, bad, n, _ = jax.block_until_ready(run())
        bad = np.asarray(bad)
        for f in tree._fields:
            if not np.array_equal(np.asarray(getattr(tree, f))[~bad], np.asarray(getattr(ref, f))[~bad]):
                raise SystemExit(f"P={P}: field {f} differs on a tree not flagged bad")
        new, old = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(run())
            new.append(B / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            jax.block_until_ready(O.oracle_batch(law, keys, P, K))
            old.append(B / (time.perf_counter() - t0))
        # the select step alone, on a store of the same shape (random values past the count are -inf)
        x = jax.random.normal(jax.random.key(0), (B, C))
        x = jnp.where(jnp.arange(C) < n[:, None] + 1, x, -jnp.inf)
        topk = jax.jit(partial(jax.lax.top_k, k=P + 1))
        jax.block_until_ready(topk(x))
        t0 = time.perf_counter()
        jax.block_until_ready(topk(x))
        t_topk = time.perf_counter() - t0
        nm, om = float(np.median(new)), float(np.median(old))
        print(
            f"{P:>6} {B:>6} {float(np.median(np.asarray(n) / P)):>8.2f} {int(bad.sum()):>5} {nm:>9.0f} {om:>9.0f} "
            f"{nm / om:>8.2f} {t_topk:>8.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
