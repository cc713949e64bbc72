"""The stages of the job as plain functions, in the one direction data flows.

    bench     configurations                 -> traces/<profile>/<group>/<name>/  (trains: imports torch)
    analyze   traces                         -> metrics/*.parquet + .csv   (the only interface from here on)
    figures   metrics/                       -> figures/*.png + .svg
    report    metrics/ + figures/ + BundleMeta -> report/report.md, .pdf (citing the dataset as the card does)
    card      the folders + BundleMeta       -> dataset_card.md (+ CITATION.cff, croissant.json beside it)
    bundle    the folders + BundleMeta       -> dist/dataset/ (+ MANIFEST.sha256)
    verify    a bundle                       -> VerifyResult

``muon-repro run`` (:mod:`muon_repro.job`) and the CLI commands call these; so can you::

    from muon_repro import stages
    tables = stages.analyze(["traces"], "metrics")
    stages.figures("metrics", "figures")
    stages.report("metrics", "figures", "report", formats=("md",))

Every stage writes atomically; none but ``bench`` imports torch, each imports its heavy
dependencies when called, so importing this module is cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from muon_repro.bench.sweep import RunResult
    from muon_repro.dataset.bundle import Sources
    from muon_repro.dataset.manifest import FileEntry
    from muon_repro.dataset.meta import BundleMeta
    from muon_repro.dataset.verify import VerifyResult


class StageError(RuntimeError):
    """A stage could not produce its output; the message says which input was at fault."""


def bench(
    configs: Sequence[str],
    out: str | Path = "traces",
    *,
    scale: str = "cpu",
    trials: int = 3,
    traced_trials: int | None = 1,
    backend: str | None = None,
    force: bool = False,
    progress: bool = True,
    command: Sequence[str] | None = None,
    profile: str | None = None,
) -> list[RunResult]:
    """Record the named configurations (names, groups, 'study', 'reference', 'all') on this machine, each in
    ``trials`` interleaved trials (rounds), the first ``traced_trials`` of them profiled with traces and the
    others timed only, into ``out/<profile>/`` (``profile``: default ``$MUON_REPRO_PROFILE``, else
    derived from the machine); complete trials are skipped unless ``force``."""
    from muon_repro.bench.configs import expand_config_names, resolve
    from muon_repro.bench.placement import place, visible_gpus
    from muon_repro.bench.sweep import record_local

    cfgs = [resolve(key, scale) for key in expand_config_names(list(configs))]
    placement = place(cfgs, visible_gpus(), backend)  # NCCL on the GPUs that fit; never the CPU unasked on a GPU machine
    if placement.refused:
        print(f"not recorded here:\n{placement.refusals()}", file=sys.stderr)
    command = list(command or ["muon-repro", "bench", *configs, "--scale", scale, "--out", str(out)])
    return record_local(
        placement.runnable,
        Path(out),
        placement.backend,
        trials=trials,
        traced_trials=traced_trials,
        force=force,
        command=command,
        progress=progress,
        profile=profile,
    )


def analyze(
    paths: Sequence[str | Path], out: str | Path | None = "metrics", *, workers: int | None = None, rank: int | None = None
) -> dict[str, pd.DataFrame]:
    """Analyze every trace under ``paths`` and write the tables to ``out`` (``None``: write nothing).

    ``out`` is checked before any trace is read (ValueError). Raises :class:`StageError` naming
    every file that could not be read, every trial left out (a side file there but unreadable), every
    run folder that lacks a rank's trace and every timed trial with no run to join; nothing is written then.
    """
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.table_set import tables_of
    from muon_repro.tables.io import check_tables_out, write_tables

    if out is not None:
        check_tables_out(Path(out))
    analysis = analyze_paths(list(paths), workers=workers, rank=rank)
    problems = [*analysis.failures, *analysis.incomplete]
    if problems:
        raise StageError("; ".join(f.message for f in problems))
    for note in analysis.notes:  # a sweep cut short: its complete trials are used
        print(f"note: {note}", file=sys.stderr)
    if not analysis.runs and not analysis.has_records:
        raise StageError(f"no trace or record found under {', '.join(str(p) for p in paths)}")
    tables = tables_of(analysis)
    if out is not None:
        write_tables(tables, Path(out))
    return tables


def figures(metrics: str | Path = "metrics", out: str | Path = "figures") -> dict[str, Path]:
    """Draw every figure from the tables in ``metrics``; returns figure name -> PNG path (an SVG beside it).
    ``out`` is checked before anything is read (ValueError)."""
    from muon_repro.report.build import make_figures
    from muon_repro.tables.files import check_out_folder

    check_out_folder(Path(out), f"output folder {out}")
    return make_figures(Path(metrics), Path(out))


def report(
    metrics: str | Path = "metrics",
    figures: str | Path = "figures",
    out: str | Path = "report",
    *,
    formats: Sequence[str] = ("md", "pdf"),
    meta: BundleMeta | None = None,
) -> dict[str, Path]:
    """Render the report from the tables and the figures; returns format -> path.
    ``out`` is checked before anything is read (ValueError). "How to cite" gives the dataset's BibTeX
    for ``meta`` (default: :func:`~muon_repro.dataset.citation.report_meta`, what ``muon-repro run``'s card
    cites), byte for byte the card's, the paper's and the original study's."""
    from muon_repro.dataset.citation import (
        bibtex,
        paper_bibtex,
        rebuild_arguments,
        report_arguments,
        report_meta,
        study_bibtex,
    )
    from muon_repro.report.build import write_report
    from muon_repro.tables.files import check_out_folder

    check_out_folder(Path(out), f"output folder {out}")
    meta = meta or report_meta(metrics)
    return write_report(
        Path(metrics),
        Path(figures),
        Path(out),
        tuple(formats),
        citation=(bibtex(meta), paper_bibtex(), study_bibtex()),
        citation_args=report_arguments(meta, metrics),
        rebuild_args=rebuild_arguments(meta, metrics),
        identity={"title": meta.pretty_name, "version": meta.version, "authors": list(meta.authors)},
    )


def card(sources: Sources, meta: BundleMeta, out: str | Path = "dataset_card.md") -> Path:
    """Render the dataset card (the bundle's README.md) to ``out``, and the bundle's CITATION.cff and
    croissant.json beside it (at the repository root, the copies code hosts and Croissant tools read)."""
    from muon_repro.dataset.bundle import documents_from_sources, root_files_in
    from muon_repro.tables.files import write_atomic_all

    docs = documents_from_sources(sources, meta)
    write_atomic_all({Path(out): docs.card, **root_files_in(docs, Path(out).parent)})  # one set
    return Path(out)


def bundle(sources: Sources, meta: BundleMeta, out: str | Path = "dist/dataset") -> tuple[list[FileEntry], list[str]]:
    """Assemble the folder that gets published; returns its manifest entries and warnings."""
    from muon_repro.dataset.bundle import build_bundle

    return build_bundle(sources, meta, Path(out))


def verify(
    bundle_dir: str | Path = "dist/dataset", *, echo: Callable[[str], None] | None = None, recompute: bool = False
) -> VerifyResult:
    """Check a bundle or a downloaded copy: checksums, every table loads, every trace parses; with
    ``recompute``, also that analyzing its traces again gives its tables."""
    from muon_repro.dataset.verify import verify_bundle

    return verify_bundle(Path(bundle_dir), echo=echo, recompute=recompute)
