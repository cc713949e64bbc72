"""The tolerant decoder: for the pieces of a trace that msgspec's strict decoders reject.

``json.loads(strict=False)`` accepts what real traces contain and strict JSON does not (raw
control characters in strings, ``NaN``), and integers of any size; each field is then coerced
one by one (missing fields get defaults, a string ``pid`` stays a string) and the events go
through the same :func:`~muon_repro.analysis.piece_columns.build_columns` as the fast path's.
About 7x slower per byte than the fast decoder, so the scanner sends it only the chunk that
holds a dirty event (:mod:`muon_repro.analysis.scan`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from muon_repro.analysis.piece_columns import (
    NON_OBJECT_EVENTS,
    TOO_DEEP,
    PieceColumns,
    args_from_dict,
    build_columns,
    correlations_from_dicts,
    no_gc,
)

NAN = math.nan


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
