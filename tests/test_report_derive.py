"""The report's reductions of the tables (report/derive.py) on small hand-made tables: each pools or picks as its
docstring says (the mean over ranks and trials, the largest rank, one trial's step), so a figure and a section that
share a reduction state the same number, and the right one."""

from __future__ import annotations

import pandas as pd
import pytest

from muon_repro.phases import MOMENTUM, NEWTON_SCHULZ, OPTIMIZER, TP_SHARD, UPDATE
from muon_repro.report import derive

RUN = "p/g/muon_dp2_tp2"


def test_state_by_run_pools_the_state_and_takes_the_largest_rank_and_transient_peak():
    ranks = pd.DataFrame(
        {
            "run": RUN,
            "trial": [0, 0, 1, 1],
            "rank": [0, 1, 0, 1],
            "muon_state_bytes": [10, 20, 10, 20],
            "adamw_state_bytes": [40, 40, 40, 40],
            "state_bytes": [50, 60, 50, 60],
            "transient_bytes": [5, 9, 7, 3],
        }
    )
    (row,) = derive.state_by_run(ranks, [RUN]).to_dict("records")
    assert row == {"run": RUN, "muon": 15.0, "adamw": 40.0, "largest": 60, "transient": 9}


def test_total_bytes_prefer_the_analytic_model_and_the_source_gap_is_relative_to_the_largest():
    table = pd.DataFrame({"analytic": [100.0, 50.0], "ledger": [100.0, 40.0], "trace": [80.0, 50.0]}, index=["a", "b"])
    assert derive.total_bytes(table) == 150.0
    assert derive.total_bytes(table.assign(analytic=float("nan"))) == 140.0  # then the ledger's
    assert derive.source_gap(table) == pytest.approx(0.2)  # (100 - 80) / 100, not / 80


def test_the_mean_loss_is_the_mean_over_ranks_and_trials_per_step():
    losses = pd.DataFrame({"run": RUN, "trial": [0, 0, 0, 1], "rank": [0, 1, 2, 0], "step": 3, "loss": [1.0, 1.0, 2.0, 4.0]})
    assert derive.mean_loss(losses, RUN).to_dict("records") == [{"step": 3, "loss": 2.0}]


def test_the_typical_step_is_that_trials_step_the_mean_over_its_ranks():
    steps = pd.DataFrame(
        {"run": RUN, "trial": [0, 0, 1, 1], "rank": [0, 1, 0, 1], "step": 2, "step_ms": [10.0, 20.0, 90.0, 90.0]}
    )
    run = pd.Series({"run": RUN, "typical_trial": 0, "typical_step": 2})
    assert derive.typical_step(steps, run)["step_ms"] == 15.0


def test_one_step_is_aligned_only_when_every_rank_was():
    timeline = pd.DataFrame(
        {
            "run": RUN,
            "trial": 0,
            "rank": [0, 1],
            "step": 1,
            "lane": "step",
            "phase": "",
            "start_ms": [0.0, 1.0],
            "end_ms": [5.0, 6.0],
            "aligned": [True, False],
        }
    )
    assert not derive.one_step(timeline, RUN, 1, 0).aligned
    assert derive.one_step(timeline.assign(aligned=True), RUN, 1, 0).aligned


def test_a_trials_median_reads_each_step_at_its_slowest_rank():
    steps = pd.DataFrame({"run": RUN, "trial": 0, "rank": [0, 1, 0, 1, 0, 1], "step": [0, 0, 1, 1, 2, 2]})
    steps["step_ms"] = [10.0, 30.0, 10.0, 40.0, 10.0, 50.0]
    assert derive.trial_medians(steps, RUN).to_dict() == {0: 40.0}  # the slowest ranks 30, 40, 50; not the means


def test_the_decomposition_counts_momentum_and_the_shards_as_parts_and_the_rest_is_what_they_leave():
    phases = pd.DataFrame(
        {
            "run": RUN,
            "trial": 0,
            "rank": 0,
            "phase": [OPTIMIZER, NEWTON_SCHULZ, MOMENTUM, UPDATE, TP_SHARD],
            "ms_per_step": [100.0, 60.0, 5.0, 10.0, 7.0],
        }
    )
    row = derive.optimizer_decomposition(phases, RUN).loc[0]
    assert (row["elementwise"], row["muon_shards"], row["muon_newton_schulz"]) == (15.0, 7.0, 60.0)
    assert row["rest"] == pytest.approx(100.0 - 60.0 - 15.0 - 7.0)
