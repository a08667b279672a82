"""Verifier cost models t_verify(P) and draft cost models t_draft(P) (docs/speedup.md).

Every verifier cost model answers one question, :meth:`VerifyCost.t_verify`:
the seconds of one target forward pass that verifies a tree of ``P`` draft
tokens plus the bonus position (``P + 1`` query tokens) after a context of
``L`` tokens. ``t_verify(0)`` is one plain decoding step, the autoregressive
baseline. Three sources: a table of measured times (:class:`TableCost`, from
this machine's real model or from a user's CSV) and the roofline
(:class:`RooflineCost`).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import BrwsimError
from ._hardware import Hardware, ModelShape


class VerifyCost:
    """The interface: ``t_verify(P)`` seconds per target call; ``kind`` says where the numbers come from."""

    kind = "modelled"
    label = ""

    def t_verify(self, P: int) -> float:
        raise NotImplementedError

    def spread(self, P: int) -> tuple[float, float] | None:
        """(min, max) of the repeated measurements at ``P``, when measured."""
        return None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "label": self.label}


@dataclasses.dataclass(frozen=True)
class TableCost(VerifyCost):
    """Seconds per call at listed budgets (P = 0 required); linear interpolation between them, no extrapolation.

    ``kind`` is ``measured`` (timed here, with the (min, max) ``spreads`` of the
    repeats) or ``table`` (a user's CSV).
    """

    points: Mapping[int, float]
    kind: str = "table"
    label: str = "user table"
    spreads: Mapping[int, tuple[float, float]] | None = None

    def __post_init__(self):
        if 0 not in self.points:
            raise BrwsimError(f"cost table {self.label!r} has no row for P = 0 (one plain decoding step): add one")
        bad = [(p, s) for p, s in self.points.items() if not (math.isfinite(s) and s > 0)]
        if bad:
            raise BrwsimError(f"cost table {self.label!r}: seconds must be positive numbers, got {bad[0][1]!r}")

    def t_verify(self, P: int) -> float:
        if P in self.points:
            return float(self.points[P])
        Ps = sorted(self.points)
        if P < Ps[0] or P > Ps[-1]:
            raise BrwsimError(f"cost table {self.label!r} covers P = {Ps[0]} .. {Ps[-1]}; P = {P} is outside it")
        hi = next(p for p in Ps if p > P)
        lo = max(p for p in Ps if p < P)
        w = (P - lo) / (hi - lo)
        return float((1 - w) * self.points[lo] + w * self.points[hi])

    def spread(self, P: int):
        return (self.spreads or {}).get(P)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "label": self.label, "points": {str(p): s for p, s in sorted(self.points.items())}}
        if self.spreads:
            d["spreads"] = {str(p): list(s) for p, s in sorted(self.spreads.items())}
        return d


def isotonic_fit(values: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in weighted least squares (pool adjacent violators).

    Verifying more tokens never takes less time: a measured t_verify that dips at a larger P is timing noise,
    and the fit pools it with its neighbours. ``[1, 3, 2, 4]`` -> ``[1, 2.5, 2.5, 4]``.
    """
    w = [1.0] * len(values) if weights is None else [float(x) for x in weights]
    blocks: list[list[float]] = []  # [weighted mean, weight, count]
    for v, wt in zip(values, w, strict=True):
        blocks.append([float(v), wt, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, c1), (m2, w2, c2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2]
    return [m for m, _, c in blocks for _ in range(c)]


def measured_cost(times: Mapping[int, Sequence[float]], label: str, isotonic: bool = True) -> TableCost:
    """A measured :class:`TableCost`: the median of each budget's repeats (taken in interleaved rounds), fitted
    non-decreasing in P (:func:`isotonic_fit`, weighted by the repeats; ``isotonic=False``: the raw medians),
    with the repeats' (min, max)."""
    Ps = sorted(int(P) for P in times)
    med = [statistics.median(times[P]) for P in Ps]
    fit = isotonic_fit(med, [len(times[P]) for P in Ps]) if isotonic else med
    spreads = {int(P): (min(ts), max(ts)) for P, ts in times.items()}
    kind_label = label + (", isotonic fit in P" if isotonic else "")
    return TableCost(dict(zip(Ps, fit, strict=True)), kind="measured", label=kind_label, spreads=spreads)


def _parse_row(row: list[str], path: str, lineno: int) -> tuple[int, float]:
    if len(row) != 2:
        raise BrwsimError(f"{path}:{lineno}: expected two columns 'P,seconds', got {len(row)}: {','.join(row)!r}")
    try:
        P, s = float(row[0]), float(row[1])
    except ValueError:
        raise BrwsimError(f"{path}:{lineno}: cannot read {','.join(row)!r} as 'P,seconds' (two numbers)") from None
    if not P.is_integer() or P < 0:
        raise BrwsimError(f"{path}:{lineno}: P must be an integer >= 0, got {row[0]!r}")
    if not (math.isfinite(s) and s > 0):
        raise BrwsimError(f"{path}:{lineno}: seconds must be a positive number, got {row[1]!r}")
    return int(P), s


def read_cost_csv(path: str) -> TableCost:
    """A user's table of seconds per target call: CSV rows ``P,seconds`` (an optional header line), P increasing
    from 0."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise BrwsimError(f"cost table {path!r} does not exist (expected a CSV file of rows 'P,seconds')")
    try:
        # (line number, cells) of every line that is not blank
        lines = [(i, r) for i, r in enumerate(csv.reader(p.read_text().splitlines()), 1) if any(c.strip() for c in r)]
    except (UnicodeDecodeError, csv.Error) as e:
        raise BrwsimError(f"cost table {path!r} is not a readable CSV file: {e}") from None
    lines = [(i, [c.strip() for c in r]) for i, r in lines]
    start = 1 if lines and not _numeric(lines[0][1][0]) else 0  # a header line
    pts: dict[int, float] = {}
    last = -1
    for i, row in lines[start:]:
        P, s = _parse_row(row, path, i)
        if P <= last:
            raise BrwsimError(f"{path}:{i}: the P column must increase strictly, but P = {P} follows P = {last}")
        pts[P], last = s, P
    if not pts:
        raise BrwsimError(f"cost table {path!r} has no rows; expected lines 'P,seconds' starting at P = 0")
    return TableCost(pts, kind="table", label=f"csv:{path}")


def _numeric(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class RooflineCost(VerifyCost):
    """t(P) = max(bytes moved / bandwidth, FLOPs / peak) + overhead, for ``P + 1`` query tokens after ``context``.

    Bytes: every weight once (``params x bytes_per_param``) plus the KV cache
    read and written (``kv values per token x kv_bytes x (context + P + 1)``).
    FLOPs: ``2 x params`` per token plus the attention's ``4 x layers x
    attn_dim x context-plus-tree`` per token. Activations are not counted.
    """

    hardware: Hardware
    shape: ModelShape
    bytes_per_param: float = 2.0
    context: int = 512
    kv_bytes: float | None = None  # bytes per cached value; default bytes_per_param
    kind: str = "modelled"

    @property
    def label(self) -> str:
        s = f"roofline {self.hardware.name}, {self.shape.name}, {self.bytes_per_param:g} B/param, L={self.context}"
        s += "" if self.shape.layers else "; KV cache and attention not counted (give a --target shape)"
        # a measured GPU call of a small model is mostly per-call overhead (docs/speedup.md, "On a GPU")
        return s + ("" if self.hardware.overhead else "; no per-call overhead assumed (--overhead S adds one)")

    def breakdown(self, P: int) -> dict:
        """Bytes, FLOPs, the memory and compute times, and which one binds, at budget ``P``."""
        n = P + 1
        kvb = self.bytes_per_param if self.kv_bytes is None else self.kv_bytes
        nbytes = self.shape.params * self.bytes_per_param + self.shape.kv_values_per_token() * kvb * (self.context + n)
        flops = 2.0 * self.shape.params * n + 4.0 * self.shape.layers * self.shape.attn_dim * n * (self.context + n)
        t_mem, t_cmp = nbytes / self.hardware.bandwidth, flops / self.hardware.flops
        return {
            "bytes": nbytes,
            "flops": flops,
            "t_memory": t_mem,
            "t_compute": t_cmp,
            "bound": "memory" if t_mem >= t_cmp else "compute",
            "overhead": self.hardware.overhead,
        }

    def t_verify(self, P: int) -> float:
        b = self.breakdown(P)
        return max(b["t_memory"], b["t_compute"]) + self.hardware.overhead

    def pass_time(self, fp, rows: float = 1.0) -> float:
        """Seconds of one pass of a model of footprint ``fp`` (a :class:`brwsim.llm.drafters._base.PassFootprint`:
        one new token after ``context``) through this roofline: its weights at their own bits (``bytes_per_param``
        where it declares none), its KV cache at ``kv_bytes``, max(bytes / bandwidth, FLOPs / peak) + overhead; 0 for
        a footprint with no model pass. The target's own step, ``t_verify(0)``, is the same formula on its shape.
        ``rows``: new tokens in the pass (a tree builder's pass scores several nodes): the weights are read once,
        each row adds its KV values and its FLOPs."""
        if fp.empty:
            return 0.0
        kvb = self.bytes_per_param if self.kv_bytes is None else self.kv_bytes
        extra = fp.kv_values * kvb * max(rows - 1.0, 0.0)
        t_mem = (fp.nbytes(self.bytes_per_param, kvb, self.context) + extra) / self.hardware.bandwidth
        return max(t_mem, rows * fp.flops(self.context) / self.hardware.flops) + self.hardware.overhead

    def ridge_P(self) -> float:
        """The budget where compute time overtakes memory time (weights only): bw-bound below, compute-bound above."""
        return self.hardware.flops * self.bytes_per_param / (2.0 * self.hardware.bandwidth) - 1.0

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "label": self.label,
            "hardware": self.hardware.to_dict(),
            "shape": self.shape.to_dict(),
            "bytes_per_param": self.bytes_per_param,
            "context": self.context,
            "kv_bytes": self.bytes_per_param if self.kv_bytes is None else self.kv_bytes,
        }


def _interp(table: Mapping[int, float], n: int, what: str) -> float:
    """``table[n]``, linearly interpolated between the measured row counts; no extrapolation."""
    if n in table:
        return float(table[n])
    ns = sorted(table)
    if not ns:
        raise BrwsimError(f"{what} has no measured row counts: measure it")
    if n < ns[0] or n > ns[-1]:
        raise BrwsimError(f"{what} was measured for {ns[0]} .. {ns[-1]} rows; {n} rows is outside: measure it")
    hi = next(m for m in ns if m > n)
    lo = max(m for m in ns if m < n)
    w = (n - lo) / (hi - lo)
    return float((1 - w) * table[lo] + w * table[hi])


@dataclasses.dataclass(frozen=True)
class AchievedRooflineCost(VerifyCost):
    """The achieved roofline: a roofline per operation with this machine's measured kernel throughput at each shape.

    For ``n = P + 1`` query rows, every weight matrix ``(d_in, d_out, count)`` of ``gemms`` costs
    ``max(d_in d_out bytes_per_param / bandwidth, 2 n d_in d_out / gemm_flops[(d_in, d_out)][n])``; the attention
    of all layers costs ``max(KV cache bytes / bandwidth, 4 layers attn_dim n (context + n) / attn_flops[n])``;
    the rest of the pass (framework, norms, activations) costs ``rest[n]`` where measured (linearly interpolated
    between row counts), else ``overhead + per_token n``. Bytes and FLOPs come
    from the model's shape, as in :class:`RooflineCost`; the FLOP/s is not a peak but what the kernel reaches at
    that shape with its operands in cache (measured: :func:`brwsim.speedup._timing.gemm_throughput`,
    ``attention_throughput``), linearly interpolated between measured row counts. ``overlap=False`` adds the
    memory and compute times instead of taking their maximum (a kernel that reads its weights, then computes:
    no overlap; what a one-thread CPU matrix product with few rows does, measured in docs/speedup.md).
    """

    hardware: Hardware
    shape: ModelShape
    gemms: tuple[tuple[int, int, int], ...]
    gemm_flops: Mapping[tuple[int, int], Mapping[int, float]]
    attn_flops: Mapping[int, float]
    bytes_per_param: float = 4.0
    context: int = 256
    per_token: float = 0.0
    overlap: bool = True
    rest: Mapping[int, float] | None = None
    kind: str = "modelled"

    @property
    def label(self) -> str:
        rule = "max(memory, compute)" if self.overlap else "memory + compute"
        return (
            f"achieved roofline {self.hardware.name}, {self.shape.name}, {self.bytes_per_param:g} B/param, "
            f"L={self.context} (measured kernel FLOP/s per shape, not the peak; {rule} per operation)"
        )

    def breakdown(self, P: int) -> dict:
        """Seconds of the weight matrices, the attention and the rest, at budget ``P``."""
        n, bw, bpp = P + 1, self.hardware.bandwidth, self.bytes_per_param
        comb = max if self.overlap else (lambda a, b: a + b)
        t_gemm = 0.0
        for d_in, d_out, count in self.gemms:
            f = _interp(self.gemm_flops[(d_in, d_out)], n, f"the {d_in}x{d_out} matrix product")
            t_gemm += count * comb(d_in * d_out * bpp / bw, 2.0 * n * d_in * d_out / f)
        s = self.shape
        kv_bytes = s.kv_values_per_token() * bpp * (self.context + n)
        attn_fl = 4.0 * s.layers * s.attn_dim * n * (self.context + n)
        t_attn = comb(kv_bytes / bw, attn_fl / _interp(self.attn_flops, n, "the attention"))
        if self.rest:
            t_rest = _interp(self.rest, n, "the rest of the pass")
        else:
            t_rest = self.hardware.overhead + self.per_token * n
        return {"t_gemm": t_gemm, "t_attention": t_attn, "t_rest": t_rest}

    def t_verify(self, P: int) -> float:
        b = self.breakdown(P)
        return b["t_gemm"] + b["t_attention"] + b["t_rest"]

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "label": self.label,
            "hardware": self.hardware.to_dict(),
            "shape": self.shape.to_dict(),
            "gemms": [list(g) for g in self.gemms],
            "gemm_flops": {
                f"{i}x{o}": {str(n): v for n, v in sorted(t.items())} for (i, o), t in self.gemm_flops.items()
            },
            "attn_flops": {str(n): v for n, v in sorted(self.attn_flops.items())},
            "bytes_per_param": self.bytes_per_param,
            "context": self.context,
            "per_token": self.per_token,
            "overlap": self.overlap,
            "rest": {str(n): v for n, v in sorted(self.rest.items())} if self.rest else None,
        }


@dataclasses.dataclass(frozen=True)
class DraftCost:
    """t_draft(P): the seconds a drafter spends per target call drafting a tree of at most ``P`` nodes.

    Two forms. Per pass: t_draft(P) = passes(P) x ``t_pass``, where ``passes`` is ``"P"`` (one drafter pass per
    drafted token, as a chain drafter needs), a fixed number of passes per tree (a drafter that drafts level by
    level) or the measured mean passes per call at each budget (``((P, passes), ...)``, linearly interpolated
    between the budgets measured). Per call: ``per_call`` = ``((P, seconds), ...)``, the drafting seconds per
    call measured in a real generation loop (the builder's own passes at their own row counts, its host work and
    its catch-up pass for the accepted tokens), which then is t_draft(P), linearly interpolated between the
    budgets measured; a budget outside them is refused (measure it).

    A measured cost also carries ``t_pass_ci95`` (``t_pass`` is the mean pass time over the ``repeats``, this the
    Student t 95% half-width of that mean), ``t_step`` (the target's mean decoding step, timed in the same
    interleaved rounds), ``fraction`` (the mean over rounds of pass / step) and ``fraction_ci95`` (its Student t
    95% half-width); a derived one its ``fraction`` of the target's step. A per-call cost measured in the loop
    carries ``per_call_ci95`` (``((P, half-width), ...)``, Student t over the prompts)."""

    t_pass: float = 0.0
    passes: str | int | tuple = "P"
    label: str = "oracle (no draft cost: the speed of light)"
    kind: str = "none"
    t_pass_ci95: float | None = None
    t_step: float | None = None
    fraction: float | None = None
    repeats: int = 0
    fraction_ci95: float | None = None
    per_call: tuple | None = None
    per_call_ci95: tuple | None = None

    def n_passes(self, P: int) -> float:
        if P == 0:
            return 0
        if self.passes == "P":
            return P
        if isinstance(self.passes, (tuple, list)):
            return _budget_interp(self.passes, P, f"{self.label}: passes per call")
        return int(self.passes)

    def t_draft(self, P: int) -> float:
        if P == 0:
            return 0.0
        if self.per_call is not None:
            return _budget_interp(self.per_call, P, f"{self.label}: seconds per call")
        return self.n_passes(P) * self.t_pass

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _budget_interp(pairs, P: int, what: str) -> float:
    """The value at budget ``P`` of measured ``(P, value)`` pairs: linear between the budgets measured; none
    outside them (a draft cost is not extrapolated: measure the budget)."""
    table = {int(k): float(v) for k, v in pairs}
    ks = sorted(table)
    if P in table:
        return table[P]
    if not ks or P < ks[0] or P > ks[-1]:
        span = f"{ks[0]} .. {ks[-1]}" if ks else "no budget"
        raise BrwsimError(f"{what} measured at P = {span}; P = {P} is outside: measure that budget")
    lo, hi = max(k for k in ks if k < P), min(k for k in ks if k > P)
    w = (P - lo) / (hi - lo)
    return (1 - w) * table[lo] + w * table[hi]


ORACLE = DraftCost()
