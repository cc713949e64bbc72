"""Which code a run was recorded with: a content digest of the ``muon_repro`` package, beside the git commit.

A run recorded from a clean tree names its commit (environment.json's ``git_sha``); one recorded from a tree with
changes (``git_dirty``), or with no git at all (a download of the dataset, a machine the tree was copied to), is only
identified by what its source said. :func:`source_digest` hashes every file of the package (their paths and their
bytes, in order; caches left out), so that ``muon-repro verify`` can tell whether a run was recorded with the very
source a bundle carries. Imports nothing heavy.

A tree copied without git (a device machine, which gets the working tree's files and not ``.git``) can still name
its commit: ``python -m muon_repro.provenance stamp``, run in a clean checkout, writes :data:`COMMIT_STAMP` at the
repository's root, holding the commit and the digest of what decides how a run runs (the package and its pins,
:func:`tree_digest`). :func:`tree_commit` reads the commit from git, else from the stamp, which names the commit as
clean only while the tree is byte for byte the one it was written for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from pathlib import Path

from muon_repro.tables.files import list_files, write_atomic

SOURCE_DIGEST_FIELD = "source_sha256"
"""environment.json's field holding :func:`source_digest` of the package that recorded the run."""
PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
# What decides how a run runs: the package and what installs it. The artifacts beside it (traces/, metrics/,
# figures/, report/) change as a sweep records, so they never make the source "dirty".
SOURCE_PATHS = ("muon_repro", "pyproject.toml", "constraints.txt")
COMMIT_STAMP = ".muon_repro_commit.json"  # at the repository's root; ignored by git, carried to a device machine


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


def tree_digest(repo: str | Path = REPO_DIR) -> str:
    """sha256 over what decides how a run runs (:data:`SOURCE_PATHS`): the package's digest and its pins' bytes."""
    repo = Path(repo)
    digest = hashlib.sha256(source_digest(repo / "muon_repro").encode())
    for name in SOURCE_PATHS[1:]:
        path = repo / name
        digest.update(f"{name}\0{hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else '-'}\n".encode())
    return digest.hexdigest()


def _git(args: list[str], repo: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def tree_commit(repo: str | Path = REPO_DIR) -> dict:
    """``{"git_sha", "git_dirty"}`` of the tree at ``repo``: from git (dirty: changes under :data:`SOURCE_PATHS`,
    a file git neither tracks nor ignores included, since it is in the package and its digest); without git, from
    :data:`COMMIT_STAMP` (dirty unless :func:`tree_digest` is the stamp's); both null when neither knows."""
    repo = Path(repo)
    sha = _git(["rev-parse", "HEAD"], repo)
    if sha:
        status = _git(["status", "--porcelain", "--untracked-files=normal", "--", *SOURCE_PATHS], repo)
        return {"git_sha": sha, "git_dirty": bool(status) if status is not None else None}
    stamp = read_stamp(repo)
    if stamp is None:
        return {"git_sha": None, "git_dirty": None}
    return {"git_sha": stamp["commit"], "git_dirty": stamp["tree_sha256"] != tree_digest(repo)}


def read_stamp(repo: str | Path = REPO_DIR) -> dict | None:
    """The commit stamp at ``repo`` (:data:`COMMIT_STAMP`), None when there is none or it is no stamp."""
    path = Path(repo) / COMMIT_STAMP
    try:
        stamp = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fields_ok = isinstance(stamp, dict) and all(isinstance(stamp.get(k), str) for k in ("commit", "tree_sha256"))
    return stamp if fields_ok else None


def write_stamp(repo: str | Path = REPO_DIR) -> Path:
    """Write :data:`COMMIT_STAMP` for the clean checkout at ``repo``; a ValueError when it has no commit or has
    changes a run would record with."""
    repo = Path(repo)
    if _git(["rev-parse", "HEAD"], repo) is None:
        raise ValueError(f"{repo}: no git commit to stamp; run this in a git checkout")
    found = tree_commit(repo)
    if found["git_dirty"] is not False:
        raise ValueError(f"{repo}: {', '.join(SOURCE_PATHS)} differ from commit {found['git_sha'][:12]}; commit them first")
    stamp = {"commit": found["git_sha"], "tree_sha256": tree_digest(repo)}
    return write_atomic(repo / COMMIT_STAMP, json.dumps(stamp, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m muon_repro.provenance", description="The commit a tree was copied from.")
    parser.add_argument("action", choices=("stamp", "show"), help="stamp: write the commit stamp; show: the tree's commit")
    parser.add_argument("--repo", type=Path, default=REPO_DIR)
    args = parser.parse_args(argv)
    if args.action == "stamp":
        try:
            path = write_stamp(args.repo)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"wrote {path}: commit {json.loads(path.read_text())['commit']}")
        return 0
    found = tree_commit(args.repo)
    digest = source_digest(args.repo / "muon_repro")
    print(f"commit {found['git_sha'] or 'unknown'}; changed since: {found['git_dirty']}; package sha256 {digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
