"""What one calibration measures (:class:`Plan`) and how it times a kernel: the statistics every
microbenchmark of :mod:`muon_repro.costmodel.calibrate` shares.

The size curves (the model's own training step, profiled at ``Plan.curve_tokens``) time a CPU's small
preset in fp32, as the bench's cpu runs train; on a GPU, the gpu scale's runs: their preset under bf16
autocast, at their passes' token counts (a pass holds at most the scale's ``micro_tokens``, 16,384 a rank;
larger steps accumulate gradients over several).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from muon_repro.bench.configs import SCALE_SPECS

# bench/speed_probe.py times the same kernels on the day of a recording, with the device sync it defines
from muon_repro.bench.speed_probe import sync_device
from muon_repro.model_config import PRESETS

KIB = 1024
CURVE_PRECISIONS = ("fp32", "bf16")
# The GPU runs the curves price: the gpu scale's model and precision (bf16 autocast), in passes of at most its
# micro_tokens (16,384 tokens a rank); the curves run from a quarter of that pass to twice it.
GPU_RUNS = SCALE_SPECS["gpu"]
GPU_CURVE_TOKENS = (4096, 8192, 16384, 32768)
GPU_QUICK_CURVE_TOKENS = (4096, 16384)


@dataclass(frozen=True)
class Plan:
    """How much to measure: ``quick`` takes a few seconds, the default about a minute."""

    presets: tuple[str, ...]
    tokens: int  # per rank
    tps: tuple[int, ...]  # TP sizes whose layer widths the matmuls take
    reps: int
    sizes: tuple[int, ...]  # ring bytes per rank of the collective samples
    collective_reps: int
    share_windows: int  # windows of the compute-share measurement, each share_window_s long
    share_window_s: float
    dtypes: tuple[str, ...]
    curve_tokens: tuple[int, ...] = ()  # tokens per rank of the profiled training steps (size curves)
    # The model whose training step the curves time (a name of PRESETS; "": the first of presets), and the step's
    # precision: bf16 autocast on a GPU, as the runs it prices train; fp32 on a CPU
    curve_preset: str = ""
    curve_precision: str = "fp32"
    # Models whose Newton-Schulz is set against the same device's matmul rate at their shapes (a GPU's bf16 target):
    # names of compute_bench.TARGET_MODELS
    ns_target_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.curve_preset and self.curve_preset not in PRESETS:
            raise ValueError(f"curve_preset {self.curve_preset!r} is not a model preset; expected one of {sorted(PRESETS)}")
        if self.curve_precision not in CURVE_PRECISIONS:
            raise ValueError(f"curve_precision must be one of {', '.join(CURVE_PRECISIONS)}, got {self.curve_precision!r}")

    @property
    def curve_model_preset(self) -> str:
        """The preset whose widths the size curves' training step takes."""
        return self.curve_preset or self.presets[0]

    @classmethod
    def for_device(cls, device: str, quick: bool) -> Plan:
        if device == "cuda" and quick:
            return cls(
                presets=("medium",),
                tokens=4096,
                tps=(2,),
                reps=3,
                sizes=(64 * KIB, 4096 * KIB, 65536 * KIB),
                collective_reps=4,
                share_windows=2,
                share_window_s=0.2,
                dtypes=("fp32", "bf16"),
                ns_target_models=("369m",),
                curve_tokens=GPU_QUICK_CURVE_TOKENS,
                curve_preset=GPU_RUNS.preset,
                curve_precision=GPU_RUNS.precision,
            )
        if device == "cuda":
            return cls(
                presets=("medium", "large"),
                tokens=4096,
                tps=(1, 2, 4),
                reps=10,
                sizes=tuple(2**k * KIB for k in range(4, 17, 2)),
                collective_reps=10,
                share_windows=4,
                share_window_s=0.5,
                dtypes=("fp32", "bf16"),
                ns_target_models=("369m", "7b"),
                curve_tokens=GPU_CURVE_TOKENS,
                curve_preset=GPU_RUNS.preset,
                curve_precision=GPU_RUNS.precision,
            )
        if quick:
            # the largest sample big enough that its transfer outlasts a loaded machine's scheduling noise (a few ms)
            return cls(
                presets=("small",),
                tokens=512,
                tps=(2,),
                reps=3,
                sizes=(4 * KIB, 512 * KIB, 16384 * KIB),
                collective_reps=6,
                share_windows=2,
                share_window_s=0.2,
                dtypes=("fp32",),
                curve_tokens=(256, 1024),
            )
        # bf16 matmuls on a CPU without bf16 units run at ~1/50 of fp32: not cheap, left out (an
        # ns_dtype=bf16 CPU run is then refused)
        return cls(
            presets=("small",),
            tokens=512,
            tps=(1, 2, 4),
            reps=7,
            sizes=tuple(4**k * 4 * KIB for k in range(7)),
            collective_reps=8,
            share_windows=6,
            share_window_s=0.4,
            dtypes=("fp32",),
            curve_tokens=(256, 1024, 4096, 8192),
        )


def low_quartile(values: Sequence[float]) -> float:
    """The 25th percentile: the typical value on a quiet machine, and robust to another process's
    bursts on a shared one (which only ever slow a repetition down)."""
    return statistics.quantiles(values, n=4, method="inclusive")[0] if len(values) > 1 else values[0]


def high_quartile(values: Sequence[float]) -> float:
    """The 75th percentile of rates: the window another process's bursts (which only ever slow
    a rate down) disturbed least, without trusting a single best window."""
    return statistics.quantiles(values, n=4, method="inclusive")[2] if len(values) > 1 else values[0]


def seconds_per_call(fn: Callable[[], object], reps: int, device: str = "cpu", target_s: float = 0.005) -> float:
    """Time of one ``fn()``: the low quartile over ``reps`` repetitions, each looping enough calls
    to last ``target_s``."""
    fn()
    sync_device(device)
    t0 = time.perf_counter()
    fn()
    sync_device(device)
    once = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, math.ceil(target_s / once))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync_device(device)
        times.append((time.perf_counter() - t0) / inner)
    return low_quartile(times)
