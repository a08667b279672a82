"""Benchmark: drawn laws at real vocabulary sizes against the random-number floor and numpy.

    python benchmarks/draws.py [--V 1000,32000,262144] [--P 16,256] [--repeats 5] [--json] [--quick]
                               [--laws ...] [--kernels jax,native] [--entries N] [--no-all-cores]

A drawn law (``dirichlet``, ``logitnormal``, ``zipf`` with ``s_sd > 0``, a ``temp`` wrapper, a Markov law mixing
them) pays, at every node the oracle opens, for a whole row of V entries: V random variates (Gamma or normal) and a
normalisation, then its top-K. For each law, V and P this prints, one core pinned (every thread of the process,
XLA's included, on one CPU; interleaved rounds so other load hits every side alike):

- one row per kernel (``kernel``: ``jax``, and ``native`` where the law declares it: dirichlet, logitnormal, zipf,
  temp of them, a Markov law of them): ``ns_per_node``, the oracle's time per node, and ``ns_per_variate`` =
  ns_per_node / V;
- ``draw_ns_per_node``: that kernel's node draws alone (the law's K sorted entries from a node key, batched as in
  the kernel: the JAX law's ``node_logp``, or the native kernel's ``draw_rows``; a Markov law: its root's, whose
  state here is always the initial one);
- ``floor_ns_per_variate``: the same generator (threefry-2x32, the unrolled lowering the kernel compiles with)
  producing V uniform 32-bit variates per node and nothing else, in one jitted call: what the random numbers
  themselves cost here; ``ratio_to_floor`` = ns_per_variate / floor_ns_per_variate;
- ``numpy_ns_per_variate``: numpy's ``Generator`` (PCG64) doing the same draws per node on the same core: Gamma
  variates, or normals, a log-sum-exp and a top-K by ``argpartition`` (zipf: V powers of a drawn exponent).

With ``--json`` one object ``{"results": [...], "all_cores": [...], ...}`` on stdout (the table on stderr);
``all_cores`` repeats ``ns_per_node`` with the oracle's trees split over one device per core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import _brwsim_side, _rounds, _Side  # noqa: E402  (the oracle benchmark's sides and rounds)

from brwsim import oracle as O  # noqa: E402
from brwsim import tree_keys  # noqa: E402
from brwsim._lowering import unrolled_threefry  # noqa: E402
from brwsim.laws import parse_law  # noqa: E402
from brwsim.oracle import _native  # noqa: E402

ENTRIES = 2**24  # entries drawn per timed call of the floor, the draws and numpy (64 MiB of float32)


def laws(V: int, tmp: str) -> dict[str, str]:
    """The drawn laws of the benchmark at vocabulary V: name -> SPEC (the Markov law written to ``tmp``)."""
    markov = os.path.join(tmp, f"mix_{V}.json")
    with open(markov, "w") as f:
        json.dump({
            "states": {"peaked": f"logitnormal:V={V},sigma=3", "flat": f"dirichlet:V={V},alpha=0.1"},
            "initial": "peaked",
            "kernel": {"peaked": [[0.9, 0.1], [0.3, 0.7]], "flat": [[0.5, 0.5], [0.2, 0.8]]},
        }, f)  # fmt: skip
    return {
        "dirichlet": f"dirichlet:V={V},alpha=0.1",
        "logitnormal": f"logitnormal:V={V},sigma=3",
        "zipf": f"zipf:V={V},s=1.1,s_sd=0.5",
        "temp": f"temp:T=0.7,law=dirichlet:V={V},alpha=0.1",
        "markov": markov,
    }


def _nodes(V: int) -> int:
    return max(8, ENTRIES // V)


def floor_side(V: int) -> _Side:
    """V uniform 32-bit threefry variates per node, nothing else (the kernel's own lowering)."""
    n = _nodes(V)
    keys = tree_keys(jax.random.key(2), 0, n)
    bits = jax.jit(jax.vmap(lambda k: jax.random.bits(k, (V,), jnp.uint32)))
    with unrolled_threefry():
        jax.block_until_ready(bits(keys))
    return _Side("floor", lambda: jax.block_until_ready(bits(keys)), n)


def draws_side(law, P: int, kernel: str = "jax") -> _Side:
    """The law's node draws alone: its K sorted entries from a node key, batched, compiled as in the kernel."""
    K = O.keep_entries(P, min(law.vocab, P))
    n = _nodes(law.vocab)
    keys = tree_keys(jax.random.key(1), 0, n)
    if kernel == "native":
        root = law
        if not law.is_iid:  # a Markov law's root: the law of its initial state (one state here)
            root = law.sub_laws()[int(np.argmax(law.initial_probs()))]
        draw = jax.jit(lambda k: _native.draw_rows(root, k, K))
    else:
        draw = jax.jit(jax.vmap(lambda k: law.node_logp(k, law.init_state(k), K)))
    with unrolled_threefry():
        jax.block_until_ready(draw(keys))
    return _Side(f"draws {kernel}", lambda: jax.block_until_ready(draw(keys)), n)


def _batch(V: int, P: int) -> int:
    """Trees per timed oracle call: about ENTRIES / 4 variates (at least two trees)."""
    return max(2, min(4096, ENTRIES // 4 // (V * (P + 1))))


def numpy_side(name: str, V: int, P: int) -> _Side:
    """numpy's Generator doing one node's draws per row: variates, log-sum-exp, top-K by argpartition."""
    rng = np.random.default_rng(0)
    K = min(V, P)
    n = max(1, min(_nodes(V), 4096))

    def row_logits():
        if name in ("dirichlet", "temp"):
            g = np.log(rng.standard_gamma(0.1, size=(n, V)).astype(np.float32) + np.float32(1e-38))
            return g / np.float32(0.7) if name == "temp" else g
        if name == "zipf":
            s = np.exp(np.log(1.1) + 0.5 * rng.standard_normal((n, 1))).astype(np.float32)
            return -s * np.log(np.arange(1, V + 1, dtype=np.float32))
        return np.float32(3.0) * rng.standard_normal((n, V), dtype=np.float32)  # logitnormal, markov's first state

    def run():
        z = row_logits()
        m = z.max(axis=1, keepdims=True)
        lse = m + np.log(np.exp(z - m).sum(axis=1, keepdims=True))
        top = np.partition(z, V - K, axis=1)[:, V - K :] if K < V else z
        return np.sort(top, axis=1) - lse

    run()
    return _Side("numpy", run, n)


def _kernels(law, wanted) -> list[str]:
    return [k for k in wanted if k in law.kernels and (k == "jax" or _native.available())]


def bench(name: str, spec: str, P: int, repeats: int, log, wanted=("jax", "native")) -> list[dict]:
    law = parse_law(spec)
    V = law.vocab
    K = min(V, P)
    kernels = _kernels(law, wanted)
    oracles = [_brwsim_side(f"oracle {k}", law, P, K, 1, _batch(V, P), kernel=k) for k in kernels]
    draws = [draws_side(law, P, k) for k in kernels]
    floor, npy = floor_side(V), numpy_side(name, V, P)
    _rounds(repeats, [], [*oracles, *draws, floor, npy], [])
    floor_ns = 1e9 / (floor.median * V)
    out = []
    for k, oracle, draw in zip(kernels, oracles, draws, strict=True):
        ns_node = 1e9 / (oracle.median * P)
        res = {
            "law": name, "kernel": k,
            "spec": spec if not spec.endswith(".json") else "markov(logitnormal sigma=3 | dirichlet 0.1)",
            "V": V, "P": P, "batch": oracle.n,
            "ns_per_node": ns_node, "ns_per_variate": ns_node / V,
            "draw_ns_per_node": 1e9 / draw.median, "draw_ns_per_variate": 1e9 / (draw.median * V),
            "floor_ns_per_variate": floor_ns, "ratio_to_floor": ns_node / V / floor_ns,
            "numpy_ns_per_variate": 1e9 / (npy.median * V),
            "cpu_ns_per_node": 1e9 / (oracle.cpu_median * P),
        }  # fmt: skip
        log(
            f"{name:>12} {k:>6} {V:>7} {P:>5} {ns_node:>12.0f} {res['ns_per_variate']:>9.2f} "
            f"{res['draw_ns_per_variate']:>9.2f} {floor_ns:>8.2f} {res['ratio_to_floor']:>7.1f} "
            f"{res['numpy_ns_per_variate']:>9.2f}"
        )
        out.append(res)
    return out


def all_cores(name: str, spec: str, P: int, repeats: int, wanted=("jax", "native")) -> list[dict]:
    law = parse_law(spec)
    out = []
    for k in _kernels(law, wanted):
        side = _brwsim_side("oracle all cores", law, P, min(law.vocab, P), "all", None, kernel=k)
        _rounds(repeats, [side], [], [])
        cores = len(os.sched_getaffinity(0))
        ns = 1e9 * cores / (side.median * P)
        out.append({"law": name, "kernel": k, "V": law.vocab, "P": P, "cores": cores, "ns_per_node_per_core": ns})
    return out


def main(argv=None) -> int:
    global ENTRIES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", default="1000,32000,262144")
    ap.add_argument("--P", default="16,256")
    ap.add_argument("--laws", default="dirichlet,logitnormal,zipf,temp,markov")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds (default 5)")
    ap.add_argument("--quick", action="store_true", help="V = 1000 and 32000, P = 16, 2 rounds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-all-cores", action="store_true", help="skip the all-cores figures")
    ap.add_argument("--kernels", default="jax,native", help="oracle kernels to time (default jax,native)")
    ap.add_argument("--entries", type=int, default=2**24, help="variates per timed call (default 2^24)")
    args = ap.parse_args(argv)
    ENTRIES = args.entries
    Vs = [1000, 32000] if args.quick else [int(x) for x in args.V.split(",")]
    Ps = [16] if args.quick else [int(x) for x in args.P.split(",")]
    repeats = 2 if args.quick else args.repeats
    names = [x.strip() for x in args.laws.split(",") if x.strip()]
    wanted = tuple(x.strip() for x in args.kernels.split(",") if x.strip())
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else print
    log(f"one core, pinned; jax {jax.__version__}; {os.cpu_count()} cpus; {time.strftime('%Y-%m-%d %H:%M')}")
    log(f"{'law':>12} {'kernel':>6} {'V':>7} {'P':>5} {'ns/node':>12} {'ns/var':>9} {'draw/var':>9} {'floor':>8} "
        f"{'/floor':>7} {'numpy/var':>9}")  # fmt: skip
    t0 = time.perf_counter()
    results, wide = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for V in Vs:
            specs = laws(V, tmp)
            for name in names:
                for P in Ps:
                    results.extend(bench(name, specs[name], P, repeats, log, wanted))
                if not args.no_all_cores:
                    wide.extend(all_cores(name, specs[name], Ps[-1], repeats, wanted))
    if args.json:
        print(json.dumps({
            "results": results, "all_cores": wide, "date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
            "total_s": time.perf_counter() - t0,
        }))  # fmt: skip
    else:
        log(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
