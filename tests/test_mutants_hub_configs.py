"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of publishing a
bundle to the Hub (muon_repro.hub.publish: the timeout and its request hook, where the token comes from, the bundle's
refusals and how many problems they name, the offline check before the verify, what the commit says, what a refused
or silent tag leaves, --create-pr with nothing to commit, a tag made while the repository was created), of the plan
(muon_repro.hub.plan: the order of its items, the sizes each keeps, what has changes, the per-folder lines and their
sizes), of downloading (muon_repro.hub.download: the newest version, main without one, a malformed revision, the names
in messages and their order, what a --local-dir holds and when the Hub is asked about it) and of the benchmark's
configurations (muon_repro.bench.configs: the run-shape limits of docs/limits.md, the refusals of BenchConfig, the
timed steps, the names that expand, the reference set, what resolve keeps of a registry entry).

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/publishing.md
and docs/limits.md); Hub requests go to the fake Hub of tests/support (tests/hub_support.py's fixtures) or to a
stand-in object, never to the network."""

from __future__ import annotations

import hashlib
import math
from types import SimpleNamespace

import pytest
from hub_support import TOKEN
from huggingface_hub.utils.sha import git_hash

from muon_repro.bench.configs import (
    MAX_TRIALS,
    REFERENCE_CONFIGS,
    BenchConfig,
    check_trials_limit,
    expand_config_names,
    resolve,
)
from muon_repro.dataset.manifest import FileEntry
from muon_repro.hub.download import (
    _names_of_commits,
    _some,
    _versions_there,
    check_local_dir,
    download,
    files_by_commit,
    latest_version_tag,
)
from muon_repro.hub.interrupts import PublishStage
from muon_repro.hub.plan import Plan, PlanItem, RemoteFile, compute_plan, format_plan, plan_folder
from muon_repro.hub.publish import (
    PublishError,
    _check_landed,
    _commit,
    _fill_in_timeouts,
    _publish_to,
    _tag,
    _Target,
    _Upload,
    bundle_files,
    check_bundle_target,
    check_bundle_verifies,
    check_timeout,
    hub_timeout,
    publish,
    token_in_use,
    token_source,
)

REPO = "test-org/muon-traces"


# ---------------------------------------------------------------- the plan (muon_repro.hub.plan)


def _entries(root, files: dict[str, bytes]) -> list[FileEntry]:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return [FileEntry(n, len(d), hashlib.sha256(d).hexdigest()) for n, d in files.items()]


def test_the_plan_lists_adds_changes_deletes_then_unchanged_each_by_path(tmp_path):
    local = _entries(tmp_path, {"b.txt": b"b", "a.txt": b"a", "z.txt": b"new z", "k.txt": b"k"})
    remote = {
        "z.txt": RemoteFile("z.txt", 5, git_hash(b"old z"), None),
        "k.txt": RemoteFile("k.txt", 1, git_hash(b"k"), None),
        "c.txt": RemoteFile("c.txt", 2, git_hash(b"cc"), None),
    }
    plan = compute_plan(tmp_path, local, remote, "f" * 40)
    # ACTIONS order (add, change, delete, unchanged), then the path: not the paths alone
    assert [(i.action, i.path) for i in plan.items] == [
        ("add", "a.txt"),
        ("add", "b.txt"),
        ("change", "z.txt"),
        ("delete", "c.txt"),
        ("unchanged", "k.txt"),
    ]


def test_a_changed_file_is_uploaded_at_its_local_size_and_each_item_keeps_both_sizes(tmp_path):
    local = _entries(tmp_path, {"grown.txt": b"0123456789", "same.txt": b"abc"})
    remote = {
        "grown.txt": RemoteFile("grown.txt", 4, git_hash(b"0123"), None),
        "same.txt": RemoteFile("same.txt", 3, git_hash(b"abc"), None),
    }
    plan = compute_plan(tmp_path, local, remote, "f" * 40)
    assert {i.path: (i.action, i.local_size, i.remote_size) for i in plan.items} == {
        "grown.txt": ("change", 10, 4),
        "same.txt": ("unchanged", 3, 3),
    }
    assert plan.upload_bytes == 10  # the new bytes, not the 4 the Hub holds
    # verbose: a change reads from the Hub's size to the bundle's
    line = next(x for x in format_plan(plan, REPO, "v1.0.0", verbose=True).splitlines() if "grown.txt" in x)
    assert line.split()[-5:] == ["4", "B", "->", "10", "B"]


def test_an_lfs_file_with_the_same_sha256_but_another_size_is_changed(tmp_path):
    local = _entries(tmp_path, {"t.parquet": b"PAR1 data"})
    sha = hashlib.sha256(b"PAR1 data").hexdigest()
    remote = {"t.parquet": RemoteFile("t.parquet", 99, "pointer", sha)}  # the module docstring: sha256 "(and size)"
    assert [i.action for i in compute_plan(tmp_path, local, remote, "f" * 40).items] == ["change"]


def test_a_plan_that_only_deletes_has_changes_and_is_not_nothing_to_commit():
    plan = Plan("f" * 40, (PlanItem("old.txt", "delete", None, 3), PlanItem("keep.txt", "unchanged", 2, 2)))
    assert plan.has_changes and plan.upload_bytes == 0
    assert "Nothing to commit" not in format_plan(plan, REPO, "v1.0.0")
    unchanged = Plan("f" * 40, (PlanItem("keep.txt", "unchanged", 2, 2),))
    assert not unchanged.has_changes
    assert format_plan(unchanged, REPO, "v1.0.0").endswith("Nothing to commit: the remote already has exactly these files.")


def test_a_file_directly_under_a_traces_profile_is_summarized_in_traces():
    # traces/<profile>/<group>/ for a run group's files; a file with no group folder goes to its top folder
    assert plan_folder("traces/cpu/index.json") == "traces/"
    assert plan_folder("traces/cpu/comparison/muon/rank0.json.gz") == "traces/cpu/comparison/"
    assert plan_folder("traces/index.parquet") == "traces/"
    assert plan_folder("README.md") == "README.md"


def test_a_folder_of_deleted_files_is_summed_at_their_remote_size():
    plan = Plan("f" * 40, (PlanItem("figures/a.svg", "delete", None, 2000), PlanItem("figures/b.svg", "delete", None, 1000)))
    lines = format_plan(plan, REPO, "v1.0.0").splitlines()
    assert "  delete     figures/ (2 files)  3.0 kB" in lines
    alone = Plan("f" * 40, (PlanItem("figures/a.svg", "delete", None, 2000), PlanItem("CITATION.cff", "change", 9, 8)))
    # one file in a folder is still its folder's line; a file at the root is named itself
    rows = [line.split() for line in format_plan(alone, REPO, "v1.0.0").splitlines()]
    assert ["change", "CITATION.cff", "9", "B"] in rows and ["delete", "figures/", "(1", "file)", "2.0", "kB"] in rows


def test_the_per_folder_note_only_when_lines_were_summed():
    one_each = Plan(None, (PlanItem("README.md", "add", 5, None), PlanItem("metrics/runs.csv", "add", 7, None)))
    text = format_plan(one_each, REPO, "v1.0.0")
    assert "does not exist yet" in text and "--verbose" not in text  # one line per file already
    summed = Plan(None, (PlanItem("metrics/a.csv", "add", 5, None), PlanItem("metrics/b.csv", "add", 7, None)))
    assert "  (per folder; --verbose lists every file)" in format_plan(summed, REPO, "v1.0.0").splitlines()


# ---------------------------------------------------------------- publish (muon_repro.hub.publish)


def _target(api) -> _Target:
    return _Target(api, REPO, "v1.0.0", 5.0)


@pytest.mark.parametrize("seconds", [0, True, -1.0, math.inf, math.nan, "5"])
def test_a_timeout_is_a_positive_finite_number_and_never_a_bool(seconds):
    with pytest.raises(ValueError, match="--timeout must be a positive number of seconds"):
        check_timeout(seconds)


def test_timeouts_a_request_sets_are_kept_and_an_inner_block_gives_back_the_outer_ones():
    request = SimpleNamespace(extensions={"timeout": {"connect": 3.0, "read": None}})
    with hub_timeout(20):
        with hub_timeout(2):
            pass
        _fill_in_timeouts(request)  # the outer block's 20 s again, not none
    assert request.extensions["timeout"] == {"connect": 3.0, "read": 20.0, "write": 20.0, "pool": 20.0}
    idle = SimpleNamespace(extensions={})
    _fill_in_timeouts(idle)  # outside any block: untouched
    assert idle.extensions == {}


def test_the_token_source_is_named_as_huggingface_hub_looks_for_it(monkeypatch):
    for name in ("HF_OIDC_RESOURCE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    anonymous = SimpleNamespace(token=None)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_old")
    monkeypatch.setenv("HF_TOKEN", "hf_new")
    assert token_source(anonymous) == "HF_TOKEN"  # HF_TOKEN first
    monkeypatch.setenv("HF_TOKEN", "   ")  # blank: not a token, the next name is
    assert token_source(anonymous) == "HUGGING_FACE_HUB_TOKEN"


def test_an_api_anonymous_on_purpose_sends_no_token_even_with_hf_token_set(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert token_in_use(SimpleNamespace(token=False)) is None
    assert token_in_use(SimpleNamespace(token=None)) == TOKEN


def test_a_bundle_unlike_its_manifest_names_five_problems_then_how_many_more(monkeypatch, tmp_path):
    from muon_repro.hub import publish as publishing

    problems = [f"p{k}" for k in range(1, 7)]
    monkeypatch.setattr(publishing, "check_manifest", lambda root: problems)
    with pytest.raises(ValueError, match=r"\(p1; p2; p3; p4; p5; and 1 more\)"):
        bundle_files(tmp_path)
    problems.pop()
    with pytest.raises(ValueError, match=r"\(p1; p2; p3; p4; p5\); rebuild"):
        bundle_files(tmp_path)


def test_the_authors_a_bundle_must_cite_are_checked_in_order(monkeypatch, tmp_path):
    from muon_repro.hub import publish as publishing

    meta = SimpleNamespace(repo_id=REPO, version="1.0.0", authors=("Ada", "Bo"), url="u")
    monkeypatch.setattr(publishing, "read_citation", lambda path: meta)
    assert check_bundle_target(tmp_path, REPO, "1.0.0", ["Ada", "Bo"]) is meta
    with pytest.raises(ValueError, match="cites Ada; Bo, not Bo; Ada"):
        check_bundle_target(tmp_path, REPO, "1.0.0", ["Bo", "Ada"])


@pytest.mark.parametrize(("failed", "more"), [(10, None), (11, "  - and 1 more (muon-repro verify")])
def test_a_bundle_that_fails_verify_lists_ten_failures_then_how_many_more(monkeypatch, tmp_path, failed, more):
    import muon_repro.dataset.verify as verify

    result = SimpleNamespace(ok=False, failed=[f"check {k}" for k in range(failed)], passed=[])
    monkeypatch.setattr(verify, "verify_bundle", lambda root: result)
    with pytest.raises(ValueError) as refused:
        check_bundle_verifies(tmp_path, print)
    lines = str(refused.value).splitlines()
    assert f"fails {failed} of the checks" in lines[0] and lines[1:11] == [f"  - check {k}" for k in range(10)]
    assert (lines[11:] and lines[11].startswith(more)) if more else len(lines) == 11


def test_a_commit_missing_ten_files_names_them_all_and_no_more(monkeypatch):
    from muon_repro.hub import publish as publishing

    monkeypatch.setattr(publishing, "list_remote", lambda api, repo_id, revision: {})
    uploads = [_Upload(f"f{k}.txt", "s" * 64, "b" * 40) for k in range(10)]
    with pytest.raises(PublishError) as refused:
        _check_landed(_target(SimpleNamespace(endpoint="https://huggingface.co")), "c" * 40, uploads)
    assert f"holds 10 file(s) unlike the bundle's MANIFEST.sha256 ({', '.join(u.path for u in uploads)}): " in str(refused.value)
    with pytest.raises(PublishError, match=r"f9.txt, and 1 more\)"):
        _check_landed(_target(SimpleNamespace(endpoint="https://huggingface.co")), "c" * 40, [*uploads, uploads[0]])


def test_a_tag_that_fails_without_a_commit_says_nothing_was_committed():
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    def refuse(*args, **kwargs):
        response = httpx2.Response(409, request=httpx2.Request("POST", "https://huggingface.co/api/tag"))
        raise HfHubHTTPError("409 Conflict: tag exists", response=response)

    def hang(*args, **kwargs):
        raise httpx2.ReadTimeout("no answer")

    api = SimpleNamespace(endpoint="https://huggingface.co", create_tag=refuse)
    with pytest.raises(PublishError, match=r"409 Conflict: tag exists \(nothing was committed\)$"):
        _tag(_target(api), "c" * 40, committed=False)
    with pytest.raises(PublishError, match=r"\(the commit is on main, untagged\)$"):
        _tag(_target(api), "c" * 40, committed=True)
    api.create_tag = hang
    with pytest.raises(PublishError, match=r"; nothing was committed, and the tag may or may not exist"):
        _tag(_target(api), "c" * 40, committed=False)


def test_offline_mode_is_said_before_the_bundle_is_verified(monkeypatch, tmp_path):
    from huggingface_hub import constants

    from muon_repro.hub import publish as publishing

    verified = []
    monkeypatch.setattr(publishing, "bundle_files", lambda root: [])
    monkeypatch.setattr(publishing, "check_bundle_target", lambda *args: None)
    monkeypatch.setattr(publishing, "check_bundle_verifies", lambda root, echo: verified.append(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PublishError, match="no request was sent to the Hub"):
        publish(tmp_path, REPO, "1.0.0", api=SimpleNamespace(token=TOKEN, endpoint="https://huggingface.co"), echo=print)
    assert verified == []


def test_one_commit_says_what_it_adds_changes_and_deletes_and_is_named_for_the_tag(fake_hub, hub_api, tmp_path):
    fake_hub.store.create_repo("dataset", REPO)
    fake_hub.push(REPO, {"old.txt": b"old\n", "kept.txt": b"k\n"})
    local = _entries(tmp_path, {"new.txt": b"new\n", "kept.txt": b"k\n"})
    head = fake_hub.get_repo(REPO).branches["main"]
    remote = {p: RemoteFile(p, len(d), git_hash(d), None) for p, d in fake_hub.files(REPO).items()}
    plan = compute_plan(tmp_path, local, remote, head)
    target = _Target(hub_api, REPO, "v1.0.0", 10.0)
    with hub_timeout(10):
        commit, pr_url, summary, read = _commit(target, tmp_path, plan, local, False)
    assert summary == "1 added, 0 changed, 1 deleted" and pr_url is None
    assert [u.path for u in read] == ["new.txt"]
    repo = fake_hub.get_repo(REPO)
    assert repo.branches["main"] == commit and repo.commits[commit].title == "Publish v1.0.0"
    assert repo.commits[commit].message == "muon_repro dataset v1.0.0: 1 added, 0 changed, 1 deleted (4 B)."  # new.txt
    assert "new.txt" in fake_hub.files(REPO) and "old.txt" not in fake_hub.files(REPO)


def test_a_tag_made_while_the_repository_was_created_stops_the_publish(fake_hub, hub_api, tmp_path):
    local = _entries(tmp_path, {"README.md": b"# r\n"})

    def tag_it():  # the first refs request comes after the creation (the first read stops at the missing repository)
        repo = fake_hub.get_repo(REPO)
        repo.tags["v1.0.0"] = repo.branches["main"]

    fake_hub.add_hook("GET", r"/refs$", tag_it)
    stage = PublishStage()
    with hub_timeout(10), pytest.raises(PublishError, match="changed while it was being created; run publish again"):
        _publish_to(_target(hub_api), tmp_path, local, SimpleNamespace(version="1.0.0"), False, False, False, print, stage)
    assert len(fake_hub.get_repo(REPO).commits) == 1  # the repository's first commit only


def test_create_pr_with_nothing_to_commit_tags_the_head(fake_hub, hub_api, tmp_path):
    """Step 6 of the module docstring: --create-pr opens a pull request only for changes; a bundle the head already
    holds (the pull request merged) is tagged there, as without it."""
    from muon_repro.dataset.meta import BundleMeta

    fake_hub.store.create_repo("dataset", REPO)
    head = fake_hub.push(REPO, {"README.md": b"# r\n"})
    local = _entries(tmp_path, {"README.md": b"# r\n"})
    meta = BundleMeta(repo_id=REPO, version="1.0.0", date="2025-06-01")
    said: list[str] = []
    with hub_timeout(10):
        result = _publish_to(_target(hub_api), tmp_path, local, meta, False, True, False, said.append, PublishStage())
    assert (result.committed, result.tagged, result.commit, result.pr_url) == (False, True, head, None)
    assert fake_hub.get_repo(REPO).tags == {"v1.0.0": head} and "No changes: no commit." in said


# ---------------------------------------------------------------- download (muon_repro.hub.download)


class _Refs:
    """An ``HfApi`` stand-in for what download reads of a repository: its refs, and one revision's commit and files."""

    def __init__(self, tags=(), branches=("main",), sha="c" * 40, files=(), token="hf_x"):
        self.endpoint, self.token, self.calls = "https://huggingface.co", token, []
        self._tags = [SimpleNamespace(name=n, target_commit=c) for n, c in tags]
        self._branches = [SimpleNamespace(name=n, target_commit=sha) for n in branches]
        self._info = SimpleNamespace(sha=sha, siblings=[SimpleNamespace(rfilename=f) for f in files])

    def list_repo_refs(self, repo_id, repo_type=None):
        self.calls.append("refs")
        return SimpleNamespace(tags=self._tags, branches=self._branches)

    def dataset_info(self, repo_id, revision=None):
        self.calls.append(("info", revision))
        return self._info


def _fetched(folder, files: dict[str, str | None]) -> None:
    """Files in ``folder`` as a download leaves them: each with its .metadata naming its commit (None: no metadata)."""
    for path, commit in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text("x\n")
        if commit is not None:
            meta = folder.joinpath(".cache", "huggingface", "download", f"{path}.metadata")
            meta.parent.mkdir(parents=True, exist_ok=True)
            meta.write_text(f"{commit}\netag\n1700000000.0\n")


def test_the_newest_version_tag_is_the_highest_version_not_the_first_or_the_text_order():
    api = _Refs(tags=[("v1.9.0", "a" * 40), ("v1.10.0", "b" * 40), ("v1.2.0", "c" * 40), ("latest", "d" * 40)])
    assert latest_version_tag(api, REPO) == "v1.10.0"
    assert latest_version_tag(_Refs(tags=[("latest", "d" * 40)]), REPO) is None


def test_the_versions_named_in_a_message_say_when_there_is_none_and_sort_the_branches():
    assert _versions_there(_Refs(branches=("main", "dev")), REPO) == "; it has no version tag yet (branches: dev, main)"
    assert _versions_there(_Refs(tags=[("v2.0.0", "a" * 40)], branches=()), REPO) == "; its versions: v2.0.0 (branches: none)"


def test_the_names_of_a_commit_list_versions_in_order_then_other_tags_then_branches():
    c = "c" * 40
    api = _Refs(tags=[("zeta", c), ("v1.10.0", c), ("v1.9.0", c), ("alpha", c)], branches=("main", "dev"))
    assert _names_of_commits(api, REPO) == {c: ["v1.9.0", "v1.10.0", "alpha", "zeta", "dev", "main"]}


def test_a_message_names_three_files_in_full_and_the_dataset_files_first():
    assert _some(["c", "a", "b"]) == "3 files: a, b, c"
    assert _some([".gitattributes", "z.csv", "a.csv", "m.csv"], "v1") == "4 files from v1, among them a.csv, m.csv, z.csv"


def test_an_empty_local_dir_is_not_asked_about_and_a_full_one_returns_the_commit_checked(tmp_path):
    api = _Refs(sha="e" * 40, files=["README.md"])
    assert check_local_dir(api, REPO, "v1.0.0", tmp_path / "none", "--local-dir none") is None
    (tmp_path / "empty").mkdir()
    assert check_local_dir(api, REPO, "v1.0.0", tmp_path / "empty", "--local-dir empty") is None
    assert api.calls == []  # nothing held: the Hub is not asked
    _fetched(tmp_path / "d", {"README.md": "e" * 40})
    assert check_local_dir(api, REPO, "v1.0.0", tmp_path / "d", "--local-dir d") == "e" * 40
    assert api.calls == [("info", "v1.0.0")]


def test_huggingface_hubs_own_folder_is_not_counted_and_a_first_line_longer_than_a_commit_is_no_commit(tmp_path):
    c = "a" * 40
    _fetched(tmp_path, {"README.md": c, "metrics/runs.csv": None, "data.csv": None})
    # a .metadata whose first line is a commit id and more: no commit (huggingface_hub: no metadata)
    tmp_path.joinpath(".cache", "huggingface", "download", "data.csv.metadata").write_text(c + "f\netag\n1.0\n")
    (tmp_path / ".cache" / "huggingface" / ".gitignore").write_text("*\n")
    from_commit, unknown = files_by_commit(tmp_path)
    assert from_commit == {c: ["README.md"]}
    assert sorted(unknown) == ["data.csv", "metrics/runs.csv"]


def test_download_without_a_revision_or_a_version_tag_takes_main(fake_hub, hub_api, tmp_path):
    fake_hub.store.create_repo("dataset", REPO)
    fake_hub.push(REPO, {"README.md": b"# main\n"})
    said: list[str] = []
    folder = download(REPO, local_dir=tmp_path / "d", api=hub_api, echo=said.append)
    assert said[0] == "No --revision given: using main."
    assert (folder / "README.md").read_bytes() == b"# main\n"


def test_a_revision_that_is_no_tag_branch_or_commit_is_refused_before_any_request(fake_hub, hub_api, tmp_path):
    with pytest.raises(ValueError, match=r"invalid revision 'v1\.\.0': expected a tag such as v1\.0\.0"):
        download(REPO, revision="v1..0", local_dir=tmp_path / "d", api=hub_api, echo=print)
    assert fake_hub.requests == [] and not (tmp_path / "d").exists()


# ---------------------------------------------------------------- configurations (muon_repro.bench.configs)


def _config(**kw) -> BenchConfig:
    return BenchConfig(**{"group": "g", "name": "n", "optimizer": "muon", "dp": 1, "tp": 1, **kw})


# docs/limits.md, "Run shapes": field, flag, at most
RUN_SHAPES = [
    ("hidden", "--hidden", 131_072),
    ("n_layers", "--layers", 1_024),
    ("n_heads", "--heads", 4_096),
    ("ffn_hidden", "--ffn", 524_288),
    ("vocab_size", "--vocab", 4_194_304),
    ("dp", "--dp", 65_536),
    ("tp", "--tp", 1_024),
    ("pp", "--pp", 1_024),
    ("micro_batches", "--micro-batches", 65_536),
    ("seq_len", "--seq-len", 4_194_304),
    ("tokens_per_step", "--tokens-per-step", 2**36),
]


@pytest.mark.parametrize(("field", "flag", "limit"), RUN_SHAPES)
def test_each_run_shape_may_reach_its_documented_limit_and_not_pass_it(field, flag, limit):
    try:
        _config(**{field: limit})
    except ValueError as exc:  # another rule may refuse the value: never the size limit
        assert "past the limit" not in str(exc)
    with pytest.raises(ValueError, match=rf"{field}={limit + 1:,} \({flag}\) is past the limit of {limit:,} "):
        _config(**{field: limit + 1})


@pytest.mark.parametrize("field", ["active", "timed_warmup"])
def test_a_profiler_window_without_active_steps_or_a_negative_warmup_is_refused(field):
    bad = {"active": 0, "timed_warmup": -1}[field]
    with pytest.raises(ValueError, match=f"{field} must be >= {1 if field == 'active' else 0}, got {bad}"):
        _config(**{field: bad})


def test_two_pipeline_stages_train_in_fp32_only():
    with pytest.raises(ValueError, match=r"pipeline stages \(pp=2\) send fp32 activations"):
        _config(pp=2, precision="bf16")
    assert _config(pp=2).precision == "fp32"


def test_a_batch_that_does_not_divide_names_dp_times_seq_len_and_a_negative_seq_len_is_refused():
    with pytest.raises(ValueError, match="use a positive multiple of 32$"):
        _config(dp=2, seq_len=16, tokens_per_step=100)
    with pytest.raises(ValueError, match="does not divide into dp=1 x micro-batches of seq_len=-16"):
        _config(seq_len=-16, tokens_per_step=128)
    with pytest.raises(ValueError, match="tokens_per_step must be >= 1, got -1"):
        _config(tokens_per_step=-1)


def test_timed_steps_and_timed_only_runs():
    warm_only = _config(timed_warmup=2)  # warm-up steps without timed steps: no timed phase at all
    assert warm_only.timed_total == 0
    assert _config(timed_steps=3, timed_warmup=2).timed_total == 5
    untimed = _config(profile=False)  # no profiler, no timed steps (the regime sweep): the window is timed
    assert not untimed.timed_only and untimed.profiled_steps == 0 + 1 + 5
    assert _config(profile=False, timed_steps=3).profiled_steps == 0


def test_names_expand_in_registry_order_without_repeats_and_a_group_may_end_in_a_slash():
    both = ["comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2"]
    assert expand_config_names(["comparison/"]) == both
    assert expand_config_names(["comparison/muon_dp2_tp2", "comparison"]) == both[::-1]


def test_a_registry_entrys_own_precision_and_timed_steps_hold_at_every_scale():
    config = resolve("single_device/muon_t8k", "cpu")  # bf16, 5 timed steps after 2 (the cpu scale: fp32, 8 after 2)
    assert (config.precision, config.timed_steps, config.timed_warmup) == ("bf16", 5, 2)
    assert resolve("comparison/muon_dp2_tp2", "cpu").bucket_elems is None  # not bucketed
    assert resolve("overlap/muon_dp2_tp2_pipelined", "cpu").bucket_elems == 1_000_000


def test_the_reference_leaves_out_the_overlap_and_the_larger_groups():
    groups = {key.split("/")[0] for key in REFERENCE_CONFIGS}
    assert groups == {"comparison", "distributed_muon", "layout_ablation"}


@pytest.mark.parametrize(("trials", "traced"), [(MAX_TRIALS + 1, None), (1, MAX_TRIALS + 1)])
def test_rounds_past_the_limit_are_refused_naming_the_option(trials, traced):
    check_trials_limit(MAX_TRIALS, MAX_TRIALS)  # 10,000: trials 0 to 9,999
    flag = "--trials" if traced is None else "--traced-trials"
    with pytest.raises(ValueError, match=f"^{flag} 10,001 is past the limit of 10,000 rounds"):
        check_trials_limit(trials, traced)


def test_adamw_refuses_what_only_muon_has():
    with pytest.raises(ValueError, match="ns_unit_elems caps Muon's Newton-Schulz units; AdamW has none"):
        _config(optimizer="adamw", ns_unit_elems=64)
    with pytest.raises(ValueError, match="schedules Muon's gathers; AdamW has none"):
        _config(optimizer="adamw", overlap="pipelined")


def test_an_unknown_preset_or_overrides_without_one_are_refused():
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        _config(preset="huge")
    with pytest.raises(ValueError, match="model shape overrides need a base preset"):
        _config(hidden=64)
