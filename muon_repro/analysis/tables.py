"""The analysis tables' builders. After analysis these tables are the only interface: figures, the
report and the dataset card read them (through :mod:`muon_repro.tables`) and nothing else.

One row per:

* ``runs``: run (a benchmark configuration, all its ranks), with its configuration;
* ``steps``: run x rank x profiled step;
* ``timed_steps``: run x rank x step timed without the profiler before the profiled ones
  (:mod:`muon_repro.analysis.timed_steps`; none for runs recorded without such steps);
* ``collectives``: run x rank x phase x collective op, totals over the profiled steps;
* ``comparisons``: Muon run x its AdamW twin (same profile, dp, tp, backend, device);
* ``claims``: a claim of the original study (Jen Wei's), the paper or Moonlight x hardware profile, measured, with a verdict;
* ``ranks``, ``phases``, ``timeline``, ``losses``, ``environment``: what each rank recorded at run
  time, bytes and time per phase from three sources, phase intervals on one clock, losses, and
  the machine (built in :mod:`muon_repro.analysis.run_tables`).

Each column is declared once in :data:`SCHEMAS` (:mod:`muon_repro.tables.schemas`: name,
pandas dtype, unit, meaning); the builders return frames conformed to them, and
:func:`muon_repro.tables.io.write_tables` puts the descriptions into the Parquet field metadata.
Unknown values are nulls (pandas nullable dtypes), never NaN.

``build_tables(paths)`` is the entry point: paths are trace files, run directories or trees of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import busbw_factor
from muon_repro.analysis.pipeline import Analysis, analyze_paths
from muon_repro.analysis.run_tables import (
    config_columns,
    environment_table,
    losses_table,
    phases_table,
    ranks_table,
    timeline_table,
)
from muon_repro.analysis.timed_steps import timed_run_columns, timed_steps_table
from muon_repro.analysis.waits import split_wait_transfer
from muon_repro.rundir import METRICS_FILE, trial_of
from muon_repro.tables.schemas import SCHEMAS

__all__ = ["build_tables", "tables_from_analysis"]


# ---------------------------------------------------------------- builders


def build_tables(paths: Iterable[str | Path], *, workers: int | None = None, rank: int | None = None) -> dict[str, pd.DataFrame]:
    """Analyze every trace under ``paths`` and return every table, conformed to SCHEMAS.

    Files that cannot be read are skipped, and run folders that lack a rank are analyzed file by
    file, with a warning naming each (their problems are available in detail from
    :func:`muon_repro.analysis.pipeline.analyze_paths`).
    """
    analysis = analyze_paths(list(paths), workers=workers, rank=rank)
    for problem in [*analysis.failures, *analysis.incomplete]:
        warnings.warn(problem.message, stacklevel=2)
    return tables_from_analysis(analysis)


def tables_from_analysis(analysis: Analysis) -> dict[str, pd.DataFrame]:
    from muon_repro.analysis.checks import checks_table
    from muon_repro.analysis.claims import claims_table
    from muon_repro.analysis.convergence import convergence_tables
    from muon_repro.analysis.costmodel_tables import costmodel_tables

    # Convergence records (muon-repro converge) sit beside the traces: found under the same paths,
    # here, so that every way of building the set (analyze, stages, verify --recompute) has them.
    convergence = convergence_tables(analysis.paths)
    steps = _steps_table(analysis)
    timed = timed_steps_table(analysis)
    collectives = _collectives_table(analysis)
    runs = _runs_table(analysis, steps, timed)
    comparisons = _comparisons_table(runs)
    ranks = ranks_table(analysis)
    phases = phases_table(analysis, steps, collectives)
    costmodel = costmodel_tables(analysis.paths)
    environment = environment_table(analysis)
    tables = {
        "runs": runs,
        "steps": steps,
        "timed_steps": timed,
        "collectives": collectives,
        "comparisons": comparisons,
        "claims": claims_table(
            runs,
            steps,
            ranks,
            phases,
            regimes=costmodel["regimes"],
            thresholds=costmodel["regime_thresholds"],
            convergence=convergence,
            environment=environment,
            predictions=costmodel["predictions"],
            timed=timed,
        ),
        "checks": checks_table(runs, ranks, phases),
        "ranks": ranks,
        "phases": phases,
        "timeline": timeline_table(analysis),
        "losses": losses_table(analysis),
        "environment": environment,
        **costmodel,
        **convergence,
    }
    return {name: SCHEMAS[name].conform(df) for name, df in tables.items()}


def _steps_table(analysis: Analysis) -> pd.DataFrame:
    frames = []
    for info, items in analysis.runs:
        skew = _skew(items)
        splits = split_wait_transfer(items, dp=info.config.dp, tp=info.config.tp)
        for b, split in zip(items, splits):
            df = b.steps.copy()
            df.insert(0, "run", info.key)
            df.insert(1, "profile", info.profile)
            df.insert(2, "group", info.group)
            df.insert(3, "name", info.name)
            df.insert(4, "rank", b.meta.rank)
            df.insert(5, "trial", info.trial)
            df.insert(7, "file", display_path(b.meta.path))
            df.insert(7, "device", b.device)
            if skew is not None:
                df = df.merge(skew, on=["rank", "step"], how="left")
            else:
                df["start_skew_ms"] = np.nan
                df["late_ms"] = np.nan
                df["straggler_rank"] = np.nan
            df["comm_wait_ms"], df["comm_transfer_ms"] = _wait_transfer_by_step(split, b.collectives["step"], df["step"])
            frames.append(df)
    if not frames:
        return SCHEMAS["steps"].empty()
    return pd.concat(frames, ignore_index=True)


def _wait_transfer_by_step(split: pd.DataFrame, launch_step: pd.Series, steps: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per step of ``steps``: wait and transfer (ms) of the collectives launched in it
    (``split`` from :func:`split_wait_transfer`, ``launch_step`` the calls' ``step``)."""
    sums = split[["wait_us", "transfer_us"]].groupby(launch_step.to_numpy()).sum() / 1000.0
    sums = sums.reindex(steps.to_numpy(), fill_value=0.0)
    return sums["wait_us"].to_numpy(), sums["transfer_us"].to_numpy()


def _skew(items: list) -> pd.DataFrame | None:
    """Spread of collective start times across the ranks of one run, per step.

    The k-th call of a given (phase, op) in a step is the same collective on every rank
    (they run the same program). Times are made comparable with each trace's
    ``baseTimeNanoseconds`` (absolute time = base + ts).
    """
    if len(items) < 2 or any(b.meta.base_time_ns is None for b in items):
        return None
    ref = min(b.meta.base_time_ns for b in items)
    frames = []
    for b in items:
        c = b.collectives[["step", "phase", "op", "issue_ts"]].copy()
        if c.empty:
            continue
        c["ordinal"] = c.sort_values("issue_ts").groupby(["step", "phase", "op"]).cumcount()
        c["t_us"] = c["issue_ts"] + (b.meta.base_time_ns - ref) / 1000.0
        c["rank"] = b.meta.rank
        frames.append(c)
    if len(frames) < 2:
        return None
    allc = pd.concat(frames, ignore_index=True)
    key = ["step", "phase", "op", "ordinal"]
    allc["first_us"] = allc.groupby(key)["t_us"].transform("min")
    allc["ranks_seen"] = allc.groupby(key)["rank"].transform("nunique")
    allc = allc[allc["ranks_seen"] >= 2]
    if allc.empty:
        return None
    allc["late_ms"] = (allc["t_us"] - allc["first_us"]) / 1000.0
    spread = allc.groupby(key)["late_ms"].max().groupby(level="step").max().rename("start_skew_ms")
    late = allc.groupby(["rank", "step"])["late_ms"].mean().reset_index()
    straggler = late.loc[late.groupby("step")["late_ms"].idxmax(), ["step", "rank"]].rename(columns={"rank": "straggler_rank"})
    out = late.merge(spread.reset_index(), on="step", how="left").merge(straggler, on="step", how="left")
    return out[["rank", "step", "start_skew_ms", "late_ms", "straggler_rank"]]


def _collectives_table(analysis: Analysis) -> pd.DataFrame:
    rows = []
    for info, items in analysis.runs:
        splits = split_wait_transfer(items, dp=info.config.dp, tp=info.config.tp)
        for b, split in zip(items, splits):
            inst = b.collectives
            if inst.empty:
                continue
            n_steps = len(b.steps)
            step_set = set(b.steps["step"].tolist())
            metrics = info.rank(b.meta.rank)
            ledger = _ledger_by_phase_op(metrics.ledger if metrics else [], step_set)
            inst = inst.assign(
                dur_us=inst["end"] - inst["start"],
                wait_us=split["wait_us"],
                matched=split["matched"],
                factor=[busbw_factor(op, n) if n > 0 else None for op, n in zip(inst["op"], inst["group_size"])],
            )
            for (phase, op), g in inst.groupby(["phase", "op"], sort=True):
                known = g[g["bytes"] >= 0]
                sized = g[g["size_bytes"] >= 0]
                t_us = float(g["dur_us"].sum())
                wait_ms = float(g["wait_us"].sum()) / 1000.0
                t_sized = float(sized["dur_us"].sum())
                with_factor = sized[sized["factor"].notna()]
                t_factor = float(with_factor["dur_us"].sum())
                rows.append(
                    {
                        "run": info.key,
                        "profile": info.profile,
                        "group": info.group,
                        "name": info.name,
                        "trial": info.trial,
                        "rank": b.meta.rank,
                        "phase": phase,
                        "op": op,
                        "source": _single(g["source"], "mixed"),
                        "group_size": _single(g["group_size"][g["group_size"] > 0], None),
                        "dtype": _single(g["dtype"][g["dtype"] != ""], "mixed"),
                        "steps": n_steps,
                        "calls": len(g),
                        "bytes": int(known["bytes"].sum()) if len(known) else None,
                        "size_bytes": int(sized["size_bytes"].sum()) if len(sized) else None,
                        "ms": t_us / 1000.0,
                        "wait_ms": wait_ms,
                        "transfer_ms": t_us / 1000.0 - wait_ms,  # the rest of ms, so that the two add up to it
                        "matched_calls": int(g["matched"].sum()),
                        "bytes_per_step": float(known["bytes"].sum()) / n_steps if len(known) and n_steps else None,
                        "ms_per_step": t_us / 1000.0 / n_steps if n_steps else None,
                        "algbw_gbps": float(sized["size_bytes"].sum()) / t_sized / 1e3 if t_sized > 0 else None,
                        "busbw_gbps": float((with_factor["size_bytes"] * with_factor["factor"]).sum()) / t_factor / 1e3
                        if t_factor > 0
                        else None,
                        "ledger_bytes": ledger.get((phase, op)) if ledger is not None else None,
                    }
                )
    if not rows:
        return SCHEMAS["collectives"].empty()
    return pd.DataFrame(rows)


def _single(values: pd.Series, mixed):
    uniq = pd.unique(values)
    if len(uniq) == 1:
        return uniq[0]
    return None if len(uniq) == 0 else mixed


def _ledger_by_phase_op(ledger: list[dict], steps: set) -> dict[tuple[str, str], int] | None:
    if not ledger:
        return None
    from muon_repro.analysis.collectives import normalize_op

    out: dict[tuple[str, str], int] = {}
    for rec in ledger:
        step, nbytes = rec.get("step"), rec.get("bytes")
        if not isinstance(nbytes, int) or (steps and step not in steps and -1 not in steps):
            continue
        op = normalize_op(str(rec.get("op", ""))) or str(rec.get("op", ""))
        key = (str(rec.get("phase", "")), op)
        out[key] = out.get(key, 0) + nbytes
    return out


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


def _runs_table(analysis: Analysis, steps: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
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
                "tokens_per_s": cfg.tokens_per_step / step_ms * 1000.0 if cfg.tokens_per_step and step_ms > 0 else None,
                "steps": int(s.groupby("rank")["step"].count().max()) if len(s) else 0,
                "step_ms": step_ms,
                "step_ms_p10": per_step["step_ms"].quantile(0.1),
                "step_ms_p90": per_step["step_ms"].quantile(0.9),
                **{c: per_step[c].median() for c in _RANK_MEAN_COLUMNS},
                # The original study's definition: the optimizer step's time over the training step's (medians over steps).
                "optimizer_share": per_step["optimizer_ms"].median() / step_ms if step_ms > 0 else None,
                "start_skew_ms": per_step["start_skew_ms"].median() if per_step["start_skew_ms"].notna().any() else None,
                "state_bytes": max(state) if state else None,
                "ring_bytes_per_step": _ring_bytes_per_step(s),
                "loopback_bytes_per_step": _loopback_bytes_per_step(trials),
                "peak_mem_bytes": peak,
                "peak_mem_source": peak_source,
                "path": display_path(info.path.parent if trial_of(info.path) is not None else info.path),
                "train_flops": next((m.train_flops for m in metrics if m.train_flops is not None), None),
                "ns_flops_max_rank": max((m.ns_flops for m in metrics if m.ns_flops is not None), default=None),
                "typical_trial": typical[0] if typical else None,
                "typical_step": typical[1] if typical else None,
                **timed_run_columns(timed, key, per_step["step_ms"].groupby(level="trial").median()),
                **config_columns(info, metrics),
            }
        )
    rows += _timed_run_rows(analysis, timed)
    if not rows:
        return SCHEMAS["runs"].empty()
    return pd.DataFrame(rows)


# The runs columns only a trace gives: null for a run timed in every round.
_TRACE_ONLY_COLUMNS = (
    "step_ms",
    "step_ms_p10",
    "step_ms_p90",
    *_RANK_MEAN_COLUMNS,
    "optimizer_share",
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
    }


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
        step_ms = columns["timed_step_ms"]
        rows.append(
            {
                **_run_identity(key, info),
                "world_size": cfg.world_size,
                "backend": cfg.backend,
                "device": cfg.device,
                "ranks": len(info.ranks),
                "trials": len(trials),
                "tokens_per_step": cfg.tokens_per_step,
                "tokens_per_s": cfg.tokens_per_step / step_ms * 1000.0 if cfg.tokens_per_step and step_ms else None,
                "steps": 0,
                **dict.fromkeys(_TRACE_ONLY_COLUMNS),
                "state_bytes": max(state) if state else None,
                "peak_mem_bytes": top.peak_memory_bytes if top else None,
                "peak_mem_source": (top.peak_memory_source or METRICS_FILE) if top else None,
                "path": display_path(info.path.parent if trial_of(info.path) is not None else info.path),
                "train_flops": next((m.train_flops for m in metrics if m.train_flops is not None), None),
                "ns_flops_max_rank": max((m.ns_flops for m in metrics if m.ns_flops is not None), default=None),
                **columns,
                **config_columns(info, metrics),
            }
        )
    return rows


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


def _ratio(a, b) -> float | None:
    if a is None or b is None or pd.isna(a) or pd.isna(b) or float(b) == 0.0:
        return None
    return float(a) / float(b)


def _comparisons_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Each Muon run against an AdamW run of the same hardware profile with the same dp, tp, backend and device
    that did the same work (same group first). A partner whose work differs is refused with an error naming both runs."""
    from muon_repro.analysis.claim_inputs import SAME_WORK, check_same_work

    rows = []
    runs = runs.astype(object).where(runs.notna(), None)
    adamw = runs[runs["optimizer"] == "adamw"]
    ratio_columns = [
        c
        for c in ("comm_ms", "comm_transfer_ms", "exposed_comm_ms", "comm_bytes", "optimizer_ms", "step_ms", "state_bytes")
        if c in runs.columns
    ]
    for _, m in runs[runs["optimizer"] == "muon"].iterrows():
        same = adamw[
            (adamw["profile"] == m["profile"])
            & (adamw["dp"] == m["dp"])
            & (adamw["tp"] == m["tp"])
            & (adamw["backend"] == m["backend"])
            & (adamw["device"] == m["device"])
        ]
        if same.empty:
            continue
        equal = same[[all(a.get(f) == m.get(f) for f in SAME_WORK) for _, a in same.iterrows()]]
        pool = equal if len(equal) else same
        preferred = pool[pool["group"] == m["group"]]
        a = (preferred if len(preferred) else pool).iloc[0]
        check_same_work(m, a)
        rows.append(
            {
                "profile": m["profile"],
                "group": m["group"],
                "dp": m["dp"],
                "tp": m["tp"],
                "backend": m["backend"],
                "device": m["device"],
                "layout": m["layout"],
                "tokens_per_step": m.get("tokens_per_step"),
                "muon_run": m["run"],
                "adamw_run": a["run"],
                **{f"{col}_ratio": _ratio(m[col], a[col]) for col in ratio_columns},
            }
        )
    if not rows:
        return SCHEMAS["comparisons"].empty()
    return pd.DataFrame(rows)
