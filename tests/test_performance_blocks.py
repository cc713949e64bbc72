"""The README's and docs/performance.md's speed figures are the benchmark's result file's, end to end as a user
runs it, never the in-process row, with the machine they were measured on (issue 47, item 1)."""

from __future__ import annotations

import json

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
