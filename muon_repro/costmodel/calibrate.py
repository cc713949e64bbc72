"""``muon-repro calibrate``: microbenchmarks of this machine, into a :class:`MachineProfile`.

What it measures (each a kernel at the shapes the model presets use, not a run):

* matmul rate per dtype: a training step's matmuls at the presets' layer shapes (activations
  ``[tokens, in]`` x weights ``[in, out]`` forward, both products backward), every weight a tensor of its own;
* Newton-Schulz rate (``zeropower_via_newtonschulz5`` on the presets' matrices), and its time
  against the summed time of its own matmuls timed one by one (the implementation's overhead);
* attention (SDPA forward+backward), cross-entropy and GELU (forward+backward) at the model's shapes;
* element-wise bandwidth (``p.add_(u, alpha=a)`` on a few MB) and the host time per operator call,
  plain and under the bench's profiler;
* the share of a rank's compute rate left when W ranks compute at once (W workers of a world), and
  how far out of step ranks that share cores reach a collective after equal work (arrival jitter);
* the speed probe (:mod:`muon_repro.bench.speed_probe`) in each world, what every recording's own
  probe is compared with to price it as fast as the machine ran that day;
* an alpha-beta fit per collective and group size, ``t = alpha + bytes / beta`` (least squares on
  relative error over several sizes; ``bytes`` what one rank sends by the ring model, so beta is a
  bus bandwidth), in a world of W workers started with :func:`muon_repro.parallel.launch.launch`
  and the bench's threads per rank, every group of the size busy at once, as in a run.

Kernels run with the bench's threads per rank of the largest world (``cpu_count // W``, at least 1)
unless ``threads`` says otherwise. Statistics: a kernel's time is the low quartile of its
repetitions (another process's bursts only ever slow one down), a collective's the median (a step
sums dozens, so it sees their typical time, scheduling hiccups included). A busy machine still
shows in every figure, the compute share and the jitter most: the profile records the load
average around the measurement, and ``muon-repro calibrate`` warns when it is high.

This module runs one calibration and formats its summary; the measurements live beside it:
:mod:`~muon_repro.costmodel.measurement` (the plan, the timing statistics),
:mod:`~muon_repro.costmodel.compute_bench` (the one-process kernels),
:mod:`~muon_repro.costmodel.world_bench` (the multi-rank shares, jitter and collective timings) and
:mod:`~muon_repro.costmodel.collective_fit` (the alpha-beta fits).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

import torch

from muon_repro.bench.speed_probe import measure_speed
from muon_repro.costmodel.collective_fit import collective_fits, collective_rows
from muon_repro.costmodel.compute_bench import NS_TARGET_FRACTION, measure_kernels
from muon_repro.costmodel.machine_profile import MachineProfile
from muon_repro.costmodel.measurement import Plan
from muon_repro.costmodel.world_bench import (
    STREAM_ELEMENTS,
    WorldJob,
    arrival_jitter,
    compute_share,
    share_shape,
    standalone_matmul_rate,
    standalone_stream_rate,
    world_worker,
)
from muon_repro.values import is_count

# compute between two collectives of the jitter measurement, one rank alone (a layer's worth and more)
JITTER_COMPUTE_S = (0.004, 0.02, 0.08, 0.32, 0.64)  # up to a DP4 rank's forward+backward at 8k tokens
T = TypeVar("T")


# ---------------------------------------------------------------- the whole calibration


def calibrate(
    name: str,
    *,
    backend: str = "gloo",
    ranks: Sequence[int] = (2, 4),
    threads: int | None = None,
    quick: bool = False,
    log: Callable[[str], None] = print,
) -> tuple[MachineProfile, list[dict]]:
    """Measure this machine; return its profile and the ``calibration`` table's rows. ``ranks`` (1,): the device
    alone, its kernels and speed probe only (NCCL runs no two ranks on one GPU), a profile of single-rank runs."""
    ranks = _check_ranks(ranks)
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--backend nccl measures GPUs, and none is visible; use --backend gloo")
    plan = Plan.for_device(device, quick)
    kernel_threads = threads or max(1, (os.cpu_count() or 1) // max(ranks))
    load_before, started = _load_average(), time.perf_counter()
    figures, rows = _kernels(plan, device, kernel_threads, log)
    if ranks == SINGLE_DEVICE:
        _with_threads(kernel_threads, lambda: measure_speed(device))  # a warm-up: a process's first probe pays its start-up
        probes = {"1": _with_threads(kernel_threads, lambda: measure_speed(device)).to_dict()}
        world_fields: dict = {"collectives": (), "compute_share": {1: 1.0}}
        description = f"measured by muon-repro calibrate on one {_accelerator(device) or device}, alone (no collectives)"
    else:
        world_fields, world_rows, probes = _measure_worlds(plan, device, backend, ranks, threads, kernel_threads, log)
        rows += world_rows
        description = f"measured by muon-repro calibrate on {_cpu_model() or platform.machine()} ({os.cpu_count()} cores)"
    calibration = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host_cpu": _cpu_model(),
        "host_cpu_cores": os.cpu_count(),
        **({"accelerator": _accelerator(device)} if device == "cuda" else {}),
        "torch": torch.__version__,
        "threads": kernel_threads,
        "ranks": list(ranks),
        "quick": quick,
        "seconds": round(time.perf_counter() - started, 1),
        "load_average_before": load_before,
        "load_average_after": _load_average(),
        "ns_time_over_its_matmuls": figures.pop("ns_ratio"),
        "ns_against_matmul": figures.pop("ns_target"),
        "speed_probe": probes,  # by world size: what each recording's own probe is compared with
    }
    profile = MachineProfile(
        name=name,
        device=device,
        backend=backend,
        description=description,
        calibration=calibration,
        **world_fields,
        **figures,
    )
    for row in rows:
        row.update(machine=name, device=device, backend=backend)
        row.setdefault("threads", kernel_threads if row["kind"] == "kernel" else None)
    return profile, rows


def _measure_worlds(
    plan: Plan,
    device: str,
    backend: str,
    ranks: tuple[int, ...],
    threads: int | None,
    kernel_threads: int,
    log: Callable[[str], None],
) -> tuple[dict, list[dict], dict]:
    """Worlds of each size in ``ranks``: the profile's shares, jitter and collective fits (MachineProfile fields), the
    rows they come from, and each world's speed probe by world size."""
    from muon_repro.parallel.launch import launch

    reference = _with_threads(kernel_threads, lambda: standalone_matmul_rate(plan, device))
    stream_reference = _with_threads(kernel_threads, lambda: standalone_stream_rate(plan, device))
    tokens, fan_in, fan_out = share_shape(plan)
    jitter_calls = tuple(max(1, round(c * reference / (2.0 * tokens * fan_in * fan_out))) for c in JITTER_COMPUTE_S)
    # what was run, after rounding
    jitter_compute_us = [round(calls * 2.0 * tokens * fan_in * fan_out / reference * 1e6) for calls in jitter_calls]
    shares, bandwidth, jitter, jitter_curve, samples, probes, rows = {}, {}, {}, {}, [], {}, []
    for world in ranks:
        log(f"  world of {world} ranks ({backend}): compute share, arrival jitter and collectives ...")
        world_threads = threads or max(1, (os.cpu_count() or 1) // world)
        job = WorldJob(plan, device, jitter_calls)
        result = launch(world_worker, world, job, backend=backend, threads=world_threads if device == "cpu" else None)[0]
        probes[str(world)] = result["speed_probe"]
        shares[world] = compute_share(result["share_rates"], reference)
        bandwidth[world] = compute_share(result["stream_rates"], stream_reference)
        by_length = arrival_jitter(result["arrivals"])  # the largest world's, below
        jitter = {size: waits[0] * 1e6 for size, waits in by_length.items()}
        jitter_curve = {size: {c: w * 1e6 for c, w in zip(jitter_compute_us, waits)} for size, waits in by_length.items()}
        rows += _world_rows(plan, world, world_threads, shares[world], bandwidth[world], jitter_curve)
        samples += collective_rows(result)
    fits, fit_rows = collective_fits(samples)
    fields = {
        "collectives": tuple(fits),
        "compute_share": {1: 1.0, **shares},
        "bandwidth_share": {1: 1.0, **bandwidth},
        "arrival_jitter_us": jitter,
        "arrival_jitter_curve_us": jitter_curve,
    }
    return fields, rows + samples + fit_rows, probes


def _accelerator(device: str) -> str | None:
    return torch.cuda.get_device_name() if device == "cuda" else None


def _world_rows(
    plan: Plan, world: int, threads: int, share: float, bandwidth: float, jitter_curve: dict[int, dict[int, float]]
) -> list[dict]:
    """One world's ``share`` rows (compute, then bandwidth) and ``jitter`` rows."""
    measured = (
        ("compute_share", _shape_label(share_shape(plan)), share),
        ("bandwidth_share", f"[{STREAM_ELEMENTS}] x 3", bandwidth),
    )
    rows = [
        {
            "kind": "share",
            "kernel": kernel,
            "dtype": "fp32",
            "shape": shape,
            "world_size": world,
            "threads": threads,
            "ratio": ratio,
        }
        for kernel, shape, ratio in measured
    ]
    rows += [
        {
            "kind": "jitter",
            "kernel": "arrival_jitter",
            "shape": f"after {c} us of compute",
            "world_size": world,
            "group_size": size,
            "us": us,
        }
        for size, curve in jitter_curve.items()
        for c, us in curve.items()
    ]
    return rows


SINGLE_DEVICE = (1,)
"""``--ranks 1``: one device measured alone, kernels only (a machine with one GPU)."""


MAX_CALIBRATION_RANKS = 64  # processes of one world calibrate starts on this machine: 8 GPUs, or a large CPU node's cores
MAX_THREADS = 1024  # torch threads per rank (--threads): more than any machine's cores


def _check_ranks(ranks: Sequence[int]) -> tuple[int, ...]:
    out = tuple(sorted(set(ranks)))
    if out == SINGLE_DEVICE:
        return out
    if not out or any(not (is_count(w) and w >= 2) for w in out):
        raise ValueError(
            f"--ranks must list world sizes of at least 2 ranks (e.g. 2,4), or be 1 alone (one device, no collectives), "
            f"got {list(ranks)}"
        )
    if out[-1] > MAX_CALIBRATION_RANKS:
        raise ValueError(
            f"--ranks {out[-1]} is past the limit of {MAX_CALIBRATION_RANKS} (docs/limits.md): calibrate starts that many "
            "processes on this machine; measure a world that fits it"
        )
    return out


def _kernels(plan: Plan, device: str, threads: int, log: Callable[[str], None]) -> tuple[dict, list[dict]]:
    """Every kernel figure of the profile, and their rows."""
    return _with_threads(threads, lambda: measure_kernels(plan, device, log))


def _with_threads(threads: int, fn: Callable[[], T]) -> T:
    """``fn()`` with torch's intra-op threads set to ``threads``, restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def _shape_label(shape: tuple[int, int, int]) -> str:
    """``[tokens,in]x[in,out]``: a matmul's operands, as the ``calibration`` table labels them."""
    tokens, fan_in, fan_out = shape
    return f"[{tokens},{fan_in}]x[{fan_in},{fan_out}]"


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, where the system reports them."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``, else what :mod:`platform` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            lines = cpuinfo.read().splitlines()
    except OSError:
        return platform.processor() or None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)


# ---------------------------------------------------------------- summary


def format_summary(profile: MachineProfile) -> str:
    """What ``muon-repro calibrate`` prints: the figures, Newton-Schulz against its matmuls, the fits."""
    c = profile.calibration
    lines = [
        (
            f"machine {profile.name}: {profile.description}; {c.get('threads')} thread(s) per rank; {c.get('seconds')} s; "
            f"load average {c.get('load_average_before')} -> {c.get('load_average_after')}"
        ),
        "  matmul        " + ", ".join(f"{d} {v:.4g} TFLOP/s" for d, v in profile.matmul_tflops.items()),
        "  Newton-Schulz "
        + ", ".join(f"{d} {v:.4g} TFLOP/s" for d, v in profile.newton_schulz_tflops.items())
        + "; its time over its own matmuls' "
        + ", ".join(f"{d} {r:.3f}x" for d, r in c.get("ns_time_over_its_matmuls", {}).items())
        + " (target <= 1.15x)",
        *(
            f"  Newton-Schulz at the {model} model's shapes, bf16: {t['ns_tflops']:.4g} TFLOP/s, {t['fraction']:.0%} of its "
            f"matmuls' {t['matmul_tflops']:.4g} TFLOP/s (target >= {NS_TARGET_FRACTION:.0%})"
            for model, t in c.get("ns_against_matmul", {}).items()
        ),
        (
            "  attention " + ", ".join(f"{d} {v:.4g} TFLOP/s" for d, v in profile.attention_tflops.items()) + "; "
            f"cross-entropy {profile.cross_entropy_gbps:.4g} GB/s; "
            f"GELU {profile.gelu_gbps:.4g} GB/s; element-wise {profile.elementwise_gbps:.4g} GB/s"
        ),
        f"  operator call {profile.op_overhead_us:.3g} us ({profile.profiled_op_overhead_us:.3g} us under the profiler)",
        *(
            f"  in the model's step ({profile.size_curves_precision}), by operand elements: {kind} "
            + ", ".join(f"{t}: {r:.3g}" for t, r in sorted(curve.items()))
            + (" TFLOP/s" if kind in ("matmul", "attention") else " GB/s")
            for kind, curve in profile.size_curves.items()
        ),
        "  compute share "
        + ", ".join(f"{w} ranks: {s:.2f}" for w, s in sorted(profile.compute_share.items()))
        + "; bandwidth share "
        + ", ".join(f"{w} ranks: {s:.2f}" for w, s in sorted(profile.bandwidth_share.items()))
        + "; arrival jitter per collective "
        + "; ".join(
            f"groups of {g}: " + ", ".join(f"{w:.0f} us after {c / 1e3:.0f} ms" for c, w in sorted(curve.items()))
            for g, curve in sorted(profile.arrival_jitter_curve_us.items())
        ),
        "  collectives (t = alpha + ring bytes per rank / beta):",
        f"    {'op':<15} {'group':>5} {'world':>5} {'alpha us':>10} {'beta GB/s':>10}",
    ]
    lines += [
        f"    {f.op:<15} {f.group_size:>5} {f.world_size:>5} {f.alpha_us:>10.1f} {f.beta_gbps:>10.3f}"
        for f in profile.collectives
    ]
    return "\n".join(lines)
