"""Phase intervals of every profiled step of one trace, and of a run's ranks on one clock.

:func:`phase_spans` runs where the trace is read (a worker process, once per file); it keeps
the scopes named after our phases (:mod:`muon_repro.phases`) that lie inside a ``ProfilerStep``
window, the collective transfers themselves (``gloo:*`` on gloo's worker threads, NCCL
kernels on GPU), and each step's window (lane ``step``), when the trace has our phases.
:func:`align_ranks` puts a run's ranks on one clock per step with each trace's
``baseTimeNanoseconds`` (absolute time = base + ts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from muon_repro.phases import COARSE_PHASES, MODEL_COMM_PHASES, OPTIMIZER_PHASES, PIPELINE_PHASES

SPAN_COLUMNS = ("step", "lane", "phase", "start_us", "end_us")
_FINE_PHASES = OPTIMIZER_PHASES + MODEL_COMM_PHASES + PIPELINE_PHASES


def empty_spans() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series([], dtype="int64" if c == "step" else ("float64" if c.endswith("_us") else object)) for c in SPAN_COLUMNS}
    )


def phase_spans(events: pd.DataFrame, steps: pd.DataFrame, launch_rows: np.ndarray | None = None) -> pd.DataFrame:
    """``step, lane, phase, start_us, end_us`` (trace clock) for each step of ``steps``
    (columns ``step``, ``start_us``, ``step_ms``); empty for a trace without our phase scopes, and for one
    with only the coarse ones (forward, backward, optimizer: names other code's traces may use too), without any of
    our finer phases that mark a trace as ours.

    A phase is its CPU annotation: Kineto's ``gpu_user_annotation`` copy of the same scope is the same phase seen
    from the GPU, never a second span of it. On GPU traces (``launch_rows``: each event's launching runtime call,
    :attr:`TraceEvents.launch_rows`), lane ``gpu`` holds the GPU work each phase launched, under the innermost
    phase whose CPU span holds the launch, in the step whose window holds it (HolisticTraceAnalysis's convention)."""
    if steps.empty or events.empty or (steps["step"] < 0).all():
        return empty_spans()
    # Decide per distinct name, not per event: a 1 GB trace has millions of events but few names.
    names = events["name"].astype("category")
    labels = np.asarray(names.cat.categories, dtype=object).astype(str)
    codes = names.cat.codes.to_numpy()
    fine_names = np.isin(labels, _FINE_PHASES)
    if not fine_names[codes[codes >= 0]].any():
        return empty_spans()
    cats = events["cat"].astype("category")
    cat_labels = np.asarray(cats.cat.categories, dtype=object).astype(str)
    cpu_side = ~np.isin(cat_labels, GPU_SIDE_CATS)[cats.cat.codes.to_numpy()]  # one view of each scope: the CPU's
    coarse = np.isin(labels, COARSE_PHASES)[codes] & cpu_side
    fine = fine_names[codes] & cpu_side
    is_kernel = (np.asarray(cats.cat.categories, dtype=object).astype(str) == "kernel")[cats.cat.codes.to_numpy()]
    transfer = np.char.startswith(labels, "gloo:")[codes] | (is_kernel & np.char.startswith(np.char.lower(labels), "nccl")[codes])
    lane = np.select([coarse, fine, transfer], ["coarse", "fine", "transfer"], default="")
    keep = (lane != "") & (codes >= 0)
    ts, end = events["ts"].to_numpy()[keep], events["end"].to_numpy()[keep]
    lane, phase = lane[keep], np.where(lane[keep] == "transfer", "transfer", labels[codes[keep]])

    starts = steps["start_us"].to_numpy(float)
    stops = starts + steps["step_ms"].to_numpy(float) * 1000.0
    order = np.argsort(starts, kind="stable")
    starts, stops, numbers = starts[order], stops[order], steps["step"].to_numpy()[order]
    i = np.searchsorted(starts, ts, side="right") - 1
    inside = (i >= 0) & (end <= stops[np.maximum(i, 0)] + 1e-3)
    windows = pd.DataFrame({"step": numbers, "lane": "step", "phase": "step", "start_us": starts, "end_us": stops})
    spans = pd.DataFrame(
        {
            "step": numbers[np.maximum(i, 0)][inside],
            "lane": lane[inside],
            "phase": phase[inside],
            "start_us": ts[inside],
            "end_us": end[inside],
        }
    )
    frames = [windows, spans]
    if launch_rows is not None:
        frames.append(_gpu_spans(events, cat_labels, cats.cat.codes.to_numpy(), launch_rows, spans, starts, stops, numbers))
    out = pd.concat(frames, ignore_index=True).astype({"step": "int64"})
    return out.sort_values(["step", "start_us"], kind="stable", ignore_index=True)


GPU_SIDE_CATS = ("gpu_user_annotation",)
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _gpu_spans(
    events: pd.DataFrame,
    cat_labels: np.ndarray,
    cat_codes: np.ndarray,
    launch_rows: np.ndarray,
    spans: pd.DataFrame,
    starts: np.ndarray,
    stops: np.ndarray,
    numbers: np.ndarray,
) -> pd.DataFrame:
    """Lane ``gpu``: each GPU work item once under the coarse phase and once under the fine phase whose CPU span holds
    its launch (phase names of the two lanes are distinct, so each phase's union counts it once)."""
    work = np.flatnonzero(np.isin(cat_labels, GPU_WORK)[cat_codes] & (launch_rows >= 0))
    if not len(work) or spans.empty:
        return empty_spans()
    launch_ts = events["ts"].to_numpy()[launch_rows[work]]
    step_i = np.searchsorted(starts, launch_ts, side="right") - 1
    in_step = (step_i >= 0) & (launch_ts < stops[np.maximum(step_i, 0)])  # windows are half-open, as assign_steps'
    frames = []
    for lane in ("coarse", "fine"):
        mine = spans[spans["lane"] == lane].sort_values("start_us")
        if mine.empty:
            continue
        lo, hi, name = mine["start_us"].to_numpy(), mine["end_us"].to_numpy(), mine["phase"].to_numpy()
        i = np.searchsorted(lo, launch_ts, side="right") - 1
        hit = (i >= 0) & (launch_ts < hi[np.maximum(i, 0)]) & in_step
        frames.append(
            pd.DataFrame(
                {
                    "step": numbers[step_i[hit]],
                    "lane": "gpu",
                    "phase": name[i[hit]],
                    "start_us": events["ts"].to_numpy()[work][hit],
                    "end_us": events["end"].to_numpy()[work][hit],
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else empty_spans()


def align_ranks(per_rank: list[tuple[int, int | None, pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """One run's spans on one clock per step, in ms from the earliest rank's step start.

    ``per_rank`` holds ``(rank, base_time_ns, spans, steps)``. Without every rank's
    ``baseTimeNanoseconds`` the ranks cannot be compared, so each starts at 0 (``aligned`` false).
    """
    frames = [(rank, base, spans, steps) for rank, base, spans, steps in per_rank if not spans.empty]
    if not frames:
        return pd.DataFrame(columns=["rank", "step", "lane", "phase", "start_ms", "end_ms", "aligned"])
    aligned = all(base is not None for _, base, _, _ in frames)
    ref_ns = min(base for _, base, _, _ in frames) if aligned else 0
    out = []
    for rank, base, spans, steps in frames:
        step_start = dict(zip(steps["step"].tolist(), steps["start_us"].tolist()))
        offset_us = (base - ref_ns) / 1e3 if aligned else -spans["step"].map(step_start).to_numpy(float)
        df = spans.assign(rank=rank, start_ms=(spans["start_us"] + offset_us) / 1e3, end_ms=(spans["end_us"] + offset_us) / 1e3)
        if aligned:
            df["step_start_ms"] = (spans["step"].map(step_start).to_numpy(float) + offset_us) / 1e3
        else:
            df["step_start_ms"] = 0.0
        out.append(df)
    allspans = pd.concat(out, ignore_index=True)
    zero = allspans.groupby("step")["step_start_ms"].transform("min")
    allspans["start_ms"] -= zero
    allspans["end_ms"] -= zero
    allspans["aligned"] = aligned
    return allspans[["rank", "step", "lane", "phase", "start_ms", "end_ms", "aligned"]]
