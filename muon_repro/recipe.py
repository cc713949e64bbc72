"""The one regeneration recipe: how a download of the dataset, or a checkout of the repository, rebuilds every table,
figure, the report and the bundle from the traces it holds, recording nothing.

The card, the report, the README and docs/publishing.md all print :func:`recipe_lines`, so there is one recipe; a
slow test (tests/test_regenerate.py) follows the card's copy inside a downloaded bundle and compares every table
frame for frame. Paths are relative to the download's folder; nothing in it re-records (no ``--force``): recording
is ``muon-repro run`` without ``--from``, on the reader's own machine, under its own hardware profile.
"""

from __future__ import annotations

SET_UP = 'python -m pip install -c constraints.txt -e ".[dev]"'
REBUILD = "muon-repro run --from analyze"
VERIFY = "muon-repro verify dist/dataset"

RECIPE = (
    (SET_UP, "set-up: the download carries the package's source and pins"),
    (REBUILD, "traces -> tables, figures, report, card, bundle; records nothing"),
    (VERIFY, "the rebuilt bundle: every file, table and trace"),
)


def recipe_lines(width: int | None = None) -> list[str]:
    """The recipe as shell lines, each command followed by its comment, the comments aligned."""
    pad = width if width is not None else max(len(cmd) for cmd, _ in RECIPE)
    return [f"{cmd.ljust(pad)}   # {what}" for cmd, what in RECIPE]


def recipe_text() -> str:
    return "\n".join(recipe_lines())
