"""muon_repro.hub.remote: reading a dataset repository at one revision, several files at a time.

Against the fake Hub on 127.0.0.1 (tests/hub_support.py), never the real one.
"""

from __future__ import annotations

import pytest
from huggingface_hub.errors import EntryNotFoundError

from muon_repro.hub import remote

REPO = "test-org/remote-data"


@pytest.fixture
def repo_head(fake_hub):
    fake_hub.store.create_repo("dataset", REPO)
    files = {f"traces/p/g/run[{i}]/trial0/environment.json": f'{{"run": {i}}}'.encode() for i in range(24)}
    files["traces/p/g/other/trial0/environment.json"] = b"{}"  # matched by no wanted path: not downloaded
    return fake_hub.push(REPO, files), files


def test_every_wanted_file_arrives_once_with_its_bytes_and_nothing_else(hub_api, repo_head, tmp_path):
    head, files = repo_head
    wanted = [p for p in files if "[" in p]  # '[' is a glob character: exact paths must not be read as patterns
    root = remote.download(hub_api, REPO, wanted + wanted[:3], head, tmp_path / "d", workers=4)
    got = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json"))
    assert got == sorted(wanted)
    assert all((root / p).read_bytes() == files[p] for p in wanted)


def test_a_missing_file_fails_the_download(hub_api, repo_head, tmp_path):
    head, files = repo_head
    with pytest.raises(EntryNotFoundError):
        remote.download(hub_api, REPO, [*files, "traces/p/g/none/trial0/environment.json"], head, tmp_path / "d", workers=4)


def test_workers_must_be_a_positive_count(hub_api, repo_head, tmp_path):
    head, files = repo_head
    with pytest.raises(ValueError, match="workers"):
        remote.download(hub_api, REPO, list(files), head, tmp_path / "d", workers=0)


def test_the_download_benchmark_prints_both_timings(capsys):
    from huggingface_hub import constants

    from tools.download_benchmark import main as benchmark

    settings = constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE
    assert benchmark(["--files", "6", "--delay-ms", "0"]) == 0
    assert (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE) == settings  # huggingface_hub's settings are given back
    out = capsys.readouterr().out
    assert out.startswith("6 files, every request held 0 ms: 1 worker ") and " 8 workers " in out
