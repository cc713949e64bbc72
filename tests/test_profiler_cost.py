"""The profiler's cost as the runs table has it: stated in the report's limitations, and marked on every
breakdown the figures draw from a trace whose run it inflates past the stated level (issue 47, item 3)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from muon_repro.report.profiler_cost import MARK, PROFILER_OVERHEAD_LEVEL, footnote, inflated, marked, profiler_overhead_line

REPO = Path(__file__).resolve().parents[1]


def test_the_profilers_cost_is_stated_as_the_runs_table_has_it():
    """The runs table said 1.38x for a run whose breakdowns the report drew without a word (issue 47, item 3)."""
    runs = pd.DataFrame(
        {
            "run": ["p/g/a", "p/g/b", "p/g/c"],
            "group": ["g", "g", "g"],
            "optimizer": ["muon", "adamw", "muon"],
            "dp": [2, 4, 1],
            "tp": [2, 1, 4],
            "profiler_overhead": [1.05, 1.38, None],
        }
    )
    line = profiler_overhead_line(runs)
    assert "median 1.21×, from 1.05× (Muon DP2·TP2)" in line and "to 1.38× (AdamW DP4)" in line
    assert f"Above {PROFILER_OVERHEAD_LEVEL:g}×" in line and line.count("1.38×") == 2
    assert profiler_overhead_line(runs.assign(profiler_overhead=[1.0, 1.1, None])).endswith("keep near its time.")
    assert profiler_overhead_line(runs.drop(columns="profiler_overhead")) is None


def test_two_runs_of_one_grid_are_told_apart_by_their_group():
    """The card listed "Muon DP4 1.27×, Muon DP4 1.24×": two runs, one label."""
    runs = pd.DataFrame(
        {
            "run": ["p/pipeline/muon_dp4", "p/distributed_muon/muon_dp4"],
            "group": ["pipeline", "distributed_muon"],
            "optimizer": ["muon", "muon"],
            "dp": [4, 4],
            "tp": [1, 1],
            "profiler_overhead": [1.27, 1.24],
        }
    )
    line = profiler_overhead_line(runs)
    assert "Muon DP4 [pipeline] 1.27×, Muon DP4 [distributed_muon] 1.24×" in line


def test_a_run_above_the_level_is_marked_and_the_others_are_not():
    runs = pd.DataFrame({"run": ["a", "b", "c", "d"], "profiler_overhead": [1.05, PROFILER_OVERHEAD_LEVEL, 1.21, None]})
    assert [inflated(r) for _, r in runs.iterrows()] == [False, False, True, False]
    assert marked(["A", "B", "C", "D"], runs) == ["A", "B", f"C {MARK}", "D"]
    assert footnote(runs).startswith(f" {MARK} profiled step above 1.2×")
    assert footnote(runs.iloc[:2]) == "" and footnote(runs.drop(columns="profiler_overhead")) == ""


def test_the_committed_step_breakdown_marks_exactly_the_inflated_runs():
    from muon_repro.report.selection import run_labels, sort_runs, study_runs

    runs = pd.read_parquet(REPO / "metrics" / "runs.parquet")
    svg = (REPO / "figures" / "step_breakdown.svg").read_text(encoding="utf-8")
    shown = sort_runs(study_runs(runs[runs["profile"] == "cpu-2c-gloo"]))
    assert any(inflated(r) for _, r in shown.iterrows()), "no committed run is above the level: nothing to check"
    for label, (_, r) in zip(run_labels(shown, group=True), shown.iterrows()):
        assert (f"{label} {MARK}" in svg) == inflated(r), label
    assert "its breakdown carries the profiler" in svg
