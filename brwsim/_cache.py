"""The user cache directory, and XLA's persistent compilation cache inside it.

Everything brwsim computes once and keeps lives under :func:`user_cache_dir`
(``$BRWSIM_CACHE``, else ``$XDG_CACHE_HOME/brwsim``, else ``~/.cache/brwsim``):
converted models, trained draft heads, a compiled C reference, and XLA's
compiled programs (``xla/``). A fresh process would otherwise compile every
jitted program again: a ``brwsim simulate`` call spends most of its first
seconds in XLA's compiler (docs/scaling.md, "Compilation"). The compiled
programs are keyed by JAX on the program, the JAX/XLA version and the
devices, so a stale entry is never used; loading one gives the same
executable, hence the same numbers.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import jax

from .errors import BrwsimError

OFF = frozenset({"0", "off", "none", "no", "false"})
MIN_COMPILE_SECONDS = 0.1  # programs faster to compile than this are not worth a file


def user_cache_dir() -> Path:
    """``$BRWSIM_CACHE``, else ``$XDG_CACHE_HOME/brwsim``, else ``~/.cache/brwsim``."""
    if os.environ.get("BRWSIM_CACHE"):
        return Path(os.environ["BRWSIM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "brwsim"


def _probe(d: Path) -> str | None:
    """None when a file can be created in the existing directory ``d``, else why not (the test is a real
    file: permission bits say nothing to root, a read-only file system or a full disk)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".brwsim-probe-")
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    os.unlink(tmp)
    return None


def check_path_name(path: str | os.PathLike, what: str) -> None:
    """A one-line :class:`BrwsimError` when the OS refuses to look the path up at all (a name or a component too
    long, a NUL byte); a path that does not exist yet is fine."""
    try:
        os.stat(os.path.expanduser(str(path)))
    except (FileNotFoundError, NotADirectoryError):
        return
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e)
        shown = repr(str(path)) if len(str(path)) <= 80 else repr(str(path)[:60]) + f"... ({len(str(path))} characters)"
        raise BrwsimError(f"{what} {shown} is not a usable path ({why}); give a shorter or another path") from None


def _existing_ancestor(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable_dir(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a directory brwsim can write in (made later, on first use, when absent): an existing
    directory, or a path whose nearest existing ancestor is a directory; checked by creating and removing a
    file. A file in the way, a missing ancestor that is a file, or a directory that refuses writes is a one-line
    :class:`BrwsimError` naming ``what`` (e.g. ``BRWSIM_OUT``, ``--save-pool``). Nothing is created."""
    p = Path(os.path.expanduser(str(path)))
    check_path_name(path, what)
    if p.exists() and not p.is_dir():
        raise BrwsimError(f"{what} {str(path)!r} is a file, not a directory: give a directory")
    base = _existing_ancestor(p.absolute())
    if not base.is_dir():
        raise BrwsimError(f"{what} {str(path)!r}: {base} is a file, so the directory cannot be made there")
    why = _probe(base)
    if why is not None:
        raise BrwsimError(f"{what} {str(path)!r}: cannot write in {base} ({why}); give a writable directory")
    return p


def check_writable_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a file brwsim can write (replacing any file there): not a directory, its directory exists and
    takes a new file. One-line :class:`BrwsimError` naming ``what`` (e.g. ``--record``) otherwise."""
    p = Path(os.path.expanduser(str(path)))
    if not str(path).strip():
        raise BrwsimError(f"{what} needs a file name")
    check_path_name(path, what)
    if p.is_dir():
        raise BrwsimError(f"{what} {str(path)!r} is a directory: give a file name (e.g. {p / 'rows.npz'})")
    parent = p.absolute().parent
    if not parent.is_dir():
        why = "is a file" if parent.exists() else "does not exist"
        raise BrwsimError(f"{what} {str(path)!r}: its directory {parent} {why}; create it or give another path")
    why = _probe(parent)
    if why is not None:
        raise BrwsimError(f"{what} {str(path)!r}: cannot write in {parent} ({why}); give a writable directory")
    return p


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path | None:
    """Keep XLA's compiled programs on disk so that the next process does not compile them again.

    ``path`` (default ``$BRWSIM_XLA_CACHE``, else ``<user cache>/xla``); ``BRWSIM_XLA_CACHE=off``
    turns it off (returns None). Call it before the first jitted call: JAX opens its cache
    once. The ``brwsim`` command and the experiment scripts call it; a Python program that
    imports brwsim decides for itself. Returns the directory in use.
    """
    where = path if path is not None else os.environ.get("BRWSIM_XLA_CACHE")
    if where is not None and str(where).strip().lower() in OFF:
        return None
    d = Path(where) if where else user_cache_dir() / "xla"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        env = "BRWSIM_XLA_CACHE" if where else "BRWSIM_CACHE (or BRWSIM_XLA_CACHE)"
        raise BrwsimError(
            f"cannot create the XLA compilation cache {d} ({e.strerror}); "
            f"set {env} to a writable directory, or BRWSIM_XLA_CACHE to 'off'"
        ) from None
    jax.config.update("jax_compilation_cache_dir", str(d))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return d
