"""Which code a run was recorded with: a content digest of the ``muon_repro`` package, beside the git commit.

A run recorded from a clean tree names its commit (environment.json's ``git_sha``); one recorded from a tree with
changes (``git_dirty``), or with no git at all (a download of the dataset, a machine the tree was copied to), is only
identified by what its source said. :func:`source_digest` hashes every file of the package (their paths and their
bytes, in order; caches left out), so that ``muon-repro verify`` can tell whether a run was recorded with the very
source a bundle carries. Imports nothing heavy.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from muon_repro.tables.files import list_files

SOURCE_DIGEST_FIELD = "source_sha256"
"""environment.json's field holding :func:`source_digest` of the package that recorded the run."""
PACKAGE_DIR = Path(__file__).resolve().parent


def is_generated(rel: str) -> bool:
    """Whether a file at POSIX path ``rel`` (relative to a folder) is no one's source: hidden, a cache or a temporary
    file. The bundle copies none of them, so a run's digest and its bundled source's agree."""
    parts = rel.split("/")
    return any(p.startswith(".") or p == "__pycache__" for p in parts) or rel.endswith((".pyc", ".tmp"))


def source_files(package: Path) -> list[Path]:
    """The package's files, by relative path, without the generated ones (:func:`is_generated`)."""
    return [package / rel for rel in list_files(package) if not is_generated(rel)]


def source_digest(package: str | Path = PACKAGE_DIR) -> str:
    """sha256 over every file of ``package``: its path relative to the package, a NUL, its sha256, a newline."""
    package = Path(package)
    if not package.is_dir():
        raise FileNotFoundError(f"{package}: no such package folder to hash")
    digest = hashlib.sha256()
    for path in source_files(package):
        digest.update(f"{path.relative_to(package).as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()
