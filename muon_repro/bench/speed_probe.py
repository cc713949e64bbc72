"""How fast the machine ran when a run was recorded: a one-second probe, and the day's speed it implies.

A calibration (``muon-repro calibrate``) takes a minute and is made once; runs are recorded later,
on a machine whose neighbours come and go. Priced with the calibration alone, a run recorded on a
slow day looks like a model error. So every recording times the same four small kernels, on every
rank at once just before its first step, and keeps them in its environment record
(``environment.json``'s ``speed_probe``); every calibration times them too, in each of its worlds
(``calibration.speed_probe``). The ratios of a run's probe to the calibration's at the same world size
(:func:`day_ratios`), by kind of work:

    compute   fp32 matmul [256, 512] x [512, 512]
    memory    c = a + b on 4M fp32 elements (48 MB)
    host      a one-element add_ (dispatch)
    network   all-reduce of 256 KiB over the world

A figure above 1 means the machine ran faster than when it was calibrated. Each is the mean over ranks
of each rank's mean rate over its window (long enough to span many time slices, so that ranks or
neighbours sharing cores show as they slow a run down), the all-reduce the median of its calls.

Only ``compute`` prices a run (:meth:`MachineProfile.on_day` scales every figure by it: the **day's
speed**). A neighbour that takes cores slows every kind of work alike, and the matmul is the steadiest
of the four: with more ranks than cores, the bandwidth and all-reduce probes depend on how the time
slices fall (in consecutive recordings with nothing else running, the bandwidth probe of a world of 4
on 2 cores came out near 14 or near 23 GB/s, with nothing in between), so scaling by them would add
noise, not remove drift. They are kept beside it, as measured. The probe takes about a second on 2 cores.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from muon_repro.values import is_count

DAY_KINDS = ("compute", "memory", "host", "network")
MATMUL_SHAPE = (256, 512, 512)  # (rows, inner, columns)
STREAM_ELEMENTS = 1 << 22  # 3 x 16 MiB operands: out of the caches, as the calibration's bandwidth loop
ALL_REDUCE_ELEMENTS = 1 << 16  # 256 KiB of fp32
WINDOW_S = {"matmul": 0.2, "stream": 0.15, "op": 0.05}  # each kernel loops this long: many time slices of a shared core
ALL_REDUCE_REPS = 15


@dataclass(frozen=True)
class SpeedProbe:
    """What the probe measured in a world of ``world_size`` ranks (means over ranks)."""

    world_size: int
    matmul_gflops: float
    stream_gbps: float
    op_us: float
    all_reduce_us: float | None  # none in a world of one rank
    seconds: float  # how long the probe took

    def __post_init__(self) -> None:
        if not is_count(self.world_size):
            raise ValueError(f"speed_probe.world_size must be a positive integer, got {self.world_size!r}")
        for name in ("matmul_gflops", "stream_gbps", "op_us", "all_reduce_us"):
            value = getattr(self, name)
            if value is None and name == "all_reduce_us":
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"speed_probe.{name} must be a positive number, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> SpeedProbe:
        """The probe stored at ``where`` (a file and key, for the message when it is not one)."""
        try:
            return cls(**{name: data[name] for name in cls.__dataclass_fields__})
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: not a speed probe ({exc}); record the run again or drop the field") from None


def day_ratios(run: SpeedProbe, calibrated: SpeedProbe) -> dict[str, float]:
    """How fast the run's machine went against the calibration's, per :data:`DAY_KINDS` (rates over rates,
    times under times); ``network`` is left out when either world had no collective to time."""
    speed = {
        "compute": run.matmul_gflops / calibrated.matmul_gflops,
        "memory": run.stream_gbps / calibrated.stream_gbps,
        "host": calibrated.op_us / run.op_us,
    }
    if run.all_reduce_us is not None and calibrated.all_reduce_us is not None:
        speed["network"] = calibrated.all_reduce_us / run.all_reduce_us
    return speed


def nearest_world(probes: Mapping[int, SpeedProbe], world_size: int) -> SpeedProbe:
    """The calibration's probe at ``world_size`` ranks, else at the nearest world measured (in ratio)."""
    if not probes:
        raise ValueError("the calibration has no speed probe")
    return probes[min(probes, key=lambda w: (abs(math.log(w / world_size)), w))]


# ---------------------------------------------------------------- measuring (torch from here on)


def sync_device(device: str) -> None:
    """Wait for the device's queued kernels (a GPU runs them asynchronously), so a clock read after it times them."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def loop_rate(step: Callable[[], object], work_per_call: float, device: str, seconds: float, check_every: int = 1) -> float:
    """Work per second of ``step`` looped for at least ``seconds`` (the clock read, after a device
    sync, every ``check_every`` calls)."""
    calls, t0 = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        if calls % check_every == 0:
            sync_device(device)
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                return work_per_call * calls / elapsed


def measure_speed(device: str = "cpu") -> SpeedProbe:
    """Run the probe on every rank of the default process group at once (or alone, without one);
    every rank returns the same means. Collective when a group is initialized: call it on every rank."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_initialized() else 1
    started = time.perf_counter()
    rows, inner, cols = MATMUL_SHAPE
    a, w = torch.randn(rows, inner, device=device), torch.randn(inner, cols, device=device)
    x, y, z = (torch.ones(STREAM_ELEMENTS, device=device) for _ in range(3))
    one = torch.zeros(1, device=device)
    figures = {}
    _barrier(world)
    figures["matmul_gflops"] = 2.0 * rows * inner * cols / _seconds_per_call(lambda: a @ w, WINDOW_S["matmul"], device) / 1e9
    _barrier(world)
    stream_s = _seconds_per_call(lambda: torch.add(x, y, out=z), WINDOW_S["stream"], device)
    figures["stream_gbps"] = 12.0 * STREAM_ELEMENTS / stream_s / 1e9
    _barrier(world)
    figures["op_us"] = _seconds_per_call(lambda: one.add_(1.0), WINDOW_S["op"], device) * 1e6
    figures["all_reduce_us"] = _all_reduce_us(device) if world > 1 else None
    sync_device(device)
    figures["seconds"] = time.perf_counter() - started
    if world > 1:
        gathered: list[dict | None] = [None] * world
        dist.all_gather_object(gathered, figures)
    else:
        gathered = [figures]
    means = {
        name: statistics.fmean(g[name] for g in gathered) if figures[name] is not None else None  # type: ignore[index]
        for name in figures
    }
    means["seconds"] = round(max(g["seconds"] for g in gathered), 3)  # type: ignore[index]
    return SpeedProbe(world_size=world, **means)


def _all_reduce_us(device: str) -> float:
    """Median time of an all-reduce of 256 KiB over the world, each call started together after a barrier."""
    import torch
    import torch.distributed as dist

    buffer = torch.ones(ALL_REDUCE_ELEMENTS, device=device)
    times = []
    for rep in range(ALL_REDUCE_REPS + 1):  # the first is a warm-up
        dist.barrier()
        sync_device(device)
        t0 = time.perf_counter()
        dist.all_reduce(buffer)
        sync_device(device)
        if rep:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _seconds_per_call(fn: Callable[[], object], seconds: float, device: str) -> float:
    """Mean time of ``fn()`` looped for ``seconds`` (after one warm-up call), the device synced before the clock is read."""
    fn()
    sync_device(device)
    return 1.0 / loop_rate(fn, 1.0, device, seconds, check_every=8)


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
