"""Read a Kineto Chrome trace (``.json`` or ``.json.gz``) into a typed events table.

:mod:`muon_repro.analysis.scan` streams the file in pieces (with
:mod:`muon_repro.analysis.parallel_scan`, in worker processes for large plain files),
:mod:`muon_repro.analysis.decode` turns each piece into columns,
:mod:`muon_repro.analysis.assemble` merges them into one
:class:`~muon_repro.analysis.trace_events.TraceEvents`, and this module works out the trace's
rank and reports what was repaired.

Dirty data is repaired or left out, never silently: each kind is counted in
:attr:`TraceEvents.notes` and reported by a :class:`~muon_repro.analysis.errors.TraceWarning`
naming the file and the first few events (name and ``ts``), e.g. ``rank0.json: event
'ncclDevKernel_AllReduce...' at ts=1200.0: negative dur -5.0 set to 0``. The rules: unusable
``ts`` dropped, unusable ``dur`` set to 0 (:mod:`muon_repro.analysis.piece_columns`), a ``dur``
ending implausibly late set to 0 and ``[memory]`` byte counts beyond int64 unknown
(:mod:`muon_repro.analysis.assemble`).

A bare JSON array of events (``[{...}, {...}]``, the Chrome trace "JSON array format") is read
like an object's ``traceEvents``; it has no ``distributedInfo``, so its world size, backend and
process groups are unknown and its rank comes from the file name (``rank3.json``), else the
``rank`` argument, else 0, with a warning that says so.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

from muon_repro.analysis.assemble import IMPLAUSIBLE_DURATION, MEMORY_VALUE_OUT_OF_RANGE, Assembler, build_trace_events
from muon_repro.analysis.byte_source import Source
from muon_repro.analysis.errors import TraceError, TraceWarning
from muon_repro.analysis.limits import EventBudget, TraceLimits, limit_error
from muon_repro.analysis.parallel_scan import reads_in_parallel, scan_parallel
from muon_repro.analysis.piece_columns import (
    BAD_DURATION,
    MEMORY_TS_DROPPED,
    NON_OBJECT_EVENTS,
    TS_MISSING,
    TS_OUT_OF_RANGE,
    PieceColumns,
)
from muon_repro.analysis.scan import PIECE_BYTES, Scanner
from muon_repro.analysis.trace_events import TraceEvents, TraceMeta
from muon_repro.run_records import MAX_WORLD_SIZE

_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


# ---------------------------------------------------------------- meta and rank


def rank_from_filename(path: str | Path) -> int | None:
    """``rank3.json.gz``, ``rank-34.Jul_15....json.gz``, ``trace_rank_2.json`` -> 3, 34, 2."""
    match = _RANK_IN_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _trace_meta(path: Path, doc: dict, rank: int | None, file_bytes: int) -> TraceMeta:
    info = doc.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    info_rank = _int_or_none(info.get("rank"))
    for field, value, largest in (
        ("rank", info_rank, MAX_WORLD_SIZE - 1),
        ("world_size", _int_or_none(info.get("world_size")), MAX_WORLD_SIZE),
    ):
        if value is not None and value > largest:  # one such trace would fail every table, not just its own
            raise TraceError(
                path,
                f"distributedInfo.{field} is {value}, past the {MAX_WORLD_SIZE:,} ranks a run may have (docs/limits.md): "
                "not a trace of a run; record it again",
            )
    if info_rank is not None and info_rank >= 0:
        resolved, source = info_rank, "distributedInfo"
    elif (from_name := rank_from_filename(path)) is not None:
        resolved, source = from_name, "filename"
    elif rank is not None:
        resolved, source = int(rank), "argument"
    else:
        resolved, source = 0, "assumed"
    world = _int_or_none(info.get("world_size"))
    pg_config = [pg for pg in info.get("pg_config") or [] if isinstance(pg, dict)]
    devices = doc.get("deviceProperties")
    device_names = [str(d.get("name", "")) for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []
    backend = info.get("backend")
    return TraceMeta(
        path=str(path),
        rank=resolved,
        rank_source=source,
        world_size=world if world and world > 0 else None,
        backend=str(backend) if backend else None,
        base_time_ns=_int_or_none(doc.get("baseTimeNanoseconds")),
        pg_config=pg_config,
        device_names=device_names,
        file_bytes=file_bytes,
    )


# ---------------------------------------------------------------- warnings


def _event_message(kind: str, name: str, ts: float, value: float) -> str:
    """What happened to one event, for a warning (the file's path goes in front)."""
    if kind == TS_MISSING:
        return f"event {name!r}: ts is missing or not a number: event dropped"
    if kind == TS_OUT_OF_RANGE:
        return f"event {name!r}: ts={value!r} is out of range (at or beyond +-2**53 us): event dropped"
    if kind == BAD_DURATION:
        return f"event {name!r} at ts={ts!r}: {_duration_fault(value)} dur {value!r} set to 0"
    return f"event {name!r} at ts={ts!r}: dur {value!r} us ends long after the trace's last event starts: set to 0"


def _duration_fault(value: float) -> str:
    if math.isnan(value):
        return "non-numeric"  # a NaN literal, a string that is no number, an object...
    if value < 0:
        return "negative"
    return "infinite" if math.isinf(value) else "out-of-range"


_COUNTED_ONLY = {
    NON_OBJECT_EVENTS: "trace events are not JSON objects: dropped",
    MEMORY_TS_DROPPED: "[memory] events have no usable ts: dropped",
    MEMORY_VALUE_OUT_OF_RANGE: "[memory] byte counts are beyond int64: taken as unknown",
}


def _warning_messages(path: Path, notes: dict[str, int], problems: list[tuple[str, str, float, float]]) -> list[str]:
    """One message per event kept in ``problems``, one per kind for the rest (counts from ``notes``)."""
    messages = [f"{path}: {_event_message(*problem)}" for problem in problems]
    for kind in (TS_MISSING, TS_OUT_OF_RANGE, BAD_DURATION, IMPLAUSIBLE_DURATION):
        shown = sum(p[0] == kind for p in problems)
        if notes.get(kind, 0) > shown:
            messages.append(f"{path}: {notes[kind] - shown} more events like these ({kind}: {notes[kind]} in all)")
    for kind, what in _COUNTED_ONLY.items():
        if notes.get(kind):
            messages.append(f"{path}: {notes[kind]} {what}")
    return messages


def _bare_array_message(meta: TraceMeta) -> str:
    source = {"filename": "the file name", "argument": "the rank argument", "assumed": "nowhere: assumed"}[meta.rank_source]
    return (
        f"{meta.path}: a bare JSON array of events, so no distributedInfo: world size, backend and process "
        f"groups unknown; rank {meta.rank} from {source}"
    )


def _no_events_problem(asm: Assembler) -> str:
    dropped = sum(asm.notes.get(k, 0) for k in (TS_MISSING, TS_OUT_OF_RANGE, NON_OBJECT_EVENTS))
    because = f" ({dropped} dropped for an unusable ts or type)" if dropped else ""
    return f"no complete ('ph': 'X') events with timestamps among {asm.n_events} trace events{because}: nothing to analyze"


# ---------------------------------------------------------------- entry point


def read_trace(
    path: str | Path,
    *,
    rank: int | None = None,
    workers: int = 1,
    piece_bytes: int = PIECE_BYTES,
    limits: TraceLimits | None = None,
) -> TraceEvents:
    """Read one trace file into a :class:`TraceEvents`.

    ``rank`` is used only when the trace has no ``distributedInfo.rank`` and its file name
    has no ``rank<N>``; failing all three the rank is assumed 0 (``meta.rank_source`` says
    which). ``workers > 1`` decodes large uncompressed files with that many processes, this
    one included. ``limits`` bounds what the file may hold (:class:`TraceLimits`, defaults
    in docs/limits.md): reading stops at the first one passed.

    Raises :class:`TraceError` (a ``ValueError``) naming the file and the problem for
    anything unreadable: missing file, truncated or corrupt gzip, not JSON, no or empty
    ``traceEvents``, JSON broken inside the array or nested too deeply, a limit passed (the
    message names it and how to raise it). Warns (:class:`TraceWarning`, naming the file and
    the events) about what it repaired or left out, and about a bare array's missing
    ``distributedInfo`` (module docstring).
    """
    path = Path(path)
    limits = limits or TraceLimits()
    if not path.is_file():
        raise TraceError(path, "no such file" if not path.exists() else "not a regular file")
    file_bytes = path.stat().st_size
    asm = Assembler()
    doc: dict | None = None
    with Source(path) as src:
        gzipped = src.gzipped
    if not gzipped and file_bytes > limits.max_trace_bytes:  # known before reading a byte
        raise limit_error(path, "max_trace_bytes", limits, f"the file holds {file_bytes:,} bytes")
    decoded_by = "sequential"
    if reads_in_parallel(file_bytes, gzipped, workers, piece_bytes):
        staged: list[PieceColumns] = []
        doc = scan_parallel(path, piece_bytes, workers, staged.append, limits)
        if doc is not None:
            decoded_by = "parallel"
            names = EventBudget(path, limits)  # the workers counted the events; names are counted across pieces
            for piece in staged:
                asm.add(piece)
                names.check_names(len(asm.names))
        del staged
    bare = False
    if doc is None:
        asm = Assembler()
        budget = EventBudget(path, limits)

        def add(piece: PieceColumns) -> None:
            budget.take(piece.n_events)
            asm.add(piece)
            budget.check_names(len(asm.names))

        scanner = Scanner(path, add, piece_bytes, limits)
        with Source(path, limits) as src:
            doc = scanner.scan(src)
        bare = scanner.bare
    meta = _trace_meta(path, doc, rank, file_bytes)
    meta.decoded_by = decoded_by
    if asm.n_events == 0:
        raise TraceError(path, "'traceEvents' is empty: nothing to analyze")
    if asm.n == 0:
        raise TraceError(path, _no_events_problem(asm))
    trace = build_trace_events(asm, meta)
    trace.warnings = _warning_messages(path, trace.notes, asm.problems)
    if bare:
        trace.warnings.append(_bare_array_message(meta))
    for message in trace.warnings:
        warnings.warn(message, TraceWarning, stacklevel=2)
    return trace
