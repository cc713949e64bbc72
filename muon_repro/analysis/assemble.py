"""Merge a trace's decoded pieces into one :class:`~muon_repro.analysis.trace_events.TraceEvents`.

Each piece (:class:`~muon_repro.analysis.piece_columns.PieceColumns`) codes its events by a
table of keys of its own; :class:`Assembler` maps those to global name, category and thread
codes as the pieces arrive (in file order), and :func:`build_trace_events` builds the tables
once all are in.

The decoders' rules for unusable times (:mod:`muon_repro.analysis.piece_columns`) are completed
here with one that needs the whole trace: a ``dur`` that ends an event more than the trace's own
span (its events' first to last start), and at least a minute, after its last event starts is
implausible (``1e30``) and set to 0. ``[memory]`` byte counts beyond int64 are unknown (null).
Both are counted in the notes, like the decoders' repairs.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis.piece_columns import MAX_EXAMPLES, Args, PieceColumns
from muon_repro.analysis.trace_events import TraceEvents, TraceMeta

MIN_TAIL_US = 60e6  # an event may end this long (or the trace's span, if longer) after the last start
IMPLAUSIBLE_DURATION = "implausible_durations_set_to_zero"
MEMORY_VALUE_OUT_OF_RANGE = "memory_values_out_of_range_dropped"


class Assembler:
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
            if sum(p[0] == problem[0] for p in self.problems) < MAX_EXAMPLES:
                self.problems.append(problem)

    def column(self, key: str, dtype: Any) -> np.ndarray:
        parts = self.cols.pop(key)
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def build_trace_events(asm: Assembler, meta: TraceMeta) -> TraceEvents:
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


def _plausible_durations(ts: np.ndarray, dur: np.ndarray, name_codes: np.ndarray, names: list[str], asm: Assembler) -> np.ndarray:
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
        [(IMPLAUSIBLE_DURATION, names[name_codes[i]], float(ts[i]), float(dur[i])) for i in rows[:MAX_EXAMPLES].tolist()]
    )
    dur = dur.copy()
    dur[rows] = 0.0
    return dur


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
