"""``pool``: an empirical set of distributions (e.g. saved from a real model); each node draws one."""

from __future__ import annotations

import io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from .._moments import entropy_moments
from .._registry import data_field
from .._spec import Spec
from ..errors import BrwsimError
from ._base import PROB_TOL, Law, NativeIndexed, register
from ._draw import count_at_most, host_cdf, uniform46


@register("pool")
class Pool(Law):
    """An empirical set of N distributions; each node draws one uniformly.

    SPEC: ``pool:path=FILE`` (or just a path ending in ``.npz``). The file is
    a NumPy ``.npz`` with ``logp`` (N x K float log-probabilities of each
    distribution, any order) or ``probs`` (N x K probabilities); or a JSON
    list of probability lists. Each row must be a whole distribution (sum 1
    within 1e-6) unless the file also gives ``entropy`` and ``m2`` (N
    floats, the full rows' moments): then rows may be the top-K entries of
    larger distributions, and asking for more than K children of a node is
    an error, never a silent truncation.
    """

    logp: jax.Array = data_field()  # [N, K] sorted decreasing
    entropy: jax.Array = data_field()  # [N]
    m2: jax.Array = data_field()  # [N]
    truncated: bool = False
    path: str = ""

    spec_keys = ({"path"}, set())
    indexed = True

    @classmethod
    def from_spec(cls, spec: Spec) -> Pool:
        return load_pool(spec.params["path"])

    def spec(self) -> str:
        return f"pool:path={self.path}"

    @property
    def vocab(self) -> int:
        return int(self.logp.shape[-1])

    @property
    def size(self) -> int:
        return int(self.logp.shape[0])

    def _row(self, key):
        return jax.random.randint(key, (), 0, self.logp.shape[0])

    def full_logp(self, key, state):
        return self.logp[self._row(key)]

    def node_logp(self, key, state, K: int):
        return self.row_table(K)[self._row(key)]

    def row_table(self, K: int):
        n, k = self.logp.shape
        if K <= k:
            return self.logp[:, :K]
        self.check_budget(K)
        return jnp.concatenate([self.logp, jnp.full((n, K - k), -jnp.inf, self.logp.dtype)], axis=1)

    def node_row(self, key, state):
        return self._row(key).astype(jnp.int32)

    def native_program(self) -> NativeIndexed:
        return NativeIndexed(init=0, child=0, row=2)

    def check_budget(self, P: int) -> None:
        k = self.vocab
        if self.truncated and P > k:
            raise BrwsimError(
                f"pool {self.path!r} keeps only the top {k} entries per row, but a tree of P={P} nodes may need "
                f"{P} children of one node; save more entries per row or use P <= {k}"
            )

    def exact_moments(self):
        return float(np.mean(np.asarray(self.entropy, np.float64))), float(np.mean(np.asarray(self.m2, np.float64)))

    def spine_tables(self) -> dict:
        lp = np.asarray(self.logp, np.float64)
        cdf = np.cumsum(np.exp(lp), axis=1)
        with np.errstate(divide="ignore"):
            tail = -np.log(np.clip(1.0 - cdf[:, -1], 0.0, None))
        # a step into the unknown tail of a truncated row has probability at most
        # min(p_K, tail mass): surprisal at least this (a conservative stand-in)
        tail = np.maximum(tail, -lp[:, -1])
        # the rows' cumulative sums as double-floats (brwsim.laws._draw); a whole row is the law, normalised in
        # float64 (its float32 entries sum to 1 +- ulps), a truncated row keeps its tail
        hi, lo = host_cdf(np.exp(lp), normalise=not self.truncated)
        return {"cdf": hi, "cdf_lo": lo, "tail": jnp.asarray(tail, jnp.float32)}

    def costly_spine_step(self, need_rank: bool) -> bool:
        return False

    def spine_step(self, tables, key, need_rank, need_H, exact):
        """O(log K): a row, then the child by inverse CDF; H and M2 are the row's own."""
        k1, k2 = jax.random.split(key)
        row = jax.random.randint(k1, (), 0, self.logp.shape[0])
        K = tables["cdf"].shape[1]
        r = count_at_most(tables["cdf"][row], tables["cdf_lo"][row], uniform46(k2))
        if not self.truncated:
            r = jnp.minimum(r, K - 1)
        xi = jnp.where(r < K, -self.logp[row, jnp.minimum(r, K - 1)], tables["tail"][row])
        return xi, r.astype(jnp.int32), self.entropy[row], self.m2[row]


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(os.path.expanduser(path), "rb") as f:
            return f.read()
    except OSError as e:
        raise BrwsimError(f"{what} file {path!r} cannot be read: {e.strerror or e}") from None


def _read_rows(path: str, raw: bytes):
    """(logp [N, K] float64, entropy or None, m2 or None) from a pool file's bytes."""
    if path.lower().endswith(".json"):
        try:
            probs = np.asarray(json.loads(raw), dtype=np.float64)
        except (ValueError, TypeError, RecursionError):
            raise BrwsimError(f"pool file {path!r}: expected a JSON list of equal-length probability lists") from None
        with np.errstate(divide="ignore"):
            return np.log(probs), None, None
    try:
        z = np.load(io.BytesIO(raw), allow_pickle=False)
    except Exception:
        raise BrwsimError(f"pool file {path!r} is not a readable .npz archive") from None
    if not hasattr(z, "files"):
        raise BrwsimError(f"pool file {path!r} is a single .npy array; save an .npz with np.savez(path, logp=...)")
    if "logp" in z:
        logp = _numeric(z, "logp", path)
    elif "probs" in z:
        with np.errstate(divide="ignore"):
            logp = np.log(_numeric(z, "probs", path))
    else:
        raise BrwsimError(f"pool file {path!r} needs an array 'logp' or 'probs' (N x K)")
    if ("entropy" in z) != ("m2" in z):
        raise BrwsimError(f"pool file {path!r}: give both 'entropy' and 'm2', or neither")
    if "entropy" in z:
        return logp, _numeric(z, "entropy", path), _numeric(z, "m2", path)
    return logp, None, None


def _numeric(z, name: str, path: str) -> np.ndarray:
    """Array ``name`` of an .npz as float64; a one-line error for object, string, complex or boolean arrays."""
    try:
        a = z[name]
    except Exception:  # an object array needs pickle, which a data file may not use
        raise BrwsimError(
            f"pool file {path!r}: array {name!r} is not a plain numeric array (object arrays are refused)"
        ) from None
    if a.dtype.kind not in "fiu":
        raise BrwsimError(f"pool file {path!r}: array {name!r} has dtype {a.dtype}; it must hold real numbers")
    return np.asarray(a, np.float64)


def _check_rows(path: str, logp, entropy) -> bool:
    """Validate a pool's rows; True when they are truncated (top-K of larger distributions)."""
    if logp.ndim != 2 or logp.shape[0] < 1 or logp.shape[1] < 1:
        raise BrwsimError(f"pool file {path!r}: expected an N x K array of distributions, got shape {logp.shape}")
    if np.any(np.isnan(logp)) or np.any(logp > 1e-6):
        raise BrwsimError(f"pool file {path!r}: probabilities must be in [0, 1] with no NaN")
    sums = np.exp(logp).sum(axis=1)
    if np.any(sums <= 0):
        raise BrwsimError(f"pool file {path!r}: row {int(np.argmin(sums))} has no positive probability")
    truncated = bool(np.any(np.abs(sums - 1) > PROB_TOL))
    if truncated and entropy is None:
        bad = int(np.argmax(np.abs(sums - 1)))
        raise BrwsimError(
            f"pool file {path!r}: row {bad} sums to {sums[bad]:.9g}, not 1; normalise the rows, "
            "or add 'entropy' and 'm2' arrays if they are top-K rows of larger distributions"
        )
    if truncated and np.any(sums > 1 + PROB_TOL):
        raise BrwsimError(f"pool file {path!r}: a row sums to more than 1")
    return truncated


def _check_moments(path: str, entropy, m2, n: int) -> None:
    if entropy.shape != (n,) or m2.shape != (n,):
        raise BrwsimError(f"pool file {path!r}: 'entropy' and 'm2' must have one value per row")
    if not (np.all(np.isfinite(entropy)) and np.all(np.isfinite(m2))) or np.any(entropy < 0) or np.any(m2 < 0):
        raise BrwsimError(f"pool file {path!r}: 'entropy' and 'm2' must be finite numbers >= 0")


def load_pool(path: str) -> Pool:
    """Read an empirical pool (see :class:`Pool` for the format)."""
    logp, entropy, m2 = _read_rows(path, _read_file(path, "pool"))
    truncated = _check_rows(path, logp, entropy)
    if truncated:  # top-K rows: no entry above probability 1
        logp = np.minimum(logp, 0.0)
    else:  # whole rows, exactly normalised (within 1e-6 before)
        logp = logp - np.logaddexp.reduce(logp, axis=1, keepdims=True)
    if entropy is None:
        entropy, m2 = entropy_moments(logp)
    _check_moments(path, entropy, m2, logp.shape[0])
    logp = -np.sort(-logp, axis=1)
    return Pool(
        logp=jnp.asarray(logp, jnp.float32),
        entropy=jnp.asarray(entropy, jnp.float32),
        m2=jnp.asarray(m2, jnp.float32),
        truncated=truncated,
        path=path,
    )
