"""The plausible range of every figure a machine profile holds, and the checks that refuse a value outside it.

A figure outside its range (NaN, infinity, a subnormal, 0 or a negative where they mean nothing, or a
rate no machine reaches) would make ``predict`` price a step at infinity, divide by zero or never end,
so a profile is refused where it is built: the error names the field, the value and the range (the
file is added by :mod:`muon_repro.costmodel.machine`). Each range is wide enough for every committed
profile (``traces/*/costmodel/machine.json``, ``profiles/*.json``: ``tests/test_costmodel_limits.py``
loads them all) and narrow enough that the simulation's arithmetic stays finite at its ends.
docs/method.md#machine-profile-ranges shows the table. Imports nothing heavy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RANGES_DOC = "docs/method.md#machine-profile-ranges"


class ProfileError(ValueError):
    """A machine profile that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Range:
    """Values from ``low`` to ``high`` (both included), in ``unit``; ``why`` says what the ends stand for."""

    low: float
    high: float
    unit: str
    why: str

    def check(self, name: str, value: Any) -> None:
        # an int is compared exactly: math.isfinite would convert it to a float, which overflows past 1e308
        ok = is_int(value) or (isinstance(value, float) and math.isfinite(value))
        if not (ok and self.low <= value <= self.high):
            raise ProfileError(
                f"{name} must be a number in [{self.low:g}, {self.high:g}] {self.unit} ({self.why}), got {value!r}; "
                f"correct the figure (ranges: {RANGES_DOC})"
            )


# Every kind of figure's range, one row each: (name, low, high, unit, why the ends); the comment above a row says
# what the committed profiles span.
RANGE_TABLE: tuple[tuple[str, float, float, str, str], ...] = (
    # Compute rates per rank; committed: 0.06 (CPU attention) to 989.5 (H100 bf16).
    ("TFLOPS", 1e-4, 1e4, "TFLOP/s", "0.1 GFLOP/s, one slow core, to 10 PFLOP/s, beyond any accelerator"),
    # Kernel bandwidths per rank (100 TB/s: over 10x HBM3e); committed: 1.16 to 3,350.
    ("KERNEL_GBPS", 1e-3, 1e5, "GB/s", "1 MB/s to 100 TB/s, beyond any memory"),
    # A collective's bus bandwidth, beta (100 TB/s: over 50x NVLink 5); committed: 0.34 to 450.
    ("LINK_GBPS", 1e-3, 1e5, "GB/s", "1 MB/s to 100 TB/s, beyond any interconnect"),
    # Host time per operator call: 0 (an ideal host, as tests price one) to 10 ms (1000x a Python dispatch).
    ("OP_OVERHEAD_US", 0.0, 1e4, "us", "0, an ideal host, to 10 ms, 1000x a Python dispatch"),
    # A collective's latency, alpha; committed: 10 to 4,750 (gloo, 4 ranks on 2 cores).
    ("ALPHA_US", 0.0, 1e5, "us", "0, an ideal link, to 100 ms"),
    # A measured collective sample: ring bytes per rank, and seconds per call.
    ("SAMPLE_BYTES", 1.0, 1e13, "bytes", "1 byte to 10 TB per rank"),
    ("SAMPLE_SECONDS", 1e-9, 1e3, "s", "1 ns to 1,000 s per call"),
    # A compute or bandwidth share of a rank's rate alone; committed: 0.24 to 1.
    ("SHARE", 1e-3, 1.0, "of a rank's rate alone", "1,000 ranks per core to a core each"),
    # The fraction of a published peak a hand-written profile assumes is reached; committed: 0.5 to 0.8.
    ("EFFICIENCY", 1e-2, 1.0, "of the figure", "1% of the peak to all of it"),
    # The wait of a group's last rank per collective; committed: up to 37,055.
    ("JITTER_US", 0.0, 1e6, "us", "0 to 1 s per collective"),
    # The compute before a collective that a late-arrival wait was measured after.
    ("JITTER_COMPUTE_US", 1, 1e9, "us", "1 us to 1,000 s of compute"),
    # A size curve's operand per rank (1e12: 4 TB of fp32); committed: 65,536 to 16,777,216.
    ("CURVE_ELEMENTS", 1, 1e12, "elements", "1 to 1e12 elements per rank"),
    # How fast the machine ran on a recording's day against its calibration; committed: 0.56 to 1.03.
    ("DAY_SPEED", 1e-2, 1e2, "x the calibration's speed", "a probe or a calibration this far off measured something else"),
)
RANGES: dict[str, Range] = {name: Range(low, high, unit, why) for name, low, high, unit, why in RANGE_TABLE}
# The rows by name, in the table's order (tests/test_costmodel_limits.py checks each is its row)
(
    TFLOPS,
    KERNEL_GBPS,
    LINK_GBPS,
    OP_OVERHEAD_US,
    ALPHA_US,
    SAMPLE_BYTES,
    SAMPLE_SECONDS,
    SHARE,
    EFFICIENCY,
    JITTER_US,
    JITTER_COMPUTE_US,
    CURVE_ELEMENTS,
    DAY_SPEED,
) = RANGES.values()
# Rank counts (world, group, ranks per node, share keys): up to 2**20, more ranks than any cluster has.
MAX_RANKS = 1 << 20

# The unit of each size curve's rates: its kind's flat figure's.
CURVE_RATES = {
    "matmul": TFLOPS,
    "attention": TFLOPS,
    "cross_entropy": KERNEL_GBPS,
    "gelu": KERNEL_GBPS,
    "elementwise": KERNEL_GBPS,
}


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_count(name: str, value: Any, low: int, *, nullable: bool = False) -> None:
    """A rank count: an integer from ``low`` to :data:`MAX_RANKS` (or null where ``nullable``)."""
    if value is None and nullable:
        return
    if not is_int(value) or not low <= value <= MAX_RANKS:
        null = " or null" if nullable else ""
        raise ProfileError(f"{name} must be an integer from {low} to {MAX_RANKS}{null} (a rank count), got {value!r}")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ProfileError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def check_size_curve(kind: Any, curve: Any) -> None:
    if kind not in CURVE_RATES:
        raise ProfileError(f"size_curves: unknown kind {kind!r}; expected some of {', '.join(CURVE_RATES)}")
    if not isinstance(curve, Mapping) or not curve:
        raise ProfileError(f"size_curves.{kind} must be a non-empty object {{operand elements: rate}}, got {curve!r}")
    for elements, rate in curve.items():
        if not is_int(elements):
            raise ProfileError(f"size_curves.{kind} keys are operand sizes (elements, integers >= 1), got {elements!r}")
        CURVE_ELEMENTS.check(f"size_curves.{kind} key", elements)
        CURVE_RATES[kind].check(f"size_curves.{kind}[{elements}]", rate)


def check_samples(samples: Any) -> None:
    for i, pair in enumerate(samples):
        SAMPLE_BYTES.check(f"samples[{i}] bytes", pair[0])
        SAMPLE_SECONDS.check(f"samples[{i}] seconds", pair[1])


def check_dtype_rates(name: str, rates: Any, dtypes: tuple[str, ...], *, required: bool) -> None:
    if not isinstance(rates, Mapping) or (required and not rates):
        raise ProfileError(f"{name} must be an object {{dtype: TFLOP/s}} with at least one of {', '.join(dtypes)}, got {rates!r}")
    for dtype, value in rates.items():
        check_choice(f"{name} dtype", dtype, dtypes)
        TFLOPS.check(f"{name}.{dtype}", value)


def check_keyed(name: str, table: Any, key_low: int, values: Range) -> None:
    """``{rank count: value}`` (compute_share, bandwidth_share, arrival_jitter_us): counts from ``key_low``."""
    for count, value in table.items():
        check_count(f"{name} key", count, key_low)
        values.check(f"{name}[{count}]", value)


def check_jitter_curves(curves: Any) -> None:
    """``arrival_jitter_curve_us``: ``{group size: {us of compute: wait us}}``."""
    for size, curve in curves.items():
        if not is_int(size) or size < 2 or not isinstance(curve, Mapping) or not curve:
            raise ProfileError(
                "arrival_jitter_curve_us: keys are group sizes (integers >= 2) of non-empty objects "
                f"{{compute us: wait us}}, got {size!r}: {curve!r}"
            )
        check_count("arrival_jitter_curve_us key", size, 2)
        for compute_us, us in curve.items():
            if not is_int(compute_us):
                raise ProfileError(
                    f"arrival_jitter_curve_us[{size}] keys are compute times in us (integers >= 1), got {compute_us!r}"
                )
            JITTER_COMPUTE_US.check(f"arrival_jitter_curve_us[{size}] key", compute_us)
            JITTER_US.check(f"arrival_jitter_curve_us[{size}][{compute_us}]", us)
