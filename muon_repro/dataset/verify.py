"""``muon-repro verify [DIR] [--recompute]``: is this folder a good bundle?

Checks, each reported on its own line:

0. no file is a symbolic link (a Hub cache snapshot's links to its blobs aside): a link is named, never read,
   and no other check runs while there is one;
1. every file matches ``MANIFEST.sha256`` (sha256 and size: traces, Parquet and CSV tables, figures, code
   alike), and no unlisted file is present (what installing, running and rebuilding a download add, its
   ``*.egg-info/``, caches, ``dataset_card.md`` and ``dist/``, is no file of the dataset:
   :func:`~muon_repro.dataset.manifest.is_ignored`);
2. the tables in ``metrics/`` are one set: one generation, and every CSV the one written with its
   Parquet twin (the sha256 its Parquet file's stamp holds), so a CSV replaced and re-listed in the
   manifest is still caught;
3. ``CITATION.cff`` and the card's YAML parse; every config's ``data_files`` exist; ``croissant.json``
   has a RecordSet and a FileObject for every table, with the table's sha256;
4. every config loads with ``datasets.load_dataset(DIR, config)`` and has the columns and types
   ``croissant.json`` documents (its record set's fields) and the row count the card's ``dataset_info`` says;
5. the report's "How to cite" cites the dataset ``CITATION.cff`` names (its repository and version); every relative
   link of the card and the report names a file of the dataset, and the code the card's recipe installs is
   there (:mod:`muon_repro.dataset.links`);
6. every trace parses (:func:`muon_repro.analysis.read_trace`), every run's JSON file parses;
7. with ``--recompute`` only: analyzing the bundle's traces again, into a temporary folder, gives
   every table of ``metrics/``: the same rows and values (floats within a relative 1e-9), the
   columns that say where the traces lay (:data:`LOCATION_COLUMNS`) aside; and every CSV holds its Parquet twin's
   rows. Without it a table whose values were changed and whose stamp, manifest and croissant.json were remade
   to match passes.

Works on a bundle, on an ``hf download --local-dir`` copy and on a snapshot in the Hub cache.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from muon_repro.dataset.card import CARD_NAME, read_card_metadata
from muon_repro.dataset.citation import CFF_NAME, read_citation, report_arguments
from muon_repro.dataset.croissant import CROISSANT_NAME, DATA_TYPES, check_croissant, croissant_fields
from muon_repro.dataset.links import check_promises
from muon_repro.dataset.manifest import check_manifest, is_ignored, read_manifest
from muon_repro.dataset.naming import dataset_url
from muon_repro.dataset.run_info import RUN_FILES, is_trace
from muon_repro.rundir import CONVERGENCE_FILE, ENVIRONMENT_FILE, SideFileError, load_json
from muon_repro.tables.files import list_files
from muon_repro.terminal import shown
from muon_repro.values import counted
from muon_repro.yaml_text import read_yaml

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# Columns that hold where the traces lay when they were analyzed: they differ between the folder the
# bundle was made from and the bundle itself, and say nothing about the measurements.
LOCATION_COLUMNS = ("file", "path")
# The same traces analyzed again give the same numbers, up to the order of floating-point sums.
FLOAT_RTOL = 1e-9
FLOAT_ATOL = 1e-12


@dataclass
class VerifyResult:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def _configs(meta: dict[str, Any]) -> list[dict[str, Any]]:
    configs = meta.get("configs")
    if not isinstance(configs, list) or not configs:
        raise ValueError(f"{CARD_NAME}: the YAML metadata declares no configs")
    return [c for c in configs if isinstance(c, dict)]


def _data_file_paths(config: dict[str, Any]) -> list[str]:
    data_files = config.get("data_files", [])
    items = data_files if isinstance(data_files, list) else [data_files]
    paths: list[str] = []
    for item in items:
        value = item.get("path") if isinstance(item, dict) else item
        paths += value if isinstance(value, list) else [value]
    return [p if isinstance(p, str) else f"<a {type(p).__name__}, not a path>" for p in paths]  # named, not expanded


def _missing(name: str) -> str:
    return f"{name} is missing: a bundle has one; download the dataset again, or rebuild it (muon-repro bundle)"


def _card_text(root: Path) -> str:
    """The card's text; a ValueError naming it when it is missing or not UTF-8."""
    path = root / CARD_NAME
    if not path.is_file():
        raise ValueError(_missing(CARD_NAME))
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # a ValueError that names no file
        raise ValueError(f"{CARD_NAME}: not UTF-8 text ({exc})") from None


def check_card(root: Path) -> tuple[list[str], dict[str, Any] | None]:
    """Problems with the card, the citation and croissant.json, and the card's metadata (None if unreadable)."""
    problems = []
    meta = None
    try:
        meta = read_card_metadata(_card_text(root), str(root / CARD_NAME))
        for config in _configs(meta):
            name = config.get("config_name")
            paths = _data_file_paths(config)
            if not paths:
                problems.append(f"{CARD_NAME}: config {name!r} has no data_files")
            for path in paths:
                outside = Path(path).is_absolute() or ".." in Path(path).parts  # the Hub resolves it in the repository
                if outside or not (root / path).is_file():
                    problems.append(f"{CARD_NAME}: config {name!r} points at {path}, which is not in the bundle")
    except (OSError, ValueError) as exc:
        problems.append(str(exc))
    try:
        if not (root / CFF_NAME).is_file():
            raise ValueError(_missing(CFF_NAME))
        cff = read_yaml(root / CFF_NAME, CFF_NAME)
        if not isinstance(cff, dict) or "cff-version" not in cff:
            problems.append(f"{CFF_NAME}: not a Citation File Format document (no cff-version)")
    except ValueError as exc:  # names the file
        problems.append(str(exc))
    if (root / CROISSANT_NAME).exists() or _manifest_lists(root, CROISSANT_NAME):
        problems += check_croissant(root)  # a bundle made before croissant.json existed lists none and has none
    return problems, meta


def _manifest_lists(root: Path, name: str) -> bool:
    try:
        return any(entry.path == name for entry in read_manifest(root))
    except (OSError, ValueError):
        return False  # check_manifest reports an unreadable manifest


def _size_problem(root: Path, path: str) -> str | None:
    from muon_repro.tables.limits import table_size_problem

    if Path(path).is_absolute() or ".." in Path(path).parts:  # not in the bundle: check_card says so
        return None
    file = root / path
    return table_size_problem(file) if file.suffix == ".parquet" and file.is_file() else None


def check_configs(root: Path, meta: dict[str, Any], report: Callable[[str, bool], None]) -> None:
    """Load every config with ``datasets`` and compare it with the card's ``dataset_info``."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    infos = {i.get("config_name"): i for i in meta.get("dataset_info") or [] if isinstance(i, dict)}
    fields = croissant_fields(root)
    with tempfile.TemporaryDirectory(prefix="muon-repro-verify-") as cache:
        for config in _configs(meta):
            name = config.get("config_name")
            label = f"config {name!r}"
            too_large = [problem for path in _data_file_paths(config) if (problem := _size_problem(root, path))]
            if too_large:  # reported by the table-set check; loading it would cost the memory the limit keeps
                report(f"{label}: not loaded: {too_large[0]}", False)
                continue
            try:
                ds = datasets.load_dataset(str(root.resolve()), name, split="train", cache_dir=cache)
            except Exception as exc:  # datasets raises many types; all mean "does not load"
                report(f"{label}: load_dataset failed: {type(exc).__name__}: {_one_line(exc)}", False)
                continue
            info = infos.get(name)
            if info is None:
                report(f"{label}: the card documents no rows for it (dataset_info)", False)
                continue
            problems = []
            if info.get("features"):  # a card made before the columns moved to croissant.json
                documented = datasets.Features._from_yaml_list(info["features"])
                if list(ds.column_names) != list(documented):
                    problems.append(f"columns {ds.column_names}, the card documents {list(documented)}")
                elif ds.features != documented:
                    problems.append(f"types {dict(ds.features)}, the card documents {dict(documented)}")
            elif name not in fields:
                problems.append(f"{CROISSANT_NAME} documents no columns for it")
            else:
                loaded = [(f["name"], DATA_TYPES.get(f.get("dtype", ""), "?")) for f in ds.features._to_yaml_list()]
                if [n for n, _ in loaded] != [n for n, _ in fields[name]]:
                    problems.append(f"columns {ds.column_names}, {CROISSANT_NAME} documents {[n for n, _ in fields[name]]}")
                elif loaded != fields[name]:
                    problems.append(f"types {dict(loaded)}, {CROISSANT_NAME} documents {dict(fields[name])}")
            expected_rows = next((s.get("num_examples") for s in info.get("splits", []) if s.get("name") == "train"), None)
            if expected_rows is not None and ds.num_rows != expected_rows:
                problems.append(f"{ds.num_rows} rows, the card says {expected_rows}")
            if problems:
                report(f"{label}: " + "; ".join(problems), False)
            else:
                rows = counted(ds.num_rows, "row")
                report(f"{label}: loads, {rows}, {len(ds.column_names)} documented columns", True)


def _one_line(exc: BaseException, limit: int = 500) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _count_events(path: str) -> tuple[int | None, str | None]:
    """(events, None) if the trace at ``path`` parses, else (None, the problem): runs in a worker."""
    from muon_repro.analysis import read_trace

    try:
        return len(read_trace(path).events), None
    except Exception as exc:  # TraceError names the file; anything else is a reader bug worth seeing
        return None, _one_line(exc)


def check_traces(root: Path, report: Callable[[str, bool], None], *, workers: int | None = None) -> None:
    from muon_repro.analysis.batch_read import default_workers, map_in_processes, worth_processes

    paths = [p for p in list_files(root) if not is_ignored(p)]
    traces = [p for p in paths if is_trace(p)]
    if not traces:
        report("traces: none in the bundle", False)
    workers = default_workers() if workers is None else workers
    if not worth_processes([root / path for path in traces], workers):
        workers = 1  # the analysis's rule: a few MiB read here, sooner than worker processes start
    counts = map_in_processes(
        _count_events, [(str(root / path),) for path in traces], workers, on_error=lambda job, exc: (None, _one_line(exc))
    )
    for path, (events, problem) in zip(traces, counts):
        if problem is None:
            report(f"trace {shown(path)}: {events} events", True)
        else:
            report(f"trace {shown(path)}: {problem}", False)
    check_trace_index(root, traces, report)
    for path in paths:
        if path.startswith("traces/") and path.rsplit("/", 1)[-1] in RUN_FILES and path.endswith(".json"):
            try:
                load_json(root / path)  # as the analysis reads it: depth and size limited
            except SideFileError as exc:
                report(f"{shown(path)}: {exc.problem}", False)


TRACE_INDEX = "metrics/trace_files.parquet"  # the traces' index, by its path in a bundle
REINDEX = "; run `muon-repro run --from analyze`"  # what verify says of a trace the index does not name


SHOWN_PER_KIND = 10  # trace index problems named of each kind before the counts


def trace_index_problems(index: Path, traces: Collection[str], *, fix: str = REINDEX) -> list[str]:
    """How the trace index at ``index`` and a bundle's ``traces`` (their paths in the bundle) disagree: files it names
    that are not there, traces it does not name (``fix`` after each; at most 10 of each, then the counts if either had
    more); empty when they agree. Used by verify, and by bundle before it writes anything."""
    from muon_repro.tables.io import read_table

    try:
        indexed = set(read_table(index, "trace_files", check_set=False)["path"].astype(str))
    except Exception as exc:  # not Parquet, or no path column: pyarrow raises several types
        return [f"{TRACE_INDEX} cannot be read: {_one_line(exc)}"]
    absent, unindexed = sorted(indexed - set(traces)), sorted(set(traces) - indexed)
    problems = [f"{TRACE_INDEX} names {shown(path)}, which is not in the bundle" for path in absent[:SHOWN_PER_KIND]]
    problems += [f"{shown(path)} is not in {TRACE_INDEX}{fix}" for path in unindexed[:SHOWN_PER_KIND]]
    if len(absent) > SHOWN_PER_KIND or len(unindexed) > SHOWN_PER_KIND:  # some went unnamed: say how many
        problems.append(f"{len(absent)} indexed files absent, {len(unindexed)} traces not indexed in all")
    return problems


def check_trace_index(root: Path, traces: list[str], report: Callable[[str, bool], None]) -> None:
    """The ``trace_files`` table and the bundle's traces name the same files (a bundle without the table: no check)."""
    index = root / TRACE_INDEX
    if not index.is_file():
        return
    problems = trace_index_problems(index, traces)
    for problem in problems:
        report(f"trace index: {problem}", False)
    if not problems:
        report(f"trace index: {TRACE_INDEX} names the bundle's {len(traces)} traces", True)


def check_table_set(root: Path, report: Callable[[str, bool], None], digests: dict[str, str] | None = None) -> None:
    """The tables in ``root/metrics`` are one set: one generation, every CSV the one written with its Parquet
    twin. Reads the Parquet footers and hashes the CSV files that ``digests`` (sha256 by bundle path, from the
    manifest check) lacks: cheap, so every verify does it."""
    from muon_repro.hardware import profile_problems
    from muon_repro.tables.io import table_set_problems

    metrics = root / "metrics"
    if not any(metrics.glob("*.parquet")):
        report("tables: metrics/ holds no Parquet table (a bundle has its tables there)", False)
        return
    try:
        set_problems = table_set_problems(metrics, csv_sha256={root / path: sha for path, sha in (digests or {}).items()})
        set_problems += profile_problems(metrics)
    except Exception as exc:  # a table that is not Parquet: pyarrow raises several types
        bad = _unreadable_parquet(metrics)
        where = f"metrics/{bad.name} is not a Parquet table" if bad is not None else "the tables in metrics/ cannot be read"
        set_problems = [f"{where} ({_one_line(exc)}): download the dataset again, or rebuild it (muon-repro run)"]
    for problem in set_problems:
        report(f"tables: {problem}", False)
    if not set_problems:
        report(_one_set_line(metrics), True)


def _unreadable_parquet(metrics: Path) -> Path | None:
    """The first table in ``metrics`` whose Parquet footer cannot be read, to name it (None: each one can)."""
    import pyarrow.parquet as pq

    for path in sorted(metrics.glob("*.parquet")):
        try:
            pq.read_metadata(path)
        except Exception:  # pyarrow raises several types for a file that is not Parquet
            return path
    return None


def check_recomputed_tables(root: Path, report: Callable[[str, bool], None], *, workers: int | None = None) -> None:
    """Analyze ``root/traces`` again into a temporary folder and compare every table with ``root/metrics``'s."""
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.table_set import tables_of
    from muon_repro.tables.io import write_tables

    metrics = root / "metrics"
    analysis = analyze_paths([root / "traces"], workers=workers)
    for problem in [*analysis.failures, *analysis.incomplete]:
        report(f"recompute: {problem.message}", False)
    if not analysis.runs:
        report("recompute: no run in traces/ could be analyzed, so no table can be compared", False)
        return
    with tempfile.TemporaryDirectory(prefix="muon-repro-recompute-") as tmp:
        try:
            fresh_dir = Path(tmp) / "metrics"
            write_tables(tables_of(analysis), fresh_dir)
        except ValueError as exc:
            report(f"recompute: the traces' tables cannot be built: {_one_line(exc)}", False)
            return
        for name in sorted(p.stem for p in fresh_dir.glob("*.parquet")):
            _compare_table(name, metrics, fresh_dir, report)


def _one_set_line(metrics: Path) -> str:
    from muon_repro.tables.io import folder_generation

    generation = folder_generation(metrics)
    if generation is None:
        return (
            "tables: the tables in metrics/ carry no generation stamp (written before stamps): whether they are one set "
            "cannot be told"
        )
    return (
        f"tables: the tables in metrics/ are one set (generation {generation[:12]}), every CSV the one written with its "
        "Parquet twin"
    )


def _compare_table(name: str, metrics: Path, fresh_dir: Path, report: Callable[[str, bool], None]) -> None:
    from muon_repro.tables.io import read_table

    label = f"recompute: table {name} (metrics/{name}.parquet)"
    fresh = read_table(fresh_dir / f"{name}.parquet", name)
    try:
        published = read_table(metrics / f"{name}.parquet", name, check_set=False)  # the set is checked once, above
    except Exception as exc:  # missing, or not the table: pyarrow raises several types for a file that does not fit the schema
        report(f"{label}: cannot be read: {_one_line(exc)}", False)
        return
    problems = table_differences(published, fresh, name)
    if problems:
        report(f"{label}: differs from the traces' analysis: " + "; ".join(problems), False)
    else:
        report(f"{label}: equal to the traces' analysis, {len(fresh)} rows", True)
    _compare_csv_twin(name, metrics, published, report)


def _compare_csv_twin(name: str, metrics: Path, published: pd.DataFrame, report: Callable[[str, bool], None]) -> None:
    """The CSV beside a table holds its rows: the writer renders both from one frame, so the CSV must be the Parquet's
    rows rendered again, byte for byte. The stamp only says the CSV is the file written then; a CSV edited and its
    stamp rewritten passes that, not this."""
    from muon_repro.tables.schemas import SCHEMAS

    csv = metrics / f"{name}.csv"
    if not csv.is_file():
        report(f"recompute: metrics/{name}.csv is missing beside its Parquet table", False)
        return
    if csv.read_bytes() != SCHEMAS[name].conform(published).to_csv(index=False).encode("utf-8"):
        said = f"metrics/{name}.csv and metrics/{name}.parquet hold different rows: one was changed after they were written"
        report(f"recompute: {said}", False)


def table_differences(published: pd.DataFrame, fresh: pd.DataFrame, name: str) -> list[str]:
    """How ``published`` differs from ``fresh`` (both conformed to the table's schema): row count,
    then each column whose values differ, with the first differing row; location columns aside."""
    from muon_repro.tables.schemas import SCHEMAS

    if len(published) != len(fresh):
        return [f"{len(published)} rows, the traces give {len(fresh)}"]
    key = [c for c in SCHEMAS[name].key if c not in LOCATION_COLUMNS]
    published, fresh = (df.sort_values(key, kind="stable").reset_index(drop=True) for df in (published, fresh))
    problems = []
    for column in (c for c in SCHEMAS[name].names if c not in LOCATION_COLUMNS):
        differs = _differing(published[column], fresh[column])
        if differs.any():
            row = int(differs.nonzero()[0][0])
            where = ", ".join(f"{k}={published.at[row, k]}" for k in key)
            problems.append(
                f"{name}.{column}: {int(differs.sum())} value(s) differ, first at {where}: "
                f"{published.at[row, column]} in the bundle, {fresh.at[row, column]} from the traces"
            )
    return problems


def _differing(published: pd.Series, fresh: pd.Series) -> np.ndarray:
    """Per row: do the two values differ? Nulls equal nulls; floats are equal within :data:`FLOAT_RTOL`
    (and :data:`FLOAT_ATOL`)."""
    import numpy as np

    null_a, null_b = published.isna().to_numpy(dtype=bool), fresh.isna().to_numpy(dtype=bool)
    both = ~null_a & ~null_b
    equal = np.zeros(len(published), dtype=bool)
    if str(published.dtype) == "Float64":
        a, b = (s.to_numpy(dtype=float, na_value=np.nan) for s in (published, fresh))
        equal[both] = np.isclose(a[both], b[both], rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
    else:
        a, b = (s.astype(object).to_numpy() for s in (published, fresh))
        equal[both] = a[both] == b[both]
    return ~((null_a & null_b) | equal)


def _run_environments(root: Path) -> Iterator[tuple[Path, dict[str, Any] | SideFileError]]:
    """Each run's environment and where it lies: a benchmark trial's ``environment.json``, a convergence run's
    ``convergence.json`` (its ``environment``), or the error that kept it from being read."""
    runs = [*((root / "traces").rglob(ENVIRONMENT_FILE)), *((root / "traces").rglob(CONVERGENCE_FILE))]
    for path in sorted(runs):
        try:
            doc = load_json(path)
        except SideFileError as exc:
            yield path, exc
            continue
        environment = doc.get("environment") if path.name == CONVERGENCE_FILE else doc
        yield path, environment if isinstance(environment, dict) else {}


def check_sources(root: Path, report: Callable[[str, bool], None]) -> None:
    """Whether each run's code can be found (benchmark and convergence runs alike): a clean commit it names, or the
    bundle's own ``muon_repro/`` (its ``source_sha256``). A run recorded from a changed tree whose digest is not the
    bundled source's fails: its code is nowhere. Runs recorded before runs recorded a digest, from a changed tree or
    one whose commit is unknown, are counted apart: their code is unknown, and nothing can find it now."""
    from muon_repro.provenance import SOURCE_DIGEST_FIELD, source_digest

    bundled = source_digest(root / "muon_repro") if (root / "muon_repro").is_dir() else None
    counts = {"commit": 0, "bundled": 0, "legacy": 0}
    lost: list[str] = []
    for path, env in _run_environments(root):
        if isinstance(env, SideFileError):
            report(f"source: {path.relative_to(root)}: unreadable ({_one_line(env.problem)})", False)
            continue
        digest, clean = env.get(SOURCE_DIGEST_FIELD), env.get("git_sha") and env.get("git_dirty") is False
        if bundled is not None and digest == bundled:
            counts["bundled"] += 1
        elif clean:
            counts["commit"] += 1
        elif digest is None:
            counts["legacy"] += 1
        else:
            lost.append(str(path.parent.relative_to(root)))
    if not any(counts.values()) and not lost:
        return  # no run to judge (the traces check fails a bundle without traces): an empty folder is not "ok"
    said = (
        f"{counts['commit']} recorded from a clean commit (git_sha), {counts['bundled']} with this bundle's muon_repro/, "
        f"{counts['legacy']} from a changed or unknown tree before runs recorded their source digest"
    )
    known = "every run's code is known" if not counts["legacy"] else "the code of every run that recorded its source is known"
    if lost:
        report(
            f"source: {len(lost)} run(s) recorded from a changed tree whose source is neither a commit nor this bundle's "
            f"muon_repro/ (e.g. {lost[0]}); re-record them from a clean commit ({said})",
            False,
        )
    elif bundled is None:
        report(f"source: this bundle carries no muon_repro/ (bundled before it carried its code); {said}", True)
    else:
        report(f"source: {known}: {said}", True)


REPORT_MD = "report/report.md"
CITE_HEADING = "## How to cite"  # the report's section that gives the dataset's BibTeX entry


def check_report_citation(root: Path, report: Callable[[str, bool], None]) -> None:
    """The report's "How to cite" gives this dataset's entry, as CITATION.cff and the card do: a report rendered
    before ``bundle --repo-id`` (the project's repository, version and authors by default) would cite another
    dataset from inside this one. A report without that section (not one ``muon-repro report`` wrote) is not judged."""
    path = root / REPORT_MD
    if not path.is_file() or not (root / CFF_NAME).is_file():
        return  # a bundle without a report (said by the manifest check if it should have one) or without a CFF (card)
    try:
        meta = read_citation(root / CFF_NAME)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        report(f"{REPORT_MD}: its citation cannot be checked: {_one_line(exc)}", False)
        return
    if CITE_HEADING not in text:
        return
    if dataset_url(meta.repo_id, meta.tag) in text:  # the entry's link names repository and version, whoever rendered it
        report(f"{REPORT_MD}: cites this dataset as {CFF_NAME} does ({meta.repo_id} {meta.version})", True)
        return
    flags = shlex.join(report_arguments(meta, root / "metrics"))
    report(
        f'{REPORT_MD}: its "How to cite" does not give this dataset\'s entry ({meta.repo_id} {meta.version}, '
        f"{'; '.join(meta.authors)}) as {CFF_NAME} does: render the report for it (muon-repro report {flags}), then "
        "bundle again",
        False,
    )


def _hub_cache_blobs(root: Path) -> Path | None:
    """The ``blobs/`` folder of the Hub cache repository whose snapshot ``root`` is (a snapshot's files are links to
    its blobs); None when ``root`` is no snapshot."""
    snapshot = root.resolve()
    blobs = snapshot.parent.parent / "blobs"
    return blobs.resolve() if snapshot.parent.name == "snapshots" and blobs.is_dir() else None


def bundle_links(root: Path) -> list[tuple[str, str]]:
    """(path in the bundle, where it points) of every symbolic link to a file under ``root``, found without following
    any; a link to a folder is refused with a ValueError naming it (:func:`~muon_repro.tables.files.list_files`'s).

    A bundle holds its own files: a link may point at any file of this machine, whose bytes verify would then read
    and quote. Left aside: the links of a Hub cache snapshot to its own blobs, and paths that are no file of the
    dataset (:func:`~muon_repro.dataset.manifest.is_ignored`: caches, hidden folders), which no check reads.
    """
    list_files(root)  # raises for a link to a folder, before any file is read
    blobs = _hub_cache_blobs(root)
    links = []
    for dirpath, _, filenames in os.walk(root):  # followlinks=False; a link to a file (or to nothing) is a file name
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if not path.is_symlink() or is_ignored(rel):
                continue
            target = Path(os.path.realpath(path))
            if blobs is not None and target.parent == blobs and target.is_file():
                continue
            links.append((rel, os.readlink(path)))
    return sorted(links)


def verify_bundle(root: str | Path, *, echo: Callable[[str], None] | None = None, recompute: bool = False) -> VerifyResult:
    """Run every check on ``root``: checksums of every file, the tables one set, card, configs, the report's
    citation, traces, sources
    (with ``recompute``, also analyze its traces again and compare the tables' values:
    :func:`check_recomputed_tables`); ``echo`` gets one line per check as it completes."""
    root = Path(root)
    if not root.is_dir():
        said = "a file, not a folder" if root.exists() else "no such folder"
        raise FileNotFoundError(f"{root}: {said}; give the dataset's folder (a download, or a bundle)")
    result = VerifyResult()

    def report(line: str, ok: bool) -> None:
        (result.passed if ok else result.failed).append(line)
        if echo is not None:
            echo(("ok      " if ok else "FAILED  ") + line)

    links = bundle_links(root)
    for path, target in links:  # every check reads files: none runs while a link may lead anywhere
        report(
            f"{shown(path)}: a symbolic link (to {shown(target)}), not a file: a bundle holds its own files, so it is not "
            "read and no other check is run; replace it with what it points at, or remove it",
            False,
        )
    if links:
        return result

    digests: dict[str, str] = {}  # each file hashed once: the table-set check reuses the CSVs' digests
    manifest_problems = check_manifest(root, digests=digests)
    for problem in manifest_problems:
        report(problem, False)
    if not manifest_problems:
        report("manifest: every file matches MANIFEST.sha256", True)
    check_table_set(root, report, digests)
    card_problems, meta = check_card(root)
    for problem in card_problems:
        report(problem, False)
    if not card_problems:
        report(
            f"card: {CARD_NAME} metadata and {CFF_NAME} parse, every data file exists; {CROISSANT_NAME} names every table", True
        )
    if meta is not None and isinstance(meta.get("configs"), list) and meta["configs"]:
        check_configs(root, meta, report)
    check_report_citation(root, report)
    check_promises(root, report)
    check_traces(root, report)
    check_sources(root, report)
    if recompute:
        check_recomputed_tables(root, report)
    return result
