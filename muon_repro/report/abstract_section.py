"""The report's opening: the title block (title, version, date, authors) and the abstract.

The title, version and authors are those of the dataset the report cites, handed in as plain values by its caller
(what "How to cite" cites); without them, the artifact's citation metadata: the ``CITATION.cff`` at the artifact
root (the one ``muon-repro card`` writes); the report cannot import :mod:`muon_repro.dataset` (data flows one way). The
date is the newest run's recording day (the PDF's dates are the same), never the clock.

The abstract is made from the tables alone, at most :data:`MAX_WORDS` words: what was measured and
on what (runs), each verdict with its count and, for the claims not comparable here, the
conditions the runs differ in (claims.explanation), the consistency checks that fail (checks), and
where the cost model puts the claimed overheads (regime_thresholds, with the range its validated
error allows). Every number in it is a cell of a table, a count of rows, or a number a table's text
cell states (tests/test_report_abstract.py checks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from muon_repro.hardware import rows_of_profile
from muon_repro.report.checks_section import check_bound
from muon_repro.report.data import ReportData, is_missing
from muon_repro.report.formatting import count, percent
from muon_repro.report.selection import pipeline_runs
from muon_repro.report.study_section import study_sentence
from muon_repro.yaml_text import read_yaml

MAX_WORDS = 210
CITATION_FILE = "CITATION.cff"
# The shipped cost-model profile of the original study's 4 GPUs (muon_repro.analysis.claims.STUDY_MACHINE; the
# report may not import the analysis) and, per claim the cost model predicts, the regime_thresholds metric
# (muon_repro.analysis.claims.CLAIMS' ``prediction``).
STUDY_MACHINE = "4xRTXA4000-pcie-nccl"
PREDICTED_BY = {"optimizer_share": "optimizer_share", "latency_overhead": "muon_extra"}
OVERHEAD_NAMES = {"optimizer_share": "Muon's optimizer share", "muon_extra": "its extra step time over AdamW"}
NOT_COMPARABLE = "not comparable here"


def citation(root: Path) -> dict[str, Any]:
    """The artifact's citation metadata (``root/CITATION.cff``): title, version, authors; {} if there is none."""
    path = Path(root) / CITATION_FILE
    if not path.is_file():
        return {}
    try:
        cff = read_yaml(path)
    except ValueError as exc:  # names the file
        raise ValueError(f"{exc}; rewrite it with `muon-repro card`") from None
    if not isinstance(cff, dict):
        raise ValueError(f"{path}: not a Citation File Format document")
    authors = [
        str(a.get("name") or " ".join(filter(None, (a.get("given-names"), a.get("family-names")))))
        for a in cff.get("authors") or []
    ]
    return {"title": cff.get("title"), "version": cff.get("version"), "authors": [a for a in authors if a.strip()]}


def title_block(
    root: Path, recorded_at: str, *, title: str, version: str, identity: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Title, version, date and authors: the cited dataset's ``identity`` (title, version, authors: what "How to
    cite" cites), else the citation metadata where ``root`` has a CITATION.cff (else the report's own title and the
    package version, the authors said to be unstated); the date from the runs."""
    meta = dict(identity) if identity is not None else citation(root)
    authors = meta.get("authors") or []
    return {
        "title": str(meta.get("title") or title),
        "subtitle": title if meta.get("title") and meta.get("title") != title else "",
        "version": str(meta.get("version") or version),
        "date": recorded_at[:10] if recorded_at else "not recorded (no run states when it was recorded)",
        "authors": ", ".join(authors) if authors else f"not stated (no {CITATION_FILE} beside the metrics folder)",
        "author_names": ", ".join(authors),  # the PDF's Author field: empty where none is stated
    }


# ---------------------------------------------------------------- the abstract


def not_comparable_reasons(claims: pd.DataFrame) -> list[tuple[str, int]]:
    """The conditions the runs differ in (claims.outside_conditions), each with how many claims it keeps from being
    compared, most claims first; one difference against several claims' bounds is said once
    (``4 tokens per step per d_model, not 100+ or 1,000+``)."""
    counts: dict[str, int] = {}
    bounds: dict[str, list[str]] = {}
    for _, c in claims[claims["verdict"].astype(str) == NOT_COMPARABLE].iterrows():
        said = "" if is_missing(c["outside_conditions"]) else str(c["outside_conditions"])
        differences = (part.split(" (only ", 1)[0].strip() for part in said.split("; "))  # without the runs it names
        for reason in dict.fromkeys(d for d in differences if d):
            what, _, bound = reason.partition(", not ")
            counts[what] = counts.get(what, 0) + 1
            if bound and bound not in bounds.setdefault(what, []):
                bounds[what].append(bound)
    said = {what: f"{what}, not {' or '.join(bounds[what])}" if bounds.get(what) else what for what in counts}
    return sorted(((said[w], k) for w, k in counts.items()), key=lambda kv: -kv[1])


def _number(value: Any) -> str:
    v = float(value)
    return f"{v:,.0f}" if v == int(v) and abs(v) >= 1 else f"{v:.3g}"


def _measured_on(data: ReportData) -> str:
    runs = data.runs
    where = ", ".join(sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])}))
    params = sorted({int(p) for p in runs["model_params"].dropna()}) if "model_params" in runs else []
    tokens = sorted({int(t) for t in runs["tokens_per_step"].dropna()})
    model = (
        f"a {params[0]:,}-parameter GPT"
        if len(params) == 1
        else (f"GPTs of {params[0]:,} to {params[-1]:,} parameters" if params else "a GPT")
    )
    if not tokens:  # runs recorded before config.json said their tokens per step
        at = "tokens per step not recorded"
    else:
        at = (f"{tokens[0]:,}" if len(tokens) == 1 else f"{tokens[0]:,} to {tokens[-1]:,}") + " tokens per step"
    said = (
        f"Muon against AdamW (ZeRO-1 DP, Megatron TP{', 1F1B PP' if len(pipeline_runs(runs)) else ''}): communication, "
        "step time, bytes and "
        f"optimizer state of {model} at {at} in {len(runs)} runs ({data.described_profile}: "
        f"{where})"
    )
    conv = data.convergence
    if not conv.empty:
        said += f"; loss in {conv['run'].nunique()} convergence runs"
    return said + "."


def _verdicts(claims: pd.DataFrame) -> str:
    n = len(claims)
    counts = claims["verdict"].astype(str).value_counts()
    listed = ", ".join(f"{int(k)} {v}" for v, k in counts.items())
    said = f"Of {n} claims, {listed}" if len(counts) > 1 or int(counts.iloc[0]) != n else f"All {n} claims are {counts.index[0]}"
    reasons = not_comparable_reasons(claims)
    if reasons:
        unit = lambda k: "claim" if k == 1 else "claims"  # noqa: E731
        # the reasons are the "not comparable here" verdicts': said of them alone where other verdicts are counted too
        which = ", the runs being" if len(counts) == 1 else "; those not comparable here because the runs lie"
        said += f"{which} outside their conditions: " + "; ".join(
            f"{r} ({k} {unit(k)})" if i == 0 else f"{r} ({k})" for i, (r, k) in enumerate(reasons)
        )
    return said + "."


def _checks(checks: pd.DataFrame, *, named: bool = True) -> str:
    if checks.empty:
        return ""
    holds = checks["holds"]
    failing = checks[holds.notna() & ~holds.fillna(True).astype(bool)]
    if failing.empty:
        return f"All {len(checks)} consistency checks hold."
    if not named:
        return f"{len(failing)} of {len(checks)} consistency checks {'fails' if len(failing) == 1 else 'fail'} (checks table)."
    fails = "; ".join(f"{str(c['check']).rstrip('.')} ({_failed_against(c)})" for _, c in failing.iterrows())
    return f"{len(failing)} of {len(checks)} consistency checks {'fails' if len(failing) == 1 else 'fail'}: {fails}."


def _failed_against(check: pd.Series) -> str:
    """A failing check's value against what it had to be: ``2.31, not below 1`` for a bound, ``0.6, expected 0.5``."""
    bound = check_bound(check)
    against = f"not {bound}" if bound else "expected"
    return f"{_number(check['measured_value'])}, {against} {_number(check['expected'])}"


def _tokens_range(row) -> str:
    """A threshold with its range at the range's stated coverage, or alone when it has none."""
    low, high = row.tokens_per_step_low, row.tokens_per_step_high
    said = count(row.tokens_per_step, "regime_thresholds.tokens_per_step")
    coverage = getattr(row, "range_coverage", None)
    if is_missing(coverage) or (is_missing(low) and is_missing(high)):
        return said
    lo = "below the grid" if is_missing(low) else count(low, "regime_thresholds.tokens_per_step_low")
    hi = "beyond the grid" if is_missing(high) else count(high, "regime_thresholds.tokens_per_step_high")
    return f"{said} ({lo}–{hi}, {float(coverage):.0%} range)"


def _thresholds(claims: pd.DataFrame, thresholds: pd.DataFrame, *, models: int | None = None) -> str:
    if thresholds.empty:
        return ""
    th = thresholds[(thresholds["machine"].astype(str) == STUDY_MACHINE) & thresholds["tokens_per_step"].notna()]
    parts = []
    for _, c in claims.iterrows():
        metric = PREDICTED_BY.get(str(c["claim_id"]))
        if metric is None or is_missing(c["claimed_value"]):
            continue
        level = float(c["claimed_value"])
        picks = th[(th["metric"].astype(str) == metric) & (th["level"].astype(float).round(4) == round(level, 4))]
        if picks.empty:
            continue
        at = " and ".join(f"{_tokens_range(r)} for {r.model}" for r in list(picks.itertuples())[:models])
        verb = "falls to" if not parts else "to"
        parts.append(f"{OVERHEAD_NAMES[metric]} {verb} {percent(level, 'claims.claimed_value')} at {at}")
    if not parts:
        return ""
    return "By the cost model (tokens per step, on the original study's 4 GPUs), " + "; ".join(parts) + "."


def abstract(data: ReportData) -> str:
    """The abstract, from the tables of the report's profile: at most :data:`MAX_WORDS` words, the failing checks
    named and every model's thresholds given where that fits, else counted and the first model's (ValueError if
    even that is too long)."""
    profile = data.described_profile
    claims = rows_of_profile(data.claims, profile)
    checks = rows_of_profile(data.checks, profile)
    th = data.regime_thresholds
    thresholds = rows_of_profile(th, profile) if "profile" in th.columns else th
    measured, verdicts = _measured_on(data), _verdicts(claims) if not claims.empty else ""
    study = study_sentence(data)  # the claims judged on the runs they were made on come first
    ours = "Our own runs: " if study else ""
    for named, models in ((True, None), (True, 1), (False, None), (False, 1)):
        parts = [study, ours + measured, verdicts, _checks(checks, named=named), _thresholds(claims, thresholds, models=models)]
        text = " ".join(p for p in parts if p)
        if len(text.split()) <= MAX_WORDS:
            return text
    raise ValueError(f"the abstract has {len(text.split())} words, more than {MAX_WORDS}: {text}")
