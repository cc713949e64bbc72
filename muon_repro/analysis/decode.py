"""Decode one *piece* of a trace's ``traceEvents`` array into columns.

A piece is a JSON array of events (``[{...}, {...}]``) cut out of the file by
:mod:`muon_repro.analysis.scan`. Decoding happens here and in the modules this one imports,
which import only numpy and msgspec so that worker processes start fast.

Three decoders, tried in order:

* **fast**: msgspec decodes the array as a *tagged union* on ``ph``: complete events
  (``X``) into a narrow typed struct (``cat name pid tid ts dur``, ``args`` kept undecoded as
  a :class:`msgspec.Raw`), instants and metadata into smaller ones, and every other phase
  (flows, counters...) into empty structs, so their fields are skipped without allocating
  anything. Only the events the analysis needs arguments of (collectives, ``[memory]``,
  metadata) get their ``args`` decoded, in one batched call; GPU work and the runtime calls
  that launch it (:data:`~muon_repro.analysis.piece_columns.CORRELATION_CATS`) get only their
  ``correlation`` id decoded, into an integer column, to join kernels to their launches
  without per-event objects.
* **plain**: one struct with a ``ph`` field, for traces with unusual phases or no ``ph``.
* **tolerant** (:func:`decode_piece_tolerant`): ``json.loads(strict=False)`` and per-field
  coercion, for pieces the others reject. It accepts what real traces contain and strict JSON
  does not (raw control characters in strings, ``NaN``), and integers of any size; missing
  fields get defaults, a string ``pid`` stays a string. About 7x slower per byte than the fast
  decoder, so the scanner sends it only the chunk that holds a dirty event.

:func:`decode_piece` tries all three; :func:`decode_file_range` is the worker processes' entry
point. Each decoder hands its events to
:func:`muon_repro.analysis.piece_columns.build_columns`, which applies the same rules for
unusable times on every path and returns a :class:`~muon_repro.analysis.piece_columns.PieceColumns`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Union

import msgspec

from muon_repro.analysis.piece_columns import (
    NON_OBJECT_EVENTS,
    TOO_DEEP,
    PieceColumns,
    args_from_dict,
    build_columns,
    correlations_from_dicts,
    decode_raw_args,
    decode_raw_correlations,
    no_gc,
)

NAN = math.nan

_RAW_EMPTY = msgspec.Raw(b"{}")


# -- fast path: a tagged union on "ph" (Kineto writes "ph" first, which msgspec needs to be fast)


class _X(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = NAN
    dur: float = 0.0
    args: msgspec.Raw = _RAW_EMPTY


class _Instant(msgspec.Struct, gc=False, tag_field="ph", tag="i"):
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = NAN
    args: msgspec.Raw = _RAW_EMPTY


class _InstantUpper(_Instant, tag="I"):
    pass


class _Meta(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    args: msgspec.Raw = _RAW_EMPTY


def _skipped(tag: str) -> type:
    return msgspec.defstruct(f"_Skip_{tag}", [], tag_field="ph", tag=tag, gc=False)


# every other phase of the Chrome trace format: decoded to an empty struct (fields skipped)
_SKIPPED = tuple(
    _skipped(t) for t in ("B", "E", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D", "R", "c", "S", "T", "p", "F", "V", "v")
)
_TAGGED_DECODER = msgspec.json.Decoder(list[Union[(_X, _Instant, _InstantUpper, _Meta, *_SKIPPED)]])  # type: ignore[valid-type]


# -- plain path: one struct for every event


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = NAN
    dur: float = 0.0
    args: msgspec.Raw = _RAW_EMPTY


_PLAIN_DECODER = msgspec.json.Decoder(list[_Event])


def decode_piece(buf: bytes | bytearray | memoryview) -> PieceColumns:
    """Decode a JSON array of trace events: fast, else plain, else tolerant.

    Raises ``ValueError`` (with the decoder's message) when none can read it, which for a
    piece the reader cut means a bad cut or a file that is not JSON there.
    """
    try:
        return decode_piece_fast(buf)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    return decode_piece_tolerant(buf)


@no_gc
def decode_piece_fast(buf: bytes | bytearray | memoryview) -> PieceColumns:
    """msgspec typed decode (tagged union, else plain struct); raises msgspec errors."""
    try:
        events = _TAGGED_DECODER.decode(buf)
    except msgspec.ValidationError:  # a phase outside the Chrome format, or no "ph"
        return _from_plain(_PLAIN_DECODER.decode(buf))
    xs = [e for e in events if e.__class__ is _X]
    rare = [e for e in events if e.__class__ in _RARE]  # instants and metadata: few
    instants = [e for e in rare if e.__class__ is not _Meta]
    metas = [e for e in rare if e.__class__ is _Meta]
    return build_columns(xs, instants, metas, len(events), {}, decode_raw_args, decode_raw_correlations)


_RARE = frozenset({_Instant, _InstantUpper, _Meta})


def _from_plain(events: list[_Event]) -> PieceColumns:
    xs = [e for e in events if e.ph == "X"]
    instants = [e for e in events if e.ph in ("i", "I")]
    metas = [e for e in events if e.ph == "M"]
    return build_columns(xs, instants, metas, len(events), {}, decode_raw_args, decode_raw_correlations)


def decode_file_range(path: str, start: int, stop: int) -> PieceColumns:
    """Worker entry point: read ``[start, stop)`` of an uncompressed file and decode it.

    The range holds whole events separated by commas (no brackets); brackets are added in a
    buffer one byte larger on each side, so the bytes are read once and never copied.
    """
    size = stop - start
    buf = bytearray(size + 2)
    view = memoryview(buf)
    with open(path, "rb") as fh:
        fh.seek(start)
        got = fh.readinto(view[1 : size + 1])
    view.release()
    if got != size:
        raise ValueError(f"file changed while reading: expected {size} bytes at offset {start}, got {got}")
    buf[0] = 0x5B  # [
    buf[-1] = 0x5D  # ]
    return decode_piece(buf)


# -- tolerant path: json.loads(strict=False), then each field coerced (for dirty pieces)


def _as_float(value: Any, default: float) -> float:
    """A JSON value as a number: ``default`` when absent (``None``), NaN when unusable (a bool,
    an object, a string that is no number). Infinities and huge values are returned as they
    are, for :func:`~muon_repro.analysis.piece_columns.build_columns` to judge and count."""
    if value is None:
        return default
    if isinstance(value, bool):
        return NAN
    if isinstance(value, (int, float, str)):
        try:
            return float(value)
        except ValueError:  # a string that is no number
            return NAN
        except OverflowError:  # an integer beyond float64
            return math.inf if value > 0 else -math.inf
    return NAN


def _as_id(value: Any) -> int | str:
    if isinstance(value, bool) or value is None:
        return -1
    if isinstance(value, (int, str)):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return str(value)


def _as_str(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


@dataclass
class _Coerced:
    """One event of the tolerant path, with the attributes the fast path's structs have."""

    ph: str
    cat: str
    name: str
    pid: int | str
    tid: int | str
    ts: float
    dur: float
    args: Any


@no_gc
def decode_piece_tolerant(buf: bytes | bytearray | memoryview) -> PieceColumns:
    """``json.loads(strict=False)`` and per-field coercion; slow, for dirty pieces only."""
    text = bytes(buf).decode("utf-8", "replace")
    try:
        items = json.loads(text, strict=False)
    except ValueError as exc:  # JSONDecodeError, or a number too long to convert
        raise ValueError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    if not isinstance(items, list):
        raise ValueError("expected a JSON array of events")  # noqa: TRY004 - bad input, reported as such
    return decode_items_tolerant(items)


@no_gc
def decode_items_tolerant(items: list) -> PieceColumns:
    """Columns from already decoded events (any JSON values), coerced field by field."""
    notes: dict[str, int] = {"tolerant_pieces": 1}
    events = [
        _Coerced(
            _as_str(e.get("ph")),
            _as_str(e.get("cat")),
            _as_str(e.get("name")),
            _as_id(e.get("pid")),
            _as_id(e.get("tid")),
            _as_float(e.get("ts"), NAN),
            _as_float(e.get("dur"), 0.0),
            e.get("args"),
        )
        for e in items
        if isinstance(e, dict)
    ]
    if len(events) != len(items):
        notes[NON_OBJECT_EVENTS] = len(items) - len(events)
    xs = [e for e in events if e.ph == "X"]
    instants = [e for e in events if e.ph in ("i", "I")]
    metas = [e for e in events if e.ph == "M"]
    return build_columns(
        xs, instants, metas, len(items), notes, lambda values: [args_from_dict(v) for v in values], correlations_from_dicts
    )
