"""Reading and writing the tables: the one way in and out of ``metrics/`` for every stage.

The tables are one set: :func:`write_tables` writes all of them into a new folder beside the output
folder and swaps it in whole, so a reader never meets half of a new set beside half of an old one;
each Parquet file carries the set's stamp (:mod:`muon_repro.tables.stamp`) and its CSV twin is
written beside it. :func:`read_table` reads one back with its schema's dtypes and checks that its
siblings are of the same set; :func:`read_tables` reads several as one set.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from muon_repro.tables.files import OUTPUT_MARKER, Content, check_out_folder, check_replaceable, staged_dir, write_atomic_all
from muon_repro.tables.limits import check_table_size
from muon_repro.tables.schema import TableSchema
from muon_repro.tables.schemas import SCHEMAS, TABLE_NAMES
from muon_repro.tables.stamp import (
    ATTRS_METADATA_KEY,
    CSV_SHA256_KEY,
    GENERATION_KEY,
    MixedTables,
    generation_id,
    one_generation,
    stamp_metadata,
    table_stamp,
    warn_unstamped,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

TABLE_SUFFIXES = (".parquet", ".csv")


TABLES_WRITER = "muon-repro analyze"


def check_tables_out(out_dir: str | Path, option: str = "", *, force: bool = False) -> None:
    """Refuse, before any work, an output folder the tables cannot replace: a file, the working
    directory, a folder holding anything but tables, tables this package did not write (unless ``force``),
    or a place that cannot be written. ``option`` (say ``--out``) is named with the folder in the messages."""
    out = Path(out_dir)
    label = f"{option} {out}" if option else str(out)
    if out.is_dir():
        cwd = Path.cwd().resolve()
        if out.resolve() == cwd or out.resolve() in cwd.parents:
            raise ValueError(
                f"{label} is (or holds) the working directory: the tables replace their folder whole; choose another one"
            )
        foreign = [p.name for p in sorted(out.iterdir()) if not _is_table_file(p)]
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise ValueError(
                f"{label} holds what is not a table ({shown}): the tables replace their folder whole, so it may hold "
                "only *.parquet and *.csv files; move the others elsewhere or choose another folder"
            )
        check_replaceable(out, TABLES_WRITER, label, ours=_written_here, force=force)
    check_out_folder(out, label, replaced_whole=True)


def _is_table_file(path: Path) -> bool:
    """A file the tables' folder may hold: a table, its writer's marker, or a temporary file an interrupted writer
    left."""
    hidden_tmp = path.name.startswith(".") and path.suffix == ".tmp"
    return path.is_file() and (path.suffix in TABLE_SUFFIXES or path.name == OUTPUT_MARKER or hidden_tmp)


def _written_here(folder: Path) -> bool:
    """Tables written before folders carried their writer's marker: every Parquet file one of ours with its stamp,
    every CSV the twin of one."""
    import pyarrow as pa

    parquets = sorted(folder.glob("*.parquet"))
    if not parquets or any(p.stem not in SCHEMAS for p in parquets):
        return False
    try:
        if any(GENERATION_KEY not in stamp for stamp in _folder_stamps(folder).values()):
            return False
    except (OSError, ValueError, pa.ArrowException):
        return False
    return all((folder / f"{c.stem}.parquet").is_file() for c in folder.glob("*.csv"))


def stamped_schema(name: str, generation: str, csv_sha256: str) -> pa.Schema:
    """The table's Arrow schema with the set's generation stamp in its metadata (what the Parquet file holds)."""
    schema = SCHEMAS[name].arrow_schema()
    return schema.with_metadata({**schema.metadata, ATTRS_METADATA_KEY: stamp_metadata(generation, csv_sha256)})


def _write_parquet(frame: pd.DataFrame, schema: pa.Schema, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    pq.write_table(table.replace_schema_metadata(schema.metadata), path)


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path, *, force: bool = False) -> list[Path]:
    """Write each table as ``<name>.parquet`` (schema, descriptions and generation stamp in the
    metadata) and ``<name>.csv`` into a new folder beside ``out_dir``, then swap it in for
    ``out_dir`` (which may hold only tables this package wrote, or anything with ``force``: see
    :func:`check_tables_out`). Returns the paths."""
    out = Path(out_dir)
    out = out.resolve() if out.is_symlink() else out  # replace the folder the link points at, keep the link
    check_tables_out(out, force=force)
    frames = {name: SCHEMAS[name].conform(df) for name, df in tables.items()}
    csv_files = {name: df.to_csv(index=False).encode("utf-8") for name, df in frames.items()}
    csv_sha256 = {name: hashlib.sha256(data).hexdigest() for name, data in csv_files.items()}
    generation = generation_id(csv_sha256)
    with staged_dir(out, TABLES_WRITER) as stage:
        for name, df in frames.items():
            (stage / f"{name}.csv").write_bytes(csv_files[name])
            _write_parquet(df, stamped_schema(name, generation, csv_sha256[name]), stage / f"{name}.parquet")
    return [out / f"{name}{suffix}" for name in frames for suffix in TABLE_SUFFIXES]


def write_table(rows: list[dict] | pd.DataFrame, schema: TableSchema, folder: str | Path, stem: str | None = None) -> list[Path]:
    """Write one table on its own, conformed to ``schema``, as ``<stem>.parquet`` and ``<stem>.csv``
    (stem: the table's name) in ``folder``, the twins together (:func:`table_files`); stamped as a set of one (what
    ``calibrate`` and ``predict --validate --out`` write beside their records)."""
    # the twins together: an interruption leaves both old, never a new Parquet beside the old CSV
    return write_atomic_all(table_files(rows, schema, folder, stem))


def table_files(
    rows: list[dict] | pd.DataFrame, schema: TableSchema, folder: str | Path, stem: str | None = None
) -> dict[Path, Content]:
    """:func:`write_table`'s two files and their contents, for :func:`~muon_repro.tables.files.write_atomic_all`
    (with other files written in the same set, such as calibrate's machine.json)."""
    import pandas as pd

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: choose a folder for the {schema.name} table")
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=schema.names)
    frame = schema.conform(frame.reindex(columns=schema.names))
    stem = stem or schema.name
    csv = frame.to_csv(index=False).encode("utf-8")
    csv_sha256 = hashlib.sha256(csv).hexdigest()
    stamped = stamped_schema(schema.name, generation_id({schema.name: csv_sha256}), csv_sha256)
    return {folder / f"{stem}.parquet": lambda tmp: _write_parquet(frame, stamped, tmp), folder / f"{stem}.csv": csv}


def _generation_of(path: Path) -> str | None:
    import pyarrow.parquet as pq

    return table_stamp(pq.read_schema(path).metadata).get(GENERATION_KEY)


def _sibling_generations(path: Path) -> dict[str, str | None]:
    """The generation of every other table beside ``path``, by file name."""
    siblings = [path.with_name(f"{name}.parquet") for name in TABLE_NAMES]
    return {p.name: _generation_of(p) for p in siblings if p.name != path.name and p.is_file()}


def _read_stamped(path: Path, name: str, *, fill_missing: bool = True) -> tuple[pd.DataFrame, str | None]:
    """The table at ``path`` with its schema's dtypes, and its generation. A column of the schema that the
    file lacks (a table written by an older version) comes back null, or is left out without ``fill_missing``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = SCHEMAS[name]
    check_table_size(path)  # from its size and footer, before the rows are loaded
    data = path.read_bytes()  # once: the stamp and the rows come from the same file
    written = pq.read_schema(pa.BufferReader(data))  # the file's own schema: its stamp and its columns
    generation = table_stamp(written.metadata).get(GENERATION_KEY)
    stored = (written.metadata or {}).get(b"table", b"").decode("utf-8", "replace")  # the name write_table gave it
    if stored and stored != name:
        raise ValueError(
            f"metrics table {path} holds the {stored!r} table, not {name!r}: a file copied over another; regenerate "
            f"the tables with `muon-repro analyze traces/ --out {path.parent}`"
        )
    try:
        table = pq.read_table(pa.BufferReader(data), schema=schema.arrow_schema())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ValueError(_wrong_types(path, data, written, schema, exc)) from exc
    frame = schema.conform(table.to_pandas(types_mapper=_nullable_dtypes().get))
    if not fill_missing:
        present = set(written.names)
        frame = frame[[c for c in frame.columns if c in present]]
    return frame, generation


@functools.cache
def _nullable_dtypes() -> dict[pa.DataType, pd.api.extensions.ExtensionDtype]:
    """The schema's pandas dtype of each Arrow column type, for ``to_pandas(types_mapper=...)``: 2-3x faster than
    through ``ArrowDtype`` and an ``astype`` per column, and the same frame (every schema type is one of these)."""
    import pandas as pd
    import pyarrow as pa

    return {
        pa.float64(): pd.Float64Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
        pa.string(): pd.StringDtype(),
    }


def _wrong_types(path: Path, data: bytes, written: pa.Schema, schema: TableSchema, exc: Exception) -> str:
    """Why the table at ``path`` cannot be read with its schema's types: the column whose values do not convert
    (named with its type, the schema's, and a value), and what to do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    expected = schema.arrow_schema()
    differ = [f for f in expected if f.name in written.names and written.field(f.name).type != f.type]
    bad = []
    for field in differ:
        try:
            pq.read_table(pa.BufferReader(data), columns=[field.name]).column(0).cast(field.type)
        except (pa.ArrowException, ValueError, TypeError) as cast_error:
            bad.append((field, cast_error))
    dtypes = {c.name: c.dtype for c in schema.columns}
    problems = [
        f"column {f.name!r} holds {written.field(f.name).type} values, not the {dtypes[f.name]} ({f.type}) expected: {e}"
        for f, e in (bad or [(f, exc) for f in differ])
    ] or [str(exc)]
    return (
        f"metrics table {path} cannot be read as the {schema.name} table: {'; '.join(problems)}. It was not written by "
        f"this version of muon-repro analyze, or was edited since: regenerate the tables with "
        f"`muon-repro analyze traces/ --out {path.parent}`"
    )


def read_table(path: str | Path, name: str | None = None, *, check_set: bool = True) -> pd.DataFrame:
    """Read a table written by :func:`write_tables` back with its schema's dtypes.

    With ``check_set``, :class:`MixedTables` when the tables beside it are of another
    generation, and a warning when none of them is stamped.
    """
    path = Path(path)
    name = name or path.name.removesuffix(".parquet")
    if name not in SCHEMAS:
        raise ValueError(f"{path}: {name!r} is not a table of metrics/ (known: {', '.join(TABLE_NAMES)})")
    frame, generation = _read_stamped(path, name)
    if check_set and one_generation(path.parent, {path.name: generation, **_sibling_generations(path)}) is None:
        warn_unstamped(path.parent)
    return frame


def read_tables(folder: str | Path, names: Iterable[str]) -> dict[str, pd.DataFrame]:
    """The tables ``names`` of ``folder``, read as one set: :class:`FileNotFoundError` naming a missing
    one, :class:`MixedTables` when they are of different generations, a warning when none is stamped.
    A column the file lacks is left out, so the reader can name it."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise FileNotFoundError(f"{folder} is a file, not a folder of metrics tables: give the folder muon-repro analyze wrote")
    frames, generations = {}, {}
    for name in names:
        path = folder / f"{name}.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"metrics table {path} is missing: run `muon-repro analyze traces/ --out {folder}` first")
        frames[name], generations[path.name] = _read_stamped(path, name, fill_missing=False)
    if generations and one_generation(folder, generations) is None:
        warn_unstamped(folder)
    return frames


def _folder_stamps(folder: Path) -> dict[str, dict[str, str]]:
    """The stamp of every table (``<name>.parquet`` of :data:`SCHEMAS`) in ``folder``, by file name; a file that is no
    Parquet table (truncated, empty) refused naming it, as every reader of the tables does."""
    import pyarrow.parquet as pq

    stamps = {}
    for path in sorted(folder.glob("*.parquet")):
        if path.stem in SCHEMAS:
            check_table_size(path)  # its footer, before pyarrow's bare "magic bytes not found"
            stamps[path.name] = table_stamp(pq.read_schema(path).metadata)
    return stamps


def folder_generation(folder: str | Path) -> str | None:
    """The generation of the tables in ``folder`` (``None``: none stamped); :class:`MixedTables` if mixed."""
    return one_generation(folder, {file: stamp.get(GENERATION_KEY) for file, stamp in _folder_stamps(Path(folder)).items()})


def table_set_problems(folder: str | Path, *, csv_sha256: Mapping[Path, str] | None = None) -> list[str]:
    """What keeps the tables of ``folder`` from being one set: generations that differ, and CSV
    files other than the ones written with their Parquet twins. Empty when they are one set.
    ``csv_sha256``: digests the caller already has, by path (``verify`` hashed every file for the
    manifest); a CSV not among them is hashed here."""
    folder = Path(folder)
    known = csv_sha256 or {}
    stamps = _folder_stamps(folder)
    problems = []
    try:
        one_generation(folder, {file: stamp.get(GENERATION_KEY) for file, stamp in stamps.items()})
    except MixedTables as exc:
        problems.append(str(exc))
    for file, stamp in stamps.items():
        csv = folder / file.replace(".parquet", ".csv")
        expected = stamp.get(CSV_SHA256_KEY)
        if not expected or not csv.is_file():
            continue
        digest = known.get(csv) or hashlib.sha256(csv.read_bytes()).hexdigest()
        if digest != expected:
            problems.append(f"{csv}: not the CSV file written with {file} (its sha256 differs): re-run `muon-repro analyze`")
    return problems
