"""Byte sources over a trace file, and the whitespace helpers that scan their buffers.

:class:`Source` reads a plain or gzip file sequentially (gzip is recognised by its magic
bytes, not the file name) and turns every read error into a
:class:`~muon_repro.analysis.errors.TraceError` naming the file; :class:`OffsetSource` reads a
plain file from an offset, behind a given prefix (the parallel reader's tail,
:mod:`muon_repro.analysis.parallel_scan`).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from muon_repro.analysis.errors import TraceError

WHITESPACE = b" \t\r\n"  # JSON's insignificant whitespace


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


class OffsetSource(Source):
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


def skip_ws(buf: bytes | bytearray, i: int) -> int:
    """Index of the first byte at or after ``i`` that is not whitespace, ``len(buf)`` if none."""
    n = len(buf)
    while i < n and buf[i] in WHITESPACE:
        i += 1
    return i


def last_non_ws(buf: bytes | bytearray) -> int:
    """Index of the last byte that is not whitespace, -1 if none."""
    i = len(buf) - 1
    while i >= 0 and buf[i] in WHITESPACE:
        i -= 1
    return i
