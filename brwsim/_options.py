"""What a ``simulate`` run is asked for: one typed, immutable value instead of fifteen parameters.

:func:`brwsim.simulate` takes these as keywords (its API); the driver
(:mod:`brwsim.estimate`) builds one :class:`SimulateOptions` from them and
passes it along. Values are kept as given: the driver checks them all, and
plans every size they imply, before any slow work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .laws import Law


@dataclasses.dataclass(frozen=True)
class SimulateOptions:
    """The arguments of one :func:`brwsim.simulate` call (see there for each one's meaning).

    ``law``: a SPEC string or a law object; ``P``: one budget or several;
    ``trees``, ``seed``; ``batch`` (trees per jitted step, None: planned);
    ``check`` (the sampled-continuation check at the largest P); ``bounds``;
    ``progress`` (None: a bar when stderr is a terminal, else a line a minute
    once the run has taken 30 s, on process 0 only); ``drafter`` and
    ``draft_law`` (None: the oracle); ``devices``; ``keep_values``;
    ``checkpoint`` (a directory, or None); ``round_trees`` (None: the
    largest round); ``kernel`` (auto|jax|native).
    """

    law: str | Law
    P: int | Iterable[int] = (1, 4, 16, 64)
    trees: int = 1000
    seed: int = 0
    batch: int | None = None
    check: bool = False
    bounds: bool = True
    progress: bool | None = None
    drafter: str | None = None
    draft_law: str | None = None
    devices: object = None
    keep_values: bool = False
    checkpoint: object = None
    round_trees: int | None = None
    kernel: str = "auto"

    def replace(self, **changes) -> SimulateOptions:
        """These options with ``changes``."""
        return dataclasses.replace(self, **changes)


__all__ = ["SimulateOptions"]
