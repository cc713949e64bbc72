"""Files, safely: writing without leaving anything half-written, one file (:func:`write_atomic`) or
one folder (:func:`staged_dir`, :func:`swap_dir`); the check every command runs on its output folder
before any work (:func:`check_out_folder`); a generated block between two marker lines of a hand-written
document (:func:`with_block`); hashing in one pass, listing a tree, sizes for people. Standard library only."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

CHUNK = 4 * 2**20  # bytes read at a time when hashing


def write_atomic(path: str | Path, content: str | bytes | Callable[[Path], object]) -> Path:
    """Write ``content`` to a temporary name beside ``path``, then rename it over ``path``.

    ``content`` is the text (UTF-8) or bytes to write, or a function that writes the file whose
    path it is given (a Parquet writer, ``savefig``). A reader sees the old file or the new one,
    never a part; the temporary file is removed when writing fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name no other writer has (pid and random part), made with the umask's mode, as a plain write would.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        if callable(content):
            content(tmp)
        else:
            with open(tmp, "xb") as f:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def new_sibling_dir(out: Path, role: str) -> Path:
    """A new hidden folder beside ``out`` (with ``out``'s mode when it exists, else the umask's)."""
    folder = out.with_name(f".{out.name}.{role}-{os.getpid()}-{secrets.token_hex(4)}")
    folder.mkdir()
    if out.is_dir():
        folder.chmod(out.stat().st_mode & 0o7777)
    return folder


def swap_dir(stage: Path, out: Path) -> None:
    """Put the folder ``stage`` where ``out`` is; the previous ``out`` is removed once the new one
    is in place, and put back if the swap fails."""
    if not out.exists():
        os.rename(stage, out)
        return
    old = new_sibling_dir(out, "old")
    os.rename(out, old)  # onto the empty folder just made: a name no other writer can have taken
    try:
        os.rename(stage, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged_dir(out: str | Path) -> Iterator[Path]:
    """A new folder beside ``out`` to fill; swapped in for ``out`` whole when the block ends, removed
    (``out`` untouched) when it raises."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = new_sibling_dir(out, "stage")
    try:
        yield stage
        swap_dir(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def check_out_folder(out: str | Path, label: str, *, replaced_whole: bool = False) -> None:
    """Refuse ``out`` (named ``label`` in the messages, say ``--out metrics``) when it is a file, or
    when it cannot be made or written: a folder is created in it, or in its nearest existing parent,
    and removed. ``replaced_whole``: the folder is swapped for a sibling, so its parent must be
    writable too."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{label} is a file, not a folder: choose a folder (it is created if missing)")
    target = (out.parent if replaced_whole and out.is_dir() else out).absolute()
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"{label} cannot be created: {existing} is a file, not a folder; choose another place")
    try:
        tempfile.TemporaryDirectory(prefix=".muon-repro-probe-", dir=existing).cleanup()
    except OSError as exc:
        raise ValueError(
            f"{label}: no permission to write in {existing}, so it cannot be written ({exc.strerror}); "
            "choose a folder you can write"
        ) from exc


def with_block(text: str, begin_line: str, end_line: str, block: str, what: str) -> str:
    """``text`` with whatever stands between its lines ``begin_line`` and ``end_line`` replaced by ``block``
    (README.md's claims, docs/architecture.md's module map); a ValueError naming ``what`` without both lines."""
    head, begin, rest = text.partition(begin_line)
    _, end, tail = rest.partition(end_line)
    if not begin or not end:
        raise ValueError(f"no {begin_line!r} ... {end_line!r} lines to put {what} between")
    return f"{head}{begin_line}{block}{end_line}{tail}"


def write_block(path: str | Path, markers: tuple[str, str], block: str, what: str) -> None:
    """Replace the block between ``markers`` in the file at ``path`` by ``block`` (atomically), as the docs'
    generated tables are written (:func:`with_block`'s ValueError names ``what`` when the markers are missing)."""
    path = Path(path)
    write_atomic(path, with_block(path.read_text(encoding="utf-8"), *markers, f"\n{block}\n", what))


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
