"""Markov laws of many states: the state count is a data dimension, not one compiled kernel per state.

States whose laws are of one kind (one class and static fields; fixed laws of any vocabulary, padded with
probability-0 tokens; Dirichlet, logit-normal, Zipf and temperature laws of any parameters,
held as data) are stacked and gathered by index (brwsim.laws.stack_laws): the oracle's node draw is one
branch per kind and the spine's step one compilation per kind, whatever the number of states. Each state
still gets its own law.
"""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brwsim.laws import markov_law, parse_law, stack_laws
from brwsim.spine import stationary
from brwsim.spine._walks import sample_walks


def many_states(n: int, seed: int = 0, drawn: bool = False) -> dict:
    """A Markov law of n states, fixed laws of 2 to 5 tokens (every other one a Dirichlet law with ``drawn``),
    three random kernel rows each."""
    rng = random.Random(seed)
    names = [f"s{i}" for i in range(n)]
    states, kernel = {}, {}
    for i, name in enumerate(names):
        w = [rng.random() + 0.05 for _ in range(rng.randint(2, 5))]
        states[name] = "fixed:probs=" + "/".join(f"{x / sum(w):.17g}" for x in w)
        if drawn and i % 2:
            states[name] = "dirichlet:V=6,alpha=0.5"
        rows = []
        for _ in range(3):
            r = [rng.random() for _ in range(n)]
            rows.append([x / sum(r) for x in r])
        kernel[name] = rows
    return {"states": states, "initial": names[0], "kernel": kernel}


def _compiles(f) -> int:
    """How many XLA compilations running ``f()`` takes."""
    count = [0]

    def listen(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        f()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return count[0]


def test_stacked_laws_are_each_state_law():
    laws = [parse_law(s) for s in ("fixed:probs=0.5/0.5", "fixed:probs=0.6/0.3/0.1", "dirichlet:V=6,alpha=0.5",
                                   "fixed:probs=0.25/0.25/0.25/0.25", "dirichlet:V=6,alpha=0.5")]  # fmt: skip
    stacked, group, pos = stack_laws(laws)
    assert len(stacked) == 2 and group.tolist() == [0, 0, 1, 0, 1] and pos.tolist() == [0, 1, 0, 2, 1]
    # a fixed law padded with probability-0 tokens: the same K largest entries at every K
    row = jax.tree.map(lambda x: x[1], stacked[0]).node_logp(None, 0, 5)
    np.testing.assert_array_equal(np.asarray(row), np.asarray(laws[1].node_logp(None, 0, 5)))


@pytest.mark.parametrize("drawn", [False, True])
def test_each_state_draws_its_own_law(drawn):
    law = markov_law(many_states(12, drawn=drawn))
    key = jax.random.key(3)
    node, full = jax.jit(law.node_logp, static_argnums=2), jax.jit(law.full_logp)
    for s, sub in enumerate(law.sub_laws()):
        # a drawn law compiled inside the switch may round its last bit otherwise than compiled alone
        same = (
            np.testing.assert_array_equal
            if sub.deterministic
            else lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6)
        )
        same(np.asarray(node(key, jnp.int32(s), 4)), np.asarray(jax.jit(sub.node_logp, static_argnums=2)(key, 0, 4)))
        f = np.asarray(full(key, jnp.int32(s)))
        same(f[: sub.vocab], np.asarray(jax.jit(sub.full_logp)(key, 0)))
        assert np.all(f[sub.vocab :] == -np.inf)
    if not drawn:  # indexed: the row of a state's node is its own law's row in the table
        table = np.asarray(law.row_table(4))
        for s, sub in enumerate(law.sub_laws()):
            r = int(law.node_row(key, jnp.int32(s)))
            np.testing.assert_array_equal(table[r], np.asarray(sub.row_table(4)[0]))


def test_node_draw_is_one_branch_per_kind_not_per_state():
    law = markov_law(many_states(40, drawn=True))  # 20 fixed laws of 2..5 tokens, 20 identical Dirichlet laws
    jaxpr = jax.make_jaxpr(lambda k, s: law.node_logp(k, s, 4))(jax.random.key(0), jnp.int32(0))
    (cond,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "cond"]
    assert len(cond.params["branches"]) == 2


def test_spine_walks_compile_once_per_kind_whatever_the_state_count():
    small, large = markov_law(many_states(3, seed=1)), markov_law(many_states(40, seed=2))
    sample_walks(jax.random.key(0), small, 64, depth=4)  # the step of a stack of fixed laws compiled once
    n = _compiles(lambda: sample_walks(jax.random.key(0), large, 64, depth=4))
    assert n <= 6, n  # a step for the 40-state stack (42 when each state compiled its own)


def test_walks_of_many_states_read_each_state_law():
    law = markov_law(many_states(30, seed=4))
    w = sample_walks(jax.random.key(1), law, 256, depth=6)
    for s, sub in enumerate(law.sub_laws()):
        at = w.state == s
        allowed = -np.asarray(sub.node_logp(None, 0, sub.vocab))  # every step's surprisal is one of its own tokens'
        assert np.all(np.isin(w.xi[at].astype(np.float32), allowed.astype(np.float32)))
        assert np.all(np.isfinite(w.xi[at]))


def test_exact_state_laws_have_no_bootstrap_spread():
    st = stationary(jax.random.key(0), markov_law(many_states(50, seed=5)))
    assert np.all(st.pi_se == 0) and st.mu_se == 0 and st.mu2_se == 0
    assert st.pi.sum() == pytest.approx(1.0, abs=1e-12) and st.mu > 0


# states of one family and shape that differ only in their parameters (Dirichlet alpha, logit-normal sigma, a
# random Zipf exponent's s and s_sd):
# the parameters become data (Law.with_data_params), one kind for all of them


DRAWN = ("dirichlet:V=6,alpha=1e-31", "dirichlet:V=6,alpha=0.05", "dirichlet:V=6,alpha=0.5", "dirichlet:V=6,alpha=2",
         "dirichlet:V=1,alpha=0.5", "logitnormal:V=6,sigma=0.7", "logitnormal:V=6,sigma=1e39",
         "zipf:V=6,s=1.1,s_sd=0.4", "temp:T=0.7,law=dirichlet:V=6,alpha=0.5",
         "temp:T=1e-39,law=dirichlet:V=6,alpha=0.5", "temp:T=1e39,law=logitnormal:V=6,sigma=2",
         "temp:T=3,law=fixed:probs=0.5/0.3/0.2")  # fmt: skip


@pytest.mark.parametrize("spec", DRAWN)
def test_parameters_as_data_draw_the_same_law(spec):
    # every branch of the Gamma sampler (alpha tiny, below 1 with (V - 1) alpha below 1 or not, above 1; V = 1)
    # and the logit-normal's scale up to a point mass: the same float32 constants, so the same node draws; the
    # spine step's scalar arithmetic may round its last bit otherwise (another compilation)
    law = parse_law(spec)
    form = law.with_data_params()
    assert form is not law and jax.tree.leaves(form)
    full = jax.jit(lambda k, w: w.full_logp(k, 0))
    step = jax.jit(lambda k, w: w.spine_step({}, k, False, False, (1.0, 2.0))[0])
    for seed in range(4):
        key = jax.random.key(seed)
        np.testing.assert_array_equal(np.asarray(full(key, law)), np.asarray(full(key, form)))
        np.testing.assert_allclose(float(step(key, form)), float(step(key, law)), rtol=1e-6, atol=1e-7)


def test_drawn_states_differing_in_parameters_are_one_kind():
    specs = ["dirichlet:V=6,alpha=0.3", "dirichlet:V=6,alpha=0.5", "logitnormal:V=6,sigma=1", "dirichlet:V=6,alpha=0.9",
             "logitnormal:V=6,sigma=2", "dirichlet:V=6,alpha=0.5", "fixed:probs=0.5/0.5"]  # fmt: skip
    stacked, group, pos = stack_laws([parse_law(s) for s in specs])
    assert len(stacked) == 3 and group.tolist() == [0, 0, 1, 0, 1, 0, 2]
    # a law alone in its kind keeps its static form: the same compiled code as outside a Markov law
    alone, _, _ = stack_laws([parse_law("dirichlet:V=6,alpha=0.3"), parse_law("dirichlet:V=6,alpha=0.3")])
    assert alone[0].consts is None
    # random Zipf exponents are one kind; fixed exponents another (s as data, each its own exact spine tables)
    zipfs = [
        parse_law(s) for s in ("zipf:V=6,s=1.1,s_sd=0.4", "zipf:V=6,s=2,s_sd=0.1", "zipf:V=6,s=1.1", "zipf:V=6,s=2")
    ]
    stacked, group, _ = stack_laws(zipfs, extra=lambda law: law.spine_tables())
    assert group.tolist() == [0, 0, 1, 1] and len(stacked) == 2
    for i, law in ((0, zipfs[2]), (1, zipfs[3])):  # each state's own tables, from its own law
        tables = jax.tree.map(lambda x, i=i: x[i], stacked[1][1])
        jax.tree.map(np.testing.assert_array_equal, tables, law.spine_tables())
    # temperatures of one inner family are one kind, whatever T and the inner law's parameters
    temps = [parse_law(f"temp:T={T},law=dirichlet:V=6,alpha={a}") for T, a in ((0.5, 0.1), (2, 0.1), (1e-39, 0.15))]
    stacked, group, _ = stack_laws([*temps, parse_law("temp:T=2,law=logitnormal:V=6,sigma=1")])
    assert group.tolist() == [0, 0, 0, 1] and len(stacked) == 2


@pytest.mark.parametrize("s", ["0.3", "1.1", "2", "1e39"])
def test_a_fixed_zipf_exponent_as_data_gives_the_same_rows(s):
    law = parse_law(f"zipf:V=50,s={s}")
    form = law.with_data_params()
    assert form is not law and form.s == 1.0 and jax.tree.leaves(form)
    full = jax.jit(lambda w: w.full_logp(None, 0))
    np.testing.assert_array_equal(np.asarray(full(law)), np.asarray(full(form)))


def uniform_markov(specs: list[str]):
    """A Markov law of these state laws, every transition equally likely."""
    n = len(specs)
    names = [f"s{i}" for i in range(n)]
    kernel = {s: [[1 / n] * n] for s in names}
    return markov_law({"states": dict(zip(names, specs, strict=True)), "initial": names[0], "kernel": kernel})


def test_spine_walks_of_zipf_states_with_distinct_exponents_compile_once():
    def law(exponents):
        return uniform_markov([f"zipf:V=50,s={e}" for e in exponents])

    sample_walks(jax.random.key(0), law([1.1, 1.2]), 64, depth=4)
    many = law([1.05 + 0.05 * i for i in range(12)])
    n = _compiles(lambda: sample_walks(jax.random.key(0), many, 64, depth=4))
    assert n <= 6, n  # one step for the 12 Zipf states (12 or more when each exponent compiled its own)
    w = sample_walks(jax.random.key(1), many, 256, depth=6)
    for st, sub in enumerate(many.sub_laws()):  # every step's surprisal is one of its own state's tokens'
        allowed = -np.asarray(sub.node_logp(None, 0, sub.vocab))
        assert np.all(np.isin(w.xi[w.state == st].astype(np.float32), allowed.astype(np.float32)))


def test_spine_walks_of_distinct_drawn_states_compile_once_per_kind():
    def law(alphas):
        return uniform_markov([f"dirichlet:V=6,alpha={a}" for a in alphas])

    sample_walks(jax.random.key(0), law([0.3, 0.4]), 64, depth=4)
    n = _compiles(lambda: sample_walks(jax.random.key(0), law([0.3 + 0.05 * i for i in range(12)]), 64, depth=4))
    assert n <= 6, n  # one step for the 12 Dirichlet states (12 or more when each state compiled its own)
