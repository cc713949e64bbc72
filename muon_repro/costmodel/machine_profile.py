"""A machine profile (:class:`MachineProfile`): the rates the cost model prices a run with, checked as it is built.

A profile is either measured (``muon-repro calibrate`` writes one for the machine it runs on) or
written by hand for hardware we do not have, from published figures (``profiles/*.json``: each
names its sources and the fraction of each peak it assumes is reached, its ``efficiency``).

Figures, per rank (one process, one GPU or ``threads`` CPU cores)::

    matmul_tflops          {dtype: TFLOP/s} of activations x weights matmuls
    newton_schulz_tflops   {dtype: TFLOP/s} of zeropower_via_newtonschulz5 (its matmul FLOPs / its time)
    elementwise_gbps       GB/s moved by an element-wise kernel (p.add_(u, alpha=a): 12 bytes per fp32 element)
    op_overhead_us         host time per operator call of a training step (Python, dispatch, autograd; on a GPU the launch)
    collectives            alpha-beta fits per collective: t = alpha + ring bytes per rank / beta

Optional figures fall back to the ones above (see the field comments). The effective rate of a
figure is ``figure * efficiency[kind]`` (1 where ``efficiency`` says nothing: a measured figure
is already what the machine reaches). Every figure has a plausible range, checked as the profile is
built (:mod:`~muon_repro.costmodel.profile_ranges`, docs/method.md#machine-profile-ranges). Profiles as
JSON files (read, written, shipped ones found by name) are :mod:`muon_repro.costmodel.machine`'s.
This module imports nothing heavy (no torch).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import Any

from muon_repro.bench.speed_probe import DAY_KINDS, SpeedProbe, day_ratios, nearest_world
from muon_repro.costmodel import calibration_range
from muon_repro.costmodel import profile_ranges as ranges
from muon_repro.costmodel.profile_ranges import ProfileError, check_choice
from muon_repro.phases import NEWTON_SCHULZ

DEVICES = ("cpu", "cuda")
BACKENDS = ("gloo", "nccl")
DTYPES = ("fp32", "bf16")
COLLECTIVE_OPS = ("all_gather", "reduce_scatter", "all_reduce")  # muon_repro.parallel.comm.OPS, without torch
SCOPES = ("intra_node", "inter_node")  # a group inside one node, or spanning nodes
EFFICIENCY_KINDS = ("matmul", "attention", NEWTON_SCHULZ, "elementwise", "cross_entropy", "gelu", "op_overhead", *SCOPES)
# Memory passes of a kernel's fp32 input when it is bandwidth-bound (a GPU), for the optional
# figures' fallbacks: cross-entropy forward+backward reads and writes the logits about 8 times
# (log-softmax, its backward, the one-hot scatter), GELU forward+backward 5 times.
CROSS_ENTROPY_PASSES = 8
GELU_PASSES = 5
# Kinds whose rate can follow the size of their operand (size_curves): on a CPU a kernel's rate
# falls once its operands leave the caches, and a GPU's rises as a pass fills it, so one figure
# measured at one size misprices the others. The operand, in elements per rank of one forward+backward
# pass (a micro-batch): the activation [tokens, hidden] for matmul, attention and elementwise, the logits
# [tokens, vocab] for cross_entropy, the MLP's [tokens, ffn / tp] for gelu.
SIZE_CURVE_KINDS = tuple(ranges.CURVE_RATES)  # matmul, attention, cross_entropy, gelu, elementwise
# The memory-bound kinds: their flat figures are fp32 kernels that price a run of either precision, so fp32
# curves (a CPU's) replace them for both; bf16 curves (a GPU's step under autocast) price bf16 runs only.
MEMORY_BOUND_CURVE_KINDS = ("cross_entropy", "gelu", "elementwise")


@dataclass(frozen=True)
class CollectiveFit:
    """``t = alpha + bytes / beta`` for one collective, ``bytes`` being what one rank sends under the
    ring model (:func:`muon_repro.formulas.ring_bytes`), so ``beta`` is a bus bandwidth.

    ``group_size`` / ``world_size`` null: any size not listed on its own. ``world_size``: the ranks
    running at once when it was measured (every group of that size busy together, as in a run).
    """

    op: str
    alpha_us: float
    beta_gbps: float
    group_size: int | None = None
    scope: str = "intra_node"
    world_size: int | None = None
    samples: tuple[tuple[float, float], ...] = ()  # measured (ring bytes per rank, seconds), by bytes: priced between them

    def __post_init__(self) -> None:
        check_choice("op", self.op, COLLECTIVE_OPS)
        ranges.check_samples(self.samples)
        check_choice("scope", self.scope, SCOPES)
        ranges.ALPHA_US.check("alpha_us", self.alpha_us)
        ranges.LINK_GBPS.check("beta_gbps", self.beta_gbps)
        for name in ("group_size", "world_size"):
            ranges.check_count(name, getattr(self, name), 2, nullable=True)

    def seconds(self, ring_bytes: float, efficiency: float = 1.0) -> float:
        """Time of one call that sends ``ring_bytes`` per rank (``efficiency`` discounts beta): from
        the measured samples around it when there are at least two, else from the fit."""
        calibration_range.priced_call(self, ring_bytes)
        if len(self.samples) >= 2:
            return interpolate_samples(self.samples, ring_bytes) / efficiency
        return self.alpha_us * 1e-6 + ring_bytes / (self.beta_gbps * 1e9 * efficiency)


@dataclass(frozen=True)
class Source:
    """A published figure a hand-written profile rests on: where it is quoted from and what it says."""

    figure: str  # the profile field it supports, e.g. "matmul_tflops.bf16"
    quote: str  # the figure as the source states it
    url: str
    note: str = ""  # how it was turned into the field's value (dense vs sparse, per direction...)

    def __post_init__(self) -> None:
        for name in ("figure", "quote", "url"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ProfileError(f"sources: {name} must be a non-empty string, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class MachineProfile:
    """What one rank of a run computes and sends per second on a machine (see the module docstring)."""

    name: str
    device: str  # cpu | cuda
    backend: str  # gloo | nccl
    matmul_tflops: dict[str, float]
    newton_schulz_tflops: dict[str, float]
    elementwise_gbps: float
    op_overhead_us: float
    collectives: tuple[CollectiveFit, ...]
    description: str = ""
    # under the bench's profiler (record_shapes, profile_memory); default op_overhead_us
    profiled_op_overhead_us: float | None = None
    attention_tflops: dict[str, float] = field(default_factory=dict)  # SDPA forward+backward; default: matmul_tflops
    cross_entropy_gbps: float | None = None  # fp32 logits bytes per second, forward+backward; default: elementwise / 8
    gelu_gbps: float | None = None  # fp32 input bytes per second, forward+backward; default: elementwise / 5
    ranks_per_node: int | None = None  # null: every rank of a run on one node
    # {ranks computing at once on a node: fraction of the rate each gets}
    compute_share: dict[int, float] = field(default_factory=dict)
    # the same for a stream loop on 48 MB operands: measured and shown, not applied (docs/method.md#cost-model)
    bandwidth_share: dict[int, float] = field(default_factory=dict)
    # {SIZE_CURVE_KINDS: {operand elements per rank: the kind's rate}}; default: the flat figure
    size_curves: dict[str, dict[int, float]] = field(default_factory=dict)
    # the training precision of the step the curves were measured in (DTYPES): they price runs of that
    # precision (and fp32 memory-bound curves bf16 runs too: MEMORY_BOUND_CURVE_KINDS); profiles before it: fp32
    size_curves_precision: str = "fp32"
    # {group size: mean wait per collective for the group's last rank, when ranks share cores}
    arrival_jitter_us: dict[int, float] = field(default_factory=dict)
    # {group size: {us of compute before the call, one rank alone: that wait}}; default: arrival_jitter_us
    arrival_jitter_curve_us: dict[int, dict[int, float]] = field(default_factory=dict)
    efficiency: dict[str, float] = field(default_factory=dict)  # {EFFICIENCY_KINDS: fraction of the figure reached}
    sources: tuple[Source, ...] = ()
    calibration: dict[str, Any] = field(default_factory=dict)  # how a measured profile was measured
    notes: str = ""
    # how fast the machine ran on the day of a recording against its calibration (muon_repro.bench.speed_probe):
    # every figure is scaled by it; set by on_day, never stored
    day_speed: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ProfileError(f"name must be a non-empty string, got {self.name!r}")
        check_choice("device", self.device, DEVICES)
        check_choice("backend", self.backend, BACKENDS)
        for name in ("matmul_tflops", "newton_schulz_tflops", "attention_tflops"):
            ranges.check_dtype_rates(name, getattr(self, name), DTYPES, required=name != "attention_tflops")
        ranges.KERNEL_GBPS.check("elementwise_gbps", self.elementwise_gbps)
        ranges.OP_OVERHEAD_US.check("op_overhead_us", self.op_overhead_us)
        if self.profiled_op_overhead_us is not None:
            ranges.OP_OVERHEAD_US.check("profiled_op_overhead_us", self.profiled_op_overhead_us)
        for name in ("cross_entropy_gbps", "gelu_gbps"):
            if getattr(self, name) is not None:
                ranges.KERNEL_GBPS.check(name, getattr(self, name))
        ranges.check_count("ranks_per_node", self.ranks_per_node, 1, nullable=True)
        for name, shape in (("efficiency", '{"matmul": 0.7, ...}'), ("calibration", "what `muon-repro calibrate` wrote")):
            if not isinstance(getattr(self, name), Mapping):  # read as objects below and by every prediction
                raise ProfileError(f"{name} must be a JSON object ({shape}), got {type(getattr(self, name)).__name__}")
        if not self.collectives and self.calibration.get("ranks") != [1]:
            raise ProfileError(
                "collectives must list at least one fit (only a profile calibrated on one device alone, --ranks 1, has none)"
            )
        for name in ("compute_share", "bandwidth_share"):
            ranges.check_keyed(name, getattr(self, name), 1, ranges.SHARE)
        for kind, curve in self.size_curves.items():
            ranges.check_size_curve(kind, curve)
        check_choice("size_curves_precision", self.size_curves_precision, DTYPES)
        ranges.check_jitter_curves(self.arrival_jitter_curve_us)
        ranges.check_keyed("arrival_jitter_us", self.arrival_jitter_us, 2, ranges.JITTER_US)
        for kind, value in self.efficiency.items():
            if kind not in EFFICIENCY_KINDS:
                raise ProfileError(f"efficiency: unknown kind {kind!r}; expected some of {', '.join(EFFICIENCY_KINDS)}")
            ranges.EFFICIENCY.check(f"efficiency.{kind}", value)
        ranges.DAY_SPEED.check("day_speed", self.day_speed)

    # ---------------------------------------------------------------- rates

    def eff(self, kind: str) -> float:
        """The fraction of ``kind``'s figure reached: its efficiency, times the day's speed."""
        return self.efficiency.get(kind, 1.0) * self.day_speed

    # ---------------------------------------------------------------- the day of a recording

    def calibration_probes(self) -> dict[int, SpeedProbe]:
        """The speed probes the calibration took, by world size (none for a hand-written profile or an old calibration)."""
        stored = self.calibration.get("speed_probe") or {}
        return {
            int(world): SpeedProbe.from_dict(probe, f"machine {self.name!r}: calibration.speed_probe[{world}]")
            for world, probe in stored.items()
        }

    def day_ratios(self, *probes: SpeedProbe) -> dict[str, float]:
        """Per kind of work (speed_probe.DAY_KINDS), how fast the machine ran when ``probes`` were taken (a run's,
        one per trial) against the calibration's probe at the same world size: the median over the probes."""
        calibrated = self.calibration_probes()
        if not calibrated:
            raise ProfileError(
                f"machine {self.name!r} has no calibration.speed_probe to compare a run's probe with; calibrate it again"
            )
        if not probes:
            raise ValueError("day_ratios needs at least one speed probe")
        ratios = [self._share_corrected(day_ratios(p, nearest_world(calibrated, p.world_size)), p, calibrated) for p in probes]
        return {k: statistics.median(r[k] for r in ratios) for k in DAY_KINDS if all(k in r for r in ratios)}

    def _share_corrected(self, ratios: dict[str, float], probe: SpeedProbe, calibrated: Mapping[int, SpeedProbe]) -> dict:
        """A probe taken in a world larger than every calibrated one (8 ranks of a pipeline against probes of 2 and
        4) ran slower per rank because more ranks shared the cores, not because the day was slow: its compute ratio
        is taken against the calibration's rate times the compute share those extra ranks leave each rank."""
        largest = max(calibrated)
        if probe.world_size <= largest or not self.shares_cores(probe.world_size):
            return ratios
        expected = (self.compute_cores(probe.world_size) / probe.world_size) / (self.compute_cores(largest) / largest)
        return {**ratios, "compute": ratios["compute"] / expected}

    def on_day(self, *probes: SpeedProbe) -> MachineProfile:
        """This profile as fast as the machine ran when ``probes`` were taken (a run's own calibration): every
        figure scaled by the day's speed, the compute ratio (speed_probe says why that one)."""
        return replace(self, day_speed=self.day_ratios(*probes)["compute"])

    # ---------------------------------------------------------------- rates (continued)

    def matmul_flops_per_s(self, dtype: str, elems: int = 0) -> float:
        rate = self._rate("matmul_tflops", self.matmul_tflops, dtype)
        return self._at_size("matmul", rate, dtype, elems) * 1e12 * self.eff("matmul")

    def newton_schulz_flops_per_s(self, dtype: str) -> float:
        return self._rate("newton_schulz_tflops", self.newton_schulz_tflops, dtype) * 1e12 * self.eff(NEWTON_SCHULZ)

    def attention_flops_per_s(self, dtype: str, elems: int = 0) -> float:
        if dtype not in self.attention_tflops:
            return self.matmul_flops_per_s(dtype, elems)
        return self._at_size("attention", self.attention_tflops[dtype], dtype, elems) * 1e12 * self.eff("attention")

    # The memory-bound rates take the training's precision (DTYPES) only to know whether a size curve prices it.

    def elementwise_bytes_per_s(self, elems: int = 0, precision: str = "fp32") -> float:
        return self._at_size("elementwise", self.elementwise_gbps, precision, elems) * 1e9 * self.eff("elementwise")

    def cross_entropy_bytes_per_s(self, elems: int = 0, precision: str = "fp32") -> float:
        if self.cross_entropy_gbps is None and not self.curve_prices("cross_entropy", precision):
            return self.elementwise_bytes_per_s(elems, precision) / CROSS_ENTROPY_PASSES
        flat = self.cross_entropy_gbps or self.elementwise_gbps / CROSS_ENTROPY_PASSES
        return self._at_size("cross_entropy", flat, precision, elems) * 1e9 * self.eff("cross_entropy")

    def gelu_bytes_per_s(self, elems: int = 0, precision: str = "fp32") -> float:
        if self.gelu_gbps is None and not self.curve_prices("gelu", precision):
            return self.elementwise_bytes_per_s(elems, precision) / GELU_PASSES
        flat = self.gelu_gbps or self.elementwise_gbps / GELU_PASSES
        return self._at_size("gelu", flat, precision, elems) * 1e9 * self.eff("gelu")

    def curve_prices(self, kind: str, precision: str) -> bool:
        """Whether ``kind``'s size curve prices a run trained in ``precision``: one of the curves' own precision, or
        any run for an fp32 memory-bound curve (the flat figure it replaces is an fp32 kernel that prices both)."""
        if kind not in self.size_curves:
            return False
        own = self.size_curves_precision
        return precision == own or (own == "fp32" and kind in MEMORY_BOUND_CURVE_KINDS)

    def unused_figures(self) -> list[str]:
        """Notes on flat figures a size curve replaces wherever the model prices their kind (forward and backward,
        in the curves' precision, on operands of known size; the curves are what a calibration measured in the
        step): changing such a figure changes no prediction, which a reader of the profile would not guess."""
        notes = []
        own = self.size_curves_precision
        for kind, name, unit, what in (
            ("matmul", "matmul_tflops", "TFLOP/s", "matmul"),
            ("attention", "attention_tflops", "TFLOP/s", "attention"),
            ("cross_entropy", "cross_entropy_gbps", "GB/s", "cross-entropy"),
            ("gelu", "gelu_gbps", "GB/s", "GELU"),
        ):
            figure = getattr(self, name)
            per_dtype = isinstance(figure, dict)
            rate = figure.get(own) if per_dtype else figure
            # a flat figure with bf16 curves still prices fp32 runs: used
            if rate is None or not all(self.curve_prices(kind, d) for d in ((own,) if per_dtype else DTYPES)):
                continue
            label = f"{name}.{own}" if per_dtype else name
            still = "".join(
                f"; {name}.{other} still prices {other} training"
                for other in DTYPES
                if per_dtype and other != own and other in figure
            )
            notes.append(
                f"{label} ({rate:.4g} {unit}) is not used by this profile's predictions: the size curve "
                f"size_curves.{kind} prices every {own} {what} of forward and backward{still}"
            )
        return notes

    def _at_size(self, kind: str, flat: float, precision: str, elems: int) -> float:
        """The kind's rate on an operand of ``elems`` per rank from its size curve where that prices a run trained in
        ``precision`` (:meth:`curve_prices`), else ``flat``."""
        if elems <= 0 or not self.curve_prices(kind, precision):
            calibration_range.priced_at_size(kind, elems, None, precision)
            return flat
        calibration_range.priced_at_size(kind, elems, self.size_curves[kind], precision)
        return interpolate_curve(self.size_curves[kind], elems)

    def op_seconds(self, profiled: bool) -> float:
        """Host time of one operator call, under the bench's profiler or not."""
        us = self.profiled_op_overhead_us if profiled and self.profiled_op_overhead_us is not None else self.op_overhead_us
        return us * 1e-6 / self.eff("op_overhead")

    def _rate(self, field_name: str, rates: dict[str, float], dtype: str) -> float:
        if dtype not in rates:
            raise ProfileError(
                f"machine {self.name!r}: {field_name} has no {dtype!r} figure (it has {sorted(rates)}); add one to the profile"
            )
        return rates[dtype]

    def compute_cores(self, local_ranks: int) -> float | None:
        """How many ranks' worth of compute ``local_ranks`` ranks computing at once on one node get
        in all (``compute_share[n] * n`` for the measured rank count ``n``), or ``None`` when each rank has its own
        device.

        ``n`` is ``local_ranks`` where measured, else the nearest measured count below it (the cores do not grow with
        the ranks), else the smallest one measured.
        """
        if not self.compute_share:
            return None
        calibration_range.shared_cores(local_ranks, self.compute_share)
        return _nearest_below(self.compute_share, local_ranks) * _nearest_key_below(self.compute_share, local_ranks)

    def collective(self, op: str, group_size: int, scope: str = "intra_node", world_size: int | None = None) -> CollectiveFit:
        """The fit for ``op`` on a group of ``group_size`` ranks: the exact group size if listed, else
        one for any size (null), else the nearest listed size (by ratio, the smaller of two equally near); among
        those, the one measured at ``world_size`` if any, else the largest world."""
        if not self.collectives:
            raise ProfileError(
                f"machine {self.name!r} was calibrated on one device alone and has no collective fits: it prices runs of "
                "one rank; for dp*tp > 1 use a profile with collectives"
            )
        fits = [f for f in self.collectives if f.op == op and f.scope == scope]
        if not fits:
            raise ProfileError(f"machine {self.name!r} has no {op} fit for scope {scope!r}; add one to its collectives")
        exact = [f for f in fits if f.group_size == group_size]
        anysize = [f for f in fits if f.group_size is None]
        if exact or anysize:
            fits = exact or anysize
        else:
            nearest = min({f.group_size for f in fits}, key=lambda g: (abs(math.log(g / group_size)), g))
            fits = [f for f in fits if f.group_size == nearest]
        same_world = [f for f in fits if world_size is not None and f.world_size == world_size]
        chosen = (same_world or sorted(fits, key=lambda f: f.world_size or 0))[-1]
        calibration_range.chose_fit(op, group_size, world_size, chosen)
        return chosen

    def collective_efficiency(self, scope: str) -> float:
        """The fraction of a fit's bandwidth reached in ``scope`` (the day's speed scales whole calls: collective_seconds)."""
        return self.efficiency.get(scope, 1.0)

    def collective_seconds(self, fit: CollectiveFit, ring_bytes: float, scope: str) -> float:
        """One call of ``fit`` sending ``ring_bytes`` per rank in ``scope``, as fast as the machine ran that day."""
        return fit.seconds(ring_bytes, self.collective_efficiency(scope)) / self.day_speed

    def arrival_jitter_s(self, group_size: int, compute_s: float | None = None) -> float:
        """Mean wait per collective call for the last rank of a group of ``group_size`` when ranks
        share cores (the nearest measured size by ratio, the smaller of two equally near; 0 when none was measured),
        after ``compute_s`` of compute (one rank alone) where the curve has it: linear between the measured lengths,
        the nearest end outside them (time slices bound how far ranks drift)."""
        if compute_s is not None and self.arrival_jitter_curve_us:
            curve = self.arrival_jitter_curve_us[_nearest_size(self.arrival_jitter_curve_us, group_size)]
            return interpolate_samples(sorted(curve.items()), min(compute_s * 1e6, max(curve))) * 1e-6
        if not self.arrival_jitter_us:
            return 0.0
        return self.arrival_jitter_us[_nearest_size(self.arrival_jitter_us, group_size)] * 1e-6

    def shares_cores(self, local_ranks: int) -> bool:
        """Whether ``local_ranks`` ranks computing at once on a node get less than a rank's worth each."""
        cores = self.compute_cores(local_ranks)
        return cores is not None and cores < local_ranks * (1 - 1e-9)

    # ---------------------------------------------------------------- JSON

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["collectives"] = [asdict(c) for c in self.collectives]
        out["sources"] = [asdict(s) for s in self.sources]
        out.pop("day_speed")  # a run's, not the machine's
        out["compute_share"] = {str(k): v for k, v in self.compute_share.items()}
        out["bandwidth_share"] = {str(k): v for k, v in self.bandwidth_share.items()}
        out["size_curves"] = {kind: {str(k): v for k, v in curve.items()} for kind, curve in self.size_curves.items()}
        out["arrival_jitter_us"] = {str(k): v for k, v in self.arrival_jitter_us.items()}
        out["arrival_jitter_curve_us"] = {
            str(g): {str(k): v for k, v in c.items()} for g, c in self.arrival_jitter_curve_us.items()
        }
        return out


# ---------------------------------------------------------------- interpolation


def interpolate_curve(curve: Mapping[int, float], size: float) -> float:
    """A rate at ``size`` from a measured curve: log-log between the points around it, the end
    point's rate outside them (a rate levels off rather than growing without bound)."""
    points = sorted(curve.items())
    if size <= points[0][0]:
        return points[0][1]
    if size >= points[-1][0]:
        return points[-1][1]
    (x0, y0), (x1, y1) = next((a, b) for a, b in pairwise(points) if a[0] <= size <= b[0])
    w = math.log(size / x0) / math.log(x1 / x0)
    return math.exp((1 - w) * math.log(y0) + w * math.log(y1))


def interpolate_samples(samples: Sequence[tuple[float, float]], nbytes: float) -> float:
    """Seconds of a call of ``nbytes`` from measured (bytes, seconds) samples: linear between the
    two around it, along the last two samples' slope beyond the largest (never below the largest's
    time: a noisy pair that falls would price big calls at nothing, then below zero), the smallest's time below it."""
    points = sorted(samples)
    if nbytes <= points[0][0]:
        return points[0][1]
    pair = next(((a, b) for a, b in pairwise(points) if nbytes <= b[0]), (points[-2], points[-1]))
    (x0, y0), (x1, y1) = pair
    if x1 <= x0:
        return y1
    seconds = y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)
    return max(seconds, y1) if nbytes > x1 else seconds


def _nearest_size(table: Mapping[int, Any], group_size: int) -> int:
    return min(table, key=lambda g: (abs(math.log(g / group_size)), g))


def _nearest_key_below(table: Mapping[int, float], count: int) -> int:
    """The largest key <= ``count`` (the cores do not grow with the ranks), else the smallest key."""
    below = [k for k in table if k <= count]
    return max(below) if below else min(table)


def _nearest_below(table: Mapping[int, float], count: int) -> float:
    return table[_nearest_key_below(table, count)]
