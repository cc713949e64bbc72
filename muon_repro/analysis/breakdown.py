"""Per rank and per step: where the time went.

Definitions (the same for every trace, documented once here and in the ``steps`` schema):

* **Steps** are the CPU ``ProfilerStep#N`` annotations; a trace without them is one window
  from its first to its last event, numbered ``-1``. Every time below is measured inside
  the step's window ``[start, start + step_ms)``: GPU work that runs past the end of a step
  is counted in the step during which it actually ran, so the parts always add up
  (``busy + idle = step``) and fractions stay within [0, 1].
* **Device**: ``cuda`` when the trace has GPU kernels / copies, else ``cpu``.
* **Communication**: union of the collectives' transfer intervals
  (:mod:`muon_repro.analysis.collectives`), overall and per kind.
* **Computation**: on GPU, the union of non-NCCL kernels, memcpys and memsets; on CPU, the
  union of ``cpu_op`` events on threads other than the gloo workers, except the collective
  calls and the ops that enclose one (an autograd Function around a collective spans the
  time its thread sits blocked in it).
* **Overlap** = |comm ∩ compute|; **exposed communication** = comm - overlap;
  **idle** = step - |comm ∪ compute|.
* **forward / backward / optimizer**: union of the phase annotations (ours, ``## forward ##``
  style, ``Optimizer.step#...``) on CPU threads. Without any backward annotation, the
  autograd engine's ``evaluate_function`` ops stand for it.
* **Collective calls and bytes** belong to the step in which the rank *issued* them.
* **Peak memory**: the highest ``Total Allocated`` among ``[memory]`` events in the step
  (CUDA allocator on GPU traces, CPU allocator otherwise); null without memory events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import COMM_KINDS, coarse_phase, step_number
from muon_repro.analysis.instances import collective_instances
from muon_repro.analysis.intervals import Segments
from muon_repro.analysis.reader import TraceEvents, TraceMeta, read_trace

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
            "comm_bytes": int(s["comm_bytes"].median()) if len(s) else 0,
            "comm_calls": int(s["comm_calls"].median()) if len(s) else 0,
            "overlap_ms": med("overlap_ms"),
            "exposed_comm_ms": med("exposed_comm_ms"),
            "idle_ms": med("idle_ms"),
            "peak_mem_bytes": int(peak.max()) if len(peak) else None,
            "notes": dict(self.notes),
        }


def _round(x: float, digits: int = 6) -> float:
    return float(round(x, digits)) if math.isfinite(x) else 0.0


def analyze_file(
    path: str, *, rank: int | None = None, workers: int = 1, group_sizes: dict[str, int] | None = None
) -> TraceBreakdown:
    """Read and analyze one trace file."""
    return analyze_trace(read_trace(path, rank=rank, workers=workers), group_sizes=group_sizes)


def analyze_trace(trace: TraceEvents, group_sizes: dict[str, int] | None = None) -> TraceBreakdown:
    """Break one trace down per step; see the module docstring for the definitions."""
    ev = trace.events
    ts = ev["ts"].to_numpy()
    end = ev["end"].to_numpy()
    thread = ev["thread"].to_numpy()
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

    windows = _step_windows(trace, names, name_codes, cat_codes, cats, cpu_side)
    starts = windows["start"].to_numpy()
    stops = starts + windows["dur"].to_numpy()

    inst = collective_instances(trace, group_sizes)
    inst["step"] = _assign_steps(inst["issue_ts"].to_numpy(), windows)

    # communication and computation as unions of intervals
    comm = Segments.union(inst["start"].to_numpy(), inst["end"].to_numpy())
    comm_by_kind = {k: Segments.union(g["start"].to_numpy(), g["end"].to_numpy()) for k, g in inst.groupby("kind")}
    nccl = by_name(lambda n: n.startswith(("ncclKernel", "ncclDevKernel")))
    if device == "cuda":
        work = gpu_work & ~nccl
        compute = Segments.union(ts[work], end[work])
    else:
        worker_threads = _worker_threads(trace, by_name(lambda n: n.startswith("gloo:")), thread)
        on_workers = np.isin(thread, worker_threads)
        comm_call = by_name(lambda n: n.startswith(("c10d::", "gloo:", "nccl:")) or n == "record_param_comms")
        ops = np.flatnonzero(by_cat(lambda c: c == "cpu_op") & cpu_side & ~on_workers)
        work = ops[~comm_call[ops]]
        work = work[~_contains_any(thread[work], ts[work], end[work], thread[ops[comm_call[ops]]], ts[ops[comm_call[ops]]])]
        compute = Segments.union(ts[work], end[work])
    overlap = comm.intersect(compute)

    def ms(segments: Segments) -> np.ndarray:
        return segments.covered(starts, stops) / US_PER_MS

    step_ms = (stops - starts) / US_PER_MS
    comm_ms = ms(comm)
    compute_ms = ms(compute)
    overlap_ms = np.minimum(ms(overlap), np.minimum(comm_ms, compute_ms))
    busy_ms = comm_ms + compute_ms - overlap_ms
    out: dict[str, Any] = {
        "step": windows["step"].to_numpy(np.int64),
        "start_us": starts,
        "step_ms": step_ms,
    }
    for phase in ("forward", "backward", "optimizer"):
        out[f"{phase}_ms"] = ms(_phase_segments(phase, names, name_codes, ts, end, cpu_side))
    out["compute_ms"] = compute_ms
    out["comm_ms"] = comm_ms
    for k in COMM_KINDS:
        out[f"comm_{k}_ms"] = ms(comm_by_kind[k]) if k in comm_by_kind else np.zeros(len(starts))
    out["overlap_ms"] = overlap_ms
    out["exposed_comm_ms"] = np.maximum(comm_ms - overlap_ms, 0.0)
    out["idle_ms"] = np.maximum(step_ms - busy_ms, 0.0)
    safe = np.where(step_ms > 0, step_ms, 1.0)
    for col, num in (
        ("compute_frac", compute_ms),
        ("comm_frac", comm_ms),
        ("exposed_comm_frac", out["exposed_comm_ms"]),
        ("idle_frac", out["idle_ms"]),
        ("optimizer_share", out["optimizer_ms"]),
    ):
        out[col] = np.clip(np.where(step_ms > 0, num / safe, 0.0), 0.0, 1.0)
    counted = inst[inst["step"] != _NO_STEP]
    calls = counted.groupby("step").size()
    sent = counted[counted["bytes"] >= 0].groupby("step")["bytes"].sum()
    out["comm_calls"] = calls.reindex(out["step"], fill_value=0).to_numpy(np.int64)
    out["comm_bytes"] = sent.reindex(out["step"], fill_value=0).to_numpy(np.int64)
    out["peak_mem_bytes"] = _peak_memory(trace, starts, stops, device)
    steps = pd.DataFrame(out, columns=list(STEP_COLUMNS))
    inst = inst[inst["step"] != _NO_STEP].reset_index(drop=True)
    return TraceBreakdown(meta=trace.meta, device=device, steps=steps, collectives=inst, notes=dict(trace.notes))


_NO_STEP = -(2**31)


def _step_windows(trace: TraceEvents, names, name_codes, cat_codes, cats, cpu_side) -> pd.DataFrame:
    """``step``, ``start``, ``dur`` per step, sorted; one window ``-1`` if there are no steps."""
    ev = trace.events
    numbers = np.array([step_number(str(n)) if str(n).startswith("ProfilerStep") else None for n in names], dtype=object)
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
        df = df.groupby("step", as_index=False).agg(start=("start", "min"), stop=("stop", "max"))
        df["dur"] = df["stop"] - df["start"]
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
