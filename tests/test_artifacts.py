"""The committed reference artifacts agree with each other, and `muon-repro run` works end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.study.sources import STUDY_PROFILE
from muon_repro.tables.schemas import TABLE_NAMES as TABLES

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_committed_metrics_equal_the_analysis_of_the_committed_traces(monkeypatch):
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.table_set import tables_of
    from muon_repro.tables.io import read_table

    assert list((REPO / "traces").glob("*/*/*/trial*/rank0.json.gz")), "no committed traces: run `muon-repro run`"
    monkeypatch.chdir(REPO)  # the tables record paths as the analysis saw them: traces/<profile>/<group>/<name>
    analysis = analyze_paths([Path("traces")])
    assert not analysis.failures
    fresh = tables_of(analysis)
    for name in TABLES:
        committed = read_table(REPO / "metrics" / f"{name}.parquet", name)
        pd.testing.assert_frame_equal(committed, fresh[name].reset_index(drop=True), obj=name)


def test_committed_dataset_is_in_the_profile_layout_each_run_under_its_own_profile():
    from muon_repro.hardware import profile_from_environment
    from muon_repro.migrate_layout import plan_migration
    from muon_repro.rundir import convergence_profile

    traces = REPO / "traces"
    assert plan_migration(traces) == [], "committed runs left in the old layout: muon-repro migrate-layout --traces traces"
    profiles = {
        path: profile_from_environment(json.loads(path.read_text())) for path in traces.glob("*/*/*/trial*/environment.json")
    }
    profiles |= {
        path: convergence_profile(json.loads(path.read_text())) for path in traces.glob("*/convergence/*/convergence.json")
    }
    groups = {path.relative_to(traces).parts[1] for path in profiles}
    assert {"comparison", "distributed_muon", "layout_ablation", "overlap", "convergence"} <= groups, groups
    for path, profile in profiles.items():
        assert profile == path.relative_to(traces).parts[0], path


@pytest.mark.parametrize("folder, writer", [("figures", "muon-repro figures"), ("report", "muon-repro report")])
def test_each_committed_output_folder_lists_the_files_its_writer_put_there(folder, writer):
    """The hidden list is committed with the files, so the first regeneration in a fresh clone removes a figure the
    code no longer draws instead of leaving it beside the new set, published."""
    from muon_repro.tables.files import files_manifest

    manifest = REPO / folder / files_manifest(writer)
    listed = [line for line in manifest.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    on_disk = sorted(
        p.relative_to(REPO / folder).as_posix()
        for p in (REPO / folder).rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(REPO / folder).parts)
    )
    assert listed == on_disk


@pytest.mark.slow
def test_committed_bundle_rebuilds_to_the_committed_manifest_and_verifies(tmp_path, monkeypatch):
    from muon_repro.cli import main
    from muon_repro.dataset.meta import release_date
    from muon_repro.dataset.verify import verify_bundle

    monkeypatch.chdir(REPO)
    out = tmp_path / "dataset"
    assert main(["bundle", "--out", str(out), "--date", release_date(Path("metrics"))]) == 0
    assert (out / "MANIFEST.sha256").read_text() == (REPO / "MANIFEST.sha256").read_text()
    assert (out / "README.md").read_text() == (REPO / "dataset_card.md").read_text()
    result = verify_bundle(out)
    assert not result.failed, result.failed


@pytest.mark.slow
def test_run_end_to_end_then_again_without_rerecording(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "muon_repro",
        "run",
        "--scale",
        "tiny",
        "--configs",
        "comparison",
        "--trials",
        "2",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert first.returncode == 0, first.stderr[-3000:]
    for artifact in (
        "metrics/runs.parquet",
        "metrics/claims.parquet",
        "report/report.md",
        "report/report.pdf",
        "dataset_card.md",
        "MANIFEST.sha256",
        "dist/dataset/MANIFEST.sha256",
    ):
        assert (tmp_path / artifact).is_file(), artifact
    assert "Claims, per hardware profile" in first.stdout and "all" in first.stdout and "checks passed" in first.stdout
    traces = sorted((tmp_path / "traces").rglob("rank*.json.gz"))
    assert len(traces) == 2 * 1 * 4  # 2 configurations x 1 traced trial (the default; the second is timed only) x 4 ranks
    runs = pd.read_parquet(tmp_path / "metrics" / "runs.parquet")
    assert list(runs["rounds"]) == [2, 2] and list(runs["trials"]) == [1, 1]
    # the original study's published traces were filed beside them: its claims are judged on the runs they were made on
    assert "its 18 published traces filed in" in first.stdout
    claims, committed = (pd.read_parquet(root / "metrics" / "claims.parquet") for root in (tmp_path, REPO))
    columns = ["claim_id", "measured_value", "measured_low", "measured_high", "verdict"]
    study, study_committed = (c.loc[c["profile"] == STUDY_PROFILE, columns].reset_index(drop=True) for c in (claims, committed))
    assert len(study) and study.equals(study_committed)  # the same traces: the committed table's rows
    stamps = [p.stat().st_mtime_ns for p in traces]

    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert second.returncode == 0, second.stderr[-3000:]
    statuses = re.findall(r"^\S+\s+\d+\s+(recorded|skipped)\s", second.stdout, re.M)  # the bench table's status column
    assert statuses == ["skipped"] * 4
    assert [p.stat().st_mtime_ns for p in traces] == stamps
