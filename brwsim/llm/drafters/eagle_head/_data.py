"""Training text that ships offline: the Python standard library (``corpus="stdlib"``, the default) or
ShareGPT conversations (``corpus="sharegpt"``, the way EAGLE trains its heads; :func:`sharegpt_chunks`).

Every ``.py`` file under ``sysconfig.get_paths()["stdlib"]`` except installed
third-party packages (``site-packages``, ``dist-packages``), test suites
(``test``, ``tests``, ``idle_test``) and ``pydoc_data`` (the prose prompts of
:func:`brwsim.llm.prompts.pydoc` are drawn from it). HumanEval is not in the
standard library. Files are split by a hash of their relative path: one in
:data:`HELDOUT_EVERY` is held out. Each side's file list is shuffled with the
seed; windows of ``seq_len`` consecutive tokens are taken in that order (at
most ``chunks_per_file`` per file, evenly spaced through the file's first
``12 * seq_len * chunks_per_file`` characters), so only the files used, and
only that much of each, are tokenized.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from pathlib import Path

import numpy as np

from ....errors import BrwsimError

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "pydoc_data", "__pycache__"})
HELDOUT_EVERY = 10
CHARS_PER_TOKEN = 6


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """Relative paths of the usable ``.py`` files, sorted."""
    root = root or stdlib_root()
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if not EXCLUDED_DIRS.intersection(rel.parts[:-1]) and p.is_file():
            out.append(rel)
    if not out:
        raise BrwsimError(f"no Python standard library sources under {root}: the eagle head trains on them")
    return sorted(out)


def is_heldout(rel: Path) -> bool:
    return int.from_bytes(hashlib.sha256(str(rel.as_posix()).encode()).digest()[:4], "little") % HELDOUT_EVERY == 0


def _windows(ids: list[int], seq_len: int, k: int) -> list[np.ndarray]:
    n = len(ids) // seq_len
    if n == 0:
        return []
    picks = sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(min(k, n))})
    return [np.asarray(ids[j * seq_len : (j + 1) * seq_len], np.int64) for j in picks]


CORPORA = ("stdlib", "sharegpt")
SHAREGPT_SPLIT = "by-conversation, repeats of an evaluation prompt dropped"  # in the chat head's cache key


def _conversation_heldout(conversation: str) -> bool:
    return int.from_bytes(hashlib.sha256(conversation.encode()).digest()[:4], "little") % HELDOUT_EVERY == 0


def chat_training_texts() -> list:
    """ShareGPT training chunks (:class:`brwsim.llm.sources._sharegpt.Chat`: conversation, first turn, text): no
    chunk of a conversation that has an evaluation chunk, none whose first user turn repeats an evaluation prompt
    (:func:`brwsim.llm.sources._sharegpt.training_texts`)."""
    from ...sources._sharegpt import training_texts

    return training_texts()


def sharegpt_chunks(tokenizer, n: int, seq_len: int, per_conv: int, seed: int, heldout: bool, texts=None):
    """``[n, seq_len]`` token windows of ShareGPT training chunks only (the chat prompts of
    :func:`brwsim.llm.sources.load_prompts` come from conversations none of whose chunks is here), as
    "User: ... Assistant: ..." text; ``texts``: (conversation, ..., text) tuples, default
    :func:`chat_training_texts`. One conversation in :data:`HELDOUT_EVERY` (by a hash of its id, so all its chunks
    on one side) is held out. At most ``per_conv`` windows per chunk, chunks in a seeded order; and which chunks
    were used."""
    if texts is None:
        texts = chat_training_texts()
    texts = [t[-1] for t in texts if _conversation_heldout(t[0]) == heldout]
    order = np.random.default_rng([seed, 3 if heldout else 2]).permutation(len(texts))
    out: list[np.ndarray] = []
    used: list[str] = []
    for i in order:
        if len(out) >= n:
            break
        w = _windows(tokenizer(texts[i], add_special_tokens=False)["input_ids"], seq_len, per_conv)
        if w:
            out += w[: n - len(out)]
            used.append(f"sharegpt-train:{hashlib.sha256(texts[i].encode()).hexdigest()[:12]}")
    if len(out) < n:
        raise BrwsimError(f"the ShareGPT training split gave only {len(out)} of {n} windows of {seq_len} tokens")
    return np.stack(out), used


def chunks(
    tokenizer, n: int, seq_len: int, per_file: int, seed: int, heldout: bool, corpus: str = "stdlib"
) -> tuple[np.ndarray, list[str]]:
    """``[n, seq_len]`` token windows of the training (or held-out) side, and the files they came from."""
    if corpus == "sharegpt":
        return sharegpt_chunks(tokenizer, n, seq_len, per_file, seed, heldout)
    root = stdlib_root()
    files = [f for f in stdlib_files(root) if is_heldout(f) == heldout]
    order = np.random.default_rng([seed, 1 if heldout else 0]).permutation(len(files))
    out: list[np.ndarray] = []
    used: list[str] = []
    for i in order:
        if len(out) >= n:
            break
        try:  # the windows are taken from the first characters only: tokenize those
            text = (root / files[i]).read_text(encoding="utf-8")[: CHARS_PER_TOKEN * seq_len * per_file * 2]
        except (OSError, UnicodeDecodeError):
            continue
        w = _windows(tokenizer(text, add_special_tokens=False)["input_ids"], seq_len, per_file)
        if w:
            out += w[: n - len(out)]
            used.append(files[i].as_posix())
    if len(out) < n:
        raise BrwsimError(f"the standard library under {root} gave only {len(out)} of {n} windows of {seq_len} tokens")
    return np.stack(out), used


def data_spec(train: np.ndarray, heldout: np.ndarray, corpus: str = "stdlib") -> dict:
    """What the head was trained on, for its cache key and its metadata (the windows' tokens; for ShareGPT also
    the rule that chose its chunks, so a head trained under an earlier rule is never loaded for this one)."""
    spec = {
        "corpus": "python-stdlib" if corpus == "stdlib" else corpus,
        "python": sys.version.split()[0],
        "train_sha256": hashlib.sha256(np.ascontiguousarray(train).tobytes()).hexdigest(),
        "heldout_sha256": hashlib.sha256(np.ascontiguousarray(heldout).tobytes()).hexdigest(),
    }
    if corpus == "sharegpt":
        spec["split"] = SHAREGPT_SPLIT
    return spec
