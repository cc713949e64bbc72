"""Per rank and per step: where the time went.

Definitions (the same for every trace, documented once here and in the ``steps`` schema):

* **Steps** are the CPU ``ProfilerStep#N`` annotations; a trace without them is one window
  from its first to its last event, numbered ``-1``, to which everything belongs. Annotations
  of one ``N`` that overlap in time are one step (seen on several threads: its widest extent);
  one ``N`` at two separate times (two profiling sessions in one file) cannot be told apart
  and is refused with a :class:`~muon_repro.analysis.errors.TraceError`. A step of no length
  (its ``dur`` was 0, or unusable and set to 0 by the reader) is left out with a
  :class:`~muon_repro.analysis.errors.TraceWarning`; what was launched in it counts in no step.
* **Launch step** (HolisticTraceAnalysis's convention, the one users cross-check against):
  GPU work belongs to the step whose window contains the start of the runtime call that
  launched it (``cudaLaunchKernel``, ``hipExtModuleLaunchKernel``, ``cudaMemcpyAsync``...,
  joined to the kernel by ``args.correlation``), *whole*, even when it runs after that
  step's window has ended. A collective kernel whose runtime call is missing falls back to
  its caller op (``record_param_comms`` with its ``External id``); GPU work launched outside
  every step window (or outside the trace) belongs to no step. On CPU (gloo) traces the
  launch of a collective is its caller's ``c10d::`` op (``issue_ts``,
  :mod:`muon_repro.analysis.instances`; an unmatched worker transfer is its own launch).
* **Launch-step columns** (what HTA reports per iteration): ``comm_<kind>_ms`` is the *sum* of
  the durations of that kind's collective transfer intervals (NCCL kernels, gloo worker
  annotations, else the calls) launched in the step, as HTA sums kernel durations;
  ``comm_ms`` is the length of the *union* of all collective intervals launched in the step
  (overlapping streams counted once), so ``comm_ms <= sum of comm_<kind>_ms``. On GPU,
  ``compute_ms`` is the union of the non-NCCL kernels, memcpys and memsets launched in the
  step. Collective calls and bytes (``comm_calls``, ``comm_bytes``) follow the same rule.
  Durations are the events' own (HTA 0.5 rounds each event's start and end to whole
  microseconds, so its sums run slightly lower: 0.05% on the A100 NCCL sample's collectives).
* **Window columns**: ``comm_window_ms`` and ``compute_window_ms`` are the same unions
  clipped to the step's window ``[start, start + step_ms)``, whatever step launched the work,
  so GPU work running past a step's end counts in the step during which it ran. Overlap,
  exposed communication, idle time and every ``*_frac`` are built from them, so the parts
  add up (``compute_window + comm_window - overlap + idle = step``) and fractions stay in
  [0, 1]. On CPU traces ``compute_ms`` equals ``compute_window_ms`` (CPU ops run where they
  are issued).
* **Device**: ``cuda`` when the trace has GPU kernels / copies, else ``cpu``.
* **Communication** intervals: the collectives' transfer intervals
  (:mod:`muon_repro.analysis.collectives`, :mod:`muon_repro.analysis.instances`); a kernel
  that names no op (``ncclDevKernel_Generic``, RCCL) gets the kind of the
  ``record_param_comms`` / ``nccl:<op>`` op that launched it.
* **Computation**: on GPU, non-NCCL kernels, memcpys and memsets; on CPU, the union of
  ``cpu_op`` events on threads other than the gloo workers, except the collective calls and
  the ops that enclose one (an autograd Function around a collective spans the time its
  thread sits blocked in it).
* **Overlap** = |comm ∩ compute| in the window; **exposed communication** =
  comm_window - overlap; **idle** = step - |comm ∪ compute| in the window.
* **Last step**: every ``ProfilerStep#N`` is kept, the last one included (HTA drops the last
  iteration as possibly unfinished; ours are complete, closed by the profiler's
  ``schedule=``). Work launched in the last step counts in it in full under the launch-step
  columns even if it ends after the step's window, or after the trace's last CPU event;
  its window columns count only the part inside the window.
* **forward / backward / optimizer**: union of the phase annotations (ours, ``## forward ##``
  style, ``Optimizer.step#...``) on CPU threads, inside the window. Without any backward
  annotation, the autograd engine's ``evaluate_function`` ops stand for it.
* **Peak memory**: the highest ``Total Allocated`` among ``[memory]`` events in the step
  (CUDA allocator on GPU traces, CPU allocator otherwise); null without memory events.

This module holds the definitions, the steps table's columns and :func:`analyze_trace`, which
puts a trace's steps table together; the step windows are found in
:mod:`muon_repro.analysis.step_windows` and the columns computed in
:mod:`muon_repro.analysis.step_columns`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import COMM_KINDS
from muon_repro.analysis.errors import TraceWarning
from muon_repro.analysis.instances import collective_instances
from muon_repro.analysis.limits import TraceLimits
from muon_repro.analysis.reader import read_trace
from muon_repro.analysis.step_columns import (
    US_PER_MS,
    computation_rows,
    fraction,
    launch_step_columns,
    peak_memory,
    phase_segments,
    union_ms_by_step,
    window_columns,
)
from muon_repro.analysis.step_windows import NO_STEP, assign_steps, step_windows
from muon_repro.analysis.timeline import phase_spans
from muon_repro.analysis.trace_events import TraceEvents, TraceMeta

STEP_COLUMNS = (
    "step",
    "start_us",
    "step_ms",
    "forward_ms",
    "backward_ms",
    "optimizer_ms",
    "compute_ms",
    "comm_ms",
    *(f"comm_{k}_ms" for k in COMM_KINDS),
    "compute_window_ms",
    "comm_window_ms",
    "overlap_ms",
    "exposed_comm_ms",
    "idle_ms",
    "compute_frac",
    "comm_frac",
    "exposed_comm_frac",
    "idle_frac",
    "optimizer_share",
    "comm_calls",
    "comm_bytes",
    "peak_mem_bytes",
)


@dataclass
class TraceBreakdown:
    """The analysis of one trace file: a row per step and a row per collective call."""

    meta: TraceMeta
    device: str
    steps: pd.DataFrame  # columns STEP_COLUMNS
    collectives: pd.DataFrame  # instances.INSTANCE_COLUMNS + "step"
    notes: dict[str, int] = field(default_factory=dict)
    spans: pd.DataFrame | None = None  # timeline.phase_spans: our phase scopes per step, on the trace's clock
    warnings: list[str] = field(default_factory=list)  # the reader's and this analysis's TraceWarning messages

    def summary(self) -> dict[str, Any]:
        """One JSON-ready object per trace (``muon-repro analyze --json``): medians over steps, the peak memory the
        highest of any step's."""
        s = self.steps

        def med(col: str) -> float:
            return _round(float(s[col].median())) if len(s) else 0.0

        comm = {"total": med("comm_ms")}
        comm.update({k: med(f"comm_{k}_ms") for k in COMM_KINDS})
        peak = s["peak_mem_bytes"].dropna()
        return {
            "file": self.meta.path,
            "rank": self.meta.rank,
            "rank_source": self.meta.rank_source,
            "world_size": self.meta.world_size,
            "backend": self.meta.backend,
            "device": self.device,
            "steps": len(s),
            "step_ms": med("step_ms"),
            "forward_ms": med("forward_ms"),
            "backward_ms": med("backward_ms"),
            "optimizer_ms": med("optimizer_ms"),
            "compute_ms": med("compute_ms"),
            "comm_ms": comm,
            "compute_window_ms": med("compute_window_ms"),
            "comm_window_ms": med("comm_window_ms"),
            "comm_bytes": int(s["comm_bytes"].median()) if len(s) else 0,
            "comm_calls": int(s["comm_calls"].median()) if len(s) else 0,
            "overlap_ms": med("overlap_ms"),
            "exposed_comm_ms": med("exposed_comm_ms"),
            "idle_ms": med("idle_ms"),
            "peak_mem_bytes": int(peak.max()) if len(peak) else None,
            "notes": dict(self.notes),
            "warnings": list(self.warnings),  # also when analyzed in another process, where warnings.warn went unseen
        }


def _round(x: float, digits: int = 6) -> float:
    return float(round(x, digits)) if math.isfinite(x) else 0.0


def analyze_file(
    path: str,
    *,
    rank: int | None = None,
    workers: int = 1,
    group_sizes: dict[str, int] | None = None,
    limits: TraceLimits | None = None,
) -> TraceBreakdown:
    """Read (within ``limits``: :class:`~muon_repro.analysis.limits.TraceLimits`) and analyze one trace file."""
    return analyze_trace(read_trace(path, rank=rank, workers=workers, limits=limits), group_sizes=group_sizes)


def analyze_trace(trace: TraceEvents, group_sizes: dict[str, int] | None = None) -> TraceBreakdown:
    """Break one trace down per step; see the module docstring for the definitions.

    Raises :class:`TraceError` for a step number used at two separate times; warns
    (:class:`TraceWarning`) about steps left out for having no length.
    """
    ev = trace.events
    ts = ev["ts"].to_numpy()
    end = ev["end"].to_numpy()
    names = np.asarray(ev["name"].cat.categories, dtype=object)
    name_codes = ev["name"].cat.codes.to_numpy()
    cats = np.asarray(ev["cat"].cat.categories, dtype=object)
    cat_codes = ev["cat"].cat.codes.to_numpy()

    def by_name(pred: Callable[[str], bool]) -> np.ndarray:
        return np.fromiter((bool(pred(str(n))) for n in names), bool, len(names))[name_codes]

    def by_cat(pred: Callable[[str], bool]) -> np.ndarray:
        return np.fromiter((bool(pred(str(c))) for c in cats), bool, len(cats))[cat_codes]

    gpu_work = by_cat(lambda c: c in ("kernel", "gpu_memcpy", "gpu_memset"))
    device = "cuda" if gpu_work.any() else "cpu"
    cpu_side = ~by_cat(lambda c: c.startswith(("kernel", "gpu_", "cuda_", "ac2g", "Trace")))

    messages: list[str] = []
    windows = step_windows(trace, names, name_codes, cat_codes, cats, cpu_side, messages)
    for message in messages:
        warnings.warn(message, TraceWarning, stacklevel=2)
    starts = windows["start"].to_numpy()
    stops = starts + windows["dur"].to_numpy()

    step_ids = windows["step"].to_numpy(np.int64)
    inst = collective_instances(trace, group_sizes)
    inst["step"] = assign_steps(inst["launch_ts"].to_numpy(dtype=float), windows)

    work = computation_rows(trace, device, gpu_work, cpu_side, by_name, by_cat)
    out: dict[str, Any] = {"step": step_ids, "start_us": starts, "step_ms": (stops - starts) / US_PER_MS}
    for phase in ("forward", "backward", "optimizer"):
        out[f"{phase}_ms"] = phase_segments(phase, names, name_codes, ts, end, cpu_side).covered(starts, stops) / US_PER_MS
    out.update(window_columns(inst, ts[work], end[work], starts, stops))
    out.update(launch_step_columns(inst, step_ids))
    if device == "cuda":
        launched = trace.launch_rows[work]
        launch_ts = np.where(launched >= 0, ts[np.maximum(launched, 0)], np.nan)
        out["compute_ms"] = union_ms_by_step(assign_steps(launch_ts, windows), ts[work], end[work], step_ids)
    else:  # CPU ops run where they are issued
        out["compute_ms"] = out["compute_window_ms"]
    out["optimizer_share"] = fraction(out["optimizer_ms"], out["step_ms"])
    out["peak_mem_bytes"] = peak_memory(trace, starts, stops, device)
    steps = pd.DataFrame(out, columns=list(STEP_COLUMNS))
    inst = inst[inst["step"] != NO_STEP].reset_index(drop=True)
    spans = phase_spans(trace.events, steps, trace.launch_rows if device == "cuda" else None)
    return TraceBreakdown(
        meta=trace.meta,
        device=device,
        steps=steps,
        collectives=inst,
        notes=dict(trace.notes),
        spans=spans,
        warnings=[*trace.warnings, *messages],
    )
