"""Real language models as the source of the token tree (docs/llm.md).

Importing this package needs only numpy: the Hugging Face source loads torch
and transformers when a model is opened, and says what to install when they
are missing (``pip install -e '.[llm]'``).

One concept per subpackage, as :mod:`brwsim.laws` and :mod:`brwsim.drafters`:

- :mod:`brwsim.llm.sources`: the logits-source interface and its
  implementations (transformers/GGUF, saved-logits files, temperature), the
  named models and the prompt sets.
- :mod:`brwsim.llm.measure`: walks, mu/mu_2, the real oracle tree (the one
  best-first search), the i.i.d. surrogate, the bounds.
- :mod:`brwsim.llm.drafters`: real drafters, a registry of classes parsed by
  the one SPEC parser; their trees, values, direct check and summaries.
- :mod:`brwsim.llm.results`: the typed results (``to_dict()`` is the JSON).
- :mod:`brwsim.llm.run`: :class:`RunOptions` and :func:`run_llm`, the one pipeline.

The timing of a verification pass lives in :mod:`brwsim.speedup`.
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
