"""Run folders with a file swapped for a symbolic link, as a hostile contributor could send them: the
contribution tests (test_contrib_hostile, test_contrib_rules) check that such links are refused by name."""

from __future__ import annotations

from pathlib import Path


def link_outside(path: Path, outside: Path) -> Path:
    """Replace the file ``path`` by a symbolic link to ``outside``, a new file beyond the runs folder
    (what a link would leak); returns ``outside``, which the refusal names."""
    outside.write_text("a file outside the runs folder\n")
    path.unlink()
    path.symlink_to(outside)
    return outside
