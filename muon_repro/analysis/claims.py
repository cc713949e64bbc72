"""The claims table: every declared claim (:mod:`muon_repro.claims`) measured like for like on each
hardware profile, with a 95% interval, a verdict and its cause, and the numbers its explanation states.

Intervals are paired over rounds (:mod:`muon_repro.analysis.rounds`): each run reduces to one value
per round, the ratio is formed per round, and the interval is a t interval over rounds; a claim over the largest
of several (the fastest rival grid, the stage a pipeline step pays for) takes the largest mean, with Bonferroni
intervals. Runs are compared only when they did the same work
(:func:`~muon_repro.analysis.claim_inputs.check_same_work`), an optimizer's twin on the same grid too. The verdict
is :func:`muon_repro.claims.judge`'s, in one order on every profile: unequal work, the claim's conditions, its region.
How each claim is measured is in :mod:`muon_repro.analysis.claim_measures`, on the tables and runs of
:mod:`muon_repro.analysis.claim_inputs`; the claims, their regions, levels and verdict rule are declared
in :mod:`muon_repro.claims`. A claim a run was not made for is ``not comparable here``: its explanation gives
what the runs measured and the measured cause, ``outside_conditions`` how the runs differ from the claim's (where the
cost model puts the claimed level is the regime_thresholds table's). A claim whose runs did different work (on the
original study's own runs, :mod:`muon_repro.study.claims`; here, runs recorded apart, such as a contributed size with
no twin) is ``unequal work``, with the difference, and no ratio.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from muon_repro.analysis.claim_inputs import (
    Measurement,
    ProfileTables,
    UnequalWork,
    describe_runs,
    is_missing,
    work_difference,
)
from muon_repro.analysis.claim_measures import MEASURE
from muon_repro.analysis.estimators import RunSteps, left_out, unpaired_rounds
from muon_repro.analysis.rounds import rounds_of
from muon_repro.claims import ANY_MACHINE, CLAIMS, Claim, judge
from muon_repro.hardware import UNKNOWN_PROFILE, ordered_profiles, rows_of_profile
from muon_repro.tables.joins import convergence_with_runs, leading_with_summary
from muon_repro.values import counted

NOT_MEASURED = float("nan")


def claims_table(
    runs: pd.DataFrame,
    steps: pd.DataFrame,
    ranks: pd.DataFrame,
    phases: pd.DataFrame,
    *,
    regimes: pd.DataFrame | None = None,
    thresholds: pd.DataFrame | None = None,
    convergence: dict[str, pd.DataFrame] | None = None,
    environment: pd.DataFrame | None = None,
    predictions: pd.DataFrame | None = None,
    timed: pd.DataFrame | None = None,
    study_claims: list[dict] | None = None,
) -> pd.DataFrame:
    """One row per claim in :data:`CLAIMS` and hardware profile, measured on that profile's rows of the tables
    (never across profiles), with its interval, verdict and explanation; the profile with most runs first.
    ``regimes`` and ``thresholds``: the regime sweep and the cost model's thresholds, cited in the time claims'
    explanations when given; ``convergence``: the ``convergence``, ``convergence_runs`` and ``leading_steps`` tables (the
    leading-steps claim is not measured without them; ``budget_match`` where AdamW trained longer budgets);
    ``environment``: the runs' machines (ranks per core);
    ``predictions``: the cost model against the recorded runs (its validated error, quoted with its predictions);
    ``timed``: the steps timed without the profiler, which the time claims use for the runs that have them;
    ``study_claims``: the claims rows judged on the original study's own runs (:mod:`muon_repro.study.claims`),
    which come first."""
    empty = pd.DataFrame()
    convergence = convergence or {}
    regimes = empty if regimes is None else regimes
    thresholds = empty if thresholds is None else thresholds
    environment = empty if environment is None else environment
    predictions = empty if predictions is None else predictions
    timed = empty if timed is None else timed
    conv, lead, budget = (convergence.get(n) for n in ("convergence", "leading_steps", "budget_match"))
    if conv is not None:
        conv = convergence_with_runs(conv, convergence.get("convergence_runs"))
    if lead is not None:
        lead = leading_with_summary(lead, convergence.get("leading_summary"))
    counts = {str(p): int(n) for p, n in runs["profile"].value_counts().items()} if "profile" in runs.columns else {}
    for other in (regimes, conv):
        for p in _profiles_of(other):
            counts.setdefault(p, 0)
    rows = list(study_claims or [])
    for profile in ordered_profiles(counts) or ([] if rows else [UNKNOWN_PROFILE]):
        mine = rows_of_profile(runs, profile)
        t = ProfileTables(
            mine.astype(object).where(mine.notna(), None),
            *(rows_of_profile(df, profile) for df in (steps, ranks, phases, regimes, thresholds)),
            rows_of_profile(conv, profile),
            rows_of_profile(lead, profile),
            rows_of_profile(environment, profile),
            rows_of_profile(predictions, profile),
            rows_of_profile(timed, profile),
            budget=rows_of_profile(budget, profile),
        )
        rows += _claim_rows(t, profile)
    return pd.DataFrame(rows)


def _profiles_of(df: pd.DataFrame | None) -> list[str]:
    return [str(p) for p in df["profile"].dropna().unique()] if df is not None and "profile" in df.columns else []


def _claim_rows(t: ProfileTables, profile: str) -> list[dict]:
    rows = []
    for c in CLAIMS:
        unequal = ""
        try:
            m = MEASURE[c.claim_id](t)
            if isinstance(m, Measurement):  # each measure checks its pairs; equal_work true is this check's too
                unequal = _work_difference_of(m.runs)
        except UnequalWork as exc:  # the runs it would compare did different work: no ratio of theirs judges it
            unequal = str(exc)
            conditions = describe_runs(*exc.runs)
            m = Measurement(NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, conditions, f"Not judged, unequal work: {unequal}.")
        if isinstance(m, Measurement):
            measured = m
        else:  # the reason it could not be measured
            measured = Measurement(NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, "", f"Not measured: {m}.")
        quoted = dict(measured.quoted)
        outside = _outside(c, measured, t, quoted)
        # the rounds the estimators leave out of the runs the interval pairs, read once: the count and the note say them
        paired = measured.interval_runs
        sources = t.sources(*paired, comm=measured.comm) if paired else []
        disturbed = left_out(*sources)
        unpaired = unpaired_rounds(*sources) - disturbed
        rows.append(
            {
                "claim_id": c.claim_id,
                "profile": profile,
                "claim": c.claim,
                "source": c.source,
                "claimed_value": c.claimed_value,
                **c.region.columns(),
                "made_under": c.made_under.text if c.made_under is not None else ANY_MACHINE,
                "measured_value": measured.value,
                "measured_low": measured.low,
                "measured_high": measured.high,
                "rounds": _rounds(measured, sources, disturbed | unpaired),
                "unit": c.unit,
                "unit_kind": c.unit_kind,
                "conditions": measured.conditions + _timing_note(c, measured, t) + _left_out_note(disturbed, unpaired, quoted),
                "verdict": judge(measured.low, measured.high, c.region, unequal_work=bool(unequal), outside=bool(outside)),
                "outside_conditions": "; ".join(outside),
                "explanation": measured.explanation,
                "stated": quoted,
                "rule": c.rule_text(),
                "study_method_value": None,
                "study_method_rebuilt": None,
                # checked for every pair a measure compares (check_same_work, twin_of), and again over the runs it
                # measured (_work_difference_of); one run compares nothing
                "equal_work": False if unequal else (True if len(measured.interval_runs) > 1 else None),
                "work_difference": unequal,
            }
        )
    return rows


def _work_difference_of(runs: tuple[pd.Series, ...]) -> str:
    """How the runs a measurement compares differ in work (:data:`~muon_repro.analysis.claim_inputs.SAME_WORK`;
    grids may differ), checked once more from the runs themselves so that a measure that compared runs without
    :func:`~muon_repro.analysis.claim_inputs.check_same_work` cannot read as equal work; empty: they did the same."""
    first, *others = runs or (None,)
    return next((difference for run in others if (difference := work_difference(first, run)) is not None), "")


def _rounds(measured: Measurement, sources: list[RunSteps], skipped: set[int]) -> int | None:
    """The rounds a measurement's interval is over: those every run it compares (``sources``) was recorded in, less
    the ``skipped`` ones the estimators leave out (disturbed, or recorded by different sweeps: :func:`_left_out_note`
    names them); None without runs or where a run was not recorded in rounds."""
    if not measured.interval_runs or any(is_missing(r.get("rounds")) for r in measured.interval_runs):
        return None
    common = set.intersection(*(set(rounds_of(source, run).tolist()) for source, run in sources))
    return len(common - skipped)


def _timing_note(claim: Claim, measured: Measurement, t: ProfileTables) -> str:
    """For a time claim: whether its times were taken without the profiler, which costs Muon and AdamW unequally."""
    if claim.made_under is None or not measured.runs:
        return ""
    if claim.claim_id == "comm_time_dp2_tp2" and any(str(r.get("backend")).lower() == "nccl" for r in measured.runs):
        return "; communication from the traced NCCL kernels (timed NCCL calls return at launch), one median per round"
    if t.unprofiled(*measured.runs):
        return "; times from the steps timed without the profiler, one median per round"
    return "; times from the profiled steps (a run compared has no steps timed without the profiler), one median per round"


def _left_out_note(disturbed: set[int], unpaired: set[int], quoted: dict[str, float]) -> str:
    """The rounds the estimators left out of this claim's runs (muon_repro.analysis.estimators), if any: ``disturbed``
    ones, and the other ones the runs recorded in different sweeps (``unpaired``: no pairs)."""
    parts = []
    if disturbed:
        quoted["disturbed_rounds"] = len(disturbed)
        parts.append(counted(len(disturbed), "disturbed round"))
    if unpaired:
        quoted["unpaired_rounds"] = len(unpaired)
        parts.append(f"{counted(len(unpaired), 'round')} recorded by different sweeps")
    return f"; {' and '.join(parts)} left out (docs/method.md#equal-work-trials-and-intervals)" if parts else ""


def _outside(claim: Claim, measured: Measurement, t: ProfileTables, quoted: dict[str, float]) -> list[str]:
    """How the measurement's runs differ from the claim's conditions (empty: they do not, or it has none); a
    difference that holds for only some of the runs names them."""
    subjects = measured.runs or ((measured.subject,) if measured.subject is not None else ())
    if claim.made_under is None or not subjects:
        return []
    runs_of: dict[str, list[str]] = {}  # difference -> the runs it holds for, in order
    for run in subjects:
        for reason in claim.made_under.outside(run, t.ranks_per_core(run), quoted):
            runs_of.setdefault(reason, []).append(str(run["run"]))
    return [reason if len(runs) == len(subjects) else f"{reason} (only {', '.join(runs)})" for reason, runs in runs_of.items()]


def stated_unit(name: str) -> str:
    """The unit of a stated number, from how its name ends (the names the measures give: ``*_ms``, ``*_bytes``,
    ``*_ratio``, ``*_over_*``, ``*share*``...); empty for a count or a plain number."""
    if "ratio" in name or "_over_" in name:
        return "ratio"
    if "share" in name:
        return "fraction"
    for marker, unit in (("_ms", "ms"), ("bytes", "bytes")):
        if marker in name:
            return unit
    return "FLOP" if name.endswith("flops_per_rank") else ""


def stated_numbers(frames: Iterable[tuple[str, str, pd.DataFrame]]) -> pd.DataFrame:
    """The ``stated_numbers`` table: for each ``(table, id column, rows)``, every number in the rows' ``stated``
    dicts, one per row, in the rows' order and then by name."""
    long = [
        {
            "table": table,
            "row_id": row[id_column],
            "profile": row["profile"],
            "name": name,
            "value": float(value),
            "unit": stated_unit(name),
        }
        for table, id_column, df in frames
        if "stated" in df.columns
        for _, row in df.iterrows()
        for name, value in sorted((row["stated"] or {}).items())
    ]
    return pd.DataFrame(long, columns=["table", "row_id", "profile", "name", "value", "unit"])
