"""Hostile synthetic inputs: every one is refused in one line before any slow work, or simply works, fast.

Classes: malformed Markov law files, subnormal and peaked fixed laws, extreme drafter parameters, vocabularies
too large for the memory available (simulate and laws alike), and arguments checked before any progress output.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import brwsim.estimate as estimate
from brwsim import parse_law, simulate
from brwsim.cli import main
from brwsim.cli._laws import laws_summary
from brwsim.drafters import parse_drafter
from brwsim.drafters._builders import _eagle_candidates, eagle_candidates, eagle_one
from brwsim.drafters._draftlaws import parse_draft_law
from brwsim.drafters._static import kary_paths
from brwsim.errors import BrwsimError
from brwsim.laws import fixed_law
from brwsim.spine._walks import sample_walks
from brwsim.testing import returns_within
from brwsim.theory import asymptotic, theorem1_leading

TWO = {"a": "fixed:probs=0.7/0.3", "b": "fixed:probs=0.5/0.5"}


def _markov_file(tmp_path, name="m.json", **over):
    cfg = {"states": TWO, "initial": "a", "kernel": {"a": [[0.9, 0.1], [0.2, 0.8]], "b": [[0.5, 0.5]]}} | over
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# -- malformed Markov law files: each a one-line BrwsimError naming the entry


@pytest.mark.parametrize(
    "kernel,what",
    [
        ({"a": [["abc", 1]], "b": [[0.5, 0.5]]}, "'abc'"),
        ({"a": [[{}, 1]], "b": [[0.5, 0.5]]}, "{}"),
        ({"a": [[None, 1]], "b": [[0.5, 0.5]]}, "None"),
        ({"a": [[True, 0]], "b": [[0.5, 0.5]]}, "True"),
        ({"a": [[[0.5], 0.5]], "b": [[0.5, 0.5]]}, "[0.5]"),
        ({"a": [[0.9, 0.1], [0.5, "x"]], "b": [[0.5, 0.5]]}, "'x'"),
    ],
)
def test_markov_kernel_row_with_a_non_number_is_one_line(tmp_path, kernel, what):
    with pytest.raises(BrwsimError, match=r"kernel\['a'\] row \d: probabilities must be numbers") as e:
        parse_law(_markov_file(tmp_path, kernel=kernel))
    assert what in _one_line(e)


@pytest.mark.parametrize("initial", [{"a": "abc"}, {"a": None}, {"a": [1]}, {"a": {}}, None, 3, [0.5, 0.5]])
def test_markov_initial_malformed_is_one_line(tmp_path, initial):
    with pytest.raises(BrwsimError, match="initial") as e:
        parse_law(_markov_file(tmp_path, initial=initial))
    _one_line(e)


def test_markov_kernel_rows_past_V_are_the_same_law(tmp_path):
    # V = 2: a child's rank is 0 or 1, so rows 2.. are never read; the law is the one with two rows
    many = parse_law(_markov_file(tmp_path, "many.json", kernel={"a": [[0.9, 0.1], [0.2, 0.8]] * 3, "b": [[0.5, 0.5]]}))
    two = parse_law(_markov_file(tmp_path, "two.json", kernel={"a": [[0.9, 0.1], [0.2, 0.8]], "b": [[0.5, 0.5]]}))
    np.testing.assert_array_equal(np.asarray(many.log_kernel), np.asarray(two.log_kernel))
    r1 = simulate(many, P=[1, 3], trees=6, bounds=False, progress=False)
    r2 = simulate(two, P=[1, 3], trees=6, bounds=False, progress=False)
    assert [r.stat.mean for r in r1.results] == [r.stat.mean for r in r2.results]


def test_markov_kernel_row_past_V_is_still_checked(tmp_path):
    with pytest.raises(BrwsimError, match=r"kernel\['a'\] row 3: probabilities must be numbers"):
        parse_law(_markov_file(tmp_path, kernel={"a": [[0.9, 0.1]] * 3 + [["z", 1]], "b": [[0.5, 0.5]]}))


# -- subnormal and peaked fixed laws: no division by an underflowed mu^2, walks bounded


@pytest.mark.parametrize("mu", [7.4e-321, 1e-170, 5e-324])
def test_closed_forms_of_an_underflowing_mu_are_the_zero_entropy_limit(mu):
    assert asymptotic(4, mu, mu * 800) == np.inf and theorem1_leading(4, mu, mu * 800) == np.inf


@pytest.mark.parametrize("spec", ["fixed:probs=1/5e-324/5e-324", "fixed:probs=1/1e-310", "dirichlet:V=10,alpha=1e-300"])
def test_subnormal_probabilities_give_bounds_not_a_traceback(spec):
    d = laws_summary(spec, [1, 4], walks=64)
    for r in d["results"]:
        assert r["bounds"]["dual"] <= r["P"] + 1e-9 and r["predictions"]["asymptotic"] == np.inf


def test_peaked_law_walks_are_capped_and_fast():
    law = parse_law("fixed:probs=0.9999/0.0001")  # ~1e-4 nats a step: a walk would take thousands of steps
    w = returns_within(60, sample_walks, jax.random.key(0), law, 2**16, 3.0)
    assert w.xi.shape == (2**16, 64)  # the points cap (walks x steps) binds before max_depth


def test_peaked_law_blocks_of_depths_give_the_same_walks():
    import brwsim.spine._walks as W

    law, key = parse_law("fixed:probs=0.999/0.001"), jax.random.key(1)
    blocked = W.sample_walks(key, law, 64, s_max=3.0, max_depth=80)  # depths 32.. run in blocks
    one = W._Stepper(law, W.stream_key(key, W.Stream.SPINE), 64, False)
    assert one.blocked
    saved = W.BLOCK
    try:
        W.BLOCK = 10**9  # never reached: one call a depth
        single = W.sample_walks(key, law, 64, s_max=3.0, max_depth=80)
    finally:
        W.BLOCK = saved
    assert blocked.xi.shape == single.xi.shape == (64, 80)
    np.testing.assert_array_equal(blocked.xi, single.xi)
    np.testing.assert_array_equal(blocked.cover, single.cover)


# -- extreme drafter parameters: the same tree as the small ones, fast; or one line


def _full_eagle(law, dlaw, key, P, top_k, depth):
    c = _eagle_candidates(law, dlaw, key, top_k, depth, 10**9)  # P = 1e9: no candidate left out
    order = jnp.lexsort((c["dep"], -c["score"]))[:P]
    return c["keyd"][order], c["rank"][order], c["dep"][order]


@pytest.mark.parametrize("P,top_k,depth", [(4, 10, 6), (5, 2, 7)])
def test_eagle_with_left_out_candidates_builds_the_same_tree(P, top_k, depth):
    # a fixed p with a noisy q (drawn afresh at every node): the frontier is cut where scores differ
    law, dlaw = parse_law("fixed:probs=0.3/0.2/0.15/0.15/0.1/0.06/0.04"), parse_draft_law("noise:sigma=1")
    key = jax.random.key(0)
    t = eagle_one(law, dlaw, key, P, top_k, depth)
    keyd, rank, dep = _full_eagle(law, dlaw, key, P, top_k, depth)
    np.testing.assert_array_equal(np.asarray(t.key), np.asarray(keyd))
    np.testing.assert_array_equal(np.asarray(t.rank), np.asarray(rank))
    np.testing.assert_array_equal(np.asarray(t.depth), np.asarray(dep))


def test_eagle_candidate_count_any_size():
    assert eagle_candidates(3, 1, 1) == 2
    assert eagle_candidates(3, 2, 1) == 2 + 4
    assert eagle_candidates(1000, 10, 7) == 10 + 7 * 100
    assert eagle_candidates(5, 10**9, 3) == 5 + 25 + 125 + 625


@pytest.mark.parametrize(
    "drafter", ["eagle:depth=200", "eagle:top_k=1000000000", "sequoia:depth=1000000", "static:k=1000000000"]
)
def test_extreme_drafter_parameters_are_fast(drafter):
    r = returns_within(120, simulate, "fixed:probs=0.6/0.3/0.1", [1, 3], 8, 0, None, False, False, False, drafter)
    assert all(0 <= x.stat.mean <= x.P for x in r.results)


def test_static_tree_past_the_vocabulary_is_one_line():
    with pytest.raises(BrwsimError, match=r"a path uses rank 3 but the vocabulary has 3 tokens$"):
        simulate("fixed:probs=0.6/0.3/0.1", P=4, trees=2, bounds=False, progress=False, drafter="static:k=1000000000")


def test_kary_paths_any_k():
    assert kary_paths(10**9, 3) == [(0,), (1,), (2,)]
    assert kary_paths(2, 5) == [(0,), (1,), (0, 0), (0, 1), (1, 0)]


def test_sequoia_depth_past_the_work_limit_names_the_largest_depth():
    d = parse_drafter("sequoia:depth=1000")
    with pytest.raises(BrwsimError, match=r"the largest depth that fits is \d+") as e:
        d.check_budget(parse_law("dirichlet:V=1000,alpha=0.1"), 512)
    _one_line(e)


# -- sizes past the memory available: refused up front, naming the largest that fits


@pytest.fixture
def two_gb(monkeypatch):
    monkeypatch.setattr(estimate, "available_memory", lambda devs=None: 2 * 10**9)


# a deterministic Zipf law's tables take 64 bytes a token: 1.6 GB of the 2 GB (MEMORY_FRACTION) hold V = 25,000,000


def test_laws_huge_zipf_refused_with_the_largest_V(two_gb, capsys):
    assert main(["laws", "--law", "zipf:V=1000000000,s=1.1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the largest V that fits is about 25000000" in err


def test_simulate_huge_zipf_refused_with_the_largest_V(two_gb):
    with pytest.raises(BrwsimError, match="the largest V that fits is about 25000000"):
        simulate("zipf:V=1000000000,s=1.1", P=[1, 4], trees=4, progress=False)


@pytest.mark.parametrize("V", [10**6, 10**7])
def test_heavy_spine_refused_before_any_tree(V):
    with pytest.raises(BrwsimError, match=r"the largest V that fits is about 131072 at 8192 walks") as e:
        simulate(f"logitnormal:V={V},sigma=3", P=[1, 4], trees=4, progress=False)
    _one_line(e)
    with pytest.raises(BrwsimError, match=r"largest V that fits is about 131072 at 8192 walks"):
        laws_summary(f"logitnormal:V={V},sigma=3", [1, 4])


def test_heavy_spine_limit_scales_with_the_walks():
    with pytest.raises(BrwsimError, match=r"largest V that fits is about 1073741 at 1000 walks"):
        laws_summary("logitnormal:V=2000000,sigma=3", [1], walks=1000)


# -- arguments checked before any progress output


@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_reproduce_bad_seed_prints_no_progress(capsys, seed):
    assert main(["reproduce", "--quick", "--only", "scaling_in_P", "--seed", seed]) == 2
    err = capsys.readouterr().err
    assert err.startswith("brwsim: error: --seed must be an integer") and err.count("\n") == 1


@pytest.mark.parametrize("where", ["file", "below_a_file"])
def test_reproduce_bad_output_folder_prints_no_progress(capsys, monkeypatch, tmp_path, where):
    f = tmp_path / "a_file"
    f.write_text("")
    monkeypatch.setenv("BRWSIM_OUT", str(f if where == "file" else f / "sub"))
    assert main(["reproduce", "--quick", "--only", "scaling_in_P"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("brwsim: error: BRWSIM_OUT") and err.count("\n") == 1


def test_fixed_law_of_numbers_only():
    for bad in (["abc", 1], [None, 1.0], [True, False]):
        with pytest.raises(BrwsimError, match="probabilities must be numbers"):
            fixed_law(bad)
