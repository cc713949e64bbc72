"""The ``runs`` table: one row per run (a configuration, all its ranks and trials), from its traced trials'
steps, its timed steps, what its ranks recorded and its configuration; a run timed in every round (no trace)
has its timed columns and nulls where a trace would give values (:func:`runs_table`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from muon_repro.analysis.batch_read import Analysis
from muon_repro.analysis.estimators import disturbed_rounds, optimizer_share, step_source
from muon_repro.analysis.run_tables import config_columns
from muon_repro.analysis.timed_steps import timed_run_columns
from muon_repro.phases import OPTIMIZER
from muon_repro.rundir import METRICS_FILE, trial_of
from muon_repro.tables.schemas import SCHEMAS

# Per-step quantities a run reports as the median over steps of the mean over ranks.
_RANK_MEAN_COLUMNS = (
    "forward_ms",
    "backward_ms",
    "optimizer_ms",
    "compute_ms",
    "comm_ms",
    "comm_wait_ms",
    "comm_transfer_ms",
    "overlap_ms",
    "exposed_comm_ms",
    "idle_ms",
    "comm_calls",
    "comm_bytes",
)


def runs_table(analysis: Analysis, steps: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for key, trials in _by_run(analysis).items():
        info, items = trials[0]
        s = steps[steps["run"] == key]
        per_step = s.groupby(["trial", "step"]).agg(
            step_ms=("step_ms", "max"),
            **{c: (c, "mean") for c in _RANK_MEAN_COLUMNS},
            start_skew_ms=("start_skew_ms", "max"),
        )
        metrics = [m for t_info, t_items in trials for b in t_items if (m := t_info.rank(b.meta.rank)) is not None]
        state = [v for m in metrics if (v := m.total_state_bytes) is not None]
        trace_peaks = [int(v) for v in s["peak_mem_bytes"].dropna()]
        metric_peaks = [m for m in metrics if m.peak_memory_bytes is not None]
        if trace_peaks:
            peak, peak_source = max(trace_peaks), "trace_allocator"
        elif metric_peaks:
            top = max(metric_peaks, key=lambda m: m.peak_memory_bytes)
            peak, peak_source = top.peak_memory_bytes, top.peak_memory_source or METRICS_FILE
        else:
            peak, peak_source = None, None
        cfg = info.config
        step_ms = per_step["step_ms"].median()
        typical = typical_step(per_step["step_ms"])
        rows.append(
            {
                **_run_identity(key, info),
                "world_size": cfg.world_size or next((b.meta.world_size for b in items if b.meta.world_size), None),
                "backend": cfg.backend or next((b.meta.backend for b in items if b.meta.backend), None),
                "device": cfg.device or items[0].device,
                "ranks": len(items),
                "trials": len(trials),
                "tokens_per_step": cfg.tokens_per_step,
                "steps": int(s.groupby("rank")["step"].count().max()) if len(s) else 0,
                "step_ms": step_ms,
                "step_ms_p10": per_step["step_ms"].quantile(0.1),
                "step_ms_p90": per_step["step_ms"].quantile(0.9),
                **{c: per_step[c].median() for c in _RANK_MEAN_COLUMNS},
                **_share_columns(steps, timed, key),
                "start_skew_ms": per_step["start_skew_ms"].median() if per_step["start_skew_ms"].notna().any() else None,
                "state_bytes": max(state) if state else None,
                "ring_bytes_per_step": _ring_bytes_per_step(s),
                "loopback_bytes_per_step": _loopback_bytes_per_step(trials),
                "peak_mem_bytes": peak,
                "peak_mem_source": peak_source,
                "path": display_path(info.path.parent if trial_of(info.path) is not None else info.path),
                "train_flops": next((m.train_flops for m in metrics if m.train_flops is not None), None),
                "ns_flops_max_rank": max((m.ns_flops for m in metrics if m.ns_flops is not None), default=None),
                "optimizer_op_calls": _max_op_calls(metrics),
                "typical_trial": typical[0] if typical else None,
                "typical_step": typical[1] if typical else None,
                **timed_run_columns(timed, key, per_step["step_ms"].groupby(level="trial").median()),
                **config_columns(info, metrics),
            }
        )
    rows += _timed_run_rows(analysis, timed)
    if not rows:
        return SCHEMAS["runs"].empty()
    runs = pd.DataFrame(rows)
    return runs.assign(tokens_per_s=tokens_per_s(runs))


def tokens_per_s(runs: pd.DataFrame) -> pd.Series:
    """A run's throughput: its tokens per step over its step time without the profiler (``timed_step_ms``, as the
    report states a run's time), else, for a run recorded without timed steps, its profiled ``step_ms``: one
    column, never profiled steps on one row and unprofiled ones on the next where both were timed."""
    step_ms = pd.to_numeric(runs["timed_step_ms"], errors="coerce").fillna(pd.to_numeric(runs["step_ms"], errors="coerce"))
    tokens = pd.to_numeric(runs["tokens_per_step"], errors="coerce")
    return (tokens / step_ms * 1000.0).where(step_ms > 0)


# The runs columns only a trace gives: null for a run timed in every round.
_TRACE_ONLY_COLUMNS = (
    "step_ms",
    "step_ms_p10",
    "step_ms_p90",
    *_RANK_MEAN_COLUMNS,
    "start_skew_ms",
    "ring_bytes_per_step",
    "loopback_bytes_per_step",
    "typical_trial",
    "typical_step",
)


def _run_identity(key: str, info) -> dict:
    """The runs columns that name a run and its grid."""
    cfg = info.config
    return {
        "run": key,
        "profile": info.profile,
        "group": info.group,
        "name": info.name,
        "optimizer": cfg.optimizer,
        "layout": cfg.layout,
        "overlap": cfg.overlap,
        "dp": cfg.dp,
        "tp": cfg.tp,
        "pp": cfg.pp,
    }


def with_optimizer_gpu_busy(runs: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the optimizer step's GPU busy time and its share of the step's host span, from ``phases``
    (null for runs with no GPU time: CPU runs and runs timed only)."""
    opt = phases[(phases["phase"] == OPTIMIZER) & phases["gpu_ms_per_step"].notna()] if len(phases) else phases
    busy = opt.groupby("run")["gpu_ms_per_step"].mean() if len(opt) else pd.Series(dtype="float64")
    span = opt.groupby("run")["cpu_ms_per_step"].mean() if len(opt) else pd.Series(dtype="float64")
    share = (busy / span.where(span > 0)).astype("float64")
    return runs.assign(
        optimizer_gpu_busy_ms=runs["run"].map(busy).astype("float64"),
        optimizer_gpu_busy_share=runs["run"].map(share).astype("float64"),
    )


def _timed_run_rows(analysis: Analysis, timed: pd.DataFrame) -> list[dict]:
    """The runs recorded without any trace (every round timed only): what config.json, environment.json and
    metrics.json say, and the timed columns; every column a trace would give is null (``steps`` 0)."""
    by_key: dict[str, list] = {}
    for info in sorted(analysis.timed_runs, key=lambda i: i.trial):
        by_key.setdefault(info.key, []).append(info)
    rows = []
    for key, trials in by_key.items():
        info, cfg = trials[0], trials[0].config
        metrics = [m for t in trials for m in t.ranks.values()]
        state = [v for m in metrics if (v := m.total_state_bytes) is not None]
        peaks = [m for m in metrics if m.peak_memory_bytes is not None]
        top = max(peaks, key=lambda m: m.peak_memory_bytes) if peaks else None
        columns = timed_run_columns(timed, key, pd.Series(dtype=float))
        rows.append(
            {
                **_run_identity(key, info),
                "world_size": cfg.world_size,
                "backend": cfg.backend,
                "device": cfg.device,
                "ranks": len(info.ranks),
                "trials": 0,  # traced trials: none (its rounds, every one timed only, are the rounds column)
                "tokens_per_step": cfg.tokens_per_step,
                "steps": 0,
                **dict.fromkeys(_TRACE_ONLY_COLUMNS),
                **_share_columns(timed, timed, key),
                "state_bytes": max(state) if state else None,
                "peak_mem_bytes": top.peak_memory_bytes if top else None,
                "peak_mem_source": (top.peak_memory_source or METRICS_FILE) if top else None,
                "path": display_path(info.path.parent if trial_of(info.path) is not None else info.path),
                "train_flops": next((m.train_flops for m in metrics if m.train_flops is not None), None),
                "ns_flops_max_rank": max((m.ns_flops for m in metrics if m.ns_flops is not None), default=None),
                "optimizer_op_calls": _max_op_calls(metrics),
                **columns,
                **config_columns(info, metrics),
            }
        )
    return rows


def _share_columns(steps: pd.DataFrame, timed: pd.DataFrame, run: str) -> dict[str, float | int]:
    """The run's optimizer share with its 95% interval, by the one estimator the claims use
    (:func:`muon_repro.analysis.estimators.optimizer_share`), on the steps the claims would read
    (:func:`~muon_repro.analysis.estimators.step_source`)."""
    source = step_source(steps, timed, run)
    share = optimizer_share(source, run)
    return {
        "optimizer_share": share.value,
        "optimizer_share_low": share.low,
        "optimizer_share_high": share.high,
        "disturbed_rounds": len(disturbed_rounds(source, run)),
    }


def _ring_bytes_per_step(run_steps: pd.DataFrame) -> float | None:
    """The trace's ring-model bytes per recorded step, summed over ranks: the loopback counter's scope."""
    per_step = run_steps.groupby(["trial", "step"])["comm_bytes"].sum(min_count=1).dropna()
    return float(per_step.mean()) if len(per_step) else None


def _loopback_bytes_per_step(trials: list) -> float | None:
    """Rank 0's loopback delta (every rank's traffic) per recorded step, pooled over the trials that have one."""
    measured = [m for info, _ in trials if (m := info.rank(0)) is not None and m.loopback_bytes is not None and m.loopback_steps]
    return sum(m.loopback_bytes for m in measured) / sum(m.loopback_steps for m in measured) if measured else None


def _by_run(analysis: Analysis) -> dict[str, list]:
    """The analyzed folders grouped by run key (the trials of one configuration), in order."""
    out: dict[str, list] = {}
    for info, items in analysis.runs:
        out.setdefault(info.key, []).append((info, items))
    for trials in out.values():
        trials.sort(key=lambda t: t[0].trial)
    return out


def typical_step(slowest_rank_ms: pd.Series) -> tuple[int, int] | None:
    """(trial, step) whose slowest rank is the median: a typical step, not the warm-up outlier."""
    if slowest_rank_ms.empty:
        return None
    ordered = slowest_rank_ms.sort_values(kind="stable")
    trial, step = ordered.index[len(ordered) // 2]
    return int(trial), int(step)


def display_path(path: str | Path) -> str:
    """A path as stored in the tables: relative to the working directory when inside it
    (so tables written from the repository root hold ``traces/...``), else absolute."""
    p = Path(path).absolute()
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return p.as_posix()


def _max_op_calls(metrics: list) -> int | None:
    """The most operator calls one rank's optimizer step made (the busiest rank's launches); None: not counted."""
    return max((m.optimizer_op_calls for m in metrics if m.optimizer_op_calls is not None), default=None)
