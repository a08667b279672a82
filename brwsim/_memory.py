"""The memory planner: how many trees one oracle call may take, and which sizes cannot fit at all.

Pure arithmetic on a law's sizes and the bytes available (``avail``; None
when unknown: nothing is refused then). The driver (:mod:`brwsim.estimate`)
asks the devices how much memory they have and passes it in; every function
here answers before any slow work, with a one-line error naming the largest
P, batch or V that would fit.
"""

from __future__ import annotations

from .errors import BrwsimError
from .laws import Law
from .oracle import default_batch, oracle_memory

# per node and tree, beside the kernel's own buffers: its output tree (28 bytes), the
# node records moved to tree order (32), prefix values on the device (4) and in float64 (8)
HOST_BYTES_PER_NODE = 72
MEMORY_FRACTION = 0.8  # of the memory available, what one batch may use
SPINE_DRAWS_MAX = 2**30  # tokens the spine walks of an O(V)-step law may draw per step (walks x V): minutes at most


def tree_bytes(law: Law, P: int) -> int:
    """Approximate peak bytes one tree of the oracle at budget P needs, kernel and host arrays together."""
    return oracle_memory(law, P) + HOST_BYTES_PER_NODE * (P + 1)


def largest_P(law: Law, budget: float, size=tree_bytes) -> int:
    """The largest P whose tree fits in ``budget`` bytes (at least 1); ``size(law, P)``: bytes of one tree."""
    lo, hi = 1, 2**40
    while lo < hi:  # the size grows with P
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if size(law, mid) <= budget else (lo, mid - 1)
    return lo


def plan_batch(
    law: Law,
    P_max: int,
    trees: int,
    batch: int | None,
    n_dev: int,
    avail: float | None,
    size=tree_bytes,
    largest=None,
) -> int:
    """Trees per oracle call (a multiple of ``n_dev``, the device count), checked against ``avail`` bytes.

    A default batch shrinks to what fits; a P or an explicit batch that cannot
    fit is a one-line error naming the largest P or batch that would.
    ``size(law, P)``: bytes of one tree (default :func:`tree_bytes`);
    ``largest(law, budget)``: the largest P that fits (default :func:`largest_P` of that size).
    """
    largest = largest or (lambda law, budget: largest_P(law, budget, size))
    B = min(batch or default_batch(law, P_max) * n_dev, trees)
    B = -(-B // n_dev) * n_dev  # equal shares; padding trees are dropped
    if avail is None:
        return B
    budget, per_tree = MEMORY_FRACTION * avail, size(law, P_max)
    least = n_dev * (1 if law.indexed else 2)  # the oracle runs at least two trees a device on a drawn law
    if per_tree * least > budget:
        raise BrwsimError(
            f"P={P_max} needs about {per_tree * least / 1e9:.3g} GB for the oracle ({law.spec()}, {least} trees "
            f"at once), more than the {budget / 1e9:.3g} GB a run may use here ({MEMORY_FRACTION:.0%} of the memory "
            f"available): the largest P that fits is about {largest(law, budget / least)}; beyond it, "
            "`brwsim laws` gives the spine's bounds with no tree"
        )
    fit = int(budget // (per_tree * n_dev)) * n_dev
    if B > fit:
        if batch is not None:
            raise BrwsimError(
                f"--batch {batch} at P={P_max} needs about {B * per_tree / 1e9:.3g} GB, more than the "
                f"{budget / 1e9:.3g} GB a run may use here: the largest batch that fits is {fit}"
            )
        B = fit
    return B


def check_kept_values(trees: int, P_max: int, avail: float | None) -> None:
    """A one-line error if every tree's values (float64 ``[trees, P_max]``) cannot be held in ``avail`` bytes."""
    if avail is not None and 8 * trees * (P_max + 1) > MEMORY_FRACTION * avail:
        raise BrwsimError(
            f"keeping every tree's values needs {8 * trees * P_max / 1e9:.3g} GB ({trees} trees x P={P_max}) but "
            f"{avail / 1e9:.3g} GB are available here; use brwsim.simulate, which keeps running sums"
        )


def _largest_V(per_token: float, budget: float) -> str:
    """``"the largest V that fits is about N"`` for a law whose cost grows as ``per_token * V``."""
    return f"the largest V that fits is about {max(1, int(budget // per_token))}"


def check_tables(law: Law, avail: float | None) -> None:
    """Before anything is built: a one-line error if the law's exact moments and spine tables (O(V) for a
    deterministic law given by a formula) cannot fit in ``avail`` bytes, naming the largest V that would."""
    need = law.table_bytes()
    if avail is None or need <= MEMORY_FRACTION * avail:
        return
    budget = MEMORY_FRACTION * avail
    raise BrwsimError(
        f"{law.spec()} needs about {need / 1e9:.3g} GB for its exact moments and spine tables (V={law.vocab}), more "
        f"than the {budget / 1e9:.3g} GB a run may use here: {_largest_V(need / law.vocab, budget)}"
    )


def check_spine(law: Law, walks: int, what: str = "the bounds") -> None:
    """Before any tree: a one-line error if the spine walks behind the bounds must draw more whole distributions
    than :data:`SPINE_DRAWS_MAX` tokens a step (a law whose spine step reads all V entries: ``walks * V`` a step,
    some minutes at the limit), naming the largest V and number of walks that would fit."""
    costly = [sub for sub in law.sub_laws() if sub.costly_spine_step(law.spine_needs_rank)]
    V = max((sub.vocab for sub in costly), default=0)
    if walks * V <= SPINE_DRAWS_MAX:
        return
    raise BrwsimError(
        f"{what} of {law.spec()} take {walks} spine walks, each step drawing a whole distribution of V={V} tokens "
        f"({walks * V:.3g} draws a step, more than the {SPINE_DRAWS_MAX:.3g} allowed, hours of work): "
        f"{_largest_V(walks, SPINE_DRAWS_MAX)} at {walks} walks; `brwsim laws --walks "
        f"{SPINE_DRAWS_MAX // V}` gives bounds from fewer walks"
    )


__all__ = ["check_kept_values", "check_spine", "check_tables", "largest_P", "plan_batch", "tree_bytes"]
