"""Checkpoints of ``simulate``: its running sums after every finished round, so a rerun resumes bit for bit.

A checkpoint directory holds one file per run, named by a hash of what fixes
the run's numbers: the law, budgets, trees, seed, drafter, draft law and
check, the resolved content of the law, drafter and draft law (every array
they hold and the bytes of every file they name, so a law file changed under
the same path is another run), and the code that computes the trees (a hash
of the package's simulation sources and the C++ kernel, and the JAX, jaxlib
and NumPy versions). The same arguments on the same files and code find
their file; anything else never does. The file holds how many trees are
finished (always the first ones, in tree order), every running statistic
exactly (:meth:`brwsim._stats.RunningStat.state`) and a SHA-256 checksum of
all of it: a truncated, corrupt or edited file is refused in one line, never
resumed. Resuming adds the remaining trees in the same order, and the
per-tree values do not depend on the batch, the devices or the process
count, so a resumed run prints what an uninterrupted one prints, bit for bit,
whatever those are. Files are written to a unique temporary name and renamed
(atomic), by process 0 only; process 0 reads the file and hands it to the
others.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import jax
import jaxlib
import numpy as np

from . import _interrupts as interrupts
from .errors import BrwsimError

FORMAT = 2
PACKAGE = Path(__file__).resolve().parent


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# the modules behind a tree's value (with every brwsim module they import), the driver that adds the values
# up (its running sums and their gathering across processes), and the C++ kernel: their sources are the code
# version of a checkpoint; the bounds, the command line and the real-model side are not in it
TREE_CODE = ("tree", "oracle", "drafters", "laws", "_keys", "_stats", "_lowering", "_devices")
DRIVER = ("estimate.py", "_sums.py", "_gather.py")


def _module_file(name: str) -> Path | None:
    p = PACKAGE.joinpath(*name.split(".")[1:])
    for f in (p.with_suffix(".py"), p / "__init__.py"):
        if f.is_file():
            return f
    return None


def _imports(name: str, path: Path) -> set[str]:
    """The brwsim modules the module ``name`` (file ``path``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("brwsim.")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.startswith("brwsim"):
                out |= {f"{base}.{a.name}" if _module_file(f"{base}.{a.name}") else base for a in node.names}
    return out


@functools.cache
def code_version() -> str:
    """A hash of the code behind a tree's value: the sources of :data:`TREE_CODE` and of every brwsim module
    they import, of the :data:`DRIVER` files, the C++ kernel's source, and the JAX, jaxlib and NumPy versions."""
    h = hashlib.sha256(f"jax {jax.__version__} jaxlib {jaxlib.__version__} numpy {np.__version__}".encode())
    todo, files = [f"brwsim.{m}" for m in TREE_CODE], {}
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is not None and name not in files:
            files[name] = path
            todo += sorted(_imports(name, path))
    for p in sorted({*files.values(), *(PACKAGE / f for f in DRIVER), *PACKAGE.rglob("*.cc")}):
        h.update(f"\0{p.relative_to(PACKAGE).as_posix()}\0".encode() + p.read_bytes())
    return h.hexdigest()[:16]


def content_digest(obj) -> str:
    """A hash of what ``obj`` (a law, drafter or draft law) resolved to: its type, every field, the bytes of
    every array it holds and of every file a ``path`` field names."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()[:16]


def _feed(h, obj) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(f"<{type(obj).__module__}.{type(obj).__qualname__}>".encode())
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            h.update(f"\0{f.name}=".encode())
            _feed(h, value)
            if f.name == "path" and isinstance(value, str) and value:
                h.update(b"\0file=" + _file_bytes(value))
    elif isinstance(obj, (tuple, list)):
        h.update(f"[{len(obj)}".encode())
        for x in obj:
            _feed(h, x)
    elif isinstance(obj, dict):
        h.update(f"{{{len(obj)}".encode())
        for k in sorted(obj, key=repr):
            _feed(h, k)
            _feed(h, obj[k])
    elif hasattr(obj, "shape") and hasattr(obj, "dtype"):
        a = np.ascontiguousarray(np.asarray(obj))
        h.update(f"<{a.dtype.str}{a.shape}>".encode() + a.tobytes())
    else:
        h.update(repr(obj).encode())


def _file_bytes(path: str) -> bytes:
    try:
        with open(os.path.expanduser(path), "rb") as f:
            return hashlib.sha256(f.read()).digest()
    except OSError:
        return b"<unreadable>"


def _checksum(arrays: dict) -> str:
    """SHA-256 of every array of a checkpoint: its name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(np.asarray(arrays[name]))
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode() + a.tobytes())
    return h.hexdigest()


class Checkpoint:
    """The checkpoint file of one run (``meta``: what fixes its numbers) in ``directory``."""

    def __init__(self, directory, meta: dict):
        self.dir = Path(directory).expanduser()
        self.meta = {"format": FORMAT} | meta
        text = json.dumps(self.meta, sort_keys=True)
        self.path = self.dir / f"simulate-{hashlib.sha256(text.encode()).hexdigest()[:16]}.npz"

    def check_writable(self) -> None:
        """A one-line error now, before any work, if the directory cannot hold the checkpoint."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BrwsimError(f"--checkpoint {self.dir}: cannot create the directory ({e.strerror})") from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise BrwsimError(f"--checkpoint {self.dir}: the directory is not writable; choose another")

    def refuse(self, why: str) -> BrwsimError:
        """The one-line error for a file this run cannot resume from, saying how to start afresh."""
        return BrwsimError(
            f"checkpoint {self.path} {why}; nothing was resumed: delete that file (or the directory {self.dir}) "
            "to start the run afresh, or pass another --checkpoint DIR"
        )

    def load(self) -> tuple[int, list[dict]] | None:
        """(trees finished, states of the statistics) from this run's file, or None if there is none; a file
        that cannot be read, fails its checksum or belongs to another run is refused (:meth:`refuse`)."""
        if not os.path.lexists(self.path):
            return None
        try:
            with np.load(self.path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as e:  # noqa: BLE001 - truncated or corrupt archives raise many kinds (BadZipFile, EOFError...)
            raise self.refuse(f"cannot be read ({type(e).__name__}: it is truncated or corrupt)") from None
        stored = arrays.pop("sha256", None)
        if stored is None or stored.shape != () or str(stored) != _checksum(arrays):
            raise self.refuse("is corrupt or was edited (its SHA-256 checksum does not match its contents)")
        try:
            meta = json.loads(str(arrays["meta"]))
            done, count = int(arrays["done"]), int(arrays["count"])
            states = [
                {"buf": arrays[f"buf{i}"], "n": int(arrays["n"][i]), "mean": float(arrays["mean"][i]),
                 "m2": float(arrays["m2"][i])}
                for i in range(count)
            ]  # fmt: skip
        except (KeyError, ValueError, TypeError, IndexError):
            raise self.refuse("is not a checkpoint of this version of brwsim") from None
        if meta != self.meta:
            raise self.refuse("belongs to another run")
        if not 0 <= done <= int(meta.get("trees", 0)):
            raise self.refuse(f"says {done} trees are finished, not between 0 and {meta.get('trees')}")
        return done, states

    def save(self, done: int, states: list[dict]) -> None:
        """Write ``done``, the statistics' states and their checksum: a unique temporary file, then an atomic
        rename. A signal during the write is held until the file is in place (then it interrupts as usual)."""
        with interrupts.deferred():
            self._write(done, states)

    def _write(self, done: int, states: list[dict]) -> None:
        arrays = {f"buf{i}": s["buf"] for i, s in enumerate(states)}
        arrays |= {
            "meta": np.array(json.dumps(self.meta, sort_keys=True)),
            "done": np.array(done, np.int64),
            "count": np.array(len(states), np.int64),
            "n": np.array([s["n"] for s in states], np.int64),
            "mean": np.array([s["mean"] for s in states], np.float64),
            "m2": np.array([s["m2"] for s in states], np.float64),
        }
        arrays["sha256"] = np.array(_checksum(arrays))
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=self.path.stem + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


__all__ = ["Checkpoint", "code_version", "content_digest"]
