"""``croissant.json``: the bundle described in Croissant 1.1 (MLCommons JSON-LD), with its responsible-AI fields.

The Hub serves Croissant only for the data it converts to Parquet itself; a reproducibility
dataset ships its own. What it holds:

- one ``cr:FileObject`` per ``metrics/<table>.parquet`` (sha256, size) and one typed
  ``cr:RecordSet`` per table, a field per column, described from the column docs the card uses;
- ``cr:FileSet`` s for every file under ``traces/`` (the traces, the run records, the cost model's records and
  calibrations, the logs, the licenses of files others published) and the CSV twins of the tables;
- license, version, date, creators, ``citeAs`` (the card's BibTeX) and the ``rai:`` fields that
  apply to benchmark timings.

Paths are relative to the file (``contentUrl: metrics/runs.parquet``), so the same document
describes the repository root, the bundle and a downloaded copy. Keys are sorted and record
sets ordered by name, so regenerating it from the same tables changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from muon_repro.dataset.citation import bibtex
from muon_repro.dataset.manifest import FileEntry
from muon_repro.dataset.meta import ABSTRACT, TAGS, BundleMeta
from muon_repro.dataset.tables_doc import ColumnDoc, TableDoc, describe_tables
from muon_repro.rundir import SideFileError, load_json
from muon_repro.tables.files import sha256_file

CROISSANT_NAME = "croissant.json"
CONFORMS_TO = "http://mlcommons.org/croissant/1.1"
PARQUET = "application/x-parquet"
# The @context mlcroissant 1.1 writes (anything else draws its "not standard" warning).
CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "arrayShape": "cr:arrayShape",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileObject": "cr:fileObject",
    "fileProperty": "cr:fileProperty",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "name": {"@container": "@language"},
    "parentField": "cr:parentField",
    "path": "cr:path",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
# datasets' feature types (what the card documents) -> Croissant's atomic data types.
DATA_TYPES = {
    "string": "sc:Text",
    "large_string": "sc:Text",
    "bool": "sc:Boolean",
    **{f"int{n}": "sc:Integer" for n in (8, 16, 32, 64)},
    **{f"uint{n}": "sc:Integer" for n in (8, 16, 32, 64)},
    **{f"float{n}": "sc:Float" for n in (16, 32, 64)},
    "date32": "sc:Date",
    "date64": "sc:Date",
}
# (id, glob from the bundle's root as mlcroissant matches it, encoding, what it is); declared only if a file matches.
FILE_SETS = (
    ("traces", "traces/**/*rank*.json.gz", "application/gzip",
     "PyTorch profiler Chrome traces (Kineto JSON, gzipped), one per rank and trial (rank<r>.json.gz; the original "
     "study's trace_<run>_rank<r>.json.gz); open them in ui.perfetto.dev"),
    ("run-records", "traces/**/*.json", "application/json",
     "what each run recorded: config.json (resolved config and command), environment.json (machine and software), "
     "metrics.json (per-rank step times, losses, byte ledger, optimizer state), convergence.json (a convergence "
     "run's curve), machine.json (a calibrated machine profile), original_study.json (the study's files' sources)"),
    ("costmodel-records", "traces/**/*.csv", "text/csv",
     "the cost model's records per hardware profile (muon-repro regimes and calibrate write them; analyze reads "
     "them into the predictions, regime and calibration tables)"),
    ("calibrations", "traces/**/*.parquet", PARQUET, "a calibrated machine's measured kernel rates, beside its CSV"),
    ("run-logs", "traces/**/log.txt", "text/plain", "each run's log"),
    ("licenses", "traces/**/LICENSE*", "text/plain", "the license of files published by others (the original study's)"),
    ("tables-csv", "metrics/*.csv", "text/csv", "the tables again as CSV, written with their Parquet twins"),
)  # fmt: skip
# Responsible-AI fields (Croissant RAI 1.0) that apply to measurements of software on a machine.
RAI: dict[str, Any] = {
    "rai:dataCollection": (
        "Recorded by the muon_repro package: each configuration trains a small tensor-parallel GPT with distributed Muon "
        "or distributed AdamW (ZeRO-1 over data parallel) for a few steps under the PyTorch profiler, in interleaved "
        "trials, on the machine each run's environment.json describes. The tables are computed from the traces and run "
        "records by `muon-repro analyze`; docs/method.md gives every formula and convention."
    ),
    "rai:dataCollectionType": ["Experiments", "Direct measurement"],
    "rai:dataCollectionRawData": "The profiler traces and run records under traces/, shipped with the tables.",
    "rai:dataPreprocessingProtocol": [
        "Warm-up steps are left out of timings; time is attributed to optimizer phases by the profiler annotations the "
        "optimizers emit; intervals are t intervals over rounds of interleaved recordings, paired between the runs "
        "compared (docs/method.md)."
    ],
    "rai:dataUseCases": [
        "Checking claims about Distributed Muon's communication volume, optimizer-step time and optimizer-state memory "
        "against AdamW; calibrating or validating performance models of distributed optimizers.",
        "Not training data: the rows are measurements, not examples for a model.",
    ],
    "rai:dataLimitations": [
        "Timings hold for the machine, software versions and load that recorded them (environment.json); absolute "
        "times do not transfer to other hardware, and a small model at few tokens per step makes the optimizer step a "
        "far larger share of a training step than at pretraining scale.",
        "Few trials per configuration: the intervals are wide; cost-model tables are predictions, labelled as such.",
    ],
    "rai:dataBiases": [
        "Measurement bias: background load, thermal state and the profiler's own overhead inflate absolute times; trials "
        "are interleaved across configurations so that drift hits all alike, and ratios are more robust than times.",
        "Selection: the configurations are the ones the reproduced claims name (few ranks, one model family); they do "
        "not represent other parallel layouts or scales.",
    ],
    "rai:personalSensitiveInformation": [
        "None: no data about people. environment.json records the recording machine (host name, hardware, software "
        "versions); the convergence runs train on public-domain Shakespeare plays."
    ],
    "rai:dataReleaseMaintenancePlan": (
        "Each version is a tag vX.Y.Z on the Hub that never moves; a new recording or analysis is a new version, "
        "regenerated with `muon-repro run`."
    ),
}


def _data_type(table: TableDoc, column: ColumnDoc) -> str:
    try:
        return DATA_TYPES[column.dtype]
    except KeyError:
        raise ValueError(
            f"{table.path}: column {column.name!r} has type {column.dtype}, which has no Croissant data type here; "
            f"known: {', '.join(sorted(DATA_TYPES))}"
        ) from None


def _field(table: TableDoc, column: ColumnDoc) -> dict[str, Any]:
    description = column.description + (f" (unit: {column.unit})" if column.unit else "")
    field: dict[str, Any] = {
        "@type": "cr:Field",
        "@id": f"{table.name}/{column.name}",
        "name": column.name,
        "dataType": _data_type(table, column),
        "source": {"fileObject": {"@id": table.path}, "extract": {"column": column.name}},
    }
    if description:
        field["description"] = description
    return field


def _record_set(table: TableDoc) -> dict[str, Any]:
    record_set: dict[str, Any] = {
        "@type": "cr:RecordSet",
        "@id": table.name,
        "name": table.name,
        "field": [_field(table, c) for c in table.columns],
    }
    if table.description:
        record_set["description"] = table.description
    return record_set


def _file_object(table: TableDoc, entry: FileEntry) -> dict[str, Any]:
    return {
        "@type": "cr:FileObject",
        "@id": table.path,
        "name": table.path,
        "contentUrl": table.path,
        "encodingFormat": PARQUET,
        "contentSize": f"{entry.size} B",
        "sha256": entry.sha256,
    }


def _file_sets(paths: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {"@type": "cr:FileSet", "@id": id_, "name": id_, "description": what, "includes": glob, "encodingFormat": encoding}
        for id_, glob, encoding, what in FILE_SETS
        if any(fnmatchcase(p, glob) for p in paths)
    ]


def croissant(meta: BundleMeta, files: Mapping[str, Path], digests: Sequence[FileEntry]) -> dict[str, Any]:
    """The Croissant document for a bundle of ``files`` (bundle path -> readable file) whose digests are ``digests``."""
    tables = sorted(describe_tables(files), key=lambda t: t.name)
    if not tables:
        raise ValueError("no metrics/<table>.parquet in the bundle: croissant.json needs at least one table")
    by_path = {d.path: d for d in digests}
    missing = [t.path for t in tables if t.path not in by_path]
    if missing:
        raise ValueError(f"no digest for {', '.join(missing)}: croissant.json records every table's sha256")
    doc: dict[str, Any] = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": meta.pretty_name,
        "description": ABSTRACT,
        "version": meta.version,
        "datePublished": meta.date,
        "license": f"https://spdx.org/licenses/{meta.license}.html",
        "url": meta.url,
        "citeAs": bibtex(meta),
        # Entities, as in CITATION.cff: an author may be a team, and names stay as written.
        "creator": [{"@type": "sc:Organization", "name": a} for a in meta.authors],
        "publisher": {"@type": "sc:Organization", "name": "Hugging Face", "url": "https://huggingface.co"},
        "keywords": TAGS,
        "isAccessibleForFree": True,
        "distribution": [_file_object(t, by_path[t.path]) for t in tables] + _file_sets(sorted(files)),
        "recordSet": [_record_set(t) for t in tables],
        **RAI,
    }
    if meta.code_url:
        doc["sameAs"] = meta.code_url
    return doc


def croissant_json(meta: BundleMeta, files: Mapping[str, Path], digests: Sequence[FileEntry]) -> str:
    """:func:`croissant` as the file's text: sorted keys, two-space indent, one trailing newline."""
    return json.dumps(croissant(meta, files, digests), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def check_croissant(root: Path) -> list[str]:
    """Problems with ``root/croissant.json``: missing or unreadable, a table without its RecordSet and
    FileObject, or a FileObject whose sha256 is not its file's."""
    try:
        doc = load_json(root / CROISSANT_NAME)  # size and depth limited: a download is a stranger's text
    except SideFileError as exc:
        return [f"{CROISSANT_NAME}: missing or not a JSON object ({exc.problem})"]
    problems = []
    distribution = [d for d in doc.get("distribution") or [] if isinstance(d, dict)]
    objects = {o.get("contentUrl"): o for o in distribution if o.get("@type") == "cr:FileObject"}
    record_sets = {r.get("@id") for r in doc.get("recordSet") or [] if isinstance(r, dict)}
    tables = sorted(p.relative_to(root).as_posix() for p in (root / "metrics").glob("*.parquet"))
    for table in tables:
        if Path(table).stem not in record_sets:
            problems.append(f"{CROISSANT_NAME}: no recordSet for {table}")
        if table not in objects:
            problems.append(f"{CROISSANT_NAME}: no FileObject for {table}")
        elif objects[table].get("sha256") != sha256_file(root / table)[1]:
            problems.append(f"{CROISSANT_NAME}: the sha256 of {table} is not the file's (rebuild the bundle)")
    for url in sorted(set(objects) - set(tables), key=str):
        problems.append(f"{CROISSANT_NAME}: FileObject {url} is not in the bundle")
    return problems


def croissant_fields(root: Path) -> dict[str, list[tuple[str, str]]]:
    """(column, Croissant data type) per record set of ``root/croissant.json``; empty if it is unreadable
    (:func:`check_croissant` reports that)."""
    try:
        doc = load_json(root / CROISSANT_NAME)
    except SideFileError:
        return {}
    out: dict[str, list[tuple[str, str]]] = {}
    for record_set in (doc.get("recordSet") or []) if isinstance(doc, dict) else []:
        if isinstance(record_set, dict) and isinstance(record_set.get("@id"), str):
            fields = [f for f in record_set.get("field") or [] if isinstance(f, dict)]
            out[record_set["@id"]] = [(str(f.get("name")), str(f.get("dataType"))) for f in fields]
    return out
