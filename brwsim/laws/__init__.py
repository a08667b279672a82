"""Laws of node distributions: how the target's next-token distribution arises at each node.

Families (SPEC ``family:key=value,...``, see :func:`parse_law`): ``fixed``,
``dirichlet``, ``logitnormal``, ``zipf``, ``pool`` (an empirical set of
distributions read from a file), ``temp`` (an i.i.d. law at temperature T) and ``markov`` (hidden states, a law per
state, a kernel on the child's rank). Every law implements :class:`Law`; the
registry :data:`LAWS` maps a family name to its class. Docs: docs/theory.md,
"Laws".
"""

from ._base import (
    LAWS,
    PROB_TOL,
    Law,
    NativeDrawn,
    NativeIndexed,
    NativeMarkov,
    check_distribution,
    parse_law,
    pick,
    rank_of,
    stack_laws,
    topk_sorted,
)
from ._dirichlet import Dirichlet, dirichlet_moments, log_gamma_variates
from ._fixed import Fixed, fixed_law
from ._logitnormal import LogitNormal
from ._markov import Markov, load_markov, markov_law
from ._pool import Pool, load_pool
from ._table import TableLaw
from ._temp import Temp
from ._zipf import Zipf

__all__ = [
    "LAWS",
    "PROB_TOL",
    "Dirichlet",
    "Fixed",
    "Law",
    "LogitNormal",
    "Markov",
    "NativeDrawn",
    "NativeIndexed",
    "NativeMarkov",
    "Pool",
    "TableLaw",
    "Temp",
    "Zipf",
    "check_distribution",
    "dirichlet_moments",
    "fixed_law",
    "load_markov",
    "load_pool",
    "log_gamma_variates",
    "markov_law",
    "parse_law",
    "pick",
    "rank_of",
    "stack_laws",
    "topk_sorted",
]
