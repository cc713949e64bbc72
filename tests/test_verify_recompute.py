"""``muon-repro verify DIR --recompute``: the bundle's traces analyzed again give the bundle's tables.

A small bundle is built from synthetic runs (tests/test_analysis_inputs.py) exactly as
``muon-repro run`` builds the real one: analyze, then bundle. Then one value of one table is changed and
the manifest remade, so that the checksums hold: plain ``verify`` cannot see the change,
``--recompute`` names the table.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_analysis_inputs import write_pair

from muon_repro import stages
from muon_repro.cli import main
from muon_repro.dataset.bundle import Sources, build_bundle
from muon_repro.dataset.manifest import write_manifest
from muon_repro.dataset.meta import BundleMeta
from muon_repro.dataset.verify import table_differences, verify_bundle


def _sources(src: Path) -> Sources:
    """The traces and tables under ``src``, and the two documents the card links to (figures and scripts: optional,
    and not what is checked here)."""
    (src / "report").mkdir()
    (src / "report" / "report.md").write_text("# Report\n")
    (src / "docs").mkdir()
    (src / "docs" / "method.md").write_text("# Method\n")
    missing = src / "none"
    return Sources(src / "traces", src / "metrics", missing, src / "report", missing, src / "docs")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle of two complete runs (Muon and AdamW, two ranks each) and their tables; read-only."""
    src = tmp_path_factory.mktemp("src")
    write_pair(src / "traces")
    stages.analyze([src / "traces"], src / "metrics", workers=1)
    sources = _sources(src)
    out = src / "dataset"
    build_bundle(sources, BundleMeta(repo_id="test-org/recompute", version="1.0.0", date="2025-06-01"), out)
    return out


@pytest.fixture
def tampered(bundle, tmp_path) -> Path:
    """The bundle with one value of ``runs.step_ms`` changed, Parquet schema and stamp kept, manifest remade."""
    copy = Path(shutil.copytree(bundle, tmp_path / "dataset"))
    path = copy / "metrics" / "runs.parquet"
    table = pq.read_table(path)
    index = table.schema.get_field_index("step_ms")
    values = table.column("step_ms").to_pylist()
    values[0] *= 1.5
    pq.write_table(table.set_column(index, table.schema.field(index), pa.array(values, pa.float64())), path)
    _reseal_croissant(copy, "metrics/runs.parquet")
    write_manifest(copy)
    return copy


def _reseal_croissant(root: Path, table: str) -> None:
    """Give croissant.json the changed table's sha256, as a careful tamperer would: only recompute can tell."""
    doc_path = root / "croissant.json"
    doc = json.loads(doc_path.read_text())
    (entry,) = [d for d in doc["distribution"] if d.get("contentUrl") == table]
    entry["sha256"] = hashlib.sha256((root / table).read_bytes()).hexdigest()
    doc_path.write_text(json.dumps(doc, indent=2, sort_keys=True))


def _lines(result) -> str:
    return "\n".join(result.failed)


@pytest.mark.slow
def test_recompute_passes_on_a_bundle_made_from_its_traces(bundle):
    lines: list[str] = []
    result = verify_bundle(bundle, echo=lines.append, recompute=True)
    assert result.ok, _lines(result)
    assert any(line.startswith("ok      tables: the tables in metrics/ are one set (generation ") for line in lines)
    for name in ("runs", "steps", "collectives", "comparisons", "claims", "ranks", "phases", "timeline", "losses", "environment"):
        assert any(
            line.startswith(f"ok      recompute: table {name} (metrics/{name}.parquet): equal to the traces' analysis")
            for line in lines
        ), name


@pytest.mark.slow
def test_a_changed_value_passes_plain_verify_and_fails_recompute_naming_its_table(tampered):
    assert verify_bundle(tampered).ok, _lines(verify_bundle(tampered))  # checksums, card, configs and traces all hold
    result = verify_bundle(tampered, recompute=True)
    assert len(result.failed) == 2, _lines(result)
    line, csv = result.failed
    assert csv.startswith("recompute: metrics/runs.csv and metrics/runs.parquet hold different rows: one was changed")
    assert line.startswith(
        "recompute: table runs (metrics/runs.parquet): differs from the traces' analysis: runs.step_ms: 1 value(s) differ"
    )
    assert "in the bundle" in line and "from the traces" in line


@pytest.mark.slow
def test_the_verify_command_takes_recompute(tampered, capsys):
    assert main(["verify", str(tampered)]) == 0
    capsys.readouterr()
    assert main(["verify", str(tampered), "--recompute"]) == 1
    out = capsys.readouterr()
    assert "FAILED  recompute: table runs (metrics/runs.parquet)" in out.out and "2 check(s) FAILED" in out.err


@pytest.mark.slow
def test_recompute_names_a_missing_trace_and_a_table_of_another_set(bundle, tmp_path):
    copy = Path(shutil.copytree(bundle, tmp_path / "dataset"))
    trial = next((copy / "traces").rglob("rank1.json.gz")).parent
    (trial / "rank1.json.gz").unlink()
    (copy / "metrics" / "runs.csv").write_text("run\nsomething else\n")
    write_manifest(copy)
    failed = _lines(verify_bundle(copy, recompute=True))
    assert f"recompute: {trial}: rank 1 of 2 has no trace (rank1.json.gz missing)" in failed
    assert "runs.csv: not the CSV file written with runs.parquet" in failed
    assert "recompute: table runs (metrics/runs.parquet): differs from the traces' analysis" in failed


def test_table_differences_ignore_locations_and_tiny_float_noise():
    from muon_repro.tables.schemas import SCHEMAS

    base = {c: None for c in SCHEMAS["runs"].names}
    published = SCHEMAS["runs"].conform(
        pd.DataFrame([base | {"run": "g/a", "path": "/elsewhere/traces/g/a", "step_ms": 1.0, "ranks": 2}])
    )
    same = published.assign(path="traces/g/a", step_ms=1.0 + 1e-12)
    assert table_differences(published, same, "runs") == []
    other = published.assign(ranks=3, step_ms=1.001)
    problems = table_differences(published, other, "runs")
    assert [p.split(":")[0] for p in problems] == ["runs.ranks", "runs.step_ms"]
    assert problems[0] == "runs.ranks: 1 value(s) differ, first at run=g/a: 2 in the bundle, 3 from the traces"
    assert table_differences(published, published.iloc[:0], "runs") == ["1 rows, the traces give 0"]


def test_table_differences_report_a_null_against_a_value_either_way_and_not_a_null_against_a_null():
    from muon_repro.tables.schemas import SCHEMAS

    base = {c: None for c in SCHEMAS["runs"].names}
    with_null = SCHEMAS["runs"].conform(pd.DataFrame([base | {"run": "g/a", "step_ms": None, "ranks": 2}]))
    with_value = with_null.assign(step_ms=1.0)
    assert table_differences(with_null, with_null.copy(), "runs") == []  # the other columns are null on both sides
    for published, fresh in ((with_null, with_value), (with_value, with_null)):
        (problem,) = table_differences(published, fresh, "runs")
        assert problem.startswith("runs.step_ms: 1 value(s) differ, first at run=g/a: ")


def test_verify_without_recompute_does_not_analyze(bundle, monkeypatch):
    from muon_repro.analysis import batch_read

    monkeypatch.setattr(batch_read, "analyze_paths", lambda *a, **k: pytest.fail("plain verify analyzed the traces"))
    assert verify_bundle(bundle).ok


# ---------------------------------------------------------------- a CSV that is not its Parquet twin's


def _garbage_csv(metrics: Path) -> Path:
    csv = metrics / "claims.csv"
    csv.write_text("claim_id,verdict\nall good,agrees\n")
    return csv


def test_plain_verify_checks_every_csv_against_the_manifest_and_its_parquet_twin(bundle, tmp_path):
    copy = Path(shutil.copytree(bundle, tmp_path / "dataset"))
    _garbage_csv(copy / "metrics")
    failed = _lines(verify_bundle(copy))
    assert "metrics/claims.csv: size " in failed or "metrics/claims.csv: sha256 " in failed, failed
    write_manifest(copy)  # the manifest remade to match: the Parquet file's stamp still names the CSV written with it
    failed = _lines(verify_bundle(copy))
    assert "tables: " in failed and "claims.csv: not the CSV file written with claims.parquet" in failed, failed


def test_publish_refuses_a_bundle_whose_csv_is_not_its_parquet_twins(bundle, tmp_path):
    from types import SimpleNamespace

    from muon_repro.hub.publish import publish

    copy = Path(shutil.copytree(bundle, tmp_path / "dataset"))
    _garbage_csv(copy / "metrics")
    write_manifest(copy)
    no_hub = SimpleNamespace(token=False)  # anonymous: any request would fail on this stand-in
    with pytest.raises(ValueError, match="fails .* of the checks of `muon-repro verify`; nothing was sent to the Hub") as refused:
        publish(copy, "test-org/recompute", "1.0.0", dry_run=True, api=no_hub, echo=lambda line: None)
    assert "claims.csv: not the CSV file written with claims.parquet" in str(refused.value)


def test_bundle_refuses_a_csv_that_disagrees_with_its_parquet_table(tmp_path):
    src = tmp_path / "src"
    write_pair(src / "traces")
    stages.analyze([src / "traces"], src / "metrics", workers=1)
    csv = _garbage_csv(src / "metrics")
    sources = _sources(src)
    out = tmp_path / "dataset"
    with pytest.raises(ValueError, match="the tables are not one set, so they are not bundled") as refused:
        build_bundle(sources, BundleMeta(repo_id="test-org/recompute", version="1.0.0", date="2025-06-01"), out)
    assert f"{csv}: not the CSV file written with claims.parquet" in str(refused.value)
    assert not out.exists()


@pytest.mark.slow
def test_a_csv_edited_and_resealed_fails_recompute_naming_it(bundle, tmp_path):
    """The CSV's stamp (its sha256 in the Parquet twin's metadata) rewritten with every generation stamp, croissant.json
    and the manifest: plain verify cannot tell; the CSV no longer holds the Parquet's rows."""
    from muon_repro.tables.stamp import ATTRS_METADATA_KEY, generation_id, stamp_metadata

    copy = Path(shutil.copytree(bundle, tmp_path / "dataset"))
    metrics = copy / "metrics"
    runs_csv = metrics / "runs.csv"
    header, first, *rest = runs_csv.read_text().splitlines(keepends=True)
    runs_csv.write_text(header + first.replace(",2,", ",3,", 1) + "".join(rest))
    assert runs_csv.read_text() != (bundle / "metrics" / "runs.csv").read_text()
    digests = {p.stem: hashlib.sha256(p.read_bytes()).hexdigest() for p in metrics.glob("*.csv")}
    generation = generation_id(digests)
    for parquet in metrics.glob("*.parquet"):
        table = pq.read_table(parquet)
        stamped = dict(table.schema.metadata) | {ATTRS_METADATA_KEY: stamp_metadata(generation, digests[parquet.stem])}
        pq.write_table(table.replace_schema_metadata(stamped), parquet)
        _reseal_croissant(copy, f"metrics/{parquet.name}")
    write_manifest(copy)
    assert verify_bundle(copy).ok, _lines(verify_bundle(copy))
    result = verify_bundle(copy, recompute=True)
    said = "recompute: metrics/runs.csv and metrics/runs.parquet hold different rows: one was changed after they were written"
    assert result.failed == [said]
