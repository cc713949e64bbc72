"""``muon-repro publish``: the plan, one commit with parent_commit, version tags that never move (fake Hub, in process)."""

from __future__ import annotations

import hashlib
import re

import pytest
from hub_support import build, muon_repro
from huggingface_hub.utils.sha import git_hash

from muon_repro.dataset.manifest import FileEntry
from muon_repro.hub.plan import RemoteFile, compute_plan, format_plan
from muon_repro.hub.publish import PublishError, publish

REPO = "test-org/muon-traces"


def _commits(hub) -> int:
    return len(hub.get_repo(REPO).commits)


def _publish(bundle, api, version="1.0.0", **kwargs):
    lines: list[str] = []
    result = publish(bundle, REPO, version, api=api, echo=lines.append, **kwargs)
    return result, "\n".join(lines)


# ---------------------------------------------------------------------- the plan, alone


def test_plan_compares_git_blob_ids_and_lfs_sha256(tmp_path):
    files = {
        "same.txt": b"same",
        "edited.txt": b"new text",
        "same.parquet": b"PAR1 same",
        "edited.parquet": b"PAR1 v2",
        "new.txt": b"n",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    local = [FileEntry(n, len(d), hashlib.sha256(d).hexdigest()) for n, d in files.items()]

    def lfs(name: str, data: bytes) -> RemoteFile:
        return RemoteFile(name, len(data), "pointer-blob-id", hashlib.sha256(data).hexdigest())

    remote = {
        ".gitattributes": RemoteFile(".gitattributes", 10, "x", None),  # the Hub's own file: kept
        "same.txt": RemoteFile("same.txt", 4, git_hash(b"same"), None),
        "edited.txt": RemoteFile("edited.txt", 8, git_hash(b"old text"), None),  # same size, other content
        "same.parquet": lfs("same.parquet", b"PAR1 same"),
        "edited.parquet": lfs("edited.parquet", b"PAR1 v1"),
        "gone.txt": RemoteFile("gone.txt", 3, git_hash(b"old"), None),
    }
    plan = compute_plan(tmp_path, local, remote, "a" * 40)
    assert {i.path: i.action for i in plan.items} == {
        "new.txt": "add",
        "edited.parquet": "change",
        "edited.txt": "change",
        "gone.txt": "delete",
        "same.parquet": "unchanged",
        "same.txt": "unchanged",
    }
    assert plan.has_changes and plan.upload_bytes == 1 + 7 + 8
    text = format_plan(plan, REPO, "v1.0.0")
    assert "against main at aaaaaaaaaaaa" in text
    assert "Total: 1 added (1 B), 2 changed (15 B), 1 deleted (3 B), 2 unchanged (13 B); 16 B to upload." in text


# ---------------------------------------------------------------------- publishing


def test_publish_then_unchanged_then_new_version(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    bundle = build(sources, tmp_path / "b1")
    result, out = _publish(bundle, hub_api, dry_run=True)
    assert "does not exist yet" in out and "Dry run: nothing was changed" in out
    assert all(i.action == "add" for i in result.plan.items)
    assert not any(m != "GET" for m, _ in fake_hub.requests)  # a dry run only reads
    assert not fake_hub.store.repos

    result, out = _publish(bundle, hub_api)
    assert result.committed and result.tagged
    repo = fake_hub.get_repo(REPO)
    assert repo.tags == {"v1.0.0": repo.branches["main"]} and _commits(fake_hub) == 2  # initial + ours
    remote = fake_hub.files(REPO, "v1.0.0")
    assert {p: remote[p] for p in remote if p != ".gitattributes"} == {
        p.relative_to(bundle).as_posix(): p.read_bytes() for p in bundle.rglob("*") if p.is_file()
    }

    # The same bundle again: nothing to commit, nothing to tag, success.
    result, out = _publish(bundle, hub_api)
    assert not result.committed and not result.tagged and "already published" in out
    assert _commits(fake_hub) == 2
    # The same files as a new version: no commit, a second tag on the same commit.
    same = build(sources, tmp_path / "b1b", version="1.0.1")
    result, out = _publish(same, hub_api, version="1.0.1")
    assert result.committed  # the card, CITATION.cff and croissant.json name the version, so they changed
    changed = {i.path for i in result.plan.items if i.action == "change"}
    assert changed == {"README.md", "CITATION.cff", "croissant.json", "MANIFEST.sha256"}

    # A changed bundle as a new version: one commit, one tag; the old tag still gives the old files.
    (sources["report"] / "report.md").write_text("# Report, second edition\n")
    (sources["figures"] / "comm_time.svg").unlink()
    changed = build(sources, tmp_path / "b2", version="1.1.0")
    before = _commits(fake_hub)
    result, out = _publish(changed, hub_api, version="1.1.0")
    assert result.committed and result.tagged and _commits(fake_hub) == before + 1
    assert "delete     figures/ (1 file)" in out and "change     report/ (1 file)" in out
    assert fake_hub.files(REPO, "v1.1.0")["report/report.md"] == b"# Report, second edition\n"
    assert "figures/comm_time.svg" not in fake_hub.files(REPO, "v1.1.0")
    assert fake_hub.files(REPO, "v1.0.0")["report/report.md"] == (bundle / "report" / "report.md").read_bytes()
    assert set(fake_hub.get_repo(REPO).tags) == {"v1.0.0", "v1.0.1", "v1.1.0"}


def test_existing_tag_is_an_error(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    _publish(build(sources, tmp_path / "b1"), hub_api)
    head = fake_hub.get_repo(REPO).branches["main"]
    (sources["report"] / "report.md").write_text("# changed\n")
    with pytest.raises(PublishError, match="tag v1.0.0 already exists .* versions never move"):
        _publish(build(sources, tmp_path / "b2"), hub_api)
    repo = fake_hub.get_repo(REPO)
    assert repo.branches["main"] == head and repo.tags["v1.0.0"] == head


def test_concurrent_push_between_plan_and_commit(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    _publish(build(sources, tmp_path / "b1"), hub_api)
    (sources["report"] / "report.md").write_text("# changed\n")
    bundle = build(sources, tmp_path / "b2", version="1.1.0")
    pushed: list[str] = []
    # Someone else pushes right after our plan was made, before our commit arrives.
    fake_hub.add_hook("POST", rf"/api/datasets/{REPO}/commit/", lambda: pushed.append(fake_hub.push(REPO, {"theirs.txt": b"x"})))
    with pytest.raises(
        PublishError,
        match=r"main moved from \w+ to \w+ while publishing \(someone else pushed\); nothing was committed or tagged",
    ):
        _publish(bundle, hub_api, version="1.1.0")
    repo = fake_hub.get_repo(REPO)
    assert repo.branches["main"] == pushed[0]  # their commit stands, ours was not made
    assert set(repo.tags) == {"v1.0.0"}
    assert b"# changed\n" not in fake_hub.files(REPO).values()


def test_create_pr_commits_to_a_pull_request_and_tags_after_merge(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    _publish(build(sources, tmp_path / "b1"), hub_api)
    (sources["report"] / "report.md").write_text("# changed\n")
    bundle = build(sources, tmp_path / "b2", version="1.1.0")
    result, out = _publish(bundle, hub_api, version="1.1.0", create_pr=True)
    assert result.committed and not result.tagged and result.pr_url.endswith("/discussions/1")
    assert "run publish again with --version 1.1.0" in out
    assert fake_hub.files(REPO, "refs/pr/1")["report/report.md"] == b"# changed\n"
    assert set(fake_hub.get_repo(REPO).tags) == {"v1.0.0"}
    # "Merge" it, then publish again: no changes, so the head is tagged without a commit.
    repo = fake_hub.get_repo(REPO)
    repo.branches["main"] = repo.branches["refs/pr/1"]
    result, _ = _publish(bundle, hub_api, version="1.1.0")
    assert not result.committed and result.tagged and repo.tags["v1.1.0"] == repo.branches["main"]


def test_bundle_must_match_manifest_and_target(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    bundle = build(sources, tmp_path / "b1")
    with pytest.raises(
        ValueError,
        match="built for https://huggingface.co/datasets/test-org/muon-traces version 1.0.0, not test-org/muon-traces 2.0.0",
    ):
        _publish(bundle, hub_api, version="2.0.0")
    (bundle / "report" / "report.md").write_text("edited after bundling\n")
    with pytest.raises(ValueError, match="does not match its MANIFEST.sha256"):
        _publish(bundle, hub_api)
    assert fake_hub.requests == []


@pytest.mark.parametrize(
    "repo_id, version, message",
    [
        ("no-namespace", "1.0.0", "invalid dataset repository id 'no-namespace'"),
        ("org/bad--name", "1.0.0", "invalid dataset repository id 'org/bad--name'"),
        ("org/ok", "v1.0.0", "invalid version 'v1.0.0'"),
        ("org/ok", "1.0", "invalid version '1.0'"),
    ],
)
def test_malformed_repo_id_or_version_fails_before_any_request(repo_id, version, message, sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    bundle = build(sources, tmp_path / "b1")
    with pytest.raises(ValueError, match=re.escape(message)):
        publish(bundle, repo_id, version, api=hub_api, echo=lambda line: None)
    assert fake_hub.requests == []


@pytest.mark.slow
def test_malformed_input_is_a_clean_cli_error(fake_hub, tmp_path):
    from hub_support import hub_env

    args = ["publish", "--repo-id", "org/ok", "--version", "1.0", "--bundle", str(tmp_path)]
    done = muon_repro(args, hub_env(tmp_path, fake_hub.url))
    assert done.returncode == 2 and "muon-repro publish: error: invalid version '1.0'" in done.stderr
    assert "Traceback" not in done.stderr and fake_hub.requests == []


def test_publishing_needs_a_token(sources, tmp_path, fake_hub, hub_api, monkeypatch):  # noqa: F811
    import huggingface_hub
    from huggingface_hub import HfApi

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    anonymous = HfApi(endpoint=fake_hub.url, token=False)
    bundle = build(sources, tmp_path / "b1")
    with pytest.raises(ValueError, match="no Hugging Face token found: set HF_TOKEN or run `hf auth login`"):
        publish(bundle, REPO, "1.0.0", api=anonymous, echo=lambda line: None)
    assert fake_hub.requests == []
    publish(bundle, REPO, "1.0.0", api=anonymous, dry_run=True, echo=lambda line: None)  # reading needs none


def test_private_repository_on_creation(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    result, out = _publish(build(sources, tmp_path / "b1"), hub_api, private=True)
    assert result.tagged and "(private)" in out and fake_hub.get_repo(REPO).private


def test_the_plan_is_one_line_per_folder_unless_verbose():
    """publish printed 2,250 lines for a bundle of 2,216 traces: the plan sums each run group's folder."""
    from muon_repro.hub.plan import Plan, PlanItem

    traces = [PlanItem(f"traces/cpu/pipeline/r{k}/trial0/rank0.json.gz", "add", 100, None) for k in range(50)]
    items = (*traces, PlanItem("metrics/runs.parquet", "add", 10, None), PlanItem("README.md", "change", 5, 4))
    plan = Plan(None, items)
    short = format_plan(plan, REPO, "v1.0.0").splitlines()
    assert "  add        traces/cpu/pipeline/ (50 files)  5.0 kB" in short
    assert any(line.split()[:2] == ["change", "README.md"] for line in short) and len(short) < 10
    assert "  (per folder; --verbose lists every file)" in short
    full = format_plan(plan, REPO, "v1.0.0", verbose=True).splitlines()
    assert sum("rank0.json.gz" in line for line in full) == 50


# ---------------------------------------------------------------------- the bundle changing while it is published


def test_a_file_changed_after_the_checks_stops_the_publish_before_any_upload(sources, tmp_path, fake_hub, hub_api, monkeypatch):  # noqa: F811
    from muon_repro.hub import publish as publishing

    bundle = build(sources, tmp_path / "b1")
    verified = publishing.check_bundle_verifies

    def verify_then_change(root, echo):
        verified(root, echo)
        (root / "report" / "report.md").write_text("# written after verify\n")

    monkeypatch.setattr(publishing, "check_bundle_verifies", verify_then_change)
    with pytest.raises(PublishError, match=r"report\.md changed after the bundle was verified .* nothing was sent"):
        _publish(bundle, hub_api)
    repo = fake_hub.get_repo(REPO)
    assert _commits(fake_hub) == 1 and not repo.tags  # the repository's first commit only


def test_a_file_written_while_it_uploads_is_never_tagged(sources, tmp_path, fake_hub, hub_api, monkeypatch):  # noqa: F811
    """Checked and read, then rewritten before the upload reads it again: the commit lands unlike the manifest, and a
    tag would publish that forever."""
    bundle = build(sources, tmp_path / "b1")
    commit = hub_api.create_commit

    def rewrite_then_commit(*args, **kwargs):
        (bundle / "report" / "report.md").write_text("# written during the upload\n")
        return commit(*args, **kwargs)

    monkeypatch.setattr(hub_api, "create_commit", rewrite_then_commit)
    with pytest.raises(PublishError, match=r"holds 1 file\(s\) unlike the bundle's MANIFEST\.sha256 \(report/report\.md\)"):
        _publish(bundle, hub_api)
    assert not fake_hub.get_repo(REPO).tags
