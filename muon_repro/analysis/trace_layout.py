"""Where the ``traceEvents`` array lies in a trace document, and the document's other keys.

A trace is a JSON object with a ``traceEvents`` array, or a bare array of events (the Chrome
trace "JSON array format"). :func:`find_events_start` finds where the array opens in the first
bytes of the file. The top-level keys other than ``traceEvents`` (``distributedInfo``,
``baseTimeNanoseconds``, ...) may come before or after the array; they are parsed from the
header and trailer text with the array emptied out (:func:`header_keys`,
:func:`keys_with_trailer`). Trying a ``]`` that lies inside the events rather than at the
array's end costs a few bytes of parsing, which is what lets the scanner look for the end
from the back of the file (:meth:`muon_repro.analysis.scan.Scanner.decode_final`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from muon_repro.analysis.byte_source import skip_ws
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.limits import too_deep_problem

HEADER_LIMIT = 64 * 2**20  # "traceEvents" must start within this many bytes
TRAILER_LIMIT = 16 * 2**20  # the text after the events array must fit in this
LENIENT_JSON = json.JSONDecoder(strict=False)  # what the tolerant decoder accepts: NaN, raw control characters
BARE_ARRAY_KEYS: dict = {}  # the header keys of a bare array: none (compared by identity)

_NON_WS = re.compile(rb"[^ \t\r\n]")
_NON_WS_TEXT = re.compile(r"[^ \t\r\n]")
_TRAILER_START = '{"traceEvents": []'  # what the trailer continues, in place of the header
_FIRST_WINDOW = 256  # trailer characters parsed first: enough to reject a "]" inside an event


def find_events_start(buf: bytes | bytearray, path: Path) -> tuple[int, bool] | None:
    """Index just after the ``[`` of ``traceEvents`` (and whether the file is a bare array).

    ``None`` means "not in these bytes yet". Raises for a file that is clearly not a JSON
    object or array.
    """
    i = skip_ws(buf, 0)
    if i < len(buf) and buf[i : i + 3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark
        i = skip_ws(buf, i + 3)
    if i >= len(buf):
        return None
    first = buf[i]
    if first == 0x5B:  # [ : the Chrome trace "JSON array" format
        return i + 1, True
    if first != 0x7B:  # {
        raise TraceError(path, f"not a JSON trace: the file starts with {bytes(buf[i : i + 16])!r}")
    k = i
    while True:
        k = buf.find(b'"traceEvents"', k)
        if k < 0:
            return None
        j = skip_ws(buf, k + len(b'"traceEvents"'))
        if j < len(buf) and buf[j] == 0x3A:  # :
            j = skip_ws(buf, j + 1)
            if j >= len(buf):
                return None
            if buf[j] == 0x5B:
                return j + 1, False
        k += 1


def whole_document_error(path: Path, text: bytes) -> TraceError:
    """Explain why a document has no usable ``traceEvents`` array."""
    try:
        doc = json.loads(text.decode("utf-8", "replace"), strict=False)
    except ValueError as exc:
        return TraceError(path, f"not valid JSON: {exc}")
    except RecursionError:
        return TraceError(path, f"not a trace: {too_deep_problem()}")
    if not isinstance(doc, dict):
        return TraceError(path, f"not a trace: the JSON document is a {type(doc).__name__}, not an object")
    if "traceEvents" not in doc:
        return TraceError(path, "not a trace: no 'traceEvents' key")
    return TraceError(path, f"'traceEvents' is a {type(doc['traceEvents']).__name__}, not an array")


def parse_meta(header: bytes, trailer: bytes) -> dict | None:
    """Top-level keys, from the text before and after the events array (array emptied);
    ``None`` if the two do not make one JSON document."""
    head = header_keys(header)
    return None if head is None else keys_with_trailer(head, trailer)


def header_keys(header: bytes) -> dict | None:
    """The keys before the events array (``header`` ends with its ``[``): :data:`BARE_ARRAY_KEYS`
    for a bare array, ``None`` if the header is not the start of a JSON object."""
    text = header.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if text == "[":
        return BARE_ARRAY_KEYS
    try:
        doc = json.loads(text + "]}", strict=False)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.pop("traceEvents", None) != []:
        return None
    return doc


def keys_with_trailer(head: dict, trailer: bytes | memoryview) -> dict | None:
    """The document's keys if ``trailer`` (the text after a candidate ``]``) closes it: for a
    bare array only whitespace, else ``, "key": value ... }`` then whitespace.

    The trailer is parsed a window at a time, the window growing only while the parse runs
    out of text: a ``]`` inside the events fails within a few bytes (an object closes and
    more events follow), so trying one costs little however much of the file lies after it.
    """
    if head is BARE_ARRAY_KEYS:
        return {} if _NON_WS.search(trailer) is None else None
    window = _FIRST_WINDOW
    while True:
        part = bytes(trailer[:window])
        text = _TRAILER_START + part.decode("utf-8", "replace")
        complete = window >= len(trailer)
        try:
            doc, end = LENIENT_JSON.raw_decode(text)
        except RecursionError:
            return None
        except ValueError as exc:
            if complete or not _ran_out(exc, len(text)):
                return None
            window *= 8
            continue
        if _NON_WS_TEXT.search(text, end) is not None or (not complete and _NON_WS.search(trailer, window) is not None):
            return None  # more after the document: this "]" is not the end of the array
        if not isinstance(doc, dict) or doc.pop("traceEvents", None) != []:
            return None
        return {**head, **doc}


def _ran_out(exc: ValueError, length: int) -> bool:
    """Whether a JSON error may just be the end of a window (a token, a string cut short)."""
    position = getattr(exc, "pos", length)
    return position >= length - 16 or str(exc).startswith("Unterminated string")
