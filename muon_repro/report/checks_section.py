"""The report's consistency checks: the ``checks`` table in the report's words, and its summary line.

A check compares what a run did with what its construction gives (Muon's state for the matrices it
manages is half AdamW's; the traces' bytes are the ring model's), so it holds or fails; a check that
fails is a bug or a cost the construction leaves out (Muon's gather buffers), and the report says which.
"""

from __future__ import annotations

import pandas as pd

from muon_repro.hardware import rows_of_profile
from muon_repro.report.data import ReportData, is_missing, metric, require_columns
from muon_repro.report.formatting import as_number, pct

CHECK_COLUMNS = (
    "check_id",
    "check",
    "expected",
    "measured_value",
    "measured_low",
    "measured_high",
    "unit",
    "unit_kind",
    "holds",
    "claimed_region",
    "in_claimed_region",
    "fails_if",
    "explanation",
)
HEADER = ["check", "expected (or bound)", "measured (range over ranks)", "holds", "claimed", "fails if"]
# The checks whose ``expected`` is a bound, not a value, and how the measured value must lie against it: by check id,
# the words, as :mod:`muon_repro.analysis.checks` judges ``holds`` (state_with_transients: the largest rank's ratio
# below 1; the others equal their expected value). tests/test_report_bookkeeping.py holds the committed checks to it.
BOUNDS = {"state_with_transients": "below"}


def check_number(value: object, kind: str, what: str) -> str:
    """A check's number in its ``unit_kind``, as claims write theirs: ``1.249695×`` (a ratio), ``50.0%`` (a fraction).

    A check's ratio is exact arithmetic, so it gets the decimals (3 to 6) it needs not to read as a rounder number:
    1.000122 is printed so, never as the 1.000 of a neighbour whose 1.0 sits outside the claimed region."""
    v = as_number(value, what)
    if kind == "fraction":
        return pct(v, what)
    if kind == "change":
        return pct(v, what, signed=True).replace("-", "−")
    if kind != "ratio":
        raise ValueError(f"{what}: unit_kind {kind!r} is not ratio, fraction or change; re-run `muon-repro analyze`")
    text = f"{v:.6f}".rstrip("0")
    decimals = len(text.partition(".")[2])
    return f"{v:.{max(decimals, 3)}f}×"


def _measured(row: pd.Series) -> str:
    kind, cid = str(row["unit_kind"]), str(row["check_id"])
    value = check_number(metric(row, "measured_value", "checks", "check_id"), kind, f"checks.measured_value ({cid})")
    low = check_number(metric(row, "measured_low", "checks", "check_id"), kind, f"checks.measured_low ({cid})")
    high = check_number(metric(row, "measured_high", "checks", "check_id"), kind, f"checks.measured_high ({cid})")
    return value if low == high == value else f"{value} ({low}–{high})"


def check_bound(row: pd.Series) -> str | None:
    """How a bound check's measured value must lie against ``expected`` (``below``), None for an equality."""
    return BOUNDS.get(str(row.get("check_id")))


def check_expected(row: pd.Series) -> str:
    """A check's expected value in its unit (``1.249695×``), a bound said as one (``below 1.000×``); ``—`` without one."""
    if is_missing(row.get("expected")):
        return "—"
    cid = str(metric(row, "check_id", "checks", "check_id"))
    value = check_number(metric(row, "expected", "checks", "check_id"), str(row["unit_kind"]), f"checks.expected ({cid})")
    bound = check_bound(row)
    return f"{bound} {value}" if bound else value


def check_claimed(row: pd.Series) -> str:
    """The claimed region of a check and whether its value lies inside: ``[0.5, 0.5] (inside)``; ``—`` without one."""
    if is_missing(row.get("claimed_region")):
        return "—"
    inside = row.get("in_claimed_region")
    where = "" if is_missing(inside) else (" (inside)" if bool(inside) else " (outside)")
    return f"{row['claimed_region']}{where}"


def check_verdict(row: pd.Series) -> str:
    """holds, fails, or not checked (the run recorded nothing to hold the value against)."""
    holds = row.get("holds")
    return "not checked" if is_missing(holds) else ("holds" if bool(holds) else "fails")


def checks_matrix(data: ReportData, profile: str | None = None) -> tuple[list[str], list[list[str]], list[str]]:
    """The checks of one hardware profile (default: the view's, else the one with most runs): header, rows and
    each row's explanation; no rows when no run pair could be checked."""
    profile = profile or data.described_profile
    checks = rows_of_profile(data.checks, profile)
    require_columns(checks, "checks", CHECK_COLUMNS)
    rows, notes = [], []
    for _, c in checks.iterrows():
        rows.append([str(c["check"]), check_expected(c), _measured(c), check_verdict(c), check_claimed(c), str(c["fails_if"])])
        notes.append(f"{c['explanation']} Unit: {c['unit']}.")
    return list(HEADER), rows, notes


def checks_summary(data: ReportData) -> str:
    """One summary line: how many checks hold, and each that fails by name."""
    profile = data.described_profile
    checks = rows_of_profile(data.checks, profile)
    if checks.empty:
        return (
            "Consistency checks (state and bytes, set against what the construction calls for): none made, no Muon and "
            "AdamW pair at DP2·TP2."
        )
    require_columns(checks, "checks", CHECK_COLUMNS)
    verdicts = [(check_verdict(c), str(c["check"])) for _, c in checks.iterrows()]
    said = f"{sum(v == 'holds' for v, _ in verdicts)} of {len(checks)} hold"
    failing = [check for v, check in verdicts if v == "fails"]
    unchecked = sum(v == "not checked" for v, _ in verdicts)
    if unchecked:
        said += f", {unchecked} not checked (nothing recorded to hold them against)"
    if failing:
        said += "; fails: " + "; ".join(f"'{check}'" for check in failing)
    return f"Consistency checks (state and bytes, set against what the construction calls for, beside the claims): {said}."
