"""The one check every command runs on its output folder before any work: it is not a file, and
it can be made and written. Torch-, pandas- and numpy-free, so bench, analysis and report share it."""

from __future__ import annotations

import tempfile
from pathlib import Path


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
            f"{label}: no permission to write in {existing}, so it cannot be written ({exc.strerror}); choose a folder you can write"
        ) from exc
