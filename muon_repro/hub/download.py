"""``muon-repro download ORG/NAME``: fetch one version of the dataset (then ``verify`` checks it).

Same as ``hf download ORG/NAME --repo-type dataset --revision vX.Y.Z [--local-dir DIR]``; without
``--revision`` the newest ``vX.Y.Z`` tag is taken (``main`` if there is none).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from muon_repro.hub.naming import check_repo_id, check_revision, version_key


def latest_version_tag(api: Any, repo_id: str) -> str | None:
    refs = api.list_repo_refs(repo_id, repo_type="dataset")
    versions = [(version_key(t.name), t.name) for t in refs.tags if version_key(t.name) is not None]
    return max(versions)[1] if versions else None


def download(
    repo_id: str,
    revision: str | None = None,
    local_dir: str | Path | None = None,
    *,
    api: Any = None,
    echo: Callable[[str], None] = print,
) -> Path:
    """Download ``repo_id`` at ``revision`` into ``local_dir`` (or the Hub cache); returns the folder."""
    check_repo_id(repo_id)
    if revision is not None:
        check_revision(revision)
    from huggingface_hub import HfApi, snapshot_download

    api = api if api is not None else HfApi()
    if revision is None:
        revision = latest_version_tag(api, repo_id) or "main"
        echo(f"No --revision given: using {revision}.")
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
