"""The two stages of this package, as plain functions the pipeline and the CLI call alike:
:func:`make_figures` (``metrics/`` -> ``figures/``) and :func:`write_report` (``metrics/`` +
``figures/`` -> ``report/``). Both read only the tables under ``metrics_dir``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from muon_repro.report import (
    bytes_figures,
    convergence_section,
    figures,
    gpu_section,
    pipeline_section,
    profile_figures,
    regime_figures,
    study_section,
    timeline_figures,
)
from muon_repro.report.context import build_context
from muon_repro.report.data import ReportData, load
from muon_repro.report.render import FORMATS, write_formats
from muon_repro.report.reproduce_section import invocations
from muon_repro.report.selection import representative_runs
from muon_repro.tables.files import staged_files

FIGURES_WRITER = "muon-repro figures"
REPORT_WRITER = "muon-repro report"
FIGURE_SUFFIXES = (".png", ".svg")

# Figure name (figures.FIGURES) -> how it is drawn from the tables.
DRAW: dict[str, Callable[[ReportData, Path], Path]] = {
    "comm_time_by_kind": lambda d, out: figures.comm_time_by_kind(d.runs, d.steps, d.claims, d.stated_numbers, out),
    "step_breakdown": lambda d, out: figures.step_breakdown(d.runs, d.steps, out),
    "optimizer_overhead": lambda d, out: figures.optimizer_overhead(d.runs, d.claims, out),
    "state_memory": lambda d, out: bytes_figures.state_memory(d.runs, d.ranks, d.checks, out),
    "bytes_by_layout": lambda d, out: bytes_figures.bytes_by_layout(d.runs, d.phases, d.checks, d.stated_numbers, out),
    "grid_comparison": lambda d, out: figures.grid_comparison(d.runs, out),
    "timeline": lambda d, out: timeline_figures.timeline(d.timeline, d.runs, out),
    "loss": lambda d, out: figures.loss(d.losses, d.runs, out),
    "regime_map": lambda d, out: regime_figures.regime_map(d.regimes, d.regime_model, out),
    "closed_form": lambda d, out: regime_figures.closed_form(d.regimes, out),
    "profiles": lambda d, out: regime_figures.profiles(d.regime_model, d.regime_thresholds, out),
    "convergence_sweep": lambda d, out: convergence_section.convergence_sweep(d.convergence, out),
    "leading_steps": lambda d, out: convergence_section.leading_steps(d.convergence, d.leading_steps, out),
    "single_device": lambda d, out: gpu_section.single_device(d.runs, d.regime_model, out, d.claims),
    "pipeline": lambda d, out: pipeline_section.pipeline(d.runs, d.stages, d.claims, out),
    "pipeline_timeline": lambda d, out: timeline_figures.timeline(
        d.timeline, d.runs, out, run=pipeline_section.deepest_muon_pipeline(d.runs)
    ),
}


def check_has_benchmark_runs(data: ReportData, metrics_dir: Path) -> None:
    """Refuse tables without a run of the benchmark (foreign traces only, say): no figure or report compares them."""
    if representative_runs(data.runs).empty:
        raise ValueError(
            f"the runs table in {metrics_dir} holds no run of the benchmark (a config.json naming its optimizer and its "
            "DP x TP grid): the figures and the report compare such runs, so there is nothing to draw or write; the "
            "tables themselves hold what the analysis read (record runs with `muon-repro bench`)"
        )


def make_figures(metrics_dir: Path, out_dir: Path) -> dict[str, Path]:
    """Draw every figure of :data:`figures.FIGURES` and :data:`regime_figures.REGIME_FIGURES` into ``out_dir`` from the tables in
    ``metrics_dir``; returns name -> PNG path (the SVG lies beside it). Drawn as one set in a hidden folder beside
    ``out_dir``, then moved in (:func:`~muon_repro.tables.files.staged_files`): an error or Ctrl-C midway leaves
    the previous figures as they were, never some of each; what else ``out_dir`` holds stays."""
    data = load(metrics_dir)
    check_has_benchmark_runs(data, metrics_dir)
    out = Path(out_dir)
    with staged_files(out, FIGURES_WRITER, FIGURE_SUFFIXES) as stage:
        paths = _draw_all(data, stage)
    return {name: out / path.relative_to(stage) for name, path in paths.items()}


def _draw_all(data: ReportData, out_dir: Path) -> dict[str, Path]:
    main, *others = data.profiles
    for profile in others:  # with several hardware profiles, each one's figures lie in figures/<profile>/
        _draw(data.of_profile(profile), out_dir / profile)
    paths = _draw(data.of_profile(main), out_dir)
    if profile_figures.wants_profile_figures(data.claims):  # and every claim on every profile, side by side
        paths["claims_by_profile"] = profile_figures.claims_by_profile(data.claims, out_dir / "claims_by_profile")
    if study_section.wants_study_figures(data.study_method):  # the original study's numbers, rebuilt
        paths["study_numbers"] = study_section.study_numbers(
            data.study_method, data.study_method_parts, out_dir / "study_numbers"
        )
    return paths


def _draw(data: ReportData, out_dir: Path) -> dict[str, Path]:
    """The profile's figures: a profile of one device (no DP x TP grid) draws its own, the others every figure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = (
        gpu_section.GPU_FIGURES if gpu_section.one_device_only(data.runs) else (*figures.FIGURES, *regime_figures.REGIME_FIGURES)
    )
    if pipeline_section.has_pipeline(data.runs):  # the 3-D section's figure, only with pipeline runs to draw
        names = (*names, *pipeline_section.PIPELINE_FIGURES)
    return {name: DRAW[name](data, out_dir / name) for name in names}


def write_report(
    metrics_dir: Path,
    figures_dir: Path,
    out_dir: Path,
    formats: tuple[str, ...] = ("md", "pdf"),
    *,
    citation: Sequence[str],
    citation_args: Sequence[str] = (),
    rebuild_args: Sequence[str] | None = None,
    identity: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``out_dir/report.<fmt>`` for each format from the tables in ``metrics_dir`` and the
    figures in ``figures_dir``; returns format -> path. Nothing is written if a metric is missing.
    ``identity``: the title, version and authors of the dataset the report cites, for its title block (None: the
    CITATION.cff beside the metrics folder, as it was). ``rebuild_args``: the flags the regeneration recipe's rebuild
    line gives ``muon-repro run`` for a dataset not the project's (default: ``citation_args``).
    ``citation``: the BibTeX entries of "How to cite", as the caller rendered them (the dataset's,
    :func:`muon_repro.dataset.citation.bibtex`, then the paper's); ``citation_args``: the flags of
    ``muon-repro report`` that cite the same again, for "How to reproduce"."""
    check_formats(formats)
    everything = load(metrics_dir)
    check_has_benchmark_runs(everything, metrics_dir)
    data = everything.of_profile(everything.profiles[0])  # the prose describes the profile with most runs
    names = (
        *figures.FIGURES,
        *regime_figures.REGIME_FIGURES,
        *profile_figures.PROFILE_FIGURES,
        *pipeline_section.PIPELINE_FIGURES,
        *study_section.STUDY_FIGURES,
    )
    figure_paths = {name: Path(figures_dir) / f"{name}.png" for name in names}
    commands = invocations(data, Path(figures_dir), Path(out_dir), formats, citation_args)
    context = build_context(
        data,
        figure_paths,
        Path(out_dir),
        invocations=commands,
        citation=citation,
        everything=everything,
        cite=citation_args if rebuild_args is None else rebuild_args,
        identity=identity,
    )
    out = Path(out_dir)
    # Every format rendered into a hidden folder beside out_dir, then moved in as one set (staged_files): an error or
    # Ctrl-C midway never leaves a new report.md beside an old report.pdf. Image paths stay relative to out_dir.
    with staged_files(out, REPORT_WRITER, tuple(f".{fmt}" for fmt in FORMATS)) as stage:
        written = write_formats(context, stage, formats, base_dir=out)
    return {fmt: out / path.relative_to(stage) for fmt, path in written.items()}


def check_formats(formats: Sequence[str], option: str = "--format") -> None:
    """Refuse an empty list of report formats, or one naming a format there is none of, naming ``option``."""
    unknown = [f for f in formats if f not in FORMATS]
    if not formats or unknown:
        said = f"unknown format(s) {', '.join(repr(f) for f in unknown)}" if unknown else "no format given"
        raise ValueError(
            f"{option} {','.join(formats)!r}: {said}; give a comma-separated list of {', '.join(FORMATS)} (say {option} md,pdf)"
        )
