"""The tables of one ``metrics/`` folder are one set: written whole (an interrupted write leaves the
previous set as it was), stamped with one generation id, and refused by every reader when mixed."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from muon_repro.cli import main
from muon_repro.report.data import MixedTables, load
from muon_repro.tables.files import OUTPUT_MARKER
from muon_repro.tables.io import check_tables_out, folder_generation, read_table, table_set_problems, write_tables
from muon_repro.tables.schemas import SCHEMAS, TABLE_NAMES
from muon_repro.tables.stamp import CSV_SHA256_KEY, GENERATION_KEY, table_stamp
from muon_repro.tables.stamp import MixedTables as TableSetError  # the name the tests grew up with


def _runs(names: list[str]) -> pd.DataFrame:
    rows = [
        {c: None for c in SCHEMAS["runs"].names} | {"run": f"g/{n}", "group": "g", "name": n, "step_ms": 10.0 + i}
        for i, n in enumerate(names)
    ]
    return SCHEMAS["runs"].conform(pd.DataFrame(rows))


def table_set(run_names: list[str]) -> dict[str, pd.DataFrame]:
    """Every table, empty but for ``runs`` (the report's load needs nothing more)."""
    return {name: SCHEMAS[name].empty() for name in TABLE_NAMES} | {"runs": _runs(run_names)}


def _generation(path: Path) -> str | None:
    return table_stamp(pq.read_schema(path).metadata).get(GENERATION_KEY)


def _unstamped_copy(src: Path, dest: Path) -> None:
    """``src``'s tables as a writer before generation stamps wrote them."""
    dest.mkdir()
    for path in src.glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata(SCHEMAS[path.stem].arrow_schema().metadata), dest / path.name)
        shutil.copyfile(path.with_suffix(".csv"), dest / f"{path.stem}.csv")


# ---------------------------------------------------------------- one generation, written whole


def test_every_table_carries_the_same_generation_and_its_csv_digest(tmp_path):
    write_tables(table_set(["a", "b"]), tmp_path / "metrics")
    generations = {_generation(tmp_path / "metrics" / f"{name}.parquet") for name in TABLE_NAMES}
    assert len(generations) == 1 and None not in generations
    assert folder_generation(tmp_path / "metrics") == generations.pop()
    assert table_set_problems(tmp_path / "metrics") == []
    assert sorted(p.name for p in (tmp_path / "metrics").iterdir()) == sorted(
        [OUTPUT_MARKER, *(f"{n}{s}" for n in TABLE_NAMES for s in (".csv", ".parquet"))]
    )
    assert [p.name for p in tmp_path.iterdir()] == ["metrics"]  # no staging folder or lock left beside it


def test_the_same_tables_give_the_same_bytes_and_other_tables_another_generation(tmp_path):
    write_tables(table_set(["a", "b"]), tmp_path / "one")
    write_tables(table_set(["a", "b"]), tmp_path / "two")
    write_tables(table_set(["a"]), tmp_path / "three")
    for name in TABLE_NAMES:
        assert (tmp_path / "one" / f"{name}.parquet").read_bytes() == (tmp_path / "two" / f"{name}.parquet").read_bytes()
    assert folder_generation(tmp_path / "one") != folder_generation(tmp_path / "three")


def test_an_interrupted_write_leaves_the_previous_set_whole(tmp_path, monkeypatch):
    out = tmp_path / "metrics"
    write_tables(table_set(["a"]), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real_write, written = pq.write_table, []

    def dies_after_three_tables(table, where, *args, **kwargs):
        if len(written) == 3:
            raise KeyboardInterrupt  # killed midway
        written.append(where)
        real_write(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", dies_after_three_tables)
    with pytest.raises(KeyboardInterrupt):
        write_tables(table_set([f"run{i}" for i in range(10)]), out)
    assert len(written) == 3
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # every table of the previous set, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics"]  # the half-written set is gone
    assert load(out).runs["run"].tolist() == ["g/a"]


def test_a_rewrite_replaces_the_whole_set(tmp_path):
    out = tmp_path / "metrics"
    write_tables(table_set(["a"]), out)
    (out / "stale.parquet").write_bytes((out / "runs.parquet").read_bytes())  # a table the new set does not have
    write_tables(table_set(["a", "b"]), out)
    assert not (out / "stale.parquet").exists()
    assert len({_generation(p) for p in out.glob("*.parquet")}) == 1


def test_a_folder_holding_other_files_is_refused_before_writing(tmp_path):
    out = tmp_path / "metrics"
    write_tables(table_set(["a"]), out)
    (out / "notes.md").write_text("mine")
    with pytest.raises(ValueError, match=r"holds what is not a table \(notes.md\)"):
        write_tables(table_set(["a", "b"]), out)
    assert (out / "notes.md").read_text() == "mine" and read_table(out / "runs.parquet")["run"].tolist() == ["g/a"]


def test_a_tables_folder_may_hold_a_writers_hidden_temporary_file_not_a_visible_one(tmp_path):
    out = tmp_path / "metrics"
    write_tables(table_set(["a"]), out)
    (out / ".runs.parquet.123-0badf00d.tmp").write_bytes(b"half")  # what an interrupted write_atomic leaves
    check_tables_out(out)
    (out / "scratch.tmp").write_bytes(b"mine")
    with pytest.raises(ValueError, match=r"holds what is not a table \(scratch.tmp\)"):
        check_tables_out(out)


def test_a_tables_folder_that_holds_the_working_directory_is_refused_as_such(tmp_path, monkeypatch):
    out = tmp_path / "metrics"
    write_tables(table_set(["a"]), out)
    (out / "work").mkdir()
    monkeypatch.chdir(out / "work")
    with pytest.raises(ValueError, match=r"metrics is \(or holds\) the working directory"):
        check_tables_out(out)


def test_a_folder_without_the_marker_is_ours_only_if_every_csv_has_its_parquet_twin(tmp_path):
    """Tables written before folders carried their writer's marker are recognized by their stamps, and by every CSV
    being a Parquet table's twin: a CSV with no twin is someone else's file, and the folder is not replaced."""
    out = tmp_path / "metrics"
    write_tables(table_set(["a"]), out)
    (out / OUTPUT_MARKER).unlink()
    check_tables_out(out)
    (out / "notes.csv").write_text("mine\n")
    with pytest.raises(ValueError, match="is a folder muon-repro analyze did not write"):
        check_tables_out(out)


def test_a_symlinked_out_keeps_its_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    write_tables(table_set(["a"]), tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real" / "runs.parquet").is_file()


# ---------------------------------------------------------------- readers refuse a mixed set


@pytest.fixture
def mixed(tmp_path) -> Path:
    """The issue's folder: ``runs.parquet`` of a new analysis (1 run), every other table of an old one (10 runs)."""
    write_tables(table_set([f"run{i}" for i in range(10)]), tmp_path / "old")
    write_tables(table_set(["run0"]), tmp_path / "new")
    shutil.copyfile(tmp_path / "new" / "runs.parquet", tmp_path / "old" / "runs.parquet")
    return tmp_path / "old"


def test_the_report_refuses_a_mixed_set_naming_the_table_that_disagrees(mixed):
    with pytest.raises(MixedTables) as info:
        load(mixed)
    message = str(info.value)
    assert str(mixed) in message and "muon-repro analyze" in message
    odd_one = message.split("; ")[1]  # the groups, largest first: the odd one is named alone
    assert odd_one.startswith("generation ") and odd_one.endswith(
        ": runs.parquet. Re-run `muon-repro analyze TRACES --out " + str(mixed) + "` to write them as one set"
    )


def test_the_report_command_exits_2_on_a_mixed_set(mixed, tmp_path, capsys):
    assert main(["figures", "--metrics", str(mixed), "--out", str(tmp_path / "figures")]) == 2
    err = capsys.readouterr().err
    assert "the tables are not one set" in err and "runs.parquet" in err
    assert not (tmp_path / "figures").exists() or not any((tmp_path / "figures").iterdir())


def test_read_table_refuses_a_mixed_set(mixed):
    for name in ("runs", "steps"):
        with pytest.raises(TableSetError, match=r"not one set.*: runs\.parquet\. Re-run `muon-repro analyze"):
            read_table(mixed / f"{name}.parquet")
    assert any("not one set" in p for p in table_set_problems(mixed))


def test_a_table_edited_with_pandas_keeps_its_stamp(tmp_path):
    write_tables(table_set(["a", "b"]), tmp_path / "metrics")
    path = tmp_path / "metrics" / "runs.parquet"
    df = pd.read_parquet(path, dtype_backend="numpy_nullable")
    df.loc[0, "step_ms"] = 99.0
    df.to_parquet(path)
    assert load(tmp_path / "metrics").runs["step_ms"].tolist() == [99.0, 11.0]  # one set still: the edit is the user's


def test_a_csv_from_another_set_is_named(tmp_path):
    write_tables(table_set([f"run{i}" for i in range(10)]), tmp_path / "old")
    write_tables(table_set(["run0"]), tmp_path / "new")
    shutil.copyfile(tmp_path / "new" / "runs.csv", tmp_path / "old" / "runs.csv")
    problems = table_set_problems(tmp_path / "old")
    assert problems == [
        f"{tmp_path / 'old' / 'runs.csv'}: not the CSV file written with runs.parquet (its sha256 differs): "
        "re-run `muon-repro analyze`"
    ]


# ---------------------------------------------------------------- tables written before stamps


def test_a_set_without_any_stamp_is_read_with_a_warning(tmp_path):
    write_tables(table_set(["a"]), tmp_path / "stamped")
    _unstamped_copy(tmp_path / "stamped", tmp_path / "legacy")
    with pytest.warns(UserWarning, match="carry no generation stamp"):
        assert load(tmp_path / "legacy").runs["run"].tolist() == ["g/a"]
    with pytest.warns(UserWarning, match="carry no generation stamp"):
        assert read_table(tmp_path / "legacy" / "runs.parquet")["run"].tolist() == ["g/a"]


def test_one_unstamped_table_among_stamped_ones_is_refused(tmp_path):
    write_tables(table_set(["a"]), tmp_path / "metrics")
    table = pq.read_table(tmp_path / "metrics" / "steps.parquet")
    pq.write_table(table.replace_schema_metadata({}), tmp_path / "metrics" / "steps.parquet")  # written by another tool
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TableSetError, match=r"no generation stamp: steps\.parquet"):
            read_table(tmp_path / "metrics" / "runs.parquet")
        with pytest.raises(MixedTables, match=r"no generation stamp: steps\.parquet"):
            load(tmp_path / "metrics")


def test_pandas_reads_the_stamp_and_the_report_does_not_carry_it(tmp_path):
    write_tables(table_set(["a"]), tmp_path / "metrics")
    attrs = pd.read_parquet(tmp_path / "metrics" / "runs.parquet").attrs  # pandas reads the stamp back as attrs
    assert attrs[GENERATION_KEY] == folder_generation(tmp_path / "metrics") and len(attrs[CSV_SHA256_KEY]) == 64
    assert load(tmp_path / "metrics").runs.attrs == {}  # the report does not carry it along with the data


def test_the_committed_tables_carry_the_schemas_they_are_documented_by():
    """Every committed table's Parquet schema is its schema's today: column names, types, units and descriptions,
    and the table's description. A schema edited without regenerating the tables (``muon-repro run --from analyze``)
    leaves users reading the old text from the file. (The calibration records beside the traces keep the text they
    were recorded with, as every record does.)"""
    from muon_repro.tables.stamp import ATTRS_METADATA_KEY

    root = Path(__file__).resolve().parents[1]
    paths = sorted((root / "metrics").glob("*.parquet"))
    stale = []
    for path in paths:
        written = pq.read_schema(path)
        name = written.metadata[b"table"].decode()
        written = written.with_metadata({k: v for k, v in written.metadata.items() if k != ATTRS_METADATA_KEY})
        if not written.equals(SCHEMAS[name].arrow_schema(), check_metadata=True):
            stale.append(str(path.relative_to(root)))
    assert len(paths) >= 20
    assert not stale, f"regenerate with `muon-repro run --from analyze`: {stale}"


def test_a_table_copied_over_another_is_refused_by_both_names(tmp_path):
    """figures said "metrics table 'runs' has no column(s) runs.optimizer..." for ranks.parquet copied to runs.parquet."""
    REPO = Path(__file__).resolve().parents[1]
    shutil.copy(REPO / "metrics" / "ranks.parquet", tmp_path / "runs.parquet")
    with pytest.raises(ValueError, match=r"runs\.parquet holds the 'ranks' table, not 'runs': a file copied over another"):
        read_table(tmp_path / "runs.parquet", "runs", check_set=False)


def test_a_stamp_nested_too_deeply_reads_as_none():
    """A table whose stamp metadata is a stranger's deep JSON is unstamped, not a RecursionError in report."""
    from muon_repro.tables.stamp import ATTRS_METADATA_KEY, table_stamp

    assert table_stamp({ATTRS_METADATA_KEY: b"[" * 100_000}) == {}


def test_a_table_and_its_csv_twin_are_replaced_together_or_not_at_all(tmp_path, monkeypatch):
    """write_table (calibrate's, predict --validate's) swapped in the Parquet before writing the CSV: an error or
    Ctrl-C while writing the CSV left a new Parquet beside the old CSV."""
    import muon_repro.tables.io as io
    from muon_repro.tables.files import write_atomic_all
    from muon_repro.tables.io import write_table

    row = {"profile": "p", "machine": "m", "device": "cpu", "kind": "kernel", "kernel": "matmul", "dtype": "fp32"}
    schema = SCHEMAS["calibration"]
    write_table([row | {"seconds": 1.0}], schema, tmp_path, "machine.calibration")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def csv_fails(contents):
        def fail(tmp):
            raise KeyboardInterrupt

        return write_atomic_all({path: fail if path.suffix == ".csv" else c for path, c in contents.items()})

    monkeypatch.setattr(io, "write_atomic_all", csv_fails)
    with pytest.raises(KeyboardInterrupt):
        write_table([row | {"seconds": 2.0}], schema, tmp_path, "machine.calibration")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # both old, no temporary file left


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_table_in_a_set_is_named(tmp_path, damage):
    """bundle checks that the tables are one set from their footers: pyarrow's "Parquet magic bytes not found in
    footer" named no file."""
    write_tables(table_set(["a", "b"]), tmp_path / "metrics")
    runs = tmp_path / "metrics" / "runs.parquet"
    runs.write_bytes(runs.read_bytes()[:-100] if damage == "truncated" else b"")
    with pytest.raises(ValueError, match=f"{runs}: .*re-run `muon-repro analyze`"):
        table_set_problems(tmp_path / "metrics")
