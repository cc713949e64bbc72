"""Dirty and bad input: each file either parses (where its data is usable) or fails with an
error naming the file and the problem; one bad file never hides the others' results."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.batch_read import analyze_paths
from muon_repro.analysis.breakdown import analyze_trace
from muon_repro.analysis.errors import TraceError, TraceWarning
from muon_repro.analysis.reader import read_trace

DIST = {
    "backend": "gloo",
    "rank": 3,
    "world_size": 4,
    "pg_count": 1,
    "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "pg_size": 4, "ranks": [0, 1, 2, 3]}],
}


def x(name: str, ts: float, dur: float, tid: int | str = 1, cat: str = "cpu_op", **args) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def good_events(n_steps: int = 2) -> list[dict]:
    events = [{"ph": "M", "name": "thread_name", "pid": 100, "tid": 1, "ts": 0, "args": {"name": "thread 1 (python)"}}]
    for s in range(n_steps):
        t0 = 1000.0 * s
        events += [
            x(f"ProfilerStep#{s}", t0, 900, cat="user_annotation"),
            x("forward", t0 + 10, 300, cat="user_annotation"),
            x("aten::mm", t0 + 20, 250),
            x("optimizer", t0 + 400, 400, cat="user_annotation"),
            x("aten::add_", t0 + 410, 50),
        ]
    return events


def write(path: Path, doc, *, text: str | None = None) -> Path:
    data = (text if text is not None else json.dumps(doc)).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def expect_error(path: Path, *fragments: str) -> TraceError:
    with pytest.raises(TraceError) as info:
        read_trace(path)
    message = str(info.value)
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert isinstance(info.value, ValueError)
    return info.value


# ---------------------------------------------------------------- unusable files fail clearly


def test_truncated_gzip(tmp_path):
    whole = gzip.compress(json.dumps({"traceEvents": good_events(20)}).encode())
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    expect_error(path, "truncated gzip")


def test_corrupt_gzip(tmp_path):
    whole = gzip.compress(json.dumps({"traceEvents": good_events()}).encode())
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(whole[:20] + bytes(64) + whole[84:])
    expect_error(path, "gzip")


def test_not_json(tmp_path):
    expect_error(write(tmp_path / "trace.json", None, text="hello, this is not a trace\n"), "not a JSON trace")
    expect_error(write(tmp_path / "broken.json", None, text='{"traceEvents": [{"ph": "X", "name": '), "truncated or malformed")
    expect_error(write(tmp_path / "empty.json", None, text=""), "empty file")


def test_json_but_not_a_trace(tmp_path):
    expect_error(write(tmp_path / "a.json", {"hello": 1}), "no 'traceEvents'")
    expect_error(write(tmp_path / "b.json", {"traceEvents": None}), "not an array")
    expect_error(write(tmp_path / "c.json", [1, 2]), "no complete")


def test_empty_trace_events(tmp_path):
    expect_error(write(tmp_path / "rank0.json", {"traceEvents": [], "distributedInfo": DIST}), "empty")
    only_meta = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}}]}
    expect_error(write(tmp_path / "rank1.json", only_meta), "no complete")


def test_truncated_plain_json(tmp_path):
    text = json.dumps({"traceEvents": good_events(50), "distributedInfo": DIST})
    path = write(tmp_path / "rank0.json", None, text=text[: len(text) * 2 // 3])
    expect_error(path, "truncated or malformed")
    with pytest.raises(TraceError):
        read_trace(path, piece_bytes=512)  # the same through many small pieces


def test_missing_file(tmp_path):
    expect_error(tmp_path / "nope.json.gz", "no such file")


# ---------------------------------------------------------------- usable dirty data parses


def test_rank_from_distributed_info_file_name_argument_or_assumed(tmp_path):
    doc = {"traceEvents": good_events()}
    assert (t := read_trace(write(tmp_path / "trace.json", doc))).meta.rank == 0 and t.meta.rank_source == "assumed"
    assert (t := read_trace(tmp_path / "trace.json", rank=5)).meta.rank == 5 and t.meta.rank_source == "argument"
    assert (
        t := read_trace(write(tmp_path / "rank-7.Jul_15.pt.trace.json.gz", doc))
    ).meta.rank == 7 and t.meta.rank_source == "filename"
    t = read_trace(write(tmp_path / "rank9.json", {**doc, "distributedInfo": DIST}), rank=5)
    assert (t.meta.rank, t.meta.rank_source, t.meta.world_size, t.meta.backend) == (3, "distributedInfo", 4, "gloo")


def test_control_characters_in_names(tmp_path):
    events = good_events()
    events.append(x("bad\x01name\x1f", 50, 5))
    events.append(x("aten::copy_", 60, 5, note="tab\there\x02"))
    text = json.dumps({"traceEvents": events}, ensure_ascii=False)
    text = text.replace("\\u0001", "\x01").replace("\\u001f", "\x1f").replace("\\u0002", "\x02")
    assert "\x01" in text  # raw control characters: invalid strict JSON
    for path in (write(tmp_path / "ctrl.json", None, text=text), write(tmp_path / "ctrl.json.gz", None, text=text)):
        trace = read_trace(path)
        assert "bad\x01name\x1f" in set(trace.events["name"].astype(str))
        assert trace.notes.get("tolerant_pieces", 0) >= 1
        assert len(analyze_trace(trace).steps) == 2


def test_huge_integers_string_pids_missing_fields(tmp_path):
    events = good_events()
    events += [
        {"ph": "X", "cat": "cpu_op", "name": "huge pid", "pid": 2**70, "tid": 2**66, "ts": 30, "dur": 1},
        x(
            "record_param_comms",
            40,
            2,
            **{
                "Collective name": "allreduce",
                "In msg nelems": 2**70,
                "Out msg nelems": 2**70,
                "Group size": 4,
                "dtype": "Float",
                "External id": 2**65,
            },
        ),
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 0,
            "dur": 2000,
        },
        {"ph": "X", "name": "no cat no dur", "pid": 100, "tid": 1, "ts": 70},
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 100, "tid": 1, "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "negative", "pid": 100, "tid": "worker", "ts": 80, "dur": -5},
        {"ph": "X", "cat": "cpu_op", "name": "string ts", "pid": 100, "tid": 1, "ts": "90.5", "dur": "1"},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 1990},
        {"ph": "s", "id": 1, "pid": 100, "tid": 1, "ts": 12, "cat": "ac2g", "name": "ac2g"},
    ]
    with pytest.warns(TraceWarning) as warned:
        trace = read_trace(write(tmp_path / "rank2.json", {"traceEvents": events}))
    said = sorted(str(w.message).split(": ", 1)[1] for w in warned)  # each names the file first
    assert said == [
        "event 'negative' at ts=80.0: negative dur -5.0 set to 0",
        "event 'no ts': ts is missing or not a number: event dropped",
    ]
    names = set(trace.events["name"].astype(str))
    assert {"huge pid", "no cat no dur", "negative", "string ts", "PyTorch Profiler (0)"} <= names
    assert "no ts" not in names
    assert trace.notes["events_without_timestamp_dropped"] == 1
    assert trace.notes["bad_durations_set_to_zero"] == 1
    ev = trace.events.set_index(trace.events["name"].astype(str))
    assert ev.loc["no cat no dur", "dur"] == 0 and ev.loc["negative", "dur"] == 0 and ev.loc["string ts", "ts"] == 90.5
    assert 2**70 in set(trace.threads["pid"]) and "worker" in set(trace.threads["tid"])
    b = analyze_trace(trace)
    assert np.isfinite(b.steps.drop(columns=["peak_mem_bytes"]).to_numpy(dtype=float)).all()
    (row,) = b.collectives.itertuples()  # the all-reduce with an absurd size: counted, size unknown
    assert (row.op, row.elements, row.bytes, row.size_bytes) == ("all_reduce", -1, -1, -1)


def test_nan_literals(tmp_path):
    text = (
        json.dumps({"traceEvents": good_events()})[:-2]
        + ', {"ph": "X", "name": "nan", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}]}'
    )
    with pytest.warns(TraceWarning, match=r"nan\.json: event 'nan': ts is missing or not a number: event dropped"):
        trace = read_trace(write(tmp_path / "nan.json", None, text=text))
    assert "nan" not in set(trace.events["name"].astype(str))
    assert trace.notes["events_without_timestamp_dropped"] == 1


def test_a_boolean_ts_is_dropped_not_read_as_one(tmp_path):
    """``"ts": true`` is no time (the tolerant decoder reads the piece): the event is dropped and counted, not put
    at ts=1.0."""
    events = [*good_events(), {"ph": "X", "cat": "cpu_op", "name": "bool ts", "pid": 100, "tid": 1, "ts": True, "dur": 1}]
    with pytest.warns(TraceWarning, match="event 'bool ts': ts is missing or not a number: event dropped"):
        trace = read_trace(write(tmp_path / "rank0.json", {"traceEvents": events}))
    assert "bool ts" not in set(trace.events["name"].astype(str))
    assert trace.notes["events_without_timestamp_dropped"] == 1 and trace.notes["tolerant_pieces"] >= 1


def test_a_ts_of_2_to_the_53_us_is_out_of_range(tmp_path):
    """float64 holds whole microseconds only below 2**53 (2**53 + 1 reads as 2**53): ts 2**53 is dropped as out
    of range, 2**53 - 1 is kept."""
    events = [*good_events(), x("at the limit", 2**53, 1), x("below the limit", 2**53 - 1, 1)]
    with pytest.warns(TraceWarning, match=r"event 'at the limit': ts=9007199254740992\.0 is out of range"):
        trace = read_trace(write(tmp_path / "rank0.json", {"traceEvents": events}))
    names = set(trace.events["name"].astype(str))
    assert "below the limit" in names and "at the limit" not in names
    assert trace.notes == {"events_with_ts_out_of_range_dropped": 1}


def test_a_utf8_byte_order_mark_before_the_document_is_skipped(tmp_path):
    """A file saved with a BOM reads as the same trace without it (as ``utf-8-sig`` JSON does)."""
    doc = {"traceEvents": good_events(), "distributedInfo": DIST}
    plain = read_trace(write(tmp_path / "plain.json", doc))
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    with_bom = read_trace(path)
    assert with_bom.meta.rank == json.loads(path.read_text(encoding="utf-8-sig"))["distributedInfo"]["rank"] == 3
    pd.testing.assert_frame_equal(with_bom.events, plain.events)


def test_a_key_before_and_after_the_events_takes_the_later_value_as_json_does(tmp_path):
    """``distributedInfo`` written before the events array (rank 3) and again after it (rank 1): the document's
    value is the later one, as ``json.loads`` reads it."""
    before, events, after = (json.dumps(v) for v in (DIST, good_events(), {**DIST, "rank": 1}))
    text = f'{{"distributedInfo": {before}, "traceEvents": {events}, "distributedInfo": {after}}}'
    path = write(tmp_path / "trace.json", None, text=text)
    assert read_trace(path).meta.rank == json.loads(text)["distributedInfo"]["rank"] == 1


def test_bare_array_and_keys_after_the_events(tmp_path):
    events = good_events(3)
    with pytest.warns(TraceWarning, match="a bare JSON array of events, so no distributedInfo: .* rank 1 from the file name"):
        bare = read_trace(write(tmp_path / "rank1.json", events))
    assert bare.meta.rank == 1 and len(bare.events) == sum(e["ph"] == "X" for e in events)
    # keys after the array, including arrays of objects (as in re-serialized traces)
    doc = {
        "metadata": {"x": [1, {"y": "]"}]},
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "GPU"}, {"id": 1, "name": "GPU"}],
        "distributedInfo": DIST,
        "traceName": "t]",
    }
    for piece_bytes in (256, 1 << 20):
        t = read_trace(write(tmp_path / "after.json", None, text=json.dumps(doc, indent=4)), piece_bytes=piece_bytes)
        assert t.meta.rank == 3 and t.meta.device_names == ["GPU", "GPU"]
        pd.testing.assert_frame_equal(t.events, bare.events)


@pytest.mark.slow
def test_cuts_inside_strings_and_args_are_retried(tmp_path):
    """Names and args that contain the event separator must not split an event."""
    events = good_events(30)
    for i in range(200):
        events.append(
            x('void k<{lambda()#1}, {"x"}>::f}, {"', 5 + i, 1, **{"nested": [{"a": 1}, {"b": '}, {"'}], "Input Dims": [[1], [2]]})
        )
    doc = {"traceEvents": events, "distributedInfo": DIST}
    path = write(tmp_path / "tricky.json", doc)
    reference = read_trace(path, piece_bytes=1 << 24)
    for piece_bytes in (128, 1000, 4096):
        t = read_trace(path, piece_bytes=piece_bytes)
        pd.testing.assert_frame_equal(t.events, reference.events)
        assert t.notes.get("tolerant_pieces", 0) == 0  # retried with another cut, not the slow decoder
    t = read_trace(path, piece_bytes=1000, workers=2)  # the parallel plan cuts there too
    pd.testing.assert_frame_equal(t.events, reference.events)


# ---------------------------------------------------------------- one bad file among many


@pytest.fixture
def mixed_dir(tmp_path) -> Path:
    run = tmp_path / "group" / "run"
    run.mkdir(parents=True)
    for r in range(2):
        write(run / f"rank{r}.json.gz", {"traceEvents": good_events(), "distributedInfo": {**DIST, "rank": r, "world_size": 2}})
    (run / "rank2.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    write(run / "rank3.json", None, text="garbage")
    write(run / "config.json", {"group": "group", "name": "run", "optimizer": "muon", "dp": 2, "tp": 1})
    return tmp_path


def test_one_bad_file_does_not_hide_the_others(mixed_dir):
    analysis = analyze_paths([mixed_dir, mixed_dir / "missing"], workers=1)
    assert sorted(Path(f.path).name for f in analysis.failures) == ["missing", "rank2.json.gz", "rank3.json"]
    for f in analysis.failures:
        assert f.path in f.message
    ((info, items),) = analysis.runs
    assert info.key == "unknown/group/run" and [b.meta.rank for b in items] == [0, 1]  # no environment.json: profile "unknown"


@pytest.mark.slow
def test_cli_reports_bad_files_and_still_writes_the_tables(mixed_dir, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "muon_repro.analyze_cli", str(mixed_dir), "--out", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 1
    assert "rank0.json.gz" in out.stdout and "rank1.json.gz" in out.stdout
    assert "rank2.json.gz" in out.stderr and "truncated gzip" in out.stderr
    assert "rank3.json" in out.stderr and "not a JSON trace" in out.stderr
    assert (tmp_path / "m" / "steps.parquet").exists()
    none = subprocess.run(
        [sys.executable, "-m", "muon_repro.analyze_cli", str(mixed_dir / "group" / "run" / "rank3.json"), "--no-write"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert none.returncode == 1 and "not a JSON trace" in none.stderr
