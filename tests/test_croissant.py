"""``croissant.json``: valid Croissant 1.1 for mlcroissant, its record sets give the Parquet rows, and breaking it is caught."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hub_support import DATE, _write_table, build

from muon_repro.dataset.bundle import Sources, documents_from_sources
from muon_repro.dataset.croissant import CROISSANT_NAME, RAI, check_croissant
from muon_repro.dataset.manifest import read_manifest
from muon_repro.dataset.meta import BundleMeta
from muon_repro.dataset.verify import verify_bundle
from muon_repro.tables.files import sha256_file

mlc = pytest.importorskip("mlcroissant", reason="mlcroissant is a dev dependency: pip install -c constraints.txt -e '.[dev]'")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bundle(sources, tmp_path) -> Path:  # noqa: F811
    return build(sources, tmp_path / "dist" / "dataset")


def _doc(bundle: Path) -> dict:
    return json.loads((bundle / CROISSANT_NAME).read_text())


def _plain(value):
    """A record's value or a Parquet cell as plain Python: text, int, float, bool or None."""
    if isinstance(value, bytes):
        return value.decode()
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _records(dataset, table: str) -> list[dict]:
    prefix = f"{table}/"
    return [{k.removeprefix(prefix): _plain(v) for k, v in r.items()} for r in dataset.records(table)]


def _rows(path: Path) -> list[dict]:
    return [{k: _plain(v) for k, v in row.items()} for row in pq.read_table(path).to_pylist()]


def test_croissant_validates_and_every_record_set_gives_its_parquet_rows(bundle):
    dataset = mlc.Dataset(jsonld=bundle / CROISSANT_NAME)
    assert not dataset.metadata.ctx.issues.errors and not dataset.metadata.ctx.issues.warnings
    tables = sorted(p.stem for p in (bundle / "metrics").glob("*.parquet"))
    assert [r.id for r in dataset.metadata.record_sets] == tables
    for table in tables:
        assert _records(dataset, table) == _rows(bundle / "metrics" / f"{table}.parquet"), table


def test_croissant_types_files_citation_and_responsible_ai_fields(bundle):
    doc = _doc(bundle)
    assert doc["conformsTo"] == "http://mlcommons.org/croissant/1.1" and doc["@type"] == "sc:Dataset"
    assert (doc["version"], doc["datePublished"]) == ("1.0.0", DATE)
    assert doc["license"] == "https://spdx.org/licenses/MIT.html"
    assert doc["url"] == "https://huggingface.co/datasets/test-org/muon-traces"
    assert doc["citeAs"] in (bundle / "README.md").read_text()  # the card's BibTeX
    assert "title = {{Distributed Muon vs AdamW: profiler traces and metrics (Revision v1.0.0)}}" in doc["citeAs"]
    runs = {f["name"]: f for f in next(r for r in doc["recordSet"] if r["@id"] == "runs")["field"]}
    assert [runs[c]["dataType"] for c in ("run", "dp", "step_ms")] == ["sc:Text", "sc:Integer", "sc:Float"]
    assert runs["dp"]["source"] == {"fileObject": {"@id": "metrics/runs.parquet"}, "extract": {"column": "dp"}}
    digests = {e.path: e.sha256 for e in read_manifest(bundle)}
    objects = [d for d in doc["distribution"] if d["@type"] == "cr:FileObject"]
    assert {o["contentUrl"]: o["sha256"] for o in objects} == {p: s for p, s in digests.items() if p.endswith(".parquet")}
    file_sets = {d["@id"]: d["includes"] for d in doc["distribution"] if d["@type"] == "cr:FileSet"}
    assert file_sets == {
        "traces": "traces/**/*rank*.json.gz",
        "run-records": "traces/**/*.json",
        "run-logs": "traces/**/log.txt",
        "tables-csv": "metrics/*.csv",
    }
    for key in ("rai:dataCollection", "rai:dataLimitations", "rai:dataBiases", "rai:personalSensitiveInformation"):
        assert doc[key] == RAI[key]
    assert doc["rai:personalSensitiveInformation"][0].startswith("None")


def test_croissant_is_byte_identical_when_regenerated(sources, tmp_path):  # noqa: F811
    first = build(sources, tmp_path / "a")
    second = build(sources, tmp_path / "b")
    assert (first / CROISSANT_NAME).read_bytes() == (second / CROISSANT_NAME).read_bytes()
    docs = documents_from_sources(Sources(**sources), BundleMeta(repo_id="test-org/muon-traces", version="1.0.0", date=DATE))
    assert docs.root_files[CROISSANT_NAME] == (first / CROISSANT_NAME).read_text()


def _steps_run_field(doc: dict) -> dict:
    return next(f for r in doc["recordSet"] if r["@id"] == "steps" for f in r["field"] if f["name"] == "run")


def _steps_object(doc: dict) -> dict:
    return next(d for d in doc["distribution"] if d.get("contentUrl") == "metrics/steps.parquet")


DELETE = object()


@pytest.mark.parametrize(
    "node, keys, value, fails_at",
    [
        pytest.param(_steps_run_field, ("dataType",), "sc:NoSuchType", "validation", id="unknown dataType"),
        pytest.param(_steps_run_field, ("dataType",), DELETE, "validation", id="no dataType"),
        pytest.param(
            _steps_run_field, ("source", "fileObject", "@id"), "metrics/gone.parquet", "validation", id="no such FileObject"
        ),
        pytest.param(_steps_run_field, ("dataType",), "sc:Integer", "records", id="text read as an integer"),
        pytest.param(_steps_run_field, ("source", "extract", "column"), "gone", "records", id="missing column"),
        pytest.param(_steps_object, ("contentUrl",), "metrics/gone.parquet", "records", id="missing file"),
        pytest.param(_steps_object, ("sha256",), "0" * 64, "records", id="wrong sha256"),
    ],
)
def test_a_broken_croissant_fails(bundle, node, keys, value, fails_at):
    doc = _doc(bundle)
    parent = node(doc)
    for key in keys[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = value
    broken = bundle / "broken.json"  # beside the tables, so relative contentUrls resolve as in croissant.json
    broken.write_text(json.dumps(doc))
    if fails_at == "validation":
        with pytest.raises(mlc.ValidationError):
            mlc.Dataset(jsonld=broken)
    else:
        dataset = mlc.Dataset(jsonld=broken)  # well-formed: only reading the data shows the fault
        with pytest.raises(mlc.GenerationError):
            list(dataset.records("steps"))


def test_verify_checks_croissant_names_every_table_with_its_sha256(bundle):
    assert check_croissant(bundle) == []
    doc = _doc(bundle)
    doc["recordSet"] = [r for r in doc["recordSet"] if r["@id"] != "claims"]
    _steps_object(doc)["sha256"] = "0" * 64
    (bundle / CROISSANT_NAME).write_text(json.dumps(doc))
    assert check_croissant(bundle) == [
        "croissant.json: no recordSet for metrics/claims.parquet",
        "croissant.json: the sha256 of metrics/steps.parquet is not the file's (rebuild the bundle)",
    ]
    failed = verify_bundle(bundle).failed
    assert "croissant.json: no recordSet for metrics/claims.parquet" in failed
    (bundle / CROISSANT_NAME).unlink()
    assert check_croissant(bundle)[0].startswith("croissant.json: missing or not a JSON object")


def test_a_column_without_a_croissant_type_is_refused_by_name(sources, tmp_path):  # noqa: F811
    _write_table(sources["metrics"], "shapes", {"run": pa.array(["a"]), "dims": pa.array([[1, 2]], pa.list_(pa.int64()))})
    with pytest.raises(ValueError, match=r"metrics/shapes\.parquet: column 'dims' has type"):
        build(sources, tmp_path / "out")


@pytest.mark.slow  # mlcroissant reads the committed tables through its own graph (~3 s); the bundles' croissant is checked fast
def test_the_root_croissant_validates_and_gives_the_committed_claims():
    root = REPO / CROISSANT_NAME
    if not root.is_file():
        pytest.fail(f"{root} is missing: regenerate it with `muon-repro run` (its card stage writes it)")
    dataset = mlc.Dataset(jsonld=root)
    assert not dataset.metadata.ctx.issues.errors
    assert _records(dataset, "claims") == _rows(REPO / "metrics" / "claims.parquet")
    assert {r.id for r in dataset.metadata.record_sets} == {p.stem for p in (REPO / "metrics").glob("*.parquet")}
    assert sha256_file(REPO / "metrics" / "claims.parquet")[1] in root.read_text()


def test_every_committed_file_under_traces_is_in_a_declared_file_set():
    """A file no FileSet includes is invisible to a Croissant reader: the original study's traces
    (trace_<run>_rank<r>.json.gz), the cost model's CSV records, the calibrations and the study's license among them."""
    from fnmatch import fnmatchcase

    from muon_repro.dataset.croissant import FILE_SETS

    traces = [p.relative_to(REPO).as_posix() for p in (REPO / "traces").rglob("*") if p.is_file()]
    outside = [p for p in traces if not any(fnmatchcase(p, glob) for _, glob, _, _ in FILE_SETS)]
    assert traces and not outside, outside[:5]
