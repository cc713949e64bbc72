"""End to end through the fake Hub with the real clients, each in its own process as a user runs them:
``muon-repro bundle/publish``, ``hf download``, ``datasets.load_dataset``, ``muon-repro download``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hub_support import TOKEN, build, hf_command, hub_env, make_sources, muon_repro, run
from support.fake_hub import FakeHub

from muon_repro.dataset.manifest import read_manifest
from muon_repro.tables.files import list_files

REPO = "test-org/muon-traces"
TABLES = ["runs", "steps", "collectives", "comparisons", "claims", "environment"]
LOAD_ALL = """
import json, sys
import datasets
datasets.disable_progress_bars()
out = {}
for config in sys.argv[3:]:
    ds = datasets.load_dataset(sys.argv[1], config, revision=sys.argv[2], split="train")
    out[config] = {"rows": ds.num_rows, "columns": ds.column_names, "data": ds.to_list()}
print(json.dumps(out))
"""


def _same_files(copy: Path, bundle: Path) -> None:
    """``copy`` holds exactly the bundle's files, byte for byte (plus what the Hub and hf add)."""
    files = [p for p in list_files(copy) if p != ".gitattributes" and not p.startswith(".cache/")]
    assert files == list_files(bundle)
    for path in files:
        assert (copy / path).read_bytes() == (bundle / path).read_bytes(), path


@pytest.mark.slow
def test_publish_download_load_and_verify_through_the_hub(tmp_path):
    outputs: list[str] = []

    def ok(done) -> str:
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    src = make_sources(tmp_path / "src")
    with FakeHub() as hub:
        env = hub_env(tmp_path, hub.url)
        b1 = build(src, tmp_path / "b1", repo_id=REPO)  # the bundle command itself: test_hub_bundle.py

        plan = ok(muon_repro(["publish", "--repo-id", REPO, "--version", "1.0.0", "--bundle", str(b1), "--dry-run"], env))
        assert "does not exist yet" in plan and f"Total: {len(read_manifest(b1)) + 1} added" in plan
        assert not hub.store.repos
        ok(muon_repro(["publish", "--repo-id", REPO, "--version", "1.0.0", "--bundle", str(b1)], env))
        repo = hub.get_repo(REPO)
        v1 = repo.tags["v1.0.0"]

        # The plain hf download, as the card shows it.
        d1 = tmp_path / "d1"
        ok(run([hf_command(), "download", REPO, "--repo-type", "dataset", "--revision", "v1.0.0", "--local-dir", str(d1)], env))
        _same_files(d1, b1)

        # Every config loads from the Hub with datasets, with the local tables' rows and columns.
        loaded = json.loads(ok(run([sys.executable, "-c", LOAD_ALL, REPO, "v1.0.0", *TABLES], env)).splitlines()[-1])
        for table in TABLES:
            local = pq.read_table(b1 / "metrics" / f"{table}.parquet")
            assert loaded[table]["rows"] == local.num_rows and loaded[table]["columns"] == local.column_names
            assert loaded[table]["data"] == local.to_pylist()

        # muon-repro download = hf download + verify (checksums, configs, traces).
        d2 = tmp_path / "d2"
        out = ok(muon_repro(["download", "--repo-id", REPO, "--local-dir", str(d2)], env))
        assert "No --revision given: using v1.0.0." in out and "all 14 checks passed" in out
        _same_files(d2, b1)

        # Unchanged: no new commit.
        commits = len(repo.commits)
        out = ok(muon_repro(["publish", "--repo-id", REPO, "--version", "1.0.0", "--bundle", str(b1)], env))
        assert "already published" in out and len(repo.commits) == commits

        # Changed, as a new version: one commit, one tag; v1.0.0 still gives the old files.
        (src["report"] / "report.md").write_text("# Report, second edition\n")
        b2 = build(src, tmp_path / "b2", repo_id=REPO, version="1.1.0")
        ok(muon_repro(["publish", "--repo-id", REPO, "--version", "1.1.0", "--bundle", str(b2)], env))
        assert len(repo.commits) == commits + 1 and repo.tags["v1.1.0"] == repo.branches["main"] != v1
        # Into the Hub cache this time (a snapshot of symlinks), checked there.
        out = ok(muon_repro(["download", "--repo-id", REPO, "--revision", "v1.1.0"], env))
        snapshot = Path(re.search(r"Downloaded \S+ v1.1.0 to (.+)", out)[1])
        assert snapshot.is_relative_to(tmp_path / "hf_home") and "all 14 checks passed" in out
        _same_files(snapshot, b2)
        d4 = tmp_path / "d4"
        ok(run([hf_command(), "download", REPO, "--repo-type", "dataset", "--revision", "v1.0.0", "--local-dir", str(d4)], env))
        _same_files(d4, b1)

    assert not any(TOKEN in text for text in outputs)  # the token is never printed
