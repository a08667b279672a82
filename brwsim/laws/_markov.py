"""``markov``: hidden states, a law per state, a kernel on the child's rank (docs/theory.md, "Markov laws")."""

from __future__ import annotations

import json
import os
import tomllib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._registry import data_field
from .._spec import Spec
from ..errors import BrwsimError
from ._base import (
    Law,
    NativeDrawn,
    NativeIndexed,
    NativeMarkov,
    check_distribution,
    parse_law,
    pick,
    register,
    stack_laws,
)
from ._pool import _read_file


@register("markov")
class Markov(Law):
    """Hidden states; a law per state; a kernel on the child's rank.

    The root's state is drawn from ``initial``. The state of node ``ui`` (the
    child of ``u`` of rank ``i`` in ``p_u``, 0-based) is drawn from
    ``kernel[s_u][min(i, R - 1)]``; its distribution from the law of its
    state. SPEC: ``markov:path=FILE`` (or a path ending in ``.json`` /
    ``.toml``). The file holds ``states`` (name -> law SPEC), ``initial`` (a
    state name, or a name -> probability table) and ``kernel`` (name -> list
    of rows: row r holds the next-state probabilities, in the order of
    ``states``, of the child of rank r). A state may list fewer rows than
    another: its last row then serves every larger rank (R is the longest
    list). See ``examples/two_state.json`` and docs/theory.md.
    """

    laws: tuple = data_field()
    log_kernel: jax.Array = data_field()  # [S, R, S]
    log_init: jax.Array = data_field()  # [S]
    names: tuple = ()
    path: str = ""

    spec_keys = ({"path"}, set())

    @classmethod
    def from_spec(cls, spec: Spec) -> Markov:
        return load_markov(spec.params["path"])

    def spec(self) -> str:
        return f"markov:path={self.path}"

    @property
    def n_states(self) -> int:  # type: ignore[override]
        return len(self.names)

    @property
    def vocab(self) -> int:
        return max(law.vocab for law in self.laws)

    @property
    def is_iid(self) -> bool:
        return False

    @property
    def spine_needs_rank(self) -> bool:  # type: ignore[override]
        return int(self.log_kernel.shape[1]) > 1

    def state_names(self):
        return list(self.names)

    def sub_laws(self) -> tuple:
        return tuple(self.laws)

    def state_kernel(self) -> np.ndarray:
        return np.exp(np.asarray(self.log_kernel, np.float64))

    def initial_probs(self) -> np.ndarray:
        return np.exp(np.asarray(self.log_init, np.float64))

    def check_budget(self, P: int) -> None:
        for law in self.laws:
            law.check_budget(P)

    def _pad(self, lp):
        V = self.vocab
        if lp.shape[-1] == V:
            return lp
        return jnp.concatenate([lp, jnp.full((V - lp.shape[-1],), -jnp.inf, lp.dtype)])

    def _by_state(self, state, fn):
        """``fn(law of state)``: one branch per kind of state law (:func:`stack_laws`), not per state, so any
        number of states of one kind is one kernel."""
        stacked, group, pos = stack_laws(self.laws)
        branches = [lambda q, law=law: fn(pick(law, q)) for law in stacked]
        g = jnp.asarray(group)[state]
        return jax.lax.switch(g, branches, jnp.asarray(pos)[state])

    def full_logp(self, key, state):
        return self._by_state(state, lambda law: self._pad(law.full_logp(key, 0)))

    def node_logp(self, key, state, K: int):
        return self._by_state(state, lambda law: law.node_logp(key, 0, K))

    @property
    def indexed(self) -> bool:  # type: ignore[override]
        return all(law.indexed for law in self.laws)

    def native_program(self) -> NativeMarkov | None:
        """Every state's law drawn natively (a drawn law, or an indexed law of one row: the same row at every node,
        ``fixed``), the states from the native kernel's own stream; None if a state is neither (``pool``)."""
        states, fixed = [], 0
        for law in self.laws:
            prog = law.native_program()
            if isinstance(prog, NativeDrawn):
                states.append(prog)
            elif prog == NativeIndexed(init=0, child=0, row=0):
                states.append(NativeDrawn("fixed", a=float(fixed)))
                fixed += 1
            else:
                return None
        return NativeMarkov(tuple(states), tuple(int(law.vocab) for law in self.laws))

    def row_table(self, K: int):
        return jnp.concatenate([law.row_table(K) for law in self.laws], axis=0)

    def node_row(self, key, state):
        offsets = np.cumsum([0] + [law.row_table(1).shape[0] for law in self.laws])[:-1]
        return self._by_state(state, lambda law: law.node_row(key, 0)) + jnp.asarray(offsets, jnp.int32)[state]

    def init_state(self, key):
        return jax.random.categorical(key, self.log_init).astype(jnp.int32)

    def child_state(self, key, parent_state, rank):
        R = self.log_kernel.shape[1]
        row = self.log_kernel[parent_state, jnp.minimum(rank, R - 1)]
        return jax.random.categorical(key, row).astype(jnp.int32)


_LOADING: list[str] = []  # the Markov law files being read, outermost first (a file that names itself is a cycle)


def load_markov(path: str) -> Markov:
    """Read a Markov law from JSON or TOML (see :class:`Markov`); a file that refers to itself is refused."""
    real = os.path.realpath(os.path.expanduser(path))
    if real in _LOADING:
        chain = " -> ".join(os.path.basename(p) for p in _LOADING[_LOADING.index(real) :] + [real])
        raise BrwsimError(
            f"Markov law file {path!r} refers to itself ({chain}); each state's law must be an i.i.d. law SPEC"
        )
    raw = _read_file(path, "Markov law")
    try:
        cfg = tomllib.loads(raw.decode()) if path.lower().endswith(".toml") else json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e).splitlines()[0]
        raise BrwsimError(f"Markov law file {path!r} does not parse: {why}") from None
    _LOADING.append(real)
    try:
        return markov_law(cfg, path)
    finally:
        _LOADING.pop()


def markov_law(cfg: dict[str, Any], path: str = "<dict>") -> Markov:
    """Build a Markov law from an already-parsed config dictionary (see :class:`Markov`)."""
    where = f"Markov law {path!r}"
    if not isinstance(cfg, dict):
        raise BrwsimError(f"{where}: expected a table with keys states, initial, kernel")
    extra = set(cfg) - {"states", "initial", "kernel", "description"}
    if extra:
        raise BrwsimError(f"{where}: unknown key(s) {', '.join(sorted(extra))}; use states, initial, kernel")
    for k in ("states", "initial", "kernel"):
        if k not in cfg:
            raise BrwsimError(f"{where}: missing key {k!r}")
    names, laws = _states(cfg["states"], where)
    init_p = _initial(cfg["initial"], names, where)
    K = _kernel(cfg["kernel"], names, where, max(law.vocab for law in laws))
    with np.errstate(divide="ignore"):
        return Markov(
            laws=tuple(laws),
            log_kernel=jnp.asarray(np.log(K), jnp.float32),
            log_init=jnp.asarray(np.log(init_p), jnp.float32),
            names=names,
            path=path,
        )


def _states(states, where: str) -> tuple[tuple, list]:
    if not isinstance(states, dict) or not states:
        raise BrwsimError(f"{where}: 'states' must map state names to law SPECs")
    names = tuple(states)
    laws = []
    for n in names:
        if not isinstance(states[n], str):
            raise BrwsimError(f"{where}: state {n!r} must be a law SPEC string")
        law = parse_law(states[n])
        if not law.is_iid:
            raise BrwsimError(f"{where}: state {n!r} may not itself be a Markov law")
        laws.append(law)
    return names, laws


def _initial(init, names: tuple, where: str) -> np.ndarray:
    if isinstance(init, str):
        if init not in names:
            raise BrwsimError(f"{where}: initial state {init!r} is not one of {list(names)}")
        return np.array([1.0 if n == init else 0.0 for n in names])
    if isinstance(init, dict):
        unknown = set(init) - set(names)
        if unknown:
            raise BrwsimError(f"{where}: initial names unknown state(s) {sorted(unknown)}")
        return check_distribution([init.get(n, 0.0) for n in names], f"{where}: initial")
    raise BrwsimError(f"{where}: 'initial' must be a state name or a name -> probability table")


def _kernel(kernel, names: tuple, where: str, vocab: int) -> np.ndarray:
    """``[S, R, S]`` probabilities; a state with fewer than R rows repeats its last row."""
    S = len(names)
    if not isinstance(kernel, dict) or set(kernel) != set(names):
        raise BrwsimError(f"{where}: 'kernel' must have one entry per state: {list(names)}")
    R = max(len(kernel[n]) if isinstance(kernel[n], list) else 0 for n in names)
    if R < 1:
        raise BrwsimError(f"{where}: each kernel entry must be a non-empty list of rows")
    R = min(R, vocab)  # a child's rank is below V: rows past V are never read, and the law is the same without them
    K = np.zeros((S, R, S))
    for si, n in enumerate(names):
        rows = kernel[n]
        if not isinstance(rows, list) or not rows:
            raise BrwsimError(f"{where}: kernel[{n!r}] must be a non-empty list of rows")
        for r, row in enumerate(rows):  # every listed row is checked, the ones past V too
            if not isinstance(row, list) or len(row) != S:
                raise BrwsimError(f"{where}: kernel[{n!r}] row {r} must list {S} probabilities (one per state)")
            p = check_distribution(row, f"{where}: kernel[{n!r}] row {r}")
            if r < R:
                K[si, r:] = p  # the last listed row serves every larger rank
    return K
