"""One trace of the original study's protocol, per step and per scope.

The study marks no ``ProfilerStep``: it wraps its loop in one outer ``record_function`` scope
(``<Opt>_Battle`` for the optimizer-only runs, ``<Opt>_Full_Training_Step`` for the full steps) and each
phase of an iteration in an inner one (:data:`PHASE_SCOPES`). A step is one repeat of the inner scopes: its CPU
window starts where the iteration's first scope starts and ends where the next iteration's starts (the last: at
the outer scope's end); its time runs from the previous step's completion to its own (:class:`StudyTrace`).

Each scope is seen twice in a Kineto trace, as a CPU ``user_annotation`` and as a ``gpu_user_annotation``
spanning its kernels: one scope, two views. Here the CPU annotation defines the scope and its GPU time is
that of the kernels whose launching runtime call lies inside it (HolisticTraceAnalysis's convention), so the
two views are never added together.

Per step and scope (:class:`StudyTrace`): the CPU span; the GPU busy time (union) and the summed kernel time
of the work it launched; the time of the collectives it issued (union of their transfer intervals: NCCL kernels,
or on gloo the worker's spans); the time from the scope's start until its last GPU work ended (what the scope
costs a synchronised step); and every collective it issued, with bytes and group. The same path reads the study's
NCCL traces and the runs of its protocol recorded here on gloo (:mod:`muon_repro.bench.study_record`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import dtype_info, normalize_op
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.instances import collective_instances, launching_op
from muon_repro.analysis.intervals import Segments
from muon_repro.analysis.piece_columns import GPU_WORK_CATS
from muon_repro.analysis.reader import read_trace
from muon_repro.analysis.trace_events import TraceEvents
from muon_repro.formulas import ring_bytes

# The study's scopes inside one iteration (analysis_scripts/muon_vs_adam.py), in no particular order.
PHASE_SCOPES = (
    "FWD_BWD",
    "Attach_Grads",
    "Muon_Attach_Grads",
    "AdamW_Comm_AllReduce",
    "AdamW_AllReduce",
    "AdamW_Step",
    "Muon_Step",
)
OUTER_SUFFIXES = {"_Battle": "optimizer_only", "_Full_Training_Step": "full_step"}
# The scopes that make up the optimizer's part of a step: its gradient reduction and its update.
OPTIMIZER_SCOPES = ("AdamW_Comm_AllReduce", "AdamW_AllReduce", "AdamW_Step", "Muon_Step")
STEP = "step"  # the scope column's value for a whole step
NCCL_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
US_PER_MS = 1000.0


@dataclass
class StudyTrace:
    """One rank's trace of the study's protocol, per step.

    ``scopes``: one row per step and scope (``scope`` = :data:`STEP` for the whole step): ``step`` (from 0),
    ``scope``, ``start_ns`` (absolute, comparable across ranks), ``cpu_ms``, ``gpu_busy_ms``, ``gpu_kernel_ms``,
    ``busy_ms`` (the device's time: GPU busy on a GPU trace, the CPU span on a CPU trace), ``comm_ms`` (union of the
    transfer intervals of the collectives it issued), ``gpu_done_ms`` (scope start to the later of its return and
    the end of its last GPU work: what the scope costs a synchronised step; the CPU span when it launched none),
    ``kernels``, and for the whole step ``step_ms``: from the completion of the previous step (the first step: its
    start) to its own, completion being when its last scope returned and its last GPU work ended. The study
    synchronises only inside ``FWD_BWD`` (and not at all in its optimizer-only runs), so the CPU window of a step
    holds the previous step's GPU work; the completion-to-completion period counts each step's own work once, the
    last step's included.

    ``collectives``: one row per collective, in issue order (:data:`COLLECTIVE_COLUMNS` less the trace-clock ones):
    ``step``, ``scope``, ``op``, ``group_ranks``, ``group_size``, ``dtype``, ``elements`` (the full array),
    ``payload_bytes``, ``ring_bytes`` (sent by this rank, ring model), ``start_ns`` and ``end_ns`` (its transfer: the
    NCCL kernel, or gloo's worker span, on the shared clock).
    """

    path: str
    rank: int
    world_size: int | None
    variant: str  # optimizer_only or full_step
    outer_scope: str
    optimizer: str  # muon or adamw
    scopes: pd.DataFrame
    collectives: pd.DataFrame
    device_names: tuple[str, ...]


def read_study_trace(path: str | Path, grid: tuple[int, int] | None = None) -> StudyTrace:
    """Read one trace of the study's protocol (see the module docstring); ``TraceError`` naming the file when
    it has no outer scope of the study or not one step. ``grid``: (dp, tp) of a run recorded here, whose gloo
    collectives name their group by the label around them (:data:`GROUP_PREFIXES`) rather than in their events."""
    trace = read_trace(path)
    ev = trace.events
    cpu = ev[ev["cat"] == "user_annotation"]
    outer = cpu[cpu["name"].astype(str).str.endswith(tuple(OUTER_SUFFIXES))]
    if len(outer) != 1:
        raise TraceError(
            path,
            f"expected one outer scope of the study's protocol (*_Battle or *_Full_Training_Step), found {len(outer)}: "
            "is this a trace of its muon_vs_adam.py?",
        )
    outer_name = str(outer["name"].iloc[0])
    variant = next(v for suffix, v in OUTER_SUFFIXES.items() if outer_name.endswith(suffix))
    outer_lo, outer_hi = float(outer["ts"].iloc[0]), float(outer["end"].iloc[0])
    inner = cpu[cpu["name"].isin(PHASE_SCOPES) & (cpu["ts"] >= outer_lo) & (cpu["end"] <= outer_hi)].sort_values("ts")
    if inner.empty:
        raise TraceError(path, f"no scope of the study's loop ({', '.join(PHASE_SCOPES)}) inside {outer_name}")
    lead = str(inner["name"].iloc[0])
    starts = inner.loc[inner["name"] == lead, "ts"].to_numpy(np.float64)
    work = _gpu_work(trace)
    step_of_work = np.searchsorted(starts, work["launch_ts"].to_numpy(), side="right") - 1
    work = work.assign(step=step_of_work)
    work = work[(work["step"] >= 0) & (work["launch_ts"] <= outer_hi)]
    cpu_ends = np.r_[starts[1:], outer_hi]
    base_ns = trace.meta.base_time_ns or 0
    on_gpu = len(work) > 0
    colls = _collectives(trace, inner, starts, base_ns, grid, work)
    # per-step selections below run on arrays: a DataFrame filter per step and scope costs far more than its work
    gpu = _Spans.of(work, "launch_ts", "ts", "end", "dur")
    transfers = _Spans.of(colls, "launch_us", "start_us", "end_us")
    gpu_step, transfer_step = work["step"].to_numpy(), colls["step"].to_numpy()
    scope_ts, scope_end = inner["ts"].to_numpy(), inner["end"].to_numpy()
    scope_dur, scope_name = inner["dur"].to_numpy(), inner["name"].to_numpy()
    # ``inner`` is sorted by start, so a step's scopes (those starting in its CPU window) are one run of its rows
    first_scope = np.searchsorted(scope_ts, starts, side="left")
    past_scope = np.searchsorted(scope_ts, cpu_ends, side="left")
    rows = []
    done_before = starts[0]  # when the previous step's work was complete
    for step, (lo, hi) in enumerate(zip(starts, cpu_ends)):
        mine, comm = gpu[gpu_step == step], transfers[transfer_step == step]
        in_step = np.arange(first_scope[step], past_scope[step])
        # complete when its last scope has returned and the last GPU work it launched has ended
        scopes_done = float(scope_end[in_step].max()) if len(in_step) else np.nan
        done = max(scopes_done, float(mine.end.max()) if len(mine) else lo)
        row = _scope_row(step, STEP, lo, hi, hi - lo, mine, comm, base_ns, on_gpu)
        rows.append(row | {"step_ms": (done - done_before) / US_PER_MS})
        done_before = done
        names = scope_name[in_step]
        for name in dict.fromkeys(names):  # each scope once, in the order the step first entered it
            scopes = in_step[names == name]
            windows = scope_ts[scopes], scope_end[scopes]
            launched, issued = mine[_launched_in(mine.launch, *windows)], comm[_launched_in(comm.launch, *windows)]
            lo_s, hi_s, cpu_us = float(windows[0].min()), float(windows[1].max()), float(scope_dur[scopes].sum())
            rows.append(_scope_row(step, str(name), lo_s, hi_s, cpu_us, launched, issued, base_ns, on_gpu))
    collectives = colls.drop(columns=["start_us", "end_us", "launch_us"]) if len(colls) else colls
    optimizer = "muon" if outer_name.lower().startswith("muon") else "adamw"
    return StudyTrace(
        path=str(path),
        rank=trace.meta.rank,
        world_size=trace.meta.world_size,
        variant=variant,
        outer_scope=outer_name,
        optimizer=optimizer,
        scopes=pd.DataFrame(rows),
        collectives=collectives,
        device_names=tuple(trace.meta.device_names),
    )


def _gpu_work(trace: TraceEvents) -> pd.DataFrame:
    """GPU kernels, copies and memsets with the time of the runtime call that launched them (work launched
    outside the trace is left out)."""
    ev = trace.events
    rows = np.flatnonzero(ev["cat"].isin(GPU_WORK_CATS).to_numpy())
    launch = trace.launch_rows[rows]
    rows, launch = rows[launch >= 0], launch[launch >= 0]
    names = ev["name"].to_numpy()[rows].astype(str)
    return pd.DataFrame(
        {
            "row": rows,
            "ts": ev["ts"].to_numpy()[rows],
            "end": ev["end"].to_numpy()[rows],
            "dur": ev["dur"].to_numpy()[rows],
            "launch_ts": ev["ts"].to_numpy()[launch],
            "launch_row": launch,
            "nccl": np.char.startswith(names, NCCL_KERNEL_PREFIXES[0]) | np.char.startswith(names, NCCL_KERNEL_PREFIXES[1]),
        }
    )


def _launched_in(launch_ts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether each launch time lies inside one of the windows ``[lo, hi]`` (disjoint, sorted by ``lo``)."""
    order = np.argsort(lo)
    lo, hi = lo[order], hi[order]
    i = np.searchsorted(lo, launch_ts, side="right") - 1
    return (i >= 0) & (launch_ts <= hi[np.maximum(i, 0)])


@dataclass(frozen=True)
class _Spans:
    """Work on the device (GPU work, or collectives' transfers) as arrays, in the order read: when the CPU launched
    each, when it ran, and its own time (a kernel's ``dur``; for a transfer, its span)."""

    launch: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray

    @classmethod
    def of(cls, frame: pd.DataFrame, launch: str, start: str, end: str, dur: str | None = None) -> _Spans:
        """The spans of ``frame``'s rows, from the named columns (no ``dur``: end - start)."""
        starts, ends = frame[start].to_numpy(np.float64), frame[end].to_numpy(np.float64)
        durs = frame[dur].to_numpy(np.float64) if dur else ends - starts
        return cls(frame[launch].to_numpy(np.float64), starts, ends, durs)

    def __getitem__(self, rows: np.ndarray) -> _Spans:
        return _Spans(self.launch[rows], self.start[rows], self.end[rows], self.dur[rows])

    def __len__(self) -> int:
        return len(self.launch)


def _scope_row(
    step: int, scope: str, lo: float, hi: float, cpu_us: float, work: _Spans, comm: _Spans, base_ns: int, on_gpu: bool
) -> dict:
    busy = Segments.union(work.start, work.end).total
    done = max(hi, float(work.end.max())) if len(work) else hi
    comm_us = Segments.union(comm.start, comm.end).total if len(comm) else 0.0
    return {
        "step": step,
        "scope": scope,
        "start_ns": int(base_ns + round(lo * 1000)),
        "cpu_ms": cpu_us / US_PER_MS,
        "gpu_busy_ms": busy / US_PER_MS,
        "gpu_kernel_ms": float(work.dur.sum()) / US_PER_MS,
        # the device's time for the scope: its kernels' on a GPU trace, its own span where the CPU does the work
        "busy_ms": (busy if on_gpu else cpu_us) / US_PER_MS,
        "comm_ms": comm_us / US_PER_MS,
        "gpu_done_ms": (done - lo) / US_PER_MS,
        "kernels": len(work),
    }


def dp_group(rank: int, tp: int, world: int) -> range:
    """The ranks of ``rank``'s DP group on the study's grid, TP inner (``rank = dp_rank * tp + tp_rank``): those with
    its TP rank, strided by ``tp`` up to ``world``."""
    return range(rank % tp, world, tp)


def tp_group(rank: int, tp: int) -> range:
    """The ranks of ``rank``'s TP group on the study's grid: its ``tp`` adjacent ranks, those with its DP rank."""
    return range((rank // tp) * tp, (rank // tp + 1) * tp)


GROUP_PREFIXES = {"dp_": "dp", "tp_": "tp", "world_": "world"}
"""The labels our recordings put around each collective (muon_repro.bench.study_protocol): which group it ran on."""


def _collectives(
    trace: TraceEvents, inner: pd.DataFrame, starts: np.ndarray, base_ns: int, grid: tuple[int, int] | None, work: pd.DataFrame
) -> pd.DataFrame:
    """Every collective, in issue order, with its transfer interval: an NCCL kernel (its group from the
    ``record_param_comms`` call's process group) or, on gloo, the worker's transfer span (its group from the
    label around it and ``grid``)."""
    if work["nccl"].any():
        rows = _nccl_collectives(trace, work)
    else:
        rows = _gloo_collectives(trace, grid)
    if rows.empty:
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    rows["step"] = np.searchsorted(starts, rows["launch_us"].to_numpy(), side="right") - 1
    rows["scope"] = _innermost(inner, rows["launch_us"].to_numpy())
    rows["start_ns"] = (base_ns + (rows["start_us"] * 1000).round()).astype("int64")
    rows["end_ns"] = (base_ns + (rows["end_us"] * 1000).round()).astype("int64")
    rows = rows[(rows["step"] >= 0) & (rows["step"] < len(starts))]
    return rows[list(COLLECTIVE_COLUMNS)].reset_index(drop=True)


COLLECTIVE_COLUMNS = (
    "step",
    "scope",
    "op",
    "group_ranks",
    "group_size",
    "dtype",
    "elements",
    "payload_bytes",
    "ring_bytes",
    "start_ns",
    "end_ns",
    "start_us",
    "end_us",
    "launch_us",
)


def _innermost(inner: pd.DataFrame, times: np.ndarray) -> list[str]:
    """Per time, the name of the scope of ``inner`` (sorted by start) around it that started last, the innermost of
    those nested there ("" for none)."""
    starts, ends, names = inner["ts"].to_numpy(), inner["end"].to_numpy(), inner["name"].to_numpy()
    out = []
    for t in times:
        around = np.flatnonzero((starts <= t) & (ends >= t))
        out.append(str(names[around[-1]]) if len(around) else "")
    return out


def _nccl_collectives(trace: TraceEvents, work: pd.DataFrame) -> pd.DataFrame:
    """NCCL: each ``record_param_comms`` call with the kernel it launched (linked as the analysis links a kernel to
    its op: :func:`~muon_repro.analysis.instances.launching_op`, by ``External id``, else the innermost call around
    the launch), so that a call that launched no kernel takes none; the group's ranks from the trace's process
    groups."""
    ev, args = trace.events, trace.args
    if "collective" not in args.columns:
        return pd.DataFrame()
    pg_ranks = {str(pg.get("pg_name")): ",".join(str(int(r)) for r in pg.get("ranks") or ()) for pg in trace.meta.pg_config}
    calls = args.dropna(subset=["collective"])
    calls = calls[ev.loc[calls.index, "name"].astype(str) == "record_param_comms"]
    kernels = work[work["nccl"]].sort_values("launch_ts")
    by_call: dict[int, int] = {}  # a call's first kernel, by launch
    launched_by = launching_op(trace, kernels["row"].to_numpy(), kernels["launch_row"].to_numpy(), calls.index.to_numpy())
    for position, call in enumerate(launched_by.tolist()):
        if call >= 0:
            by_call.setdefault(call, position)
    rows = []
    for row, rec in calls.iterrows():
        if row not in by_call:
            continue  # a call whose kernel the trace does not hold, or that launched none
        kernel = kernels.iloc[by_call[row]]
        op = normalize_op(str(rec["collective"])) or "other"
        group_size = int(rec["group_size"]) if pd.notna(rec["group_size"]) else 1
        dtype, size = dtype_info(rec["dtype"]) or (str(rec["dtype"]), 0)
        elements = int(rec["out_nelems"] if op == "all_gather" else rec["in_nelems"])  # the full array
        rows.append(
            {
                "op": op,
                "group_ranks": pg_ranks.get(str(rec["pg_name"]), ""),
                "group_size": group_size,
                "dtype": dtype,
                "elements": elements,
                "payload_bytes": elements * size,
                "ring_bytes": ring_bytes(op, elements, size, group_size) or 0,
                "start_us": float(kernel["ts"]),
                "end_us": float(kernel["end"]),
                "launch_us": float(kernel["launch_ts"]),
            }
        )
    return pd.DataFrame(rows)


def _gloo_collectives(trace: TraceEvents, grid: tuple[int, int] | None) -> pd.DataFrame:
    """gloo: the analysis's collective instances (caller ``c10d::`` op matched to the worker's transfer); the group
    from the label around the call: DP ranks strided, TP ranks adjacent, as the study's grid."""
    inst = collective_instances(trace)
    inst = inst[inst["source"] == "gloo"]
    if inst.empty:
        return pd.DataFrame()
    world = trace.meta.world_size or 1
    rank = trace.meta.rank
    dp, tp = grid or (world, 1)

    def members(phase: str) -> range:
        kind = next((g for prefix, g in GROUP_PREFIXES.items() if str(phase).startswith(prefix)), "world")
        return {
            "dp": dp_group(rank, tp, world),
            "tp": tp_group(rank, tp),
            "world": range(world),
        }[kind]

    groups = [members(p) for p in inst["phase"]]
    sizes = np.array([len(g) for g in groups])  # gloo's events do not say their group: the label does
    elements = inst["elements"].to_numpy()
    element_size = np.where(elements > 0, inst["size_bytes"].to_numpy() // np.maximum(elements, 1), 0)
    return pd.DataFrame(
        {
            "op": inst["op"].to_numpy(),
            "group_ranks": [",".join(map(str, g)) for g in groups],
            "group_size": sizes,
            "dtype": inst["dtype"].to_numpy(),
            "elements": elements,
            "payload_bytes": inst["size_bytes"].to_numpy(),
            "ring_bytes": [
                ring_bytes(op, int(e), int(b), int(n)) or 0 for op, e, b, n in zip(inst["op"], elements, element_size, sizes)
            ],
            "start_us": inst["start"].to_numpy(),
            "end_us": inst["end"].to_numpy(),
            "launch_us": inst["issue_ts"].to_numpy(),
        }
    )
