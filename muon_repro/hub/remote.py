"""Reading a dataset repository at one revision: its head, its file list, one file's text, a set of files.

Shared by ``contribute`` and ``review``; every call goes through the ``HfApi`` given (its endpoint
and token), so the fake Hub of the tests and the real one are read the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from muon_repro.hub.plan import RemoteFile, list_remote

__all__ = ["RemoteFile", "download", "head_commit", "list_remote", "read_text"]


def head_commit(api: Any, repo_id: str, revision: str) -> str:
    """The commit ``revision`` (a branch, tag or ``refs/pr/N``) points at now."""
    return str(api.repo_info(repo_id, repo_type="dataset", revision=revision).sha)


DOWNLOAD_WORKERS = 8  # as snapshot_download: a review fetches hundreds of small files, each a round trip


def download(
    api: Any, repo_id: str, paths: Iterable[str], revision: str, local_dir: Path, *, workers: int = DOWNLOAD_WORKERS
) -> Path:
    """Download ``paths`` at ``revision`` (a commit id, to read a fixed tree) into ``local_dir``, keeping their paths.

    Several files at a time: most of a small file's time is the request's round trip. Exact paths,
    not ``snapshot_download``'s patterns, so a name with ``[`` or ``*`` means itself and the cost is
    one request per file, whatever else the repository holds. The first failure is raised.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive number of parallel downloads, got {workers!r}")

    def fetch(path: str) -> None:
        api.hf_hub_download(repo_id, path, repo_type="dataset", revision=revision, local_dir=str(local_dir))

    wanted = sorted(set(paths))
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(wanted)))) as pool:
        for _ in pool.map(fetch, wanted):  # in order, so an error surfaces as it would one file at a time
            pass
    return local_dir


def read_text(api: Any, repo_id: str, path: str, revision: str, scratch: Path) -> str:
    """One file's text at ``revision``, downloaded into ``scratch``."""
    return (download(api, repo_id, [path], revision, scratch) / path).read_text(encoding="utf-8")
