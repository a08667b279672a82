"""What E[X] is compared with at each budget P, built in one place and labelled by kind.

Three kinds of numbers stand beside a simulated or measured E[X]
(docs/theory.md, "Bounds"):

* **rigorous upper bounds for this law**: ``dual`` and ``splitting`` (any law,
  Markov and real models included; Monte Carlo estimates from spine walks,
  reported as estimate + 1.96 se at the chosen s: a one-sided upper 97.5%
  confidence value) and, for an i.i.d. law only, the closed form ``renewal``;
* **predictions**, not bounds: ``asymptotic`` (i.i.d., P -> infinity) and
  ``theorem1_leading`` (the leading term of the paper's Theorem 1, whose
  constant is not reproduced);
* for a law that is not i.i.d. (Markov, a real model), the closed forms are
  evaluated at the spine's long-run mu and mu_2 but assume i.i.d. trees: they
  are reported apart, as ``iid_only``, never as bounds of that law.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from .._stats import MARGIN_Z
from ..errors import BrwsimError
from ..spine import BoundResult, SpineCurves, curves_from_xi, law_curves
from ._closed_forms import _check, asymptotic, renewal, theorem1_leading

# Below this many walks the normal-theory margin means little: with two walks whose
# first steps both happen to be unlikely tokens, E[tau_s] - 1 is estimated as 0
# with a standard error of 0, and the "bound" collapses far below the truth.
MIN_SPINE_WALKS = 16

KINDS = {
    "dual": "rigorous upper bound, any law: spine estimate + 1.96 se at the minimising s (one-sided 97.5%)",
    "splitting": "rigorous upper bound, any law: spine estimate + 1.96 se at the minimising s (one-sided 97.5%)",
    "renewal": "rigorous upper bound for i.i.d. laws only (closed form in mu, mu_2)",
    "asymptotic": "prediction, not a bound: i.i.d. laws, P -> infinity",
    "theorem1_leading": "leading term of the paper's Theorem 1 (i.i.d.), not a bound by itself",
}


class SpineBounds(NamedTuple):
    """The splitting and dual bounds at one P, each minimised over s with its estimate, se and s."""

    splitting: BoundResult
    dual: BoundResult


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Everything E[X] is compared with at one budget P, labelled by kind (module docstring)."""

    P: float
    iid: bool
    dual: BoundResult
    splitting: BoundResult
    renewal: float
    asymptotic: float
    theorem1_leading: float

    @property
    def rigorous(self) -> dict[str, float]:
        """The rigorous upper bounds for this law (``renewal`` only for an i.i.d. law)."""
        out = {"dual": self.dual.upper, "splitting": self.splitting.upper}
        if self.iid:
            out["renewal"] = self.renewal
        return out

    @property
    def predictions(self) -> dict[str, float]:
        """Predictions and leading terms for an i.i.d. law (empty for other laws)."""
        return {"asymptotic": self.asymptotic, "theorem1_leading": self.theorem1_leading} if self.iid else {}

    @property
    def iid_only(self) -> dict[str, float]:
        """For a law that is not i.i.d.: the closed forms at its long-run mu, mu_2 (valid only for i.i.d. trees)."""
        if self.iid:
            return {}
        return {"renewal": self.renewal, "asymptotic": self.asymptotic, "theorem1_leading": self.theorem1_leading}

    def values(self) -> dict[str, float]:
        """All five numbers by name (for tables that label each column themselves)."""
        return {
            "theorem1_leading": self.theorem1_leading,
            "renewal": self.renewal,
            "asymptotic": self.asymptotic,
            "splitting": self.splitting.upper,
            "dual": self.dual.upper,
        }

    def to_dict(self) -> dict:
        d: dict = {"bounds": self.rigorous}
        if self.iid:
            d["predictions"] = self.predictions
        else:
            d["iid_only"] = self.iid_only
        for name in ("dual", "splitting"):
            b: BoundResult = getattr(self, name)
            d[f"{name}_estimate"], d[f"{name}_se"], d[f"{name}_s"] = b.estimate, b.se, b.s
        return d


def check_margin_z(margin_z) -> float:
    try:
        z = float(margin_z)
    except (TypeError, ValueError):
        raise BrwsimError(f"margin_z must be a number >= 0, got {margin_z!r}") from None
    if not (math.isfinite(z) and z >= 0):
        raise BrwsimError(f"margin_z must be a finite number >= 0, got {margin_z!r}")
    return z


def check_P_values(P_list) -> list:
    """Budgets P >= 1 (ints where integral) as a list; a one-line error otherwise."""
    if isinstance(P_list, (int, float, np.integer, np.floating)):
        P_list = [P_list]
    out = []
    for P in P_list:
        _check(P, 1.0, 1.0)
        out.append(int(P) if float(P).is_integer() else float(P))
    if not out:
        raise BrwsimError("P_list must hold at least one budget P >= 1")
    return out


def bounds_from_curves(
    curves: SpineCurves, P_list, mu: float, mu2: float, iid: bool, margin_z: float = MARGIN_Z
) -> list[Bounds]:
    """:class:`Bounds` at every P: the spine bounds from ``curves``, the closed forms from (mu, mu_2)."""
    z = check_margin_z(margin_z)
    return [
        Bounds(
            P=P,
            iid=iid,
            dual=curves.dual(P, z),
            splitting=curves.splitting(P, z),
            renewal=renewal(P, mu, mu2),
            asymptotic=asymptotic(P, mu, mu2),
            theorem1_leading=theorem1_leading(P, mu, mu2),
        )
        for P in check_P_values(P_list)
    ]


def _spine(curves: SpineCurves, P_list, z: float) -> dict:
    return {P: SpineBounds(curves.splitting(P, z), curves.dual(P, z)) for P in P_list}


def check_walks(n: int) -> None:
    """A one-line error unless there are at least :data:`MIN_SPINE_WALKS` sampled continuations."""
    if n < MIN_SPINE_WALKS:
        raise BrwsimError(
            f"the empirical bounds need at least {MIN_SPINE_WALKS} sampled continuations for a confidence margin, "
            f"got {n}; sample more continuations"
        )


def spine_bounds(xi, P_list, *, margin_z: float = MARGIN_Z) -> dict:
    """Splitting and dual bounds (docs/theory.md (b), (b'), (e)) from sampled continuations.

    ``xi``: float array [walks, depth] of per-step surprisals -log p(token) of
    independent continuations sampled from the target itself (NaN after a
    walk's end). Law-free: no independence between steps is assumed. Returns
    ``{P: SpineBounds}``; each ``.upper`` is estimate + margin_z se at the
    minimising s (at most P). All count X = accepted draft tokens per call.
    """
    P_list = check_P_values(P_list)
    z = check_margin_z(margin_z)
    check_walks(np.shape(xi)[0] if np.ndim(xi) == 2 else 0)
    return _spine(curves_from_xi(xi, P_max=max(P_list)), P_list, z)


def law_spine_bounds(
    key, law, P_list, *, walks: int = 8192, margin_z: float = MARGIN_Z, mu_hint: float | None = None
) -> dict:
    """:func:`spine_bounds` for a law, from ``walks`` fresh spine walks of the run key ``key`` (any law)."""
    P_list = check_P_values(P_list)
    z = check_margin_z(margin_z)
    return _spine(law_curves(key, law, max(P_list), walks=walks, mu_hint=mu_hint), P_list, z)
