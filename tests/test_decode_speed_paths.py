"""The fast reading paths give exactly what a straightforward reader gives.

``read_trace`` decodes pieces with msgspec, builds event keys per piece, decodes
``args.correlation`` on its own, shares a plain file's pieces between this process and worker
processes, and builds ``arg_records`` without pandas' ``to_dict``. Each of those is checked here
against a plain ``json.loads`` of the whole file, on small real traces.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis import parallel_scan, scan
from muon_repro.analysis.decode import decode_piece
from muon_repro.analysis.piece_columns import ARG_NAME_PREFIXES, CORRELATION_CATS, NO_CORRELATION
from muon_repro.analysis.reader import read_trace
from muon_repro.analysis.scan import find_events_start

HERE = Path(__file__).resolve().parent
EXTERNAL = HERE / "data" / "external"  # real traces, MIT, see its README
SMALL_TRACES = sorted(EXTERNAL.glob("*.json.gz"))
A100 = EXTERNAL / "hta_a100_nccl_ddp_rank0.json.gz"

# the Args fields behind the args table's columns, by the trace's key
ARG_KEYS = {
    "collective": "Collective name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "group_size": "Group size",
    "dtype": "dtype",
    "pg_name": "Process Group Name",
    "pg_desc": "Process Group Description",
    "input_dims": "Input Dims",
    "input_type": "Input type",
    "external_id": "External id",
    "correlation": "correlation",
}


def _doc(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _reference(path: Path) -> tuple[pd.DataFrame, dict[int, dict]]:
    """Complete events and the args of the collective-related ones, the obvious way."""
    rows, args = [], {}
    for e in _doc(path)["traceEvents"]:
        ts = e.get("ts")
        if e.get("ph") != "X" or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            continue
        dur = e.get("dur", 0.0)
        dur = float(dur) if isinstance(dur, (int, float)) and math.isfinite(dur) and dur >= 0 else 0.0
        a = e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = a.get("correlation")
        ok = e.get("cat") in CORRELATION_CATS and type(corr) is int and 0 <= corr < 2**63
        if str(e.get("name", "")).startswith(ARG_NAME_PREFIXES):
            args[len(rows)] = {col: a.get(key) for col, key in ARG_KEYS.items()}
        rows.append(
            (float(ts), dur, e.get("name", ""), e.get("cat", ""), e.get("pid"), e.get("tid"), corr if ok else NO_CORRELATION)
        )
    df = pd.DataFrame(rows, columns=["ts", "dur", "name", "cat", "pid", "tid", "correlation"])
    return df, args


def _assert_matches_reference(trace, reference: pd.DataFrame, ref_args: dict[int, dict]) -> None:
    ev = trace.events
    assert list(ev.columns) == ["ts", "dur", "end", "name", "cat", "thread", "correlation"]
    np.testing.assert_array_equal(ev["ts"].to_numpy(), reference["ts"].to_numpy())
    np.testing.assert_array_equal(ev["dur"].to_numpy(), reference["dur"].to_numpy())
    np.testing.assert_array_equal(ev["end"].to_numpy(), reference["ts"].to_numpy() + reference["dur"].to_numpy())
    np.testing.assert_array_equal(ev["correlation"].to_numpy(), reference["correlation"].to_numpy(np.int64))
    assert ev["name"].astype(object).tolist() == reference["name"].tolist()
    assert ev["cat"].astype(object).tolist() == reference["cat"].tolist()
    thread = ev["thread"].to_numpy()
    assert trace.threads["pid"].to_numpy(dtype=object)[thread].tolist() == reference["pid"].tolist()
    assert trace.threads["tid"].to_numpy(dtype=object)[thread].tolist() == reference["tid"].tolist()
    assert trace.arg_records == ref_args


@pytest.mark.parametrize("path", SMALL_TRACES, ids=lambda p: p.name)
def test_sequential_reading_matches_a_plain_json_reader(path):
    reference, ref_args = _reference(path)
    for piece_bytes in (scan.PIECE_BYTES, 64 * 1024):
        _assert_matches_reference(read_trace(path, piece_bytes=piece_bytes), reference, ref_args)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 3])
def test_parallel_reading_matches_the_sequential_one_and_the_reference(tmp_path, workers):
    """Pieces shared between this process (from the back) and ``workers - 1`` worker processes
    (from the front) come back in file order, each once."""
    plain = tmp_path / "a100.json"
    plain.write_bytes(gzip.decompress(A100.read_bytes()))
    sequential = read_trace(plain)
    parallel = read_trace(plain, workers=workers, piece_bytes=256 * 1024)
    assert (sequential.meta.decoded_by, parallel.meta.decoded_by) == ("sequential", "parallel")
    _assert_matches_reference(parallel, *_reference(plain))
    pd.testing.assert_frame_equal(parallel.events, sequential.events)
    pd.testing.assert_frame_equal(parallel.threads, sequential.threads)
    pd.testing.assert_frame_equal(parallel.args, sequential.args)
    pd.testing.assert_frame_equal(parallel.memory, sequential.memory)
    assert parallel.notes == sequential.notes


def _let_the_worker_go_first(monkeypatch) -> None:
    """This process takes its first range only once a worker has taken one (or after a minute),
    so that tests see a worker at work whatever the machine's load."""
    take = parallel_scan._take

    def take_after_a_worker(bounds, *, front):
        deadline = time.monotonic() + 60
        while not front and bounds[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        return take(bounds, front=front)

    monkeypatch.setattr(parallel_scan, "_take", take_after_a_worker)  # this process only: workers import their own


@pytest.mark.slow
def test_this_process_and_the_worker_both_decode_ranges(tmp_path, monkeypatch):
    plain = tmp_path / "a100.json"
    plain.write_bytes(gzip.decompress(A100.read_bytes()))
    reference = read_trace(plain)
    here: list[tuple[int, int]] = []
    decode_here = parallel_scan.decode_file_range

    def watched(path, start, stop):
        here.append((start, stop))
        return decode_here(path, start, stop)

    monkeypatch.setattr(parallel_scan, "decode_file_range", watched)
    _let_the_worker_go_first(monkeypatch)
    trace = read_trace(plain, workers=2, piece_bytes=64 * 1024)
    start = find_events_start(plain.read_bytes(), plain)[0]
    ranges, _ = parallel_scan._plan_pieces(plain, start, plain.stat().st_size, 64 * 1024)
    assert trace.meta.decoded_by == "parallel"
    assert 0 < len(here) < len(ranges)  # the worker took the others
    assert here == sorted(here, reverse=True) and here[0] == ranges[-1]  # from the back
    pd.testing.assert_frame_equal(trace.events, reference.events)
    pd.testing.assert_frame_equal(trace.args, reference.args)


@pytest.mark.slow
def test_a_failure_in_this_process_falls_back_to_the_sequential_path(tmp_path, monkeypatch):
    plain = tmp_path / "a100.json"
    plain.write_bytes(gzip.decompress(A100.read_bytes()))
    reference = read_trace(plain)

    def broken(path, start, stop):
        raise ValueError("bad cut")

    monkeypatch.setattr(parallel_scan, "decode_file_range", broken)  # this process only: workers import their own
    trace = read_trace(plain, workers=2, piece_bytes=256 * 1024)
    assert trace.meta.decoded_by == "sequential"
    pd.testing.assert_frame_equal(trace.events, reference.events)


@pytest.mark.slow
def test_a_failure_in_a_worker_falls_back_to_the_sequential_path(tmp_path, monkeypatch):
    """Events whose args hold the event separator, at the front of the file: the plan cuts inside
    them, the worker fails on such a range, stops this process taking more, and the file is
    read sequentially."""
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": float(i),
            "dur": 0.5,
            "args": {"nested": [{"a": 1}, {"b": 2}, {"c": 3}]} if i < 40 else {},
        }
        for i in range(400)
    ]
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"traceEvents": events}))
    reference = read_trace(path)
    ranges, _ = parallel_scan._plan_pieces(path, find_events_start(path.read_bytes(), path)[0], path.stat().st_size, 1000)

    def fails(r: tuple[int, int]) -> bool:
        try:
            parallel_scan.decode_file_range(str(path), *r)
        except ValueError:
            return True
        return False

    assert fails(ranges[0])  # the worker's first range is a bad cut, ...
    assert not any(fails(r) for r in ranges[len(ranges) // 2 :])  # ... this process's are not
    outcomes: list[bool] = []
    collect = parallel_scan._collect
    monkeypatch.setattr(parallel_scan, "_collect", lambda *a: outcomes.append(collect(*a)) or outcomes[-1])

    def harmless(path, start, stop):  # this process: never fails, so the failure is the worker's
        return decode_piece(b"[]")

    monkeypatch.setattr(parallel_scan, "decode_file_range", harmless)
    _let_the_worker_go_first(monkeypatch)
    trace = read_trace(path, workers=2, piece_bytes=1000)
    assert outcomes == [False] and trace.meta.decoded_by == "sequential"
    pd.testing.assert_frame_equal(trace.events, reference.events)


@pytest.mark.slow  # a shared multiprocessing Array starts multiprocessing's resource tracker, a Python process
def test_ranges_are_taken_from_both_ends_each_once():
    import multiprocessing as mp

    bounds = mp.get_context("spawn").Array("q", [0, 5])
    take = parallel_scan._take
    taken = [take(bounds, front=True), take(bounds, front=False), take(bounds, front=False)]
    taken += [take(bounds, front=True), take(bounds, front=True)]
    assert taken == [0, 4, 3, 1, 2]
    assert take(bounds, front=True) is None and take(bounds, front=False) is None


def test_arg_records_are_the_args_table_as_dicts(tmp_path):
    """``arg_records`` equals pandas' ``to_dict("index")`` with NaN as None, dirty values included."""
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "c10d::allreduce_",
            "pid": 1,
            "tid": 1,
            "ts": 1.0,
            "dur": 2.0,
            "args": {"Input Dims": float("nan"), "Input type": ["float"], "External id": 7},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 1,
            "tid": 1,
            "ts": 2.0,
            "dur": 1.0,
            "args": {"Collective name": "allreduce", "In msg nelems": "12", "Group size": 2, "dtype": "Float"},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_Generic",
            "pid": 0,
            "tid": 7,
            "ts": 3.0,
            "dur": 1.0,
            "args": {"correlation": 5, "External id": 8, "Input Dims": [[3, 4], []]},
        },
    ]
    dirty = tmp_path / "dirty.json"
    dirty.write_text(json.dumps({"traceEvents": events}))  # NaN written as a bare literal
    for path in [dirty, *SMALL_TRACES]:
        trace = read_trace(path)
        expected = {
            int(row): {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
            for row, rec in trace.args.to_dict("index").items()
        }
        assert trace.arg_records == expected
        assert all(type(row) is int for row in trace.arg_records)
    records = read_trace(dirty).arg_records
    assert records[0]["input_dims"] is None and records[1]["in_nelems"] == 12 and records[2]["input_dims"] == [[3, 4], []]
