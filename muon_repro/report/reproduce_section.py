"""The report's "How to reproduce" section: the commands that recorded the runs, then those that made the report.

"How to cite" shows the entries its caller rendered (:func:`muon_repro.dataset.citation.bibtex`, the card's
own, and the paper's): the report sits below the dataset and does not spell a citation of its own."""

from __future__ import annotations

from collections.abc import Iterable

from muon_repro.report.data import MissingMetric, ReportData, is_missing, require_columns


def reproduce(data: ReportData, invocations: Iterable[str]) -> list[str]:
    """The recording commands (runs.command, each once), then the commands that made this report."""
    require_columns(data.runs, "runs", ("command",))
    recorded = list(dict.fromkeys(str(c) for c in data.runs["command"] if not is_missing(c) and str(c).strip()))
    if not recorded:
        raise MissingMetric("metric runs.command is missing for every run: no run records the command that made it")
    return [*recorded, *invocations]
