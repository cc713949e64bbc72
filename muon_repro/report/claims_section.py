"""The report's claims: the claims table in the report's words, and the summary made from it.

Each claim's measured value with its 95% interval, the region of values that agree with it and the
analysis's verdict, written in the claim's unit (``1.62× (1.48–1.77)``, ``≤ +3.0%``); one table
column per hardware profile; and the summary's lines, one per kind of claim.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from muon_repro.claims import BY_ID, CLAIMS, TOPICS, UNEQUAL_WORK, VERDICTS
from muon_repro.hardware import rows_of_profile
from muon_repro.report.data import MissingMetric, ReportData, is_missing, metric, require_columns, study_profile
from muon_repro.report.formatting import as_number, pct, percent, ratio
from muon_repro.values import counted

SUMMARY_LINES = tuple((topic, tuple(c.claim_id for c in CLAIMS if c.topic == topic)) for topic in TOPICS)


def report_verdict(row: pd.Series, runs: pd.DataFrame) -> str:
    """The claims table's verdict, as it is (one vocabulary, :data:`VERDICTS`, decided by the
    analysis from the 95% interval and the claim's region); ``runs`` is not consulted. A verdict
    outside the vocabulary (a claims table from an older analysis) is refused."""
    verdict = str(metric(row, "verdict", "claims", "claim_id"))
    if verdict not in VERDICTS:
        raise MissingMetric(
            f"metric claims.verdict of claim {row.get('claim_id', '?')} is {verdict!r}, not one of {', '.join(VERDICTS)}: "
            "re-run `muon-repro analyze`"
        )
    return verdict


def claim_number(value: Any, kind: str, claim_id: str, what: str = "claims.measured_value", digits: int | None = None) -> str:
    """One number of a claim as its ``unit_kind`` reads: ``1.62×`` (ratio), ``33.6%`` (fraction), ``+69.6%`` (change)."""
    label = f"{what} ({claim_id})"
    if digits == 0:  # a claim's bound: as few digits as it has (0.456×, 1.5×, 2.2%)
        v = as_number(value, label)
        by_kind = {
            "ratio": f"{v:.3g}×",
            "fraction": percent(v, label, 3),
            "change": percent(v, label, 3, signed=True).replace("-", "−"),
        }
        return by_kind.get(kind, f"{v:.3g}")
    if kind == "fraction":
        return pct(value, label)
    if kind == "change":
        return pct(value, label, signed=True).replace("-", "−")
    if kind == "ratio":
        return ratio(value, label, digits or 2)
    return f"{as_number(value, label):.3g}"


def claimed_text(row: pd.Series) -> str:
    """What the claim states, in its declaration's words (``0.57×``, ``1–3%``); a claim not declared here, its
    claimed value in the table's unit."""
    cid = str(row["claim_id"])
    declared = BY_ID.get(cid)
    if declared is not None:
        return declared.claimed_text
    if is_missing(row.get("claimed_value")):
        return "not stated"
    return claim_number(row["claimed_value"], str(row["unit_kind"]), cid, "claims.claimed_value")


def claim_measured(row: pd.Series) -> str:
    """The measured value with its 95% interval: ``1.62× (1.48–1.77)``, ``−20.9% (−64.3% to +67.9%)``;
    ``(no spread)`` when the interval is a point (bytes, state: the same on every rank); without an
    interval (one round) the value alone, saying so. A share's interval is within [0, 1] by construction
    (``rounds.share_interval``); a lead's (a fraction too) may run below 0, and is then printed signed."""
    cid, kind = str(row["claim_id"]), str(row["unit_kind"])
    if is_missing(row.get("measured_value")):
        return "not measured"
    missing = [is_missing(row.get("measured_low")), is_missing(row.get("measured_high"))]
    if kind == "fraction" and not missing[0] and float(row["measured_low"]) < 0:
        kind = "change"  # a fraction that runs below 0 (a lead, never a share) is read with its signs, as a change
    value = claim_number(row["measured_value"], kind, cid)
    if all(missing):
        return f"{value} (no interval: fewer than 2 rounds)"  # a paired interval needs two rounds
    if missing[1]:  # a one-sided interval: the tables keep an infinite end as null
        return f"{value} (from {claim_number(row['measured_low'], kind, cid, 'claims.measured_low')}, no upper end)"
    if missing[0]:
        return f"{value} (up to {claim_number(row['measured_high'], kind, cid, 'claims.measured_high')}, no lower end)"
    low = claim_number(row["measured_low"], kind, cid, "claims.measured_low")
    high = claim_number(row["measured_high"], kind, cid, "claims.measured_high")
    if low == high == value:
        return f"{value} (no spread)"
    if kind == "change" or float(row["measured_low"]) < 0:
        return f"{value} ({low} to {high})"
    if kind == "ratio":
        return f"{value} ({low.removesuffix('×')}–{high.removesuffix('×')})"
    if kind == "fraction" and float(row["measured_low"]) == 0 < float(row["measured_value"]):
        # rounds.share_interval cut the t interval at 0 (a share no one can have): said, not passed off as a bound
        return f"{value} ({low.removesuffix('%')}–{high}, cut at 0)"
    return f"{value} ({low.removesuffix('%')}–{high})"


def claim_region(row: pd.Series) -> str:
    """The claims table's region (columns region_low, region_high, region_low_open) in the claim's unit:
    ``[0.456×, 0.684×]``, ``≤ +3%``, ``(1×, 1.25×]``."""
    cid, kind = str(row["claim_id"]), str(row["unit_kind"])
    low = -math.inf if is_missing(row.get("region_low")) else as_number(row["region_low"], f"claims.region_low ({cid})")
    high = math.inf if is_missing(row.get("region_high")) else as_number(row["region_high"], f"claims.region_high ({cid})")
    opening = "(" if bool(row.get("region_low_open")) is True else "["

    def fmt(v: float) -> str:
        return claim_number(v, kind, cid, "claims.region", digits=0)

    if math.isinf(low) and math.isinf(high):
        return "any value"
    if math.isinf(low):
        return f"≤ {fmt(high)}"
    if math.isinf(high):
        return f"{'≥' if opening == '[' else '>'} {fmt(low)}"
    return f"{opening}{fmt(low)}, {fmt(high)}]"


CLAIM_COLUMNS = (
    "claim_id",
    "claim",
    "source",
    "claimed_value",
    "region_low",
    "region_high",
    "region_low_open",
    "measured_value",
    "measured_low",
    "measured_high",
    "unit",
    "unit_kind",
    "conditions",
    "verdict",
    "outside_conditions",
    "explanation",
)


def claim_note(c: pd.Series) -> str:
    """A claim's measured cause as the report states it: how its runs differ from the claim's conditions
    (claims.outside_conditions) when they do, after the unequal work that decided the verdict first (claims.judge's
    order), then its explanation."""
    explanation = "" if is_missing(c["explanation"]) else str(c["explanation"]).strip()
    outside = "" if is_missing(c.get("outside_conditions")) else str(c["outside_conditions"]).strip()
    if not outside:
        return explanation
    lead = "Unequal work, and outside the claim's conditions" if c.get("verdict") == UNEQUAL_WORK else "Not comparable here"
    return f"{lead}: {outside}." + (f" Measured here: {explanation}" if explanation else "")


def claims_rows(data: ReportData, profile: str | None = None) -> list[dict[str, str]]:
    """The claims measured on one hardware profile (default: the view's, else the one with most runs)."""
    profile = profile or data.described_profile
    claims = rows_of_profile(data.claims, profile)
    require_columns(claims, "claims", CLAIM_COLUMNS)
    if claims.empty:
        raise MissingMetric(
            f"metrics table {data.metrics_dir / 'claims.parquet'} has no rows for profile {profile} (claims.profile), whose "
            f"runs {data.metrics_dir / 'runs.parquet'} holds: regenerate the tables with "
            f"`muon-repro analyze traces/ --out {data.metrics_dir}`"
        )
    rows = []
    for _, c in claims.iterrows():
        cid = str(metric(c, "claim_id", "claims", "claim_id"))
        unit = str(metric(c, "unit", "claims", "claim_id"))
        claimed = claimed_text(c)
        verdict = report_verdict(c, data.runs)
        conditions = "" if is_missing(c["conditions"]) else str(c["conditions"]).strip()
        explanation = claim_note(c)
        if verdict != "not measured" and not explanation:
            raise MissingMetric(f"metric claims.explanation is missing for claim {cid} (verdict {verdict})")
        rows.append(
            {
                "id": cid,
                "claim": str(metric(c, "claim", "claims", "claim_id")),
                "source": str(metric(c, "source", "claims", "claim_id")).split(":")[0],
                "source_full": str(c["source"]),
                "claimed": claimed,
                "region": claim_region(c),
                "measured": claim_measured(c),
                "unit": unit,
                "conditions": conditions or "no run",
                "verdict": verdict,
                "explanation": explanation or "no explanation recorded",
            }
        )
    return rows


def claims_matrix(data: ReportData) -> tuple[list[str], list[list[str]], list[str]]:
    """The claims table: one row per claim, one column per hardware profile (its measurement and verdict),
    and each row's measured causes. With one profile it reads as the one-machine table did, the profile named."""
    profiles = claim_profiles(data)
    by_profile = {p: {c["id"]: c for c in claims_rows(data, p)} for p in profiles}
    first = by_profile[profiles[0]]
    if len(profiles) == 1:
        header = ["claim", "source", "claimed", "agrees if in", f"measured on {profiles[0]} (95% interval)", "verdict"]
    else:
        study = None if data.study_runs.empty else str(data.study_runs["profile"].iloc[0])
        header = [
            "claim",
            "source",
            "claimed",
            "agrees if in",
            *(
                f"the original study's runs ({p}): measured per step (95% interval), verdict"
                if p == study
                else f"{p}: measured (95% interval), verdict"
                for p in profiles
            ),
        ]

    def cells(cid: str) -> list[str]:
        """The profile columns of one claim's row."""
        if len(profiles) == 1:
            return [first[cid]["measured"], first[cid]["verdict"]]
        return [_cell(by_profile[p][cid]) if cid in by_profile[p] else "no run" for p in profiles]

    rows = [[c["claim"], c["source"], c["claimed"], c["region"], *cells(cid)] for cid, c in first.items()]
    notes = [
        " ".join(
            (f"{p}: " if len(profiles) > 1 else "") + by_profile[p][cid]["explanation"] for p in profiles if cid in by_profile[p]
        )
        for cid in first
    ]
    return header, rows, notes


def claim_profiles(data: ReportData) -> list[str]:
    """The claims table's profile columns: the original study's own runs first (the claims judged where they were
    made, study_runs' profile), then the profile the prose describes (a view's, else the one with most runs), then
    every other profile the claims table holds, in its order. A view's runs are its profile's alone, but its claims
    keep every profile's rows (ReportData.of_profile), so the other profiles' columns come from there."""
    study = [] if data.study_runs.empty else [str(data.study_runs["profile"].iloc[0])]
    in_claims = list(dict.fromkeys(data.claims["profile"].astype(str))) if "profile" in data.claims.columns else []
    described = [data.profile] if data.profile else data.profiles
    first = [p for p in study if p in in_claims] + [p for p in described if p not in study]
    return first + [p for p in in_claims if p not in first]


def _cell(claim: dict[str, str]) -> str:
    """One profile's measurement and verdict; a claim not measured there says so once."""
    if claim["measured"] == claim["verdict"]:
        return claim["verdict"]
    return f"{claim['measured']}, {claim['verdict']}"


def profiles_note(everything: ReportData, view: str | None = None) -> str:
    """Every hardware profile the tables hold (the original study's, ours, a GPU's), what each recorded, and which one
    the summary, the sections and the figures describe (``view``, default the one with most runs)."""
    runs = everything.runs
    view = view or everything.profiles[0]
    parts = []
    study = study_profile(everything)
    if study is not None:
        own = everything.study_runs[everything.study_runs["profile"].astype(str) == study]
        parts.append(
            f"{study}: the original study's {own['run'].nunique()} published runs (4 GPUs, NCCL), judged in the "
            "claims table's first column and in its own section"
        )
    for profile in everything.profiles:
        mine = runs[runs["profile"].astype(str) == profile]
        if mine.empty:
            continue
        how = ", ".join(sorted({f"{b} on {d}" for b, d in zip(mine["backend"].astype(str), mine["device"].astype(str))}))
        where = "the summary, sections and figures" if profile == view else "its claims column"
        if profile != view and set(mine["device"].astype(str)) == {"cuda"}:
            where += " and the GPU section"
        parts.append(f"{profile}: {len(mine)} runs ({how}), described in {where}")
    listed = "; ".join(parts)
    return f"The tables hold {counted(len(parts), 'hardware profile')} (docs/method.md#hardware-profiles): {listed}."


def summary_lines(claims: list[dict[str, str]]) -> list[str]:
    by_id = {c["id"]: c for c in claims}
    lines = []
    for name, ids in SUMMARY_LINES:
        parts = [
            f"{claim_short(i)} {by_id[i]['measured']} against the claimed {by_id[i]['claimed']}: {by_id[i]['verdict']}"
            if by_id[i]["verdict"] != "not measured"
            else f"{claim_short(i)}: not measured (claimed {by_id[i]['claimed']})"
            for i in ids
            if i in by_id
        ]
        if parts:
            lines.append(f"{name}: " + "; ".join(parts) + ".")
    if not lines:
        raise MissingMetric(
            "the claims table has none of the claims the summary reports ("
            + ", ".join(i for _, ids in SUMMARY_LINES for i in ids)
            + ")"
        )
    return lines


def verdict_counts(claims: list[dict[str, str]]) -> str:
    """``2 reproduced, 3 not reproduced, 1 inconclusive, 1 not measured`` (verdicts with no claim left out)."""
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


def claim_short(claim_id: str) -> str:
    """The claim's quantity in a few words (its declaration's ``short``)."""
    declared = BY_ID.get(claim_id)
    return declared.short if declared is not None else claim_id
