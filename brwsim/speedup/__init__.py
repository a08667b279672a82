"""From tokens per call to tokens per second: verifier cost models, the speedup and the best budget P.

speedup(P) = (E[X](P) + 1) t_verify(0) / (t_verify(P) + t_draft(P)), with
E[X] from :func:`brwsim.simulate` or a real-model run, and t_verify from a
measurement on this machine, a roofline of a named accelerator, or a user's
table (docs/speedup.md).

- :class:`VerifyCost` (the interface), :class:`TableCost` (measured or a CSV),
  :class:`RooflineCost`, :class:`AchievedRooflineCost` (this CPU's measured kernel FLOP/s per shape);
  :class:`DraftCost` (zero for the oracle).
- :func:`verify_cost`: a ``--hardware`` name -> a cost model; :func:`measure_draft_cost`: a real drafter's pass
  timed here, interleaved with the target's step; :func:`derived_draft_cost`: its pass derived from its footprint
  (:class:`brwsim.llm.drafters._base.PassFootprint`) through the same roofline as the target.
- :func:`grown_table`: the P grid doubled until the best P is interior ("at least P, still rising" otherwise);
  :func:`acceptance_vector`: Sequoia's positional acceptance rates from a comma list or its saved vector.
- :func:`measure_draft_calls` -> :class:`DraftCalls`: a drafter's drafting seconds, passes and rows per target
  call measured in real speculative decoding at each budget (what the planner charges a real drafter).
- :mod:`._timing`: wall-clock timing of a verification pass (device-synchronised) and of this machine's peaks.
- :func:`speedup_table`, :func:`from_simulation`, :func:`from_llm` -> :class:`SpeedupTable` (rows, ``best``).
"""

from ._calls import DraftCalls, measure_draft_calls
from ._costs import (
    ORACLE,
    AchievedRooflineCost,
    DraftCost,
    RooflineCost,
    TableCost,
    VerifyCost,
    isotonic_fit,
    measured_cost,
    read_cost_csv,
)
from ._hardware import MODEL_PRESETS, PRESETS, Hardware, ModelShape, model_shape, parse_custom, preset, shape_of_hf
from ._names import MEASURED, drafter_names, hardware_names, model_names, prompt_names, target_names
from ._sources import (
    DEFAULT_P,
    acceptance_vector,
    checked_cost,
    cpu_achieved,
    cpu_roofline,
    measure_cost,
    measure_draft_cost,
    verify_cost,
)
from ._speedup import (
    MEANING,
    P_CAP,
    BestP,
    SpeedupRow,
    SpeedupTable,
    best_P_set,
    covers,
    derived_draft_cost,
    fixed_grid,
    footprint_cost,
    from_llm,
    from_simulation,
    grown_table,
    modelled_draft_cost,
    speedup_table,
)

__all__ = [
    "MEASURED",
    "drafter_names",
    "hardware_names",
    "model_names",
    "prompt_names",
    "target_names",
    "DEFAULT_P",
    "MEANING",
    "MODEL_PRESETS",
    "ORACLE",
    "AchievedRooflineCost",
    "BestP",
    "PRESETS",
    "DraftCalls",
    "DraftCost",
    "Hardware",
    "ModelShape",
    "RooflineCost",
    "SpeedupRow",
    "SpeedupTable",
    "TableCost",
    "VerifyCost",
    "best_P_set",
    "acceptance_vector",
    "checked_cost",
    "cpu_achieved",
    "cpu_roofline",
    "P_CAP",
    "covers",
    "derived_draft_cost",
    "fixed_grid",
    "grown_table",
    "from_llm",
    "from_simulation",
    "isotonic_fit",
    "measure_cost",
    "measure_draft_calls",
    "measure_draft_cost",
    "footprint_cost",
    "modelled_draft_cost",
    "measured_cost",
    "model_shape",
    "parse_custom",
    "preset",
    "read_cost_csv",
    "shape_of_hf",
    "speedup_table",
    "verify_cost",
]
