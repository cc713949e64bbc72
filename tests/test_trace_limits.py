"""A trace or side file from a stranger costs a bounded read, whatever it holds.

Each limit of :mod:`muon_repro.analysis.limits` ends reading with one ``TraceError`` naming the
file, the limit and how to raise it, never a ``MemoryError``, a ``RecursionError`` or a
traceback, after reading at most the limit (plus a buffer): gzip bombs of whitespace, of one
string and of valid events, too many events, deep nesting. Peak memory is measured with
``tracemalloc`` (the buffers, the decompressor's output and numpy's arrays are traced) against
a decompressed size several times larger, so reading the whole file would fail the test. The
side files of a run folder (``rundir.read_json``) are bounded too.
"""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import warnings
from pathlib import Path

import pytest
from support.gzip_bombs import gzip_bomb

from muon_repro.analysis import limits as trace_limits
from muon_repro.analysis import reader
from muon_repro.analysis.batch_read import analyze_paths
from muon_repro.analysis.errors import TraceError, TraceLimitError
from muon_repro.analysis.limits import MIB, TraceLimits, parse_count
from muon_repro.analysis.reader import read_trace
from muon_repro.analyze_cli import main as analyze_main
from muon_repro.rundir import MAX_SIDE_FILE_BYTES, MAX_SIDE_FILE_DEPTH, SideFileError, load_json, read_json

HEAD = b'{"traceEvents": ['
DEEP = 200_000  # levels of "[": far past Python's recursion limit


def event(i: int, name: str = "aten::mm") -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": float(i), "dur": 1.0}


def events_text(n: int) -> bytes:
    return b",".join(json.dumps(event(i)).encode() for i in range(n))


def write_trace(path: Path, n: int) -> Path:
    path.write_text(json.dumps({"traceEvents": [event(i) for i in range(n)]}))
    return path


def read_traced(path: Path, **kwargs) -> tuple[BaseException | None, int, float]:
    """Read ``path``; the exception raised (or None), the peak of traced memory, the CPU seconds taken (this process's:
    a loaded machine's wall time would make the limits flake)."""
    tracemalloc.start()
    start = time.process_time()
    error: BaseException | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read_trace(path, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the test checks which it is
        error = exc
    finally:
        seconds = time.process_time() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, peak, seconds


def assert_limit_error(error: BaseException | None, path: Path, name: str, option: str) -> str:
    assert isinstance(error, TraceLimitError), repr(error)
    message = str(error)
    assert message.startswith(f"{path}: "), message
    assert f"past the limit {name} = " in message, message
    assert f"`muon-repro analyze {option} N`" in message and f"TraceLimits({name}=N)" in message, message
    return message


# ---------------------------------------------------------------- gzip bombs, default limits


@pytest.mark.parametrize(
    ("head", "block"),
    [(HEAD, b" " * MIB), (HEAD + b'{"ph": "X", "name": "', b"a" * MIB)],
    ids=["whitespace", "one_string"],
)
def test_a_gzip_bomb_with_no_event_boundary_stops_at_the_default_limit(tmp_path, head, block):
    """1 GiB of whitespace (or one 1 GiB string) in a 1 MB gzip: refused once the stretch without an
    event boundary passes 64 MiB, in well under a second's work per 100 MB and a fraction of the GiB."""
    path = gzip_bomb(tmp_path / "rank1.json.gz", head, block, 1024)
    assert path.stat().st_size < 2 * MIB
    error, peak, seconds = read_traced(path)
    message = assert_limit_error(error, path, "max_event_bytes", "--max-event-bytes")
    assert "= 64 MiB" in message and "no boundary between two events" in message
    limit = TraceLimits().max_event_bytes
    assert peak < 4 * limit < 1024 * MIB, f"peak traced memory {peak / MIB:.0f} MiB"
    assert seconds < 20


def test_an_event_just_within_the_limit_is_read_and_one_past_it_is_not(tmp_path):
    """The buffer grows to hold a long event (here 32 times the first buffer), up to the limit only."""
    piece = 32 * 1024  # first buffer: two pieces
    limits = TraceLimits(max_event_bytes=2 * MIB)
    within = {**event(1), "args": {"note": "x" * (2 * MIB - 200)}}
    past = {**event(1), "args": {"note": "x" * (2 * MIB + 200)}}
    for name, long_event in (("within", within), ("past", past)):
        text = {"traceEvents": [event(0), long_event, event(2)]}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(text))
        error, peak, _ = read_traced(path, piece_bytes=piece, limits=limits)
        if name == "within":
            assert error is None, repr(error)
        else:
            assert_limit_error(error, path, "max_event_bytes", "--max-event-bytes")
        assert peak < 8 * limits.max_event_bytes


# ---------------------------------------------------------------- decompressed size


def test_a_gzip_bomb_of_valid_events_stops_at_max_trace_bytes(tmp_path):
    """1 GiB of valid events; with an 8 MiB limit, reading stops after 8 MiB (+1 byte) decompressed."""
    block = events_text(2000) + b","
    copies = (1024 * MIB) // len(block)
    path = gzip_bomb(tmp_path / "rank0.json.gz", HEAD, block, copies, tail=events_text(1) + b"]}")
    limits = TraceLimits(max_trace_bytes=8 * MIB)
    error, peak, seconds = read_traced(path, limits=limits, piece_bytes=MIB)
    message = assert_limit_error(error, path, "max_trace_bytes", "--max-trace-bytes")
    assert "decompressed more than 8 MiB" in message
    assert peak < 64 * MIB, f"peak traced memory {peak / MIB:.0f} MiB"
    assert seconds < 20


def test_the_size_limit_is_exact(tmp_path):
    """A gzip trace of exactly the limit is read; one byte over it is not."""
    path = tmp_path / "exact.json.gz"
    raw = json.dumps({"traceEvents": [event(i) for i in range(100)]}).encode()
    path.write_bytes(gzip.compress(raw))
    assert read_trace(path, limits=TraceLimits(max_trace_bytes=len(raw))).meta.file_bytes == path.stat().st_size
    with pytest.raises(TraceLimitError, match="max_trace_bytes"):
        read_trace(path, limits=TraceLimits(max_trace_bytes=len(raw) - 1))


def test_a_plain_file_over_the_size_limit_is_refused_before_reading(tmp_path):
    """Its size is known: the limit is named even though the bytes are not JSON at all."""
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * (2 * MIB))
    with pytest.raises(TraceLimitError, match=r"the file holds 2,097,152 bytes: past the limit max_trace_bytes = 1 MiB"):
        read_trace(path, limits=TraceLimits(max_trace_bytes=MIB))
    with pytest.raises(TraceError, match="not a JSON trace"):  # within the limit, the content is what is wrong
        read_trace(path)


# ---------------------------------------------------------------- events


def test_too_many_events_stop_at_max_events(tmp_path):
    path = write_trace(tmp_path / "rank0.json", 5000)
    assert read_trace(path, limits=TraceLimits(max_events=5000)).meta.rank == 0
    error, _, _ = read_traced(path, limits=TraceLimits(max_events=4999))
    message = assert_limit_error(error, path, "max_events", "--max-trace-events")
    assert "more than 4,999 events" in message


def test_an_events_bomb_is_stopped_after_the_limit_not_at_the_end(tmp_path):
    """200 MiB of events in a gzip; with max_events 100,000, reading stops after about that many."""
    block = events_text(2000) + b","
    path = gzip_bomb(tmp_path / "rank0.json.gz", HEAD, block, (200 * MIB) // len(block), tail=events_text(1) + b"]}")
    error, peak, seconds = read_traced(path, limits=TraceLimits(max_events=100_000), piece_bytes=MIB)
    assert_limit_error(error, path, "max_events", "--max-trace-events")
    assert peak < 64 * MIB, f"peak traced memory {peak / MIB:.0f} MiB"
    assert seconds < 20


def test_a_trace_whose_every_event_has_its_own_name_stops_at_max_event_names(tmp_path):
    """Each distinct name costs ~250 bytes beyond its event: names are counted, and bounded, as they are decoded."""
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [event(i, f"op_{i}") for i in range(20_000)]}))
    assert read_trace(path, limits=TraceLimits(max_event_names=20_000)).events["name"].nunique() == 20_000
    error, _, _ = read_traced(path, limits=TraceLimits(max_event_names=1000), piece_bytes=64 * 1024)
    message = assert_limit_error(error, path, "max_event_names", "--max-event-names")
    assert "more than 1,000 distinct event names" in message
    assert read_trace(write_trace(tmp_path / "rank1.json", 20_000), limits=TraceLimits(max_event_names=1)).meta.rank == 1


@pytest.mark.slow
def test_the_parallel_reader_stops_at_max_event_names_too(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [event(i, f"op_{i}") for i in range(20_000)]}))
    with pytest.raises(TraceLimitError, match=r"rank0\.json: more than 1,000 distinct event names"):
        read_trace(path, workers=2, piece_bytes=64 * 1024, limits=TraceLimits(max_event_names=1000))


@pytest.mark.slow
def test_the_parallel_reader_stops_at_max_events_too(tmp_path, monkeypatch):
    """Without falling back to the sequential reader (made to fail here), which would read the file again."""
    path = write_trace(tmp_path / "rank0.json", 20_000)
    assert path.stat().st_size > 8 * 64 * 1024
    assert read_trace(path, workers=2, piece_bytes=64 * 1024).meta.decoded_by == "parallel"

    def no_fallback(*args, **kwargs):
        raise AssertionError("fell back to the sequential reader")

    monkeypatch.setattr(reader, "Scanner", no_fallback)
    with pytest.raises(TraceLimitError, match=r"rank0\.json: more than 1,000 events"):
        read_trace(path, workers=2, piece_bytes=64 * 1024, limits=TraceLimits(max_events=1000))


# ---------------------------------------------------------------- nesting


@pytest.mark.parametrize(
    "text",
    [
        HEAD + b'{"ph": "X", "ts": 1, "args": ' + b"[" * DEEP,  # unclosed, in an event
        HEAD + events_text(3) + b',{"ph": "X", "ts": 1, "args": ' + b"[" * DEEP + b"]" * DEEP + b"}]}",
        b'{"meta": ' + b"[" * DEEP + b"]" * DEEP + b"}",  # no traceEvents, deep before it
    ],
    ids=["unclosed", "closed", "no_events"],
)
def test_deep_nesting_in_a_trace_is_one_error_naming_the_file(tmp_path, text):
    path = tmp_path / "deep.json.gz"
    path.write_bytes(gzip.compress(text))
    error, _, seconds = read_traced(path)
    assert isinstance(error, TraceError) and not isinstance(error, RecursionError), repr(error)
    assert str(error).startswith(f"{path}: ") and "nested deeper" in str(error), str(error)
    assert f"about {trace_limits.PARSER_DEPTH_LIMIT} levels" in str(error)
    assert seconds < 10


# ---------------------------------------------------------------- the limits themselves


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_trace_bytes", 0),
        ("max_trace_bytes", trace_limits.MAX_TRACE_BYTES_CEILING + 1),
        ("max_events", -1),
        ("max_events", True),
        ("max_event_bytes", 1.5),
        ("max_event_bytes", "64M"),
        ("max_event_bytes", trace_limits.MAX_EVENT_BYTES_CEILING + 1),
    ],
)
def test_a_limit_out_of_its_range_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"^{field} \(.*\) must be an integer from 1 to .*, got {value!r}"):
        TraceLimits(**{field: value})


def test_sizes_on_the_command_line_take_binary_units():
    assert parse_count("4G", is_size=True) == 4 * 2**30
    assert parse_count("512MiB", is_size=True) == 512 * MIB
    assert parse_count("1000", is_size=False) == 1000
    for text, is_size in (("4G", False), ("1.5G", True), ("-1", True), ("", True)):
        with pytest.raises(ValueError, match="expected a whole number"):
            parse_count(text, is_size=is_size)


def test_the_cli_takes_the_limits_and_reports_a_limit_hit(tmp_path, capsys):
    path = write_trace(tmp_path / "rank0.json", 50)
    assert analyze_main([str(path), "--no-write", "--max-trace-bytes", "1K"]) == 1
    err = capsys.readouterr().err
    assert f"muon-repro analyze: error: {path}: the file holds" in err and "max_trace_bytes = 1 KiB" in err
    assert analyze_main([str(path), "--no-write", "--max-trace-events", "50", "--max-event-bytes", "1M"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        analyze_main([str(path), "--no-write", "--max-trace-events", "0"])
    assert exit_info.value.code == 2
    assert "--max-trace-events: expected 1 to 2,147,483,647" in capsys.readouterr().err


def test_analyze_paths_passes_the_limits_to_every_file(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for rank in (0, 1):
        write_trace(folder / f"rank{rank}.json", 100 + 100 * rank)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = analyze_paths([folder], workers=1, limits=TraceLimits(max_events=150))
    assert [Path(b.meta.path).name for b in analysis.breakdowns] == ["rank0.json"]
    (failure,) = analysis.failures
    assert failure.path.endswith("rank1.json") and "past the limit max_events = 150" in failure.message


# ---------------------------------------------------------------- side files


def test_a_deeply_nested_config_is_no_record_and_says_why(tmp_path):
    config = tmp_path / "config.json"
    config.write_text("[" * DEEP)
    assert read_json(config) is None
    with pytest.raises(SideFileError, match=rf"config\.json: JSON nested deeper than {MAX_SIDE_FILE_DEPTH} levels"):
        load_json(config)
    nested = {"a": 1}
    for _ in range(MAX_SIDE_FILE_DEPTH - 1):
        nested = {"a": nested}
    config.write_text(json.dumps(nested))  # exactly the limit: read
    assert read_json(config) == nested
    config.write_text(json.dumps({"a": nested}))  # one level more: not
    assert read_json(config) is None


def test_a_side_file_over_the_size_limit_is_refused_without_reading_it_all(tmp_path):
    env = tmp_path / "environment.json"
    with open(env, "wb") as fh:
        fh.write(b'{"pad": "')
        fh.truncate(MAX_SIDE_FILE_BYTES + 10)  # a sparse file: no disk for the test
    tracemalloc.start()
    try:
        with pytest.raises(SideFileError, match=r"environment\.json: larger than 16 MiB, the limit for a side file"):
            load_json(env)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_SIDE_FILE_BYTES
    assert read_json(env) is None


def test_a_side_file_of_exactly_the_size_limit_is_read_and_one_byte_more_is_not(tmp_path):
    env = tmp_path / "environment.json"
    head, tail = b'{"pad": "', b'"}'
    pad = MAX_SIDE_FILE_BYTES - len(head) - len(tail)
    env.write_bytes(head + b"x" * pad + tail)
    assert env.stat().st_size == MAX_SIDE_FILE_BYTES == 16 * MIB
    assert len(load_json(env)["pad"]) == pad
    env.write_bytes(head + b"x" * (pad + 1) + tail)
    with pytest.raises(SideFileError, match=r"environment\.json: larger than 16 MiB, the limit for a side file"):
        load_json(env)


def test_a_side_files_nan_and_infinity_read_as_null(tmp_path):
    metrics = tmp_path / "metrics.json"
    metrics.write_text('{"step_ms": [1.5, NaN, Infinity, -Infinity]}')
    assert load_json(metrics) == {"step_ms": [1.5, None, None, None]}


def test_a_missing_or_non_object_side_file_is_refused_naming_the_file_and_read_as_absent(tmp_path):
    config = tmp_path / "config.json"
    with pytest.raises(SideFileError, match=r"config\.json: cannot read") as refused:
        load_json(config)
    assert refused.value.path == str(config) and refused.value.problem.startswith("cannot read")
    assert read_json(config) is None
    config.write_text("[1, 2]")
    with pytest.raises(SideFileError, match=r"config\.json: not a JSON object \(a list\)"):
        load_json(config)
    assert read_json(config) is None


def test_a_run_folder_with_a_deep_config_is_left_out_by_name(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_trace(folder / "rank0.json", 100)
    (folder / "config.json").write_text("[" * DEEP)
    (folder / "environment.json").write_text('{"a": ' * DEEP)
    analysis = analyze_paths([folder], workers=1)
    [failure] = analysis.failures
    assert "config.json: JSON nested deeper than" in failure.message and "the trial is left out" in failure.message
    assert not analysis.breakdowns


def test_a_size_is_shown_in_a_binary_unit_only_where_it_is_a_whole_number_of_them():
    """A limit the error message names is never rounded: 1.5 GiB is 1536 MiB, and half a KiB more is shown in bytes,
    never as "1 GiB"."""
    from muon_repro.analysis.limits import GIB, format_size

    assert format_size(4 * GIB) == "4 GiB" and format_size(64 * MIB) == "64 MiB"
    assert format_size(3 * GIB // 2) == "1536 MiB"
    assert format_size(3 * GIB // 2 + 512) == "1,610,613,248 bytes"
    assert format_size(1000) == "1,000 bytes"
