"""The native CPU oracle: the same best-first search in C++, called from the jitted program through XLA's FFI.

``brwsim/data/oracle_native.cc`` builds exactly the trees of the JAX kernel
(:mod:`._kernel`) for the indexed laws it serves, bit for bit: the same threefry
node keys, rows and states, the same float32 path sums, the same tie-break; for
drawn laws the same search on node rows from its own sampler (below). It is
compiled on first use with the system C++ compiler (``$CXX``, else ``$CC``,
else ``c++`` or ``g++``; ``-O3 -march=native``) into the user cache
(``brwsim.user_cache_dir()/native``), keyed by the source, the flags, the
compiler, the CPU and the jaxlib version, so a changed source or jaxlib
rebuilds. Without a compiler (or if the build fails) one line on stderr says
so and the JAX kernel runs: never a failure.

Laws served: each law declares it (``law.native_program()``, ``law.kernels``,
:mod:`brwsim.laws`). Indexed laws (``fixed``, ``pool``, the benchmark's table
law), whose node process is integer arithmetic on threefry bits, get the JAX
kernel's trees bit for bit, and ``auto`` runs them natively. Drawn i.i.d. laws
(``dirichlet``, ``logitnormal``, ``zipf``, ``temp`` of them) draw with float32
log/exp/gamma/normal transforms that XLA computes with its own approximations:
the native kernel draws them from a stream of its own (threefry under the same
node keys; the sampler is described in oracle_native.cc), the same law but not
the same bits, so it runs only when asked for by name (``kernel="native"``,
``--kernel native``) and ``auto`` keeps the JAX kernel. It keeps every node's
``min(K, V)`` largest entries (nothing is dropped or rerun). Each kernel gives
the same trees whatever the batch, devices or processes. Markov laws whose
states are such drawn laws or ``fixed`` draw the same way, their hidden states
too from the native stream (inverse CDF, not the JAX kernel's Gumbel draw); a
Markov law with a ``pool`` state stays on the JAX kernel. The sampled-continuation check
(``--check``) redraws node distributions with the JAX laws, so it belongs with
the JAX kernel's trees.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import threading
from functools import cache, partial
from importlib import resources

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.sharding import PartitionSpec

from .._cache import user_cache_dir
from .._devices import TREES_AXIS, mesh
from ..errors import BrwsimError
from ..laws import Law, NativeDrawn, NativeIndexed, NativeMarkov
from ..tree import DraftTree

KERNELS = ("auto", "jax", "native")
TARGET = "brwsim_oracle_native"
TARGET_DRAWN = "brwsim_oracle_native_drawn"
TARGET_ROWS = "brwsim_oracle_native_rows"
TARGET_MARKOV = "brwsim_oracle_native_markov"
# -fno-math-errno -fno-trapping-math: the drawn sampler's sqrt and selects vectorise (IEEE results unchanged)
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-std=c++17", "-shared", "-fPIC")
ROW_BYTES_MAX = 2**31  # a drawn law's rows of one tree: (P + 1) min(K, V) float32

DRAW_KINDS = {"dirichlet": 0, "logitnormal": 1, "zipf": 2, "fixed": 3}  # oracle_native.cc's DrawKind

Program = NativeIndexed  # the native program of an indexed law (oracle_native.cc's InitKind, ChildKind, RowKind)


def program(law: Law) -> NativeIndexed | None:
    """The native program of an indexed ``law`` (the JAX kernel's trees), or None."""
    prog = law.native_program()
    return prog if isinstance(prog, NativeIndexed) else None


def drawn_program(law: Law) -> NativeDrawn | None:
    """How the native kernel draws a drawn ``law``'s nodes (its own stream), or None."""
    prog = law.native_program()
    return prog if isinstance(prog, NativeDrawn) else None


_KERNEL: contextvars.ContextVar = contextvars.ContextVar("brwsim_oracle_kernel", default="auto")


@contextlib.contextmanager
def kernel_choice(kernel: str):
    """Inside the block, oracle calls that name no kernel use ``kernel`` (auto|jax|native)."""
    token = _KERNEL.set(check_kernel(kernel))
    try:
        yield
    finally:
        _KERNEL.reset(token)


def check_kernel(kernel: str) -> str:
    """``kernel`` lower-cased if it is one of :data:`KERNELS`, else a one-line error."""
    k = str(kernel).strip().lower()
    if k not in KERNELS:
        raise BrwsimError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    return k


# -- building and registering the library --------------------------------------------------------

_lock = threading.Lock()
_state: dict = {}  # "lib": the loaded library, or "failed": the notice already printed


def source() -> bytes:
    return resources.files("brwsim").joinpath("data/oracle_native.cc").read_bytes()


def compiler() -> str | None:
    """The compiler: ``$CXX``, else ``$CC`` (as a C++ driver), else c++ or g++ on the PATH (None if none)."""
    return os.environ.get("CXX") or os.environ.get("CC") or shutil.which("c++") or shutil.which("g++")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln for ln in f if ln.startswith(("model name", "flags"))), platform.machine())
    except OSError:
        return platform.machine()


def library_path(cxx: str) -> os.PathLike:
    """Where the library built by ``cxx`` from this source lives in the user cache."""
    parts = [source(), " ".join([cxx, *FLAGS]).encode(), jaxlib.__version__.encode(), _cpu_name().encode()]
    tag = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    return user_cache_dir() / "native" / f"oracle_native-{tag}.so"


def _build(cxx: str):
    so = library_path(cxx)
    if not so.exists():
        so.parent.mkdir(parents=True, exist_ok=True)
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        src = resources.files("brwsim").joinpath("data/oracle_native.cc")
        with resources.as_file(src) as path:
            cmd = [cxx, *FLAGS, "-w", "-I", jax.ffi.include_dir(), "-x", "c++", str(path), "-o", str(tmp), "-lstdc++"]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except FileNotFoundError:
                raise OSError(f"compiler {cxx!r} not found (install g++ or set CXX)") from None
        if p.returncode != 0:
            first = (p.stderr.strip().splitlines() or ["no message"])[0]
            raise OSError(f"{cxx} failed: {first}")
        os.replace(tmp, so)
    lib = ctypes.CDLL(str(so))
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.BrwsimOracle), platform="cpu")
    jax.ffi.register_ffi_target(TARGET_DRAWN, jax.ffi.pycapsule(lib.BrwsimDrawn), platform="cpu")
    jax.ffi.register_ffi_target(TARGET_ROWS, jax.ffi.pycapsule(lib.BrwsimDrawRows), platform="cpu")
    jax.ffi.register_ffi_target(TARGET_MARKOV, jax.ffi.pycapsule(lib.BrwsimMarkov), platform="cpu")
    return lib


def available() -> bool:
    """True when the native kernel is built and registered (built on the first call); else one notice."""
    with _lock:
        if "lib" in _state:
            return True
        if "failed" in _state:
            return False
        cxx = compiler()
        try:
            if cxx is None:
                raise OSError("no C++ compiler found (install g++ or set CXX)")
            _state["lib"] = _build(cxx)
            return True
        except (OSError, subprocess.SubprocessError) as e:
            _state["failed"] = True
            print(f"brwsim: native oracle kernel unavailable ({e}); using the JAX kernel", file=sys.stderr)
            return False


def built() -> bool:
    """True when the library is loaded or already built in the user cache: :func:`available` then needs no compile
    and prints nothing (for a hint that must not start a build)."""
    if "lib" in _state or "failed" in _state:
        return "lib" in _state
    cxx = compiler()
    return cxx is not None and os.path.exists(library_path(cxx))


def reset() -> None:
    """Forget a failed build so the next call tries again (tests)."""
    with _lock:
        _state.pop("failed", None)


# -- choosing and calling the kernel -------------------------------------------------------------


def _threefry(tree_keys) -> bool:
    """Threefry keys (two uint32 words each), read from the key type: no device work."""
    return str(jax.random.key_impl(tree_keys)) == "threefry2x32" and tree_keys.ndim == 1


def use_native(law: Law, tree_keys, kernel: str | None, devices) -> bool:
    """Whether this oracle call runs natively: ``kernel`` (auto|jax|native; None: the one of
    :func:`kernel_choice`, default auto) and what the call allows.

    ``native`` on a law or device it cannot serve is a one-line error; a missing compiler is never
    one (:func:`available` prints the notice and the JAX kernel runs).
    """
    kernel = _KERNEL.get() if kernel is None else check_kernel(kernel)
    if kernel == "jax":
        return False
    devs = devices or jax.local_devices()[:1]
    on_cpu = all(d.platform == "cpu" for d in devs)
    kernels = law.kernels if _threefry(tree_keys) else ("jax",)
    if kernel == "native" and not (on_cpu and "native" in kernels):
        why = "CPU devices" if not on_cpu else SERVED
        raise BrwsimError(f"the native oracle kernel serves only {why}; use --kernel jax or auto")
    wanted = kernels[0] == "native" if kernel == "auto" else True
    return on_cpu and wanted and available()


SERVED = (
    "the laws fixed, pool and the benchmark's table law (the JAX kernel's trees) and, asked for by name, "
    "dirichlet, logitnormal, zipf, temp of them and Markov laws of them and of fixed (a stream of its own), with "
    "threefry keys"
)


def _tree_call(target: str, operands: tuple, tree_keys, P: int, attrs: dict):
    """One FFI search call (``target``: the indexed, drawn or Markov handler; ``operands`` before the keys) on one
    device's batch: (tree, dropped); every kept row is whole, so nothing is dropped."""
    kd = jax.random.key_data(tree_keys).astype(jnp.uint32)
    B = kd.shape[0]
    i32 = jnp.int32
    outs = (
        jax.ShapeDtypeStruct((B, P), i32),
        jax.ShapeDtypeStruct((B, P), i32),
        jax.ShapeDtypeStruct((B, P), jnp.float32),
        jax.ShapeDtypeStruct((B, P), i32),
        jax.ShapeDtypeStruct((B, P), i32),
        jax.ShapeDtypeStruct((B, P, 2), jnp.uint32),
    )
    call = jax.ffi.ffi_call(target, outs, vmap_method="sequential")
    parent, depth, logp, rank, state, key = call(*operands, kd, **attrs)
    tree = DraftTree(parent=parent, depth=depth, logP=logp, rank=rank, state=state, key=key)
    return tree, jnp.full((B,), -jnp.inf, jnp.float32)


def _call(law: Law, tree_keys, P: int, K: int, prog: NativeIndexed):
    """The FFI call of an indexed law on one device's batch: (tree, dropped)."""
    names = ("init_kind", "child_kind", "row_kind", "n_init", "n_hash")
    attrs = {name: np.int64(v) for name, v in zip(names, prog, strict=True)}
    return _tree_call(TARGET, (law.row_table(K).astype(jnp.float32),), tree_keys, P, attrs)


def _drawn_operands(law: Law, K: int, prog: NativeDrawn) -> tuple:
    """(table, attributes) of a drawn law's FFI calls: zipf's -log(i) table (else a dummy) and the law's numbers."""
    V = int(law.vocab)
    if prog.family == "zipf":
        table = -jnp.log(jnp.arange(1, V + 1, dtype=jnp.float32))[None]
    else:
        table = jnp.zeros((1, 1), jnp.float32)
    attrs = dict(
        kind=np.int64(DRAW_KINDS[prog.family]),
        V=np.int64(V),
        K=np.int64(K),
        a=np.float64(prog.a),
        b=np.float64(prog.b),
        scale=np.float64(prog.scale),
    )
    return table, attrs


def _call_drawn(law: Law, tree_keys, P: int, K: int, prog: NativeDrawn):
    """The FFI call of a drawn law on one device's batch: (tree, dropped)."""
    table, attrs = _drawn_operands(law, K, prog)
    return _tree_call(TARGET_DRAWN, (table,), tree_keys, P, attrs)


def _call_markov(law: Law, tree_keys, P: int, K: int, prog: NativeMarkov):
    """The FFI call of a Markov law of natively drawn states on one device's batch: (tree, dropped). Operands: the
    zipf states' -log(i) table, the fixed states' rows ``[F, K]``, the law's log initial row and log kernel; the
    attribute ``params``: per state its kind, V, a, b, scale and row of the fixed rows."""
    f32 = jnp.float32
    Vz = max((v for st, v in zip(prog.states, prog.vocabs, strict=True) if st.family == "zipf"), default=1)
    neglog = -jnp.log(jnp.arange(1, Vz + 1, dtype=f32))
    rows = [sub.row_table(K)[0] for sub, st in zip(law.sub_laws(), prog.states, strict=True) if st.family == "fixed"]
    fixed = jnp.stack(rows).astype(f32) if rows else jnp.zeros((1, K), f32)
    params = np.array(
        [
            [
                DRAW_KINDS[st.family],
                v,
                0.0 if st.family == "fixed" else st.a,
                st.b,
                st.scale,
                st.a if st.family == "fixed" else 0.0,
            ]
            for st, v in zip(prog.states, prog.vocabs, strict=True)
        ],
        np.float64,
    ).ravel()
    operands = (neglog, fixed, law.log_init.astype(f32), law.log_kernel.astype(f32))
    return _tree_call(TARGET_MARKOV, operands, tree_keys, P, dict(K=np.int64(K), params=params))


@partial(jax.jit, static_argnames=("K", "prog"))
def _rows(law: Law, draw_keys, K: int, prog: NativeDrawn):
    table, attrs = _drawn_operands(law, K, prog)
    kd = jax.random.key_data(draw_keys).astype(jnp.uint32)
    out = jax.ShapeDtypeStruct((kd.shape[0], K), jnp.float32)
    return jax.ffi.ffi_call(TARGET_ROWS, out, vmap_method="sequential")(table, kd, **attrs)


def draw_rows(law: Law, draw_keys, K: int) -> jax.Array:
    """The native kernel's node law: ``[B, K]``, the K largest log-probabilities (decreasing, -inf past V) it gives
    the nodes whose draw keys (``fold_in(node key, 0)``, threefry) are ``draw_keys [B]``. A one-line error for a law
    it does not draw or without a compiler."""
    prog = drawn_program(law)
    if prog is None or not _threefry(draw_keys):
        raise BrwsimError(
            f"the native kernel draws the nodes of dirichlet, logitnormal, zipf and temp of them only, not {law.spec()}"
        )
    if not available():
        raise BrwsimError("the native kernel is unavailable (no C++ compiler)")
    return _rows(law, draw_keys, K=int(K), prog=prog)


def _dispatch(law: Law, tree_keys, P: int, K: int, prog):
    if isinstance(prog, NativeMarkov):
        return _call_markov(law, tree_keys, P, K, prog)
    return (_call_drawn if isinstance(prog, NativeDrawn) else _call)(law, tree_keys, P, K, prog)


@partial(jax.jit, static_argnames=("P", "K", "prog"))
def native_kernel(law: Law, tree_keys, P: int, K: int, prog):
    """The native search for a batch of trees on one CPU device: (tree ``[B, P]``, dropped ``[B]``)."""
    return _dispatch(law, tree_keys, P, K, prog)


@cache
def _sharded(devices: tuple, P: int, K: int, prog):
    trees = PartitionSpec(TREES_AXIS)
    f = jax.shard_map(
        lambda law, keys: _dispatch(law, keys, P, K, prog),
        mesh=mesh(devices),
        in_specs=(PartitionSpec(), trees),
        out_specs=(trees, trees),
        check_vma=False,
    )
    return jax.jit(f)


def run_native(law: Law, tree_keys, P: int, K: int, devs) -> tuple:
    """(trees, dropped) of the native kernel, over ``devs`` (a tuple of CPU devices) if given."""
    prog = law.native_program()
    if isinstance(prog, (NativeDrawn, NativeMarkov)):
        rows = (P + 1) * min(K, int(law.vocab)) * 4
        if rows > ROW_BYTES_MAX:
            raise BrwsimError(
                f"P={P}: the native kernel keeps every node's {min(K, int(law.vocab))} largest entries, "
                f"{rows / 1e9:.3g} GB a tree, more than {ROW_BYTES_MAX / 1e9:.3g} GB; use --kernel jax"
            )
    if devs:
        return _sharded(devs, P, K, prog)(law, tree_keys)
    return native_kernel(law, tree_keys, P=P, K=K, prog=prog)
