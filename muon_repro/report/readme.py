"""The generated blocks of README.md and docs/, from ``metrics/`` so that they cannot drift.

``python -m muon_repro.report.readme [--root .] [--metrics metrics]`` rewrites, in each file of
:data:`TARGETS`, the lines between each of its blocks' begin and end markers (:data:`BLOCKS`),
formatted as the report formats them:

* ``claims``: the claims table and, below it, the consistency checks, then what the pipeline claims say;
* ``thresholds``: where the cost model puts the claimed levels on the shipped profiles, with ranges;
* ``regime sweep``: the sweep's optimizer share and Muon's extra step time per width;
* ``cost model``: how well the cost model prices the recorded runs, and the thresholds on the shipped
  profiles with their ranges;
* ``profiler cost``: what the profiler costs the runs of the profile with most runs (runs.profiler_overhead);
* ``gloo wire``: what gloo sent over loopback against the ring model, for the DP2·TP2 pair (docs/method.md);
* ``gpu``: what each GPU profile measured (kernel rates, one device by tokens per step, the cost model's error);
* ``performance`` and ``benchmark table``: the analysis's speed against HolisticTraceAnalysis, from the result file
  ``python -m tools.analysis_benchmark`` wrote (docs/analysis_benchmark.json), not from metrics/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from muon_repro.hardware import rows_of_profile
from muon_repro.recipe import recipe_text
from muon_repro.report.checks_section import checks_matrix
from muon_repro.report.claims_section import claim_measured, claims_matrix
from muon_repro.report.costmodel_error import prediction_summary
from muon_repro.report.data import ReportData, is_missing, load
from muon_repro.report.escape import markdown_cell, markdown_inline
from muon_repro.report.formatting import percent
from muon_repro.report.gpu_section import gpu_markdown, read_calibration
from muon_repro.report.performance_blocks import BENCHMARK_FILE, load_benchmark, performance_table, readme_paragraph
from muon_repro.report.profiler_cost import profiler_overhead_line
from muon_repro.report.regime_figures import main_axis
from muon_repro.report.regimes_section import THRESHOLDS_HEADER, threshold_range_note, threshold_rows
from muon_repro.report.results_section import wire_against_ring_paragraph
from muon_repro.report.stated import row_of
from muon_repro.tables.files import with_block, write_atomic


def claims_markdown(data: ReportData) -> str:
    """The claims table as the report has it, less the region column (one measured column per hardware profile),
    then the consistency checks of the profile with most runs, less their 'fails if' column."""
    header, rows, _ = claims_matrix(data)
    lines = _table(header, rows, drop="agrees if in")
    check_header, check_rows, _ = checks_matrix(data)
    if check_rows:
        profile = markdown_inline(data.profiles[0])
        lines += [
            "",
            f"Consistency checks on {profile} (values set by construction, checked against the runs, so not claims):",
            "",
        ]
        lines += _table(check_header, check_rows, drop="fails if")
    said = pipeline_said(data)
    return "\n".join(lines + (["", said] if said else []))


def pipeline_said(data: ReportData) -> str:
    """The two 3-D claims of the profile with most runs in a sentence ('' when it has measured neither)."""
    profile = data.profiles[0]
    parts = []
    for cid, what, region in (
        ("hybrid_survives_pp", "DP2·TP2 over the fastest 4-rank pipeline grid (Muon)", "at most 1× keeps the hybrid fastest"),
        (
            "bubble_hides_step",
            "the optimizer time PP4's step pays after its last backward over a stage's Muon step",
            "at most 0.5× hides it",
        ),
    ):
        row = row_of(data.claims, "claim_id", cid, profile)
        if row is not None:
            parts.append(f"{what}, {claim_measured(row)}, {row['verdict']} ({region})")
    if not parts:
        return ""
    conditions = rows_of_profile(data.claims, profile)["outside_conditions"].astype(str)
    shared = conditions.str.contains("per core", regex=False).any()  # the claims' own test: more ranks than cores
    return (
        f"3-D parallelism on {markdown_inline(profile)} (DP x TP x PP, [docs/pipeline.md](docs/pipeline.md)): "
        + "; ".join(parts)
        + (
            ". With more ranks than cores, a rank blocked in the bubble gives its core away, so these say little of GPUs."
            if shared
            else "."
        )
    )


def thresholds_markdown(data: ReportData) -> str:
    """The tokens per step at which Muon's overhead falls to the claimed levels on the shipped profiles, with ranges,
    as the profile with most runs priced them (another profile's records: its own page, e.g. docs/gpu.md)."""
    thresholds = data.of_profile(data.profiles[0]).regime_thresholds
    note = threshold_range_note(thresholds)
    return "\n".join(_table(THRESHOLDS_HEADER, threshold_rows(thresholds), drop="") + (["", note] if note else []))


def costmodel_markdown(data: ReportData) -> str:
    """The predictions' summary of the profile with most runs, then the thresholds on the shipped profiles."""
    main = data.of_profile(data.profiles[0])
    return "\n".join([prediction_summary(main.predictions), "", thresholds_markdown(data)])


def gpu_block(data: ReportData) -> str:
    """What each GPU profile measured, and where its records put the claimed levels (its measured kernel rates):
    the report's GPU section, as Markdown."""
    return gpu_markdown(data, read_calibration(data.metrics_dir))


def sweep_markdown(data: ReportData) -> str:
    """The regime sweep's main axis (Muon at DP2·TP2, contiguous) per width: the optimizer share at the fewest
    and the most tokens per step, and Muon's extra step time at the most, with their 95% intervals."""
    main = main_axis(data.regimes)
    if main.empty:
        return "No regime sweep in metrics/: `muon-repro regimes` records it."
    low_t, high_t = int(main["tokens_per_step"].min()), int(main["tokens_per_step"].max())
    header = [
        "d_model",
        f"optimizer share at {low_t:,} tokens",
        f"at {high_t:,} tokens",
        f"Muon step / AdamW step - 1 at {high_t:,}",
    ]
    rows = []
    for width, g in main.groupby("d_model"):
        low, high = g.loc[g["tokens_per_step"].idxmin()], g.loc[g["tokens_per_step"].idxmax()]
        rows.append(
            [
                str(int(width)),
                _percent(low["optimizer_share"]),
                _with_interval(high, "optimizer_share", _percent),
                _with_interval(high, "muon_extra", _signed),
            ]
        )
    return "\n".join(_table(header, rows, drop=""))


def _with_interval(row, column: str, fmt) -> str:
    return f"{fmt(row[column])} [{fmt(row[column + '_lo'])}, {fmt(row[column + '_hi'])}]"


def _percent(value) -> str:
    return "–" if is_missing(value) else percent(value)


def _signed(value) -> str:
    return "–" if is_missing(value) else f"{100 * float(value):+.0f}%"  # whole percents: no exponent


BLOCKS = {  # name: how to make it
    "claims": claims_markdown,
    "thresholds": thresholds_markdown,
    "regime sweep": sweep_markdown,
    "cost model": costmodel_markdown,
    "gpu": gpu_block,
    "gloo wire": wire_against_ring_paragraph,
    "regenerate": lambda data: "```bash\n" + recipe_text() + "\n```",
    "profiler cost": lambda data: profiler_overhead_line(data.of_profile(data.profiles[0]).runs) or "",
}


# Blocks made from the analysis benchmark's result file (muon_repro.report.performance_blocks), not from metrics/.
BENCHMARK_BLOCKS = {"performance": readme_paragraph, "benchmark table": performance_table}


def markers(name: str) -> tuple[str, str]:
    """The begin and end lines of block ``name``."""
    source = BENCHMARK_FILE.as_posix() if name in BENCHMARK_BLOCKS else "metrics/"
    return (
        f"<!-- {name}: generated from {source} by `python -m muon_repro.report.readme` -->",
        f"<!-- {name}: end -->",
    )


def _table(header: list[str], rows: list[list[str]], drop: str) -> list[str]:
    """A Markdown table; every cell through :func:`markdown_cell` (cells may quote run text: names, GPUs)."""
    keep = [i for i, name in enumerate(header) if name != drop]
    lines = ["| " + " | ".join(markdown_cell(header[i]) for i in keep) + " |", "|" + "---|" * len(keep)]
    return lines + ["| " + " | ".join(markdown_cell(row[i]) for i in keep) + " |" for row in rows]


TARGETS = {  # file: its blocks
    "README.md": ("regenerate", "claims", "profiler cost", "thresholds", "performance"),
    "docs/performance.md": ("benchmark table",),
    "docs/publishing.md": ("regenerate",),
    "docs/regimes.md": ("regime sweep", "cost model"),
    "docs/gpu.md": ("gpu",),
    "docs/method.md": ("gloo wire",),
}


def with_blocks(
    text: str, metrics_dir: str | Path, names: tuple[str, ...] = tuple(BLOCKS), benchmark: str | Path | None = None
) -> str:
    """``text`` with the lines between each block's markers replaced by the block made from ``metrics_dir`` (or, for
    the performance blocks, from the benchmark's result file: ``benchmark``, by default docs/ beside ``metrics_dir``)."""
    data = load(metrics_dir) if any(name in BLOCKS for name in names) else None
    record = None
    for name in names:
        if name in BENCHMARK_BLOCKS:
            record = record or load_benchmark(benchmark or Path(metrics_dir).parent / BENCHMARK_FILE)
            block = BENCHMARK_BLOCKS[name](record)
        else:
            block = BLOCKS[name](data)
        text = with_block(text, *markers(name), f"\n{block}\n", f"the {name} block")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m muon_repro.report.readme", description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=Path("."), type=Path, help="the repository root (default: .)")
    parser.add_argument("--metrics", default=Path("metrics"), type=Path, help="folder of the analysis tables (default: metrics)")
    args = parser.parse_args(argv)
    for target, names in TARGETS.items():
        path = args.root / target
        write_atomic(path, with_blocks(path.read_text(encoding="utf-8"), args.metrics, names))
        print(f"updated the {' and '.join(names)} block(s) in {path} from {args.metrics}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
