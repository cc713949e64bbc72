"""A prediction says what it priced past its profile's measurements (muon_repro.costmodel.calibration_range)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from support.costmodel_profiles import two_core_profile

from muon_repro.bench.configs import resolve
from muon_repro.costmodel.calibration_range import logging_prices
from muon_repro.costmodel.machine import profile_from_dict, resolve_profile
from muon_repro.costmodel.machine_profile import COLLECTIVE_OPS, SIZE_CURVE_KINDS
from muon_repro.costmodel.predict import format_prediction, predict
from muon_repro.costmodel.validate import bench_config, run_folders, validate
from muon_repro.report.costmodel_error import beyond_calibration
from muon_repro.rundir import RunDir

TRACES = Path(__file__).resolve().parents[1] / "traces"
# DP2 x TP2, 4 ranks: 131,072 activation elements per rank, 524,288 logits, 262,144 MLP; TP all-reduces of 512 and
# 131,072 elements, the DP reduce-scatter and all-gather of 2,099,456
RUN = "comparison/adamw_dp2_tp2"


def measured_everywhere(**changes) -> dict:
    """A profile whose measurements span every size RUN asks for, its collectives measured for any group and world
    size, with ``changes``."""
    curves = {kind: {"1024": 10.0, "16777216": 10.0} for kind in SIZE_CURVE_KINDS}
    fits = [{"op": op, "alpha_us": 300.0, "beta_gbps": 0.5, "samples": [[4096, 1e-3], [1 << 26, 1.0]]} for op in COLLECTIVE_OPS]
    return two_core_profile(size_curves=curves, collectives=fits) | changes


def beyond(raw: dict, run: str = RUN) -> tuple[str, ...]:
    return predict(resolve(run, "cpu"), profile_from_dict(raw)).beyond_calibration


def test_a_run_priced_within_every_measurement_has_no_note():
    assert beyond(measured_everywhere()) == ()


def with_fits(**fields) -> list[dict]:
    return [fit | fields for fit in measured_everywhere()["collectives"]]


@pytest.mark.parametrize(
    "changes, note",
    [
        (
            {"size_curves": {"matmul": {"1024": 10.0, "65536": 10.0}}},
            "size_curves.matmul: 131,072 elements per rank, 2x the largest measured (1,024 to 65,536)",
        ),
        (
            {"size_curves": {"gelu": {"524288": 10.0, "1048576": 10.0}}},
            "size_curves.gelu: 262,144 elements per rank, below the smallest measured (524,288 to 1,048,576)",
        ),
        (
            {"collectives": with_fits(samples=[[4096, 1e-3], [1 << 20, 0.01]])},
            "all_gather: 4,198,912 bytes per rank, 4x the largest measured (4,096 to 1,048,576)",
        ),
        (
            {"collectives": with_fits(group_size=4)},
            "all_gather, all_reduce, reduce_scatter on 2 ranks: priced by the 4-rank fits",
        ),
        (
            {"collectives": with_fits(world_size=2)},
            "all_gather, all_reduce, reduce_scatter on 2 ranks: measured with 2 ranks running, priced with 4",
        ),
        ({"compute_share": {"2": 1.0}}, "compute_share: 4 ranks per node, measured up to 2"),
        ({"compute_share": {"8": 0.25}}, "compute_share: 4 ranks per node, measured from 8"),
        (  # cross-entropy and GELU without figures of their own take the element-wise one, attention the matmul one
            {"size_curves": None},
            "elementwise, matmul: flat figures at every size (no fp32 size curve)",
        ),
        ({"collectives": with_fits(samples=[])}, "reduce_scatter: an alpha-beta fit at every size (no measured samples)"),
    ],
)
def test_each_figure_priced_past_its_measurements_is_noted(changes, note):
    raw = measured_everywhere(**changes)
    if "size_curves" in changes and changes["size_curves"] is not None:  # one curve changed, the others still span
        raw["size_curves"] = measured_everywhere()["size_curves"] | changes["size_curves"]
    assert note in beyond({k: v for k, v in raw.items() if v is not None})


def test_a_call_below_the_smallest_sample_is_not_noted():
    """It is priced at that sample's time, which bounds it from above (the 512-element all-reduces here)."""
    assert beyond(measured_everywhere(collectives=with_fits(samples=[[1 << 20, 1e-3], [1 << 26, 1.0]]))) == ()


def test_a_pipeline_notes_its_stages_prices_and_its_ranks_per_node():
    raw = measured_everywhere(compute_share={"2": 1.0, "4": 0.5})
    assert beyond(raw, "pipeline/muon_pp4") == ()
    raw["size_curves"] = raw["size_curves"] | {"cross_entropy": {"1024": 10.0, "65536": 10.0}}
    (note,) = beyond(raw, "pipeline/muon_pp4")
    assert note.startswith("size_curves.cross_entropy: ") and "x the largest measured (1,024 to 65,536)" in note


def test_each_prediction_keeps_its_own_log():
    narrow = profile_from_dict(measured_everywhere(compute_share={"2": 1.0}))
    with logging_prices() as outer:
        inner = predict(resolve(RUN, "cpu"), narrow)
    assert inner.beyond_calibration and not outer.beyond() and not outer.ranks_per_node
    narrow.compute_cores(8)  # priced outside any log: recorded nowhere, no error


def test_the_notes_are_printed_and_in_the_json():
    p = predict(resolve(RUN, "cpu"), profile_from_dict(measured_everywhere(compute_share={"2": 1.0})))
    assert "beyond the measurements: compute_share: 4 ranks per node, measured up to 2" in format_prediction(p)
    assert p.to_dict()["beyond_calibration"] == list(p.beyond_calibration)


def test_validate_says_which_runs_were_priced_beyond_the_profile():
    rows = validate(TRACES / "cpu-2c-gloo" / "pipeline", profile_from_dict(measured_everywhere()))  # up to 4 ranks
    assert rows
    for row in rows:
        eight = row["dp"] * row["tp"] * row["pp"] == 8
        assert row["within_calibration"] is not eight, row["run"]
        assert (row["beyond_calibration"] is None) is row["within_calibration"]
        if eight:
            assert "compute_share: 8 ranks per node, measured up to 4" in row["beyond_calibration"].split("; ")


@pytest.mark.parametrize("profile", ["1xH200-nccl", "cpu-2c-gloo"])
def test_the_committed_records_hold_the_notes_of_todays_predictions(profile):
    """Every H200 run, and the CPU runs of the pipeline group (8 ranks on a profile measured up to 4)."""
    machine = resolve_profile(str(TRACES / profile / "costmodel" / "machine.json"))
    records = pd.read_csv(TRACES / profile / "costmodel" / "predictions.csv").set_index("run")
    folders = run_folders(TRACES / profile / ("single_device" if profile.startswith("1x") else "pipeline"))
    assert folders
    for run, trials in folders.items():
        p = predict(bench_config(RunDir(trials[0])), machine, profiled=bool(records.loc[run, "profiled"]))
        recorded = records.loc[run, "beyond_calibration"]
        assert ("; ".join(p.beyond_calibration) or None) == (None if pd.isna(recorded) else recorded), run
        assert bool(records.loc[run, "within_calibration"]) is not p.beyond_calibration, run


def summary_of(within: list[bool | None], errors: list[float]) -> str:
    notes = [None if w in (True, None) else "compute_share: 8 ranks per node, measured up to 4" for w in within]
    frame = pd.DataFrame({"within_calibration": within, "beyond_calibration": notes, "step_rel_error": errors})
    return beyond_calibration(frame.astype({"within_calibration": "boolean"}))


def test_the_report_sets_the_error_of_runs_priced_beyond_beside_the_others():
    assert summary_of([False, True, True, False], [0.3, 0.01, -0.03, -0.1]) == (
        " 2 of 4 runs were priced beyond what the profile measured: median |error| 20.0%, against 2.0% for the rest "
        "(the predictions table's beyond_calibration says where)."
    )
    every = " Every run was priced beyond what the profile measured: median |error| 40.0% ("
    assert summary_of([False, False], [0.3, -0.5]).startswith(every)
    assert summary_of([True, None], [0.1, 0.2]) == " Every run was priced within what the profile measured."
    assert summary_of([None], [0.1]) == ""  # records written before the column: nothing said


def test_the_gpu_section_says_when_every_run_of_the_device_was_priced_beyond_its_calibration():
    from muon_repro.report.gpu_section import thresholds_intro

    metrics = Path(__file__).resolve().parents[1] / "metrics"
    tables = ("predictions", "runs", "regime_thresholds")
    predictions, runs, thresholds = (pd.read_parquet(metrics / f"{table}.parquet") for table in tables)
    device = predictions[predictions["profile"] == "1xH200-nccl"]
    assert len(device) and not device["within_calibration"].any()
    said = "every run priced beyond what the calibration measured (beyond_calibration: "
    assert said + device["beyond_calibration"].iloc[0] in thresholds_intro(predictions, runs, thresholds, "1xH200-nccl")
    one_within = predictions.copy()
    one_within.loc[device.index[0], ["within_calibration", "beyond_calibration"]] = [True, None]
    assert said not in thresholds_intro(one_within, runs, thresholds, "1xH200-nccl")
