"""The report's "optimizer step, decomposed" section on the committed tables and on small edits of them: which runs
it shows, which cells are Muon's alone, the share's interval from the claim that measured it, Muon's extra time per
token, and what the DP gather's waits say of uneven Newton-Schulz work."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from muon_repro.phases import DP_GATHER
from muon_repro.report.decomposition_section import _gather_waits, _names_run, decomposition, decomposition_runs

MUON = "cpu-2c-gloo/comparison/muon_dp2_tp2"
ADAMW = "cpu-2c-gloo/comparison/adamw_dp2_tp2"


def test_a_claims_conditions_name_a_run_whole_not_a_run_it_prefixes():
    conditions = f"{MUON}_bucketed (gloo on cpu, 10 rounds); {ADAMW} (gloo on cpu)"
    assert _names_run(conditions, ADAMW) and _names_run(conditions, f"{MUON}_bucketed")
    assert not _names_run(conditions, MUON)


def test_the_dp2_tp2_pair_is_shown_before_a_larger_hybrid_grid(figure_data):
    """The original study's comparison is at DP2·TP2; a DP4·TP2 pair, first in the grids' order (larger first), is not
    the one the section decomposes."""
    runs = figure_data.runs
    pair = runs[runs["run"].isin([MUON, ADAMW])]
    larger = pair.assign(run=pair["run"] + "_dp4_tp2", name=pair["name"] + "_dp4_tp2", dp=4, world_size=8)
    shown = decomposition_runs(dataclasses.replace(figure_data, runs=pd.concat([larger, runs], ignore_index=True)))
    assert [str(r["run"]) for r in shown] == [MUON, ADAMW]


def test_adamws_columns_of_muons_own_parts_and_their_splits_are_dashes(figure_data):
    section = decomposition(figure_data, [])
    assert section["header"][5] == "AdamW r0" and section["split"]
    muon_only = False
    for row in section["rows"]:
        if not row[0].startswith("↳"):  # a split row (transfer, waiting) is of the part above it
            muon_only = row[0].endswith("(Muon)")
        assert (row[5:] == ["—"] * 4) == muon_only, row
        assert "—" not in row[1:5], row  # Muon has every part


def _claim(verdict: str, conditions: str) -> dict[str, str]:
    return {"id": "optimizer_share", "verdict": verdict, "conditions": conditions, "measured": "49.3% (48.4–50.3%)"}


def test_the_share_quotes_the_interval_of_the_claim_measured_on_its_run_only(figure_data):
    measured = decomposition(figure_data, [_claim("not comparable here", f"{MUON} (gloo on cpu)")])["beside"]
    assert measured[0].endswith("the claims table's estimate and 95% interval: 49.3% (48.4–50.3%).")
    assert "95% interval" not in measured[1]  # AdamW's run is not the claim's
    unmeasured = decomposition(figure_data, [_claim("not measured", f"{MUON} (gloo on cpu)")])["beside"]
    assert "95% interval" not in unmeasured[0]


def test_muons_extra_per_token_is_the_step_difference_over_the_tokens_timed_where_both_runs_were(figure_data):
    runs = figure_data.runs.set_index("run")
    m, a = runs.loc[MUON], runs.loc[ADAMW]
    extra = decomposition(figure_data, [])["beside"][-1]
    us = (m["timed_step_ms"] - a["timed_step_ms"]) / m["tokens_per_step"] * 1000
    assert extra.startswith(f"Muon's extra over AdamW per token: {us:+.1f} µs per token".replace("-", "−"))
    assert "timed without the profiler" in extra
    # AdamW without timed steps: both read on the profiled steps, never one of each
    untimed = figure_data.runs.assign(timed_step_ms=figure_data.runs["timed_step_ms"].where(figure_data.runs["run"] != ADAMW))
    said = decomposition(dataclasses.replace(figure_data, runs=untimed), [])["beside"][-1]
    us = (m["step_ms"] - a["step_ms"]) / m["tokens_per_step"] * 1000
    assert said.startswith(f"Muon's extra over AdamW per token: {us:+.1f} µs per token".replace("-", "−"))
    assert "times profiled" in said


def test_uneven_newton_schulz_work_is_said_however_small_the_difference(figure_data):
    ranks = figure_data.ranks
    uneven = ranks.assign(ns_flops=ranks["ns_flops"].where(~((ranks["run"] == MUON) & (ranks["rank"] == 1)), 9.5e9))
    (note,) = decomposition(dataclasses.replace(figure_data, ranks=uneven), [])["notes"]
    assert note.startswith("Newton-Schulz work differs across the ranks of Muon DP2·TP2 (")


@pytest.mark.parametrize("slowest, said", [(0, ": r0, with the least, waits longest"), (2, "longest wait is r2's (3.0 ms")])
def test_the_dp_gathers_waits_are_each_ranks_mean_over_trials_and_name_the_rank_that_waits_longest(figure_data, slowest, said):
    """r0 does the least Newton-Schulz work; a rank's wait is its mean over its two trials (3.0 ms, not their sum)."""
    waits = {0: (1.0, 1.0), 1: (1.6, 1.6), 2: (2.0, 2.0)}
    waits[slowest] = (3.0, 3.0)
    phases = pd.DataFrame(
        [
            {"run": MUON, "phase": DP_GATHER, "trial": trial, "rank": rank, "wait_ms_per_step": w}
            for rank, pair in waits.items()
            for trial, w in enumerate(pair)
        ]
    )
    flops = pd.Series({0: 1e9, 1: 2e9, 2: 2e9})
    assert said in _gather_waits(dataclasses.replace(figure_data, phases=phases), MUON, flops)
