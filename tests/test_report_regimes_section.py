"""The section "Where the gains hold, vanish or invert" says what its tables hold: the sweep's range from its smallest to its
largest step, the points whose interval reaches 0 or lies below it, the held-out points by their set, the share's
median error of the prediction over the measurement, and each threshold's range low end first. Built from small
tables made here (no run, no figure), or the committed tables with a field changed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from muon_repro.report.data import load
from muon_repro.report.regimes_section import overlap_lines, share_summary, sweep_lines, threshold_rows

METRICS = Path(__file__).resolve().parents[1] / "metrics"


def _point(run: str, tokens: int, extra: tuple[float, float, float], **fields) -> dict:
    """A Muon sweep point at DP2·TP2, contiguous, d_model 128 unless ``fields`` say otherwise."""
    share = 512 / tokens
    return {
        "run": f"cpu/regimes/{run}",
        "optimizer": "muon",
        "d_model": 128,
        "dp": 2,
        "tp": 2,
        "layout": "contiguous",
        "tokens_per_step": tokens,
        "trials": 3,
        "optimizer_share": share,
        "optimizer_share_lo": 0.9 * share,
        "optimizer_share_hi": 1.1 * share,
        "muon_extra": extra[0],
        "muon_extra_lo": extra[1],
        "muon_extra_hi": extra[2],
        "validation_set": None,
        "held_out": False,
    } | fields


def _sweep() -> pd.DataFrame:
    return pd.DataFrame(
        [
            _point("small", 512, (0.5, 0.4, 0.6)),
            _point("middle", 2048, (0.1, 0.0, 0.2)),  # its interval reaches 0 exactly
            _point("large", 8192, (-0.1, -0.2, -0.05)),  # Muon faster: the whole interval below 0
            _point("wide", 4096, (0.05, -0.1, 0.2)),  # reaches 0, but not faster
            _point("dp2tp1", 1024, (0.3, 0.2, 0.4), tp=1),
            _point("new", 16384, (0.02, 0.01, 0.03), validation_set="held_out", held_out=True),
            _point("newer", 32768, (0.01, 0.005, 0.02), validation_set="held_out", held_out=True),
            _point("old", 24576, (0.02, 0.01, 0.03), validation_set="first_held_out", held_out=False),
        ]
    )


def test_the_sweep_lines_go_from_the_smallest_step_to_the_largest_and_count_held_out_points_by_set():
    """The width's line starts at its fewest tokens per step (512) and ends at its most (8,192); the held-out points
    are 2 that validate the model and 1 of the earlier set its last change saw."""
    lines = sweep_lines(_sweep())
    assert lines[0].endswith(
        "and 3 held-out points: 2 that validate the cost model, 1 of an earlier held-out set that its last change saw."
    )
    (width,) = [line for line in lines if line.startswith("d_model 128:")]
    assert "share 100% at 512 tokens, 6.2% [5.6%, 6.9%] at 8,192;" in width
    assert "over AdamW's 50% → -10% [-20%, -5%]" in width


def test_the_sweep_names_where_the_extra_reaches_zero_and_where_muon_is_faster():
    """An interval that reaches 0 (its low end at 0 or below) is "not distinguishable from zero"; only one lying
    wholly below 0 (its high end below 0) is "faster than AdamW's"."""
    lines = sweep_lines(_sweep())
    (vanished,) = [line for line in lines if line.startswith("Where Muon's extra step time is not distinguishable")]
    assert [name for name in ("small", "middle", "large", "wide") if f" {name} (" in vanished] == ["middle", "large", "wide"]
    (faster,) = [line for line in lines if line.startswith("Where Muon's step is faster")]
    assert faster == "Where Muon's step is faster than AdamW's: large."


def test_every_shape_off_the_main_axis_gets_its_own_line():
    """Any grid other than DP2·TP2 is off the main axis, DP2·TP1 included (dp 2 but tp 1)."""
    assert "DP2·TP1 contiguous at d_model 128: Muon's step over AdamW's 30% at 1,024 tokens." in sweep_lines(_sweep())


def test_the_share_summary_is_the_median_error_of_the_prediction_relative_to_the_measurement():
    """|predicted / measured - 1| over the Muon points: 10%, 10% and 50% have median 10% (mean 23%), worst 50%; the
    inverse ratio would give 9.1%, 11% and 33%."""
    regimes = pd.DataFrame(
        {
            "run": ["a", "b", "c", "d"],
            "optimizer": ["muon", "muon", "muon", "adamw"],
            "optimizer_share": [0.10, 0.20, 0.10, 0.5],
            "predicted_optimizer_share": [0.11, 0.18, 0.15, 0.1],
        }
    )
    assert share_summary(regimes) == (
        " Muon's optimizer share of the step, the regime map's quantity: median |error| 10.0% over the 3 Muon sweep "
        "points (worst 50%, c)."
    )


def _thresholds(low: float | None, high: float | None) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "machine": ["h100-8x-nvlink"],
            "model": ["7b"],
            "dp": [4],
            "tp": [2],
            "metric": ["muon_extra"],
            "level": [0.03],
            "tokens_per_step": [106_000.0],
            "tokens_per_step_low": [low],
            "tokens_per_step_high": [high],
            "range_coverage": [0.9],
            "grid_max_tokens": [134_217_728.0],
        }
    )


def test_a_thresholds_range_is_written_low_end_first_and_kept_when_half_open():
    """A range runs from where the true curve could cross first to where it could cross last; with one end beyond
    the grid it is still a range, that end said in words."""
    assert threshold_rows(_thresholds(80_000.0, 150_000.0))[0][-1] == "106k (80k–150k, 90%)"
    assert threshold_rows(_thresholds(None, 150_000.0))[0][-1] == "106k (under the grid–150k, 90%)"


def test_the_profiles_caption_says_the_latter_only_of_the_left_panels_last_model():
    """The right panel's scale-out model is "the latter" only when it is the last model the left panel names;
    otherwise it is named in full."""
    from muon_repro.report.regime_figures import STUDY_MODEL
    from muon_repro.report.regimes_section import profiles_caption

    def table(models: list[str]) -> pd.DataFrame:
        rows = [{"kind": "profile", "model": m, "model_params": 1000 + i} for i, m in enumerate([STUDY_MODEL, *models])]
        scale = {
            "kind": "scale_out",
            "model": "7b",
            "gpus": 32,
            "tokens_per_step": 4096,
            "machine": "h100-multinode-ib400",
            "tp": 8,
        }
        return pd.DataFrame([*rows, scale])

    assert "Right: the latter at 4,096 tokens per step" in profiles_caption(table(["other", "7b"]))
    assert "Right: the LLaMA-7B-shaped model (7b, 1,001 parameters) at 4,096" in profiles_caption(table(["7b", "other"]))


def test_the_scale_out_rows_give_each_optimizers_own_step_in_seconds():
    from muon_repro.report.regimes_section import scale_out_rows

    model = pd.DataFrame(
        [
            {
                "kind": "scale_out",
                "gpus": 64,
                "dp": 8,
                "tp": 8,
                "muon_step_ms": 10_200.0,
                "adamw_step_ms": 10_040.0,
                "muon_extra": 0.016,
                "optimizer_share": 0.025,
                "muon_comm_ms": 2820.0,
            },
            {
                "kind": "scale_out",
                "gpus": 32,
                "dp": 4,
                "tp": 8,
                "muon_step_ms": 20_280.0,
                "adamw_step_ms": 19_980.0,
                "muon_extra": 0.015,
                "optimizer_share": 0.019,
                "muon_comm_ms": 5528.0,
            },
        ]
    )
    assert [row[:4] for row in scale_out_rows(model)] == [
        ["32", "DP4·TP8", "20.28", "19.98"],
        ["64", "DP8·TP8", "10.20", "10.04"],
    ]


def test_the_scale_out_runs_from_its_fewest_gpus_to_its_most():
    from muon_repro.report.regimes_section import scale_out_where

    model = pd.DataFrame(
        {
            "kind": ["scale_out", "scale_out", "profile"],
            "gpus": [1024, 32, 8],
            "tokens_per_step": [4_194_304, 4_194_304, 1024],
            "machine": ["h100-multinode-ib400", "h100-multinode-ib400", "h100-8x-nvlink"],
            "tp": [8, 8, 2],
        }
    )
    assert scale_out_where(model) == (
        "at 4,194,304 tokens per step on 32 to 1,024 GPUs of H100 nodes, 400 Gb/s IB, TP8 inside a node, DP across nodes"
    )


def test_the_overlap_line_quotes_the_optimizer_time_of_the_steps_timed_without_the_profiler():
    """Where every variant has steps timed without the profiler, the line reads them, the step's and the optimizer's
    alike (runs.timed_optimizer_ms), not the profiled optimizer time."""
    data = load(METRICS).of_profile("cpu-2c-gloo")
    runs = data.runs.assign(timed_optimizer_ms=111.0, optimizer_ms=999.0)
    line = overlap_lines(replace(data, runs=runs))[0]
    assert "median over rounds of the steps timed without the profiler" in line
    assert line.count("optimizer 111 ms") == 3 and "999" not in line
