"""The multi-rank measurements of a calibration, run in a world of W workers at once.

How much of one process's compute rate and memory bandwidth each of W ranks keeps when all work at
once (against one process alone), how far out of step ranks that share cores reach a collective
(arrival jitter), and the time of every collective on every group size.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from muon_repro.bench.speed_probe import loop_rate, measure_speed, sync_device
from muon_repro.costmodel.machine_profile import COLLECTIVE_OPS
from muon_repro.costmodel.measurement import Plan, high_quartile
from muon_repro.formulas import ring_bytes
from muon_repro.model_config import PRESETS

# torch >= 2.13 renamed the single-tensor collectives (the old names warn), as muon_repro.parallel.comm notes.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
STREAM_ELEMENTS = 1 << 22  # fp32 elements per operand of the bandwidth loop: 3 x 16 MiB, out of the caches


# ---------------------------------------------------------------- one process alone: the references


def standalone_matmul_rate(plan: Plan, device: str) -> float:
    """FLOP/s of one process looping the compute-share matmul (the reference for the share): the
    high quartile over the plan's windows."""
    return _windows_rate(lambda seconds: _matmulloop_rate(plan, device, seconds), plan)


def compute_share(rates_by_rank: list[list[float]], reference: float) -> float:
    """The fraction of ``reference`` each rank gets when all compute at once: the ranks' summed
    rate per window (the high quartile over windows, each long enough for many time slices) over
    the reference, shared by the ranks, at most 1."""
    totals = [sum(window) for window in zip(*rates_by_rank)]
    return min(1.0, high_quartile(totals) / reference / len(rates_by_rank))


def share_shape(plan: Plan) -> tuple[int, int, int]:
    """``(tokens, in, out)`` of the compute-share matmul: the plan's tokens, the first preset's
    hidden width, half its MLP width."""
    m = PRESETS[plan.presets[0]]
    return plan.tokens, m.hidden, m.ffn_hidden // 2


def _share_operands(plan: Plan, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, fan_in, fan_out = share_shape(plan)
    return torch.randn(tokens, fan_in, device=device), torch.randn(fan_in, fan_out, device=device)


def _windows_rate(loop: Callable[[float], float], plan: Plan) -> float:
    """One process's rate of ``loop`` (a loop rate for a given length): the high quartile over the plan's windows."""
    return high_quartile([loop(plan.share_window_s) for _ in range(plan.share_windows)])


def _matmulloop_rate(plan: Plan, device: str, seconds: float) -> float:
    """FLOP/s of the compute-share matmul looped for ``seconds``."""
    tokens, fan_in, fan_out = share_shape(plan)
    a, w = _share_operands(plan, device)
    return loop_rate(lambda: a @ w, 2.0 * tokens * fan_in * fan_out, device, seconds, check_every=4)


def _streamloop_rate(device: str, seconds: float) -> float:
    """Bytes per second of ``c = a + b`` on operands larger than the caches, looped for ``seconds``."""
    a, b, c = (torch.ones(STREAM_ELEMENTS, device=device) for _ in range(3))
    return loop_rate(lambda: torch.add(a, b, out=c), 12.0 * STREAM_ELEMENTS, device, seconds)


def standalone_stream_rate(plan: Plan, device: str) -> float:
    """One process's rate of the bandwidth loop: the reference for the bandwidth share."""
    return _windows_rate(lambda seconds: _streamloop_rate(device, seconds), plan)


# ---------------------------------------------------------------- the world: every rank at once


@dataclass(frozen=True)
class WorldJob:
    """What each worker of one world measures."""

    plan: Plan
    device: str
    # matmuls of the compute-share shape between two collectives, one count per calibrate.JITTER_COMPUTE_S
    jitter_calls: tuple[int, ...] = (1,)


def world_worker(job: WorldJob) -> dict | None:
    """On every rank of a world: the compute share, the arrival jitter, then every collective on
    every group size; rank 0 returns what all ranks measured."""
    world, rank = dist.get_world_size(), dist.get_rank()
    probe = measure_speed(job.device)  # what a recording in a world this size compares its own probe with
    share_rates, stream_rates = [], []
    for _ in range(job.plan.share_windows):  # every rank computes at once, window by window
        dist.barrier()
        share_rates.append(_matmulloop_rate(job.plan, job.device, job.plan.share_window_s))
    for _ in range(job.plan.share_windows):  # then every rank streams memory at once
        dist.barrier()
        stream_rates.append(_streamloop_rate(job.device, job.plan.share_window_s))
    samples, arrivals = [], {}
    for size in [g for g in range(2, world + 1) if world % g == 0]:
        members = [list(range(start, start + size)) for start in range(0, world, size)]
        groups = [dist.new_group(m) for m in members]  # collective over the world: every rank makes every group
        mine = groups[rank // size]
        arrivals[size] = [_arrivals(mine, job, calls) for calls in job.jitter_calls]
        for op in COLLECTIVE_OPS:
            for target in job.plan.sizes:
                samples.append(_time_collective(op, size, target, mine, job))
    measured = {"share_rates": share_rates, "stream_rates": stream_rates, "arrivals": arrivals, "samples": samples}
    gathered = [None] * world
    dist.all_gather_object(gathered, measured)
    if rank != 0:
        return None
    return {
        "world_size": world,
        "speed_probe": probe.to_dict(),
        "share_rates": [g["share_rates"] for g in gathered],
        "stream_rates": [g["stream_rates"] for g in gathered],
        "arrivals": [g["arrivals"] for g in gathered],
        "samples": [g["samples"] for g in gathered],
    }


def _arrivals(group, job: WorldJob, calls: int) -> list[float]:
    """When this rank reaches each of a run of small all-reduces, each after the same compute (as a
    model's layers alternate matmuls and TP all-reduces): ranks sharing cores arrive out of step.

    ``share_windows`` arrivals: one more meeting runs first and is left out, since the ranks reach it from the
    barrier, which they leave out of step by the barrier's own skew, not the compute's."""
    a, w = _share_operands(job.plan, job.device)
    small = torch.ones(1024, device=job.device)
    dist.barrier()
    times = []
    for _ in range(job.plan.share_windows + 1):
        for _ in range(calls):
            a @ w
        sync_device(job.device)
        times.append(time.perf_counter())  # perf_counter is CLOCK_MONOTONIC: one clock for every process of a machine
        dist.all_reduce(small, group=group)
    return times[1:]


def arrival_jitter(arrivals_by_rank: list[dict[int, list[list[float]]]]) -> dict[int, list[float]]:
    """Per group size and compute length: the mean time a rank waits for the last of its group to arrive (seconds)."""
    out = {}
    for size, lengths in arrivals_by_rank[0].items():
        out[size] = []
        for k in range(len(lengths)):
            waits = []
            for start in range(0, len(arrivals_by_rank), size):
                group = [arrivals_by_rank[r][size][k] for r in range(start, start + size)]
                for times in zip(*group):
                    waits += [max(times) - t for t in times]
            out[size].append(statistics.fmean(waits))
    return out


def _time_collective(op: str, group_size: int, target_bytes: int, group, job: WorldJob) -> dict:
    """One (op, size) on this rank's group: per repetition, the seconds from a world barrier's exit to the call's return."""
    hops = 2 * (group_size - 1) if op == "all_reduce" else group_size - 1
    chunk = max(1, target_bytes // (hops * 4))
    full = torch.ones(group_size * chunk, device=job.device)
    shard = torch.ones(chunk, device=job.device)
    # Each call allocates what it writes, as the model's and the optimizer's calls do (the TP
    # all-reduce reduces a clone of its input): fresh pages cost what reused buffers hide.
    call = {
        "all_gather": lambda: _all_gather_single(torch.empty_like(full), shard, group=group),
        "reduce_scatter": lambda: _reduce_scatter_single(torch.empty_like(shard), full, group=group),
        "all_reduce": lambda: dist.all_reduce(full.clone(), group=group),
    }[op]
    times = []
    for rep in range(job.plan.collective_reps + 1):  # the first is a warm-up
        dist.barrier()
        sync_device(job.device)
        t0 = time.perf_counter()
        call()
        sync_device(job.device)
        if rep:
            times.append(time.perf_counter() - t0)
    return {
        "op": op,
        "group_size": group_size,
        "bytes": ring_bytes(op, group_size * chunk, 4, group_size),
        "times": times,
    }
