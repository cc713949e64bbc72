"""Reading a dataset repository at one revision: its head, its file list, one file's text, a set of files.

Shared by ``contribute`` and ``review``; every call goes through the ``HfApi`` given (its endpoint
and token), so the fake Hub of the tests and the real one are read the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from muon_repro.hub.plan import RemoteFile, list_remote

__all__ = ["RemoteFile", "download", "head_commit", "list_remote", "read_text"]


def head_commit(api: Any, repo_id: str, revision: str) -> str:
    """The commit ``revision`` (a branch, tag or ``refs/pr/N``) points at now."""
    return str(api.repo_info(repo_id, repo_type="dataset", revision=revision).sha)


def download(api: Any, repo_id: str, paths: Iterable[str], revision: str, local_dir: Path) -> Path:
    """Download ``paths`` at ``revision`` (a commit id, to read a fixed tree) into ``local_dir``, keeping their paths."""
    for path in sorted(set(paths)):
        api.hf_hub_download(repo_id, path, repo_type="dataset", revision=revision, local_dir=str(local_dir))
    return local_dir


def read_text(api: Any, repo_id: str, path: str, revision: str, scratch: Path) -> str:
    """One file's text at ``revision``, downloaded into ``scratch``."""
    return (download(api, repo_id, [path], revision, scratch) / path).read_text(encoding="utf-8")
