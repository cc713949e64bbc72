"""What ``muon-repro analyze`` reads of the original study's traces: a damaged one costs its run alone (named, exit 1,
everything else written), and a file given on the command line names no folder around it.

The study's traces here are a few of the committed ones (the smallest runs), copied beside their provenance file.
"""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest
from test_analysis_inputs import write_run

from muon_repro.analysis import batch_read
from muon_repro.analysis.batch_read import TraceFailure
from muon_repro.cli import main
from muon_repro.rundir import STUDY_PROVENANCE_FILE, study_folders
from muon_repro.study.sources import study_folder
from muon_repro.study.tables import StudyRunLeftOut, study_tables

REPO = Path(__file__).resolve().parents[1]
COMMITTED_STUDY = study_folder(REPO / "traces")
RUNS = {"adamw": 4, "adamw_FULLSTEP_async": 1}  # run -> its ranks: the two smallest of the study's runs
DAMAGED = "trace_adamw_rank1.json.gz"


def _study_copy(traces: Path) -> Path:
    """A study folder under ``traces`` holding :data:`RUNS` and the provenance file that marks it."""
    folder = study_folder(traces)
    folder.mkdir(parents=True)
    shutil.copy2(COMMITTED_STUDY / STUDY_PROVENANCE_FILE, folder)
    for run, ranks in RUNS.items():
        for rank in range(ranks):
            shutil.copy2(COMMITTED_STUDY / f"trace_{run}_rank{rank}.json.gz", folder)
    return folder


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:5000])


def _analyze(paths: list[Path], out: Path) -> int:
    return main(["analyze", *map(str, paths), "--out", str(out), "--workers", "1"])


# ---------------------------------------------------------------- a damaged trace of the study


def test_a_damaged_study_trace_leaves_its_run_out_names_it_and_exits_1(tmp_path, capsys):
    folder = _study_copy(tmp_path / "traces")
    _truncate(folder / DAMAGED)
    assert _analyze([tmp_path / "traces"], tmp_path / "metrics") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if DAMAGED in line]
    assert line.startswith(f"muon-repro analyze: error: {folder / DAMAGED}: ")
    assert "study run 4xRTXA4000-pcie-nccl/comparison/adamw is left out" in line and "muon-repro study import" in line
    # everything else is written: the other run's rows, and no file of the run left out in the traces' index
    runs = pd.read_csv(tmp_path / "metrics" / "study_runs.csv")
    assert runs["name"].tolist() == ["adamw_FULLSTEP_async"]
    indexed = pd.read_csv(tmp_path / "metrics" / "trace_files.csv")["path"].tolist()
    assert indexed == [f"traces/{folder.relative_to(tmp_path / 'traces').as_posix()}/trace_adamw_FULLSTEP_async_rank0.json.gz"]


def test_every_study_run_damaged_still_writes_the_other_tables(tmp_path, capsys):
    folder = _study_copy(tmp_path / "traces")
    for run, ranks in RUNS.items():
        (folder / f"trace_{run}_rank0.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [}'))
    assert _analyze([tmp_path / "traces"], tmp_path / "metrics") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("is left out of the study tables") == len(RUNS)
    assert pd.read_csv(tmp_path / "metrics" / "study_runs.csv").empty


def test_study_tables_name_the_run_left_out_in_the_list_given_else_in_a_warning(tmp_path):
    folder = _study_copy(tmp_path / "traces")
    _truncate(folder / DAMAGED)
    left_out: list[TraceFailure] = []
    tables = study_tables([folder], left_out=left_out)
    assert tables["study_runs"]["name"].tolist() == ["adamw_FULLSTEP_async"]
    assert [f.path for f in left_out] == [str(folder / DAMAGED)]
    with pytest.warns(StudyRunLeftOut, match=f"{DAMAGED}: .*study run .*/adamw is left out"):
        study_tables([folder])


@pytest.mark.slow
def test_reading_processes_give_what_one_process_gives(tmp_path, monkeypatch):
    """The study-protocol runs a machine records are read in processes: the same tables, the same run left out, and
    a reading process's warning raised here, as when this process reads them all."""
    traces = tmp_path / "traces"
    folder = _study_copy(traces)
    _truncate(folder / DAMAGED)
    warned = folder / "trace_adamw_FULLSTEP_async_rank0.json.gz"  # an event without a time: dropped, with a warning
    doc = json.loads(gzip.decompress(warned.read_bytes()))
    doc["traceEvents"].append({"ph": "X", "name": "odd", "ts": "soon", "dur": 1, "pid": 0, "tid": 0})
    warned.write_bytes(gzip.compress(json.dumps(doc).encode()))
    protocol = REPO / "traces" / "cpu-2c-gloo" / "study_protocol" / "adamw_FULLSTEP"  # recorded here: a grid, gloo
    for trial in ("trial0", "trial1"):
        shutil.copytree(protocol / trial, traces / "cpu-2c-gloo" / "study_protocol" / "adamw_FULLSTEP" / trial)
    monkeypatch.setattr(batch_read, "SMALL_TOTAL_BYTES", 0)  # a few megabytes: read in processes all the same

    read: dict[int, tuple[dict[str, pd.DataFrame], list[str], list[str]]] = {}
    for workers in (1, 2):
        left_out: list[TraceFailure] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tables = study_tables([traces], left_out=left_out, workers=workers)
        read[workers] = tables, [f.message for f in left_out], [str(w.message) for w in caught]

    (one, left_one, said_one), (two, left_two, said_two) = read[1], read[2]
    assert sorted(one["study_runs"]["run"]) == [
        "4xRTXA4000-pcie-nccl/comparison/adamw_FULLSTEP_async",
        "cpu-2c-gloo/study_protocol/adamw_FULLSTEP",
        "cpu-2c-gloo/study_protocol/adamw_FULLSTEP",
    ]
    for name in one:
        pd.testing.assert_frame_equal(two[name], one[name], obj=name)
    assert left_two == left_one and len(left_one) == 1 and DAMAGED in left_one[0]
    assert said_two == said_one and [m for m in said_one if "'odd': ts is missing" in m]


# ---------------------------------------------------------------- a file names itself alone


def test_a_file_names_no_study_run_of_the_folders_around_it(tmp_path, capsys):
    write_run(tmp_path / "bench" / "g" / "n" / "trial0", dp=1)
    around = tmp_path / "t5"
    around.mkdir()
    lone = around / "lone_rank0.json.gz"
    shutil.copy2(tmp_path / "bench" / "g" / "n" / "trial0" / "rank0.json.gz", lone)
    _study_copy(around / "deep")
    assert study_folders([lone]) == []
    assert _analyze([lone], tmp_path / "metrics") == 0
    assert "Traceback" not in capsys.readouterr().err
    assert pd.read_csv(tmp_path / "metrics" / "study_runs.csv").empty
    assert pd.read_csv(tmp_path / "metrics" / "trace_files.csv")["path"].tolist() == ["lone_rank0.json.gz"]


def test_a_study_trace_given_as_a_file_names_its_own_folder_only(tmp_path):
    folder = _study_copy(tmp_path / "traces")
    nested = _study_copy(folder / "deeper")  # a study folder below it is not the file's
    assert study_folders([folder / DAMAGED]) == [folder]
    assert study_folders([folder / STUDY_PROVENANCE_FILE]) == []  # not a trace of the study
    assert study_folders([folder]) == [folder]  # a folder is read as it always was: itself, when it is one
    assert set(study_folders([tmp_path])) == {folder, nested}


def test_a_protocol_trial_without_its_traces_is_left_out_by_folder(tmp_path, capsys):
    """A trial of the study's protocol whose traces are gone stopped analyze with an IndexError traceback."""
    committed = REPO / "traces" / "cpu-2c-gloo" / "study_equal_work" / "adamw"
    trial = tmp_path / "traces" / "cpu-2c-gloo" / "study_equal_work" / "adamw" / "trial0"
    shutil.copytree(committed / "trial0", trial)
    for trace in trial.glob("rank*.json.gz"):
        trace.unlink()
    assert _analyze([tmp_path / "traces"], tmp_path / "metrics") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{trial}: no trace file" in err, err
    assert "study run cpu-2c-gloo/study_equal_work/adamw (trial 0) is left out" in err
