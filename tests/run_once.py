"""What a test run builds once and every pytest-xdist worker reads: the folder the workers share, and the lock
under which the first worker to need a thing builds it while the others wait for it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every xdist worker of this run sees (the base temp folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(folder: Path, build: Callable[[Path], str], done: str = "done") -> str:
    """``folder`` built by ``build`` once per test run, whichever worker comes first; the text ``build`` returns is
    written to ``folder/done`` last, and returned to every caller. A folder left without it (a worker killed while
    building) is built again from scratch."""
    marker = folder / done
    with FileLock(str(folder) + ".lock"):
        if not marker.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            text = build(folder)  # it makes the folder
            marker.write_text(text)
        return marker.read_text()
