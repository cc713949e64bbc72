"""Bad input to the dataset and Hub commands: one line naming the file, option or value, never a traceback.

Offline mode (HF_HUB_OFFLINE) for publish, download, contribute and review; source folders that do not exist;
tables whose trace index does not match the traces bundled; verify of a folder that is no bundle, of a manifest
that is not text and of a bundle holding a symbolic link; publish of a file. Nothing here reaches a Hub: offline
mode refuses every request, and the endpoint is a closed port.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from hub_support import TOKEN, _write_table, build, stub_code
from test_contribute import PROFILE, make_run

from muon_repro.cli import main
from muon_repro.dataset.manifest import MANIFEST_NAME
from muon_repro.dataset.verify import verify_bundle

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
REPO = "test-org/muon-traces"
OFFLINE = f"HF_HUB_OFFLINE is set, so the Hub at {CLOSED} cannot be reached"


def _refused(argv: list[str], capsys) -> str:
    """``muon-repro ARGV`` ends with one line on stderr and exit 2; that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"muon-repro {argv[0]}: error: ") and "Traceback" not in err and err.count("\n") == 1, err
    return err


@pytest.fixture
def closed_hub(monkeypatch):
    """huggingface_hub pointed at a closed port, with a token (no request may reach any Hub)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent

    monkeypatch.setattr(constants, "ENDPOINT", CLOSED)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", CLOSED + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)  # its registry is fetched from the Hub
    monkeypatch.setenv("HF_TOKEN", TOKEN)


@pytest.fixture
def offline(closed_hub, monkeypatch):
    """HF_HUB_OFFLINE=1, as huggingface_hub reads it at import."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# ---------------------------------------------------------------------- 1. offline mode


def test_publish_in_offline_mode_says_so_before_verifying_the_bundle(sources, tmp_path, offline, capsys):
    bundle = build(sources, tmp_path / "bundle", code=None)
    err = _refused(["publish", "--repo-id", REPO, "--version", "1.0.0", "--bundle", str(bundle), "--dry-run"], capsys)
    said = f"{OFFLINE}: unset it to let muon-repro talk to the Hub; no request was sent to the Hub"
    assert err == f"muon-repro publish: error: {said}\n"


@pytest.mark.parametrize("command", ["download", "contribute", "review"])
def test_each_hub_command_in_offline_mode_is_one_line(command, tmp_path, offline, capsys):
    make_run(tmp_path / "runs" / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0")
    argv = {
        "download": ["download", "--repo-id", REPO, "--local-dir", str(tmp_path / "copy")],
        "contribute": ["contribute", "--repo-id", REPO, "--runs", str(tmp_path / "runs"), "--dry-run"],
        "review": ["review", "--repo-id", REPO, "--pr", "1"],
    }[command]
    err = _refused(argv, capsys)
    assert OFFLINE in err and "unset it" in err and err.rstrip().endswith("no request was sent to the Hub")


# ---------------------------------------------------------------------- 2. source folders that are not there


@pytest.mark.parametrize("command", ["bundle", "card"])
@pytest.mark.parametrize("option", ["--code", "--analysis-scripts", "--figures"])
def test_a_source_folder_given_that_does_not_exist_is_refused(command, option, sources, tmp_path, capsys):
    missing = tmp_path / "nowhere"
    out = tmp_path / ("bundle" if command == "bundle" else "card.md")
    argv = [command, "--traces", str(sources["traces"]), "--metrics", str(sources["metrics"]), option, str(missing)]
    err = _refused([*argv, "--date", "2025-06-01", "--out", str(out)], capsys)
    assert f"error: {option} {missing}: does not exist; give the folder" in err
    assert not out.exists()


def test_a_source_folder_given_as_a_file_is_refused(sources, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    err = _refused(["bundle", "--traces", str(afile), "--metrics", str(sources["metrics"]), "--out", str(tmp_path / "b")], capsys)
    assert f"error: --traces {afile}: is a file, not a folder" in err


# ---------------------------------------------------------------------- 3. the trace index and the bundled traces


def _index(metrics: Path, folder: str) -> None:
    """A trace index naming the two ranks of make_sources' run from ``folder`` (what analyze of a folder so named writes)."""
    run = "comparison/muon_dp2_tp1"
    _write_table(
        metrics,
        "trace_files",
        {
            "run": pa.array([run, run]),
            "profile": pa.array(["cpu-2c-gloo"] * 2),
            "group": pa.array(["comparison"] * 2),
            "name": pa.array(["muon_dp2_tp1"] * 2),
            "trial": pa.array([0, 0], pa.int64()),
            "rank": pa.array([0, 1], pa.int64()),
            "path": pa.array([f"{folder}/{run}/rank{r}.json.gz" for r in (0, 1)]),
            "bytes": pa.array([1, 1], pa.int64()),
            "read_by": pa.array(["analysis"] * 2),
        },
    )


def test_bundle_refuses_an_index_of_a_traces_folder_named_otherwise_before_writing(sources, tmp_path):
    tr0 = sources["traces"].rename(sources["traces"].with_name("tr0"))
    _index(sources["metrics"], "tr0")  # analyze tr0 --out metrics: paths from the folder above, tr0/...
    with pytest.raises(ValueError) as refused:
        build({**sources, "traces": tr0}, tmp_path / "bundle", code=None)
    said = str(refused.value)
    assert said.startswith(f"--metrics {sources['metrics']}: its trace index (metrics/trace_files.parquet) does not name")
    assert "names tr0/comparison/muon_dp2_tp1/rank0.json.gz, which is not in the bundle" in said
    assert f"rename {tr0} to {tr0.with_name('traces')}, analyze it there (muon-repro analyze" in said
    assert not (tmp_path / "bundle").exists()


def test_bundle_takes_an_index_that_names_its_traces(sources, tmp_path):
    _index(sources["metrics"], "traces")
    bundle = build(sources, tmp_path / "bundle", code=None)
    assert (bundle / "metrics" / "trace_files.parquet").is_file()


# ---------------------------------------------------------------------- 4. verify's messages name the file


def test_verify_of_an_empty_folder_names_each_missing_file_and_passes_nothing(tmp_path):
    result = verify_bundle(tmp_path)
    missing = "README.md is missing: a bundle has one; download the dataset again, or rebuild it (muon-repro bundle)"
    assert missing in result.failed
    assert any(line.startswith("CITATION.cff is missing") for line in result.failed)
    assert not any("Errno" in line for line in result.failed), result.failed
    assert result.passed == []  # no "ok source" for a folder that holds nothing


def test_verify_names_a_manifest_and_a_card_that_are_not_utf8(tmp_path):
    (tmp_path / MANIFEST_NAME).write_bytes(b"\xc4\xc4 not text\n")
    (tmp_path / "README.md").write_bytes(b"---\n\xc4\n---\n")
    failed = verify_bundle(tmp_path).failed
    assert any(line.startswith(f"{tmp_path / MANIFEST_NAME}: not UTF-8 text (") for line in failed), failed
    assert any(line.startswith("README.md: not UTF-8 text (") for line in failed), failed


# ---------------------------------------------------------------------- 5. symbolic links in a bundle


def test_verify_refuses_a_link_by_name_without_reading_it(sources, tmp_path):
    bundle = build(sources, tmp_path / "bundle", code=None)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:SECRET\n")
    (bundle / "traces" / "link.json").symlink_to(secret)
    result = verify_bundle(bundle)
    assert result.failed == [
        f"traces/link.json: a symbolic link (to {secret}), not a file: a bundle holds its own files, so it is not read and "
        "no other check is run; replace it with what it points at, or remove it"
    ]
    assert result.passed == []


def test_verify_follows_a_hub_cache_snapshot_to_its_blobs(sources, tmp_path):
    """A snapshot in the Hub cache is a tree of links to the repository's blobs: those are its files (its documents'
    links followed as the dataset's paths, not into the blobs)."""
    bundle = build(sources, tmp_path / "bundle", code=stub_code(tmp_path / "code"))
    repo = tmp_path / "hub" / "datasets--test-org--muon-traces"
    snapshot, blobs = repo / "snapshots" / ("c" * 40), repo / "blobs"
    blobs.mkdir(parents=True)
    for i, file in enumerate(sorted(p for p in bundle.rglob("*") if p.is_file())):
        rel = file.relative_to(bundle)
        shutil.copyfile(file, blobs / f"blob{i}")
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / rel).symlink_to(Path(*[".."] * len(rel.parts), "..", "blobs", f"blob{i}"))
    result = verify_bundle(snapshot)
    assert result.ok, result.failed


def test_a_hub_snapshots_link_to_a_file_outside_its_blobs_is_refused(tmp_path):
    """In a Hub cache snapshot, a link to the repository's own blobs is a file of the dataset; a link to any other
    file (here one beside the cache) is named, as in any bundle."""
    from muon_repro.dataset.verify import bundle_links

    repo = tmp_path / "hub" / "datasets--o--n"
    snapshot, blobs = repo / "snapshots" / ("c" * 40), repo / "blobs"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (blobs / "blob0").write_text("data")
    (tmp_path / "secret.txt").write_text("SECRET")
    (snapshot / "README.md").symlink_to(Path("..", "..", "blobs", "blob0"))
    (snapshot / "notes.txt").symlink_to(tmp_path / "secret.txt")
    assert bundle_links(snapshot) == [("notes.txt", str(tmp_path / "secret.txt"))]


# ---------------------------------------------------------------------- 6. publish of a file


def test_publish_of_a_file_says_it_is_a_file(tmp_path, closed_hub, capsys):
    afile = tmp_path / "some_file.txt"
    afile.write_text("not a bundle\n")
    err = _refused(["publish", "--repo-id", REPO, "--version", "1.0.0", "--bundle", str(afile), "--dry-run"], capsys)
    assert err.startswith(f"muon-repro publish: error: {afile}: a file, not a bundle folder; give --bundle the folder")
