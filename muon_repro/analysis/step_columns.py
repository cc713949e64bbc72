"""The columns of one trace's steps table, computed per step window.

Window columns (what ran inside each step's window: compute, communication, overlap,
exposed, idle and their fractions), launch-step columns (collectives counted in the step that
launched them), the computation events they are built from, the phase annotations and the
peak memory. Definitions: :mod:`muon_repro.analysis.breakdown`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import COMM_KINDS, coarse_phase
from muon_repro.analysis.intervals import Segments
from muon_repro.analysis.step_windows import NO_STEP
from muon_repro.analysis.trace_events import TraceEvents

# A predicate on event names (or categories), applied to every event row of a trace: one flag per row.
RowMask = Callable[[Callable[[str], bool]], np.ndarray]

US_PER_MS = 1000.0


def computation_rows(
    trace: TraceEvents, device: str, gpu_work: np.ndarray, cpu_side: np.ndarray, by_name: RowMask, by_cat: RowMask
) -> np.ndarray:
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


def window_columns(
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
        "compute_frac": fraction(compute_ms, step_ms),
        "comm_frac": fraction(comm_ms, step_ms),
        "exposed_comm_frac": fraction(exposed_ms, step_ms),
        "idle_frac": fraction(idle_ms, step_ms),
    }


def fraction(part_ms: np.ndarray, step_ms: np.ndarray) -> np.ndarray:
    safe = np.where(step_ms > 0, step_ms, 1.0)
    return np.clip(np.where(step_ms > 0, part_ms / safe, 0.0), 0.0, 1.0)


def launch_step_columns(inst: pd.DataFrame, step_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The collective columns by launch step (``inst["step"]``): union, per-kind sums, calls, bytes."""
    counted = inst[inst["step"] != NO_STEP]
    out = {
        "comm_ms": union_ms_by_step(
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


def union_ms_by_step(step: np.ndarray, lo: np.ndarray, hi: np.ndarray, step_ids: np.ndarray) -> np.ndarray:
    """Per step in ``step_ids``: length (ms) of the union of the intervals ``[lo, hi)`` whose
    ``step`` it is; intervals of different steps may overlap in time and are unioned apart."""
    keep = (step != NO_STEP) & (hi > lo)
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


def phase_segments(
    phase: str, names: np.ndarray, name_codes: np.ndarray, ts: np.ndarray, end: np.ndarray, cpu_side: np.ndarray
) -> Segments:
    flags = np.fromiter((coarse_phase(str(n)) == phase for n in names), bool, len(names))
    mask = flags[name_codes] & cpu_side
    if phase == "backward" and not mask.any():
        flags = np.fromiter((str(n).startswith("autograd::engine::evaluate_function") for n in names), bool, len(names))
        mask = flags[name_codes] & cpu_side
    return Segments.union(ts[mask], end[mask])


def peak_memory(trace: TraceEvents, starts: np.ndarray, stops: np.ndarray, device: str) -> pd.array:
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
