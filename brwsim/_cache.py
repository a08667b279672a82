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
        raise BrwsimError(
            f"cannot create the XLA compilation cache {d} ({e.strerror}); "
            "set BRWSIM_XLA_CACHE to a writable directory, or to 'off'"
        ) from None
    jax.config.update("jax_compilation_cache_dir", str(d))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return d
