"""Saved-logits files: :class:`FileSource` answers from one, :class:`Recorder` writes one (numpy only).

Format: docs/llm.md, "Saved-logits files" and :func:`save_logits`.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence

import numpy as np

from ...errors import BrwsimError
from ._base import Context, LogitsSource, WrappedWalker, Wrapper

FILE_FORMAT = "brwsim-logits-v1"


def _key(prompt: Sequence[int], prefix: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(int(t) for t in prompt), tuple(int(t) for t in prefix)


def save_logits(path: str, name: str, vocab_size: int, eos_ids, entries, texts: dict | None = None) -> None:
    """Write a saved-logits file.

    ``entries`` is a list of ``(prompt_ids, prefix_ids, logp)`` with ``logp``
    the full next-token log-probability row (length ``vocab_size``) after
    ``prompt_ids + prefix_ids``; ``texts`` optionally maps prompt text to
    its ids (so that the file can answer :meth:`FileSource.encode`).
    Format (a NumPy ``.npz``; see docs/llm.md):

    ``meta``            JSON string: format, name, vocab_size, eos_ids, texts
    ``prompt_tokens``   int32, all prompts' ids concatenated
    ``prompt_offsets``  int64 [n_prompts + 1]
    ``row_prompt``      int32 [N]: which prompt each row belongs to
    ``prefix_tokens``   int32, all continuation prefixes concatenated
    ``prefix_offsets``  int64 [N + 1]
    ``logp``            float16 or float32 [N, vocab_size]
    """
    prompts: dict[tuple[int, ...], int] = {}
    row_prompt, prefix_tokens, prefix_offsets, rows = [], [], [0], []
    seen = set()
    for prompt, prefix, lp in entries:
        k = _key(prompt, prefix)
        if k in seen:
            continue
        seen.add(k)
        pi = prompts.setdefault(k[0], len(prompts))
        row_prompt.append(pi)
        prefix_tokens.extend(k[1])
        prefix_offsets.append(len(prefix_tokens))
        rows.append(np.asarray(lp, np.float32))
    p_tokens, p_offsets = [], [0]
    for p in prompts:
        p_tokens.extend(p)
        p_offsets.append(len(p_tokens))
    meta = {
        "format": FILE_FORMAT,
        "name": name,
        "vocab_size": int(vocab_size),
        "eos_ids": sorted(int(e) for e in eos_ids),
        "texts": {t: [int(i) for i in ids] for t, ids in (texts or {}).items()},
    }
    logp = np.stack(rows) if rows else np.zeros((0, vocab_size), np.float32)
    tmp = f"{path}.tmp.npz"
    np.savez_compressed(
        tmp,
        meta=np.array(json.dumps(meta)),
        prompt_tokens=np.asarray(p_tokens, np.int32),
        prompt_offsets=np.asarray(p_offsets, np.int64),
        row_prompt=np.asarray(row_prompt, np.int32),
        prefix_tokens=np.asarray(prefix_tokens, np.int32),
        prefix_offsets=np.asarray(prefix_offsets, np.int64),
        logp=logp,
    )
    os.replace(tmp, path)


class FileSource(LogitsSource):
    """Answers from a saved-logits file (written by :func:`save_logits`).

    A question the file does not answer is a :class:`BrwsimError` naming the
    prompt and prefix: the run that saved the file must have asked the same
    questions (same prompts, P, walks, depth and seed; see :class:`Recorder`).
    """

    def __init__(self, path: str):
        try:
            with open(os.path.expanduser(path), "rb") as f:
                raw = f.read()
        except OSError as e:
            raise BrwsimError(f"saved-logits file {path!r} cannot be read: {e.strerror or e}") from None
        try:
            z = np.load(io.BytesIO(raw), allow_pickle=False)
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FILE_FORMAT:
                raise ValueError
            pt, po = z["prompt_tokens"], z["prompt_offsets"]
            rp, xt, xo, logp = z["row_prompt"], z["prefix_tokens"], z["prefix_offsets"], z["logp"]
        except Exception:
            raise BrwsimError(
                f"saved-logits file {path!r} is not a {FILE_FORMAT} .npz (see docs/llm.md, 'Saved-logits files')"
            ) from None
        V = int(meta["vocab_size"])
        if logp.ndim != 2 or logp.shape[1] != V or logp.shape[0] != rp.shape[0]:
            raise BrwsimError(f"saved-logits file {path!r}: logp must be [rows, vocab_size={V}], got {logp.shape}")
        self.path = path
        self.name = str(meta.get("name", path))
        self.vocab_size = V
        self.eos_ids = frozenset(int(e) for e in meta.get("eos_ids", []))
        self.texts = {t: list(ids) for t, ids in meta.get("texts", {}).items()}
        prompts = [tuple(int(t) for t in pt[po[i] : po[i + 1]]) for i in range(len(po) - 1)]
        self._rows: dict[tuple, dict[tuple, int]] = {p: {} for p in prompts}
        for r in range(rp.shape[0]):
            prefix = tuple(int(t) for t in xt[xo[r] : xo[r + 1]])
            self._rows[prompts[int(rp[r])]][prefix] = r
        self._logp = logp

    def encode(self, text: str) -> list[int]:
        if text not in self.texts:
            raise BrwsimError(
                f"saved-logits file {self.path!r} has no prompt {text[:40]!r}...; use the prompts it was saved with"
            )
        return list(self.texts[text])

    def open(self, prompt_ids):
        prompt = tuple(int(t) for t in prompt_ids)
        if prompt not in self._rows:
            raise BrwsimError(f"saved-logits file {self.path!r} has no prompt equal to this {len(prompt)}-token one")
        return _FileContext(self, prompt)


class _FileContext(Context):
    def __init__(self, src: FileSource, prompt: tuple[int, ...]):
        self.src = src
        self.prompt = prompt
        self.rows = src._rows[prompt]
        self.root = self.logprobs([()])[0]

    def logprobs(self, prefixes):
        idx = []
        for p in prefixes:
            p = tuple(int(t) for t in p)
            if p not in self.rows:
                raise BrwsimError(
                    f"saved-logits file {self.src.path!r} has no row for continuation {list(p)[:8]} "
                    f"(length {len(p)}) of a saved prompt; save it with the same P, walks, depth and seed"
                )
            idx.append(self.rows[p])
        return np.asarray(self.src._logp[idx], np.float32)


class Recorder(Wrapper):
    """Wraps a source and keeps every answer; :meth:`save` writes them (see :func:`save_logits`)."""

    def __init__(self, inner: LogitsSource, dtype=np.float16):
        super().__init__(inner)
        self.dtype = dtype
        self.entries: list = []
        self.saved: set = set()  # (prompt, prefix) of each saved row
        self.texts: dict[str, list[int]] = {}

    def encode(self, text):
        ids = self.inner.encode(text)
        self.texts[text] = list(ids)
        return ids

    def open(self, prompt_ids):
        return _RecordingContext(self, tuple(int(t) for t in prompt_ids), self.inner.open(prompt_ids))

    def save(self, path: str) -> None:
        save_logits(path, self.name, self.vocab_size, self.eos_ids, self.entries, self.texts)


class _RecordingContext(Context):
    def __init__(self, rec: Recorder, prompt, inner: Context):
        self.rec, self.prompt, self.inner = rec, prompt, inner
        self.root = inner.root
        self.keep([()], inner.root[None])

    def logprobs(self, prefixes):
        out = self.inner.logprobs(prefixes)
        self.keep(prefixes, out)
        return out

    def keep(self, prefixes, rows) -> None:
        for p, row in zip(prefixes, rows, strict=True):
            if (self.prompt, tuple(p)) not in self.rec.saved:  # a row asked again is saved once
                self.rec.saved.add((self.prompt, tuple(p)))
                self.rec.entries.append((self.prompt, tuple(p), np.asarray(row).astype(self.rec.dtype)))

    def walker(self, n):
        return _RecordingWalker(self, self.inner.walker(n))

    def transfer(self):
        return self.inner.transfer()


class _RecordingWalker(WrappedWalker):
    def rows(self, rows):
        self.ctx.keep(self.prefixes, rows)
        return rows
