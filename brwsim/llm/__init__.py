"""Real language models as the source of the token tree (docs/llm.md).

Importing this package needs only numpy: the Hugging Face source loads torch
and transformers when a model is opened, and says what to install when they
are missing (``pip install -e '.[llm]'``).

- :mod:`brwsim.llm.source`: the logits-source protocol, saved-logits files.
- :mod:`brwsim.llm.hf`: transformers causal LMs (KV-cache reuse, batched tree passes).
- :mod:`brwsim.llm.models`: ``smollm2-135m``, ``gemma3-270m``, paths.
- :mod:`brwsim.llm.prompts`: ``humaneval``, ``pydoc`` (prose), JSON-lines files.
- :mod:`brwsim.llm.measure`: walks, mu/mu_2, the real oracle tree, the i.i.d.
  surrogate pool, the bounds.
"""

from __future__ import annotations

import importlib.util

from ..errors import BrwsimError

LLM_MODULES = ("torch", "transformers", "gguf", "accelerate", "safetensors")
INSTALL_HINT = "pip install -e '.[llm]'"


def _absent(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):  # e.g. sys.modules[name] = None: blocked
        return True


def missing_llm_modules() -> list[str]:
    return [m for m in LLM_MODULES if _absent(m)]


def require_llm() -> None:
    """Raise a one-line :class:`BrwsimError` unless the ``llm`` extra is installed."""
    missing = missing_llm_modules()
    if missing:
        raise BrwsimError(f"the llm extra is not installed (missing {', '.join(missing)}): {INSTALL_HINT}")


__all__ = ["INSTALL_HINT", "missing_llm_modules", "require_llm"]
