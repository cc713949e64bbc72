"""The report's limitations state what the runs' tables show, measured: here, the runs' own loss."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from muon_repro.report.caveats_section import loss_line
from muon_repro.report.data import load

METRICS = Path(__file__).resolve().parents[1] / "metrics"


def test_the_runs_own_loss_is_measured_and_says_which_optimizer_does_not_fall():
    data = load(METRICS).of_profile("cpu-2c-gloo")
    runs = data.runs[data.runs["group"] == "comparison"]

    def losses(curves: dict[str, list[float]]) -> pd.DataFrame:
        """Per optimizer its loss per step, on every rank; a later round's losses differ (only the first is read)."""
        rows = [
            {"run": r["run"], "trial": trial, "rank": rank, "step": step, "loss": value + trial}
            for _, r in runs.iterrows()
            for trial in (0, 1)
            for rank in range(2)
            for step, value in enumerate(curves[str(r["optimizer"])])
        ]
        return pd.DataFrame(rows)

    falling = loss_line(replace(data, runs=runs, losses=losses({"muon": [3.0, 2.5, 2.0], "adamw": [7.0, 6.5, 6.0]})))
    assert "Muon 3.00 to 2.00 over 3 steps" in falling and "AdamW 7.00 to 6.00 over 3 steps" in falling
    assert falling.endswith("Both fall; the convergence section compares them at their best learning rates.")
    flat = loss_line(replace(data, runs=runs, losses=losses({"muon": [3.0, 2.5, 2.0], "adamw": [6.7, 6.9, 6.92]})))
    assert "AdamW 6.70 to 6.92" in flat and "AdamW's loss does not fall" in flat and "Muon's" not in flat
    assert loss_line(replace(data, losses=data.losses.iloc[:0])) is None
