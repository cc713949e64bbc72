"""End to end on real runs: record a tiny Muon/AdamW pair in two interleaved trials, analyze it, draw the
figures, write the report (from the tables alone: figures and report never look at traces/).

One test, so that the recording happens once per session even under ``pytest -n``.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest

from muon_repro.cli import main
from muon_repro.report.claims_section import VERDICTS
from muon_repro.report.context import SECTIONS
from muon_repro.report.figures import FIGURES as TABLE_FIGURES
from muon_repro.report.regime_figures import REGIME_FIGURES

FIGURES = (*TABLE_FIGURES, *REGIME_FIGURES)  # every figure the report shows

CONFIGS = ("comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2")
TRIALS = 2


@pytest.mark.slow
def test_figures_and_report_from_recorded_runs(tmp_path: Path, monkeypatch) -> None:
    from pypdf import PdfReader

    from muon_repro.bench.configs import resolve
    from muon_repro.bench.sweep import record_local

    traces, metrics, figures, report = (tmp_path / d for d in ("traces", "metrics", "figures", "report"))
    command = ["muon-repro", "bench", *CONFIGS, "--scale", "tiny", "--trials", str(TRIALS), "--out", "traces"]
    t0 = time.perf_counter()
    results = record_local(
        [resolve(key, "tiny") for key in CONFIGS], traces, "gloo", trials=TRIALS, command=command, progress=False
    )
    print(f"recorded in {time.perf_counter() - t0:.1f} s")
    assert len(results) == len(CONFIGS) * TRIALS
    assert main(["analyze", str(traces), "--out", str(metrics), "--workers", "1"]) == 0

    monkeypatch.chdir(tmp_path)  # the defaults: metrics/, figures/, report/
    t0 = time.perf_counter()
    assert main(["figures"]) == 0
    assert main(["report"]) == 0
    print(f"figures and report in {time.perf_counter() - t0:.1f} s")

    for name in FIGURES:
        assert (figures / f"{name}.png").is_file() and (figures / f"{name}.svg").is_file()
    md = (report / "report.md").read_text()
    for _, heading in SECTIONS:
        assert f"## {heading}" in md
    assert shlex.join(command) in md and "muon-repro analyze traces --out metrics" in md
    assert "muon-repro figures --metrics metrics --out figures" in md and "--traces" not in md
    assert not re.search(r"\b(None|nan|NaN)\b", md)
    # The claims as the analysis judged them, one vocabulary; the optimizer step decomposed per rank.
    import pandas as pd

    claims = pd.read_parquet(metrics / "claims.parquet")
    assert set(claims["verdict"]) <= set(VERDICTS) and "different conditions" not in md
    claims_md = md.split("## Claims\n", 1)[1].split("\n## ", 1)[0]
    for _, c in claims.iterrows():
        assert any(ln.startswith(f"| {c['claim']} |") and f"| {c['verdict']} |" in ln for ln in claims_md.splitlines()), c[
            "claim_id"
        ]
    decomposed = md.split("## The optimizer step, decomposed\n", 1)[1].split("\n## ", 1)[0]
    assert "Muon's extra over AdamW per token" in decomposed
    rank_by_rank = md.split("### A5. The optimizer step, rank by rank\n", 1)[1].split("\n#", 1)[0]  # in the appendix
    assert "| Newton-Schulz (Muon) |" in rank_by_rank and "Muon r3 | AdamW r0" in rank_by_rank
    for href in re.findall(r"\]\(([^)\s]+)\)", md):
        if href.startswith(("../docs/method.md#", "#")):
            continue  # the repository's method notes beside report/, and the report's own sections (anchors: test_report.py)
        assert (report / href).resolve().is_file(), href
    text = " ".join(p.extract_text() for p in PdfReader(report / "report.pdf").pages)
    assert "Claims" in text and "reproduced" in text
