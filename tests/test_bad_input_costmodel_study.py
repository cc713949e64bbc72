"""Bad input to the cost model's machine profiles, the study's import and fit, and migrate-layout: each is refused
(or, once migrate-layout's moves are made, warned about) with a message naming the file and the field, never a traceback."""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from support.costmodel_profiles import two_core_profile, write_profile_json

from muon_repro.cli import main
from muon_repro.costmodel import profile_ranges as ranges
from muon_repro.costmodel.machine import read_profile
from muon_repro.costmodel.machine_profile import ProfileError
from muon_repro.migrate_layout import stale_record_rows
from muon_repro.rundir import COSTMODEL_DIR, PREDICTIONS_FILE
from muon_repro.study.sources import HUB_REPO, STUDY_FILES, STUDY_PROFILE, import_study, study_folder
from muon_repro.study.tables import _threshold_record, thresholds_record_path
from muon_repro.tables.schemas import SCHEMAS

REPO = Path(__file__).resolve().parents[1]
COMMITTED_STUDY = study_folder(REPO / "traces")
FIRST = sorted(STUDY_FILES)[0]  # the first trace an import reads


def _error_of(argv: list[str], capsys) -> str:
    """The one-line error a command gives for ``argv`` (exit status 2, no traceback)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


# ---------------------------------------------------------------- machine profiles


def test_a_profile_nested_past_the_recursion_limit_is_refused_naming_the_file(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(ProfileError, match="nested deeper than") as err:
        read_profile(path)
    assert str(path) in str(err.value)
    assert str(path) in _error_of(["predict", "--machine", str(path)], capsys)
    assert str(path) in _error_of(["regimes", "--machine", str(path)], capsys)


def test_a_figure_nested_just_under_the_recursion_limit_is_refused_naming_the_file(tmp_path):
    # json parses it, but the error message's repr of it would recurse past the limit
    path = write_profile_json(tmp_path, two_core_profile())
    path.write_text(path.read_text().replace('"two-cores"', "[" * 990 + "]" * 990))
    with pytest.raises(ProfileError, match="nested deeper than") as err:
        read_profile(path)
    assert str(path) in str(err.value)


def test_an_integer_figure_too_large_for_a_float_is_refused_naming_file_and_field(tmp_path, capsys):
    path = write_profile_json(tmp_path, two_core_profile(op_overhead_us=10**400))
    with pytest.raises(ProfileError, match=r"op_overhead_us must be a number in \[0, 10000\] us") as err:
        read_profile(path)
    assert str(path) in str(err.value)
    assert "op_overhead_us" in _error_of(["predict", "--machine", str(path)], capsys)


def test_a_range_compares_integers_exactly_at_any_size():
    ranges.OP_OVERHEAD_US.check("op_overhead_us", 10**4)  # an integer end is in range
    for value in (10**400, -(10**400)):
        with pytest.raises(ProfileError, match="got -?1000"):
            ranges.OP_OVERHEAD_US.check("op_overhead_us", value)


@pytest.mark.parametrize("field", ["efficiency", "calibration"])
@pytest.mark.parametrize("value", [[1], "0.7", 0.7], ids=["list", "string", "number"])
def test_an_object_field_of_another_json_type_is_refused_naming_file_and_field(tmp_path, capsys, field, value):
    path = write_profile_json(tmp_path, two_core_profile(**{field: value}))
    with pytest.raises(ProfileError, match=f"{field} must be a JSON object") as err:
        read_profile(path)
    assert str(path) in str(err.value)
    assert f"{field} must be a JSON object" in _error_of(["predict", "--machine", str(path)], capsys)


def test_a_profile_with_nan_is_still_refused_by_the_figure(tmp_path):
    # the depth check must not read NaN as null (rundir.load_json would): the figure's range names it
    path = write_profile_json(tmp_path, two_core_profile(op_overhead_us=float("nan")))
    with pytest.raises(ProfileError, match="op_overhead_us must be a number.*got nan"):
        read_profile(path)


# ---------------------------------------------------------------- study import


def _damaged(kind: str) -> bytes:
    whole = gzip.compress(b'{"traceEvents": []}' * 1000)
    return {
        "truncated": whole[: len(whole) // 2],  # EOFError
        "bad_header": b"\x1f\x8b" + b"garbage" * 10,  # gzip.BadGzipFile
        "bad_stream": whole[:10] + b"\xff" * 50 + whole[60:],  # zlib.error
    }[kind]


@pytest.mark.parametrize("kind", ["truncated", "bad_header", "bad_stream"])
def test_a_damaged_gzipped_source_trace_is_refused_naming_it(tmp_path, capsys, kind):
    source = tmp_path / "src" / "traces" / "comparison"
    source.mkdir(parents=True)
    bad = source / f"{FIRST}.gz"
    bad.write_bytes(_damaged(kind))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="download it again") as err:
        import_study(tmp_path / "src", out)
    assert str(bad) in str(err.value) and HUB_REPO in str(err.value)
    assert not out.exists()  # nothing written
    assert str(bad) in _error_of(["study", "import", "--from", str(tmp_path / "src"), "--out", str(out)], capsys)


@pytest.fixture
def study_source(tmp_path) -> Path:
    """The committed study traces as a source folder (the Hub's layout, gzipped)."""
    if not all((COMMITTED_STUDY / f"{name}.gz").is_file() for name in STUDY_FILES):
        pytest.fail("the committed traces hold no complete study import")
    source = tmp_path / "src"
    shutil.copytree(COMMITTED_STUDY, source / "traces" / "comparison")
    return source


@pytest.mark.slow  # end to end: imports the study folder (~2.5 s a case)
@pytest.mark.parametrize("blocked", [STUDY_PROFILE, f"{STUDY_PROFILE}/comparison"])
def test_a_file_where_the_import_puts_a_folder_is_refused_naming_it(tmp_path, capsys, study_source, blocked):
    out = tmp_path / "out"
    (out / blocked).parent.mkdir(parents=True, exist_ok=True)
    (out / blocked).write_text("mine")
    with pytest.raises(ValueError, match="is a file, not a folder") as err:
        import_study(study_source, out)
    assert str(out / blocked) in str(err.value)
    assert (out / blocked).read_text() == "mine"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted(
        [blocked, *([STUDY_PROFILE] if "/" in blocked else [])]
    )  # no staged folder left behind
    assert "is a file, not a folder" in _error_of(["study", "import", "--from", str(study_source), "--out", str(out)], capsys)


# ---------------------------------------------------------------- the study fit's threshold record

GARBAGE_RECORDS = {
    "not_utf8": b"\xff\xfe\x00bad\n",
    "empty": b"",
    "unterminated_quote": b'profile,model\n"4x,a\n',
    "other_columns": b"a,b\n1,2\n",
}


@pytest.mark.parametrize("kind", sorted(GARBAGE_RECORDS))
def test_a_damaged_threshold_record_is_refused_naming_it_and_saying_run_study_fit(tmp_path, kind):
    folder = study_folder(tmp_path / "traces")
    record = thresholds_record_path(folder)
    record.parent.mkdir(parents=True)
    record.write_bytes(GARBAGE_RECORDS[kind])
    with pytest.raises(ValueError, match="run `muon-repro study fit` again") as err:
        _threshold_record([folder])
    assert str(record) in str(err.value)
    # as analyze reads it: left out and named with the files it could not read, the rest of the tables written
    left_out = []
    assert _threshold_record([folder], left_out).empty
    (failure,) = left_out
    assert failure.path == str(record) and "run `muon-repro study fit` again" in failure.message


def test_the_committed_threshold_record_reads():
    record = thresholds_record_path(COMMITTED_STUDY)
    if not record.is_file():
        pytest.fail("no committed threshold record")
    frame = _threshold_record([COMMITTED_STUDY])
    assert list(frame.columns) == SCHEMAS["study_costmodel_thresholds"].names and len(frame)


def test_study_fit_replaces_a_damaged_threshold_record_without_reading_it(tmp_path, monkeypatch, study_source):
    from muon_repro.study import costmodel_check
    from muon_repro.study.cli import run_fit

    traces = tmp_path / "traces"
    folder = study_folder(traces)
    shutil.copytree(study_source / "traces" / "comparison", folder)
    record = thresholds_record_path(folder)
    record.parent.mkdir(parents=True)
    record.write_bytes(GARBAGE_RECORDS["not_utf8"])
    # the shift prices the fitted profile with torch's shard plans (seconds); its result is not what is tested
    names = SCHEMAS["study_costmodel_thresholds"].names
    shift = pd.DataFrame([dict.fromkeys(names, 1)])
    monkeypatch.setattr(costmodel_check, "study_threshold_shift", lambda fitted, datasheet: shift)
    assert run_fit(argparse.Namespace(traces=str(traces))) == 0
    assert list(pd.read_csv(record).columns) == names
    assert list(_threshold_record([folder]).columns) == names


# ---------------------------------------------------------------- migrate-layout's record check


def _old_costmodel_tree(tmp_path: Path, record: bytes) -> Path:
    """An old-layout costmodel folder (its profile from machine.json) holding a predictions record."""
    traces = tmp_path / "traces"
    (traces / COSTMODEL_DIR).mkdir(parents=True)
    (traces / COSTMODEL_DIR / "machine.json").write_text(json.dumps({"name": "cpu-2c-gloo"}))
    (traces / COSTMODEL_DIR / PREDICTIONS_FILE).write_bytes(record)
    return traces


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (b'run,path\nx,"' + b"a" * 200_000 + b'"\n', "field larger than field limit"),
        (b"run,path\nx,\xff\xfe\n", "can't decode"),
    ],
    ids=["field_over_csv_limit", "not_utf8"],
)
def test_migrate_layout_moves_then_warns_of_a_record_it_cannot_check(tmp_path, capsys, record, why):
    traces = _old_costmodel_tree(tmp_path, record)
    assert main(["migrate-layout", "--traces", str(traces)]) == 0
    moved = traces / "cpu-2c-gloo" / COSTMODEL_DIR / PREDICTIONS_FILE
    assert moved.read_bytes() == record and not (traces / COSTMODEL_DIR).exists()
    captured = capsys.readouterr()
    assert "1 folder(s) moved" in captured.out
    assert f"warning: could not check {moved}" in captured.err and why in captured.err, captured.err
    assert "Traceback" not in captured.err


def test_stale_record_rows_names_an_unreadable_record(tmp_path):
    traces = _old_costmodel_tree(tmp_path, b"run,path\nx,\xff\n")
    record = traces / COSTMODEL_DIR / PREDICTIONS_FILE
    unreadable: dict[Path, str] = {}
    assert stale_record_rows(traces, [], unreadable) == {}
    assert list(unreadable) == [record] and "can't decode" in unreadable[record]
    with pytest.raises(ValueError, match="can't decode") as err:
        stale_record_rows(traces, [])
    assert str(record) in str(err.value)
