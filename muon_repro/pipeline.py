"""``muon-repro run``: the whole job, one stage after the other, resumable at any point.

    bench     record every configuration (complete runs are skipped)   -> traces/
    analyze   traces -> tables                                          -> metrics/
    figures   tables (+ run directories) -> figures                     -> figures/
    report    tables + figures -> report.md, report.pdf                 -> report/
    card      the dataset card and the manifest of the bundle           -> dataset_card.md, MANIFEST.sha256
    bundle    what gets published, then verified                        -> dist/dataset/

Every stage writes atomically, so an interrupted run leaves the previous artifacts intact, and
running again redoes only what is missing (the benchmark stage) or cheap (the rest).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

STAGES = ("bench", "analyze", "figures", "report", "card", "bundle")
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class RunPlan:
    out: Path
    scale: str = "cpu"
    configs: tuple[str, ...] = ("reference",)
    backend: str | None = None
    force: bool = False
    progress: bool = True
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def traces(self) -> Path:
        return self.out / "traces"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics"

    @property
    def figures(self) -> Path:
        return self.out / "figures"

    @property
    def report(self) -> Path:
        return self.out / "report"

    @property
    def bundle(self) -> Path:
        return self.out / "dist" / "dataset"

    @property
    def analysis_scripts(self) -> Path:
        local = self.out / "analysis_scripts"
        return local if local.is_dir() else REPO_ROOT / "analysis_scripts"


def _cli(*argv: str) -> None:
    from muon_repro.cli import main

    code = main([str(a) for a in argv])
    if code != 0:
        raise RuntimeError(f"`muon-repro {' '.join(map(str, argv))}` failed (exit {code})")


def stage_bench(plan: RunPlan) -> None:
    from muon_repro.bench.cli import expand_config_names, format_results
    from muon_repro.bench.configs import resolve
    from muon_repro.bench.sweep import record_local
    from muon_repro.parallel.launch import default_backend

    cfgs = [resolve(key, plan.scale) for key in expand_config_names(list(plan.configs))]
    backend = plan.backend or default_backend(max(c.world_size for c in cfgs))
    results = record_local(cfgs, plan.traces, backend, force=plan.force, command=["muon-repro", *sys.argv[1:]], progress=plan.progress)
    print(format_results(results))


def stage_analyze(plan: RunPlan) -> None:
    from muon_repro.analysis.pipeline import analyze_paths
    from muon_repro.analysis.tables import tables_from_analysis, write_tables

    analysis = analyze_paths([plan.traces])
    if analysis.failures:
        raise RuntimeError("; ".join(f.message for f in analysis.failures))
    tables = tables_from_analysis(analysis)
    write_tables(tables, plan.metrics)
    print("tables: " + ", ".join(f"{name} ({len(df)} rows)" for name, df in tables.items()))


def stage_figures(plan: RunPlan) -> None:
    _cli("figures", "--metrics", plan.metrics, "--traces", plan.traces, "--out", plan.figures)


def stage_report(plan: RunPlan) -> None:
    _cli("report", "--metrics", plan.metrics, "--traces", plan.traces, "--figures", plan.figures, "--out", plan.report)


def _sources(plan: RunPlan) -> list[str]:
    return ["--traces", str(plan.traces), "--metrics", str(plan.metrics), "--figures", str(plan.figures),
            "--report", str(plan.report), "--analysis-scripts", str(plan.analysis_scripts), "--date", release_date(plan.traces)]


def stage_card(plan: RunPlan) -> None:
    _cli("card", "--out", plan.out / "dataset_card.md", *_sources(plan))


def stage_bundle(plan: RunPlan) -> None:
    _cli("bundle", "--out", plan.bundle, *_sources(plan))
    # The manifest beside the committed artifacts is the bundle's: same files, same digests.
    shutil.copyfile(plan.bundle / "MANIFEST.sha256", plan.out / "MANIFEST.sha256.tmp")
    (plan.out / "MANIFEST.sha256.tmp").replace(plan.out / "MANIFEST.sha256")
    _cli("verify", plan.bundle)


def release_date(traces: Path) -> str:
    """The day the newest run was recorded (so the card, and the manifest, follow from the traces)."""
    stamps = []
    for env in traces.glob("*/*/environment.json"):
        try:
            stamps.append(json.loads(env.read_text())["recorded_at"])
        except (OSError, ValueError, KeyError):
            continue
    return max(stamps)[:10] if stamps else datetime.now().date().isoformat()


STAGE_FUNCTIONS: dict[str, Callable[[RunPlan], None]] = {
    "bench": stage_bench,
    "analyze": stage_analyze,
    "figures": stage_figures,
    "report": stage_report,
    "card": stage_card,
    "bundle": stage_bundle,
}


def run_pipeline(plan: RunPlan) -> dict[str, float]:
    """Run every stage in order; return each stage's wall time in seconds."""
    plan.out.mkdir(parents=True, exist_ok=True)
    for i, stage in enumerate(STAGES, 1):
        print(f"\n==> [{i}/{len(STAGES)}] {stage}", flush=True)
        t0 = time.perf_counter()
        STAGE_FUNCTIONS[stage](plan)
        plan.stage_seconds[stage] = time.perf_counter() - t0
        print(f"    {stage} done in {plan.stage_seconds[stage]:.1f} s", flush=True)
    return plan.stage_seconds


def claims_summary(metrics: Path) -> str:
    """The claims table with the report's verdicts, as a terminal reader wants it."""
    import pandas as pd

    from muon_repro.analysis.tables import read_table
    from muon_repro.report.context import report_verdict

    claims, runs = read_table(metrics / "claims.parquet"), read_table(metrics / "runs.parquet")

    def cell(value) -> str:
        if value is None or value is pd.NA:
            return "-"
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    header = ["claim", "claimed", "measured", "verdict"]
    rows = [[str(c["claim"]), cell(c["seed_value"]), cell(c["measured_value"]), report_verdict(c, runs)] for _, c in claims.iterrows()]
    widths = [min(64, max(len(h), *(len(r[i]) for r in rows))) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join((c if len(c) <= w else c[: w - 3] + "...").ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])
