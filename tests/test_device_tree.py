"""tools/device_tree: the dataset's artifacts held beside the checkout while a device call sends it, then put back."""

from __future__ import annotations

import subprocess

import pytest

from tools import device_tree
from tools.device_tree import held_dir, hold, main, restore, sent_bytes

pytestmark = pytest.mark.slow  # each test runs git


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "checkout"
    for rel, data in {
        "muon_repro/x.py": b"x = 1\n",
        "traces/p/run/trial0/metrics.json": b"{}" * 500,
        "metrics/runs.csv": b"a,b\n1,2\n",
        "report/report.md": b"# r\n",
        ".gitignore": b"/.whl/\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    (root / ".whl").mkdir()
    (root / ".whl" / "w.whl").write_bytes(b"w" * 300)
    return root


def test_hold_sends_the_package_alone_and_restore_brings_back_the_commit(repo):
    before = sent_bytes(repo, [])
    done = hold(repo, [".whl"])
    assert not (repo / "traces").exists() and not (repo / "metrics").exists() and not (repo / "report").exists()
    assert (held_dir(repo) / "traces" / "p" / "run" / "trial0" / "metrics.json").read_bytes() == b"{}" * 500
    slim = sent_bytes(repo, [])
    assert slim == len(b"x = 1\n") + len(b"/.whl/\n") and before == slim + 1000 + 8 + 4
    assert sent_bytes(repo, [".whl"]) == slim + 300 and f"sends {(slim + 300) / 2**20:.1f} MiB" in done[1]
    assert restore(repo) == [f"moved metrics, report, traces back from {held_dir(repo)}"]
    assert not held_dir(repo).exists() and sent_bytes(repo, []) == before
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    assert restore(repo) == [f"nothing held in {held_dir(repo)}"]


@pytest.mark.parametrize("change", ["edit", "new file"])
def test_artifacts_with_uncommitted_changes_are_not_moved(repo, change):
    if change == "edit":
        (repo / "metrics" / "runs.csv").write_text("changed\n")
    else:
        (repo / "traces" / "p" / "new.json").write_text("{}")
    with pytest.raises(ValueError, match="changes not committed.*commit or discard them first"):
        hold(repo, [])
    assert (repo / "traces").is_dir() and (repo / "metrics").is_dir() and not held_dir(repo).exists()


def test_a_second_hold_and_a_restore_over_a_new_folder_are_refused(repo):
    hold(repo, [])
    with pytest.raises(ValueError, match="an earlier hold's artifacts are still there"):
        hold(repo, [])
    (repo / "metrics").mkdir()  # regenerated while held
    with pytest.raises(ValueError, match="metrics exist\\(s\\) again in the checkout"):
        restore(repo)
    assert (held_dir(repo) / "metrics" / "runs.csv").is_file() and (held_dir(repo) / "traces").is_dir()
    (repo / "metrics").rmdir()
    restore(repo)
    assert (repo / "metrics" / "runs.csv").read_text() == "a,b\n1,2\n"


def test_too_large_after_holding_says_so_and_restore_undoes_it(repo, monkeypatch, capsys):
    monkeypatch.setattr(device_tree, "DEVICE_TREE_LIMIT", 100)
    assert main(["hold", "--repo", str(repo), "--carry", ".whl"]) == 1
    said = capsys.readouterr().err
    assert "over its 9.53674e-05 MiB: carry less" in said and "`restore` puts the artifacts back" in said
    assert main(["restore", "--repo", str(repo)]) == 0 and (repo / "traces").is_dir()
    assert main(["size", "--repo", str(repo), "--carry", "nope"]) == 1
    assert "--carry nope: no such path" in capsys.readouterr().err
