"""What figures and the report are made from: the analysis tables under ``metrics/``, nothing else.

:func:`load` reads ``metrics/<table>.parquet`` for every table in :data:`TABLES` (with their schemas'
nullable dtypes: a missing value is NA) and checks what it reads; the accessors below refuse a
missing column or value with a :class:`MissingMetric` that names ``table.column`` and the row,
so nothing downstream ever shows an empty cell. The tables must be one set, stamped with one
generation by one run of ``muon-repro analyze`` (:class:`MixedTables` names the files that are not),
and are read through :mod:`muon_repro.tables` like everywhere else. The report never opens a run
directory or a trace: whatever it needs from them, ``muon-repro analyze`` has put in a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from muon_repro.hardware import (
    PROFILE_FIELD,
    UNKNOWN_PROFILE,
    invalid_profiles,
    ordered_profiles,
    profile_from_environment,
    rows_of_profile,
)
from muon_repro.rundir import CONVERGENCE_GROUP
from muon_repro.tables.io import read_tables
from muon_repro.tables.joins import convergence_with_runs, leading_with_summary
from muon_repro.tables.schemas import SCHEMAS
from muon_repro.tables.stamp import MixedTables  # noqa: F401 - what load() raises

# The original study's tables the report reads (muon_repro.study): absent from a folder without its runs.
STUDY_TABLES = (
    "study_runs",
    "study_method",
    "study_method_parts",
    "study_protocols",
    "study_costmodel",
    "study_costmodel_thresholds",
)
# The tables the figures and the report read (columns: muon_repro.tables.schemas).
TABLES = (
    "runs",
    "steps",
    "timed_steps",
    "comparisons",
    "claims",
    "checks",
    "stated_numbers",
    "ranks",
    "phases",
    "timeline",
    "losses",
    "environment",
    "predictions",
    "regimes",
    "regime_model",
    "regime_thresholds",
    "convergence",
    "convergence_runs",
    "leading_steps",
    "leading_summary",
    "budget_match",
    "stages",
    "pipeline_scale_out",
    *STUDY_TABLES,
)
# Tables an older metrics folder may lack (written before pipeline runs, or without the original study's runs):
# read as empty when absent.
OPTIONAL = ("stages", "pipeline_scale_out", "budget_match", "convergence_runs", "leading_summary", *STUDY_TABLES)
# Every configuration is recorded in several trials: the per-trial tables key their rows by it.
PER_TRIAL = ("steps", "timed_steps", "ranks", "phases", "timeline", "losses", "environment")
# What identifies a row of each table, checked on reading (the columns each use needs are checked there).
KEYS = {name: ("run", "trial") if name in PER_TRIAL else ("run",) for name in TABLES} | {
    "comparisons": ("muon_run", "adamw_run"),
    "claims": ("claim_id",),
    "checks": ("check_id",),
    "stated_numbers": ("table", "row_id", "profile", "name"),
    "regime_model": ("kind", "machine", "model", "tokens_per_step"),
    "regime_thresholds": ("machine", "model", "metric", "level"),
    "leading_steps": ("group", "seed", "alpha", "muon_step"),
    "leading_summary": ("group", "seed", "alpha"),
    "budget_match": ("group", "seed", "adamw_steps"),
    "stages": ("run", "stage"),
    "pipeline_scale_out": ("machine", "optimizer", "gpus"),
    "study_method": ("number_id",),
    "study_method_parts": ("number_id", "category"),
    "study_costmodel": ("run", "quantity"),
    "study_protocols": ("claim_id", "profile", "group"),
    "study_costmodel_thresholds": ("model", "metric", "level"),
}


class MissingMetric(ValueError):
    """A metric the figures or the report need is absent; the message names it."""


@dataclass(frozen=True)
class ReportData:
    """The tables of one ``metrics/`` folder, by name."""

    runs: pd.DataFrame
    steps: pd.DataFrame
    timed_steps: pd.DataFrame  # the steps timed without the profiler, every round
    comparisons: pd.DataFrame
    claims: pd.DataFrame
    checks: pd.DataFrame  # consistency checks (state, bytes), beside the claims
    stated_numbers: pd.DataFrame  # the numbers the claims' and checks' explanations state, one per row
    ranks: pd.DataFrame
    phases: pd.DataFrame
    timeline: pd.DataFrame
    losses: pd.DataFrame
    environment: pd.DataFrame
    predictions: pd.DataFrame
    regimes: pd.DataFrame
    regime_model: pd.DataFrame
    regime_thresholds: pd.DataFrame
    convergence: pd.DataFrame  # may be empty: no `muon-repro converge` run analyzed; joined with convergence_runs
    convergence_runs: pd.DataFrame
    leading_steps: pd.DataFrame  # joined with leading_summary
    leading_summary: pd.DataFrame
    budget_match: pd.DataFrame  # AdamW's longer budgets against Muon's final loss; empty without them
    stages: pd.DataFrame  # one row per pipeline run and stage; empty without pipeline runs
    pipeline_scale_out: pd.DataFrame  # the cost model's LLaMA-7B-shaped TP8 x PP4 x DP predictions; empty without its records
    study_runs: pd.DataFrame  # the original study's own runs (muon_repro.study); empty without them
    study_method: pd.DataFrame
    study_method_parts: pd.DataFrame
    study_protocols: pd.DataFrame
    study_costmodel: pd.DataFrame
    study_costmodel_thresholds: pd.DataFrame
    metrics_dir: Path = Path("metrics")
    profile: str | None = None  # the hardware profile this view holds (of_profile), None: every profile

    @property
    def profiles(self) -> list[str]:
        """The hardware profiles of the runs, the one with most runs first (the one the prose describes)."""
        counts = self.runs[PROFILE_FIELD].astype(str).value_counts()
        return ordered_profiles({str(p): int(n) for p, n in counts.items()}) or [UNKNOWN_PROFILE]

    @property
    def described_profile(self) -> str:
        """The profile the prose describes: this view's, else the one with most runs."""
        return self.profile or self.profiles[0]

    def of_profile(self, profile: str) -> ReportData:
        """The rows of one hardware profile in every table but ``claims``, which keeps a row per claim and
        profile for the claims table's columns (its prose rows are the view's profile's)."""
        # the claims keep every profile's rows; the original study's tables are its own profile's, shown in every view
        tables = {
            name: rows_of_profile(getattr(self, name), profile)
            for name in TABLES
            if name != "claims" and name not in STUDY_TABLES
        }
        return replace(self, **tables, profile=profile)

    def environment_of(self, run: str) -> dict[str, str]:
        """The run's environment fields (environment.json flattened: key -> value as text)."""
        env = self.environment[self.environment["run"] == run]
        return {str(k): str(v) for k, v in zip(env["key"], env["value"]) if not is_missing(v)}


def load(metrics_dir: str | Path) -> ReportData:
    """Every table the report needs, read from ``metrics_dir`` as one set (:func:`read_tables`:
    :class:`MixedTables` naming the files of each generation), each with the columns that key its rows;
    the runs table must have runs."""
    metrics_dir = Path(metrics_dir)
    absent = [n for n in OPTIONAL if not (metrics_dir / f"{n}.parquet").is_file()]
    tables = read_tables(metrics_dir, [n for n in TABLES if n not in absent])
    _check_profile_columns(tables, metrics_dir)
    tables |= {n: SCHEMAS[n].empty() for n in absent}
    for name in ("convergence", "leading_steps", "leading_summary"):  # written before configurations had groups
        if "group" not in tables[name].columns:
            tables[name] = tables[name].assign(group=pd.Series([CONVERGENCE_GROUP] * len(tables[name]), dtype="string"))
    tables["convergence"] = convergence_with_runs(tables["convergence"], tables["convergence_runs"])
    tables["leading_steps"] = leading_with_summary(tables["leading_steps"], tables["leading_summary"])
    for name, df in tables.items():
        require_columns(df, name, KEYS.get(name, ()), metrics_dir / f"{name}.parquet")
    _fill_profiles(tables)
    _check_profiles(tables, metrics_dir)
    if tables["runs"].empty:
        raise ValueError(f"metrics table {metrics_dir / 'runs.parquet'} has no runs")
    return ReportData(**tables, metrics_dir=metrics_dir)


def _check_profiles(tables: dict[str, pd.DataFrame], metrics_dir: Path) -> None:
    """Every profile a table names must be a profile id: figures of a profile are drawn under figures/<profile>/,
    so a value such as ``../../elsewhere`` would write outside the figures' folder. Refused with table and value."""
    for name, df in tables.items():
        if PROFILE_FIELD in df.columns:
            problems = invalid_profiles(df[PROFILE_FIELD].dropna().astype(str).unique(), f"{metrics_dir / name}.parquet: profile")
            if problems:
                raise ValueError(problems[0])


def _check_profile_columns(tables: dict[str, pd.DataFrame], metrics_dir: Path) -> None:
    """Tables written before hardware profiles lack the ``profile`` column, all of them (:func:`_fill_profiles` gives
    them their machine's): a table without it beside a runs table with one was not written with it (an edited or
    foreign file), and its rows cannot be told apart by profile. Refused, naming the file and the column."""
    if PROFILE_FIELD not in tables["runs"].columns:
        return
    lacking = [name for name, df in tables.items() if PROFILE_FIELD not in df.columns]
    if lacking:
        columns = ", ".join(f"{metrics_dir / name}.parquet has no column {name}.{PROFILE_FIELD}" for name in lacking)
        raise MissingMetric(
            f"metrics table {columns} (the hardware profile of each row), which "
            f"{metrics_dir / 'runs.parquet'} has: the tables are not one set written by muon-repro analyze; regenerate "
            f"them with `muon-repro analyze traces/ --out {metrics_dir}`"
        )


def _fill_profiles(tables: dict[str, pd.DataFrame]) -> None:
    """Tables written before hardware profiles have no ``profile`` column: they hold one machine's runs,
    whose profile their environment table describes (else ``unknown``)."""
    if all(PROFILE_FIELD in df.columns for df in tables.values()):
        return
    env = tables["environment"]
    first = env[env["run"] == env["run"].iloc[0]] if len(env) else env
    profile = profile_from_environment(dict(zip(first["key"], first["value"]))) if len(first) else UNKNOWN_PROFILE
    for name, df in tables.items():
        if PROFILE_FIELD not in df.columns:
            tables[name] = df.assign(**{PROFILE_FIELD: pd.Series([profile] * len(df), index=df.index, dtype="string")})


# ---------------------------------------------------------------- checked access


def require_columns(df: pd.DataFrame, table: str, columns: tuple[str, ...] | list[str], source: Path | None = None) -> None:
    """Refuse a table without ``columns``; ``source``: the file it was read from, named in the message with what to do."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        said = f"metrics table {table!r} has no column(s) {', '.join(f'{table}.{c}' for c in missing)}"
        if source is not None:
            said = f"{source}: {said}: it is not the {table} table this version writes; run `muon-repro analyze` again"
        raise MissingMetric(said)


def is_missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(pd.isna(value)) or (isinstance(value, float) and not math.isfinite(value))
    except (TypeError, ValueError):
        return False


def metric(row: pd.Series | dict, column: str, table: str = "runs", key: str = "run") -> Any:
    """``row[column]``, or :class:`MissingMetric` naming ``table.column`` and the row's key."""
    if column not in row:
        raise MissingMetric(f"metrics table {table!r} has no column {table}.{column}")
    value = row[column]
    if is_missing(value):
        raise MissingMetric(f"metric {table}.{column} is missing for {key} {row.get(key, '?')}")
    return value.item() if hasattr(value, "item") else value


def fmetric(row: pd.Series | dict, column: str, table: str = "runs", key: str = "run") -> float:
    return float(metric(row, column, table, key))


def rows_of(df: pd.DataFrame, table: str, run: str, trial: int | None = None) -> pd.DataFrame:
    """The rows of ``run`` (of one ``trial`` when given) in ``table``; :class:`MissingMetric` when it has none."""
    rows = df[df["run"] == run]
    if trial is not None:
        require_columns(df, table, ("trial",))
        rows = rows[rows["trial"] == trial]
    if rows.empty:
        raise MissingMetric(
            f"metrics table {table!r} has no rows for run {run}" + (f" in trial {trial}" if trial is not None else "")
        )
    return rows


ORIGINAL = "the original study"  # study_runs.recorded_by of the study's own traces


def study_profile(data: ReportData) -> str | None:
    """The profile of the study's own runs (study_runs recorded by the original study), None without them."""
    runs = data.study_runs
    if runs.empty:
        return None
    own = runs[runs["recorded_by"] == ORIGINAL] if "recorded_by" in runs.columns else runs
    return None if own.empty else str(own["profile"].iloc[0])
