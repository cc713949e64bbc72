"""The one regeneration recipe: how a download of the dataset, or a checkout of the repository, rebuilds every table,
figure, the report and the bundle from the traces it holds, recording nothing.

The card, the report, the README and docs/publishing.md all print :func:`recipe_lines`, so there is one recipe (the
card's and the report's copies of a dataset other than the project's add its identity to the rebuild line, so that it
rebuilds as itself); a slow test (tests/test_rebuild_from_download.py) follows the card's copy inside a downloaded
bundle, compares every table frame for frame and verifies the download after. Paths are relative to the download's
folder; nothing in it re-records (no ``--force``): recording is ``muon-repro run`` without ``--from``, on the
reader's own machine, under its own hardware profile.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

SET_UP = 'python -m pip install -c constraints.txt -e ".[dev]"'
REBUILD = "muon-repro run --from analyze"
VERIFY = "muon-repro verify dist/dataset"

RECIPE = (
    (SET_UP, "set-up: the download carries the package's source and pins"),
    (REBUILD, "traces -> tables, figures, report, card, bundle; records nothing"),
    (VERIFY, "the rebuilt bundle: every file, table and trace"),
)


def recipe_lines(width: int | None = None, cite: Sequence[str] = ()) -> list[str]:
    """The recipe as shell lines, each command followed by its comment, the comments aligned. ``cite``: the flags
    that name the dataset rebuilt when it is not the project's (:func:`muon_repro.dataset.citation.report_arguments`),
    so that its card, CITATION.cff and report come out as published."""
    steps = [(f"{cmd} {shlex.join(cite)}" if cmd == REBUILD and cite else cmd, what) for cmd, what in RECIPE]
    pad = width if width is not None else max(len(cmd) for cmd, _ in steps)
    return [f"{cmd.ljust(pad)}   # {what}" for cmd, what in steps]


def recipe_text(cite: Sequence[str] = ()) -> str:
    return "\n".join(recipe_lines(cite=cite))
