"""``muon-repro download --repo-id ORG/NAME``: fetch one version of the dataset (then ``verify`` checks it).

Same as ``hf download ORG/NAME --repo-type dataset --revision vX.Y.Z [--local-dir DIR]``; without
``--revision`` the newest ``vX.Y.Z`` tag is taken (``main`` if there is none). A repository or a
revision that does not exist is said so, with the versions there are; every request waits at
most ``timeout`` seconds for the Hub.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from muon_repro.dataset.naming import check_repo_id, check_revision, version_key
from muon_repro.hub.publish import (
    DEFAULT_TIMEOUT_S,
    PublishError,
    check_timeout,
    hub_step,
    hub_timeout,
    token_in_use,
    token_source,
)
from muon_repro.tables.files import check_out_folder


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
    endpoint = str(api.endpoint).rstrip("/")
    if token:
        who = f"the token (from {token_source(api)}) cannot read it"
    else:
        who = "no token was found to read it with (set HF_TOKEN or run `hf auth login`)"
    return f"dataset repository {repo_id} does not exist on {endpoint}, or it is private and {who}"


@contextlib.contextmanager
def _said_plainly(api: Any, repo_id: str, revision: str, token: str | None, timeout: float, state: str) -> Iterator[None]:
    """The Hub's 404s and silences as sentences: which of repository and revision is missing, or that the Hub
    did not answer (``state``: what is left on disk then)."""
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    endpoint = str(api.endpoint).rstrip("/")
    try:
        with hub_step(endpoint, timeout, f"downloading {repo_id} {revision}", state):
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
        resumable = "the download is incomplete: run it again to finish it (files already fetched are kept)"
        with _said_plainly(api, repo_id, revision, token, timeout, resumable):
            path = snapshot_download(
                repo_id,
                repo_type="dataset",
                revision=revision,
                local_dir=str(local_dir) if local_dir is not None else None,
                endpoint=api.endpoint,
                token=api.token,
            )
    echo(f"Downloaded {repo_id} {revision} to {path}")
    return Path(path)
