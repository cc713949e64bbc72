"""Hostile pull requests and runs folders against ``review`` and ``contribute``, on the fake Hub (tests/hub_support.py).

Paths and sizes are refused from the pull request's file list before anything is downloaded; names
print escaped; the Hub's 404s are one sentence; Ctrl-C is one line and exit 130.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from hub_support import TOKEN
from hub_support import hub_env as subprocess_env
from support.pids import as_from_a_terminal
from support.run_links import link_outside
from test_contribute import PROFILE, REPO, _entries, folder_files, make_run, publish_main

from muon_repro.cli import main
from muon_repro.contrib.limits import MAX_FILE_BYTES
from muon_repro.dataset.manifest import MANIFEST_NAME, manifest_lines

DEST = f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"


@pytest.fixture
def hub_env(hub_api, monkeypatch):
    """The CLI's own HfApi() on the fake Hub (hub_api patched the endpoint), with a token from HF_TOKEN."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return hub_api


def open_pr(fake_hub, head: str, files: dict[str, bytes], title: str = "runs") -> None:
    """A pull request adding ``files`` with their manifest lines, straight into the fake Hub's store (as a
    stranger's client could send paths that huggingface_hub's own client would refuse to)."""
    from support.fake_hub_store import Blob

    repo = fake_hub.get_repo(REPO)
    pr = fake_hub.store.open_pull_request(repo, "main", repo.commits[head], title, "", "stranger")
    manifest = fake_hub.files(REPO)[MANIFEST_NAME] + manifest_lines(_entries(files)).encode()
    changes = {p: Blob(d) for p, d in {**files, MANIFEST_NAME: manifest}.items()}
    pr.commits.append(fake_hub.store.commit(repo, pr.ref, changes, [], title, "").oid)


def _fetched(fake_hub, since: int) -> list[str]:
    return [p for m, p in fake_hub.requests[since:] if "/resolve/" in p]


def test_hostile_paths_are_refused_escaped_and_never_downloaded(tmp_path, fake_hub, hub_env, capsys):
    head = publish_main(hub_env, {"README.md": b"# data\n"})
    good = folder_files(make_run(tmp_path / "run"), DEST)
    hostile = {
        "traces/../../outside.txt": b"x",
        "/etc/passwd": b"x",
        "traces\\a\\b.txt": b"x",
        f"traces/{PROFILE}/mu\u043en/x/trial0/log.txt": b"x",  # a Cyrillic o
        f"traces/{PROFILE}/comparison/\x1b[32mChecks passed\x1b[0m/trial0/log.txt": b"x",
        f"traces/{PROFILE}/comparison/a\nChecks passed: 9 file(s)/trial0/log.txt": b"x",
    }
    open_pr(fake_hub, head, {**good, **hostile}, title="\x1b[2Jruns\nChecks passed")
    since = len(fake_hub.requests)

    assert main(["review", "--repo-id", REPO, "--pr", "1"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and out.isascii()
    assert not [ln for ln in out.splitlines() if ln.startswith("Checks passed")]
    assert "'\\x1b[2Jruns\\nChecks passed'" in out  # the title, escaped
    # one problem per hostile path (and the manifest, which lists paths no bundle may hold)
    assert int(out.split(" check(s) FAILED")[0].rsplit("\n", 1)[-1]) >= len(hostile)
    assert "traces/../../outside.txt: added outside a run folder" in out
    assert "the group 'mu\\u043en' is not a valid name" in out
    assert "'\\x1b[32mChecks passed\\x1b[0m' is not a valid name" in out
    fetched = _fetched(fake_hub, since)
    assert not [f for f in fetched for p in hostile if f.endswith(p)]  # none of them was downloaded
    assert [f for f in fetched if f.endswith(f"{DEST}/config.json")]  # the valid run was, and checked


def test_limits_are_checked_before_any_download(tmp_path, fake_hub, hub_env, capsys):
    head = publish_main(hub_env, {"README.md": b"# data\n"})
    files = folder_files(make_run(tmp_path / "run"), DEST)
    files[f"{DEST}/config.json"] = json.dumps({"command": "x" * MAX_FILE_BYTES["config.json"]}).encode()
    open_pr(fake_hub, head, files)

    since = len(fake_hub.requests)
    assert main(["review", "--repo-id", REPO, "--pr", "1", "--max-files", "3"]) == 1
    out = capsys.readouterr().out
    assert "the pull request adds 6 files, more than the 3 a review takes (--max-files)" in out
    assert "nothing was downloaded" in out and _fetched(fake_hub, since) == []

    since = len(fake_hub.requests)
    assert main(["review", "--repo-id", REPO, "--pr", "1"]) == 1
    out = capsys.readouterr().out
    size = len(files[f"{DEST}/config.json"])
    assert f"{DEST}/config.json: 65.6 kB ({size} bytes), more than the 64 KiB a file of its kind may be" in out
    fetched = _fetched(fake_hub, since)
    assert not [f for f in fetched if f.endswith("/config.json")] and [f for f in fetched if f.endswith("/log.txt")]


def test_a_missing_pull_request_or_repository_is_one_sentence(fake_hub, hub_env, capsys):
    publish_main(hub_env, {"README.md": b"# data\n"})
    assert main(["review", "--repo-id", REPO, "--pr", "99"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"muon-repro review: error: {REPO} has no pull request #99 on {fake_hub.url}: check --pr against its list "
        f"({fake_hub.url}/datasets/{REPO}/discussions)"
    )
    assert main(["review", "--repo-id", "test-org/nothing", "--pr", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"muon-repro review: error: dataset repository test-org/nothing does not exist on {fake_hub.url}")
    # no raw HTTP status in the sentence (the fake Hub's port, such as 40425, may itself hold "404")
    assert "404" not in err.replace(fake_hub.url, "") and len(err.splitlines()) == 1


def test_contribute_to_a_missing_repository_or_branch_is_one_sentence(tmp_path, fake_hub, hub_env, capsys):
    runs = tmp_path / "runs"
    make_run(runs / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0")
    assert main(["contribute", "--repo-id", "test-org/nothing", "--runs", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("muon-repro contribute: error: dataset repository test-org/nothing does not exist on ")
    assert "or it is private and the token (from HF_TOKEN) cannot read it" in err
    publish_main(hub_env, {"README.md": b"# data\n"})
    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs), "--revision", "nope"]) == 2
    assert capsys.readouterr().err.strip() == f"muon-repro contribute: error: {REPO} has no branch nope: check --revision " + (
        "(main, or another branch)"
    )


def test_contribute_refuses_a_symlinked_file_before_any_request(tmp_path, fake_hub, hub_env, capsys):
    publish_main(hub_env, {"README.md": b"# data\n"})
    runs = tmp_path / "runs"
    run = make_run(runs / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0")
    secret = link_outside(run / "log.txt", tmp_path / "secret.txt")
    since = len(fake_hub.requests)

    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'log.txt'}: is a symbolic link (to {secret})" in err and "nothing was sent to the Hub" in err
    assert fake_hub.requests[since:] == [] and not fake_hub.get_repo(REPO).pull_requests


def _interrupted(args: list[str], env: dict[str, str], fake_hub, stalled: str) -> subprocess.CompletedProcess:
    """Run ``muon-repro args`` in a child, Ctrl-C it once the fake Hub holds a request matching ``stalled``."""
    fake_hub.stop_answering(path_regex=stalled)
    seen = len(fake_hub.requests)
    child = subprocess.Popen(
        [sys.executable, "-m", "muon_repro", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=as_from_a_terminal,
    )
    ends = time.monotonic() + 60
    while not any(stalled in p for _, p in fake_hub.requests[seen:]) and time.monotonic() < ends:
        time.sleep(0.05)
    time.sleep(0.2)
    started = time.monotonic()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    fake_hub.resume_answering()
    assert time.monotonic() - started < 5  # not held until the stalled request times out
    return subprocess.CompletedProcess(args, child.returncode, out.decode(), err.decode())


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_exit_130(tmp_path, fake_hub, hub_api):
    head = publish_main(hub_api, {"README.md": b"# data\n"})
    open_pr(fake_hub, head, folder_files(make_run(tmp_path / "run"), DEST))
    env = subprocess_env(tmp_path, fake_hub.url)

    done = _interrupted(["review", "--repo-id", REPO, "--pr", "1", "--timeout", "60"], env, fake_hub, "/resolve/")
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "muon-repro review: interrupted; nothing was changed on the Hub (a review only reads it)"

    runs = tmp_path / "runs"
    make_run(runs / PROFILE / "comparison" / "muon_dp4_tp1" / "trial0", name="muon_dp4_tp1")
    done = _interrupted(["contribute", "--repo-id", REPO, "--runs", str(runs), "--timeout", "60"], env, fake_hub, "/commit/")
    assert done.returncode == 130, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("muon-repro contribute: interrupted; a pull request may or may not have")
    assert "(stopped while uploading 6 files" in lines[0]
