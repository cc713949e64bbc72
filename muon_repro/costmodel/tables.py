"""The cost model's tables: ``calibration`` (what ``muon-repro calibrate`` measured) and
``predictions`` (predicted against measured step times of recorded runs).

Declared in :mod:`muon_repro.analysis.schemas` with every other table (``muon-repro analyze`` builds
them from the records beside the runs, :mod:`muon_repro.analysis.costmodel_tables`).
:func:`write_table` writes one on its own, for ``calibrate`` and ``predict --validate --out``: as
Parquet (schema and descriptions in the metadata) and CSV, each through a temporary file and a rename.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from muon_repro.analysis.schemas import SCHEMAS, TableSchema

CALIBRATION = SCHEMAS["calibration"]
PREDICTIONS = SCHEMAS["predictions"]


def write_table(rows: list[dict] | pd.DataFrame, schema: TableSchema, folder: str | Path, stem: str | None = None) -> list[Path]:
    """Write ``rows`` conformed to ``schema`` as ``<stem>.parquet`` and ``<stem>.csv`` (stem: the table's name) in ``folder``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: choose a folder for the {schema.name} table")
    folder.mkdir(parents=True, exist_ok=True)
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=schema.names)
    frame = schema.conform(frame.reindex(columns=schema.names))
    stem = stem or schema.name
    parquet, csv = folder / f"{stem}.parquet", folder / f"{stem}.csv"
    table = pa.Table.from_pandas(frame, schema=schema.arrow_schema(), preserve_index=False)
    _atomic(parquet, lambda tmp: pq.write_table(table, tmp))
    _atomic(csv, lambda tmp: tmp.write_bytes(frame.to_csv(index=False).encode("utf-8")))
    return [parquet, csv]


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
