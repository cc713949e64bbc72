"""Threshold ranges with a stated coverage (muon_repro.costmodel.records): order statistics of held-out residuals
of the machine's own kind of device, at least 20 of them, or no range and the reason."""

from __future__ import annotations

import math

import pytest

from muon_repro.claims import LEVELS
from muon_repro.costmodel.records import (
    METRICS,
    RANGE_MIN_RESIDUALS,
    STUDY_MODEL,
    ErrorSpread,
    Setting,
    metric_error_spread,
    metric_range,
    spread_for,
    threshold_rows,
)


def _predictions(errors: list[float], held_out: bool = True) -> list[dict]:
    """Muon runs whose optimizer is predicted exp(error) times too long, their steps and AdamW twins exactly."""
    rows = []
    for i, e in enumerate(errors):
        common = {"measured_step_ms": 100.0, "predicted_step_ms": 100.0, "held_out": held_out}
        rows.append({"run": f"p/g/muon_{i}", "optimizer": "muon", "measured_optimizer_ms": 10.0, **common})
        rows[-1]["predicted_optimizer_ms"] = 10.0 * math.exp(e)
        rows.append({"run": f"p/g/adamw_{i}", "optimizer": "adamw", "measured_optimizer_ms": 5.0, **common})
        rows[-1]["predicted_optimizer_ms"] = 5.0
    return rows


def test_the_range_is_the_order_statistics_with_their_coverage():
    errors = [0.01 * k for k in range(-20, 20)]  # 40 residuals, -0.20 .. +0.19
    spread = metric_error_spread(_predictions(errors), "cpu")["optimizer_share"]
    assert isinstance(spread, ErrorSpread)
    k = math.floor(41 * 0.05)  # 2: the second smallest and second largest
    assert (spread.low, spread.high) == (pytest.approx(-0.19), pytest.approx(0.18))
    assert spread.coverage == pytest.approx((41 - 2 * k) / 41) and spread.runs == 40
    assert spread.basis == "held-out cpu runs"


@pytest.mark.parametrize(
    ("n", "k"),
    [
        (20, 1),  # the fewest residuals that give a range: the smallest and the largest
        (39, 2),  # k = floor((39 + 1) * 0.05) = 2, where floor(39 * 0.05) would be 1
    ],
)
def test_the_order_statistic_is_the_kth_of_n_plus_one(n, k):
    errors = [0.01 * i for i in range(n)]  # 0.00 .. (n - 1) / 100, shuffled below
    spread = metric_error_spread(_predictions(errors[::2] + errors[1::2]), "cpu")["optimizer_share"]
    assert isinstance(spread, ErrorSpread) and spread.runs == n
    assert (spread.low, spread.high) == (pytest.approx(0.01 * (k - 1)), pytest.approx(0.01 * (n - k)))
    assert spread.coverage == pytest.approx((n + 1 - 2 * k) / (n + 1))


def test_a_muon_run_whose_adamw_twin_was_tuned_on_gives_no_extra_residual():
    """muon_extra's residual pairs a Muon run with its AdamW twin: both must be held out, or the pair carries the
    error of a configuration the model was tuned on. The optimizer's share needs the Muon run alone."""
    rows = _predictions([0.0] * 30)
    for row in rows:
        row["held_out"] = row["optimizer"] == "muon"
    spread = metric_error_spread(rows, "cpu")
    assert spread["muon_extra"] == "unavailable: 0 held-out cpu residuals, 20 needed"
    assert isinstance(spread["optimizer_share"], ErrorSpread) and spread["optimizer_share"].runs == 30


def test_the_range_of_muon_extra_is_on_the_step_ratio_low_end_first():
    """A log error between -0.1 and +0.2 on the step ratio 1 + extra: a predicted extra of 0.5 stands for a true ratio
    from 1.5 e^-0.2 = 1.22810 to 1.5 e^0.1 = 1.65776 (an over-prediction means the truth is lower); the optimizer's
    share, a plain ratio, from 0.1 e^-0.2 = 0.081873 to 0.1 e^0.1 = 0.110517."""
    spread = ErrorSpread(-0.1, 0.2, 30, "held-out cpu runs", 29 / 31)
    assert metric_range("muon_extra", 0.5, spread) == pytest.approx((0.2280961, 0.6577564), rel=1e-6)
    assert metric_range("optimizer_share", 0.1, spread) == pytest.approx((0.0818731, 0.1105171), rel=1e-6)


def test_too_few_residuals_or_tuned_ones_give_no_range_and_say_why():
    few = metric_error_spread(_predictions([0.0] * (RANGE_MIN_RESIDUALS - 1)), "cpu")
    assert few["optimizer_share"] == "unavailable: 19 held-out cpu residuals, 20 needed"
    tuned = metric_error_spread(_predictions([0.0] * 30, held_out=False), "cuda")
    assert tuned["muon_extra"] == "unavailable: 0 held-out cuda residuals, 20 needed"


def test_a_gpu_threshold_is_never_ranged_by_cpu_residuals():
    spread = metric_error_spread(_predictions([0.01 * k for k in range(-15, 15)]), "cpu")
    assert isinstance(spread["optimizer_share"], ErrorSpread)
    on_gpus = spread_for(spread, "cuda", "cpu")
    assert on_gpus["optimizer_share"].startswith("unavailable: 0 held-out cuda residuals")
    grid = [{"tokens_per_step": t, "optimizer_share": 1000.0 / t, "muon_extra": 300.0 / t} for t in (2**k for k in range(10, 24))]
    setting = Setting("4xRTXA4000-pcie-nccl", STUDY_MODEL, 2, 2)
    rows = threshold_rows(setting, grid, on_gpus)
    # a row for each metric at each level: an empty list would pass every check below
    assert sorted((r["metric"], r["level"]) for r in rows) == sorted((m, lv.value) for m in METRICS for lv in LEVELS)
    assert all(r["range_coverage"] is None and r["tokens_per_step_low"] is None for r in rows)
    assert all(r["error_basis"].startswith("unavailable") and r["grid_max_tokens"] == 2**23 for r in rows)
    ranged = threshold_rows(setting, grid, spread)
    share = next(r for r in ranged if r["metric"] == "optimizer_share")
    assert share["range_coverage"] == pytest.approx(29 / 31)  # n = 30, k = 1
    assert share["tokens_per_step_low"] < share["tokens_per_step"] < share["tokens_per_step_high"]
