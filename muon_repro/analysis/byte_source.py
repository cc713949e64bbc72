"""The bytes of a trace file: sequential sources over a plain or gzip file, the gzip decoder they
use, and the whitespace helpers that scan their buffers.

:class:`Source` reads a plain or gzip file sequentially (gzip is recognised by its magic
bytes, not the file name) and turns every read error into a
:class:`~muon_repro.analysis.errors.TraceError` naming the file. Given a limit, it never hands
out, nor decompresses, more than the limit plus one byte: the byte that proves the stream is
larger is an error naming the limit (a gzip bomb costs the limit, not its decompressed size).
:class:`OffsetSource` reads a plain file from an offset, behind a given prefix (the parallel
reader's tail, :mod:`muon_repro.analysis.parallel_scan`).

Gzip is inflated by python-isal's ``igzip`` where it is installed, else the standard library's
``gzip`` (:func:`open_gzip`). ISA-L inflates the committed ``.json.gz`` traces about 2.7x faster
than zlib on this project's 2-core machine (``python -m tools.analysis_benchmark --gzip``
measures both side by side). Both produce the same bytes, so the tables do not depend on which
one ran; the environment variable ``MUON_REPRO_GZIP=zlib`` forces the standard library (the
benchmark and the tests compare them). Like the rest of the reader, this module imports only the
standard library (and isal if present).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from pathlib import Path
from typing import BinaryIO

from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.limits import TraceLimits, format_size, limit_error
from muon_repro.tables.files import open_regular

WHITESPACE = b" \t\r\n"  # JSON's insignificant whitespace

# -- the gzip decoder

FORCE_VARIABLE = "MUON_REPRO_GZIP"  # "zlib": the standard library even where isal is installed

try:
    from isal import igzip as _igzip
    from isal import isal_zlib as _isal_zlib

    _ISAL_ERRORS: tuple[type[BaseException], ...] = (_isal_zlib.error,)
except ImportError:  # isal is optional: the standard library reads every gzip file too
    _igzip = None
    _ISAL_ERRORS = ()

# What a corrupt stream raises, from either decoder (a truncated one raises EOFError).
CORRUPT_GZIP_ERRORS: tuple[type[BaseException], ...] = (gzip.BadGzipFile, zlib.error, *_ISAL_ERRORS)


def gzip_decoder() -> str:
    """``"isal"`` or ``"zlib"``: the decoder :func:`open_gzip` uses now."""
    if _igzip is None or os.environ.get(FORCE_VARIABLE, "").strip().lower() == "zlib":
        return "zlib"
    return "isal"


def open_gzip(raw: BinaryIO) -> BinaryIO:
    """A reader of the decompressed bytes of the gzip stream ``raw`` (all its members)."""
    if gzip_decoder() == "isal":
        return _igzip.IGzipFile(fileobj=raw, mode="rb")
    return gzip.GzipFile(fileobj=raw, mode="rb")


# -- the sources


class Source:
    """Sequential byte source over a plain or gzip file, with errors that name the file.

    With ``limits``, reading past ``limits.max_trace_bytes`` (decompressed) raises the limit's
    :class:`~muon_repro.analysis.errors.TraceLimitError`; at most one byte more than the limit
    is ever decompressed.
    """

    def __init__(self, path: Path, limits: TraceLimits | None = None) -> None:
        self.path = path
        self.limits = limits
        self.bytes_read = 0  # bytes handed out so far (decompressed)
        try:
            self._raw: BinaryIO = open_regular(path)  # closed by close() / __exit__; a pipe is refused, not waited on
        except OSError as exc:
            raise TraceError(path, f"cannot open: {exc.strerror or exc}") from None
        self.gzipped = self._raw.read(2) == b"\x1f\x8b"
        self.size_hint = self._size_hint()
        self._raw.seek(0)
        self._fh: BinaryIO = open_gzip(self._raw) if self.gzipped else self._raw

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
        limits = self.limits
        if limits is not None:
            room = limits.max_trace_bytes + 1 - self.bytes_read  # one byte past the limit proves it passed
            if room < len(view):
                view = view[:room]
        n = self._read_stream(view)
        self.bytes_read += n
        if limits is not None and self.bytes_read > limits.max_trace_bytes:
            what = "decompressed" if self.gzipped else "the file holds"
            raise limit_error(self.path, "max_trace_bytes", limits, f"{what} more than {format_size(limits.max_trace_bytes)}")
        return n

    def _read_stream(self, view: memoryview) -> int:
        try:
            return self._fh.readinto(view)
        except EOFError:
            # ISA-L says the same of a few stray bytes after a whole stream as of a stream cut short
            raise TraceError(
                self.path, "truncated gzip file (the compressed stream ends early, or a few bytes that are not gzip follow it)"
            ) from None
        except CORRUPT_GZIP_ERRORS as exc:
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


class OffsetSource(Source):
    """A plain file read from an offset, presented as if it started with ``prefix`` (no byte
    limit: the caller checked the file's size)."""

    def __init__(self, path: Path, offset: int, prefix: bytes) -> None:
        super().__init__(path)
        self._raw.seek(offset)
        self._prefix = prefix

    def _read_stream(self, view: memoryview) -> int:
        if self._prefix:
            n = min(len(view), len(self._prefix))
            view[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        return super()._read_stream(view)


_NON_WS = re.compile(rb"[^ \t\r\n]")
_BACK_WINDOW = 2**16  # bytes looked at a time when looking for the last non-whitespace byte


def skip_ws(buf: bytes | bytearray, i: int) -> int:
    """Index of the first byte at or after ``i`` that is not whitespace, ``len(buf)`` if none
    (``i`` if past the end; a regex search: a long run of whitespace costs C speed, not a Python
    loop per byte)."""
    match = _NON_WS.search(buf, i)
    return match.start() if match is not None else max(i, len(buf))


def last_non_ws(buf: bytes | bytearray) -> int:
    """Index of the last byte that is not whitespace, -1 if none (looked for a window at a time
    from the back: a long run of whitespace costs C speed)."""
    end = len(buf)
    while end > 0:
        start = max(0, end - _BACK_WINDOW)
        kept = bytes(buf[start:end]).rstrip(WHITESPACE)
        if kept:
            return start + len(kept) - 1
        end = start
    return -1
