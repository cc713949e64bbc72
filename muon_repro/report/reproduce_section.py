"""The report's "How to reproduce" section: the commands that recorded the runs, then those that made the report.

"How to cite" shows the entries its caller rendered (:func:`muon_repro.dataset.citation.bibtex`, the card's
own, and the paper's): the report sits below the dataset and does not spell a citation of its own."""

from __future__ import annotations

from collections.abc import Iterable

from muon_repro.report.data import MissingMetric, ReportData, is_missing, require_columns

# The tables of recorded runs besides ``runs``, each with the command that recorded a row: the regime sweep, the
# convergence runs, the original study's protocol replayed. A table without rows (never recorded) adds nothing.
OTHER_RECORDINGS = ("regimes", "convergence_runs", "study_runs")


def reproduce(data: ReportData, invocations: Iterable[str]) -> list[str]:
    """The recording commands, each once: the runs table's (every profile's) first, then those of the regime sweep,
    the convergence runs and the study's protocol; then the commands that made this report."""
    require_columns(data.runs, "runs", ("command",))
    recorded = _commands(data.runs)
    if not recorded:
        raise MissingMetric("metric runs.command is missing for every run: no run records the command that made it")
    for name in OTHER_RECORDINGS:
        table = getattr(data, name)
        if len(table):
            require_columns(table, name, ("command",))
            recorded += _commands(table)
    return [*dict.fromkeys(recorded), *invocations]


def _commands(table) -> list[str]:
    return list(dict.fromkeys(str(c) for c in table["command"] if not is_missing(c) and str(c).strip()))
