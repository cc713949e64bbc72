"""What figures and the report are made from: the analysis tables under ``metrics/``, nothing else.

:func:`load` reads ``metrics/<table>.parquet`` for every table in :data:`TABLES` (pandas'
nullable dtypes: a missing value is NA) and checks what it reads; the accessors below refuse a
missing column or value with a :class:`MissingMetric` that names ``table.column`` and the row,
so nothing downstream ever shows an empty cell. The report never opens a run directory or a
trace: whatever it needs from them, ``muon-repro analyze`` has put in a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

# The tables the figures and the report read (columns: muon_repro.analysis.schemas).
TABLES = ("runs", "steps", "comparisons", "claims", "ranks", "phases", "timeline", "losses", "environment")
# Every configuration is recorded in several trials: the per-trial tables key their rows by it.
PER_TRIAL = ("steps", "ranks", "phases", "timeline", "losses", "environment")
# What identifies a row of each table, checked on reading (the columns each use needs are checked there).
KEYS = {name: ("run", "trial") if name in PER_TRIAL else ("run",) for name in TABLES} | {"comparisons": ("muon_run", "adamw_run"), "claims": ("claim_id",)}


class MissingMetric(ValueError):
    """A metric the figures or the report need is absent; the message names it."""


@dataclass(frozen=True)
class ReportData:
    """The tables of one ``metrics/`` folder, by name."""

    runs: pd.DataFrame
    steps: pd.DataFrame
    comparisons: pd.DataFrame
    claims: pd.DataFrame
    ranks: pd.DataFrame
    phases: pd.DataFrame
    timeline: pd.DataFrame
    losses: pd.DataFrame
    environment: pd.DataFrame
    metrics_dir: Path = Path("metrics")

    def environment_of(self, run: str) -> dict[str, str]:
        """The run's environment fields (environment.json flattened: key -> value as text)."""
        env = self.environment[self.environment["run"] == run]
        return {str(k): str(v) for k, v in zip(env["key"], env["value"]) if not is_missing(v)}


def read_table(metrics_dir: Path, name: str) -> pd.DataFrame:
    """``metrics_dir/<name>.parquet`` with nullable dtypes; :class:`FileNotFoundError` naming it if absent."""
    path = metrics_dir / f"{name}.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"metrics table {path} is missing: run `muon-repro analyze traces/ --out {metrics_dir}` first")
    df = pd.read_parquet(path, dtype_backend="numpy_nullable")
    require_columns(df, name, KEYS.get(name, ()))
    return df


def load(metrics_dir: str | Path) -> ReportData:
    """Every table the report needs, read from ``metrics_dir``; the runs table must have runs."""
    metrics_dir = Path(metrics_dir)
    tables = {name: read_table(metrics_dir, name) for name in TABLES}
    if tables["runs"].empty:
        raise ValueError(f"metrics table {metrics_dir / 'runs.parquet'} has no runs")
    return ReportData(**tables, metrics_dir=metrics_dir)


# ---------------------------------------------------------------- checked access


def require_columns(df: pd.DataFrame, table: str, columns: tuple[str, ...] | list[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise MissingMetric(f"metrics table {table!r} has no column(s) {', '.join(f'{table}.{c}' for c in missing)}")


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
        raise MissingMetric(f"metrics table {table!r} has no rows for run {run}" + (f" in trial {trial}" if trial is not None else ""))
    return rows
