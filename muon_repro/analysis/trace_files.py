"""The traces' index: one row per trace file a table was made from, with the run, trial and rank it holds and
its path, so that ``load_dataset(repo, "trace_files")`` finds the file of any run and rank without listing
the repository (the traces themselves are JSON, not a table ``datasets`` can load).

Paths are relative to the folder above the one analyzed: ``traces/cpu-2c-gloo/.../rank0.json.gz`` when
``traces`` was analyzed, as in the dataset, wherever the dataset was downloaded to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from muon_repro.analysis.batch_read import Analysis

READ_BY_ANALYSIS, READ_BY_STUDY = "analysis", "study"


@dataclass(frozen=True)
class TraceFile:
    """One trace file and the run, trial and rank it holds."""

    run: str
    profile: str
    group: str
    name: str
    trial: int
    rank: int
    file: Path
    read_by: str  # READ_BY_ANALYSIS (the benchmark's tables) or READ_BY_STUDY (the study_* tables)


def analyzed_trace_files(analysis: Analysis) -> list[TraceFile]:
    """Every trace the analysis made its runs from (runs left out for a problem are not among them)."""
    return [
        TraceFile(info.key, info.profile, info.group, info.name, info.trial, b.meta.rank, Path(b.meta.path), READ_BY_ANALYSIS)
        for info, items in analysis.runs
        for b in items
    ]


def dataset_path(file: Path, roots: Iterable[Path]) -> str:
    """``file``'s path from the folder above the root that holds it (``traces/...`` for the root ``traces``);
    its name alone when no root holds it (a trace given as a file)."""
    resolved = file.resolve()
    for root in roots:
        base = root.resolve()
        if base.is_dir() and resolved.is_relative_to(base):
            return (Path(base.name) / resolved.relative_to(base)).as_posix()
    return file.name


def trace_files_table(files: Iterable[TraceFile], roots: Iterable[Path]) -> pd.DataFrame:
    """The ``trace_files`` table: one row per file, ordered by run, trial and rank."""
    roots = list(roots)
    rows = [
        {
            "run": f.run,
            "profile": f.profile,
            "group": f.group,
            "name": f.name,
            "trial": f.trial,
            "rank": f.rank,
            "path": dataset_path(f.file, roots),
            "bytes": f.file.stat().st_size,
            "read_by": f.read_by,
        }
        for f in files
    ]
    columns = ["run", "profile", "group", "name", "trial", "rank", "path", "bytes", "read_by"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["run", "trial", "rank", "path"], kind="stable").reset_index(drop=True)
