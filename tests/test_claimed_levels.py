"""A claimed level is read only of the quantity it was claimed of: the original study's ~1.1% of Muon's optimizer
share, the paper's 3% of Muon's extra step time over AdamW; tables and figures never put one on the other's axis."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from muon_repro.claims import PAPER_LATENCY, STUDY_SHARE, claimed_level
from muon_repro.report.regime_figures import draw_claimed_level
from muon_repro.report.regimes_section import threshold_range_note, threshold_rows


def _thresholds(coverage=None) -> pd.DataFrame:
    rows = []
    for metric, tokens in (("optimizer_share", {0.011: 635_000, 0.03: 228_000}), ("muon_extra", {0.011: 331_000, 0.03: 119_000})):
        for level, at in tokens.items():
            rows.append(
                {
                    "machine": "4xRTXA4000-pcie-nccl",
                    "model": "7b",
                    "dp": 2,
                    "tp": 2,
                    "metric": metric,
                    "level": level,
                    "tokens_per_step": float(at),
                    "tokens_per_step_low": None,
                    "tokens_per_step_high": None,
                    "grid_max_tokens": 134_217_728.0,
                    "range_coverage": coverage,
                    "error_basis": "unavailable: 0 held-out cuda residuals, 20 needed",
                }
            )
    return pd.DataFrame(rows)


def test_each_quantity_is_read_at_its_own_claims_level():
    assert claimed_level("optimizer_share") is STUDY_SHARE and claimed_level("muon_extra") is PAPER_LATENCY
    with pytest.raises(ValueError, match="no claim states a level of 'step_ms'"):
        claimed_level("step_ms")


def test_threshold_rows_pair_each_metric_with_its_claim():
    rows = threshold_rows(_thresholds())
    by_metric = {r[3]: (r[4], r[5]) for r in rows}
    assert by_metric == {
        "Muon's optimizer share": ("1.1% (Wei's study)", "635k"),
        "Muon step / AdamW step - 1": ("3% (paper)", "119k"),
    }


def test_thresholds_without_ranges_say_why():
    assert "0 held-out cuda residuals" in threshold_range_note(_thresholds())
    assert threshold_range_note(_thresholds(coverage=0.9)) == ""


@pytest.mark.parametrize(("metric", "percent"), [("optimizer_share", 1.1), ("muon_extra", 3.0)])
def test_an_axis_carries_only_its_quantitys_level(metric, percent):
    fig, ax = plt.subplots()
    draw_claimed_level(ax, metric)
    drawn = [line.get_ydata()[0] for line in ax.get_lines()]
    plt.close(fig)
    assert drawn == [pytest.approx(percent)]
