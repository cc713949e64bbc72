"""One sweep at a time per run folder: ``<run folder>/.lock`` (``fcntl.flock``, holding the PID of its owner).

A sweep holds the lock of every run folder it plans and records, so a second sweep into the same
``--out`` stops at once naming the first one's PID instead of sharing its ``.partial`` folders.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from muon_repro.bench.errors import BenchError

LOCK_NAME = ".lock"  # in each run folder while a sweep records it; hidden, so never published or analyzed


def _lock_holder(fd: int) -> str:
    """The PID written in a lock file, as text for a message."""
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return f"PID {text}" if text.isdigit() else "PID unknown"


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _lock_run_dir(run_dir: Path) -> int:
    """Hold ``run_dir/.lock`` exclusively (it gets our PID); BenchError naming the holder if another process has it."""
    path = run_dir / LOCK_NAME
    while True:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            continue  # the folder went away between mkdir and open: make it again
        except OSError as exc:
            raise ValueError(f"cannot create {path} ({exc.strerror}); give an --out you can write to") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            os.close(fd)
            raise BenchError(
                f"{run_dir} is being recorded by another muon-repro bench ({holder}); wait for it to finish "
                "and run again (its complete trials are then skipped), or record into another --out"
            ) from None
        if _same_file(fd, path):  # not a file the previous holder removed after we opened it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)


def _unlock_run_dir(run_dir: Path, fd: int) -> None:
    # Removed while still held, so that whoever locks next locks a file that stays.
    with contextlib.suppress(FileNotFoundError):
        (run_dir / LOCK_NAME).unlink()
    os.close(fd)


@contextlib.contextmanager
def locked_run_dirs(run_dirs: list[Path]) -> Iterator[None]:
    """Hold the lock of every run folder (in a fixed order, so two sweeps never wait on each other)."""
    held: list[tuple[Path, int]] = []
    try:
        for run_dir in sorted(set(run_dirs)):
            held.append((run_dir, _lock_run_dir(run_dir)))
        yield
    finally:
        for run_dir, fd in reversed(held):
            _unlock_run_dir(run_dir, fd)
