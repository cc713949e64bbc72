"""Read a Kineto Chrome trace (``.json`` or ``.json.gz``) into a typed events table.

:mod:`muon_repro.analysis.scan` streams the file in pieces, :mod:`muon_repro.analysis.decode`
turns each piece into columns (in worker processes for large plain files), and this module
merges them into one :class:`TraceEvents` and works out the trace's rank.

Dirty data is repaired or left out, never silently: each kind is counted in
:attr:`TraceEvents.notes` and reported by a :class:`~muon_repro.analysis.errors.TraceWarning`
naming the file and the first few events (name and ``ts``), e.g. ``rank0.json: event
'ncclDevKernel_AllReduce...' at ts=1200.0: negative dur -5.0 set to 0``. The decoder's rules
(:mod:`muon_repro.analysis.decode`: unusable ``ts`` dropped, unusable ``dur`` set to 0) are
completed here with one that needs the whole trace: a ``dur`` that ends an event more than
the trace's own span (its events' first to last start), and at least a minute, after its last
event starts is implausible (``1e30``) and set to 0. ``[memory]`` byte counts beyond int64 are
unknown (null).

A bare JSON array of events (``[{...}, {...}]``, the Chrome trace "JSON array format") is read
like an object's ``traceEvents``; it has no ``distributedInfo``, so its world size, backend and
process groups are unknown and its rank comes from the file name (``rank3.json``), else the
``rank`` argument, else 0, with a warning that says so.
"""

from __future__ import annotations

import math
import operator
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis import decode
from muon_repro.analysis.decode import GPU_WORK_CATS, LAUNCH_CATS, NO_CORRELATION, Args, PieceColumns
from muon_repro.analysis.errors import TraceError, TraceWarning
from muon_repro.analysis.scan import PIECE_BYTES, Scanner, Source, scan_parallel

_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)

MIN_TAIL_US = 60e6  # an event may end this long (or the trace's span, if longer) after the last start
IMPLAUSIBLE_DURATION = "implausible_durations_set_to_zero"
MEMORY_VALUE_OUT_OF_RANGE = "memory_values_out_of_range_dropped"


# ---------------------------------------------------------------- result


@dataclass
class TraceMeta:
    """What a trace says about itself, and where its rank came from."""

    path: str
    rank: int
    rank_source: str  # "distributedInfo", "filename", "argument" or "assumed"
    world_size: int | None
    backend: str | None
    base_time_ns: int | None
    pg_config: list[dict] = field(default_factory=list)
    device_names: list[str] = field(default_factory=list)
    file_bytes: int = 0
    decoded_by: str = "sequential"  # or "parallel" (pieces shared with worker processes)


@dataclass
class TraceEvents:
    """One trace as tables.

    ``events``: one row per complete (``ph: X``) event, file order. Columns: ``ts`` (float64,
    us, the file's clock), ``dur`` (float64, us, >= 0), ``end`` (``ts + dur``), ``name`` and
    ``cat`` (categorical), ``thread`` (int32 index into ``threads``), ``correlation`` (int64
    ``args.correlation`` of GPU work and runtime/driver calls, ``-1`` elsewhere or when absent).

    ``threads``: indexed by thread code: ``pid``, ``tid`` (as in the file, int or str),
    ``thread_name`` (all names seen, ``;``-joined), ``process_name``, ``process_label``.

    ``args``: decoded ``args`` of the events the analysis needs (collectives), indexed by
    ``events`` row; columns are the fields of :class:`muon_repro.analysis.decode.Args`.

    ``memory``: ``[memory]`` instant events: ``ts``, ``thread``, ``bytes`` (signed),
    ``total_allocated``, ``device_type``, ``device_id``.

    ``notes``: what was repaired or dropped (dirty data), by kind, with counts.

    ``warnings``: the messages of the :class:`TraceWarning` s :func:`read_trace` gave (each
    names the file), kept so that a caller in another process can pass them on.
    """

    meta: TraceMeta
    events: pd.DataFrame
    threads: pd.DataFrame
    args: pd.DataFrame
    memory: pd.DataFrame
    notes: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.meta.path

    @cached_property
    def arg_records(self) -> dict[int, dict[str, Any]]:
        """``args`` rows as plain dicts keyed by ``events`` row (missing values are ``None``)."""
        # the same as ``self.args.to_dict("index")`` with NaN as None, without pandas' per-cell
        # boxing: the columns hold the decoded Python objects as they are (dtype object)
        columns = [str(c) for c in self.args.columns]
        rows = self.args.index.to_numpy().tolist()
        values = self.args.to_numpy(dtype=object).tolist()
        return {
            int(row): {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in zip(columns, rec)}
            for row, rec in zip(rows, values)
        }

    @cached_property
    def launch_rows(self) -> np.ndarray:
        """For every ``events`` row, the row of the runtime/driver call that launched it (the
        ``cuda_runtime``/``hip_runtime``/... event with the same ``correlation``; Kineto's
        ``ac2g`` flow joins the same pair), for GPU kernels, copies and memsets; -1 for other
        events and for GPU work launched outside the trace. One sort and one ``searchsorted``."""
        return _launch_rows(self.events)


# ---------------------------------------------------------------- assembly


class _Assembler:
    """Merge pieces (with piece-local key tables) into one table with global codes."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.threads: dict[tuple, int] = {}
        self.cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("ts", "dur", "name", "cat", "thread", "correlation", "arg_rows")
        }
        self.args: list[Args] = []
        self.memory: list[tuple[np.ndarray, np.ndarray, list[Args]]] = []
        self.metadata: list[tuple[str, tuple, Args]] = []
        self.notes: dict[str, int] = {}
        self.problems: list[tuple[str, str, float, float]] = []  # the first few events of each note
        self.n_events = 0  # all events in the file, of any phase
        self.n = 0  # complete events kept

    def add(self, piece: PieceColumns) -> None:
        c = self.cols
        names, cats, threads = self.names.setdefault, self.cats.setdefault, self.threads.setdefault
        keys = piece.keys
        k = len(keys)
        name_of = np.fromiter([names(key[0], len(self.names)) for key in keys], np.int32, k)
        cat_of = np.fromiter([cats(key[1], len(self.cats)) for key in keys], np.int32, k)
        thread_of = np.fromiter([threads((key[2], key[3]), len(self.threads)) for key in keys], np.int32, k)
        c["ts"].append(piece.ts)
        c["dur"].append(piece.dur)
        c["name"].append(name_of[piece.key])
        c["cat"].append(cat_of[piece.key])
        c["thread"].append(thread_of[piece.key])
        c["correlation"].append(piece.correlation)
        c["arg_rows"].append(piece.arg_rows + self.n)
        self.args.extend(piece.args)
        if len(piece.mem_ts):
            self.memory.append((piece.mem_ts, thread_of[piece.mem_key], piece.mem_args))
        for key_code, a in zip(piece.meta_key.tolist(), piece.meta_args):
            key = keys[key_code]
            self.metadata.append((key[0], (key[2], key[3]), a))
        for name, count in piece.notes.items():
            self.notes[name] = self.notes.get(name, 0) + count
        self.note_problems(piece.problems)
        self.n_events += piece.n_events
        self.n += len(piece.ts)

    def note_problems(self, problems: list[tuple[str, str, float, float]]) -> None:
        """Keep up to MAX_EXAMPLES events of each kind (the first in file order)."""
        for problem in problems:
            if sum(p[0] == problem[0] for p in self.problems) < decode.MAX_EXAMPLES:
                self.problems.append(problem)

    def column(self, key: str, dtype: Any) -> np.ndarray:
        parts = self.cols.pop(key)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _finish(asm: _Assembler, meta: TraceMeta) -> TraceEvents:
    ts = asm.column("ts", np.float64)
    dur = asm.column("dur", np.float64)
    name_codes = asm.column("name", np.int32)
    names = list(asm.names)
    dur = _plausible_durations(ts, dur, name_codes, names, asm)
    events = pd.DataFrame(
        {
            "ts": ts,
            "dur": dur,
            "end": ts + dur,
            "name": pd.Categorical.from_codes(name_codes, categories=pd.Index(names, dtype=object), validate=False),
            "cat": pd.Categorical.from_codes(
                asm.column("cat", np.int32), categories=pd.Index(list(asm.cats), dtype=object), validate=False
            ),
            "thread": asm.column("thread", np.int32),
            "correlation": asm.column("correlation", np.int64),
        },
        copy=False,
    )
    arg_rows = asm.column("arg_rows", np.int64)
    args = pd.DataFrame(
        list(map(_args_record, asm.args)),
        index=pd.Index(arg_rows, dtype=np.int64),
        columns=_ARGS_COLUMNS,
        dtype=object,
    )
    mem_args = [a for _, _, part in asm.memory for a in part]
    memory = pd.DataFrame(
        {
            "ts": np.concatenate([m[0] for m in asm.memory]) if asm.memory else np.zeros(0),
            "thread": np.concatenate([m[1] for m in asm.memory]) if asm.memory else np.zeros(0, np.int32),
            "bytes": _float_or_nan([a.nbytes for a in mem_args], asm.notes),
            "total_allocated": _float_or_nan([a.total_allocated for a in mem_args], asm.notes),
            "device_type": np.array([_small_int(a.device_type) for a in mem_args], np.int64),
            "device_id": np.array([_small_int(a.device_id) for a in mem_args], np.int64),
        }
    )
    threads = _thread_table(asm.threads, asm.metadata)
    return TraceEvents(meta=meta, events=events, threads=threads, args=args, memory=memory, notes=dict(asm.notes))


def _plausible_durations(ts: np.ndarray, dur: np.ndarray, name_codes: np.ndarray, names: list[str], asm: _Assembler) -> np.ndarray:
    """``dur`` with 0 for the events that would end implausibly late (module docstring):
    counted in ``asm.notes``, the first few kept to warn about by name."""
    if not len(ts):
        return dur
    first, last = float(ts.min()), float(ts.max())
    latest_end = last + max(last - first, MIN_TAIL_US)
    rows = np.flatnonzero(ts + dur > latest_end)
    if not len(rows):
        return dur
    asm.notes[IMPLAUSIBLE_DURATION] = asm.notes.get(IMPLAUSIBLE_DURATION, 0) + len(rows)
    asm.note_problems(
        [(IMPLAUSIBLE_DURATION, names[name_codes[i]], float(ts[i]), float(dur[i])) for i in rows[: decode.MAX_EXAMPLES].tolist()]
    )
    dur = dur.copy()
    dur[rows] = 0.0
    return dur


def _launch_rows(events: pd.DataFrame) -> np.ndarray:
    """See :attr:`TraceEvents.launch_rows`."""
    out = np.full(len(events), -1, np.int64)
    correlation = events["correlation"].to_numpy()
    cats = np.asarray(events["cat"].cat.categories, dtype=object)
    cat_codes = events["cat"].cat.codes.to_numpy()
    has_id = correlation != NO_CORRELATION
    launches = np.flatnonzero(np.isin(cats, LAUNCH_CATS)[cat_codes] & has_id)
    work = np.flatnonzero(np.isin(cats, GPU_WORK_CATS)[cat_codes] & has_id)
    if not len(launches) or not len(work):
        return out
    launches = launches[np.argsort(correlation[launches], kind="stable")]  # first launch wins on duplicate ids
    sorted_ids = correlation[launches]
    pos = np.minimum(np.searchsorted(sorted_ids, correlation[work]), len(launches) - 1)
    hit = sorted_ids[pos] == correlation[work]
    out[work[hit]] = launches[pos[hit]]
    return out


_ARGS_COLUMNS = [
    "collective",
    "in_nelems",
    "out_nelems",
    "group_size",
    "dtype",
    "pg_name",
    "pg_desc",
    "input_dims",
    "input_type",
    "external_id",
    "correlation",
]


def _small_int(v: Any) -> int:
    """An id-like int (device type, device id), -1 when absent or absurd."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31 else -1


_args_record = operator.attrgetter(*_ARGS_COLUMNS)  # Args -> tuple of the _ARGS_COLUMNS values


def _float_or_nan(values: list, notes: dict[str, int]) -> np.ndarray:
    """Byte counts as floats; NaN when absent, and (counted in ``notes``) when beyond int64."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if v is not None:
            try:
                out[i] = float(v)
            except (TypeError, ValueError, OverflowError):
                pass
    absurd = ~(np.abs(out) < 2.0**63) & ~np.isnan(out)
    if absurd.any():
        notes[MEMORY_VALUE_OUT_OF_RANGE] = notes.get(MEMORY_VALUE_OUT_OF_RANGE, 0) + int(absurd.sum())
        out[absurd] = np.nan
    return out


def _thread_table(thread_keys: dict[tuple, int], metadata: list[tuple[str, tuple, Args]]) -> pd.DataFrame:
    """pid/tid and names per thread code, from the metadata (``ph: M``) events."""
    keys = list(thread_keys)
    thread_names: dict[tuple, list[str]] = {}
    process_name: dict[Any, str] = {}
    process_label: dict[Any, str] = {}
    for kind, (pid, tid), a in metadata:
        if kind == "thread_name" and a.name:
            names = thread_names.setdefault((pid, tid), [])
            if a.name not in names:
                names.append(a.name)
        elif kind == "process_name" and a.name:
            process_name.setdefault(pid, a.name)
        elif kind == "process_labels" and a.labels:
            process_label.setdefault(pid, a.labels)
    return pd.DataFrame(
        {
            "pid": pd.Series([k[0] for k in keys], dtype=object),
            "tid": pd.Series([k[1] for k in keys], dtype=object),
            "thread_name": pd.Series([";".join(thread_names.get(k, [])) for k in keys], dtype=object),
            "process_name": pd.Series([process_name.get(k[0], "") for k in keys], dtype=object),
            "process_label": pd.Series([process_label.get(k[0], "") for k in keys], dtype=object),
        }
    )


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
    if kind == decode.TS_MISSING:
        return f"event {name!r}: ts is missing or not a number: event dropped"
    if kind == decode.TS_OUT_OF_RANGE:
        return f"event {name!r}: ts={value!r} is out of range (beyond +-2**53 us): event dropped"
    if kind == decode.BAD_DURATION:
        return f"event {name!r} at ts={ts!r}: {_duration_fault(value)} dur {value!r} set to 0"
    return f"event {name!r} at ts={ts!r}: dur {value!r} us ends long after the trace's last event starts: set to 0"


def _duration_fault(value: float) -> str:
    if math.isnan(value):
        return "non-numeric"  # a NaN literal, a string that is no number, an object...
    if value < 0:
        return "negative"
    return "infinite" if math.isinf(value) else "out-of-range"


_COUNTED_ONLY = {
    decode.NON_OBJECT_EVENTS: "trace events are not JSON objects: dropped",
    decode.MEMORY_TS_DROPPED: "[memory] events have no usable ts: dropped",
    MEMORY_VALUE_OUT_OF_RANGE: "[memory] byte counts are beyond int64: taken as unknown",
}


def _warning_messages(path: Path, notes: dict[str, int], problems: list[tuple[str, str, float, float]]) -> list[str]:
    """One message per event kept in ``problems``, one per kind for the rest (counts from ``notes``)."""
    messages = [f"{path}: {_event_message(*problem)}" for problem in problems]
    for kind in (decode.TS_MISSING, decode.TS_OUT_OF_RANGE, decode.BAD_DURATION, IMPLAUSIBLE_DURATION):
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


def _no_events_problem(asm: _Assembler) -> str:
    dropped = sum(asm.notes.get(k, 0) for k in (decode.TS_MISSING, decode.TS_OUT_OF_RANGE, decode.NON_OBJECT_EVENTS))
    because = f" ({dropped} dropped for an unusable ts or type)" if dropped else ""
    return f"no complete ('ph': 'X') events with timestamps among {asm.n_events} trace events{because}: nothing to analyze"


# ---------------------------------------------------------------- entry point


def read_trace(
    path: str | Path,
    *,
    rank: int | None = None,
    workers: int = 1,
    piece_bytes: int = PIECE_BYTES,
) -> TraceEvents:
    """Read one trace file into a :class:`TraceEvents`.

    ``rank`` is used only when the trace has no ``distributedInfo.rank`` and its file name
    has no ``rank<N>``; failing all three the rank is assumed 0 (``meta.rank_source`` says
    which). ``workers > 1`` decodes large uncompressed files with that many processes, this
    one included.

    Raises :class:`TraceError` (a ``ValueError``) naming the file and the problem for
    anything unreadable: missing file, truncated or corrupt gzip, not JSON, no or empty
    ``traceEvents``, JSON broken inside the array or nested too deeply. Warns
    (:class:`TraceWarning`, naming the file and the events) about what it repaired or left
    out, and about a bare array's missing ``distributedInfo`` (module docstring).
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, "no such file" if not path.exists() else "not a regular file")
    file_bytes = path.stat().st_size
    asm = _Assembler()
    doc: dict | None = None
    with Source(path) as src:
        gzipped = src.gzipped
    decoded_by = "sequential"
    if workers > 1 and not gzipped and file_bytes > 2 * piece_bytes:
        staged: list[PieceColumns] = []
        doc = scan_parallel(path, piece_bytes, workers, staged.append)
        if doc is not None:
            decoded_by = "parallel"
            for piece in staged:
                asm.add(piece)
        del staged
    bare = False
    if doc is None:
        asm = _Assembler()
        scanner = Scanner(path, asm.add, piece_bytes)
        with Source(path) as src:
            doc = scanner.scan(src)
        bare = scanner.bare
    meta = _trace_meta(path, doc, rank, file_bytes)
    meta.decoded_by = decoded_by
    if asm.n_events == 0:
        raise TraceError(path, "'traceEvents' is empty: nothing to analyze")
    if asm.n == 0:
        raise TraceError(path, _no_events_problem(asm))
    trace = _finish(asm, meta)
    trace.warnings = _warning_messages(path, trace.notes, asm.problems)
    if bare:
        trace.warnings.append(_bare_array_message(meta))
    for message in trace.warnings:
        warnings.warn(message, TraceWarning, stacklevel=2)
    return trace
