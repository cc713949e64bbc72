"""What makes the tables of one folder one set: the stamp ``muon-repro analyze`` puts in every
Parquet table, and the rule that readers refuse a folder mixing stamps.

Torch-, pandas- and numpy-free, like :mod:`muon_repro.rundir`: the analysis writes the stamp, the
report and the hub read it, and neither may import the other (docs/method.md#the-table-set).
"""

from __future__ import annotations

from pathlib import Path

GENERATION_KEY = "muon_repro_generation"
CSV_SHA256_KEY = "muon_repro_csv_sha256"
SHORT_ID = 12  # characters of a generation id shown in messages


class MixedTables(ValueError):
    """The tables of one folder come from different runs of ``muon-repro analyze``."""


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
        f"{folder}: the tables are not one set, they come from different runs of `muon-repro analyze` (one interrupted, "
        f"or files copied in): {groups}. Re-run `muon-repro analyze TRACES --out {folder}` to write them as one set"
    )
