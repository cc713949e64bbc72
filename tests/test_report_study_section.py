"""The study section's tables and sentence say what the study tables hold: each number in its unit, each column
from its own field, each count over the study's own runs. Built from the committed tables, with the rows a test
needs edited in place (no figure drawn, no process started)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.report.claims_section import claim_measured
from muon_repro.report.data import ReportData, is_missing, load, study_profile
from muon_repro.report.study_section import costmodel_rows, study_claims, study_section, study_sentence

METRICS = Path(__file__).resolve().parents[1] / "metrics"
# How the protocols table heads each set of study_protocols (its group)
PROTOCOL_LABELS = {
    "comparison": "the study's traces",
    "study_protocol": "its protocol, recorded here",
    "study_equal_work": "equal work, recorded here",
    "study_protocol_1rank": "its protocol on one rank",
}


@pytest.fixture(scope="module")
def everything() -> ReportData:
    return load(METRICS)


def _with_study_claims(data: ReportData, **values: tuple[float, bool]) -> ReportData:
    """``data`` whose study-profile claims ``claim_id=(study_method_value, study_method_rebuilt)``."""
    study = study_profile(data)
    claims = data.claims.copy()
    for claim_id, (value, rebuilt) in values.items():
        at = (claims["claim_id"] == claim_id) & (claims["profile"] == study)
        claims.loc[at, "study_method_value"] = value
        claims.loc[at, "study_method_rebuilt"] = rebuilt
    return replace(data, claims=claims)


def test_the_studys_method_writes_shares_and_changes_in_percent_and_ratios_as_multiples(everything):
    """The claims row's study-method cell: a fraction or a change is a percentage (0.011 is 1.10%, not 0.01%), a
    ratio a multiple, each marked rebuilt or not as the claims table says."""
    data = _with_study_claims(
        everything,
        optimizer_share=(0.011, True),
        latency_overhead=(0.05, False),
        comm_time_dp2_tp2=(0.5676, True),
    )
    method = {c["id"]: c["method"] for c in study_claims(data)}
    assert method["optimizer_share"] == "1.10% (rebuilt)"
    assert method["latency_overhead"] == "5.00% (not rebuilt)"
    assert method["comm_time_dp2_tp2"] == "0.568× (rebuilt)"


def test_the_study_sentence_counts_the_numbers_rebuilt_and_the_studys_own_runs(everything):
    """The sentence the abstract opens with: how many published numbers the study's method rebuilds (those that
    match, not every row), over how many of the study's own runs (not the protocol runs recorded here, which share
    the study_runs table), and the claims decided on them, never those not measured."""
    method = everything.study_method.copy()
    matches = pd.array([i % 3 != 0 for i in range(len(method))], dtype="boolean")
    matches[1] = pd.NA  # a number whose match is unknown is not counted as rebuilt
    method["rebuilt_matches"] = matches
    rebuilt = int(matches.fillna(False).sum())
    own = everything.study_runs[everything.study_runs["profile"] == study_profile(everything)]
    assert 0 < rebuilt < len(method) and len(own) < len(everything.study_runs)
    data = replace(everything, study_method=method)
    sentence = study_sentence(data)
    assert f"its {len(own)} published runs" in sentence
    assert f"its method rebuilds {rebuilt} of its {len(method)} published numbers" in sentence
    claims = study_claims(data)
    assert any(c["verdict"] == "not measured" for c in claims)
    for c in claims:
        said = f"{c['measured']}, {c['verdict']}"
        assert (said in sentence) == (c["verdict"] not in ("not measured", "not comparable here")), said


def test_the_method_table_reads_each_column_from_its_own_field(everything):
    """Published, rebuilt (the 5-step sum), whether they match, rebuilt per step and measured per step are five
    fields of study_method: each column shows its own, "no" where the rebuilt number does not match."""
    method = everything.study_method.copy()
    first, second = method.index[:2]
    method.loc[first, ["unit", "published", "rebuilt", "rebuilt_per_step", "measured_per_step"]] = ["ms", 120, 100, 20, 7]
    method.loc[first, "rebuilt_matches"] = False
    method.loc[second, "rebuilt_matches"] = True
    rows = study_section(replace(everything, study_method=method))["method_rows"]
    assert rows[0][2:6] == ["120.00 ms", "100.00 ms", "no", "20.00 ms"]
    assert rows[0][6].startswith("7.00 ms")
    assert rows[1][4] == "yes"


def test_the_runs_table_sends_megabytes_of_a_million_bytes(everything):
    """The runs table's header says MB: 2,500,000 ring bytes are 2.5 MB (2.4 in MiB); ranks traced of the world."""
    study = study_profile(everything)
    runs = everything.study_runs.copy()
    first = runs.index[runs["profile"] == study][0]
    runs.loc[first, ["ring_bytes_per_step", "ranks_traced", "world_size"]] = [2_500_000, 2, 4]
    section = study_section(replace(everything, study_runs=runs))
    assert section["runs_header"][4] == "MB sent / rank / step"
    row = section["runs_rows"][0]
    assert (row[2], row[4]) == ("2 of 4", "2.5")


def test_the_protocols_table_marks_unequal_work_and_rounds_only_where_the_table_says(everything):
    """A cell says "unequal work" only where study_protocols.equal_work is false, "(N rounds)" only for more than one
    round (the study's own traces are one recording), and the last column is our benchmark's, the profile with most
    runs."""
    section = study_section(everything)
    protocols = everything.study_protocols
    columns = section["protocols_header"][1:-1]
    most = everything.runs["profile"].astype(str).value_counts().idxmax()
    assert section["protocols_header"][-1] == f"our benchmark ({most})"
    claims = everything.claims
    for claim_id, row in zip(dict.fromkeys(protocols["claim_id"]), section["protocols_rows"]):
        mine = claims[(claims["claim_id"] == claim_id) & (claims["profile"] == most)]
        assert row[-1] == claim_measured(mine.iloc[0])
        for header, cell in zip(columns, row[1:-1]):
            profile = header.rsplit("(", 1)[1].rstrip(")")
            at = protocols[(protocols["claim_id"] == claim_id) & (protocols["profile"] == profile)]
            (match,) = [r for _, r in at.iterrows() if header.startswith(PROTOCOL_LABELS[str(r["group"])])]
            equal = match["equal_work"]
            assert ("unequal work" in cell) == (not is_missing(equal) and not bool(equal)), cell
            rounds = int(match["rounds"])
            assert (f"({rounds} rounds)" in cell) == (rounds > 1) and "(1 rounds)" not in cell, cell


def test_the_cost_model_errors_are_summed_up_on_the_rows_each_figure_is_of(everything):
    """The median and worst errors before and after the fit are over the rows the fit was made on (a median, not
    the mean: 10%, 40% and 20% have median 20%, mean 23%); the held-out rows, those it was not, are counted and their
    median error after the fit given apart. Each error keeps its sign (under or over the measurement), and the
    thresholds' shift states its level in percent."""
    table = pd.DataFrame(
        {
            "run": ["study/adamw", "study/adamw", "study/muon", "study/muon"],
            "quantity": ["optimizer", "fwd_bwd", "optimizer", "fwd_bwd"],
            "measured_ms": [1.0, 2.0, 3.0, 4.0],
            "datasheet_ms": [1.1, 1.2, 3.6, 6.0],
            "datasheet_rel_error": [0.1, -0.4, 0.2, 0.5],
            "fitted_ms": [1.01, 1.9, 3.06, 2.4],
            "fitted_rel_error": [0.01, -0.05, 0.02, -0.4],
            "fitted_on": pd.array([True, True, True, False], dtype="boolean"),
        }
    )
    shift = pd.DataFrame(
        {
            "model": ["m"],
            "metric": ["optimizer_share"],
            "level": [0.011],
            "datasheet_tokens_per_step": [635_425.9],
            "fitted_tokens_per_step": [517_860.4],
            "ratio": [0.8149],
        }
    )
    said = costmodel_rows(replace(everything, study_costmodel=table, study_costmodel_thresholds=shift))
    assert (said["median_before"], said["worst_before"]) == ("20%", "40%")
    assert (said["median_after"], said["worst_after"]) == ("2%", "5%")
    assert (said["fitted_rows"], said["held_out"], said["held_out_median"]) == ("3", "1", "40%")
    assert [r[4] for r in said["rows"]] == ["+10%", "-40%", "+20%", "+50%"]
    assert said["shift_rows"] == [["m", "optimizer_share", "1.1%", "635,426", "517,860", "0.81×"]]


def test_the_study_sentence_counts_runs_not_recordings_and_reads_the_ranks_and_backend(everything):
    """A study run recorded twice is one run; the ranks and backend are study_runs', not a fixed '4 GPUs, NCCL'."""
    runs = everything.study_runs
    own = runs[runs["profile"] == study_profile(everything)]
    again = own.iloc[:1].assign(trial=1)
    sentence = study_sentence(replace(everything, study_runs=pd.concat([runs, again], ignore_index=True)))
    assert f"(its {own['run'].nunique()} published runs, 4 GPUs, NCCL)" in sentence
    eight = runs.assign(world_size=runs["world_size"].where(runs["profile"] != study_profile(everything), 8))
    assert "published runs, 8 GPUs, NCCL)" in study_sentence(replace(everything, study_runs=eight))
