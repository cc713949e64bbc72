"""The fake Hub answers the real ``huggingface_hub`` client as the Hub does (in this process, no network)."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request

import pytest
from hub_support import TOKEN
from huggingface_hub import CommitOperationAdd, CommitOperationDelete
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils.sha import git_hash
from support import fake_hub_app
from support.fake_hub import FakeHub, card_metadata_errors

REPO = "org/data"
PARQUET_LIKE = b"PAR1\0\0\0binary"


def _commit(api, files: dict[str, bytes], deletes=(), **kwargs):
    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=d) for p, d in files.items()]
    ops += [CommitOperationDelete(path_in_repo=p) for p in deletes]
    return api.create_commit(REPO, ops, commit_message="c", repo_type="dataset", **kwargs)


def _get(url: str, headers: dict[str, str] | None = None, method: str = "GET"):
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    return urllib.request.urlopen(req, timeout=10)


def test_create_commit_tag_and_list(hub_api):
    hub_api.create_repo(REPO, repo_type="dataset")
    with pytest.raises(HfHubHTTPError) as err:
        hub_api.create_repo(REPO, repo_type="dataset")
    assert err.value.response.status_code == 409
    hub_api.create_repo(REPO, repo_type="dataset", exist_ok=True)

    info = _commit(hub_api, {"a.txt": b"hello", "sub/t.parquet": PARQUET_LIKE, "sub/deep/x.json": b"{}"})
    hub_api.create_tag(REPO, tag="v1.0.0", revision=info.oid, repo_type="dataset")
    with pytest.raises(HfHubHTTPError) as err:
        hub_api.create_tag(REPO, tag="v1.0.0", revision=info.oid, repo_type="dataset")
    assert err.value.response.status_code == 409

    refs = hub_api.list_repo_refs(REPO, repo_type="dataset")
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", info.oid)]
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1.0.0", "refs/tags/v1.0.0", info.oid)]

    tree = {e.path: e for e in hub_api.list_repo_tree(REPO, repo_type="dataset", recursive=True)}
    assert set(tree) == {".gitattributes", "a.txt", "sub", "sub/t.parquet", "sub/deep", "sub/deep/x.json"}
    # Regular files carry their git blob id; LFS files the sha256 of their content (and the pointer's blob id).
    assert tree["a.txt"].blob_id == git_hash(b"hello") and tree["a.txt"].lfs is None
    assert tree["sub/t.parquet"].lfs.sha256 == hashlib.sha256(PARQUET_LIKE).hexdigest()
    assert tree["sub/t.parquet"].size == len(PARQUET_LIKE)
    top = [e.path for e in hub_api.list_repo_tree(REPO, repo_type="dataset")]
    assert top == [".gitattributes", "a.txt", "sub"]
    assert [e.path for e in hub_api.list_repo_tree(REPO, "sub", repo_type="dataset")] == ["sub/deep", "sub/t.parquet"]

    info_v1 = hub_api.dataset_info(REPO, revision="v1.0.0", files_metadata=True)
    assert info_v1.sha == info.oid
    assert {s.rfilename for s in info_v1.siblings} == {".gitattributes", "a.txt", "sub/t.parquet", "sub/deep/x.json"}
    paths = hub_api.get_paths_info(REPO, ["a.txt", "sub", "missing"], repo_type="dataset", revision="v1.0.0")
    assert [p.path for p in paths] == ["a.txt", "sub"]
    commits = hub_api.list_repo_commits(REPO, repo_type="dataset")
    assert commits[0].commit_id == info.oid and len(commits) == 2


def test_resolve_headers_ranges_and_head(fake_hub, hub_api):
    hub_api.create_repo(REPO, repo_type="dataset")
    info = _commit(hub_api, {"a.txt": b"0123456789", "b.parquet": PARQUET_LIKE})
    base = f"{fake_hub.url}/datasets/{REPO}/resolve/main"
    with _get(f"{base}/a.txt", method="HEAD") as r:
        assert r.headers["X-Repo-Commit"] == info.oid
        assert r.headers["ETag"] == f'"{git_hash(b"0123456789")}"'
        assert r.headers["Content-Length"] == "10" and r.read() == b""
    with _get(f"{base}/b.parquet") as r:
        assert r.headers["ETag"] == f'"{hashlib.sha256(PARQUET_LIKE).hexdigest()}"' and r.read() == PARQUET_LIKE
    with _get(f"{base}/a.txt", {"Range": "bytes=2-4"}) as r:
        assert r.status == 206 and r.read() == b"234" and r.headers["Content-Range"] == "bytes 2-4/10"
    with _get(f"{base}/a.txt", {"Range": "bytes=-3"}) as r:
        assert r.read() == b"789"
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(f"{base}/nope.txt")
    assert err.value.code == 404 and err.value.headers["X-Error-Code"] == "EntryNotFound"


def test_parent_commit_mismatch_is_refused(fake_hub, hub_api):
    hub_api.create_repo(REPO, repo_type="dataset")
    first = _commit(hub_api, {"a.txt": b"1"})
    other = fake_hub.push(REPO, {"a.txt": b"someone else"})
    with pytest.raises(HfHubHTTPError) as err:
        _commit(hub_api, {"a.txt": b"2"}, parent_commit=first.oid)
    assert err.value.response.status_code == 412
    assert fake_hub.get_repo(REPO).branches["main"] == other
    assert fake_hub.files(REPO)["a.txt"] == b"someone else"


def test_deletes_pull_requests_and_revisions(fake_hub, hub_api):
    hub_api.create_repo(REPO, repo_type="dataset")
    first = _commit(hub_api, {"a.txt": b"1", "b.txt": b"2"})
    _commit(hub_api, {}, deletes=["b.txt"])
    assert set(fake_hub.files(REPO)) == {".gitattributes", "a.txt"}
    assert set(fake_hub.files(REPO, first.oid[:10])) == {".gitattributes", "a.txt", "b.txt"}

    pr = _commit(hub_api, {"c.txt": b"3"}, create_pr=True)
    assert pr.pr_url.endswith("/discussions/1")
    assert "c.txt" not in fake_hub.files(REPO)
    assert "c.txt" in fake_hub.files(REPO, "refs/pr/1")
    # The revision is one quoted path segment: refs%2Fpr%2F1.
    assert "c.txt" in {e.path for e in hub_api.list_repo_tree(REPO, repo_type="dataset", revision="refs/pr/1")}
    refs = hub_api.list_repo_refs(REPO, repo_type="dataset", include_pull_requests=True)
    assert [p.ref for p in refs.pull_requests] == ["refs/pr/1"]
    with pytest.raises(RevisionNotFoundError):
        hub_api.list_repo_tree(REPO, repo_type="dataset", revision="v9.9.9").__next__()


def test_auth_private_and_missing_repos(fake_hub, hub_api):
    from huggingface_hub import HfApi

    anonymous = HfApi(endpoint=fake_hub.url, token=False)
    with pytest.raises(HfHubHTTPError) as err:
        anonymous.create_repo(REPO, repo_type="dataset")
    assert err.value.response.status_code == 401
    hub_api.create_repo(REPO, repo_type="dataset", private=True)
    with pytest.raises(RepositoryNotFoundError):
        anonymous.dataset_info(REPO)
    assert hub_api.dataset_info(REPO).private is True
    with pytest.raises(RepositoryNotFoundError):
        hub_api.dataset_info("org/absent")


def test_tree_pagination(fake_hub, hub_api, monkeypatch):
    monkeypatch.setattr(fake_hub_app, "PAGE_SIZE", 3)
    hub_api.create_repo(REPO, repo_type="dataset")
    _commit(hub_api, {f"f{i}.txt": b"x" for i in range(7)})
    paths = [e.path for e in hub_api.list_repo_tree(REPO, repo_type="dataset", recursive=True)]
    assert paths == [".gitattributes", *(f"f{i}.txt" for i in range(7))]
    assert sum(1 for m, p in fake_hub.requests if "/tree/" in p) == 3


def test_validate_yaml(hub_api):
    good = "---\nlicense: mit\nconfigs:\n- config_name: runs\n  data_files: metrics/runs.parquet\n---\n# x\n"
    hub_api._validate_yaml(good, repo_type="dataset")
    with pytest.raises(ValueError, match="config_name"):
        hub_api._validate_yaml("---\nconfigs:\n- data_files: a.parquet\n---\n", repo_type="dataset")
    assert card_metadata_errors("---\nlicense: [unclosed\n---\n")
    assert card_metadata_errors("no front matter") == []


def test_listens_on_loopback_only():
    with pytest.raises(ValueError, match="loopback"):
        FakeHub(host="0.0.0.0")


def test_uploads_with_a_token_header(fake_hub, hub_api):
    hub_api.create_repo(REPO, repo_type="dataset")
    _commit(hub_api, {"a.txt": b"1"})
    assert ("POST", f"/api/datasets/{REPO}/commit/main") in fake_hub.requests
    assert TOKEN not in repr(fake_hub.requests)


def test_pull_requests_read_by_revision_and_merged(fake_hub, hub_api, tmp_path):
    from huggingface_hub import hf_hub_download, snapshot_download

    hub_api.create_repo(REPO, repo_type="dataset")
    head = _commit(hub_api, {"a.txt": b"1"}).oid
    _commit(hub_api, {"later.txt": b"main moved on"})  # the PR starts from parent_commit, not from main's head
    pr = hub_api.create_commit(
        REPO,
        [CommitOperationAdd(path_in_repo="runs/r.bin", path_or_fileobj=PARQUET_LIKE)],
        commit_message="Add a run",
        commit_description="one run",
        repo_type="dataset",
        create_pr=True,
        parent_commit=head,
    )
    assert (pr.pr_num, pr.pr_revision) == (1, "refs/pr/1") and pr.pr_url.endswith(f"/datasets/{REPO}/discussions/1")
    assert "runs/r.bin" not in fake_hub.files(REPO) and "later.txt" not in fake_hub.files(REPO, "refs/pr/1")

    got = hf_hub_download(
        REPO,
        "runs/r.bin",
        repo_type="dataset",
        revision="refs/pr/1",
        cache_dir=tmp_path / "c",
        endpoint=fake_hub.url,
        token=TOKEN,
    )
    assert open(got, "rb").read() == PARQUET_LIKE
    snap = snapshot_download(
        REPO, repo_type="dataset", revision="refs/pr/1", local_dir=tmp_path / "s", endpoint=fake_hub.url, token=TOKEN
    )
    assert sorted(p.name for p in (tmp_path / "s").rglob("*") if p.is_file() and ".cache" not in p.parts) == [
        ".gitattributes",
        "a.txt",
        "r.bin",
    ]
    assert str(snap) == str(tmp_path / "s")
    info = hub_api.get_paths_info(REPO, ["runs/r.bin", "later.txt"], repo_type="dataset", revision="refs/pr/1")
    assert [i.path for i in info] == ["runs/r.bin"] and info[0].lfs.sha256 == hashlib.sha256(PARQUET_LIKE).hexdigest()

    details = hub_api.get_discussion_details(REPO, 1, repo_type="dataset")
    assert (details.title, details.author, details.status, details.is_pull_request) == ("Add a run", "fake-user", "open", True)
    assert (details.git_reference, details.target_branch) == ("refs/pr/1", "refs/heads/main")
    assert [e.content for e in details.events if e.type == "comment"] == ["one run"]
    assert [e.oid for e in details.events if e.type == "commit"] == [pr.oid]
    # A second push to the pull request's branch is one more commit of it.
    again = _commit(hub_api, {"runs/notes.txt": b"n"}, revision="refs/pr/1")
    assert [e.oid for e in hub_api.get_discussion_details(REPO, 1, repo_type="dataset").events if e.type == "commit"] == [
        pr.oid,
        again.oid,
    ]
    assert [(d.num, d.is_pull_request) for d in hub_api.get_repo_discussions(REPO, repo_type="dataset")] == [(1, True)]

    hub_api.merge_pull_request(REPO, 1, repo_type="dataset")
    assert {"a.txt", "later.txt", "runs/r.bin", "runs/notes.txt"} <= set(fake_hub.files(REPO))
    merged = hub_api.get_discussion_details(REPO, 1, repo_type="dataset")
    assert merged.status == "merged" and merged.merge_commit_oid == fake_hub.get_repo(REPO).branches["main"]
    with pytest.raises(HfHubHTTPError):
        hub_api.get_discussion_details(REPO, 7, repo_type="dataset")


def test_pull_request_conflicts_and_failed_commits(fake_hub, hub_api):
    hub_api.create_repo(REPO, repo_type="dataset")
    _commit(hub_api, {"a.txt": b"1"})
    _commit(hub_api, {"a.txt": b"from the pr"}, create_pr=True)
    fake_hub.push(REPO, {"a.txt": b"from main"})
    with pytest.raises(HfHubHTTPError) as err:
        hub_api.merge_pull_request(REPO, 1, repo_type="dataset")
    assert err.value.response.status_code == 409 and fake_hub.files(REPO)["a.txt"] == b"from main"
    # A pull request whose first commit fails is not opened.
    with pytest.raises(HfHubHTTPError):
        _commit(hub_api, {}, deletes=["absent.txt"], create_pr=True)
    assert list(fake_hub.get_repo(REPO).pull_requests) == [1]
    assert "refs/pr/2" not in fake_hub.get_repo(REPO).branches
