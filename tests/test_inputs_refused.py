"""Inputs an adversarial audit of the readers found mishandled, each now refused or read as not recorded, by name:
a pipe named like a file (it hung every reader), a trace whose rank or world size no run has (it failed every
table), a state whose kinds sum past int64, a profile that is no text, a manifest path that is no bundle's, and an
HF_ENDPOINT carrying a token (printed in clear)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from support.bounded import bounded

from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.reader import read_trace
from muon_repro.dataset.manifest import parse_manifest
from muon_repro.hardware import profile_from_environment
from muon_repro.hub.download import _commit_of
from muon_repro.hub.errors import offline_refusal, shown_endpoint
from muon_repro.hub.publish import PublishError, hub_step
from muon_repro.run_records import MAX_WORLD_SIZE, RankMetrics
from muon_repro.rundir import SideFileError, load_json
from muon_repro.tables.files import NotARegularFile, open_regular, sha256_file
from muon_repro.terminal import redact

SECRET = "hf_SECRETtoken12345"
PIPE_WAIT_S = 10  # a reader that has not refused a pipe by then is waiting on it


# ---------------------------------------------------------------- a pipe named like a file


@pytest.fixture
def pipe(tmp_path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this system")
    path = tmp_path / "trial0" / "config.json"
    path.parent.mkdir()
    os.mkfifo(path)
    return path


def test_a_pipe_named_like_a_side_file_is_refused_at_once_by_name(pipe):
    _, error, seconds = bounded(lambda: load_json(pipe), PIPE_WAIT_S)
    assert isinstance(error, SideFileError) and str(pipe) in str(error) and "not a regular file" in str(error)
    assert seconds < 5


def test_every_file_reader_refuses_a_pipe_instead_of_waiting(pipe):
    _, error, _ = bounded(lambda: sha256_file(pipe), PIPE_WAIT_S)  # what verify hashes
    assert isinstance(error, NotARegularFile) and error.filename == str(pipe)
    value, error, _ = bounded(lambda: _commit_of(pipe), PIPE_WAIT_S)  # a download's metadata: read as none
    assert value is None and error is None
    _, error, _ = bounded(lambda: read_trace(pipe), PIPE_WAIT_S)
    assert isinstance(error, TraceError) and "not a regular file" in str(error)


def test_a_regular_file_reads_as_with_open(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("two\nlines\n")
    with open_regular(path, "r", encoding="utf-8") as f:
        assert f.read() == "two\nlines\n"
    with open_regular(path) as f:
        assert f.read() == b"two\nlines\n"


# ---------------------------------------------------------------- numbers no run has


@pytest.mark.parametrize(
    "field, value", [("rank", 10**30), ("rank", MAX_WORLD_SIZE), ("world_size", 10**30), ("world_size", MAX_WORLD_SIZE + 1)]
)
def test_a_trace_whose_rank_or_world_size_no_run_has_is_refused_by_name(tmp_path, field, value):
    info = {"rank": 0, "world_size": 2} | {field: value}
    events = [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 1, "pid": 0, "tid": 0, "cat": "cpu_op"}]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"distributedInfo": info, "traceEvents": events}).encode()))
    with pytest.raises(TraceError, match=rf"distributedInfo\.{field} is {value}, past the 1,024 ranks") as caught:
        read_trace(path)
    assert str(path) in str(caught.value)


def test_the_largest_rank_a_run_may_have_is_read():
    trace_meta_ok = {"rank": MAX_WORLD_SIZE - 1, "world_size": MAX_WORLD_SIZE}
    from muon_repro.analysis.reader import _trace_meta

    meta = _trace_meta(Path("rank1023.json"), {"distributedInfo": trace_meta_ok}, None, 0)
    assert meta.rank == MAX_WORLD_SIZE - 1 and meta.world_size == MAX_WORLD_SIZE


def test_state_kinds_in_range_whose_sum_is_not_read_as_not_recorded():
    big = RankMetrics.from_dict({"rank": 0, "state_bytes": {"muon": 2**62, "adamw": 2**62}})
    assert big.state_bytes == {"muon": 2**62, "adamw": 2**62} and big.total_state_bytes is None
    fine = RankMetrics.from_dict({"rank": 0, "state_bytes": {"muon": 3, "adamw": 4}})
    assert fine.total_state_bytes == 7


@pytest.mark.parametrize("profile", [True, 1.5, 7, ["cpu-2c-gloo"]])
def test_a_profile_that_is_no_text_is_refused_naming_the_field(profile):
    with pytest.raises(ValueError, match=r"environment.json's profile is .*, not a profile id"):
        profile_from_environment({"profile": profile, "backend": "gloo"})


def test_a_manifest_path_outside_a_bundle_names_the_manifest_and_its_line():
    digest = "0" * 64
    text = f"# header\n{digest}  3  a.txt\n{digest}  4  ../../etc/passwd\n"
    with pytest.raises(ValueError, match=r"^bundle/MANIFEST.sha256, line 3: the path '../../etc/passwd' is no file"):
        parse_manifest(text, "bundle/MANIFEST.sha256")


# ---------------------------------------------------------------- a token in HF_ENDPOINT


@pytest.mark.parametrize(
    "url", [f"http://user:{SECRET}@127.0.0.1:9", f"http://{SECRET}@127.0.0.1:9/", f"http://127.0.0.1:9/?token={SECRET}"]
)
def test_a_hub_address_is_shown_without_its_credentials(url):
    assert shown_endpoint(url) == "http://127.0.0.1:9"
    assert SECRET not in offline_refusal(url)


def test_a_hub_that_cannot_be_reached_is_named_without_the_token_in_its_address():
    import httpx2

    url = f"http://user:{SECRET}@127.0.0.1:9"
    with pytest.raises(PublishError) as caught:
        with hub_step(url, 1.0, "reading", "nothing was changed"):
            raise httpx2.ConnectError(f"cannot connect to {url}/api/datasets")
    said = str(caught.value)
    assert SECRET not in said and said.startswith("the Hub at http://127.0.0.1:9 could not be reached")


def test_redact_removes_a_urls_credentials_and_keeps_the_rest():
    assert redact("GET http://me:pw123@hub.example/api failed") == "GET http://[redacted]@hub.example/api failed"
    assert redact("see https://huggingface.co/datasets/x") == "see https://huggingface.co/datasets/x"
