"""A folder that refuses writes, also to root: its mode says so, and where the test runs as root (whom modes do
not stop, as in CI) the write probe of ``muon_repro.tables.files`` fails in it as the system would for anyone else."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest


def make_unwritable(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``folder`` (existing) refuses writes until the test ends (then the monkeypatch is undone; restore the mode with
    ``folder.chmod(0o700)`` so that pytest can remove it)."""
    folder.chmod(0o500)
    if os.geteuid() != 0:
        return
    real = tempfile.TemporaryDirectory

    def probe(*args, dir=None, **kwargs):  # noqa: A002 (tempfile's own keyword)
        if dir is not None and Path(dir).absolute() == folder.absolute():
            raise PermissionError(13, "Permission denied", str(dir))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryDirectory", probe)
