"""The tables -> the report's whole template context (plain strings, lists and dicts).

Each section's context comes from its own module (``abstract_section``, ``study_section``, ``setup_section``,
``results_section``, ``decomposition_section``, ``pipeline_section``, ``convergence_section``, ``claims_section``,
``checks_section``, ``caveats_section``, ``regimes_section``, ``gpu_section``, ``reproduce_section``), every number
through :mod:`muon_repro.report.formatting`, whose helpers refuse a missing value with a
:class:`~muon_repro.report.data.MissingMetric` naming it; the templates only place strings. The few values that may
legitimately be absent (no GPU: no CUDA, NCCL or accelerator; a claim no run can speak to) are written out as such
("none", "not measured"), never left empty. This module puts the sections together, with the figures and the links.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import muon_repro
from muon_repro.claims import STUDY_SHARE
from muon_repro.phases import COARSE_PHASES, OPTIMIZER_PHASES
from muon_repro.recipe import recipe_text
from muon_repro.report import derive
from muon_repro.report.abstract_section import abstract, title_block
from muon_repro.report.caveats_section import limitations, regimes
from muon_repro.report.checks_section import checks_matrix, checks_summary
from muon_repro.report.claims_section import claims_matrix, claims_rows, profiles_note, summary_lines, verdict_counts
from muon_repro.report.convergence_section import convergence_section
from muon_repro.report.data import TABLES, ReportData
from muon_repro.report.decomposition_section import decomposition, decomposition_runs
from muon_repro.report.figure_files import checked_figures
from muon_repro.report.figures import FIGURES
from muon_repro.report.gpu_section import NO_GPU, gpu_sections, read_calibration
from muon_repro.report.pipeline_section import PIPELINE_CAPTIONS, pipeline_section
from muon_repro.report.plotting import empty_reason
from muon_repro.report.profile_figures import PROFILE_CAPTIONS, wants_profile_figures
from muon_repro.report.regimes_section import regimes_section
from muon_repro.report.reproduce_section import reproduce
from muon_repro.report.results_section import (
    bytes_rows,
    comparison_header,
    comparison_rows,
    has_values,
    optimizer_ratio_note,
    pipeline_wait_note,
    runs_header,
    runs_rows,
    share_note,
    wire_lines,
)
from muon_repro.report.setup_section import (
    claim_rounds,
    disturbed_rule,
    environments,
    interval_scales,
    like_for_like,
    one_rank_protocol,
    traced_rounds,
    workload,
)
from muon_repro.report.study_section import STUDY_CAPTIONS, study_section

# (id, heading): the report's sections, in order; the tests look for every heading in the PDF. The answer first
# (abstract, summary, claims and checks), then how it was measured; the long tables last, in the appendix.
SECTIONS = (
    ("abstract", "Abstract"),
    ("summary", "Summary"),
    ("claims", "Claims"),
    ("study", "The runs of the original study"),
    ("setup", "Setup"),
    ("method", "Method"),
    ("results", "Results"),
    ("decomposition", "The optimizer step, decomposed"),
    ("pipeline", "3-D parallelism (DP x TP x PP)"),
    ("convergence", "Convergence on real text"),
    ("regimes", "Where the gains hold, vanish or invert"),
    ("gpu", "On a GPU"),
    ("limitations", "Limitations"),
    ("reproduce", "How to reproduce"),
    ("cite", "How to cite"),
    ("appendix-tables", "Appendix: tables"),
)
# The appendix's tables (key, title), in order: each one longer than the main body should carry. The ones shown are
# numbered A1, A2, ... in this order (:func:`appendix_headings`).
APPENDIX_TABLES = (
    ("claims", "The claims' values and their runs"),
    ("runs", "Runs"),
    ("comparisons", "Muon against AdamW"),
    ("bytes", "Bytes: analytic, ledger, trace"),
    ("decomposition", "The optimizer step, rank by rank"),
    ("predictions", "The cost model's predictions, run by run"),
    ("scale_out", "Scale-out, predicted"),
    ("environment", "Machine and software"),
)
REPORT_TITLE = "Distributed Muon vs AdamW: communication, time and memory, measured against the claims"
# The sections of the repository's method notes the report links to (GitHub's heading anchors;
# tests/test_docs.py checks that each exists).
METHOD_SECTIONS = {
    "communication_model": "docs/method.md#communication-model",
    "wait_and_transfer": "docs/method.md#wait-and-transfer",
    "claims_table": "docs/method.md#claims",
    "phases_table": "docs/method.md#phases",
    "optimizer_state": "docs/method.md#optimizer-state",
    "trace_conventions": "docs/method.md#trace-conventions",
    "clock_alignment": "docs/method.md#clock-alignment-across-ranks",
    "cost_model": "docs/method.md#cost-model",
    "regimes": "docs/method.md#regimes",
}

# The captions of the results' figures (numbered in the order of FIGURES).
FIGURE_CAPTIONS = {
    "comm_time_by_kind": "Communication time per step by collective kind, Muon beside AdamW at each process grid.",
    "step_breakdown": "Where a profiled step's time goes, per configuration (each run's median profiled step, not the "
    "steps timed without the profiler): by phase, and by what the machine does.",
    "optimizer_overhead": f"The optimizer's share of the step, per configuration, against the original "
    f"study's ~{STUDY_SHARE.percent}.",
    "state_memory": "Optimizer-state memory per rank (steady state) and Muon's transient gather buffers.",
    "bytes_by_layout": "Optimizer bytes per rank per step by ZeRO-1 layout: analytic model, run-time ledger and trace.",
    "grid_comparison": "Step time per DP × TP process grid: each run's median step, timed without the profiler where "
    "the runs have such steps (runs.timed_step_ms, no interval drawn); which grid wins, and by how much. The claims "
    "pair the grids round by round instead, with an interval (claims: hybrid_beats_pure).",
    "timeline": "One step of every rank from the traces, phase by phase: Muon's gathers, Newton-Schulz and shards as the run "
    "issued them.",
    "loss": "Training loss per step over the steps run under the profiler (its warm-up step and the profiled ones), "
    "which follow the steps timed without it, Muon vs AdamW.",
    "convergence_sweep": "Held-out loss on unseen Shakespeare plays over the learning-rate sweep, Muon and AdamW, for the "
    "configuration the figure names.",
    "leading_steps": "Muon leading steps: smoothed training loss at the best learning rates, leading steps and leading ratio, "
    "for the configuration the figure names.",
}


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading (and the HTML heading's id): lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def method_links(out_dir: Path, root: Path) -> dict[str, str]:
    """Links from the report to the sections of the repository's ``docs/method.md`` (``root`` is
    the artifact root, the repository's in its own layout: traces/, metrics/, report/, docs/)."""
    links = {}
    for key, target in METHOD_SECTIONS.items():
        path, anchor = target.split("#")
        links[key] = Path(os.path.relpath(Path(root) / path, out_dir)).as_posix() + "#" + anchor
    return links


def newest_recording(runs: Any) -> str:
    """When the newest run was recorded (runs.recorded_at, ISO 8601), the report's date: the PDF's
    creation date follows from the data, not from the clock; "" if no run says."""
    if "recorded_at" not in runs:
        return ""
    recorded = [str(r) for r in runs["recorded_at"].dropna() if str(r)]
    return max(recorded, default="")


def appendix_headings(shown: Iterable[str]) -> dict[str, dict[str, str]]:
    """Per appendix table of ``shown`` (keys of :data:`APPENDIX_TABLES`), its heading (``A2. Runs``), numbered in the
    appendix's order among the tables shown, and its anchor: GitHub's for the heading (:func:`anchor`), so that the
    same link works in the Markdown and in the HTML."""
    shown = set(shown)
    unknown = shown - {key for key, _ in APPENDIX_TABLES}
    if unknown:
        raise ValueError(f"no appendix table {sorted(unknown)}; known: {[key for key, _ in APPENDIX_TABLES]}")
    numbered = [(key, f"A{i}. {title}") for i, (key, title) in enumerate((t for t in APPENDIX_TABLES if t[0] in shown), 1)]
    return {key: {"heading": heading, "id": anchor(heading)} for key, heading in numbered}


def build_context(
    data: ReportData,
    figure_paths: dict[str, Path],
    out_dir: Path,
    *,
    invocations: Iterable[str],
    citation: Sequence[str],
    everything: ReportData | None = None,
    cite: Sequence[str] = (),
    identity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole template context; raises MissingMetric (a ValueError) naming the first missing metric.
    ``citation``: the BibTeX entries "How to cite" shows (the dataset's, then the paper's), as rendered;
    ``everything``: every profile's tables (the GPU section's), default ``data``; ``cite``: the flags that name
    the dataset when it is not the project's, which the regeneration recipe passes on; ``identity``: its title,
    version and authors for the title block (None: the CITATION.cff beside the metrics folder)."""
    checked_figures(figure_paths, FIGURES)
    state = derive.state_by_run(data.ranks, data.runs["run"])
    claims = claims_rows(data)
    bytes_table, totals = bytes_rows(data)
    runs = data.runs
    metrics_dir = Path(data.metrics_dir)
    links = _Links(Path(out_dir))
    tables = {name: links.rel(metrics_dir / f"{name}.csv") for name in TABLES if (metrics_dir / f"{name}.csv").is_file()}
    figured = _figured_sections(data, everything or data, figure_paths, links)
    recorded_at = newest_recording(runs)
    head = title_block(metrics_dir.parent, recorded_at, title=REPORT_TITLE, version=muon_repro.__version__, identity=identity)
    regime = figured["regime"]
    optional = {
        "decomposition": bool(decomposition_runs(data)),  # decomposition()'s rows: one per part of each run shown
        "predictions": regime["predictions_rows"],
        "scale_out": regime["scale_out_rows"],
    }
    appendix = appendix_headings(key for key, _ in APPENDIX_TABLES if optional.get(key, True))
    decomposed = decomposition(data, claims, appendix.get("decomposition", {}).get("heading"))
    return {
        "title": head["title"],
        "title_block": head,
        "abstract": abstract(data),
        "appendix": appendix,
        "sections": dict(SECTIONS),
        "section_order": [s for s, _ in SECTIONS],
        "summary": [*summary_lines(claims), checks_summary(data)],
        "n_runs": str(len(runs)),
        "recorded_at": recorded_at,
        "backends": ", ".join(sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])})),
        "environments": environments(everything or data),  # every profile's runs: A8 promises every run
        "workload": workload(data),
        "runs_header": runs_header(data),
        "runs_comm_wait": has_values(runs, "comm_wait_ms"),
        "runs_rows": runs_rows(data),
        "runs_notes": [note for note in (pipeline_wait_note(data), share_note(data)) if note],
        "optimizer_ratio_note": optimizer_ratio_note(data),
        "comparison_header": comparison_header(data),
        "comparison_rows": comparison_rows(data),
        "decomposition": decomposed,
        "convergence": convergence_section(data.convergence, data.leading_steps, data.budget_match),
        "bytes_header": ["configuration", "run", "analytic MB", "ledger MB", "trace MB", "largest gap", "vs AdamW (analytic)"],
        "bytes_rows": bytes_table,
        "wire": wire_lines(data),
        "claims": claims,
        **dict(zip(("claims_header", "claims_rows", "claims_notes"), claims_matrix(data))),
        **dict(zip(("checks_header", "checks_rows", "checks_notes"), checks_matrix(data))),
        "profiles_note": profiles_note(everything or data, data.profile),
        "verdict_counts": verdict_counts(claims),
        "like_for_like": like_for_like(everything or data, data.described_profile),
        "traced_rounds": traced_rounds(runs),
        "claim_rounds": claim_rounds(data.claims),  # the claims of every profile: the claims table's columns
        "interval_scales": interval_scales(everything or data),
        "disturbed_rule": disturbed_rule(),
        "one_rank_protocol": one_rank_protocol(everything or data),
        "sources": sorted({c["source_full"] for c in claims}),
        "regimes": regimes(data, state, totals),
        "gpu": gpu_sections(everything or data, read_calibration(metrics_dir)),
        "no_gpu": NO_GPU,
        "limitations": limitations(data, everything),
        "commands": reproduce(everything or data, invocations),
        "recipe": recipe_text(cite),
        "tables": tables,
        "method": method_links(out_dir, metrics_dir.parent),
        "phases": {"coarse": list(COARSE_PHASES), "optimizer": list(OPTIMIZER_PHASES)},
        "bibtex": list(citation),
        "version": muon_repro.__version__,
        **figured,  # profile_figure, figures, pipeline, study, regime
    }


class _Links:
    """Paths as the report in ``out_dir`` links them (relative, POSIX), and a figure's entry in the context. Relative
    as the folders are laid out, links not followed: in a tree whose figures/ is a link, the report's links stay in
    the tree (resolved, they led to where the link points, outside any bundle of the tree)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(os.path.abspath(out_dir))

    def rel(self, path: str | Path) -> str:
        return Path(os.path.relpath(os.path.abspath(path), self.out_dir)).as_posix()

    def figure(self, name: str, path: str | Path, caption: str) -> dict[str, str]:
        return {"name": name, "src": self.rel(path), "svg": self.rel(Path(path).with_suffix(".svg")), "caption": caption} | {
            "empty": empty_reason(path)  # a figure with no data: its number and why, not an image the caption misdescribes
        }


def _figured_sections(data: ReportData, everything: ReportData, figure_paths: dict[str, Path], links: _Links) -> dict[str, Any]:
    """The context's figures and the sections that hold some, numbered in the order they appear: the claims section's
    (Figure 1) before the results' figures, those before the sections' own (pipeline, regimes); the study section's
    (``everything``'s) is S1, apart."""
    metrics_dir = Path(data.metrics_dir)
    profile_figure = None
    if wants_profile_figures(data.claims):
        path = checked_figures(figure_paths, ["claims_by_profile"])["claims_by_profile"]
        profile_figure = links.figure("claims_by_profile", path, PROFILE_CAPTIONS["claims_by_profile"]) | {"number": 1}
    first_result = 1 + (profile_figure is not None)
    first_after = first_result + len(FIGURES)
    pipeline = pipeline_section(data)
    if pipeline["present"]:
        path, timeline_path = checked_figures(figure_paths, ["pipeline", "pipeline_timeline"]).values()
        pipeline |= {
            "figure": links.figure("pipeline", path, PIPELINE_CAPTIONS["pipeline"]),
            "number": first_after,
            "timeline_figure": links.figure("pipeline_timeline", timeline_path, PIPELINE_CAPTIONS["pipeline_timeline"]),
            "timeline_number": first_after + 1,
            "doc": links.rel(metrics_dir.parent / "docs" / "pipeline.md"),
        }
        first_after += 2
    study = study_section(everything)
    if study["present"]:
        path = checked_figures(figure_paths, ["study_numbers"])["study_numbers"]
        study["figure"] = links.figure("study_numbers", path, STUDY_CAPTIONS["study_numbers"])
    return {
        "profile_figure": profile_figure,
        "figures": [
            links.figure(n, figure_paths[n], FIGURE_CAPTIONS[n]) | {"number": number}
            for number, n in enumerate(FIGURES, first_result)
        ],
        "pipeline": pipeline,
        "study": study,
        "regime": regimes_section(data, figure_paths, links.rel, first_after),
    }
