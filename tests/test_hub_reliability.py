"""The Hub side under stress: a Hub that stops answering, bundles that do not verify or have an empty table,
missing repositories and revisions, another endpoint, a mangled token, a --local-dir holding another version (fake Hub,
no network)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pyarrow as pa
import pytest
from hub_support import TOKEN, _write_table, build, hub_env, muon_repro
from support.bounded import bounded

from muon_repro.dataset.card import read_card_metadata
from muon_repro.dataset.verify import verify_bundle
from muon_repro.hub.download import DownloadError, download
from muon_repro.hub.publish import PublishError, publish
from muon_repro.tables.files import list_files

REPO = "test-org/muon-traces"
BAD_TOKEN = "hf_Secret\u00e9Rest42"  # a pasted token with an accented letter at position 10


def _quiet(line: str) -> None:
    pass


# ---------------------------------------------------------------------- the fake Hub can hang


def test_fake_hub_stops_answering_and_resumes(fake_hub):
    url = f"{fake_hub.url}/api/whoami-v2"
    fake_hub.stop_answering("GET", r"/api/whoami")
    with pytest.raises(TimeoutError):
        urllib.request.urlopen(url, timeout=0.5)
    assert ("GET", "/api/whoami-v2") in fake_hub.requests  # accepted and read, never answered
    fake_hub.resume_answering()
    with pytest.raises(urllib.error.HTTPError) as answered:  # answered again: 401 without a token
        urllib.request.urlopen(url, timeout=5)
    assert answered.value.code == 401


# ---------------------------------------------------------------------- 1. a Hub that stops answering


def test_publish_to_a_hub_that_hangs_on_the_commit_stops_and_says_nothing_was_committed(sources, tmp_path, fake_hub, hub_api):
    bundle = build(sources, tmp_path / "b1")
    fake_hub.stop_answering("POST", rf"/api/datasets/{REPO}/commit/")
    _, error, seconds = bounded(lambda: publish(bundle, REPO, "1.0.0", api=hub_api, echo=_quiet, timeout=1))
    assert isinstance(error, PublishError), error
    files = len(list_files(bundle))  # the data and the code that made it
    assert re.fullmatch(
        rf"the Hub at {re.escape(fake_hub.url)} did not answer within 1 s while uploading {files} files \(.+\) "
        rf"and committing them to {REPO}; nothing was committed or tagged \(the commit is one atomic call, and main has not "
        r"moved\); run publish again",
        str(error),
    ), str(error)
    repo = fake_hub.get_repo(REPO)
    assert len(repo.commits) == 1 and not repo.tags  # only the Hub's initial commit
    assert seconds < 15


def test_publish_to_a_hub_that_never_answers_says_nothing_changed(sources, tmp_path, fake_hub, hub_api):
    bundle = build(sources, tmp_path / "b1")
    fake_hub.stop_answering()
    _, error, seconds = bounded(lambda: publish(bundle, REPO, "1.0.0", api=hub_api, echo=_quiet, timeout=0.5))
    assert isinstance(error, PublishError)
    assert str(error) == (
        f"the Hub at {fake_hub.url} did not answer within 0.5 s while reading the head, tags and files of {REPO}; "
        "nothing was changed on the Hub"
    )
    assert not fake_hub.store.repos and seconds < 15


@pytest.mark.slow
def test_publish_cli_against_a_hanging_hub_ends_with_a_sentence(sources, tmp_path, fake_hub):
    bundle = build(sources, tmp_path / "b1", repo_id=REPO)
    fake_hub.stop_answering()
    args = ["publish", "--repo-id", REPO, "--version", "1.0.0", "--bundle", str(bundle), "--timeout", "1"]
    done = muon_repro(args, hub_env(tmp_path, fake_hub.url))
    assert done.returncode == 2
    assert f"muon-repro publish: error: the Hub at {fake_hub.url} did not answer within 1 s while reading" in done.stderr
    assert "Traceback" not in done.stderr and TOKEN not in done.stdout + done.stderr


def test_download_from_a_hub_that_never_answers(fake_hub, hub_api, tmp_path):
    fake_hub.stop_answering()
    _, error, _ = bounded(lambda: download(REPO, local_dir=tmp_path / "d", api=hub_api, echo=_quiet, timeout=0.5))
    assert isinstance(error, DownloadError)
    assert str(error) == (
        f"the Hub at {fake_hub.url} did not answer within 0.5 s while downloading {REPO} (its newest version); "
        "nothing was downloaded"
    )


def test_timeout_must_be_positive(sources, tmp_path, fake_hub, hub_api):
    with pytest.raises(ValueError, match="--timeout must be a positive number of seconds, got 0"):
        publish(build(sources, tmp_path / "b1"), REPO, "1.0.0", api=hub_api, echo=_quiet, timeout=0)
    assert fake_hub.requests == []


# ---------------------------------------------------------------------- 2. publish runs verify first


def test_publish_refuses_a_bundle_that_fails_verify_and_lists_the_failures(sources, tmp_path, fake_hub, hub_api):
    trace = next(sources["traces"].rglob("rank1.json.gz"))
    trace.write_bytes(b"not gzip at all")  # in the manifest like any file: only verify sees it is no trace
    bundle = build(sources, tmp_path / "b1")
    with pytest.raises(ValueError) as refused:
        publish(bundle, REPO, "1.0.0", api=hub_api, echo=_quiet)
    message = str(refused.value)
    assert message.startswith(f"the bundle {bundle} fails 1 of the checks of `muon-repro verify`; nothing was sent to the Hub.")
    assert "\n  - trace traces/comparison/muon_dp2_tp1/rank1.json.gz: " in message
    assert fake_hub.requests == []


# ---------------------------------------------------------------------- 3. an empty table


def test_a_table_without_rows_is_left_out_of_the_configs_and_the_bundle_verifies(sources, tmp_path, fake_hub, hub_api):
    # What a one-configuration `muon-repro run` makes: no Muon/AdamW pair, so no comparison rows.
    no_rows = {"muon_run": pa.array([], pa.string()), "comm_time_ratio": pa.array([], pa.float64())}
    _write_table(sources["metrics"], "comparisons", no_rows)
    bundle = build(sources, tmp_path / "b1")
    result = verify_bundle(bundle)  # loads every config with datasets.load_dataset
    assert result.ok, result.failed
    loaded = ["runs", "steps", "collectives", "claims", "environment"]
    assert [line.split(":")[0] for line in result.passed if line.startswith("config")] == [f"config '{n}'" for n in loaded]
    card = (bundle / "README.md").read_text()
    meta = read_card_metadata(card)
    assert [c["config_name"] for c in meta["configs"]] == loaded
    assert [i["config_name"] for i in meta["dataset_info"]] == loaded
    assert "left out of the configs (`datasets` cannot load a table without rows):\n`comparisons`." in card
    assert "(docs/method.md#comparisons) | 0: not a config in this version |" in card
    assert (bundle / "metrics" / "comparisons.parquet").is_file()  # still published, with its columns
    assert publish(bundle, REPO, "1.0.0", api=hub_api, echo=_quiet).tagged


# ---------------------------------------------------------------------- 4. download of a missing repository or revision


def test_download_of_a_missing_repository_says_so(fake_hub, hub_api, tmp_path):
    with pytest.raises(DownloadError) as missing:
        download("test-org/no-such-data", revision="v1.0.0", local_dir=tmp_path / "d", api=hub_api, echo=_quiet)
    assert str(missing.value) == (
        f"dataset repository test-org/no-such-data does not exist on {fake_hub.url}, or it is private and the token "
        "(from HfApi(token=...)) cannot read it"
    )  # the whole message, so no raw "404 Client Error" text (a port such as 40493 may contain "404")


def test_download_of_a_missing_revision_lists_the_versions(fake_hub, hub_api, tmp_path):
    repo = fake_hub.store.create_repo("dataset", REPO)
    repo.tags.update({"v1.0.0": repo.branches["main"], "v1.10.0": repo.branches["main"], "v1.2.0": repo.branches["main"]})
    with pytest.raises(DownloadError) as missing:
        download(REPO, revision="v9.9.9", local_dir=tmp_path / "d", api=hub_api, echo=_quiet)
    listed = "its versions: v1.0.0, v1.2.0, v1.10.0 (branches: main)"  # in version order, not text order
    assert str(missing.value) == f"revision v9.9.9 does not exist in {REPO}; {listed}"


@pytest.mark.slow
def test_download_cli_of_a_missing_repository_is_one_line(fake_hub, tmp_path):
    done = muon_repro(
        ["download", "--repo-id", "test-org/no-such-data", "--local-dir", str(tmp_path / "d")], hub_env(tmp_path, fake_hub.url)
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"muon-repro download: error: dataset repository test-org/no-such-data does not exist on {fake_hub.url}, "
        "or it is private and the token (from HF_TOKEN) cannot read it"
    )


# ---------------------------------------------------------------------- 5. the URL on the endpoint in use


def test_publish_prints_the_url_on_the_endpoint_in_use(sources, tmp_path, fake_hub, hub_api):
    lines: list[str] = []
    publish(build(sources, tmp_path / "b1"), REPO, "1.0.0", api=hub_api, echo=lines.append)
    assert lines[-2].endswith(f": {fake_hub.url}/datasets/{REPO}/tree/v1.0.0")  # then the citation, on the same endpoint
    assert not any("huggingface.co" in line for line in lines)


# ---------------------------------------------------------------------- 6. a token that cannot be sent


def test_a_non_ascii_token_is_refused_by_position_without_showing_it(sources, tmp_path, fake_hub, hub_api):
    from huggingface_hub import HfApi

    bundle = build(sources, tmp_path / "b1")
    api = HfApi(endpoint=fake_hub.url, token=BAD_TOKEN)
    for call in (
        lambda: publish(bundle, REPO, "1.0.0", api=api, echo=_quiet, dry_run=True),
        lambda: download(REPO, revision="v1.0.0", local_dir=tmp_path / "d", api=api, echo=_quiet),
    ):
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == (
            "the Hugging Face token (from HfApi(token=...)) contains a non-ASCII character at position 10 of 16; "
            "paste it again (a token is plain ASCII, hf_ followed by letters and digits)"
        )
    assert fake_hub.requests == []


@pytest.mark.slow
@pytest.mark.parametrize("command", ["publish", "download"])
def test_a_non_ascii_hf_token_is_a_one_line_error_that_never_shows_the_token(command, sources, tmp_path, fake_hub):
    bundle = build(sources, tmp_path / "b1", repo_id=REPO)
    args = {
        "publish": ["publish", "--repo-id", REPO, "--version", "1.0.0", "--bundle", str(bundle), "--dry-run"],
        "download": ["download", "--repo-id", REPO, "--revision", "v1.0.0", "--local-dir", str(tmp_path / "d")],
    }[command]
    done = muon_repro(args, hub_env(tmp_path, fake_hub.url, token=BAD_TOKEN))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"muon-repro {command}: error: the Hugging Face token (from HF_TOKEN) contains a non-ASCII character at position 10 "
        "of 16; paste it again (a token is plain ASCII, hf_ followed by letters and digits)"
    )
    for piece in ("Secret", "Rest42", "\u00e9"):
        assert piece not in done.stdout + done.stderr
    assert fake_hub.requests == []


def test_a_control_character_in_the_token_is_named_too():
    from muon_repro.dataset.naming import check_token

    with pytest.raises(
        ValueError, match=r"^the Hugging Face token \(from HF_TOKEN\) contains a control character at position 5 of 7;"
    ):
        check_token("hf_a\tbc", "HF_TOKEN")
    assert check_token("hf_abc", "HF_TOKEN") == "hf_abc"


# ---------------------------------------------------------------------- 7. a --local-dir that already holds files


def _two_versions(fake_hub) -> tuple[str, str]:
    """v1.0.0, then v1.1.0 without one of its files; their commits."""
    fake_hub.store.create_repo("dataset", REPO)
    old = fake_hub.push(REPO, {"README.md": b"# v1.0.0\n", "metrics/runs.csv": b"run\na\n", "metrics/gone.csv": b"x\n1\n"})
    new = fake_hub.push(REPO, {"README.md": b"# v1.1.0\n", "metrics/gone.csv": None, "metrics/added.csv": b"y\n2\n"})
    fake_hub.get_repo(REPO).tags.update({"v1.0.0": old, "v1.1.0": new})
    return old, new


def _contents(folder) -> dict[str, bytes]:
    """Every file under ``folder``, huggingface_hub's metadata included: path -> bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _dataset_files(folder) -> dict[str, bytes]:
    return {p: data for p, data in _contents(folder).items() if not p.startswith(".cache/")}


def test_download_of_another_revision_into_a_used_local_dir_is_refused_and_changes_nothing(fake_hub, hub_api, tmp_path):
    old, new = _two_versions(fake_hub)
    folder = tmp_path / "d"
    download(REPO, revision="v1.0.0", local_dir=folder, api=hub_api, echo=_quiet)
    before = _contents(folder)
    fetched = sum(1 for _, path in fake_hub.requests if "/resolve/" in path)
    with pytest.raises(DownloadError) as refused:
        download(REPO, revision="v1.1.0", local_dir=folder, api=hub_api, echo=_quiet)
    assert str(refused.value) == (
        f"--local-dir {folder} already holds files of another revision of {REPO}: 4 files from v1.0.0 (commit {old}), "
        f"among them README.md, metrics/gone.csv, metrics/runs.csv; the requested v1.1.0 is commit {new}. The files "
        "v1.1.0 lacks would stay beside its own, a copy of no one version, so nothing was downloaded: choose an empty "
        f"--local-dir, or remove {folder} and run the command again"
    )  # the 4th file is the Hub's .gitattributes, named last
    assert _contents(folder) == before
    assert sum(1 for _, path in fake_hub.requests if "/resolve/" in path) == fetched  # no file was asked for


def test_download_of_the_same_revision_into_its_local_dir_resumes(fake_hub, hub_api, tmp_path):
    _two_versions(fake_hub)
    folder = tmp_path / "d"
    download(REPO, revision="v1.0.0", local_dir=folder, api=hub_api, echo=_quiet)
    complete = _dataset_files(folder)
    # As an interrupted download leaves it: one file never fetched, one moved in before its metadata was written.
    (folder / "metrics" / "runs.csv").unlink()
    (folder / ".cache" / "huggingface" / "download" / "metrics" / "runs.csv.metadata").unlink()
    (folder / ".cache" / "huggingface" / "download" / "README.md.metadata").unlink()
    assert download(REPO, revision="v1.0.0", local_dir=folder, api=hub_api, echo=_quiet) == folder
    assert _dataset_files(folder) == complete == fake_hub.files(REPO, "v1.0.0")


def test_a_branch_that_moves_after_the_local_dir_check_still_gives_the_checked_commit(fake_hub, hub_api, tmp_path, monkeypatch):
    """The files already in --local-dir are checked against the commit ``main`` is then; a push landing before the
    files are fetched must not bring the next commit's files in beside them."""
    fake_hub.store.create_repo("dataset", REPO)
    checked = fake_hub.push(REPO, {"README.md": b"# one\n", "metrics/runs.csv": b"run\na\n"})
    folder = tmp_path / "d"
    download(REPO, revision="main", local_dir=folder, api=hub_api, echo=_quiet)
    (folder / "metrics" / "runs.csv").unlink()  # interrupted: the download is run again
    asked = hub_api.dataset_info
    pushed = []

    def then_main_moves(*args, **kwargs):
        info = asked(*args, **kwargs)
        if not pushed:
            pushed.append(fake_hub.push(REPO, {"README.md": b"# two\n", "metrics/added.csv": b"y\n2\n"}))
        return info

    monkeypatch.setattr(hub_api, "dataset_info", then_main_moves)
    download(REPO, revision="main", local_dir=folder, api=hub_api, echo=_quiet)
    assert pushed and fake_hub.files(REPO, "main") != fake_hub.files(REPO, checked)  # main did move
    assert _dataset_files(folder) == fake_hub.files(REPO, checked)


def test_download_into_an_empty_local_dir_works(fake_hub, hub_api, tmp_path):
    _two_versions(fake_hub)
    folder = tmp_path / "d"
    folder.mkdir()
    assert download(REPO, revision="v1.1.0", local_dir=folder, api=hub_api, echo=_quiet) == folder
    assert _dataset_files(folder) == fake_hub.files(REPO, "v1.1.0")


def test_download_into_a_local_dir_holding_other_files_names_them(fake_hub, hub_api, tmp_path):
    _two_versions(fake_hub)
    folder = tmp_path / "d"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "mine.txt").write_text("my notes\n")
    (folder / "README.md").write_text("a README of my own\n")  # a file of the revision: the download replaces it
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.pyc").write_bytes(b"\0")  # no file of a dataset (verify skips it too)
    before = _contents(folder)
    with pytest.raises(DownloadError) as refused:
        download(REPO, revision="v1.1.0", local_dir=folder, api=hub_api, echo=_quiet)
    assert str(refused.value) == (
        f"--local-dir {folder} holds files that no download put there and that {REPO} v1.1.0 does not have (1 file: "
        "notes/mine.txt). They would stay beside its files, and a copy with files its MANIFEST.sha256 does not list does "
        f"not verify, so nothing was downloaded: choose an empty --local-dir, or move them out of {folder}"
    )
    assert _contents(folder) == before
