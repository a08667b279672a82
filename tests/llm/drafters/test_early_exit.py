"""Early exit is a drafter like the others (brwsim.llm.drafters.early_exit): the tiny model, then the shipped one."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim.errors import BrwsimError

pytestmark = pytest.mark.needs_llm


def test_exit_at_every_layer_is_the_target(tiny_llama_source):
    """k = the layer count is the target itself: its top-P-by-Q tree is the oracle and its rows are the target's."""
    from brwsim.llm.drafters import DraftView, open_drafter, topq_nodes
    from brwsim.llm.measure import oracle_tree

    src = tiny_llama_source
    d = open_drafter("early-exit:k=3", src)
    assert d.name == "early-exit:k=3" and d.info == {"layers": 3, "kept": 3} and d.cost_fraction() == 1.0
    prompt = [3, 1, 4, 1, 5]
    view = DraftView(d.context(prompt))
    np.testing.assert_allclose(view.root, src.open(prompt).root, atol=1e-5)
    nodes, _ = topq_nodes(view, 12)
    assert nodes == [tuple(p) for p in oracle_tree(src.open(prompt), 12).prefixes]


def test_early_exit_equals_the_truncated_model(tiny_llama_source):
    from brwsim.llm.drafters import open_drafter
    from brwsim.llm.drafters._hf import layer_subset, sub_source

    src = tiny_llama_source
    d = open_drafter("early-exit:k=1", src)
    cut = sub_source(src, layer_subset(src.model, [0]), "cut")
    prefixes = [(), (2,), (2, 7)]
    np.testing.assert_allclose(
        d.context([3, 1, 4]).logprobs(prefixes), cut.open([3, 1, 4]).logprobs(prefixes), atol=1e-5
    )


def test_spec_errors_are_one_line(tiny_llama_source):
    from brwsim.llm.drafters import open_drafter, parse_drafter

    assert parse_drafter("early-exit:k=2").params == {"k": "2"}
    for bad, msg in [("early-exit", "missing key"), ("early-exit:k=0", ">= 1"), ("early-exit:k=x", "integer"),
                     ("early-exit:j=2", "unknown key")]:  # fmt: skip
        with pytest.raises(BrwsimError, match=msg):
            parse_drafter(bad)
    with pytest.raises(BrwsimError, match="1..3"):
        open_drafter("early-exit:k=4", tiny_llama_source)
