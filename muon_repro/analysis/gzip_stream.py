"""The gzip decoder the trace reader uses: python-isal's ``igzip`` where it is installed, else the
standard library's ``gzip``.

ISA-L inflates the committed ``.json.gz`` traces about 2.7x faster than zlib on this project's
2-core machine (``python -m tools.analysis_benchmark --gzip`` measures both side by side). Both
produce the same bytes, so the tables do not depend on which one ran; the environment variable
``MUON_REPRO_GZIP=zlib`` forces the standard library (the benchmark and the tests compare them).
Like the rest of the reader, this module imports only the standard library (and isal if present).
"""

from __future__ import annotations

import gzip
import os
import zlib
from typing import BinaryIO

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
