"""Tests of the real-model side (brwsim.llm): the shipped and tiny models as session fixtures, and the markers.

``needs_llm``: the test needs the ``llm`` extra (torch, transformers, ...); skipped without it (never on CI, where
the extra is installed and a missing one must fail). ``slow``: the longest cases (deselect with ``-m "not slow"``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/tiny_llm.py

from brwsim.llm import missing_llm_modules  # noqa: E402

HAVE_LLM = not missing_llm_modules()


def pytest_collection_modifyitems(config, items):
    if HAVE_LLM or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason="llm extra not installed")
    for item in items:
        if "needs_llm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shipped():
    """SmolLM2-135M-Instruct (the shipped model), loaded once per session, one thread, on the CPU."""
    from brwsim.llm.sources import load_source

    return load_source("smollm2-135m", threads=1, device="cpu")


@pytest.fixture(scope="session")
def tiny_llama_source():
    """A 3-layer random Llama (vocabulary 11) as an HF source, loaded once per session."""
    from tiny_llm import tiny_llama

    from brwsim.llm.sources._hf import HFSource

    return HFSource(tiny_llama(11, n_layers=3), None, name="tiny", threads=1, device="cpu")
