"""Small frames derived from the tables, shared by the figures and the report.

Each reduces one table for one run (mean over ranks, one step, one phase set) and refuses a
missing value with a :class:`~muon_repro.report.data.MissingMetric` naming ``table.column``.
No new measurement is made here: that is the analysis's job.

Every configuration is recorded in several trials (the ``trial`` column of the per-trial
tables). A reduction either pools the trials (bytes, state, loss: the mean over trials and
ranks; per-phase times: the mean over trials) or picks one (the typical step: ``runs.typical_trial``
and ``runs.typical_step``), never mixes a step of one trial with a step of another.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from muon_repro.phases import (
    DP_ALL_GATHER,
    DP_GATHER,
    DP_REDUCE_SCATTER,
    DP_SHARD,
    MOMENTUM,
    NEWTON_SCHULZ,
    OPTIMIZER,
    TP_GATHER,
    TP_SHARD,
    UPDATE,
)
from muon_repro.report.data import MissingMetric, fmetric, is_missing, metric, require_columns, rows_of
from muon_repro.report.style import OPTIMIZER_COMM_PHASES

# Byte source -> its column in the phases table (bytes per rank per step).
BYTE_SOURCES = {"analytic": "analytic_bytes", "ledger": "ledger_bytes", "trace": "trace_bytes"}
STATE_COLUMNS = ("muon_state_bytes", "adamw_state_bytes", "state_bytes", "transient_bytes")


def _require_values(df: pd.DataFrame, table: str, run: str, columns: Iterable[str]) -> None:
    for col in columns:
        if df[col].isna().any():
            ranks = ", ".join(str(r) for r in df.loc[df[col].isna(), "rank"])
            raise MissingMetric(f"metric {table}.{col} is missing for run {run} (rank {ranks})")


def state_by_run(ranks: pd.DataFrame, runs: Iterable[str]) -> pd.DataFrame:
    """run, muon, adamw (mean over ranks and trials), largest (the largest rank's steady state),
    transient (the largest transient peak): optimizer-state bytes from the ranks table."""
    require_columns(ranks, "ranks", ("run", "trial", "rank", *STATE_COLUMNS))
    rows = []
    for run in runs:
        r = rows_of(ranks, "ranks", str(run))
        _require_values(r, "ranks", str(run), STATE_COLUMNS)
        rows.append(
            {
                "run": str(run),
                "muon": float(r["muon_state_bytes"].mean()),
                "adamw": float(r["adamw_state_bytes"].mean()),
                "largest": int(r["state_bytes"].max()),
                "transient": int(r["transient_bytes"].max()),
            }
        )
    return pd.DataFrame(rows, columns=["run", "muon", "adamw", "largest", "transient"])


def phase_bytes(phases: pd.DataFrame, run: str) -> pd.DataFrame:
    """Index: the optimizer's communication phases; columns analytic, ledger, trace: bytes per
    rank per step, the mean over the run's ranks and trials (a phase without a row sent nothing).
    A source the run did not record at all (no analytic bytes in older runs, no ledger in foreign
    traces) is NaN throughout."""
    require_columns(phases, "phases", ("run", "trial", "rank", "phase", *BYTE_SOURCES.values()))
    p = rows_of(phases, "phases", run)
    n_ranks = max(len(p[["trial", "rank"]].drop_duplicates()), 1)  # every (trial, rank) once
    comm = p[p["phase"].isin(OPTIMIZER_COMM_PHASES)]
    out = pd.DataFrame(index=list(OPTIMIZER_COMM_PHASES), columns=list(BYTE_SOURCES), dtype="float64")
    for source, col in BYTE_SOURCES.items():
        if p[col].isna().all():
            continue
        per_phase = comm.groupby("phase")[col].sum().astype("float64") / n_ranks
        out[source] = per_phase.reindex(OPTIMIZER_COMM_PHASES, fill_value=0.0).to_numpy()
    return out


def require_sources(table: pd.DataFrame, run: str) -> pd.DataFrame:
    """``table`` from :func:`phase_bytes`, or :class:`MissingMetric` naming the source the run lacks."""
    for source, col in BYTE_SOURCES.items():
        if table[source].isna().any():
            raise MissingMetric(f"metric phases.{col} is missing for run {run}")
    return table


def total_bytes(table: pd.DataFrame) -> float:
    """A run's optimizer bytes per rank per step: the analytic model's, else the first recorded source's."""
    recorded = [s for s in BYTE_SOURCES if table[s].notna().all()]
    return float(table[recorded[0]].sum()) if recorded else float("nan")


def source_gap(table: pd.DataFrame) -> float:
    """Largest relative difference between the byte sources of one run, over its phases (0: equal)."""
    worst = 0.0
    for _, row in table.iterrows():
        values = [float(v) for v in row if not pd.isna(v)]
        if values and max(values) > 0:
            worst = max(worst, (max(values) - min(values)) / max(values))
    return worst


def mean_loss(losses: pd.DataFrame, run: str) -> pd.DataFrame:
    """step, loss: the mean over ranks and trials (TP ranks share a loss; DP ranks see different
    batches; the trials repeat the same training from the same seed)."""
    require_columns(losses, "losses", ("run", "trial", "rank", "step", "loss"))
    rows = rows_of(losses, "losses", run)
    _require_values(rows, "losses", run, ("loss",))
    per_step = rows.groupby("step", sort=True)["loss"].mean().astype("float64")
    return pd.DataFrame({"step": per_step.index.astype(int), "loss": per_step.to_numpy()})


def typical(run_row: pd.Series) -> tuple[int, int]:
    """(``runs.typical_trial``, ``runs.typical_step``): the step the timeline and the breakdown show."""
    return int(metric(run_row, "typical_trial")), int(metric(run_row, "typical_step"))


def typical_step(steps: pd.DataFrame, run_row: pd.Series) -> pd.Series:
    """The run's typical step (``runs.typical_step`` of ``runs.typical_trial``), every numeric
    column the mean over ranks (so the parts add up)."""
    run, (trial, step) = str(run_row["run"]), typical(run_row)
    require_columns(steps, "steps", ("run", "trial", "step"))
    s = rows_of(steps, "steps", run)
    s = s[(s["trial"] == trial) & (s["step"] == step)]
    if s.empty:
        raise MissingMetric(f"metrics table 'steps' has no rows for run {run} at its runs.typical_step {step} (trial {trial})")
    numeric = [c for c in s.columns if pd.api.types.is_numeric_dtype(s[c]) and not pd.api.types.is_bool_dtype(s[c])]
    return pd.concat([pd.Series({"run": run}), s[numeric].astype("float64").mean()])


@dataclass(frozen=True)
class OneStep:
    """One profiled step of every rank of a run, from the timeline table.

    ``windows``: rank, start_ms, end_ms (each rank's ProfilerStep); ``spans``: rank, lane
    (coarse, fine, transfer), phase, start_ms, end_ms; ms from the earliest rank's step start."""

    run: str
    trial: int
    step: int
    windows: pd.DataFrame
    spans: pd.DataFrame
    aligned: bool  # False when a trace had no baseTimeNanoseconds (each rank then starts at 0)


def one_step(timeline: pd.DataFrame, run: str, step: int, trial: int) -> OneStep:
    """Step ``step`` of trial ``trial`` of ``run``, every rank (the timeline has every trial's steps)."""
    require_columns(timeline, "timeline", ("run", "trial", "rank", "step", "lane", "phase", "start_ms", "end_ms", "aligned"))
    rows = rows_of(timeline, "timeline", run)
    rows = rows[(rows["trial"] == trial) & (rows["step"] == step)]
    windows = rows[rows["lane"] == "step"]
    if windows.empty:
        raise MissingMetric(
            f"metrics table 'timeline' has no step windows (lane 'step') for run {run} at step {step} "
            f"of trial {trial} (runs.typical_step, runs.typical_trial)"
        )
    _require_values(rows, "timeline", run, ("start_ms", "end_ms"))

    def floats(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
        return df[columns].astype({c: "float64" for c in ("start_ms", "end_ms")}).reset_index(drop=True)

    windows = floats(windows.astype({"rank": "int64"}).sort_values("rank"), ["rank", "start_ms", "end_ms"])
    spans = rows[rows["lane"] != "step"].astype({"rank": "int64", "lane": str, "phase": str})
    aligned = bool(np.all(rows["aligned"].fillna(False).to_numpy(dtype=bool)))
    return OneStep(run, int(trial), int(step), windows, floats(spans, ["rank", "lane", "phase", "start_ms", "end_ms"]), aligned)


# ---------------------------------------------------------------- time: shares, trials, the optimizer step


def optimizer_share(run_row: pd.Series) -> float:
    """The original study's optimizer share of ``run_row``: the runs table's ``optimizer_share``, by the one estimator
    the claims table uses too (:mod:`muon_repro.analysis.estimators`), never recomputed here."""
    return fmetric(run_row, "optimizer_share")


def trial_medians(steps: pd.DataFrame, run: str, table: str = "steps") -> pd.Series:
    """Index: trial; value: the median step time of that trial (per step: the slowest rank), ms. ``table``: the
    name of ``steps`` in messages (``timed_steps`` for the steps timed without the profiler)."""
    require_columns(steps, table, ("run", "trial", "rank", "step", "step_ms"))
    s = rows_of(steps, table, run)
    _require_values(s, table, run, ("step_ms",))
    slowest = s.groupby(["trial", "step"])["step_ms"].max().astype("float64")
    return slowest.groupby(level="trial").median()


# The parts of the optimizer step, in data-flow order: (key, phases whose scopes it sums, Muon only).
# ZeRO-1's reduce-scatter and all-gather are paid by both optimizers; the gathers and
# Newton-Schulz by Muon alone; the element-wise work (momentum, AdamW's moments, the update) by both.
OPTIMIZER_PARTS = (
    ("zero1_reduce_scatter", (DP_REDUCE_SCATTER,), False),
    ("zero1_all_gather", (DP_ALL_GATHER,), False),
    ("muon_dp_gather", (DP_GATHER,), True),
    ("muon_tp_gather", (TP_GATHER,), True),
    ("muon_newton_schulz", (NEWTON_SCHULZ,), True),
    ("elementwise", (MOMENTUM, UPDATE), False),
    ("muon_shards", (TP_SHARD, DP_SHARD), True),
)
SPLIT_PARTS = ("muon_dp_gather", "muon_tp_gather")  # split into transfer and wait when the phases table has them
SPLIT_COLUMNS = {"transfer": "transfer_ms_per_step", "wait": "wait_ms_per_step"}


def optimizer_decomposition(phases: pd.DataFrame, run: str) -> pd.DataFrame:
    """Index: rank; columns: each of :data:`OPTIMIZER_PARTS` (ms per step inside the phases'
    scopes), ``<part>_transfer`` and ``<part>_wait`` for :data:`SPLIT_PARTS` (the collectives'
    share of the scope, when ``phases`` has the wait/transfer columns), ``optimizer`` (the whole
    optimizer scope) and ``rest`` (the optimizer scope minus the parts). Mean over the run's
    trials; a phase a rank never entered counts 0."""
    require_columns(phases, "phases", ("run", "trial", "rank", "phase", "ms_per_step"))
    p = rows_of(phases, "phases", run)
    split = all(c in p.columns for c in SPLIT_COLUMNS.values())
    pairs = p[["trial", "rank"]].drop_duplicates()
    opt = p[p["phase"] == OPTIMIZER]
    if opt.empty or opt["ms_per_step"].isna().all():
        raise MissingMetric(f"metric phases.ms_per_step is missing for run {run} (phase {OPTIMIZER!r})")

    def per_trial_rank(column: str, phase_set: tuple[str, ...]) -> pd.Series:
        rows = p[p["phase"].isin(phase_set)]
        total = rows.groupby(["trial", "rank"])[column].sum(min_count=1).astype("float64")
        index = pd.MultiIndex.from_frame(pairs.astype("int64"))
        return total.reindex(index).fillna(0.0)

    out = {}
    for key, phase_set, _ in (*OPTIMIZER_PARTS, ("optimizer", (OPTIMIZER,), False)):
        out[key] = per_trial_rank("ms_per_step", phase_set)
        if split and key in SPLIT_PARTS:
            for name, column in SPLIT_COLUMNS.items():
                out[f"{key}_{name}"] = per_trial_rank(column, phase_set)
    table = pd.DataFrame(out).groupby(level="rank").mean()
    table["rest"] = table["optimizer"] - table[[k for k, _, _ in OPTIMIZER_PARTS]].sum(axis=1)
    table.index = table.index.astype(int)
    return table.sort_index()


def ns_flops_by_rank(ranks: pd.DataFrame, run: str) -> pd.Series:
    """Index: rank; Newton-Schulz FLOPs per step (``ranks.ns_flops``, the same in every trial: the
    shard plan decides it), the first trial's."""
    require_columns(ranks, "ranks", ("run", "trial", "rank", "ns_flops"))
    r = rows_of(ranks, "ranks", run)
    r = r[r["trial"] == r["trial"].min()]
    _require_values(r, "ranks", run, ("ns_flops",))
    return r.set_index(r["rank"].astype(int))["ns_flops"].astype("float64").sort_index()


def has_value(row: pd.Series, column: str) -> bool:
    """Whether ``row`` has ``column`` with a value (columns others are still adding to the tables)."""
    return column in row.index and not is_missing(row[column])
