"""The report's last two sections: "How to reproduce" (the commands that recorded the runs, then those
that made the report) and "How to cite" (BibTeX for this artifact and for the paper)."""

from __future__ import annotations

from collections.abc import Iterable

import muon_repro
from muon_repro.report.data import MissingMetric, ReportData, is_missing, require_columns


def reproduce(data: ReportData, invocations: Iterable[str]) -> list[str]:
    """The recording commands (runs.command, each once), then the commands that made this report."""
    require_columns(data.runs, "runs", ("command",))
    recorded = list(dict.fromkeys(str(c) for c in data.runs["command"] if not is_missing(c) and str(c).strip()))
    if not recorded:
        raise MissingMetric("metric runs.command is missing for every run: no run records the command that made it")
    return [*recorded, *invocations]


def bibtex(data: ReportData) -> tuple[str, str]:
    """BibTeX for this artifact (its version and the runs' git commit) and for the paper."""
    shas = [str(s) for s in data.runs["git_sha"] if not is_missing(s)] if "git_sha" in data.runs.columns else []
    sha = shas[0] if shas else "unknown"
    artifact = (
        "@software{muon_repro,\n"
        "  title = {muon\\_repro: a reproducibility artifact for Distributed Muon},\n"
        "  author = {{muon\\_repro developers}},\n"
        f"  version = {{{muon_repro.__version__}}},\n"
        f"  note = {{git {sha[:12]}; traces, tables, figures and this report}},\n"
        "  year = {2025}\n"
        "}"
    )
    paper = (
        "@article{liu2025muon,\n"
        "  title = {Muon is Scalable for LLM Training},\n"
        "  author = {Jingyuan Liu and Jianlin Su and Xingcheng Yao and Zhejun Jiang and Guokun Lai and Yulun Du and others},\n"
        "  journal = {arXiv preprint arXiv:2502.16982},\n"
        "  year = {2025}\n"
        "}"
    )
    return artifact, paper
