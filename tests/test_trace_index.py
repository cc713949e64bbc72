"""The traces' index (``trace_files``): one row per trace a table was made from, with a path that finds it in a
download, and a verify that fails when the index and the bundle's traces disagree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.analysis.trace_files import READ_BY_ANALYSIS, READ_BY_STUDY, dataset_path
from muon_repro.dataset.verify import check_trace_index
from muon_repro.rundir import trial_folders
from muon_repro.study.sources import GROUP, STUDY_PROFILE
from muon_repro.study.tables import study_trace_files
from muon_repro.table_set import build_tables

REPO = Path(__file__).resolve().parents[1]
RUN = "cpu-2c-gloo/comparison/muon_dp2_tp2"


def _committed_trial() -> Path:
    folders = trial_folders(REPO / "traces").get(RUN)
    if not folders:
        pytest.fail(f"the committed traces hold no {RUN}")
    return folders[0]


def test_the_index_names_every_rank_of_an_analyzed_run_from_the_folder_above(tmp_path):
    trial = _committed_trial()
    copy = tmp_path / "downloaded" / "traces" / RUN / trial.name
    shutil.copytree(trial, copy)
    index = build_tables([tmp_path / "downloaded" / "traces"], workers=1)["trace_files"]
    files = sorted(copy.glob("rank*.json*"))
    assert len(index) == len(files) == 4
    assert list(index["path"]) == [f"traces/{RUN}/{trial.name}/{f.name}" for f in files]  # no temporary folder in it
    assert list(index["rank"]) == [0, 1, 2, 3]
    assert list(index["bytes"]) == [f.stat().st_size for f in files]
    assert set(index["run"]) == {RUN} and set(index["read_by"]) == {READ_BY_ANALYSIS}


def test_the_study_traces_are_indexed_with_the_rank_their_names_hold():
    study = REPO / "traces" / STUDY_PROFILE / GROUP
    if not study.is_dir():
        pytest.fail("the committed traces hold no copy of the original study's")
    every = study_trace_files([REPO / "traces"])  # the study's own traces and the runs of its protocol recorded here
    assert {f.read_by for f in every} == {READ_BY_STUDY}
    files = [f for f in every if f.profile == STUDY_PROFILE]
    assert len(files) == len(list(study.glob("trace_*_rank*.json*")))
    by_name = {f.file.name: f for f in files}
    rank3 = by_name["trace_muon_dp2_tp2_rank3.json.gz"]
    assert (rank3.rank, rank3.run) == (3, f"{STUDY_PROFILE}/{GROUP}/muon_dp2_tp2")


def test_a_trace_given_as_a_file_is_indexed_by_its_name(tmp_path):
    lone = tmp_path / "rank0.json"
    lone.write_text("{}")
    assert dataset_path(lone, [lone]) == "rank0.json"
    assert dataset_path(tmp_path / "a" / "b.json", [tmp_path]) == f"{tmp_path.name}/a/b.json"


def test_the_committed_index_and_traces_name_the_same_files():
    index = pd.read_parquet(REPO / "metrics" / "trace_files.parquet")
    on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / "traces").rglob("*.json.gz")}
    assert set(index["path"]) == on_disk
    assert index[["run", "trial", "rank", "path"]].duplicated().sum() == 0


def _report():
    lines: list[tuple[str, bool]] = []
    return lines, lambda line, ok: lines.append((line, ok))


def test_verify_names_an_indexed_trace_that_is_missing_and_a_trace_not_indexed(tmp_path):
    (tmp_path / "metrics").mkdir()
    pd.DataFrame({"path": ["traces/p/g/r/trial0/rank0.json.gz", "traces/p/g/r/trial0/rank1.json.gz"]}).to_parquet(
        tmp_path / "metrics" / "trace_files.parquet"
    )
    lines, report = _report()
    check_trace_index(tmp_path, ["traces/p/g/r/trial0/rank0.json.gz", "traces/p/g/x/trial0/rank0.json.gz"], report)
    failed = [line for line, ok in lines if not ok]
    assert any("rank1.json.gz, which is not in the bundle" in line for line in failed)
    assert any("traces/p/g/x/trial0/rank0.json.gz is not in metrics/trace_files.parquet" in line for line in failed)
    lines, report = _report()
    check_trace_index(tmp_path, ["traces/p/g/r/trial0/rank0.json.gz", "traces/p/g/r/trial0/rank1.json.gz"], report)
    assert lines == [("trace index: metrics/trace_files.parquet names the bundle's 2 traces", True)]


def test_the_card_shows_the_index_with_a_run_it_holds():
    card = (REPO / "dataset_card.md").read_text(encoding="utf-8")
    index = pd.read_parquet(REPO / "metrics" / "trace_files.parquet")
    shown = card.split('index["run"] == "', 1)[1].split('"', 1)[0]
    assert shown in set(index["run"])
    assert "- config_name: trace_files" in card
