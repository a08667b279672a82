"""Laws several test modules share (a module of its own: ``conftest`` is not importable by name once
tests/llm has its own conftest)."""

# a Markov law mixing an indexed state (fixed) with a drawn one (dirichlet): the oracle's drawn-law path
MIXED_MARKOV = {
    "states": {"a": "fixed:probs=0.9/0.1", "b": "dirichlet:V=2,alpha=1"},
    "initial": "a",
    "kernel": {"a": [[0.5, 0.5]], "b": [[0.5, 0.5]]},
}
