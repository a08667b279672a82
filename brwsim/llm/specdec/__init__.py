"""Real speculative decoding on a transformers target (docs/speedup.md, "Checked against real speculative decoding").

:func:`speculative_generate`: a real drafter (:mod:`brwsim.llm.drafters`) and
its builder fixed in advance draft a tree of at most P nodes below the text;
the target verifies the whole tree in one forward pass with a 4D tree
attention mask over its KV cache; the accepted path and the target's
correction or bonus token are appended (the cache keeps the accepted path and
drops the rest); repeat. Greedy at T = 0 (the output is plain greedy
decoding's), exact recursive rejection sampling over sibling sets at T > 0
(the output is distributed as the target's). :func:`plain_generate`: plain
decoding on the same code, the baseline of the speedup.
"""

from ._draft import DraftSession, HeadChain, PackedChain, open_chain
from ._loop import LOOP_VERSION, Generation, plain_generate, speculative_generate
from ._target import TargetSession
from ._verify import Distribution, HostRows, TreeRows, children_of, rejection_step, verify_tree

__all__ = [
    "LOOP_VERSION",
    "Distribution",
    "DraftSession",
    "Generation",
    "HeadChain",
    "HostRows",
    "PackedChain",
    "TargetSession",
    "TreeRows",
    "children_of",
    "open_chain",
    "plain_generate",
    "rejection_step",
    "speculative_generate",
    "verify_tree",
]
