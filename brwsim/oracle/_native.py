"""The native CPU oracle: the same best-first search in C++, called from the jitted program through XLA's FFI.

``brwsim/data/oracle_native.cc`` builds exactly the trees of the JAX kernel
(:mod:`._kernel`) for the laws it serves, bit for bit: the same threefry node
keys, rows and states, the same float32 path sums, the same tie-break. It is
compiled on first use with the system C++ compiler (``$CXX``, else ``$CC``,
else ``c++`` or ``g++``; ``-O3 -march=native``) into the user cache
(``brwsim.user_cache_dir()/native``), keyed by the source, the flags, the
compiler, the CPU and the jaxlib version, so a changed source or jaxlib
rebuilds. Without a compiler (or if the build fails) one line on stderr says
so and the JAX kernel runs: never a failure.

Laws served (:func:`program`): the indexed laws whose node process is integer
arithmetic on threefry bits: ``fixed``, ``pool`` (a row by ``randint``), the
benchmark's table law. Drawn laws (Dirichlet, logit-normal, Zipf) and Markov
laws draw with floating-point transcendental functions (``log`` in the Gumbel
draw of a state, gamma/normal variates), whose float32 values XLA computes
with its own approximations: a C++ copy could not promise the same bits, so
they stay on the JAX kernel.
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
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.sharding import PartitionSpec

from .._cache import user_cache_dir
from .._devices import TREES_AXIS, mesh
from ..errors import BrwsimError
from ..laws import Fixed, Law, Pool
from ..testing import TableLaw  # the benchmark's law (brwsim.testing imports the laws, not the oracle)
from ..tree import DraftTree

KERNELS = ("auto", "jax", "native")
TARGET = "brwsim_oracle_native"
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC")

INIT_ZERO, INIT_RANDINT = 0, 1
CHILD_ZERO, CHILD_HASH = 0, 1
ROW_ZERO, ROW_STATE, ROW_RANDINT = 0, 1, 2


class Program(NamedTuple):
    """How a served law's nodes get their hidden state and row (see oracle_native.cc)."""

    init_kind: int
    child_kind: int
    row_kind: int
    n_init: int
    n_hash: int


def program(law: Law) -> Program | None:
    """The native program of ``law``, or None when the native kernel does not serve it."""
    kind = type(law)
    if kind is Fixed:
        return Program(INIT_ZERO, CHILD_ZERO, ROW_ZERO, 0, 0)
    if kind is Pool:
        return Program(INIT_ZERO, CHILD_ZERO, ROW_RANDINT, 0, 0)
    if kind is TableLaw:
        n = int(law.logp.shape[0])
        return Program(INIT_RANDINT, CHILD_HASH, ROW_STATE, n, n)
    return None


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
    served = program(law) is not None and _threefry(tree_keys)
    if kernel == "native" and not (on_cpu and served):
        why = "CPU devices" if not on_cpu else "the laws fixed, pool and the benchmark's table law (threefry keys)"
        raise BrwsimError(f"the native oracle kernel serves only {why}; use --kernel jax or auto")
    return on_cpu and served and available()


def _call(law: Law, tree_keys, P: int, K: int, prog: Program):
    """The FFI call on one device's batch: (tree, dropped)."""
    table = law.row_table(K).astype(jnp.float32)
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
    attrs = {name: np.int64(v) for name, v in prog._asdict().items()}
    parent, depth, logp, rank, state, key = jax.ffi.ffi_call(TARGET, outs, vmap_method="sequential")(table, kd, **attrs)
    tree = DraftTree(parent=parent, depth=depth, logP=logp, rank=rank, state=state, key=key)
    return tree, jnp.full((B,), -jnp.inf, jnp.float32)


@partial(jax.jit, static_argnames=("P", "K", "prog"))
def native_kernel(law: Law, tree_keys, P: int, K: int, prog: Program):
    """The native search for a batch of trees on one CPU device: (tree ``[B, P]``, dropped ``[B]``)."""
    return _call(law, tree_keys, P, K, prog)


@cache
def _sharded(devices: tuple, P: int, K: int, prog: Program):
    trees = PartitionSpec(TREES_AXIS)
    f = jax.shard_map(
        lambda law, keys: _call(law, keys, P, K, prog),
        mesh=mesh(devices),
        in_specs=(PartitionSpec(), trees),
        out_specs=(trees, trees),
        check_vma=False,
    )
    return jax.jit(f)


def run_native(law: Law, tree_keys, P: int, K: int, devs) -> tuple:
    """(trees, dropped) of the native kernel, over ``devs`` (a tuple of CPU devices) if given."""
    prog = program(law)
    if devs:
        return _sharded(devs, P, K, prog)(law, tree_keys)
    return native_kernel(law, tree_keys, P=P, K=K, prog=prog)
