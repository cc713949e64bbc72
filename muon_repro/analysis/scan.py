"""Stream the ``traceEvents`` array of a trace file out in decodable pieces, and find where the
array lies in the document and the document's other keys.

Why not ``json.load``: a 1 GB trace takes ~17 s and ~5 GB that way. Instead the file is
streamed in pieces of ``piece_bytes``; each piece is cut at an event boundary (``}, {"``
between two events) and handed to :mod:`muon_repro.analysis.decode`, then dropped. Peak
memory is the decoded columns plus a piece or two, not the whole document.

Cutting there is a guess (a kernel name or an ``args`` object can contain the same bytes); a
wrong cut makes the piece invalid JSON, so every cut is *checked by decoding it*, and on
failure an earlier one is tried. A piece that is valid JSON but dirty (raw control
characters, ``NaN``, odd types) goes through the tolerant decoder instead, chunk by chunk
(:data:`CHUNK_BYTES`), so that one dirty event costs the slow decoder one chunk, not the
piece. Uncompressed files can also be decoded by several processes at once
(:mod:`muon_repro.analysis.parallel_scan`); any failure there falls back to this module's
sequential :class:`Scanner`, the reference behaviour.

A trace is a JSON object with a ``traceEvents`` array, or a bare array of events (the Chrome
trace "JSON array format"). :func:`find_events_start` finds where the array opens in the first
bytes of the file. The top-level keys other than ``traceEvents`` (``distributedInfo``,
``baseTimeNanoseconds``, ...) may come before or after the array; they are parsed from the
header and trailer text with the array emptied out (:func:`header_keys`,
:func:`keys_with_trailer`). Where the array ends is found from the back of the file: the last
``]`` after which the rest of the document parses (trying a ``]`` that lies inside the events
costs a few bytes of parsing: an object closes and more events follow), checked by decoding the
events before it; when that fails, the JSON parser itself finds the end, in one pass.

Every step does work proportional to the bytes it is given and is tried a bounded number of
times, so reading costs time linear in the file's size, dirty or not (a bare ``NaN`` or a
string ``dur`` costs the slow decoder one chunk; a truncated or malformed file fails after
one pass). What the file may hold is bounded (:mod:`muon_repro.analysis.limits`): the source
stops at ``max_trace_bytes`` (:mod:`muon_repro.analysis.byte_source`), and the buffer grows to
hold a stretch without a cut (one long event, string or run of whitespace) up to
``max_event_bytes`` only, then the file is refused.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from muon_repro.analysis.byte_source import WHITESPACE, Source, last_non_ws, skip_ws
from muon_repro.analysis.decode import decode_items_tolerant, decode_piece, decode_piece_fast
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.limits import TraceLimits, limit_error, too_deep_problem
from muon_repro.analysis.piece_columns import TOO_DEEP, PieceColumns

# -- the document's layout: where the events array lies, and the keys around it

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


# -- the scanner: the events array in checked pieces

# Larger pieces decode slower per byte (their millions of fresh objects miss the caches and
# need fresh memory): on a 1 GB trace on 2 cores, 32 MB pieces (64 MB sequential buffers) took
# ~7% longer than 16 MB ones read sequentially, ~30% in parallel (two processes, one shared
# last-level cache); 8 to 16 MB measured about the same, 4 MB slower again.
PIECE_BYTES = 16 * 2**20
# A piece the fast decoder rejects is decoded again in chunks of about this many bytes: only
# the chunk holding the dirty event then goes through the slow decoder (~7x slower per byte).
CHUNK_BYTES = 2**18
# "}", ",", "{" and a key's opening quote, with whitespace between: the bytes between two events
EVENT_SEPARATOR = re.compile(rb"\}\s*,\s*\{\s*\"")
MAX_SEPARATOR_BYTES = 256  # a separator with more whitespace than this is not taken for a cut
# The separators are searched for from the back of the buffer in windows of 4 KiB (about a dozen events),
# doubling to 1 MiB: the usual cut costs one small window, a buffer without any one pass of the regex.
_FIRST_CUT_WINDOW = 4 * 2**10
_LAST_CUT_WINDOW = 2**20


def _cut_candidates(buf: bytearray, lo: int, hi: int, limit: int) -> list[int]:
    """Up to ``limit`` positions of ``}`` that look like the end of an event, last first.

    A ``}`` followed by ``,``, whitespace, ``{`` and a key's opening quote (within
    :data:`MAX_SEPARATOR_BYTES`): the separator between two events. It can still lie inside a
    string (a C++ kernel name) or an ``args`` object; the decoder rejects those cuts and an
    earlier one is tried. Searched from the back, a window at a time (the window doubling), so
    a buffer with no cut at all (a huge string, a run of ``}``) costs one pass of the regex.
    """
    out: list[int] = []
    end = hi
    window = _FIRST_CUT_WINDOW
    while end > lo and len(out) < limit:
        start = max(lo, end - window)
        found = [
            m.start()
            for m in EVENT_SEPARATOR.finditer(buf, start, min(hi, end + MAX_SEPARATOR_BYTES))
            if m.start() < end and m.end() - m.start() <= MAX_SEPARATOR_BYTES
        ]
        out.extend(reversed(found))
        end = start
        window = min(2 * window, _LAST_CUT_WINDOW)
    return out[:limit]


class Scanner:
    """Cut and decode the events array from a sequential source, checking every cut."""

    MAX_CUT_TRIES = 4
    MAX_END_CANDIDATES = 64

    def __init__(
        self, path: Path, sink: Callable[[PieceColumns], None], piece_bytes: int, limits: TraceLimits | None = None
    ) -> None:
        self.path = path
        self.sink = sink
        self.piece_bytes = piece_bytes
        self.limits = limits or TraceLimits()
        self.bare = False  # set by scan(): the document is a bare array of events

    def _decode_span(self, buf: bytearray, lo: int, hi: int, tolerant: bool) -> PieceColumns | str:
        """Decode ``buf[lo:hi]`` (events between, not including, two separators).

        ``buf[lo-1]`` and ``buf[hi]`` are overwritten with brackets for the call and restored,
        so the bytes are decoded where they are. Returns the columns, or the error message.
        """
        saved = buf[lo - 1], buf[hi]
        buf[lo - 1], buf[hi] = 0x5B, 0x5D
        view = memoryview(buf)[lo - 1 : hi + 1]
        try:
            return decode_piece(view) if tolerant else decode_piece_fast(view)
        except RecursionError:
            return TOO_DEEP
        except Exception as exc:  # noqa: BLE001 - msgspec's errors, or ValueError from the tolerant decoder
            return str(exc)
        finally:
            buf[lo - 1], buf[hi] = saved
            # An interrupted decode's half-built objects still hold the view: releasing it then raises BufferError,
            # which would replace the interrupt (and read as a broken trace). They go with the interrupt, and so does it.
            with contextlib.suppress(BufferError):
                view.release()

    def _try_span(self, buf: bytearray, lo: int, hi: int, tolerant: bool) -> str | None:
        """Decode events in ``buf[lo:hi]`` into the sink; ``None`` on success, else the error."""
        if skip_ws(buf, lo) >= hi:
            return None
        result = self._decode_span(buf, lo, hi, tolerant)
        if isinstance(result, PieceColumns):
            self.sink(result)
            return None
        return result

    def _decode_at_cuts(self, buf: bytearray, pos: int, cuts: list[int], tolerant: bool) -> tuple[int | None, str]:
        """Decode ``buf[pos:]`` up to the first of ``cuts`` that works (last first): where the
        rest starts, or ``None`` and the first error."""
        error = ""
        for q in cuts:
            problem = self._try_span(buf, pos, q + 1, tolerant)
            if problem is None:
                return buf.index(b",", q) + 1, ""
            error = error or problem
        return None, error

    def _decode_chunk(self, buf: bytearray, pos: int, hi: int) -> tuple[int | None, str]:
        """Decode ``buf[pos:hi]`` up to its last good cut, fast, else tolerant (see
        :meth:`_decode_at_cuts`); ``pos`` itself when there is no cut in it."""
        cuts = _cut_candidates(buf, pos, hi, self.MAX_CUT_TRIES)
        if not cuts:
            return pos, ""
        new_pos, error = self._decode_at_cuts(buf, pos, cuts, tolerant=False)
        if new_pos is None:
            new_pos, _ = self._decode_at_cuts(buf, pos, cuts, tolerant=True)
        return new_pos, error

    def _decode_chunks(self, buf: bytearray, pos: int, stop: int) -> int:
        """Decode ``buf[pos:stop]`` chunk by chunk while more than two chunks are left; return
        where the rest starts. Stops early at a chunk without a cut (an event larger than a
        chunk) or one that cannot be decoded: the caller decodes or reports the rest."""
        while stop - pos > 2 * CHUNK_BYTES:
            new_pos, _ = self._decode_chunk(buf, pos, pos + CHUNK_BYTES)
            if new_pos is None or new_pos == pos:
                break
            pos = new_pos
        return pos

    def decode_bulk(self, buf: bytearray, pos: int, filled: int, base: int) -> int:
        """Decode ``buf[pos:filled]`` up to the last good cut; return where the rest starts.

        Returns ``pos`` unchanged when there is no cut yet (an event larger than the buffer).
        A piece the fast decoder rejects at every cut (dirty data) is decoded chunk by chunk.
        """
        cuts = _cut_candidates(buf, pos, filled, self.MAX_CUT_TRIES)
        if not cuts:
            return pos
        new_pos, error = self._decode_at_cuts(buf, pos, cuts, tolerant=False)
        if new_pos is not None:
            return new_pos
        pos = self._decode_chunks(buf, pos, filled)
        new_pos, error = self._decode_chunk(buf, pos, filled)
        if new_pos is None:
            last = _cut_candidates(buf, pos, filled, 1)
            raise TraceError(
                self.path, f"invalid JSON in traceEvents between bytes {base + pos} and {base + (last or [filled])[0]}: {error}"
            )
        return new_pos

    def decode_final(self, buf: bytearray, pos: int, base: int, header: bytes) -> dict:
        """Decode the last events, find where the array closes; return the top-level keys.

        The usual case costs one fast decode: the last ``]`` after which the rest of the
        document parses closes the array. Otherwise (dirty events, or a ``]`` in the trailer
        that looks like the end) the events are decoded chunk by chunk up to the lowest such
        ``]``, the rest is tried against each of them, and failing that the JSON parser finds
        the end itself (:meth:`_decode_rest_tolerant`).
        """
        head = header_keys(header)
        candidates = self._array_ends(buf, pos, head)
        first = next(candidates, None)
        if first is not None and self._try_span(buf, pos, first[0], tolerant=False) is None:
            return first[1]
        ends = [first, *candidates] if first is not None else []
        pos = self._decode_chunks(buf, pos, ends[-1][0] if ends else len(buf))
        for p, meta in ends:
            if self._try_span(buf, pos, p, tolerant=False) is None:
                return meta
        return self._decode_rest_tolerant(buf, pos, base, head)

    def _array_ends(self, buf: bytearray, pos: int, head: dict | None) -> Iterator[tuple[int, dict]]:
        """Where the events array may close, last first, with the document's other keys: each
        ``]`` after which the rest of the document parses. At most MAX_END_CANDIDATES brackets
        are parsed after; a trailer with more is left to :meth:`_decode_rest_tolerant`."""
        last = last_non_ws(buf)
        if head is None or last < pos:
            return
        if head is BARE_ARRAY_KEYS:  # nothing may follow the array
            if buf[last] == 0x5D:
                yield last, {}
            return
        if buf[last] != 0x7D:  # an object document ends with "}": truncated
            return
        lowest = max(pos, len(buf) - TRAILER_LIMIT)
        p = len(buf)
        tried = 0
        while tried < self.MAX_END_CANDIDATES:
            p = buf.rfind(b"]", lowest, p)
            if p < 0:
                break
            j = skip_ws(buf, p + 1)
            if j < len(buf) and buf[j] not in (0x2C, 0x7D):  # followed by "," or "}"
                continue
            tried += 1
            meta = keys_with_trailer(head, memoryview(buf)[p + 1 :])
            if meta is not None:
                yield p, meta

    def _decode_rest_tolerant(self, buf: bytearray, pos: int, base: int, head: dict | None) -> dict:
        """Decode ``buf[pos:]`` (the last events, then the trailer) with the JSON parser, which
        finds where the array closes; one pass, for whatever the other ways could not read."""
        if head is None:
            raise TraceError(self.path, "malformed JSON before the traceEvents array (or 'traceEvents' is not a top-level key)")
        text = "[" + bytes(buf[pos:]).decode("utf-8", "replace")
        try:
            items, stop = LENIENT_JSON.raw_decode(text)
        except RecursionError:
            raise TraceError(self.path, f"traceEvents after byte {base + pos}: {TOO_DEEP}") from None
        except ValueError as exc:  # JSONDecodeError, or a number too long to convert
            where = base + pos - 1 + len(text[: getattr(exc, "pos", 0)].encode("utf-8"))
            reason = getattr(exc, "msg", str(exc)).removesuffix(" at")
            raise TraceError(self.path, f"truncated or malformed JSON in traceEvents: {reason} at byte {where}") from None
        meta = keys_with_trailer(head, text[stop:].encode("utf-8"))
        if meta is None:
            where = base + pos - 1 + len(text[:stop].encode("utf-8"))
            raise TraceError(self.path, f"truncated or malformed JSON after the traceEvents array, which ends at byte {where}")
        self.sink(decode_items_tolerant(items))
        return meta

    def _grow_for_event(self, buf: bytearray, pos: int, filled: int, base: int) -> None:
        """Make room in a full ``buf`` whose ``buf[pos:filled]`` holds no event boundary: double
        it, but never past one byte more than ``max_event_bytes`` from ``pos``; refuse a stretch
        already longer than that (an event, a string or whitespace that cannot be a real event)."""
        limit = self.limits.max_event_bytes
        if filled - pos > limit:
            raise limit_error(
                self.path,
                "max_event_bytes",
                self.limits,
                f"no boundary between two events in the {filled - pos:,} bytes of traceEvents from byte {base + pos}",
            )
        buf.extend(bytes(min(len(buf), pos + limit + 1 - len(buf))))

    def scan(self, src: Source) -> dict:
        """Read ``src`` to the end; return the top-level keys other than ``traceEvents``.

        One buffer of two pieces (or the whole source, if smaller) is reused: filled from the
        source, decoded up to its last good cut, and the unfinished tail moved to the front.
        """
        buf = bytearray(max(min(2 * self.piece_bytes, src.size_hint + 1), 1 << 16))
        filled = src.readinto(memoryview(buf))
        eof = filled < len(buf)
        while (found := find_events_start(bytes(buf[:filled]), self.path)) is None and not eof and filled < HEADER_LIMIT:
            buf.extend(bytes(len(buf)))  # a header larger than the buffer: grow it
            filled += src.readinto(memoryview(buf)[filled:])
            eof = filled < len(buf)
        if found is None:
            if not eof and filled >= HEADER_LIMIT:
                raise TraceError(self.path, f"no 'traceEvents' array in the first {HEADER_LIMIT >> 20} MB")
            rest = [bytes(buf[:filled])]
            while not eof:
                more = bytearray(self.piece_bytes)
                n = src.readinto(memoryview(more))
                rest.append(bytes(more[:n]))
                eof = n < len(more)
            text = b"".join(rest)
            if not text.strip(WHITESPACE):
                raise TraceError(self.path, "empty file")
            raise whole_document_error(self.path, text)
        pos, bare = found
        self.bare = bare
        header = bytes(buf[:pos])
        base = 0  # offset of buf[0] in the decompressed stream
        while True:
            if not eof and filled < len(buf):
                n = src.readinto(memoryview(buf)[filled:])
                filled += n
                eof = filled < len(buf)
            if eof:  # the trailer is in the buffer now, and only now
                del buf[filled:]
                meta = self.decode_final(buf, pos, base, header)
                return {} if bare else meta
            new_pos = self.decode_bulk(buf, pos, filled, base)
            if new_pos == pos:  # no cut in a full buffer: one huge event; make room, up to the limit
                self._grow_for_event(buf, pos, filled, base)
                continue
            # move the unfinished tail (and the separator before it) to the front
            tail = bytes(buf[new_pos - 1 : filled])
            buf[: len(tail)] = tail
            base += new_pos - 1
            filled = len(tail)
            pos = 1
