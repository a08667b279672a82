"""The compiled best-first reference (``reference_oracle.c``), built once with the system C compiler.

    from reference_c import oracle_c
    lp, parent, rank = oracle_c(table, roots, P, K, threads=1)

``table`` is the table law's ``[rows, V]`` float32 log-probabilities (sorted
rows), ``roots`` the trees' root rows. The shared library is compiled with
``cc -O3 -march=native`` into the user cache directory (``brwsim.user_cache_dir()``,
then ``bench/``), keyed by a hash of the source and flags,
so a changed source rebuilds. ``threads`` > 1 splits the trees into that many
contiguous chunks run by Python threads (ctypes releases the GIL during the
call), one per core.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np

from brwsim import user_cache_dir

SOURCE = Path(__file__).with_name("reference_oracle.c")
FLAGS = ["-O3", "-march=native", "-shared", "-fPIC"]
_LIB: list = []


def compiler() -> str | None:
    """The C compiler to use (``$CC``, else cc or gcc on the PATH), or None."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def load():
    """The compiled library (built on first use); a SystemExit with one line if no compiler works."""
    if _LIB:
        return _LIB[0]
    cc = compiler()
    if cc is None:
        raise SystemExit("the compiled reference needs a C compiler: install gcc or set CC")
    src = SOURCE.read_bytes()
    tag = hashlib.sha256(src + " ".join([cc, *FLAGS]).encode()).hexdigest()[:16]
    so = user_cache_dir() / "bench" / f"reference_oracle-{tag}.so"
    if not so.exists():
        so.parent.mkdir(parents=True, exist_ok=True)
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        p = subprocess.run([cc, *FLAGS, str(SOURCE), "-o", str(tmp), "-lm"], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"building the compiled reference failed: {p.stderr.strip().splitlines()[:1]}")
        os.replace(tmp, so)
    lib = ctypes.CDLL(str(so))
    f = lib.oracle_table
    i32, i64, ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
    f.argtypes = [ptr, i32, i32, i32, ptr, i64, i32, ptr, ptr, ptr]
    f.restype = ctypes.c_int
    _LIB.append(f)
    return f


def oracle_c(table: np.ndarray, roots, P: int, K: int, threads: int = 1):
    """Oracle trees of the table law for these root rows: float32 logP, int32 parent and rank, each [B, P]."""
    f = load()
    table = np.ascontiguousarray(table, np.float32)
    roots = np.ascontiguousarray(roots, np.int32)
    B = roots.shape[0]
    lp = np.empty((B, P), np.float32)
    par = np.empty((B, P), np.int32)
    rank = np.empty((B, P), np.int32)
    n_rows, V = table.shape
    K = min(K, V)
    errors = []

    def run(lo: int, hi: int) -> None:
        if hi > lo:
            args = [a.ctypes.data + lo * P * a.itemsize for a in (lp, par, rank)]
            rc = f(table.ctypes.data, n_rows, V, K, roots.ctypes.data + lo * 4, hi - lo, P, *args)
            if rc:
                errors.append(rc)

    cuts = np.linspace(0, B, max(1, threads) + 1).astype(int)
    if threads <= 1:
        run(0, B)
    else:
        ts = [threading.Thread(target=run, args=(int(a), int(b))) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    if errors:
        raise MemoryError("the compiled reference ran out of memory")
    return lp, par, rank
