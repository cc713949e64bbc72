"""``muon-repro download --repo-id ORG/NAME``: fetch one version of the dataset (then ``verify`` checks it).

Same as ``hf download ORG/NAME --repo-type dataset --revision vX.Y.Z [--local-dir DIR]``; without
``--revision`` the newest ``vX.Y.Z`` tag is taken (``main`` if there is none). A repository or a
revision that does not exist is said so, with the versions there are; every request waits at
most ``timeout`` seconds for the Hub.

A ``--local-dir`` that already holds files is looked at first (:func:`check_local_dir`): ``hf`` removes nothing, so
the files of another revision that this one lacks, or files no download put there, would stay beside the new ones and
the copy would be no one version. That is refused before anything is downloaded; a download of the same commit there
(one that was interrupted) goes on, and fetches that commit even if a branch it was asked by moves meanwhile.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from muon_repro.dataset.manifest import MANIFEST_NAME, is_ignored
from muon_repro.dataset.naming import check_repo_id, check_revision, version_key
from muon_repro.hub.errors import shown_endpoint
from muon_repro.hub.publish import (
    DEFAULT_TIMEOUT_S,
    PublishError,
    check_timeout,
    hub_step,
    hub_timeout,
    token_in_use,
    token_source,
)
from muon_repro.tables.files import check_out_folder, list_files, open_regular
from muon_repro.terminal import shown

# huggingface_hub's bookkeeping in a --local-dir (huggingface_hub._local_folder, the same from 0.23 to 2.x): for each
# file it downloaded, download/<the file's path>.metadata, three lines: the commit the file came from, its etag, and
# the time the metadata was written.
HF_FOLDER = (".cache", "huggingface")
_COMMIT = re.compile(r"[0-9a-f]{40}")
SHOWN_FILES = 3  # files a message names, then how many more


class DownloadError(ValueError):
    """The repository, the revision or the Hub was not there; the message says which."""


def latest_version_tag(api: Any, repo_id: str) -> str | None:
    refs = api.list_repo_refs(repo_id, repo_type="dataset")
    versions = [(version_key(t.name), t.name) for t in refs.tags if version_key(t.name) is not None]
    return max(versions)[1] if versions else None


def _versions_there(api: Any, repo_id: str) -> str:
    """The repository's version tags and branches, for a message (empty if they cannot be read)."""
    try:
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
    except Exception:  # a message about another error: whatever goes wrong here is not worth reporting
        return ""
    tags = sorted((t.name for t in refs.tags if version_key(t.name) is not None), key=version_key)
    branches = sorted(b.name for b in refs.branches)
    versions = f"its versions: {', '.join(tags)}" if tags else "it has no version tag yet"
    return f"; {versions} (branches: {', '.join(branches) or 'none'})"


def _missing_repository(api: Any, repo_id: str, token: str | None) -> str:
    endpoint = shown_endpoint(api.endpoint)
    if token:
        who = f"the token (from {token_source(api)}) cannot read it"
    else:
        who = "no token was found to read it with (set HF_TOKEN or run `hf auth login`)"
    return f"dataset repository {repo_id} does not exist on {endpoint}, or it is private and {who}"


def _commit_of(metadata: Path) -> str | None:
    """The commit on the first line of a download's ``.metadata`` file; None without one (as ``huggingface_hub`` takes
    a metadata file it cannot read: no metadata)."""
    try:
        with open_regular(metadata, "r", encoding="utf-8") as f:
            first = f.readline(100).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return first if _COMMIT.fullmatch(first) else None


def files_by_commit(folder: Path) -> tuple[dict[str, list[str]], list[str]]:
    """What ``folder`` holds outside ``huggingface_hub``'s own ``.cache/huggingface/``: commit -> the files (POSIX
    paths) its download metadata says came from that commit, and the files without metadata. One walk
    (:func:`~muon_repro.tables.files.list_files`, which refuses a link to a folder by name, as verify does) and one
    short read per file: nothing is hashed, nothing is written."""
    from_commit: dict[str, list[str]] = {}
    unknown: list[str] = []
    bookkeeping = folder.joinpath(*HF_FOLDER)
    for path in list_files(folder):  # a missing folder: nothing
        if path.startswith("/".join(HF_FOLDER) + "/"):
            continue
        commit = _commit_of(bookkeeping.joinpath("download", *f"{path}.metadata".split("/")))
        if commit is None:
            unknown.append(path)
        else:
            from_commit.setdefault(commit, []).append(path)
    return from_commit, unknown


def _some(paths: list[str], source: str = "") -> str:
    """``3 files[ from SOURCE]: a, b, c`` or ``40 files[ from SOURCE], among them a, b, c`` (the dataset's own files
    before hidden ones)."""
    named = ", ".join(shown(p) for p in sorted(paths, key=lambda p: (is_ignored(p), p))[:SHOWN_FILES])
    count = f"{len(paths)} file{'' if len(paths) == 1 else 's'}{f' from {source}' if source else ''}"
    return f"{count}: {named}" if len(paths) <= SHOWN_FILES else f"{count}, among them {named}"


def _names_of_commits(api: Any, repo_id: str) -> dict[str, list[str]]:
    """Commit -> the tags (versions first, in order) and branches at it, for a message (empty if they cannot be read)."""
    try:
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
    except Exception:  # a message about another refusal: whatever goes wrong here is not worth reporting
        return {}
    names: dict[str, list[str]] = {}
    tags = sorted(refs.tags, key=lambda t: (version_key(t.name) is None, version_key(t.name) or (), t.name))
    for ref in [*tags, *sorted(refs.branches, key=lambda b: b.name)]:
        names.setdefault(ref.target_commit, []).append(shown(ref.name))
    return names


def check_local_dir(api: Any, repo_id: str, revision: str, folder: Path, label: str) -> str | None:
    """Refuse (a DownloadError) to download ``revision`` into ``folder`` (``label`` in messages) when files already
    there came from another commit, or when files no download put there are not in ``revision`` (both would stay
    beside the new files). Asks the Hub which commit ``revision`` is only when ``folder`` holds files, and returns
    that commit (None when it did not ask): the one to download, should a branch move meanwhile."""
    from_commit, unknown = files_by_commit(folder)
    if not from_commit and not unknown:
        return None
    info = api.dataset_info(repo_id, revision=revision)
    wanted = info.sha
    others = {commit: paths for commit, paths in sorted(from_commit.items()) if commit != wanted}
    if others:
        names = _names_of_commits(api, repo_id)
        sources = {c: f"{', '.join(names[c])} (commit {c})" if names.get(c) else f"commit {c}" for c in others}
        found = " and ".join(_some(paths, sources[commit]) for commit, paths in others.items())
        raise DownloadError(
            f"{label} already holds files of another revision of {repo_id}: {found}; the requested {revision} is commit "
            f"{wanted}. The files {revision} lacks would stay beside its own, a copy of no one version, so nothing was "
            f"downloaded: choose an empty --local-dir, or remove {folder} and run the command again"
        )
    in_revision = {sibling.rfilename for sibling in info.siblings or []}
    foreign = [p for p in unknown if p not in in_revision and not is_ignored(p)]
    if foreign:
        raise DownloadError(
            f"{label} holds files that no download put there and that {repo_id} {revision} does not have ({_some(foreign)}). "
            f"They would stay beside its files, and a copy with files its {MANIFEST_NAME} does not list does not verify, "
            f"so nothing was downloaded: choose an empty --local-dir, or move them out of {folder}"
        )
    return wanted


@contextlib.contextmanager
def _said_plainly(api: Any, repo_id: str, revision: str, token: str | None, timeout: float, state: str) -> Iterator[None]:
    """The Hub's 404s and silences as sentences: which of repository and revision is missing, or that the Hub
    did not answer (``state``: what is left on disk then)."""
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        with hub_step(api.endpoint, timeout, f"downloading {repo_id} {revision}", state):
            try:
                yield
            except LocalEntryNotFoundError as exc:
                # snapshot_download's "cannot reach the Hub, and no copy in the cache": the cause is the transport error.
                if exc.__cause__ is not None:
                    raise exc.__cause__ from None
                raise
    except PublishError as exc:
        raise DownloadError(str(exc)) from None
    except RevisionNotFoundError:
        raise DownloadError(f"revision {revision} does not exist in {repo_id}{_versions_there(api, repo_id)}") from None
    except RepositoryNotFoundError:
        raise DownloadError(_missing_repository(api, repo_id, token)) from None


def download(
    repo_id: str,
    revision: str | None = None,
    local_dir: str | Path | None = None,
    *,
    api: Any = None,
    echo: Callable[[str], None] = print,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Path:
    """Download ``repo_id`` at ``revision`` into ``local_dir`` (or the Hub cache); returns the folder."""
    check_repo_id(repo_id)
    if revision is not None:
        check_revision(revision)
    timeout = check_timeout(timeout)
    if local_dir is not None:  # before the Hub is asked anything: a place that cannot be written is said at once
        check_out_folder(Path(local_dir), f"--local-dir {local_dir}")
    from huggingface_hub import HfApi, snapshot_download

    api = api if api is not None else HfApi()
    token = token_in_use(api)
    with hub_timeout(timeout):
        if revision is None:
            with _said_plainly(api, repo_id, "(its newest version)", token, timeout, "nothing was downloaded"):
                revision = latest_version_tag(api, repo_id) or "main"
            echo(f"No --revision given: using {revision}.")
        checked = None  # the commit the files in --local-dir were checked against
        if local_dir is not None:
            with _said_plainly(api, repo_id, revision, token, timeout, "nothing was downloaded"):
                checked = check_local_dir(api, repo_id, revision, Path(local_dir), f"--local-dir {local_dir}")
        resumable = "the download is incomplete: run it again to finish it (files already fetched are kept)"
        with _said_plainly(api, repo_id, revision, token, timeout, resumable):
            path = snapshot_download(
                repo_id,
                repo_type="dataset",
                revision=checked or revision,
                local_dir=str(local_dir) if local_dir is not None else None,
                endpoint=api.endpoint,
                token=api.token,
            )
    echo(f"Downloaded {repo_id} {revision} to {path}")
    return Path(path)
