"""Tables from what each run recorded beside its traces, and from its phase spans.

* ``ranks``: per rank, metrics.json's state, memory, Newton-Schulz work and shard plan summary;
* ``phases``: per rank and phase, time in the phase's scope (trace) and bytes from the analytic
  model, the run-time ledger and the trace, side by side;
* ``timeline``: every profiled step's phase intervals, the ranks of a run on one clock;
* ``losses``: the loss of every training step and rank;
* ``environment``: environment.json, one row per field;
* :func:`config_columns`: config.json's fields for the ``runs`` table.

Each builder takes the :class:`~muon_repro.analysis.batch_read.Analysis` and returns a frame with
its schema's columns (the caller conforms it); runs without side files contribute no rows.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from muon_repro.analysis.batch_read import Analysis
from muon_repro.analysis.discover import RunInfo
from muon_repro.analysis.timeline import align_ranks
from muon_repro.phases import BUBBLE, PHASES, PIPELINE_WAIT_PHASES
from muon_repro.run_records import RankMetrics
from muon_repro.rundir import flatten
from muon_repro.tables.schemas import SCHEMAS
from muon_repro.values import command_line, recorded_commit


def _frame(name: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows) if rows else SCHEMAS[name].empty()


def config_columns(info: RunInfo, metrics: list[RankMetrics]) -> dict[str, Any]:
    """The ``runs`` columns that come from config.json and environment.json."""
    cfg, env = info.config, info.environment
    return {
        "scale": cfg.scale,
        "preset": cfg.preset,
        "qkv": cfg.qkv,
        "cross_entropy": cfg.cross_entropy,
        "precision": cfg.precision,
        "micro_batches": cfg.micro_batches,
        "batch_per_dp": cfg.batch_per_dp,
        "seq_len": cfg.seq_len,
        "train_steps": cfg.steps,
        "lr": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "ns_dtype": cfg.ns_dtype,
        "ns_method": cfg.ns_method,
        "ns_unit_elems": cfg.ns_unit_elems,
        "gather_dtype": cfg.gather_dtype,
        "reduce_dtype": cfg.reduce_dtype,
        "seed": cfg.seed,
        "model_params": next((m.model_params for m in metrics if m.model_params is not None), None),
        "d_model": cfg.d_model,
        "command": command_line(cfg.command),
        "git_sha": recorded_commit(env),
        "recorded_at": env.get("recorded_at") if isinstance(env.get("recorded_at"), str) else None,
    }


def _rank_metrics(analysis: Analysis):
    """(run info, rank metrics) for every analyzed rank that has metrics.json data."""
    for info, items in analysis.runs:
        for b in items:
            m = info.rank(b.meta.rank)
            if m is not None:
                yield info, m


def _ids(info: RunInfo, rank: int) -> dict[str, Any]:
    return {**_run_ids(info), "trial": info.trial, "rank": rank}


def _run_ids(info: RunInfo) -> dict[str, Any]:
    return {"run": info.key, "profile": info.profile, "group": info.group, "name": info.name}


def ranks_table(analysis: Analysis) -> pd.DataFrame:
    rows = []
    for info, m in _rank_metrics(analysis):
        shard = m.shard
        rows.append(
            {
                **_ids(info, m.rank),
                "dp_rank": m.dp_rank,
                "tp_rank": m.tp_rank,
                "pp_rank": m.pp_rank or 0,
                "muon_state_bytes": m.state_bytes.get("muon"),
                "adamw_state_bytes": m.state_bytes.get("adamw"),
                "state_bytes": m.total_state_bytes,
                "transient_bytes": m.transient_bytes,
                "held_state_bytes": m.held_state_bytes,
                "held_buffer_bytes": m.held_buffer_bytes,
                "peak_mem_bytes": m.peak_memory_bytes,
                "peak_mem_source": m.peak_memory_source,
                "ns_calls": m.ns_calls,
                "ns_flops": m.ns_flops,
                "optimizer_op_calls": m.optimizer_op_calls,
                "shard_elems": shard.shard_elems if shard else None,
                "muon_elems": shard.muon_elems if shard else None,
                "muon_matrices": shard.muon_matrices if shard else None,
                "ns_matrices": shard.ns_matrices if shard else None,
                "dp_gathered_matrices": shard.dp_gathered_matrices if shard else None,
                "local_params": m.local_params,
            }
        )
    return _frame("ranks", rows)


def losses_table(analysis: Analysis) -> pd.DataFrame:
    """The profiled steps' losses at their training step: they follow the steps the run timed without the profiler
    (its warm-up included), which record no loss (RunConfig.timed_total)."""
    rows = [
        {**_ids(info, m.rank), "step": info.config.timed_total + step, "loss": loss}
        for info, m in _rank_metrics(analysis)
        for step, loss in enumerate(m.loss)
    ]
    return _frame("losses", rows)


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def environment_table(analysis: Analysis) -> pd.DataFrame:
    """Each traced trial's environment.json, and each trial's of the runs recorded without any trace (every round
    timed only), so that every run of the runs table has its machine here."""
    rows = [
        {**_run_ids(info), "trial": info.trial, "key": key, "value": _text(value)}
        for info in [info for info, _ in analysis.runs] + analysis.timed_runs
        for key, value in sorted(flatten(info.environment).items())
        if value is not None
    ]
    return _frame("environment", rows)


def _gpu_ms(spans: pd.DataFrame, n_steps: int) -> dict[str, float]:
    """Per phase, the union of the GPU work it launched (lane ``gpu``), per step."""
    from muon_repro.analysis.intervals import Segments

    gpu = spans[spans["lane"] == "gpu"]
    return {
        str(phase): sum(Segments.union(s["start_us"].to_numpy(), s["end_us"].to_numpy()).total for _, s in rows.groupby("step"))
        / 1000.0
        / n_steps
        for phase, rows in gpu.groupby("phase")
    }


def phases_table(analysis: Analysis, steps: pd.DataFrame, collectives: pd.DataFrame) -> pd.DataFrame:
    """Time and bytes per run, rank and phase (analytic and ledger bytes from metrics.json;
    trace bytes, ledger bytes, wait and transfer per profiled step from ``collectives``; time
    from the spans)."""
    rows = []
    for info, items in analysis.runs:
        for b in items:
            mine_steps = (steps["run"] == info.key) & (steps["trial"] == info.trial) & (steps["rank"] == b.meta.rank)
            n_steps = int(steps[mine_steps]["step"].nunique())
            if n_steps == 0:
                continue
            mine = collectives[
                (collectives["run"] == info.key) & (collectives["trial"] == info.trial) & (collectives["rank"] == b.meta.rank)
            ]
            trace_bytes = mine.groupby("phase")["bytes"].sum(min_count=1)
            ledger_bytes = mine.groupby("phase")["ledger_bytes"].sum(min_count=1)
            wait_ms = mine.groupby("phase")["wait_ms"].sum(min_count=1)
            transfer_ms = mine.groupby("phase")["transfer_ms"].sum(min_count=1)
            spans = b.spans if b.spans is not None else pd.DataFrame(columns=["lane", "phase", "start_us", "end_us"])
            scoped = spans[spans["lane"].isin(("coarse", "fine"))]
            cpu_ms = ((scoped["end_us"] - scoped["start_us"]).groupby(scoped["phase"]).sum() / 1000.0 / n_steps).to_dict()
            gpu_ms = _gpu_ms(spans, n_steps) if b.device == "cuda" else {}
            # a phase's time: on a GPU trace its GPU time (the work it launched), else its CPU span
            ms = {p: gpu_ms.get(p, 0.0) for p in cpu_ms} if b.device == "cuda" else dict(cpu_ms)
            metrics = info.rank(b.meta.rank)
            analytic = metrics.analytic_bytes if metrics else {}
            stage = (metrics.pp_rank if metrics else None) or 0
            waits = [ms[p] for p in PIPELINE_WAIT_PHASES if p in ms]
            if waits:  # a pipeline stage: its bubble is the time it blocked on its neighbours
                ms[BUBBLE] = sum(waits)
                cpu_ms[BUBBLE] = sum(cpu_ms[p] for p in PIPELINE_WAIT_PHASES if p in cpu_ms)
            for phase in (*PHASES, BUBBLE):
                values = {
                    "ms_per_step": ms.get(phase),
                    "cpu_ms_per_step": cpu_ms.get(phase),
                    "gpu_ms_per_step": (gpu_ms.get(phase, 0.0) if phase in cpu_ms else None) if b.device == "cuda" else None,
                    "wait_ms_per_step": _per_step(wait_ms.get(phase), n_steps),
                    "transfer_ms_per_step": _per_step(transfer_ms.get(phase), n_steps),
                    "analytic_bytes": analytic.get(phase),
                    "ledger_bytes": _per_step(ledger_bytes.get(phase), n_steps),
                    "trace_bytes": _per_step(trace_bytes.get(phase), n_steps),
                }
                if all(v is None for v in values.values()):
                    continue
                rows.append({**_ids(info, b.meta.rank), "stage": stage, "phase": phase, "steps": n_steps, **values})
    return _frame("phases", rows)


def _per_step(total: Any, n_steps: int) -> float | None:
    return None if total is None or pd.isna(total) else float(total) / n_steps


def timeline_table(analysis: Analysis) -> pd.DataFrame:
    frames = []
    for info, items in analysis.runs:
        per_rank = [(b.meta.rank, b.meta.base_time_ns, b.spans, b.steps) for b in items if b.spans is not None]
        spans = align_ranks(per_rank)
        if len(spans):
            frames.append(spans.assign(**_run_ids(info), trial=info.trial))
    if not frames:
        return SCHEMAS["timeline"].empty()
    return pd.concat(frames, ignore_index=True)
