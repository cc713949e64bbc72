"""The report's frame: its date is the newest run's, it reads every profile's runs where it promises them, a
profile's view keeps what every view shares (every profile's claims, the original study's tables), an infinite
value counts as missing, one trial's rows are that trial's, and an older folder's absent tables read as empty."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.report.context import newest_recording
from muon_repro.report.data import is_missing, load, rows_of, study_profile

METRICS = Path(__file__).resolve().parents[1] / "metrics"


@pytest.fixture(scope="module")
def everything():
    return load(METRICS)


def test_the_reports_date_is_the_newest_runs():
    runs = pd.DataFrame({"recorded_at": ["2025-03-01T10:00:00", "2025-05-02T09:00:00", None, "2025-04-01T00:00:00"]})
    assert newest_recording(runs) == "2025-05-02T09:00:00"


def test_a_profiles_view_keeps_every_profiles_claims_and_the_studys_tables(everything):
    """The claims table's columns are one per profile, in every view; the original study's tables are its own
    profile's and shown in every view; a view of a profile without runs still describes that profile."""
    study = study_profile(everything)
    view = everything.of_profile("1xH200-nccl")
    assert set(view.claims["profile"]) == set(everything.claims["profile"])
    assert len(view.study_runs) == len(everything.study_runs) and len(view.study_method) == len(everything.study_method)
    assert study == "4xRTXA4000-pcie-nccl" and everything.of_profile(study).described_profile == study


def test_an_infinite_value_is_missing():
    """An infinite ratio (a division by a zero time) is no value the report may print: refused like a missing one."""
    assert is_missing(float("inf")) and is_missing(float("-inf")) and not is_missing(0.0)


def test_rows_of_one_trial_are_that_trials_rows():
    steps = pd.DataFrame({"run": ["a", "a", "a", "b"], "trial": [0, 1, 1, 1], "step": [0, 0, 1, 0]})
    assert rows_of(steps, "steps", "a", trial=1)["step"].tolist() == [0, 1]


def test_a_metrics_folder_written_before_the_optional_tables_reads_them_as_empty(tmp_path):
    """A folder from before the budget match, the pipeline's scale-out or the study's import lacks their tables:
    each is read as empty, with its columns, and the rest as written."""
    from muon_repro.report.data import STUDY_TABLES

    absent = ("budget_match", "pipeline_scale_out", *STUDY_TABLES)
    for f in METRICS.iterdir():
        if f.name.split(".")[0] not in absent:
            (tmp_path / f.name).symlink_to(f)
    data = load(tmp_path)
    assert all(getattr(data, name).empty for name in absent) and not data.runs.empty
    assert {"group", "seed", "adamw_steps"} <= set(data.budget_match.columns)


def test_the_report_reads_every_profiles_runs_where_it_promises_them(committed_report, everything):
    """A8 gives the machine and software of every run, whatever its profile, and the Limitations name the runs of
    the profiles the prose does not describe (read in their own sections): both from every profile's tables, not
    only from the view of the profile the prose describes."""
    described = everything.profiles[0]
    appendix = committed_report.split("### A8. Machine and software", 1)[1]
    others = everything.runs[everything.runs["profile"] != described]
    assert len(others) and all(run in appendix for run in others["run"])
    limits = committed_report.split("## Limitations", 1)[1].split("\n## ", 1)[0]
    for profile in everything.profiles[1:]:
        assert f"the runs of {profile} (" in limits or f", {profile} (" in limits, profile
    assert f"{study_profile(everything)} (the original study's own, nccl on cuda)" in limits


def test_the_summary_names_the_runs_backends_and_leads_the_like_for_like_with_the_described_profile(committed_report, everything):
    """The summary line says each backend on its device ("gloo on cpu"), and the Method's like-for-like paragraph
    opens with the profile the summary, sections and figures describe (the one with most runs)."""
    described = everything.profiles[0]
    runs = everything.runs[everything.runs["profile"] == described]
    backends = ", ".join(sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])}))
    assert f"{len(runs)} runs ({backends}), Muon against AdamW" in committed_report
    assert f"The runs of {described} (the summary, sections and figures)" in committed_report


def test_a_missing_environment_value_is_left_out_not_written_as_text(everything):
    """An environment field recorded without a value is absent from the run's fields (so the Setup says "not
    recorded"), never the text "<NA>"."""
    environment = everything.environment.copy()
    run = str(environment["run"].iloc[0])
    key = str(environment["key"].iloc[0])
    environment.loc[environment.index[0], "value"] = pd.NA
    assert key not in replace(everything, environment=environment).environment_of(run)


def test_tables_without_the_profile_column_are_given_their_machines_profile(tmp_path):
    """Tables written before hardware profiles have no profile column (stated_numbers, keyed by profile, keeps its
    own): each is given the profile the environment table describes, even though another table has the column."""
    from muon_repro.report.data import STUDY_TABLES

    for f in METRICS.glob("*.parquet"):
        if f.stem in STUDY_TABLES:
            continue
        df = pd.read_parquet(f, dtype_backend="numpy_nullable")
        (df if f.stem == "stated_numbers" else df.drop(columns=["profile"], errors="ignore")).to_parquet(tmp_path / f.name)
    data = load(tmp_path)
    assert data.runs["profile"].nunique() == 1 and data.profiles == [str(data.runs["profile"].iloc[0])]
