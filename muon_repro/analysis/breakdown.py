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
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import COMM_KINDS, coarse_phase, step_number
from muon_repro.analysis.errors import TraceError, TraceWarning
from muon_repro.analysis.instances import collective_instances
from muon_repro.analysis.intervals import Segments
from muon_repro.analysis.reader import TraceEvents, TraceMeta, read_trace
from muon_repro.analysis.timeline import phase_spans

US_PER_MS = 1000.0

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
        """One JSON-ready object per trace (``muon-repro analyze --json``): medians over steps."""
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
    path: str, *, rank: int | None = None, workers: int = 1, group_sizes: dict[str, int] | None = None
) -> TraceBreakdown:
    """Read and analyze one trace file."""
    return analyze_trace(read_trace(path, rank=rank, workers=workers), group_sizes=group_sizes)


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

    def by_name(pred) -> np.ndarray:
        return np.fromiter((bool(pred(str(n))) for n in names), bool, len(names))[name_codes]

    def by_cat(pred) -> np.ndarray:
        return np.fromiter((bool(pred(str(c))) for c in cats), bool, len(cats))[cat_codes]

    gpu_work = by_cat(lambda c: c in ("kernel", "gpu_memcpy", "gpu_memset"))
    device = "cuda" if gpu_work.any() else "cpu"
    cpu_side = ~by_cat(lambda c: c.startswith(("kernel", "gpu_", "cuda_", "ac2g", "Trace")))

    messages: list[str] = []
    windows = _step_windows(trace, names, name_codes, cat_codes, cats, cpu_side, messages)
    for message in messages:
        warnings.warn(message, TraceWarning, stacklevel=2)
    starts = windows["start"].to_numpy()
    stops = starts + windows["dur"].to_numpy()

    step_ids = windows["step"].to_numpy(np.int64)
    inst = collective_instances(trace, group_sizes)
    inst["step"] = _assign_steps(inst["launch_ts"].to_numpy(dtype=float), windows)

    work = _computation_rows(trace, device, gpu_work, cpu_side, by_name, by_cat)
    out: dict[str, Any] = {"step": step_ids, "start_us": starts, "step_ms": (stops - starts) / US_PER_MS}
    for phase in ("forward", "backward", "optimizer"):
        out[f"{phase}_ms"] = _phase_segments(phase, names, name_codes, ts, end, cpu_side).covered(starts, stops) / US_PER_MS
    out.update(_window_columns(inst, ts[work], end[work], starts, stops))
    out.update(_launch_step_columns(inst, step_ids))
    if device == "cuda":
        launched = trace.launch_rows[work]
        launch_ts = np.where(launched >= 0, ts[np.maximum(launched, 0)], np.nan)
        out["compute_ms"] = _union_ms_by_step(_assign_steps(launch_ts, windows), ts[work], end[work], step_ids)
    else:  # CPU ops run where they are issued
        out["compute_ms"] = out["compute_window_ms"]
    out["optimizer_share"] = _fraction(out["optimizer_ms"], out["step_ms"])
    out["peak_mem_bytes"] = _peak_memory(trace, starts, stops, device)
    steps = pd.DataFrame(out, columns=list(STEP_COLUMNS))
    inst = inst[inst["step"] != _NO_STEP].reset_index(drop=True)
    spans = phase_spans(trace.events, steps)
    return TraceBreakdown(
        meta=trace.meta,
        device=device,
        steps=steps,
        collectives=inst,
        notes=dict(trace.notes),
        spans=spans,
        warnings=[*trace.warnings, *messages],
    )


_NO_STEP = -(2**31)


def _step_windows(trace: TraceEvents, names, name_codes, cat_codes, cats, cpu_side, messages: list[str]) -> pd.DataFrame:
    """``step``, ``start``, ``dur`` per step, sorted; one window ``-1`` if there are no steps.

    Steps left out for having no length are reported in ``messages``."""
    ev = trace.events
    numbers = np.array([_step_number(trace.path, str(n), messages) for n in names], dtype=object)
    is_step_name = np.array([x is not None for x in numbers], bool)
    rows = np.flatnonzero(is_step_name[name_codes] & cpu_side)
    if len(rows):
        df = pd.DataFrame(
            {
                "step": [numbers[c] for c in name_codes[rows]],
                "start": ev["ts"].to_numpy()[rows],
                "dur": ev["dur"].to_numpy()[rows],
            }
        )
        # the same step on several threads: keep its widest extent
        df["stop"] = df["start"] + df["dur"]
        _refuse_repeated_steps(trace.path, df)
        df = df.groupby("step", as_index=False).agg(start=("start", "min"), stop=("stop", "max"))
        df["dur"] = df["stop"] - df["start"]
        messages.extend(_no_length_messages(trace.path, df[~(df["dur"] > 0)]))
        df = df[df["dur"] > 0].sort_values("start", kind="stable").reset_index(drop=True)
        # overlapping windows (malformed traces): clip each to the next one's start
        nxt = df["start"].shift(-1).to_numpy()
        stop = np.where(np.isfinite(nxt), np.minimum(df["stop"].to_numpy(), nxt), df["stop"].to_numpy())
        df["dur"] = np.maximum(stop - df["start"].to_numpy(), 0.0)
        if len(df):
            return df[["step", "start", "dur"]]
    real = cpu_side | ~np.isin(cat_codes, [i for i, c in enumerate(cats) if str(c) == "Trace"])
    keys = trace.threads
    numeric_pid = np.array([isinstance(p, int) for p in keys["pid"]], bool)
    real &= numeric_pid[ev["thread"].to_numpy()] if len(keys) else real
    ts, end = ev["ts"].to_numpy()[real], ev["end"].to_numpy()[real]
    if not len(ts):
        ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    lo, hi = float(ts.min()), float(end.max())
    return pd.DataFrame({"step": [-1], "start": [lo], "dur": [max(hi - lo, 0.0)]})


def _step_number(path: str, name: str, messages: list[str]) -> int | None:
    """N of a ``ProfilerStep#N`` name; ``None`` for other names and (reported in ``messages``)
    for an N beyond int64, which no table can hold."""
    number = step_number(name) if name.startswith("ProfilerStep") else None
    if number is not None and number >= 2**63:
        messages.append(f"{path}: annotation {name[:40]!r}...: step number beyond int64: not taken as a step")
        return None
    return number


def _refuse_repeated_steps(path: str, occurrences: pd.DataFrame) -> None:
    """Raise if one step number occurs at two separate times (``step``, ``start``, ``stop`` per
    annotation): overlapping ones are one step on several threads, separate ones are two steps
    under one name, which merged would make one step as long as both and the gap between."""
    df = occurrences.sort_values(["step", "start"], kind="stable")
    by_step = df.groupby("step", sort=False)
    reach = by_step["stop"].cummax()  # the furthest end of the earlier occurrences, this one's included
    earlier_reach = reach.groupby(df["step"], sort=False).shift()
    earlier_start = by_step["start"].shift()
    apart = (df["start"] >= earlier_reach) & (df["start"] > earlier_start)
    if not apart.any():
        return
    step, again = int(df.loc[apart, "step"].iloc[0]), float(df.loc[apart, "start"].iloc[0])
    first = float(df.loc[df["step"] == step, "start"].min())
    raise TraceError(
        path,
        f"ProfilerStep#{step} occurs at separate times (ts={first!r} and ts={again!r}): "
        "two profiling sessions in one file? Split the trace per session, or number its steps apart",
    )


def _no_length_messages(path: str, steps: pd.DataFrame) -> list[str]:
    return [
        f"{path}: step ProfilerStep#{step} at ts={float(start)!r} has no length: left out; "
        "what was launched in it counts in no step"
        for step, start in zip(steps["step"], steps["start"])
    ]


def _computation_rows(trace: TraceEvents, device: str, gpu_work: np.ndarray, cpu_side: np.ndarray, by_name, by_cat) -> np.ndarray:
    """Rows of the computation events: non-NCCL GPU work on GPU; on CPU, the ``cpu_op`` events
    off the gloo workers, except collective calls and the ops enclosing one."""
    if device == "cuda":
        return np.flatnonzero(gpu_work & ~by_name(lambda n: n.startswith(("ncclKernel", "ncclDevKernel"))))
    ev = trace.events
    thread, ts, end = ev["thread"].to_numpy(), ev["ts"].to_numpy(), ev["end"].to_numpy()
    on_workers = np.isin(thread, _worker_threads(trace, by_name(lambda n: n.startswith("gloo:")), thread))
    comm_call = by_name(lambda n: n.startswith(("c10d::", "gloo:", "nccl:")) or n == "record_param_comms")
    ops = np.flatnonzero(by_cat(lambda c: c == "cpu_op") & cpu_side & ~on_workers)
    calls = ops[comm_call[ops]]
    work = ops[~comm_call[ops]]
    return work[~_contains_any(thread[work], ts[work], end[work], thread[calls], ts[calls])]


def _window_columns(
    inst: pd.DataFrame, work_ts: np.ndarray, work_end: np.ndarray, starts: np.ndarray, stops: np.ndarray
) -> dict[str, np.ndarray]:
    """The window-clipped columns: what ran inside each step's window, whatever launched it,
    so that ``compute_window + comm_window - overlap + idle = step``."""

    def ms(segments: Segments) -> np.ndarray:
        return segments.covered(starts, stops) / US_PER_MS

    comm = Segments.union(inst["start"].to_numpy(), inst["end"].to_numpy())
    compute = Segments.union(work_ts, work_end)
    step_ms = (stops - starts) / US_PER_MS
    comm_ms, compute_ms = ms(comm), ms(compute)
    overlap_ms = np.minimum(ms(comm.intersect(compute)), np.minimum(comm_ms, compute_ms))
    exposed_ms = np.maximum(comm_ms - overlap_ms, 0.0)
    idle_ms = np.maximum(step_ms - (comm_ms + compute_ms - overlap_ms), 0.0)
    return {
        "compute_window_ms": compute_ms,
        "comm_window_ms": comm_ms,
        "overlap_ms": overlap_ms,
        "exposed_comm_ms": exposed_ms,
        "idle_ms": idle_ms,
        "compute_frac": _fraction(compute_ms, step_ms),
        "comm_frac": _fraction(comm_ms, step_ms),
        "exposed_comm_frac": _fraction(exposed_ms, step_ms),
        "idle_frac": _fraction(idle_ms, step_ms),
    }


def _fraction(part_ms: np.ndarray, step_ms: np.ndarray) -> np.ndarray:
    safe = np.where(step_ms > 0, step_ms, 1.0)
    return np.clip(np.where(step_ms > 0, part_ms / safe, 0.0), 0.0, 1.0)


def _launch_step_columns(inst: pd.DataFrame, step_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The collective columns by launch step (``inst["step"]``): union, per-kind sums, calls, bytes."""
    counted = inst[inst["step"] != _NO_STEP]
    out = {
        "comm_ms": _union_ms_by_step(
            counted["step"].to_numpy(np.int64), counted["start"].to_numpy(), counted["end"].to_numpy(), step_ids
        )
    }
    durations = counted["dur"] / US_PER_MS  # the events' own durations, as HTA sums them
    by_kind = durations.groupby([counted["step"], counted["kind"]]).sum().unstack(fill_value=0.0)
    for k in COMM_KINDS:
        column = by_kind[k] if k in by_kind else pd.Series(dtype=float)
        out[f"comm_{k}_ms"] = column.reindex(step_ids, fill_value=0.0).to_numpy(dtype=float)
    calls = counted.groupby("step").size()
    sent = counted[counted["bytes"] >= 0].groupby("step")["bytes"].sum()
    out["comm_calls"] = calls.reindex(step_ids, fill_value=0).to_numpy(np.int64)
    out["comm_bytes"] = sent.reindex(step_ids, fill_value=0).to_numpy(np.int64)
    return out


def _union_ms_by_step(step: np.ndarray, lo: np.ndarray, hi: np.ndarray, step_ids: np.ndarray) -> np.ndarray:
    """Per step in ``step_ids``: length (ms) of the union of the intervals ``[lo, hi)`` whose
    ``step`` it is; intervals of different steps may overlap in time and are unioned apart."""
    keep = (step != _NO_STEP) & (hi > lo)
    if not keep.any():
        return np.zeros(len(step_ids))
    step, lo, hi = step[keep], lo[keep], hi[keep]
    order = np.lexsort((lo, step))
    step, lo, hi = step[order], lo[order], hi[order]
    run_end = pd.Series(hi).groupby(step).cummax().to_numpy()
    # a new segment begins at a new step, or where an interval starts after all before it ended
    new = np.ones(len(step), bool)
    new[1:] = (step[1:] != step[:-1]) | (lo[1:] > run_end[:-1])
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(step) - 1]
    per_step = pd.Series(run_end[last] - lo[first]).groupby(step[first]).sum()
    return per_step.reindex(step_ids, fill_value=0.0).to_numpy(dtype=float) / US_PER_MS


def _assign_steps(t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    starts = windows["start"].to_numpy()
    stops = starts + windows["dur"].to_numpy()
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < stops[np.maximum(i, 0)])
    if len(windows) == 1 and int(windows["step"].iat[0]) == -1:
        ok = np.ones(len(t), bool)  # no steps: everything belongs to the one window
    steps = windows["step"].to_numpy(np.int64)
    return np.where(ok, steps[np.maximum(i, 0)], _NO_STEP)


def _contains_any(
    thread: np.ndarray, ts: np.ndarray, end: np.ndarray, call_thread: np.ndarray, call_ts: np.ndarray
) -> np.ndarray:
    """Mask of the events that enclose the start of a collective call on their own thread.

    Such an event (an autograd Function around a collective, the backward node that issues
    it) spans the time its thread sits blocked in the collective, so it is not computation.
    """
    out = np.zeros(len(ts), bool)
    for t in np.unique(call_thread):
        calls = np.sort(call_ts[call_thread == t])
        mine = np.flatnonzero(thread == t)
        inside = np.searchsorted(calls, end[mine], side="left") - np.searchsorted(calls, ts[mine], side="left")
        out[mine] = inside > 0
    return out


def _worker_threads(trace: TraceEvents, gloo_events: np.ndarray, thread: np.ndarray) -> np.ndarray:
    named = [i for i, n in enumerate(trace.threads["thread_name"]) if "gloo" in str(n)]
    return np.union1d(np.unique(thread[gloo_events]), np.array(named, dtype=thread.dtype))


def _phase_segments(phase: str, names, name_codes, ts, end, cpu_side) -> Segments:
    flags = np.fromiter((coarse_phase(str(n)) == phase for n in names), bool, len(names))
    mask = flags[name_codes] & cpu_side
    if phase == "backward" and not mask.any():
        flags = np.fromiter((str(n).startswith("autograd::engine::evaluate_function") for n in names), bool, len(names))
        mask = flags[name_codes] & cpu_side
    return Segments.union(ts[mask], end[mask])


def _peak_memory(trace: TraceEvents, starts: np.ndarray, stops: np.ndarray, device: str) -> pd.array:
    mem = trace.memory
    out = pd.array([None] * len(starts), dtype="Int64")
    if mem.empty:
        return out
    want = 1 if device == "cuda" else 0  # Device Type: 0 CPU, 1 CUDA
    sel = mem[(mem["device_type"] == want) & np.isfinite(mem["total_allocated"])]
    if sel.empty:
        sel = mem[np.isfinite(mem["total_allocated"])]
    if sel.empty:
        return out
    t = sel["ts"].to_numpy()
    total = sel["total_allocated"].to_numpy()
    order = np.argsort(t, kind="stable")
    t, total = t[order], total[order]
    lo = np.searchsorted(t, starts, side="left")
    hi = np.searchsorted(t, stops, side="left")
    values = [int(total[a:b].max()) if b > a else None for a, b in zip(lo.tolist(), hi.tolist())]
    return pd.array(values, dtype="Int64")
