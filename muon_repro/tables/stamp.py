"""What makes the tables of one folder one set: the stamp ``muon-repro analyze`` puts in every
Parquet table, and the rule that readers refuse a folder mixing stamps (docs/method.md#the-table-set).

Every Parquet file carries its set's generation id and the sha256 of its CSV twin, in its schema
metadata under pandas' attrs key (so a table edited with pandas keeps its stamp). The id is a
digest of the CSV files, so the same analysis gives the same bytes. CSV has no place for a stamp:
a CSV file belongs to its set when its sha256 is the one its Parquet twin records. Tables written
before stamps existed (none stamped) are read as one set, with a warning.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

GENERATION_KEY = "muon_repro_generation"
CSV_SHA256_KEY = "muon_repro_csv_sha256"
ATTRS_METADATA_KEY = b"PANDAS_ATTRS"  # where pandas keeps DataFrame.attrs in Parquet metadata
SHORT_ID = 12  # characters of a generation id shown in messages


class MixedTables(ValueError):
    """The tables of one folder come from different runs of ``muon-repro analyze``."""


def generation_id(csv_sha256: dict[str, str]) -> str:
    """The id of a set of tables: a digest of its CSV files' digests, by table name."""
    listing = "".join(f"{name} {digest}\n" for name, digest in sorted(csv_sha256.items()))
    return hashlib.sha256(listing.encode()).hexdigest()[:32]


def stamp_metadata(generation: str, csv_sha256: str) -> bytes:
    """The metadata value that stamps one table (under :data:`ATTRS_METADATA_KEY`)."""
    return json.dumps({GENERATION_KEY: generation, CSV_SHA256_KEY: csv_sha256}).encode()


def table_stamp(metadata: dict[bytes, bytes] | None) -> dict[str, str]:
    """The generation stamp in a Parquet file's schema metadata (empty when it has none)."""
    raw = (metadata or {}).get(ATTRS_METADATA_KEY)
    try:
        attrs = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):  # not our stamp (a foreign or damaged file): unstamped
        return {}
    return {k: str(v) for k, v in attrs.items() if k in (GENERATION_KEY, CSV_SHA256_KEY)} if isinstance(attrs, dict) else {}


def one_generation(folder: str | Path, generations: dict[str, str | None]) -> str | None:
    """The one generation of a folder's tables (file name -> its stamp's generation, ``None``
    for an unstamped file); ``None`` when none is stamped (written before stamps existed).
    :class:`MixedTables`, naming the files of each generation, when they differ or only some
    are stamped."""
    distinct = set(generations.values())
    if len(distinct) <= 1:
        return next(iter(distinct), None)
    by_generation: dict[str | None, list[str]] = {}
    for file, generation in sorted(generations.items()):
        by_generation.setdefault(generation, []).append(file)
    groups = "; ".join(
        f"{f'generation {generation[:SHORT_ID]}' if generation else 'no generation stamp'}: {', '.join(files)}"
        for generation, files in sorted(by_generation.items(), key=lambda item: -len(item[1]))
    )
    raise MixedTables(
        f"{folder}: the tables are not one set, they come from different runs of `muon-repro analyze` "
        f"(one interrupted, or files copied in): {groups}. "
        f"Re-run `muon-repro analyze TRACES --out {folder}` to write them as one set"
    )


def warn_unstamped(folder: str | Path) -> None:
    """Say that the tables of ``folder`` predate stamps, so they are read as one set unchecked."""
    warnings.warn(
        f"{folder}: the tables carry no generation stamp (written before muon-repro stamped them), so a mix of two "
        f"analyses cannot be detected; re-run `muon-repro analyze TRACES --out {folder}` to stamp them",
        stacklevel=3,
    )
