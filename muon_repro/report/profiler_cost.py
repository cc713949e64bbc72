"""What the profiler costs a run, and where the figures say so: the runs table's ``profiler_overhead`` (the profiled
step over the same trial's steps timed without the profiler) read for the report's limitations, and a mark on
each breakdown drawn from a trace whose run is above :data:`PROFILER_OVERHEAD_LEVEL` (nothing is scaled to remove
it: a breakdown of such a trace is the profiled step's, inflation included)."""

from __future__ import annotations

import pandas as pd

from muon_repro.report.data import is_missing
from muon_repro.report.formatting import ratio
from muon_repro.report.selection import run_labels

PROFILER_OVERHEAD_LEVEL = 1.2  # above it, a breakdown read from a run's trace is named as inflated by the profiler
MARK = "†"


def inflated(run: pd.Series) -> bool:
    """Whether the profiler made ``run``'s profiled step more than :data:`PROFILER_OVERHEAD_LEVEL` times its step."""
    value = run.get("profiler_overhead")
    return not is_missing(value) and float(value) > PROFILER_OVERHEAD_LEVEL


def marked(labels: list[str], runs: pd.DataFrame) -> list[str]:
    """``labels`` of ``runs`` (in their order), each inflated run's with :data:`MARK` after it."""
    return [f"{label} {MARK}" if inflated(r) else label for label, (_, r) in zip(labels, runs.iterrows())]


def footnote(runs: pd.DataFrame) -> str:
    """The sentence a figure adds under its takeaway when it marks a run; empty when it marks none."""
    if not any(inflated(r) for _, r in runs.iterrows()):
        return ""
    return (
        f" {MARK} profiled step above {PROFILER_OVERHEAD_LEVEL:g}× the same steps timed without the profiler "
        "(runs.profiler_overhead): its breakdown carries the profiler's cost."
    )


def profiler_overhead_line(runs: pd.DataFrame) -> str | None:
    """What the profiler costs, as the runs table has it (``profiler_overhead``: the profiled step over the step timed
    without the profiler, same trial): its range, and the runs above :data:`PROFILER_OVERHEAD_LEVEL`, whose breakdowns
    (phases, waits, the timeline) carry that inflation; nothing is scaled to remove it. None without the column."""
    if "profiler_overhead" not in runs.columns:
        return None
    measured = runs[runs["profiler_overhead"].notna()]
    if measured.empty:
        return None
    values = measured["profiler_overhead"].astype(float)
    label = dict(zip(measured.index, run_labels(measured)))  # two runs of one grid (DP4 in two groups) told apart
    low, high = measured.loc[values.idxmin()], measured.loc[values.idxmax()]
    above = measured[values > PROFILER_OVERHEAD_LEVEL].sort_values("profiler_overhead", ascending=False)
    line = (
        f"The profiler's cost, the profiled step over the same trial's steps timed without it (runs.profiler_overhead): "
        f"median {values.median():.2f}×, from {ratio(low['profiler_overhead'])} ({label[low.name]}) to "
        f"{ratio(high['profiler_overhead'])} ({label[high.name]}). "
    )
    if above.empty:
        return line + f"No run is above {PROFILER_OVERHEAD_LEVEL:g}×: the breakdowns read from the traces keep near its time."
    named = ", ".join(f"{label[i]} {ratio(r['profiler_overhead'])}" for i, r in above.iterrows())
    return (
        line + f"Above {PROFILER_OVERHEAD_LEVEL:g}×, the breakdowns read from these runs' traces (phases, waits, the timeline) "
        f"carry that inflation, and nothing scales it away: {named}."
    )
