"""Small file helpers: atomic writes, hashing in one pass, listing a tree."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

CHUNK = 4 * 2**20


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary name beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: str | Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a file, read in chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def list_files(root: str | Path) -> list[str]:
    """Every regular file under ``root`` as a sorted POSIX path relative to it (symlinks followed)."""
    root = Path(root)
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        for name in filenames:
            full = Path(dirpath) / name
            if full.is_file():
                out.append(full.relative_to(root).as_posix())
    return sorted(out)


def human_size(n: int) -> str:
    """Bytes for people: 512 B, 2.0 kB, 3.4 MB (powers of 1000, as the Hub shows sizes)."""
    if n < 1000:
        return f"{n} B"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000  # type: ignore[assignment]
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")
