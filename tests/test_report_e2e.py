"""End to end on real runs: record a tiny Muon/AdamW pair, analyze it, draw the figures, write the report.

One test, so that the recording happens once per session even under ``pytest -n``.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest

from muon_repro.cli import main
from muon_repro.report.context import SECTIONS
from muon_repro.report.figures import FIGURES

CONFIGS = ("comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2")


@pytest.mark.slow
def test_figures_and_report_from_recorded_runs(tmp_path: Path, monkeypatch) -> None:
    from pypdf import PdfReader

    from muon_repro.bench.configs import resolve
    from muon_repro.bench.sweep import record_local

    traces, metrics, figures, report = (tmp_path / d for d in ("traces", "metrics", "figures", "report"))
    command = ["muon-repro", "bench", *CONFIGS, "--scale", "tiny", "--out", "traces"]
    t0 = time.perf_counter()
    results = record_local([resolve(key, "tiny") for key in CONFIGS], traces, "gloo", command=command, progress=False)
    print(f"recorded in {time.perf_counter() - t0:.1f} s")
    assert len(results) == len(CONFIGS)
    assert main(["analyze", str(traces), "--out", str(metrics), "--workers", "1"]) == 0

    monkeypatch.chdir(tmp_path)  # the defaults: metrics/, traces/, figures/, report/
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
    assert not re.search(r"\b(None|nan|NaN)\b", md)
    for href in re.findall(r"\]\(([^)\s]+)\)", md):
        assert (report / href).resolve().is_file(), href
    text = " ".join(p.extract_text() for p in PdfReader(report / "report.pdf").pages)
    assert "Claims" in text and "reproduced" in text
