"""What figures and the report are made from: the analysis tables plus each run's directory.

The Parquet tables under ``metrics/`` are the stable interface. A few things live only in a run's
directory (``traces/<group>/<name>/``): the loss per step, the split of optimizer state, the
environment, the model preset the analytic byte model needs, and the traces themselves for the
timeline. :func:`load` reads both and checks what it reads: a missing table, column, run directory
or value raises an error that names it, so nothing downstream ever shows an empty cell.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

TABLES = ("runs", "steps", "collectives", "comparisons", "claims")
# Runs of the same configuration recorded in several groups: which one stands for it.
GROUP_PREFERENCE = ("comparison", "distributed_muon", "layout_ablation")
LAYOUT_PREFERENCE = ("contiguous", "whole_matrix", "bucketed")


class MissingMetric(ValueError):
    """A metric the figures or the report need is absent; the message names it."""


@dataclass
class RunDir:
    """One recorded run's directory: ``config.json``, ``environment.json``, ``metrics.json``, traces."""

    run: str
    path: Path

    def _json(self, name: str) -> dict:
        p = self.path / name
        if not p.is_file():
            raise FileNotFoundError(f"run {self.run}: {p} is missing")
        try:
            return json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"run {self.run}: {p} is not valid JSON ({exc})") from None

    @cached_property
    def config(self) -> dict:
        return self._json("config.json")

    @cached_property
    def environment(self) -> dict:
        return self._json("environment.json")

    @cached_property
    def metrics(self) -> dict:
        return self._json("metrics.json")

    @property
    def ranks(self) -> list[dict]:
        ranks = self.metrics.get("ranks")
        if not ranks:
            raise MissingMetric(f"run {self.run}: metrics.json has no 'ranks'")
        return ranks

    def rank_metric(self, rank: dict, name: str) -> Any:
        if rank.get(name) is None:
            raise MissingMetric(f"metric {name!r} is missing for rank {rank.get('rank', '?')} of run {self.run} (metrics.json)")
        return rank[name]

    def loss(self) -> pd.DataFrame:
        """Loss per training step: the mean over ranks (TP ranks share a loss; DP ranks see different batches)."""
        per_rank = [self.rank_metric(r, "loss") for r in self.ranks]
        n = min(len(v) for v in per_rank)
        if n == 0:
            raise MissingMetric(f"metric 'loss' is empty for run {self.run} (metrics.json)")
        rows = [{"step": s, "loss": sum(v[s] for v in per_rank) / len(per_rank)} for s in range(n)]
        return pd.DataFrame(rows)

    def state(self) -> pd.DataFrame:
        """rank, muon, adamw, transient: optimizer-state bytes per rank (Muon momentum, AdamW
        moments) and the transient peak of gather buffers, from metrics.json."""
        rows = []
        for r in self.ranks:
            state = self.rank_metric(r, "state_bytes")
            rows.append({"rank": r.get("rank"), "muon": int(state.get("muon", 0)), "adamw": int(state.get("adamw", 0)),
                         "transient": int(self.rank_metric(r, "transient_bytes"))})  # fmt: skip
        return pd.DataFrame(rows, columns=["rank", "muon", "adamw", "transient"])

    def trace_files(self) -> list[Path]:
        files = sorted(self.path.glob("rank*.json.gz")) or sorted(self.path.glob("rank*.json"))
        if not files:
            raise FileNotFoundError(f"run {self.run}: no rank<r>.json.gz trace in {self.path}")
        return files


@dataclass
class ReportData:
    """The tables (by name) and the run directories (by run id) of one bundle."""

    tables: dict[str, pd.DataFrame]
    run_dirs: dict[str, RunDir] = field(default_factory=dict)
    metrics_dir: Path = Path("metrics")

    @property
    def runs(self) -> pd.DataFrame:
        return self.tables["runs"]

    def run_dir(self, run: str) -> RunDir:
        if run not in self.run_dirs:
            raise FileNotFoundError(f"run {run}: no run directory found (looked for the runs table's path and <traces>/{run})")
        return self.run_dirs[run]


def read_tables(metrics_dir: str | Path) -> dict[str, pd.DataFrame]:
    """The five tables from ``metrics_dir/<name>.parquet``, nullable dtypes (missing values are NA)."""
    metrics_dir = Path(metrics_dir)
    tables = {}
    for name in TABLES:
        path = metrics_dir / f"{name}.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"metrics table {path} is missing: run `muon-repro analyze traces/ --out {metrics_dir}` first")
        tables[name] = pd.read_parquet(path, dtype_backend="numpy_nullable")
    if tables["runs"].empty:
        raise ValueError(f"metrics table {metrics_dir / 'runs.parquet'} has no runs")
    return tables


def find_run_dirs(runs: pd.DataFrame, traces_dir: str | Path | None) -> dict[str, RunDir]:
    """Each run's directory: ``<traces>/<run>`` when given and present, else the table's ``path``."""
    require_columns(runs, "runs", ("run", "path"))
    out: dict[str, RunDir] = {}
    for run, path in zip(runs["run"], runs["path"]):
        candidates = [Path(traces_dir) / str(run)] if traces_dir is not None else []
        if not pd.isna(path):
            candidates.append(Path(str(path)))
        found = next((c for c in candidates if (c / "metrics.json").is_file()), None)
        if found is None:
            tried = ", ".join(str(c) for c in candidates) or "nothing (no path, no --traces)"
            raise FileNotFoundError(f"run {run}: no run directory with metrics.json; tried {tried}")
        out[str(run)] = RunDir(str(run), found)
    return out


def load(metrics_dir: str | Path, traces_dir: str | Path | None = None) -> ReportData:
    tables = read_tables(metrics_dir)
    return ReportData(tables, find_run_dirs(tables["runs"], traces_dir), Path(metrics_dir))


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


# ---------------------------------------------------------------- choosing runs


def _preference(row: pd.Series, groups: tuple[str, ...] = GROUP_PREFERENCE) -> tuple:
    group = str(row.get("group", ""))
    layout = "" if is_missing(row.get("layout")) else str(row["layout"])
    return (
        groups.index(group) if group in groups else len(groups),
        LAYOUT_PREFERENCE.index(layout) if layout in LAYOUT_PREFERENCE else len(LAYOUT_PREFERENCE),
        str(row["run"]),
    )


def _layout_first(row: pd.Series, groups: tuple[str, ...]) -> tuple:
    group, layout, run = _preference(row, groups)
    return (layout, group, run)


def representative_runs(runs: pd.DataFrame, groups: tuple[str, ...] = GROUP_PREFERENCE) -> pd.DataFrame:
    """One run per (optimizer, dp, tp): contiguous layout first, then by ``groups`` (the seed's
    comparison first; the DP x TP figure prefers the seed's grid experiment, as the claims do)."""
    require_columns(runs, "runs", ("run", "group", "optimizer", "layout", "dp", "tp"))
    rows = runs[runs["optimizer"].notna() & runs["dp"].notna() & runs["tp"].notna()]
    picked = []
    for _, g in rows.groupby(["optimizer", "dp", "tp"], sort=False):
        picked.append(min((r for _, r in g.iterrows()), key=lambda r: _layout_first(r, groups)))
    if not picked:
        return runs.iloc[0:0]
    out = pd.DataFrame(picked)
    return sort_runs(out)


def sort_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Muon before AdamW; grids DP·TP hybrids, then pure DP, then pure TP; then group, layout."""
    def key(r: pd.Series) -> tuple:
        dp, tp = int(metric(r, "dp")), int(metric(r, "tp"))
        grid = 0 if dp > 1 and tp > 1 else (1 if dp > 1 else 2)
        return (0 if metric(r, "optimizer") == "muon" else 1, grid, -dp, _preference(r))

    if runs.empty:
        return runs
    order = sorted(range(len(runs)), key=lambda i: key(runs.iloc[i]))
    return runs.iloc[order].reset_index(drop=True)
