"""How large a table may be before anything loads it whole: a Parquet file is a few bytes of footer that can
promise any number of rows (1.4 MB of repeated values decompress to 30 million), and figures, the report, the
card, ``bundle`` and ``verify`` each hold a table in memory. Checked from the file's size and its footer alone.

The largest table written here (timeline) has 116k rows; convergence holds the most data, 3 MB uncompressed;
runs has the most columns, 77. The limits sit 40x and more above them (docs/limits.md, "Tables").
"""

from __future__ import annotations

import struct
from pathlib import Path

from muon_repro.tables.files import open_regular

MAX_TABLE_FILE_BYTES = 1 << 30  # the Parquet file on disk
MAX_TABLE_FOOTER_BYTES = 16 << 20  # its footer (schema and row-group metadata), read before any row
MAX_TABLE_ROWS = 5_000_000  # at ~200 bytes a row in pandas, ~1 GB
MAX_TABLE_DATA_BYTES = 2 << 30  # the rows uncompressed, as the footer counts them
MAX_TABLE_COLUMNS = 1024


def table_size_problem(path: str | Path) -> str | None:
    """Why the Parquet table at ``path`` is too large to load, naming the file and the limit; None when it is not."""
    import pyarrow.parquet as pq

    path = Path(path)
    size = path.stat().st_size
    if size > MAX_TABLE_FILE_BYTES:
        return _past(path, f"{size:,} bytes on disk", MAX_TABLE_FILE_BYTES, "bytes")
    with open_regular(path) as f:  # a pipe is refused, not waited on
        if size < 12:
            return f"{path}: {size} bytes is no Parquet file (it ends with a footer and 'PAR1'); re-run `muon-repro analyze`"
        f.seek(size - 8)
        tail = f.read(8)
    footer_bytes, magic = struct.unpack("<I4s", tail)
    if magic != b"PAR1":
        return f"{path}: not a Parquet file (it does not end with 'PAR1'); re-run `muon-repro analyze`"
    if footer_bytes > MAX_TABLE_FOOTER_BYTES:
        return _past(path, f"a footer of {footer_bytes:,} bytes", MAX_TABLE_FOOTER_BYTES, "footer bytes")
    try:
        meta = pq.read_metadata(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a broken footer
        return f"{path}: its Parquet footer cannot be read ({type(exc).__name__}: {exc}); re-run `muon-repro analyze`"
    if meta.num_columns > MAX_TABLE_COLUMNS:
        return _past(path, f"{meta.num_columns:,} columns", MAX_TABLE_COLUMNS, "columns")
    if meta.num_rows > MAX_TABLE_ROWS:
        return _past(path, f"{meta.num_rows:,} rows", MAX_TABLE_ROWS, "rows")
    data = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if data > MAX_TABLE_DATA_BYTES:
        return _past(path, f"{data:,} bytes of rows uncompressed", MAX_TABLE_DATA_BYTES, "bytes")
    return None


def check_table_size(path: str | Path) -> None:
    """:func:`table_size_problem` as a ``ValueError``."""
    problem = table_size_problem(path)
    if problem is not None:
        raise ValueError(problem)


def _past(path: Path, what: str, limit: int, unit: str) -> str:
    return (
        f"{path}: {what}, past the limit of {limit:,} {unit} a table may have before it is loaded (docs/limits.md, "
        "Tables); no table this project writes comes near it: this file is broken or not ours"
    )
