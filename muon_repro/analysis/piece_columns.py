"""A decoded piece of a trace: :class:`PieceColumns`, and how its columns are built.

Whichever decoder of :mod:`muon_repro.analysis.decode` read a piece (the fast and plain ones,
or the tolerant one for dirty pieces), its events come here as objects with the same
attributes (``name cat pid tid ts dur args``), and :func:`build_columns` turns them into a
:class:`PieceColumns` of numpy arrays plus a *local* table of event keys ``(name, cat, pid, tid)``
that the reader merges into global dictionaries. Only the events the
analysis needs arguments of (:data:`ARG_NAME_PREFIXES`, ``[memory]``, metadata) get their
``args`` decoded, into :class:`Args`; GPU work and the runtime calls that launch it
(:data:`CORRELATION_CATS`) get only their ``correlation`` id, into an integer column.

Unusable times, the same on every path: a complete event whose ``ts`` is missing or not a
number, infinite, or of magnitude 2**53 us or more (285 years: no clock gets there, and float64
no longer holds whole microseconds) is dropped; a ``dur`` that is not a finite number (a string that does
not parse, ``NaN``), negative, or 2**53 us or more is set to 0. Each is counted in
:attr:`PieceColumns.notes` and its first few events are kept in :attr:`PieceColumns.problems`,
for the reader to warn about by name (this module does not know the file's name).

Like the decoders, this module imports only numpy, msgspec and the standard library (through
:mod:`muon_repro.analysis.limits`): worker processes import it.
"""

from __future__ import annotations

import functools
import gc
import json
import operator
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import msgspec
import numpy as np

from muon_repro.analysis.limits import too_deep_problem

P = ParamSpec("P")
R = TypeVar("R")

# Events whose ``args`` the analysis reads (besides every metadata event).
ARG_NAME_PREFIXES = (
    "c10d::",
    "gloo:",
    "nccl:",
    "ncclKernel",
    "ncclDevKernel",
    "record_param_comms",
    "[memory]",
)

# Categories whose ``args.correlation`` links a GPU activity to the runtime call launching it
# (Kineto writes the same id on both, and as the ``id`` of the ``ac2g`` flow between them).
GPU_WORK_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
CORRELATION_CATS = frozenset(GPU_WORK_CATS + LAUNCH_CATS)
NO_CORRELATION = -1

MAX_ABS_TS_US = 2.0**53  # from this on a time is out of range (see the module docstring)
MAX_EXAMPLES = 3  # events kept per kind of problem and piece, to name in warnings

# kinds of repaired or dropped data: keys of PieceColumns.notes, first fields of its problems
TS_MISSING = "events_without_timestamp_dropped"
TS_OUT_OF_RANGE = "events_with_ts_out_of_range_dropped"
BAD_DURATION = "bad_durations_set_to_zero"
MEMORY_TS_DROPPED = "memory_events_without_timestamp_dropped"
NON_OBJECT_EVENTS = "non_object_events_dropped"
TOO_DEEP = too_deep_problem()  # what a piece nested past the parsers' depth is refused for


class Args(msgspec.Struct, gc=False, omit_defaults=True):
    """The ``args`` keys the analysis reads; all optional, everything else is skipped."""

    name: str | None = None  # metadata events: thread / process name
    labels: str | None = None  # process_labels: "CPU", "GPU 0"
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    out_nelems: int | None = msgspec.field(name="Out msg nelems", default=None)
    group_size: int | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = None
    pg_name: str | None = msgspec.field(name="Process Group Name", default=None)
    pg_desc: str | None = msgspec.field(name="Process Group Description", default=None)
    input_dims: Any = msgspec.field(name="Input Dims", default=None)
    input_type: Any = msgspec.field(name="Input type", default=None)
    nbytes: int | float | None = msgspec.field(name="Bytes", default=None)
    total_allocated: int | float | None = msgspec.field(name="Total Allocated", default=None)
    device_type: int | None = msgspec.field(name="Device Type", default=None)
    device_id: int | None = msgspec.field(name="Device Id", default=None)
    external_id: int | None = msgspec.field(name="External id", default=None)
    correlation: int | None = None


class _Correlation(msgspec.Struct, gc=False):
    """Just the correlation id: msgspec skips every other key of a kernel's args."""

    correlation: int = NO_CORRELATION


_ARGS_LIST_DECODER = msgspec.json.Decoder(list[Args])
_ARGS_DECODER = msgspec.json.Decoder(Args)
_CORRELATION_DECODER = msgspec.json.Decoder(_Correlation)

_get_ts = operator.attrgetter("ts")
_get_dur = operator.attrgetter("dur")
_get_key = operator.attrgetter("name", "cat", "pid", "tid")
_get_correlation = operator.attrgetter("correlation")


@dataclass
class PieceColumns:
    """One piece's events, split by what the analysis does with them.

    Events are identified by a key ``(name, cat, pid, tid)`` factorized once per piece:
    events repeat these combinations heavily, and one dictionary lookup per event is the
    cheapest way to turn millions of fresh strings into integer codes. Flow events,
    counters and other phases are dropped here, so they never cross a process boundary.
    """

    keys: list[tuple[str, str, int | str, int | str]]  # (name, cat, pid, tid)
    # complete events ("ph": "X") with a usable timestamp
    ts: np.ndarray  # float64, microseconds as in the file
    dur: np.ndarray  # float64, microseconds, >= 0
    key: np.ndarray  # int32 into keys
    correlation: np.ndarray  # int64 args.correlation of GPU work and launches, NO_CORRELATION elsewhere
    arg_rows: np.ndarray  # int64 into the complete events: those whose args were decoded
    args: list[Args]
    # "[memory]" instant events
    mem_ts: np.ndarray
    mem_key: np.ndarray
    mem_args: list[Args]
    # metadata events ("ph": "M": thread and process names)
    meta_key: np.ndarray
    meta_args: list[Args]
    n_events: int = 0
    notes: dict[str, int] = field(default_factory=dict)  # dirty-data counters
    # the first few events of each kind of note: (kind, event name, ts, offending value)
    problems: list[tuple[str, str, float, float]] = field(default_factory=list)


def no_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` with the cyclic garbage collector paused.

    Decoding allocates millions of small objects that cannot form cycles; letting the
    collector walk them on every allocation burst costs more than the decoding itself.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper


def decode_raw_args(raws: list[msgspec.Raw]) -> list[Args]:
    """The fast path's ``args``: one batched decode, else one by one (dropping unusable keys)."""
    if not raws:
        return []
    try:
        return _ARGS_LIST_DECODER.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return [_args_from_raw(r) for r in raws]


def decode_raw_correlations(raws: list[msgspec.Raw]) -> np.ndarray:
    """The fast path's ``args.correlation`` ids as int64, NO_CORRELATION where unusable."""
    if not raws:
        return np.zeros(0, np.int64)
    try:  # one decode call per event: cheaper than joining the raw bytes into one array
        ids = np.fromiter(map(_get_correlation, map(_CORRELATION_DECODER.decode, raws)), np.int64, len(raws))
    except (msgspec.DecodeError, msgspec.ValidationError, OverflowError, RecursionError):  # an odd args object or id: one by one
        return _id_array([_correlation_from_raw(r) for r in raws])
    return np.where(ids >= 0, ids, NO_CORRELATION)


def _correlation_from_raw(raw: msgspec.Raw) -> int:
    try:
        return _CORRELATION_DECODER.decode(raw).correlation
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return NO_CORRELATION


def correlations_from_dicts(values: list) -> np.ndarray:
    """The tolerant path's ``args.correlation`` ids (``args`` as decoded JSON values)."""
    return _id_array([v.get("correlation") if isinstance(v, dict) else None for v in values])


def _id_array(ids: list) -> np.ndarray:
    """Non-negative int64 ids; anything else (absent, float, huge, bool) is NO_CORRELATION."""
    ok = [i if type(i) is int and 0 <= i < 2**63 else NO_CORRELATION for i in ids]
    return np.fromiter(ok, np.int64, len(ok))


def build_columns(
    xs: list,
    instants: list,
    metas: list,
    n_events: int,
    notes: dict[str, int],
    get_args: Callable[[list], list[Args]],
    get_correlations: Callable[[list], np.ndarray],
) -> PieceColumns:
    """Columns from the three kinds of events kept (objects with name/cat/pid/tid/ts/...)."""
    # key -> code, a new key getting the next code: a C-level loop with no Python frame per event
    table: defaultdict = defaultdict()
    table.default_factory = table.__len__
    code_of = table.__getitem__
    n = len(xs)
    key = np.fromiter(map(code_of, map(_get_key, xs)), np.int32, n)
    ts = np.fromiter(map(_get_ts, xs), np.float64, n)
    dur = np.fromiter(map(_get_dur, xs), np.float64, n)

    problems: list[tuple[str, str, float, float]] = []
    usable = np.abs(ts) < MAX_ABS_TS_US  # False for NaN and infinities too
    if not usable.all():
        missing = np.isnan(ts)
        _note(notes, problems, TS_MISSING, missing, xs, ts, ts)
        _note(notes, problems, TS_OUT_OF_RANGE, ~usable & ~missing, xs, ts, ts)
        keep = np.flatnonzero(usable)
        xs = [xs[i] for i in keep.tolist()]
        ts, dur, key = ts[keep], dur[keep], key[keep]
    bad = ~((dur >= 0) & (dur < MAX_ABS_TS_US))  # NaN compares False: bad too
    if bad.any():
        _note(notes, problems, BAD_DURATION, bad, xs, ts, dur)
        dur = np.where(bad, 0.0, dur)

    mem = [e for e in instants if e.name == "[memory]"]
    mem_usable = [e for e in mem if abs(e.ts) < MAX_ABS_TS_US]  # False for NaN
    if len(mem_usable) < len(mem):
        notes[MEMORY_TS_DROPPED] = notes.get(MEMORY_TS_DROPPED, 0) + len(mem) - len(mem_usable)
    mem = mem_usable
    mem_key = np.fromiter(map(code_of, map(_get_key, mem)), np.int32, len(mem))
    meta_key = np.fromiter(map(code_of, map(_get_key, metas)), np.int32, len(metas))

    keys = list(table)
    wanted = np.fromiter((k[0].startswith(ARG_NAME_PREFIXES) for k in keys), bool, len(keys))
    arg_rows = np.flatnonzero(wanted[key]) if len(keys) else np.zeros(0, np.int64)
    linked = np.fromiter((k[1] in CORRELATION_CATS for k in keys), bool, len(keys))
    linked_rows = np.flatnonzero(linked[key]) if len(keys) else np.zeros(0, np.int64)
    correlation = np.full(len(ts), NO_CORRELATION, np.int64)
    correlation[linked_rows] = get_correlations([xs[i].args for i in linked_rows.tolist()])
    return PieceColumns(
        keys=keys,
        ts=ts,
        dur=dur,
        key=key,
        correlation=correlation,
        arg_rows=arg_rows,
        args=get_args([xs[i].args for i in arg_rows.tolist()]),
        mem_ts=np.fromiter(map(_get_ts, mem), np.float64, len(mem)),
        mem_key=mem_key,
        mem_args=get_args([e.args for e in mem]),
        meta_key=meta_key,
        meta_args=get_args([e.args for e in metas]),
        n_events=n_events,
        notes=notes,
        problems=problems,
    )


def _note(
    notes: dict[str, int],
    problems: list[tuple[str, str, float, float]],
    kind: str,
    mask: np.ndarray,
    xs: list,
    ts: np.ndarray,
    values: np.ndarray,
) -> None:
    """Count the events of ``mask`` under ``kind`` and keep the first few, by name, to warn about."""
    rows = np.flatnonzero(mask)
    if not len(rows):
        return
    notes[kind] = notes.get(kind, 0) + len(rows)
    for i in rows[:MAX_EXAMPLES].tolist():
        problems.append((kind, str(xs[i].name), float(ts[i]), float(values[i])))


def _args_from_raw(raw: msgspec.Raw) -> Args:
    try:
        return _ARGS_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    try:
        value = json.loads(bytes(raw).decode("utf-8", "replace"), strict=False)
    except (ValueError, RecursionError):
        return Args()
    return args_from_dict(value)


def args_from_dict(value: Any) -> Args:
    """Coerce a decoded ``args`` object into :class:`Args`, dropping keys of unusable types."""
    if not isinstance(value, dict):
        return Args()
    try:
        return msgspec.convert(value, Args, strict=False)
    except (msgspec.ValidationError, TypeError, ValueError, OverflowError, RecursionError):
        pass
    kept: dict[str, Any] = {}
    for key in Args.__struct_encode_fields__:
        if key in value:
            try:
                msgspec.convert({key: value[key]}, Args, strict=False)
            except (msgspec.ValidationError, TypeError, ValueError, OverflowError, RecursionError):
                continue
            kept[key] = value[key]
    return msgspec.convert(kept, Args, strict=False)
