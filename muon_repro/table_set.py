"""The whole table set: the analysis's tables and the original study's beside them, with one claims table.

The analysis (:mod:`muon_repro.analysis`) reads traces, records and the cost model's outputs into tables and
judges the claims on them; the original study's runs (:mod:`muon_repro.study`) are read by their own scopes
with the analysis's reader. This module joins the two, above both, so that neither imports the other back:
``analyze``, ``muon-repro run``, ``verify --recompute`` and ``review`` all build their tables here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from muon_repro.analysis.batch_read import Analysis
    from muon_repro.analysis.limits import TraceLimits


def tables_of(analysis: Analysis) -> dict[str, pd.DataFrame]:
    """Every table of ``analysis``: the analysis's, the study's tables found under its paths, and the claims
    table with the claims judged on the study's own runs first."""
    from muon_repro.analysis.tables import tables_from_analysis
    from muon_repro.study.claims import study_claim_rows
    from muon_repro.study.tables import study_tables, study_trace_files

    # a damaged study trace is reported as the others are; the study's runs are read by as many processes
    study = study_tables(analysis.paths, left_out=analysis.failures, workers=analysis.workers)
    return tables_from_analysis(
        analysis, study=study, study_claims=study_claim_rows(study), study_traces=study_trace_files(analysis.paths)
    )


def build_tables(
    paths: Iterable[str | Path], *, workers: int | None = None, rank: int | None = None, limits: TraceLimits | None = None
) -> dict[str, pd.DataFrame]:
    """Analyze every trace under ``paths`` (each within ``limits``) and return every table, conformed to its schema.

    Files that cannot be read are skipped, and run folders that lack a rank are analyzed file by file, with a
    warning naming each (their problems are available in detail from
    :func:`muon_repro.analysis.batch_read.analyze_paths`).
    """
    from muon_repro.analysis.batch_read import analyze_paths

    analysis = analyze_paths(list(paths), workers=workers, rank=rank, limits=limits)
    for problem in [*analysis.failures, *analysis.incomplete]:
        warnings.warn(problem.message, stacklevel=2)
    return tables_of(analysis)
