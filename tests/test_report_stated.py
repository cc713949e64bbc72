"""What a figure states from the tables (report/stated.py), on the committed tables and edits of them: the claim's own
profile and row, its unit's words, the bars' range, the study's share, the paper's region and the verdicts."""

from __future__ import annotations

import pandas as pd
import pytest

from muon_repro.report import stated
from muon_repro.report.formatting import pct

PROFILE = "cpu-2c-gloo"


def test_a_figures_profile_is_the_one_most_of_its_runs_have():
    assert stated.profile_of(pd.DataFrame({"profile": ["a", "b", "b"]})) == "b"


def test_a_claim_row_without_a_measured_value_is_none(figure_data):
    claims = figure_data.claims
    blank = claims.assign(measured_value=claims["measured_value"].where(claims["claim_id"] != stated.COMM_CLAIM))
    assert stated.row_of(claims, "claim_id", stated.COMM_CLAIM, PROFILE) is not None
    assert stated.row_of(blank, "claim_id", stated.COMM_CLAIM, PROFILE) is None


def test_a_stated_number_is_the_one_its_rows_explanation_states_on_that_profile(figure_data):
    row = stated.row_of(figure_data.claims, "claim_id", stated.COMM_CLAIM, PROFILE)
    numbers = pd.DataFrame(
        {
            "table": "claims",
            "row_id": stated.COMM_CLAIM,
            "profile": ["another-profile", PROFILE],
            "name": "comm_ms_ratio_with_waiting",
            "value": [9.0, 1.5],
        }
    )
    assert stated.stated_number(numbers, "claims", row, "comm_ms_ratio_with_waiting") == 1.5


def test_the_communication_takeaway_names_the_claims_quantity_by_its_unit(figure_data):
    claims = figure_data.claims
    said = stated.comm_time({}, claims, figure_data.stated_numbers, PROFILE).text
    assert "the claim's quantity (transfer time," in said
    unit = claims["unit"].where(claims["claim_id"] != stated.COMM_CLAIM, "ratio Muon/AdamW of the communication time")
    said = stated.comm_time({}, claims.assign(unit=unit), figure_data.stated_numbers, PROFILE).text
    assert "the claim's quantity (communication time," in said


def test_the_share_takeaway_gives_the_bars_from_least_to_most_and_the_studys_share_from_the_claim(figure_data):
    said = stated.optimizer_share({"Muon": [0.3, 0.1, 0.2]}, figure_data.claims, PROFILE).text
    assert said.startswith(f"the bars: Muon {pct(0.1).removesuffix('%')}–{pct(0.3)}")
    claims = figure_data.claims
    other = claims.assign(claimed_value=claims["claimed_value"].where(claims["claim_id"] != stated.SHARE_CLAIM, 0.02))
    assert stated.study_share(other, PROFILE) == pytest.approx(0.02)
    assert stated.study_share(claims.iloc[0:0], PROFILE) == pytest.approx(0.011)  # the declared level without a claim


def test_the_bytes_takeaway_quotes_the_papers_region_from_the_first_check_that_has_one(figure_data):
    checks = figure_data.checks
    bytes_rows = checks[checks["layout"].notna()]
    assert len(bytes_rows) >= 2
    last = bytes_rows.index[-1]
    region = str(bytes_rows["claimed_region"].iloc[0])
    without_last = checks.assign(claimed_region=checks["claimed_region"].where(checks.index != last, None))
    said = stated.bytes_by_layout("DP2·TP2", {}, "agree", without_last, PROFILE).text
    assert f"(paper: {region})" in said


def test_the_pipeline_takeaway_gives_each_claims_verdict(figure_data):
    said = stated.pipeline(figure_data.claims, PROFILE).text
    for cid in ("hybrid_survives_pp", "bubble_hides_step"):
        row = stated.row_of(figure_data.claims, "claim_id", cid, PROFILE)
        assert f"), {row['verdict']}" in said
