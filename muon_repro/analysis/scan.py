"""Stream the ``traceEvents`` array of a trace file out in decodable pieces.

Why not ``json.load``: a 1 GB trace takes ~17 s and ~5 GB that way. Instead the file is
streamed in pieces of ``piece_bytes``; each piece is cut at an event boundary (``}, {"``
between two events) and handed to :mod:`muon_repro.analysis.decode`, then dropped. Peak
memory is the decoded columns plus a piece or two, not the whole document.

Cutting there is a guess (a kernel name or an ``args`` object can contain the same bytes); a
wrong cut makes the piece invalid JSON, so every cut is *checked by decoding it*, and on
failure an earlier one is tried. A piece that is valid JSON but dirty (raw control
characters, ``NaN``, odd types) goes through the tolerant decoder instead, chunk by chunk
(:data:`CHUNK_BYTES`), so that one dirty event costs the slow decoder one chunk, not the
piece. Uncompressed files can also be decoded by several processes at once, the reading one
included (each reads its own byte ranges); any failure there falls back to the sequential
path, the reference behaviour.

The top-level keys other than ``traceEvents`` (``distributedInfo``, ``baseTimeNanoseconds``,
...) may come before or after the array; they are parsed from the header and trailer text
with the array emptied out. Where the array ends is found from the back of the file: the
last ``]`` after which the rest of the document parses (:func:`parse_meta`, which rejects a
``]`` inside the events after reading a few bytes past it), checked by decoding the events
before it; when that fails, the JSON parser itself finds the end, in one pass.

Every step does work proportional to the bytes it is given and is tried a bounded number of
times, so reading costs time linear in the file's size, dirty or not (a bare ``NaN`` or a
string ``dur`` costs the slow decoder one chunk; a truncated or malformed file fails after
one pass).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from muon_repro.analysis import decode
from muon_repro.analysis.decode import PieceColumns, decode_file_range, decode_piece, decode_piece_fast
from muon_repro.analysis.errors import TraceError

# Larger pieces decode slower per byte (their millions of fresh objects miss the caches and
# need fresh memory): on a 1 GB trace on 2 cores, 32 MB pieces (64 MB sequential buffers) took
# ~7% longer than 16 MB ones read sequentially, ~30% in parallel (two processes, one shared
# last-level cache); 8 to 16 MB measured about the same, 4 MB slower again.
PIECE_BYTES = 16 * 2**20
HEADER_LIMIT = 64 * 2**20  # "traceEvents" must start within this many bytes
TRAILER_LIMIT = 16 * 2**20  # the text after the events array must fit in this
_WINDOW = 2**20  # bytes read around a nominal cut point when planning parallel pieces
# A piece the fast decoder rejects is decoded again in chunks of about this many bytes: only
# the chunk holding the dirty event then goes through the slow decoder (~7x slower per byte).
CHUNK_BYTES = 2**18
_WS = b" \t\r\n"
_NON_WS = re.compile(rb"[^ \t\r\n]")
_NON_WS_TEXT = re.compile(r"[^ \t\r\n]")
_LENIENT = json.JSONDecoder(strict=False)  # what the tolerant decoder accepts: NaN, raw control characters


# ---------------------------------------------------------------- sources


class Source:
    """Sequential byte source over a plain or gzip file, with errors that name the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by close() / __exit__
        except OSError as exc:
            raise TraceError(path, f"cannot open: {exc.strerror or exc}") from None
        self.gzipped = self._raw.read(2) == b"\x1f\x8b"
        self.size_hint = self._size_hint()
        self._raw.seek(0)
        self._fh: BinaryIO = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gzipped else self._raw

    def _size_hint(self) -> int:
        """About how many bytes the source holds, to size the first buffer (a small file should
        not cost a buffer of two pieces): a plain file's size; for gzip, the size its trailer
        records (modulo 4 GiB, the last member's), and at least 4x the compressed size."""
        size = os.fstat(self._raw.fileno()).st_size
        if not self.gzipped or size < 18:
            return size
        self._raw.seek(-4, os.SEEK_END)
        return max(int.from_bytes(self._raw.read(4), "little"), 4 * size)

    def readinto(self, view: memoryview) -> int:
        """Fill ``view`` as far as the data goes; fewer bytes than its length means the end."""
        got = 0
        while got < len(view):
            n = self._readinto(view[got:])
            if not n:
                break
            got += n
        return got

    def _readinto(self, view: memoryview) -> int:
        try:
            return self._fh.readinto(view)
        except EOFError:
            raise TraceError(self.path, "truncated gzip file (the compressed stream ends early)") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise TraceError(self.path, f"corrupt gzip data: {exc}") from None
        except OSError as exc:
            raise TraceError(self.path, f"read error: {exc}") from None

    def close(self) -> None:
        if self._fh is not self._raw:
            self._fh.close()
        self._raw.close()

    def __enter__(self):  # returns the subclass instance too
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _skip_ws(buf: bytes | bytearray, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _last_non_ws(buf: bytes | bytearray) -> int:
    """Index of the last byte that is not whitespace, -1 if none."""
    i = len(buf) - 1
    while i >= 0 and buf[i] in _WS:
        i -= 1
    return i


def find_events_start(buf: bytes | bytearray, path: Path) -> tuple[int, bool] | None:
    """Index just after the ``[`` of ``traceEvents`` (and whether the file is a bare array).

    ``None`` means "not in these bytes yet". Raises for a file that is clearly not a JSON
    object or array.
    """
    i = _skip_ws(buf, 0)
    if i < len(buf) and buf[i : i + 3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark
        i = _skip_ws(buf, i + 3)
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
        j = _skip_ws(buf, k + len(b'"traceEvents"'))
        if j < len(buf) and buf[j] == 0x3A:  # :
            j = _skip_ws(buf, j + 1)
            if j >= len(buf):
                return None
            if buf[j] == 0x5B:
                return j + 1, False
        k += 1


def _whole_document_error(path: Path, text: bytes) -> TraceError:
    """Explain why a document has no usable ``traceEvents`` array."""
    try:
        doc = json.loads(text.decode("utf-8", "replace"), strict=False)
    except ValueError as exc:
        return TraceError(path, f"not valid JSON: {exc}")
    if not isinstance(doc, dict):
        return TraceError(path, f"not a trace: the JSON document is a {type(doc).__name__}, not an object")
    if "traceEvents" not in doc:
        return TraceError(path, "not a trace: no 'traceEvents' key")
    return TraceError(path, f"'traceEvents' is a {type(doc['traceEvents']).__name__}, not an array")


# ---------------------------------------------------------------- sequential scan


_CUT = re.compile(rb"\}\s*,\s*\{\s*\"")


def _cut_candidates(buf: bytearray, lo: int, hi: int, limit: int) -> list[int]:
    """Up to ``limit`` positions of ``}`` that look like the end of an event, last first.

    A ``}`` followed by ``,``, whitespace, ``{`` and a key's opening quote: the separator
    between two events. It can still lie inside a string (a C++ kernel name) or an ``args``
    object; the decoder rejects those cuts and an earlier one is tried.
    """
    out: list[int] = []
    q = hi
    while len(out) < limit:
        q = buf.rfind(b"}", lo, q)
        if q < 0:
            break
        if _CUT.match(buf, q, min(hi, q + 256)):
            out.append(q)
    return out


class Scanner:
    """Cut and decode the events array from a sequential source, checking every cut."""

    MAX_CUT_TRIES = 4
    MAX_END_CANDIDATES = 64

    def __init__(self, path: Path, sink: Callable[[PieceColumns], None], piece_bytes: int) -> None:
        self.path = path
        self.sink = sink
        self.piece_bytes = piece_bytes
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
            return decode.TOO_DEEP
        except Exception as exc:  # noqa: BLE001 - msgspec's errors, or ValueError from the tolerant decoder
            return str(exc)
        finally:
            view.release()
            buf[lo - 1], buf[hi] = saved

    def _try_span(self, buf: bytearray, lo: int, hi: int, tolerant: bool) -> str | None:
        """Decode events in ``buf[lo:hi]`` into the sink; ``None`` on success, else the error."""
        if _skip_ws(buf, lo) >= hi:
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
        head = _header_keys(header)
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
        last = _last_non_ws(buf)
        if head is None or last < pos:
            return
        if head is _BARE:  # nothing may follow the array
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
            j = _skip_ws(buf, p + 1)
            if j < len(buf) and buf[j] not in (0x2C, 0x7D):  # followed by "," or "}"
                continue
            tried += 1
            meta = _with_trailer(head, memoryview(buf)[p + 1 :])
            if meta is not None:
                yield p, meta

    def _decode_rest_tolerant(self, buf: bytearray, pos: int, base: int, head: dict | None) -> dict:
        """Decode ``buf[pos:]`` (the last events, then the trailer) with the JSON parser, which
        finds where the array closes; one pass, for whatever the other ways could not read."""
        if head is None:
            raise TraceError(self.path, "malformed JSON before the traceEvents array (or 'traceEvents' is not a top-level key)")
        text = "[" + bytes(buf[pos:]).decode("utf-8", "replace")
        try:
            items, stop = _LENIENT.raw_decode(text)
        except RecursionError:
            raise TraceError(self.path, f"traceEvents after byte {base + pos}: {decode.TOO_DEEP}") from None
        except ValueError as exc:  # JSONDecodeError, or a number too long to convert
            where = base + pos - 1 + len(text[: getattr(exc, "pos", 0)].encode("utf-8"))
            reason = getattr(exc, "msg", str(exc)).removesuffix(" at")
            raise TraceError(self.path, f"truncated or malformed JSON in traceEvents: {reason} at byte {where}") from None
        meta = _with_trailer(head, text[stop:].encode("utf-8"))
        if meta is None:
            where = base + pos - 1 + len(text[:stop].encode("utf-8"))
            raise TraceError(self.path, f"truncated or malformed JSON after the traceEvents array, which ends at byte {where}")
        self.sink(decode.decode_items_tolerant(items))
        return meta

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
            if not text.strip(_WS):
                raise TraceError(self.path, "empty file")
            raise _whole_document_error(self.path, text)
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
            if new_pos == pos:  # no cut in a full buffer: one huge event; make room
                buf.extend(bytes(len(buf)))
                continue
            # move the unfinished tail (and the separator before it) to the front
            tail = bytes(buf[new_pos - 1 : filled])
            buf[: len(tail)] = tail
            base += new_pos - 1
            filled = len(tail)
            pos = 1


def parse_meta(header: bytes, trailer: bytes) -> dict | None:
    """Top-level keys, from the text before and after the events array (array emptied);
    ``None`` if the two do not make one JSON document."""
    head = _header_keys(header)
    return None if head is None else _with_trailer(head, trailer)


_BARE: dict = {}  # the header keys of a bare array: none (compared by identity)
_TRAILER_START = '{"traceEvents": []'  # what the trailer continues, in place of the header
_FIRST_WINDOW = 256  # trailer characters parsed first: enough to reject a "]" inside an event


def _header_keys(header: bytes) -> dict | None:
    """The keys before the events array (``header`` ends with its ``[``): :data:`_BARE` for
    a bare array, ``None`` if the header is not the start of a JSON object."""
    text = header.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if text == "[":
        return _BARE
    try:
        doc = json.loads(text + "]}", strict=False)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.pop("traceEvents", None) != []:
        return None
    return doc


def _with_trailer(head: dict, trailer: bytes | memoryview) -> dict | None:
    """The document's keys if ``trailer`` (the text after a candidate ``]``) closes it: for a
    bare array only whitespace, else ``, "key": value ... }`` then whitespace.

    The trailer is parsed a window at a time, the window growing only while the parse runs
    out of text: a ``]`` inside the events fails within a few bytes (an object closes and
    more events follow), so trying one costs little however much of the file lies after it.
    """
    if head is _BARE:
        return {} if _NON_WS.search(trailer) is None else None
    window = _FIRST_WINDOW
    while True:
        part = bytes(trailer[:window])
        text = _TRAILER_START + part.decode("utf-8", "replace")
        complete = window >= len(trailer)
        try:
            doc, end = _LENIENT.raw_decode(text)
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


# ---------------------------------------------------------------- parallel plan (plain files)


def _plan_pieces(path: Path, start: int, size: int, piece_bytes: int) -> tuple[list[tuple[int, int]], int]:
    """Byte ranges of whole events (without separators) from ``start``, each ~``piece_bytes``,
    and the offset where the events after the last range start.

    Cut points are the first event separator (``}``, ``,``, ``{"``) after each nominal
    offset; they are checked by the decoders (a failure sends the whole file down the
    sequential path). The last range ends a piece or more before the end of the file; the
    sequential scanner reads what follows it, trailer included.
    """
    ranges = []
    lo = start
    with open(path, "rb") as fh:
        nominal = start + piece_bytes
        while nominal < size - piece_bytes:
            fh.seek(nominal)
            window = fh.read(_WINDOW)
            match = _CUT.search(window)
            if match is not None:
                cut = nominal + match.start() + 1  # exclusive end of the range: just after "}"
                ranges.append((lo, cut))
                lo = nominal + window.index(b",", match.start()) + 1  # just after ","
            nominal += piece_bytes
    return ranges, lo


class _OffsetSource(Source):
    """A plain file read from an offset, presented as if it started with ``prefix``."""

    def __init__(self, path: Path, offset: int, prefix: bytes) -> None:
        super().__init__(path)
        self._raw.seek(offset)
        self._prefix = prefix

    def _readinto(self, view: memoryview) -> int:
        if self._prefix:
            n = min(len(view), len(self._prefix))
            view[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        return super()._readinto(view)


def scan_parallel(path: Path, piece_bytes: int, workers: int, sink: Callable[[PieceColumns], None]) -> dict | None:
    """Decode an uncompressed file with ``workers`` processes, this one included; ``None`` if
    it cannot be done (the caller then reads the file sequentially).

    The planned ranges are shared out from both ends of one counter in shared memory:
    ``workers - 1`` worker processes take them one at a time from the front, while this
    process first decodes the tail (after the last range, trailer included) and then takes
    ranges from the back, until the two meet. Nobody waits for work while some is left, and
    this process never hands work out or collects it while it decodes: each worker sends its
    pieces down a pipe of its own (from a thread, so it goes on decoding), and they are read
    here once this process is done with its own share.
    """
    import multiprocessing as mp

    size = path.stat().st_size
    found, header = _find_header(path, size)
    if found is None or found[1]:
        return None
    start = found[0]
    ranges, resume = _plan_pieces(path, start, size, piece_bytes)
    if len(ranges) < 2 or workers < 2:
        return None
    ctx = mp.get_context("spawn")  # safe in a process that has started threads
    try:
        bounds = ctx.Array("q", [0, len(ranges)])  # [next from the front, one past the next from the back]
    except (OSError, ImportError):  # no shared memory or semaphores here
        return None
    results: list[PieceColumns | None] = [None] * len(ranges)
    procs: dict = {}  # reading end of its pipe -> worker process
    collected = False
    try:
        for _ in range(workers - 1):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_decode_ranges, args=(str(path), ranges, bounds, writer), daemon=True)
            procs[reader] = proc
            proc.start()
            writer.close()  # the worker's copy is its own: end of file here when it is gone
        tail: list[PieceColumns] = []
        with _OffsetSource(path, resume, header) as src:
            meta = Scanner(path, tail.append, piece_bytes).scan(src)
        while (i := _take(bounds, front=False)) is not None:
            results[i] = decode_file_range(str(path), *ranges[i])
        collected = _collect(dict(procs), results)
    except (ValueError, OSError):
        pass
    finally:
        _take_all(bounds)  # nothing more for the workers, whatever happened
        for reader, proc in procs.items():
            # done with: exiting, still starting (if it took nothing), or blocked on a pipe no
            # one reads any more (after a failure)
            if proc.pid is not None and proc.exitcode is None:
                proc.terminate()
            if proc.pid is not None:
                proc.join()
            reader.close()
    if not collected:
        return None
    for piece in results:
        sink(piece)
    for piece in tail:
        sink(piece)
    return meta


def _take(bounds, *, front: bool) -> int | None:
    """The next range index from the front or the back of ``bounds``, ``None`` when all are taken.

    Raises ``OSError`` if the lock stays taken (a process died holding it)."""
    lock = bounds.get_lock()
    if not lock.acquire(timeout=_LOCK_TIMEOUT_S):
        raise OSError("a reading process died holding the shared range counter")
    try:
        lo, hi = bounds[0], bounds[1]
        if lo >= hi:
            return None
        if front:
            bounds[0] = lo + 1
            return lo
        bounds[1] = hi - 1
        return hi - 1
    finally:
        lock.release()


def _take_all(bounds) -> None:
    """Leave no range to take (after a failure, or once done)."""
    lock = bounds.get_lock()
    if lock.acquire(timeout=_LOCK_TIMEOUT_S):
        bounds[0] = bounds[1]
        lock.release()


_LOCK_TIMEOUT_S = 10.0  # the lock is held for a few instructions; longer means its holder died


def _decode_ranges(path: str, ranges: list[tuple[int, int]], bounds, conn) -> None:
    """Worker process: decode ranges from the front until none is left, and send each piece
    down ``conn`` as ``(index, piece, None)``, or a failure as ``(index, None, message)``
    (then stop). A thread sends, so decoding goes on while the reader is busy elsewhere."""
    import queue
    import threading

    outbox: queue.SimpleQueue = queue.SimpleQueue()

    def send() -> None:
        while (item := outbox.get()) is not None:
            conn.send(item)
        conn.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    while (i := _take(bounds, front=True)) is not None:
        try:
            piece = decode.decode_file_range(path, *ranges[i])
        except Exception as exc:  # noqa: BLE001 - reported to the reading process, which falls back
            _take_all(bounds)  # the file is read sequentially instead: no one need go on
            outbox.put((i, None, f"{type(exc).__name__}: {exc}"))
            break
        outbox.put((i, piece, None))
    outbox.put(None)
    sender.join()
    # everything sent: exit without tearing the interpreter down (numpy, the decoded objects)
    os._exit(0)


def _collect(procs: dict, results: list) -> bool:
    """Read the workers' pieces into ``results`` until every range is in; ``False`` if a worker
    failed, or ended with a range it had taken. Workers that took nothing (this process was
    faster than their start) are not waited for. ``procs``: reading end -> process."""
    from multiprocessing.connection import wait

    missing = sum(piece is None for piece in results)
    while missing:
        if not procs:
            return False
        sentinels = {proc.sentinel: reader for reader, proc in procs.items()}
        for ready in wait([*procs, *sentinels]):
            reader = sentinels.get(ready, ready)
            if reader not in procs:
                continue
            if ready is not reader and reader.poll():
                continue  # exited with pieces still in the pipe: read them first
            if ready is not reader:  # exited and nothing left to read (e.g. died starting)
                del procs[reader]
                continue
            try:
                i, piece, error = reader.recv()
            except (EOFError, OSError):  # the worker is gone, all it sent read
                del procs[reader]
                continue
            if error is not None:
                return False
            results[i] = piece
            missing -= 1
    return True


def _find_header(path: Path, size: int) -> tuple[tuple[int, bool] | None, bytes]:
    """Where the events array starts (see :func:`find_events_start`) and the bytes before it."""
    with open(path, "rb") as fh:
        head = fh.read(min(size, _WINDOW))
        found = find_events_start(head, path)
        if found is None and len(head) < min(size, HEADER_LIMIT):
            head += fh.read(min(size, HEADER_LIMIT) - len(head))
            found = find_events_start(head, path)
    return found, (head[: found[0]] if found is not None else b"")
