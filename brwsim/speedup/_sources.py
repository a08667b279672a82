"""``--hardware`` names -> verifier cost models: presets, ``custom:``, ``csv:FILE``, ``cpu-measured``, ``cpu-roofline``.

``cpu-measured`` times the real model's tree-verification pass here
(:func:`brwsim.speedup._timing.verify_times`); ``cpu-roofline`` measures this
machine's bandwidth and FLOP/s (:func:`brwsim.speedup._timing.machine_peaks`) and
feeds them to the roofline with the real model's own shape; ``cpu-achieved`` is
the achieved roofline (:func:`cpu_achieved`): the same bytes and FLOPs, but
each matrix product at the FLOP/s this machine's kernel reaches at that shape
and row count, plus the measured rest of the pass.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np

from .._stats import mean_ci95
from ..drafters._sequoia import read_acceptance
from ..errors import BrwsimError, check_positive_int
from ..llm.sources import TransformersModel, load_source
from ..llm.sources._device import _torch
from ._costs import AchievedRooflineCost, DraftCost, RooflineCost, VerifyCost, measured_cost, read_cost_csv
from ._hardware import Hardware, model_shape, parse_custom, preset, shape_of_hf
from ._names import MEASURED, hardware_names
from ._timing import (
    Peaks,
    attention_throughput,
    decode_step_timer,
    gemm_throughput,
    interleaved_times,
    linear_shapes,
    machine_peaks,
    stubbed_kernels,
    verify_times,
)

DEFAULT_P = (1, 2, 4, 8, 16, 32, 64)


def measure_cost(source, P_list, context: int = 256, repeats: int = 5) -> VerifyCost:
    """The measured t_verify of a loaded real model at each budget (and P = 0) on this machine."""
    times = verify_times(source, P_list, context=context, repeats=repeats)
    return measured_cost(times, f"measured: {source.name}, L={context}, {repeats} repeats")


def measure_draft_cost(drafter, target=None, context: int = 256, repeats: int = 5, seed: int = 0) -> DraftCost | None:
    """A real drafter's measured cost on this machine: one pass for one new drafted token after ``context`` tokens
    (:meth:`~brwsim.llm.drafters.Drafter.pass_timer`, e.g. the EAGLE head's pass; else a decoding step of its own
    model, :meth:`~brwsim.llm.drafters.Drafter.timing_source`), one pass per drafted token. With the ``target``
    source, its decoding step is timed in the same interleaved rounds (one target step, one drafter pass per
    round, a warm-up round first), and the cost carries the mean over rounds of the ratio pass / step
    (``fraction``) with the Student t half-width of that mean (``fraction_ci95``). ``t_pass`` is the mean of the
    ``repeats`` and ``t_pass_ci95`` the Student t half-width of that mean (``t_step``: the target's mean step).
    None when the drafter has no pass of its own to time (a proposer)."""
    timer = drafter.pass_timer(context, seed)
    if timer is None:
        src = drafter.timing_source()
        if src is None:
            return None
        timer = decode_step_timer(src, context, seed)
    calls = {"draft": timer}
    if target is not None:
        calls = {"target": decode_step_timer(target, context, seed)} | calls
    device = target.device if target is not None else drafter.device
    times = interleaved_times(calls, repeats=repeats, device=device)
    ts = times["draft"]
    t, ci = _mean_ci(ts)
    step = frac = frac_ci = None
    if target is not None:
        step = _mean_ci(times["target"])[0]
        frac, frac_ci = _mean_ci([d / s for d, s in zip(ts, times["target"], strict=True)])
    label = f"{drafter.name}: {1e3 * t:.3f} ms per pass measured here (mean of {len(ts)}"
    if frac is not None:
        label += f"; {frac:.3f}" + (f" +- {frac_ci:.3f}" if frac_ci is not None else "")
        label += " of the target's step in the same rounds"
    return DraftCost(t, "P", label + "), one pass per drafted token", "measured", ci, step, frac, len(ts), frac_ci)


def _mean_ci(x) -> tuple[float, float | None]:
    """(mean, Student t 95% half-width of the mean; None for one value)."""
    m, c = mean_ci95(x)
    return m, (c if len(x) > 1 else None)


def cpu_roofline(source, context: int = 256, overhead: float = 0.0, peaks: Peaks | None = None) -> RooflineCost:
    """The roofline of a loaded real model with this machine's measured bandwidth and FLOP/s."""
    peaks = peaks or machine_peaks()
    hw = Hardware("this machine", peaks.bandwidth, peaks.flops, overhead, f"measured here: {peaks.to_dict()}")
    bpp = float(next(source.model.parameters()).element_size())
    return RooflineCost(hw, shape_of_hf(source.model, source.name), bpp, context)


def rest_of_pass(source, P_list, context: int = 256, repeats: int = 3) -> tuple[float, float, dict]:
    """The pass without its matrix products and attention (:class:`brwsim.speedup._timing.stubbed_kernels`), timed at
    each P: the least-squares line ``overhead + per_token (P + 1)`` through the medians, and the medians."""
    with stubbed_kernels():
        times = verify_times(source, P_list, context=context, repeats=repeats)
    med = {P: statistics.median(ts) for P, ts in times.items()}
    n = np.array([P + 1 for P in med], dtype=float)
    t = np.array(list(med.values()))
    slope, icpt = np.polyfit(n, t, 1) if len(n) > 1 else (0.0, t[0])
    return max(0.0, float(icpt)), max(0.0, float(slope)), med


def cpu_achieved(
    source, P_list, context: int = 256, repeats: int = 3, peaks: Peaks | None = None, overlap: bool = False
):
    """The achieved roofline (:class:`AchievedRooflineCost`) of a loaded real model on this machine: the copy
    bandwidth, each weight shape's and the attention's achieved FLOP/s at ``P + 1`` rows for every P of ``P_list``
    (and 0), and the rest of the pass (:func:`rest_of_pass`, the measured time at each P), all measured here.
    ``overlap=False`` (the default) adds each operation's memory and compute times: on this CPU that is what a
    one-thread matrix product with few rows does (docs/speedup.md)."""
    peaks = peaks or machine_peaks()
    Ps = sorted({0, *(int(P) for P in P_list)})
    rows = [P + 1 for P in Ps]
    shape = shape_of_hf(source.model, source.name)
    gemms = tuple(linear_shapes(source.model))
    gf = gemm_throughput(gemms, rows, repeats=repeats, device=source.device)
    heads = shape.attn_dim // shape.head_dim
    af = attention_throughput(heads, shape.head_dim, context, rows, repeats=repeats, device=source.device)
    over, per_tok, rest = rest_of_pass(source, Ps, context=context, repeats=repeats)
    hw = Hardware("this machine", peaks.bandwidth, peaks.flops, over, f"measured here: {peaks.to_dict()}")
    bpp = float(next(source.model.parameters()).element_size())
    rest_rows = {P + 1: t for P, t in rest.items()}
    return AchievedRooflineCost(hw, shape, gemms, gf, af, bpp, context, per_tok, overlap, rest_rows)


def verify_cost(
    hardware: str,
    *,
    P=DEFAULT_P,
    params: float | None = None,
    target: str | None = None,
    bytes_per_param: float = 2.0,
    context: int = 512,
    overhead: float | None = None,
    source=None,
    model: str = "smollm2-135m",
    repeats: int = 5,
) -> VerifyCost:
    """A verifier cost model from a ``--hardware`` name (see the module docstring).

    Roofline presets take the target's size from ``target`` (a shape preset)
    and/or ``params``, else from the loaded real model ``source``.
    """
    if not isinstance(hardware, str) or not hardware.strip():
        raise BrwsimError(f"--hardware is empty; use {hardware_names()}")
    hardware = hardware.strip()
    context, repeats = check_positive_int("--context", context), check_positive_int("--repeats", repeats)
    if not 0 < bytes_per_param < math.inf or (overhead is not None and not 0 <= overhead < math.inf):
        raise BrwsimError(
            f"--bytes-per-param must be > 0 and --overhead >= 0, both finite numbers; got {bytes_per_param}, {overhead}"
        )
    if hardware.startswith("csv:"):
        return read_cost_csv(hardware[4:])
    if hardware in MEASURED:
        if source is None:
            source = load_source(model, threads=1)
        if hardware == "cpu-measured":
            return measure_cost(source, P, context=context, repeats=repeats)
        if hardware == "cpu-achieved":
            return cpu_achieved(source, P, context=context, repeats=repeats)
        return cpu_roofline(source, context=context, overhead=overhead or 0.0)
    hw = parse_custom(hardware) if hardware.startswith("custom") else preset(hardware.lower())
    if overhead is not None:
        hw = dataclasses.replace(hw, overhead=float(overhead))
    if target is None and params is None and isinstance(source, TransformersModel):
        shape = shape_of_hf(source.model, source.name)
    else:
        shape = model_shape(target, params)
    return checked_cost(RooflineCost(hw, shape, float(bytes_per_param), int(context)))


def checked_cost(cost: VerifyCost) -> VerifyCost:
    """The cost model, or a one-line error when its plain decoding step is not a positive finite time (a
    parameter count so small that its bytes round to 0 s, e.g. --params 5e-324 --overhead 0)."""
    t0 = cost.t_verify(0)
    if not (math.isfinite(t0) and t0 > 0):
        raise BrwsimError(
            f"the cost model ({cost.label}) gives t_verify(0) = {t0!r} s: one decoding step must take a positive "
            "time; give a realistic --params / --target, or an --overhead > 0"
        )
    return cost


def _tensor_values(path) -> list[float]:
    """A ``.pt`` file's 1-D tensor as numbers (read on the CPU, tensors only: no code in the file is run)."""
    torch = _torch()
    where = f"acceptance vector {str(path)!r}"
    try:
        t = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line
        raise BrwsimError(f"{where}: torch cannot read it ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if not isinstance(t, torch.Tensor) or t.ndim != 1:
        raise BrwsimError(f"{where}: expected a 1-D tensor (Sequoia's acceptance vector), got {type(t).__name__}")
    return t.double().tolist()


def acceptance_vector(text: str):
    """Positional acceptance rates from a comma list or Sequoia's saved vector (a torch ``.pt`` file or a text file
    of its numbers): :func:`brwsim.drafters._sequoia.read_acceptance` with torch's loader."""
    return read_acceptance(text, _tensor_values)
