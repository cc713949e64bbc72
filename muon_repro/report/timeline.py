"""One training step of every rank, as phase intervals on a common clock (for the Gantt figure).

Reads each rank's trace with :func:`muon_repro.analysis.read_trace`, keeps the annotations named
after our phase labels (``forward``, ``backward``, ``optimizer`` and the optimizer's and model's
communication phases) inside one ``ProfilerStep#N``, plus the collective transfers themselves
(``gloo:*`` on gloo's worker threads, NCCL kernels on GPU). Ranks are put on one clock with each
trace's ``baseTimeNanoseconds`` (absolute time = base + ts), DESIGN.md section 5.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from muon_repro.report.style import TIMELINE_COARSE, TIMELINE_FINE

_STEP_PREFIX = "ProfilerStep#"


@dataclass
class Timeline:
    """``spans``: rank, lane (``coarse``, ``fine``, ``transfer``), phase, start_ms, end_ms, on a
    clock whose 0 is the earliest rank's step start. ``steps``: rank, start_ms, end_ms."""

    run: str
    step: int
    spans: pd.DataFrame
    steps: pd.DataFrame
    aligned: bool  # False when a trace had no baseTimeNanoseconds (each rank then starts at 0)


def _step_windows(events: pd.DataFrame) -> dict[int, tuple[float, float]]:
    names = events["name"].astype(str)
    rows = events[names.str.startswith(_STEP_PREFIX)]
    out = {}
    for name, ts, end in zip(rows["name"].astype(str), rows["ts"], rows["end"]):
        try:
            out[int(name[len(_STEP_PREFIX) :])] = (float(ts), float(end))
        except ValueError:
            continue
    return out


def _rank_spans(trace, window: tuple[float, float]) -> pd.DataFrame:
    e = trace.events
    inside = e[(e["ts"] >= window[0]) & (e["end"] <= window[1] + 1e-3)]
    names = inside["name"].astype(str)
    cats = inside["cat"].astype(str)
    lanes = np.select(
        [
            names.isin(TIMELINE_COARSE),
            names.isin(TIMELINE_FINE),
            names.str.startswith("gloo:") | ((cats == "kernel") & names.str.lower().str.startswith("nccl")),
        ],
        ["coarse", "fine", "transfer"],
        default="",
    )
    keep = lanes != ""
    sel = inside[keep]
    return pd.DataFrame(
        {
            "lane": lanes[keep],
            "phase": np.where(lanes[keep] == "transfer", "transfer", names[keep]),
            "ts": sel["ts"].to_numpy(),
            "end": sel["end"].to_numpy(),
        }
    )


def load_timeline(run: str, trace_files: list[Path], step: int | None = None) -> Timeline:
    """Phase intervals of one profiled step (by default the one of median duration) on every rank."""
    from muon_repro.analysis import read_trace

    traces = [read_trace(f) for f in trace_files]
    windows = [_step_windows(t.events) for t in traces]
    common = sorted(set.intersection(*(set(w) for w in windows))) if windows else []
    if not common:
        raise ValueError(f"run {run}: the rank traces share no ProfilerStep#N; cannot draw a one-step timeline")
    if step is None:
        # The step whose slowest rank is the median: a typical step, not the warm-up outlier.
        durations = sorted(common, key=lambda s: max(w[s][1] - w[s][0] for w in windows))
        step = durations[len(durations) // 2]
    elif step not in common:
        raise ValueError(f"run {run}: step {step} is not profiled on every rank (common steps: {common})")
    aligned = all(t.meta.base_time_ns is not None for t in traces)
    ref_ns = min(t.meta.base_time_ns for t in traces) if aligned else 0
    spans, steps = [], []
    for t, w in zip(traces, windows):
        offset_us = (t.meta.base_time_ns - ref_ns) / 1e3 if aligned else -w[step][0]
        s = _rank_spans(t, w[step])
        s["rank"] = t.meta.rank
        s["start_ms"] = (s.pop("ts") + offset_us) / 1e3
        s["end_ms"] = (s.pop("end") + offset_us) / 1e3
        spans.append(s)
        steps.append({"rank": t.meta.rank, "start_ms": (w[step][0] + offset_us) / 1e3, "end_ms": (w[step][1] + offset_us) / 1e3})
    spans_df = pd.concat(spans, ignore_index=True)
    steps_df = pd.DataFrame(steps).sort_values("rank", ignore_index=True)
    zero = float(steps_df["start_ms"].min())
    for df in (spans_df, steps_df):
        df["start_ms"] -= zero
        df["end_ms"] -= zero
    return Timeline(run, step, spans_df[["rank", "lane", "phase", "start_ms", "end_ms"]], steps_df, aligned)
