"""The numbers a figure states beside what it draws: the claims' and checks' values, read from their tables.

A number a figure prints in its title or takeaway is either a claim's or a check's value, read from
``claims.measured_value`` (or a number its explanation states, from ``stated_numbers``) or ``checks.measured_value`` and
written by the same functions as the report's claims and checks tables
(:func:`~muon_repro.report.claims_section.claim_number`, :func:`~muon_repro.report.checks_section.check_number`),
or it says in its own words which other quantity it is (``the bars, profiled steps incl. waiting``).

Each builder returns a :class:`Stated`: the text the figure prints, and each table value it quotes
(``claims.comm_time_dp2_tp2.measured_value`` -> the string printed), so a test can hold the figure
to the tables. Only the tables: no torch, no run directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from muon_repro.claims import STUDY_SHARE
from muon_repro.hardware import PROFILE_FIELD, rows_of_profile
from muon_repro.report.checks_section import check_claimed, check_number, check_verdict
from muon_repro.report.claims_section import claim_measured, claim_number
from muon_repro.report.data import is_missing, metric
from muon_repro.report.formatting import mb, pct, ratio

COMM_CLAIM = "comm_time_dp2_tp2"
SHARE_CLAIM = "optimizer_share"
STATE_CHECK = "state_accounting"


@dataclass(frozen=True)
class Stated:
    """What a figure prints from the tables: ``text``, and ``values``: ``<table>.<id>.<column>`` -> as printed."""

    text: str
    values: dict[str, str] = field(default_factory=dict)


def profile_of(runs: pd.DataFrame) -> str | None:
    """The hardware profile of the runs a figure draws (its view holds one), None when the table has none."""
    if PROFILE_FIELD not in runs.columns or runs.empty:
        return None
    return str(runs[PROFILE_FIELD].astype(str).value_counts().index[0])


def row_of(table: pd.DataFrame, key: str, value: str, profile: str | None) -> pd.Series | None:
    """The row of ``table`` whose ``key`` is ``value`` on ``profile``; None when there is none or it holds no value."""
    if table is None or table.empty or key not in table.columns:
        return None
    rows = rows_of_profile(table, profile) if profile is not None else table
    rows = rows[rows[key] == value]
    if rows.empty or is_missing(rows.iloc[0].get("measured_value")):
        return None
    return rows.iloc[0]


ID_COLUMNS = {"claims": "claim_id", "checks": "check_id"}


def stated_number(numbers: pd.DataFrame, table: str, row: pd.Series, name: str) -> float | None:
    """The number ``name`` that the explanation of ``row`` (of ``table``: claims or checks) states, from the
    ``stated_numbers`` table; None when it states none."""
    if numbers is None or numbers.empty:
        return None
    hit = numbers[
        (numbers["table"] == table)
        & (numbers["row_id"] == row[ID_COLUMNS[table]])
        & (numbers["profile"] == row["profile"])
        & (numbers["name"] == name)
    ]
    return None if hit.empty or is_missing(hit["value"].iloc[0]) else float(hit["value"].iloc[0])


def claimed(row: pd.Series) -> str | None:
    """The claim's claimed value in its unit (``0.57×``, ``1.1%``), None when the claim states none."""
    if is_missing(row.get("claimed_value")):
        return None
    return claim_number(row["claimed_value"], str(row["unit_kind"]), str(row["claim_id"]), "claims.claimed_value", digits=0)


# ---------------------------------------------------------------- Figure 1: communication time per collective kind


def comm_time(bar_ratios: dict[str, float], claims: pd.DataFrame, numbers: pd.DataFrame, profile: str | None) -> Stated:
    """The takeaway of ``comm_time_by_kind``. ``bar_ratios``: grid label -> Muon / AdamW of what the bars draw
    (``runs.comm_ms``: profiled steps, every collective's time including the wait for the last rank), which is
    not the claim's quantity; the claim's (transfer time only, steps timed without the profiler, paired by
    round) is quoted from the claims table, with the ratio including waiting that the claim keeps beside it."""
    values: dict[str, str] = {}
    bars = ", ".join(f"{grid} {ratio(v, f'runs.comm_ms ratio at {grid}')}" for grid, v in bar_ratios.items())
    parts = [f"the bars (profiled steps, communication incl. waiting): {bars}"] if bars else []
    row = row_of(claims, "claim_id", COMM_CLAIM, profile)
    if row is not None:
        cid, kind = COMM_CLAIM, str(row["unit_kind"])
        measured = claim_measured(row)
        values[f"claims.{cid}.measured_value"] = claim_number(row["measured_value"], kind, cid)
        what = "transfer time" if "transfer" in str(row["unit"]) else "communication time"
        said = f"the claim's quantity ({what}, steps timed without the profiler, paired by round): {measured}"
        with_waiting = stated_number(numbers, "claims", row, "comm_ms_ratio_with_waiting")
        key = f"stated_numbers.{cid}.comm_ms_ratio_with_waiting"
        if with_waiting is not None:
            values[key] = claim_number(with_waiting, kind, cid, "stated_numbers.value")
            said += f", incl. waiting {values[key]}"
        study = claimed(row)
        if study is not None:
            values[f"claims.{cid}.claimed_value"] = study
            said += f" (Wei's study, 4 GPUs: {study})"
        parts.insert(0, f"DP2·TP2 {said}")
    if not bar_ratios:
        parts.append("only one optimizer recorded: no Muon / AdamW ratio drawn")
    return Stated("Muon / AdamW: " + "; ".join(parts), values)


# ---------------------------------------------------------------- Figure 3: the optimizer's share of the step


def optimizer_share(bar_shares: dict[str, list[float]], claims: pd.DataFrame, profile: str | None) -> Stated:
    """The takeaway of ``optimizer_overhead``. ``bar_shares``: optimizer label -> the shares the bars draw
    (``runs.optimizer_share``: the claims' estimator, on the steps timed without the profiler); the claim's value,
    which is its run's bar, and the original study's value from the claims table."""
    values: dict[str, str] = {}
    parts = []
    for label, shares in bar_shares.items():
        lo, hi = pct(min(shares), "runs.optimizer_share"), pct(max(shares), "runs.optimizer_share")
        parts.append(f"{label} {lo}" if lo == hi else f"{label} {lo.removesuffix('%')}–{hi}")
    text = "the bars: " + ", ".join(parts) if parts else "no runs"
    row = row_of(claims, "claim_id", SHARE_CLAIM, profile)
    if row is not None:
        values[f"claims.{SHARE_CLAIM}.measured_value"] = claim_number(row["measured_value"], str(row["unit_kind"]), SHARE_CLAIM)
        text += f"; the claim, Muon DP2·TP2 (its bar): {claim_measured(row)}"
        study = claimed(row)
        if study is not None:
            values[f"claims.{SHARE_CLAIM}.claimed_value"] = study
            text += f"; Wei's study measured ~{study} for Muon"
    return Stated(text, values)


def study_share(claims: pd.DataFrame, profile: str | None, default: float = STUDY_SHARE.value) -> float:
    """The original study's optimizer share (``claims.claimed_value``), its declared level without the claim."""
    row = row_of(claims, "claim_id", SHARE_CLAIM, profile)
    return default if row is None or is_missing(row.get("claimed_value")) else float(row["claimed_value"])


# ---------------------------------------------------------------- Figure 4: optimizer-state memory


def state_check(checks: pd.DataFrame, profile: str | None) -> Stated:
    """What ``state_memory`` says of the state check (``checks`` row ``state_accounting``), in the words and numbers
    of the report's checks table: its value (Muon / AdamW for the elements Muon manages), whether it holds, and its
    claimed region; empty without the check."""
    row = row_of(checks, "check_id", STATE_CHECK, profile)
    if row is None:
        return Stated("")
    said = check_number(row["measured_value"], str(row["unit_kind"]), f"checks.measured_value ({STATE_CHECK})")
    values = {f"checks.{STATE_CHECK}.measured_value": said}
    text = f"the state check, on the elements Muon manages: {said}, {check_verdict(row)}"
    if not is_missing(row.get("claimed_region")):
        values[f"checks.{STATE_CHECK}.claimed_region"] = str(row["claimed_region"])
        text += f"; claimed {check_claimed(row)}"
    return Stated(text, values)


# ---------------------------------------------------------------- Figure 5: bytes per step by layout


def bytes_checks(checks: pd.DataFrame, profile: str | None) -> pd.DataFrame:
    """The bytes checks (one per Muon layout) of ``profile``: the rows of ``checks`` with a layout."""
    if checks is None or checks.empty or "layout" not in checks.columns:
        return pd.DataFrame(columns=["check_id", "profile", "layout", "measured_value", "unit"])
    rows = rows_of_profile(checks, profile) if profile is not None else checks
    return rows[rows["layout"].notna()].reset_index(drop=True)


def dp_bytes(checks: pd.DataFrame, numbers: pd.DataFrame, profile: str | None, layout: str, optimizer: str) -> float | None:
    """The DP-group optimizer bytes per rank per step the bytes check of ``layout`` measured for ``optimizer``
    (``stated_numbers``: muon_dp_bytes, adamw_dp_bytes), None without that check."""
    rows = bytes_checks(checks, profile)
    rows = rows[rows["layout"] == layout]
    return None if rows.empty else stated_number(numbers, "checks", rows.iloc[0], f"{optimizer}_dp_bytes")


def dp_mb(value: float) -> str:
    """DP-group bytes as the bytes figure prints them, and the checks' explanations: ``10.49 MB``."""
    return mb(value, "stated_numbers.value (DP-group bytes)")


def bytes_by_layout(
    grid: str,
    total_ratios: dict[str, float],
    agree: str,
    checks: pd.DataFrame,
    profile: str | None,
    order: Sequence[str] = (),
) -> Stated:
    """The takeaway of ``bytes_by_layout``: the bytes checks' ratios (DP group, the paper's quantity) as the checks
    table writes them, then the ratios of what the bars add up to (every optimizer phase, Muon's TP gather
    included), named as such. ``total_ratios``: layout -> Muon / AdamW of the bar totals; ``order``: the layouts in
    the order the bars draw them, which both lists follow (a layout it does not name comes after, as the table has it)."""
    values: dict[str, str] = {}
    checked = []
    region = None
    rows = bytes_checks(checks, profile)
    rank = {layout: i for i, layout in enumerate(order)}
    rows = rows.iloc[sorted(range(len(rows)), key=lambda i: rank.get(str(rows["layout"].iloc[i]), len(rank)))]
    for _, c in rows.iterrows():
        cid = str(metric(c, "check_id", "checks", "check_id"))
        said = check_number(c["measured_value"], str(c["unit_kind"]), f"checks.measured_value ({cid})")
        values[f"checks.{cid}.measured_value"] = said
        checked.append(f"{str(c['layout']).replace('_', '-')} {said}")
        region = region or (None if is_missing(c.get("claimed_region")) else str(c["claimed_region"]))
    totals = ", ".join(
        f"{layout.replace('_', '-')} {ratio(total_ratios[layout], 'bytes ratio')}"
        for layout in sorted(total_ratios, key=lambda layout: rank.get(layout, len(rank)))
    )
    if not checked:
        return Stated(f"{grid}: {agree} (no AdamW run to compare with)" if not totals else f"{grid}: {totals}; {agree}")
    text = f"{grid}: Muon / AdamW bytes on the DP group (the bytes checks' quantity): {', '.join(checked)}" + (
        f" (paper: {region})" if region else ""
    )
    if totals:
        text += f"; all optimizer bytes, Muon's TP gather included (the bar totals): {totals}"
    return Stated(f"{text}; {agree}", values)


# ---------------------------------------------------------------- The pipeline figure: the two 3-D claims


def pipeline(claims: pd.DataFrame, profile: str | None) -> Stated:
    """The takeaway of ``pipeline``: the claims ``hybrid_survives_pp`` and ``bubble_hides_step`` as the claims
    table writes them (steps timed without the profiler, paired by round), with their verdicts."""
    values: dict[str, str] = {}
    parts = []
    for cid, said in (
        ("hybrid_survives_pp", "Muon, DP2·TP2 over the fastest pipeline grid"),
        ("bubble_hides_step", "PP4's optimizer time paid after its last backward over a stage's optimizer step"),
    ):
        row = row_of(claims, "claim_id", cid, profile)
        if row is None:
            continue
        values[f"claims.{cid}.measured_value"] = claim_number(row["measured_value"], str(row["unit_kind"]), cid)
        parts.append(f"{said}: {claim_measured(row)}, {row['verdict']}")
    text = "; ".join(parts) + " (claims table)" if parts else "the claims table holds no pipeline claim"
    return Stated(text, values)
