"""Which runs the figures and the report show, in which order, and what they are called (muon_repro.report.selection).

Each test builds a small runs table by hand, so that one rule decides the answer: which run stands for a configuration
(contiguous layout first, then the preferred group), the order (Muon before AdamW, fewer pipeline stages first, DP·TP
hybrids, then pure DP, then pure TP, wider DP first), which runs belong to the study's DP x TP question and which to
the pipeline's, and the labels that tell the runs shown together apart."""

from __future__ import annotations

import pandas as pd
import pytest

from muon_repro.report.selection import (
    configured,
    counted_by_group,
    first_pair,
    grid_order,
    grids,
    pair_at,
    pipeline_runs,
    representative_runs,
    run_label,
    run_labels,
    sort_runs,
    study_runs,
    timeline_run,
    titled,
)


def _run(group: str, name: str, optimizer: str | None, dp: int | None, tp: int | None, **more) -> dict:
    """One row of the runs table, its id ``p/<group>/<name>`` as the analysis writes it."""
    row = {"run": f"p/{group}/{name}", "group": group, "optimizer": optimizer, "dp": dp, "tp": tp, "layout": "contiguous"}
    return {**row, **more}


def _runs(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


# ------------------------------------------------------------------------------- one run per configuration


def test_a_configuration_is_stood_for_by_its_contiguous_run_before_a_preferred_groups_other_layout():
    runs = _runs(
        _run("comparison", "muon_dp2_tp2_bucketed", "muon", 2, 2, layout="bucketed"),
        _run("distributed_muon", "muon_dp2_tp2_whole", "muon", 2, 2, layout="whole_matrix"),
        _run("layout_ablation", "muon_dp2_tp2", "muon", 2, 2),
    )
    (picked,) = representative_runs(runs)["run"]
    assert picked == "p/layout_ablation/muon_dp2_tp2"  # the only contiguous one, though its group comes last
    # without a contiguous run: whole_matrix before bucketed, whatever their groups
    (picked,) = representative_runs(runs.iloc[:2])["run"]
    assert picked == "p/distributed_muon/muon_dp2_tp2_whole"


def test_among_runs_of_one_layout_the_groups_named_first_stands_for_the_configuration():
    runs = _runs(
        _run("comparison", "muon_dp2_tp2", "muon", 2, 2),
        _run("distributed_muon", "muon_dp2_tp2", "muon", 2, 2),
        _run("custom", "muon_dp2_tp2", "muon", 2, 2),  # a group of no preference: last, though its name sorts first
    )
    assert list(representative_runs(runs)["run"]) == ["p/comparison/muon_dp2_tp2"]
    grid_first = ("distributed_muon", "comparison", "layout_ablation")  # the DP x TP figure prefers its grid experiment
    assert list(representative_runs(runs, groups=grid_first)["run"]) == ["p/distributed_muon/muon_dp2_tp2"]
    assert list(representative_runs(runs.iloc[[2]])["run"]) == ["p/custom/muon_dp2_tp2"]  # the only one stands


def test_representative_runs_come_one_per_configuration_in_the_reports_order_and_leave_out_pipeline_and_foreign_runs():
    runs = _runs(
        _run("comparison", "adamw_dp2_tp2", "adamw", 2, 2),
        _run("comparison", "muon_tp4", "muon", 1, 4),
        _run("comparison", "muon_dp4", "muon", 4, 1),
        _run("comparison", "muon_dp2_tp2", "muon", 2, 2),
        _run("layout_ablation", "muon_dp2_tp2_bucketed", "muon", 2, 2, layout="bucketed"),
        _run("pipeline", "muon_dp2_tp2", "muon", 2, 2),  # the pipeline group asks another question
        _run("foreign", "trace", None, None, None),  # a foreign trace knows no configuration
    )
    assert list(representative_runs(runs)["run"]) == [
        "p/comparison/muon_dp2_tp2",
        "p/comparison/muon_dp4",
        "p/comparison/muon_tp4",
        "p/comparison/adamw_dp2_tp2",
    ]


# ------------------------------------------------------------------------------------------------- the order


def test_grids_are_ordered_hybrids_then_pure_dp_then_pure_tp():
    assert [grid_order(2, 2), grid_order(4, 2), grid_order(4, 1), grid_order(1, 4), grid_order(1, 1)] == [0, 0, 1, 2, 2]


def test_runs_sort_muon_first_then_by_stages_then_hybrid_dp_tp_then_wider_dp():
    runs = _runs(
        _run("comparison", "adamw_dp2_tp2", "adamw", 2, 2),
        _run("comparison", "muon_tp4", "muon", 1, 4),
        _run("comparison", "muon_dp2", "muon", 2, 1),
        _run("pipeline", "muon_dp2_tp2_pp2", "muon", 2, 2, pp=2),
        _run("comparison", "muon_dp4", "muon", 4, 1),
        _run("comparison", "muon_dp2_tp2", "muon", 2, 2),
    )
    assert [r.rsplit("/", 1)[1] for r in sort_runs(runs)["run"]] == [
        "muon_dp2_tp2",
        "muon_dp4",  # pure DP, the wider first
        "muon_dp2",
        "muon_tp4",
        "muon_dp2_tp2_pp2",  # stages after every run without them, though a hybrid
        "adamw_dp2_tp2",
    ]
    assert sort_runs(runs.iloc[0:0]).empty


def test_the_grids_present_come_hybrids_first_the_larger_first_and_of_one_size_the_wider_dp_first():
    present = [(1, 1), (2, 1), (1, 4), (2, 2), (2, 4), (4, 1), (4, 2)]
    runs = _runs(*(_run("g", f"r{dp}_{tp}", "muon", dp, tp) for dp, tp in present))
    assert grids(runs) == [(4, 2), (2, 4), (2, 2), (4, 1), (2, 1), (1, 4), (1, 1)]


# ---------------------------------------------------------------------------------- which question a run asks


def test_runs_with_stages_or_in_the_pipeline_group_are_the_pipelines_and_the_others_the_studys():
    runs = _runs(
        _run("comparison", "no_pp_column_value", "muon", 2, 2, pp=None),  # a table that predates pp: one stage
        _run("comparison", "one_stage", "muon", 2, 2, pp=1),
        _run("comparison", "two_stages", "muon", 2, 1, pp=2),  # stages outside the pipeline group
        _run("pipeline", "pipeline_one_stage", "muon", 2, 2, pp=1),  # the pipeline group's DP x TP at one stage
    )
    study = [r.rsplit("/", 1)[1] for r in study_runs(runs)["run"]]
    pipeline = [r.rsplit("/", 1)[1] for r in pipeline_runs(runs)["run"]]
    assert study == ["no_pp_column_value", "one_stage"]
    assert pipeline == ["two_stages", "pipeline_one_stage"]
    without_pp = runs.drop(columns="pp")
    assert len(study_runs(without_pp)) == 3 and list(pipeline_runs(without_pp)["group"]) == ["pipeline"]


def test_configured_runs_know_their_optimizer_dp_and_tp():
    runs = _runs(
        _run("g", "all", "muon", 2, 2),
        _run("g", "no_optimizer", None, 2, 2),
        _run("g", "no_dp", "muon", None, 2),
        _run("g", "no_tp", "muon", 2, None),
    )
    assert list(configured(runs)["run"]) == ["p/g/all"]


def test_a_count_of_runs_names_each_group_it_counts_in_the_groups_order_by_name():
    one = _runs(*(_run("pipeline", f"r{i}", "muon", 2, 2) for i in range(3)))
    assert counted_by_group(one) == "3 (pipeline)"
    two = _runs(_run("pipeline_bubble", "b", "muon", 2, 2), *(_run("pipeline", f"r{i}", "muon", 2, 2) for i in range(2)))
    assert counted_by_group(two) == "3 (2 in pipeline, 1 in pipeline_bubble)"
    assert counted_by_group(one.drop(columns="group")) == "3"


# ---------------------------------------------------------------------------------------- the runs one shows


def test_the_timeline_shows_muon_with_dp_and_tp_else_the_first_run_in_order_else_the_first_row():
    runs = _runs(
        _run("comparison", "adamw_dp2_tp2", "adamw", 2, 2),
        _run("comparison", "muon_dp4", "muon", 4, 1),
        _run("comparison", "muon_dp2_tp2", "muon", 2, 2),
    )
    assert timeline_run(runs)["run"] == "p/comparison/muon_dp2_tp2"
    assert timeline_run(runs.iloc[:2])["run"] == "p/comparison/muon_dp4"  # no hybrid Muon: the first in the report's order
    foreign = _runs(_run("foreign", "a", None, None, None), _run("foreign", "b", None, None, None))
    assert timeline_run(foreign)["run"] == "p/foreign/a"  # nothing configured: the first row, no error


def test_the_first_pair_is_at_the_first_grid_that_recorded_both_optimizers():
    reps = _runs(
        _run("comparison", "muon_dp2_tp2", "muon", 2, 2),  # the first grid, without its AdamW run
        _run("comparison", "muon_dp4", "muon", 4, 1),
        _run("comparison", "adamw_dp4", "adamw", 4, 1),
    )
    assert pair_at(reps, 2, 2) is None
    muon, adamw = pair_at(reps, 4, 1)
    assert (muon["run"], adamw["run"]) == ("p/comparison/muon_dp4", "p/comparison/adamw_dp4")
    muon, adamw = first_pair(reps)
    assert (muon["run"], adamw["run"]) == ("p/comparison/muon_dp4", "p/comparison/adamw_dp4")
    assert first_pair(reps.iloc[:2]) is None


# ------------------------------------------------------------------------------------------------ the labels


def test_a_runs_label_names_a_layout_other_than_contiguous_and_an_overlap_other_than_none():
    row = pd.Series(_run("comparison", "m", "muon", 2, 2, overlap="none"))
    assert run_label(row) == "Muon DP2·TP2"
    assert run_label(row, group=True) == "Muon DP2·TP2  [comparison]"
    overlapped = pd.Series({**row, "layout": "whole_matrix", "overlap": "naive_async"})
    assert run_label(overlapped) == "Muon DP2·TP2 whole-matrix, naive async"
    assert run_label(pd.Series({**row, "optimizer": "adamw", "dp": 4, "tp": 1, "pp": 2})) == "AdamW PP2·DP4"


def test_runs_shown_together_are_told_apart_by_their_group_then_by_their_run_id():
    runs = _runs(
        _run("comparison", "muon_dp2_tp2", "muon", 2, 2),
        _run("layout_ablation", "muon_dp2_tp2", "muon", 2, 2),
        _run("layout_ablation", "muon_dp2_tp2_again", "muon", 2, 2),
        _run("comparison", "muon_dp4", "muon", 4, 1),
    )
    assert run_labels(runs) == [
        "Muon DP2·TP2 [comparison]",
        "Muon DP2·TP2 [layout_ablation] (p/layout_ablation/muon_dp2_tp2)",
        "Muon DP2·TP2 [layout_ablation] (p/layout_ablation/muon_dp2_tp2_again)",
        "Muon DP4",  # unique: left as it is
    ]
    assert run_labels(runs.iloc[[0, 3]]) == ["Muon DP2·TP2", "Muon DP4"]


@pytest.mark.parametrize("missing", ["optimizer", "dp", "tp"])
def test_a_run_without_a_whole_configuration_is_titled_by_its_id(missing):
    row = pd.Series(_run("comparison", "muon_dp2_tp2", "muon", 2, 2))
    assert titled(row) == "Muon DP2·TP2 (p/comparison/muon_dp2_tp2)"
    assert titled(pd.Series({**row, missing: None})) == "p/comparison/muon_dp2_tp2"
