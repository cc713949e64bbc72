"""Reading a dataset repository at one revision: its head, its file list, one file's text, a set of files.

Shared by ``contribute`` and ``review``; every call goes through the ``HfApi`` given (its endpoint
and token), so the fake Hub of the tests and the real one are read the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from muon_repro.hub.plan import RemoteFile, list_remote
from muon_repro.values import is_count

__all__ = ["RemoteFile", "download", "head_commit", "list_remote", "read_text"]


def head_commit(api: Any, repo_id: str, revision: str) -> str:
    """The commit ``revision`` (a branch, tag or ``refs/pr/N``) points at now."""
    return str(api.repo_info(repo_id, repo_type="dataset", revision=revision).sha)


SETTLE_S = 2.0  # after Ctrl-C, how long the downloads in flight may finish before the workers are left behind
DOWNLOAD_WORKERS = 8  # as snapshot_download: a review fetches hundreds of small files, each a round trip


def download(
    api: Any, repo_id: str, paths: Iterable[str], revision: str, local_dir: Path, *, workers: int = DOWNLOAD_WORKERS
) -> Path:
    """Download ``paths`` at ``revision`` (a commit id, to read a fixed tree) into ``local_dir``, keeping their paths.

    Several files at a time: most of a small file's time is the request's round trip. Exact paths,
    not ``snapshot_download``'s patterns, so a name with ``[`` or ``*`` means itself and the cost is
    one request per file, whatever else the repository holds. After a failure no new file is
    started; the failure of the first path (in sorted order) is raised once the others in flight end.
    The workers are daemon threads: Ctrl-C stops the wait at once (no new file starts) and does not
    keep the process alive until requests to a Hub that stopped answering time out.
    """
    if not is_count(workers):
        raise ValueError(f"workers must be a positive number of parallel downloads, got {workers!r}")

    ordered = sorted(set(paths))
    wanted = iter(ordered)
    lock = threading.Lock()
    failures: dict[str, BaseException] = {}
    stopped = threading.Event()  # a failure, or Ctrl-C in the caller: start no new file

    def next_path() -> str | None:
        with lock:
            return None if stopped.is_set() else next(wanted, None)

    def work() -> None:
        while (path := next_path()) is not None:
            try:
                api.hf_hub_download(repo_id, path, repo_type="dataset", revision=revision, local_dir=str(local_dir))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, which raises it
                with lock:
                    failures[path] = exc
                stopped.set()

    threads = [threading.Thread(target=work, name=f"hub-download-{i}", daemon=True) for i in range(min(workers, len(ordered)))]
    # Failures reach the caller as exceptions. huggingface_hub's own warnings say nothing more, and one about a file
    # in flight when Ctrl-C arrives (a temporary file gone before its chmod, the caller's folder removed under it)
    # can come before this thread sees the interrupt: quiet from the first file, as long as any thread may run.
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        stopped.set()  # the threads still in flight stay quiet: the level is not restored
        ends = time.monotonic() + SETTLE_S
        for thread in threads:  # let the files in flight land, so that the caller can remove its folder
            thread.join(max(0.0, ends - time.monotonic()))
        raise
    hub_logger.setLevel(level)
    if failures:
        raise failures[min(failures)]
    return local_dir


def read_text(api: Any, repo_id: str, path: str, revision: str, scratch: Path) -> str:
    """One file's text at ``revision``, downloaded into ``scratch``."""
    return (download(api, repo_id, [path], revision, scratch) / path).read_text(encoding="utf-8")
