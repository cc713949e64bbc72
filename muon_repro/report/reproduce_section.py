"""The report's "How to reproduce" section: the commands that recorded the runs, then those that made the report; and
the one that brings in the original study's traces where the report has none.

"How to cite" shows the entries its caller rendered (:func:`muon_repro.dataset.citation.bibtex`, the card's
own, and the paper's): the report sits below the dataset and does not spell a citation of its own."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

from muon_repro.report.data import MissingMetric, ReportData, is_missing, require_columns
from muon_repro.study.sources import STUDY_FILES, study_folder

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


def shown(path: Path) -> str:
    """A path as a reader should type it: relative to the working directory when inside it."""
    try:
        resolved, cwd = Path(path).resolve(), Path.cwd()
        return Path(os.path.relpath(resolved, cwd)).as_posix() if resolved.is_relative_to(cwd) else str(path)
    except ValueError:
        return str(path)


def traces_root(data: ReportData) -> Path:
    """Where the analyzed run directories lie: the common root of ``runs.path``
    (``<traces>/[<profile>/]<group>/<name>``, the profile folder left out), else ``traces/`` beside the metrics folder."""
    paths = [Path(str(p)) for p in data.runs["path"]] if "path" in data.runs.columns else []
    if paths and not any(is_missing(p) for p in data.runs["path"]) and all(len(p.parts) > 2 for p in paths):
        try:
            root = Path(os.path.commonpath([str(p.parent.parent) for p in paths]))
        except ValueError:  # absolute and relative paths mixed
            pass
        else:
            return root.parent if root.name in data.profiles and len(root.parts) > 1 else root
    return Path(data.metrics_dir).parent / "traces"


def invocations(
    data: ReportData, figures_dir: Path, out_dir: Path, formats: tuple[str, ...], citation_args: Sequence[str] = ()
) -> list[str]:
    """The commands that remake the tables, the figures and this report from the traces (``citation_args``:
    the report's flags for what it cites, where not the defaults)."""
    m, fd, out = shown(Path(data.metrics_dir)), shown(Path(figures_dir)), shown(Path(out_dir))
    return [
        shlex.join(["muon-repro", "analyze", shown(traces_root(data)), "--out", m]),
        shlex.join(["muon-repro", "figures", "--metrics", m, "--out", fd]),
        shlex.join(
            ["muon-repro", "report", "--metrics", m, "--figures", fd, "--out", out, "--format", ",".join(formats), *citation_args]
        ),
    ]


def study_import(data: ReportData) -> dict[str, str | int]:
    """How a report without the original study's runs gets them: the import into these runs' traces folder, offline
    from a copy of the study's traces (every checkout or download of this dataset holds one), or from the Hub."""
    return {
        "command": shlex.join(["muon-repro", "study", "import", "--from", "DIR", "--out", shown(traces_root(data))]),
        "dataset_copy": study_folder("traces").as_posix(),
        "traces": len(STUDY_FILES),
    }
