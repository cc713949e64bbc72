"""Reader processes started before their file is known (analyze, one large plain trace) read it as the ones a read
starts itself, and end with the process when no file comes."""

from __future__ import annotations

import json

import pytest

from muon_repro.analysis import parallel_scan
from muon_repro.analysis.reader import read_trace


def _trace(path, n: int = 20_000):
    event = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 1.0}
    events = [{**event, "name": f"op{i % 7}", "ts": float(i)} for i in range(n)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.slow
def test_prestarted_readers_read_the_file_as_the_others_do(tmp_path):
    path = _trace(tmp_path / "rank0.json")
    sequential = read_trace(path).events
    parallel_scan.prestart_workers(1)
    assert parallel_scan._prestarted is not None
    trace = read_trace(path, workers=2, piece_bytes=64 * 1024)
    assert parallel_scan._prestarted is None  # taken by this read, for this read only
    assert trace.meta.decoded_by == "parallel"
    assert trace.events["ts"].tolist() == sequential["ts"].tolist()
    assert trace.events["name"].astype(str).tolist() == sequential["name"].astype(str).tolist()


@pytest.mark.slow
def test_a_prestarted_reader_that_gets_no_file_leaves_when_its_pipe_closes():
    parallel_scan.prestart_workers(1)
    pool = parallel_scan._take_prestarted()
    (proc, jobs, reader) = pool.workers[0]
    jobs.close()  # what the process's end does to it
    proc.join(timeout=30)
    assert proc.exitcode == 0
    reader.close()
