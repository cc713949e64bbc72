"""The README's and docs/performance.md's speed figures are the benchmark's result file's, end to end as a user
runs it, never the in-process row, with the machine they were measured on (issue 47, item 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muon_repro.report.performance_blocks import load_benchmark, performance_table, readme_paragraph
from tools.analysis_benchmark import Row, result_record
from tools.bench_process import Measurement

INFO = {"size_bytes": 932_000_000, "events": 3_800_000, "copies": 140, "source": "/x/hta_a100_nccl_ddp_rank0.json.gz"}


def _rows() -> list[Row]:
    def runs(*walls: float, rss: int = 400_000_000) -> list[Measurement]:
        return [Measurement(wall_s=w, peak_rss_bytes=rss, result={}) for w in walls]

    return [
        Row("in-process", "plain", "read_trace + analyze_trace, 2 processes", runs(1.5, 1.6, 1.7)),
        Row("end to end", "plain", "muon-repro analyze --out DIR (default processes)", runs(2.4, 2.5, 2.6), default=True),
        Row("end to end", "plain", "muon-repro analyze --workers 1", runs(3.5, 3.6, 3.7)),
        Row("HTA", "plain", "parse_trace_file", runs(55.0, rss=4_800_000_000)),
    ]


def test_the_paragraph_quotes_the_end_to_end_row_and_the_machine():
    record = result_record(INFO, _rows(), "2026-11-29")
    text = readme_paragraph(record)
    assert "end to end (start, read, analyze, write the tables) in 2.50 s, 373 MB/s: 22.0x" in text
    assert "1.60" not in text and "582 MB/s" not in text  # the in-process row is never quoted as end to end
    assert "(55.0 s)" in text and "400 MB against 4.8 GB" in text and "with one process 259 MB/s" in text
    assert f"on {record['machine']['cpus']} cores" in text and "2026-11-29" in text and "(its targets met)" in text
    table = performance_table(record)
    assert "| **ours end to end, plain: muon-repro analyze --out DIR (default processes)** | **3** | **2.50** |" in table
    assert "end to end >= 20x faster than HTA: 22x, met" in table


def test_a_missed_target_is_said(tmp_path):
    rows = _rows()
    rows[1] = Row("end to end", "plain", rows[1].how, [Measurement(wall_s=3.2, peak_rss_bytes=400_000_000, result={})], True)
    record = result_record(INFO, rows, "2026-11-29")
    assert "a target missed" in readme_paragraph(record) and "MISSED" in performance_table(record)


def test_a_file_that_is_no_result_is_refused_naming_it(tmp_path):
    path = tmp_path / "analysis_benchmark.json"
    path.write_text(json.dumps({"rows": [{"kind": "in-process", "trace": "plain"}]}))
    with pytest.raises(ValueError, match="analysis_benchmark.json: no default end-to-end row"):
        load_benchmark(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not the benchmark's result file"):
        load_benchmark(path)


def test_the_cost_models_error_is_reported_per_grid_with_its_held_out_runs():
    import pandas as pd

    from muon_repro.report.costmodel_error import grid_kind, prediction_summary

    assert [grid_kind(*g) for g in ((1, 1, 1), (4, 1, 1), (1, 4, 1), (2, 2, 1), (1, 1, 4), (2, 2, 2))] == [
        "one device",
        "DP",
        "TP",
        "DP·TP",
        "PP",
        "PP",
    ]
    predictions = pd.DataFrame(
        {
            "run": ["p/r/a", "p/r/b", "p/r/c", "p/r/d"],
            "machine": "m",
            "dp": [2, 1, 1, 4],
            "tp": [2, 4, 4, 1],
            "pp": [1, 1, 1, 1],
            "step_rel_error": [0.02, -0.30, 0.05, 0.10],
            "optimizer_rel_error": [0.1, 0.1, 0.1, 0.1],
            "held_out": [False, True, False, False],
        }
    )
    text = prediction_summary(predictions)
    assert "TP: 2 runs, median 17.5%, worst 30.0%; held out: 1, worst 30.0%" in text  # not hidden by a pooled median
    assert "DP·TP: 1 run, median 2.0%, worst 2.0%; none held out" in text and "DP: 1 run," in text


def _priced_runs():
    """Three runs priced by the cost model: one held out; the largest |error| is an underestimate (-40%)."""
    import pandas as pd

    return pd.DataFrame(
        {
            "run": ["p/r/a", "p/r/b", "p/r/c"],
            "recorded_on": ["2026-11-29"] * 3,
            "machine": "m",
            "measured_step_ms": [100.0, 200.0, 300.0],
            "predicted_step_ms": [110.0, 120.0, 330.0],
            "step_rel_error": [0.10, -0.40, 0.10],
            "profile_step_rel_error": [None, None, None],
            "measured_optimizer_ms": [10.0, 20.0, 30.0],
            "predicted_optimizer_ms": [12.0, 22.0, 27.0],
            "optimizer_rel_error": [0.2, 0.1, -0.1],
            "held_out": [False, True, True],
        }
    )


def test_the_prediction_rows_put_the_measured_step_beside_the_predicted_one():
    """Each row: run, day, measured step (ms), predicted step (ms), its error: the measured column is the measurement."""
    from muon_repro.report.costmodel_error import prediction_rows

    rows = prediction_rows(_priced_runs())
    assert [row[2:5] for row in rows] == [
        ["100", "110", "+10%"],
        ["200", "120", "-40% (held out)"],
        ["300", "330", "+10% (held out)"],
    ]
    assert [row[6:9] for row in rows][0] == ["10", "12", "+20%"]


def test_a_held_out_run_is_marked_as_the_predictions_table_stores_it():
    """The table's held_out is a nullable boolean, which reads back as numpy's bool, never ``True`` itself: the
    appendix marked no run held out while the summary counted 16. A missing cell is not held out."""
    import pandas as pd

    from muon_repro.report.costmodel_error import prediction_rows
    from muon_repro.tables.io import read_table

    stored = _priced_runs().assign(held_out=pd.array([False, True, None], dtype="boolean"))
    assert [row[4] for row in prediction_rows(stored)] == ["+10%", "-40% (held out)", "+10%"]
    committed = read_table(Path(__file__).resolve().parents[1] / "metrics" / "predictions.parquet")
    marked = sum(row[4].endswith("(held out)") for row in prediction_rows(committed))
    assert marked == int(committed["held_out"].fillna(False).astype(bool).sum()) > 0


def test_the_prediction_summary_names_the_largest_error_either_way_and_the_held_out_range():
    """The worst step error is the largest in size (an underestimate of -40% beats +10%); the held-out runs' errors
    are given from their lowest to their highest."""
    from muon_repro.report.costmodel_error import prediction_summary

    text = prediction_summary(_priced_runs())
    assert "worst -40.0% (p/r/b)" in text
    assert "On the 2 held-out runs (never tuned on): step time median |error| 25.0%, from -40.0% to +10.0%." in text
