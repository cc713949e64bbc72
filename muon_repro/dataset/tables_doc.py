"""What the card says about each metrics table: columns, types, meanings, rows, and its ``configs`` entry.

Column meanings come from :data:`muon_repro.analysis.tables.SCHEMAS` when the table is one of
ours, else from the descriptions the writer put into the Parquet field metadata. Types are the
``datasets`` feature types of the Parquet schema (what ``load_dataset`` will return), so the
card's ``dataset_info`` can be checked against a loaded dataset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muon_repro.tables.limits import check_table_size

DEFAULT_CONFIG = "runs"
TABLE_ORDER = ("runs", "steps", "collectives", "comparisons", "claims")
_CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class ColumnDoc:
    name: str
    dtype: str  # datasets' feature type (string, int64, float64, bool, ...)
    unit: str
    description: str


@dataclass(frozen=True)
class TableDoc:
    name: str  # also the config name
    path: str  # bundle path of the Parquet file
    csv_path: str | None
    rows: int
    num_bytes: int  # in-memory Arrow size, as datasets records it
    description: str
    columns: tuple[ColumnDoc, ...]
    features: list[dict[str, Any]]  # the card's dataset_info features (datasets' YAML form)
    default: bool


def _schemas() -> Mapping[str, Any]:
    try:
        from muon_repro.tables.schemas import SCHEMAS
    except ImportError:  # the analysis package is optional for rendering a card
        return {}
    return SCHEMAS


def _meta(metadata: Mapping[bytes, bytes] | None, key: str) -> str:
    value = (metadata or {}).get(key.encode())
    return value.decode("utf-8", errors="replace") if value else ""


def describe_tables(files: Mapping[str, Path]) -> list[TableDoc]:
    """One :class:`TableDoc` per ``metrics/<table>.parquet`` among ``files`` (bundle path -> file), in card order."""
    import pyarrow.parquet as pq
    from datasets import Features

    parquet = {p: f for p, f in files.items() if re.fullmatch(r"metrics/[^/]+\.parquet", p)}
    names = {Path(p).stem: p for p in parquet}
    for name in names:
        if not _CONFIG_NAME.fullmatch(name):
            raise ValueError(
                f"metrics/{name}.parquet: table names become config names and must match {_CONFIG_NAME.pattern}; rename it"
            )
    order = [n for n in TABLE_ORDER if n in names] + sorted(n for n in names if n not in TABLE_ORDER)
    default = DEFAULT_CONFIG if DEFAULT_CONFIG in names else (order[0] if order else None)
    schemas = _schemas()
    docs = []
    for name in order:
        path = names[name]
        check_table_size(parquet[path])  # before the rows are loaded: a small file can promise millions
        try:
            meta = pq.read_metadata(parquet[path])
            table = pq.read_table(parquet[path])
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise ValueError(f"{parquet[path]}: not a readable Parquet file ({exc})") from exc
        schema = table.schema
        known = schemas.get(name)
        by_name = {c.name: c for c in known.columns} if known is not None else {}
        features = Features.from_arrow_schema(schema)
        yaml_types = {f["name"]: f.get("dtype", "struct") for f in features._to_yaml_list()}
        columns = tuple(
            ColumnDoc(
                field.name,
                str(yaml_types.get(field.name, field.type)),
                by_name[field.name].unit if field.name in by_name else _meta(field.metadata, "unit"),
                by_name[field.name].description if field.name in by_name else _meta(field.metadata, "description"),
            )
            for field in schema
        )
        csv = f"metrics/{name}.csv"
        docs.append(
            TableDoc(
                name=name,
                path=path,
                csv_path=csv if csv in files else None,
                rows=meta.num_rows,
                num_bytes=int(table.nbytes),
                description=known.description if known is not None else _meta(schema.metadata, "description"),
                columns=columns,
                features=features._to_yaml_list(),
                default=name == default,
            )
        )
    return docs


def size_category(rows: int) -> str:
    """The Hub's ``size_categories`` value for a number of examples."""
    bounds = [
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
        (100_000_000, "10M<n<100M"),
        (1_000_000_000, "100M<n<1B"),
    ]
    return next((label for bound, label in bounds if rows < bound), "n>1B")


def configs_yaml(tables: list[TableDoc]) -> list[dict[str, Any]]:
    """The card's ``configs``: one per table, the default first (traces are not configs)."""
    out = []
    for t in sorted(tables, key=lambda t: not t.default):
        entry: dict[str, Any] = {"config_name": t.name, "data_files": [{"split": "train", "path": t.path}]}
        if t.default:
            entry["default"] = True
        out.append(entry)
    return out


def dataset_info_yaml(tables: list[TableDoc]) -> list[dict[str, Any]]:
    """The card's ``dataset_info``: split sizes per config (what ``verify`` checks the rows against).

    No ``features``: the Parquet files carry their types, and listing every column of every table
    in the YAML took half of the card's 40 KB; the columns and their types are in the card's tables
    and in ``croissant.json`` (what ``verify`` checks them against).
    """
    return [
        {
            "config_name": t.name,
            "splits": [{"name": "train", "num_bytes": t.num_bytes, "num_examples": t.rows}],
        }
        for t in sorted(tables, key=lambda t: not t.default)
    ]
