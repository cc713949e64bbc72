"""Sizes are bounded where they enter: a table is measured from its footer before it is loaded, and the shape
flags of ``predict``, ``bench custom`` and ``calibrate`` refuse a model or a world no one trains (docs/limits.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from muon_repro.bench.configs import SIZE_LIMITS, BenchConfig
from muon_repro.cli import main
from muon_repro.costmodel.calibrate import MAX_CALIBRATION_RANKS, _check_ranks
from muon_repro.hardware import profile_problems
from muon_repro.tables.io import read_table
from muon_repro.tables.limits import MAX_TABLE_COLUMNS, MAX_TABLE_ROWS, table_size_problem
from tools.cli_fuzz import repeat_first_row

REPO = Path(__file__).resolve().parents[1]


def _many_rows(path: Path, rows: int) -> Path:
    """A losses table whose few kilobytes hold ``rows`` copies of one row (dictionary and run-length encoded)."""
    repeat_first_row(REPO / "metrics" / "losses.parquet", path, rows)
    return path


def test_a_small_file_that_promises_too_many_rows_is_refused_before_it_is_loaded(tmp_path):
    metrics = tmp_path / "metrics"
    shutil.copytree(REPO / "metrics", metrics)
    big = _many_rows(metrics / "losses.parquet", MAX_TABLE_ROWS + 1)
    assert big.stat().st_size < 4 << 20
    problem = table_size_problem(big)
    assert problem is not None and str(big) in problem and f"{MAX_TABLE_ROWS + 1:,} rows" in problem
    with pytest.raises(ValueError, match="past the limit of 5,000,000 rows"):
        read_table(big)
    assert any("past the limit" in p for p in profile_problems(metrics))  # bundle and verify say so too


def test_a_table_at_its_limits_is_read(tmp_path):
    assert table_size_problem(REPO / "metrics" / "timeline.parquet") is None
    wide = tmp_path / "wide.parquet"
    pq.write_table(pa.table({f"c{i}": [1] for i in range(MAX_TABLE_COLUMNS + 1)}), wide)
    assert "1,025 columns" in table_size_problem(wide)


@pytest.mark.parametrize(("content", "said"), [(b"PAR", "no Parquet file"), (b"x" * 64, "not a Parquet file")])
def test_a_file_that_is_no_parquet_is_named(tmp_path, content, said):
    path = tmp_path / "runs.parquet"
    path.write_bytes(content)
    assert said in table_size_problem(path)


def test_a_footer_that_claims_a_huge_size_is_refused_unread(tmp_path):
    path = tmp_path / "runs.parquet"
    path.write_bytes(b"PAR1" + b"\0" * 16 + (1 << 30).to_bytes(4, "little") + b"PAR1")
    assert "a footer of 1,073,741,824 bytes" in table_size_problem(path)


@pytest.mark.parametrize(
    ("field", "flag"), [("hidden", "--hidden"), ("n_layers", "--layers"), ("vocab_size", "--vocab"), ("dp", "--dp")]
)
def test_a_run_shape_past_its_limit_is_refused_naming_the_flag(field, flag):
    fields = dict(group="custom", name="x", optimizer="muon", dp=1, tp=1, preset="small", tokens_per_step=1024, seq_len=128)
    fields[field] = SIZE_LIMITS[field] + 1
    with pytest.raises(ValueError, match=f"{field}={SIZE_LIMITS[field] + 1:,} \\({flag}\\) is past the limit"):
        BenchConfig(**fields)


def test_predict_refuses_a_huge_model_in_one_line(capsys):
    code = main(
        ["predict", "--machine", "h100-8x-nvlink", "--optimizer", "muon", "--dp", "1", "--tp", "1", "--hidden", str(2**40)]
        + ["--layers", "2", "--heads", "2", "--tokens-per-step", "1024", "--seq-len", "128"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "(--hidden) is past the limit of 131,072" in err and "Traceback" not in err


def test_calibrate_refuses_more_processes_than_a_machine_holds():
    assert _check_ranks((2, MAX_CALIBRATION_RANKS)) == (2, MAX_CALIBRATION_RANKS)
    with pytest.raises(ValueError, match="--ranks 1000 is past the limit of 64"):
        _check_ranks((2, 1000))
