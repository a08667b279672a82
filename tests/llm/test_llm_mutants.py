"""brwsim/llm: tests written against the survivors of a random sample of mutmut's mutants (docs/testing.md,
"The real-model side"); no model is loaded."""

from __future__ import annotations

import brwsim.llm


def test_the_llm_package_imports_without_loading_a_model():
    assert brwsim.llm.__name__ == "brwsim.llm"
