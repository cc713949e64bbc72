"""The ``stages`` table: one row per pipeline run and stage, what the stage holds and where its step goes.

A pipeline stage's step is its forwards and backwards, the time it blocks on its neighbours (the bubble:
its receives and its flush), then its optimizer step, which starts after the flush and lasts as long as the
slowest stage's. The table puts those side by side per stage, from two sources:

* ``timed_*``: the steps timed without the profiler in every round (``timed_steps``): per step the mean over
  the stage's ranks, the median over a round's steps, then the median over rounds;
* ``forward_ms`` ... ``flush_ms``: the profiled steps' scopes (``phases``), mean over traced trials and ranks.

``bubble_over_optimizer`` is the timed bubble over the timed optimizer step: the share of the optimizer step
the stage's idle time could hold, were the step moved into it (an upper bound: only the idle time after the
stage's last backward can take it, once its gradients are complete).

Runs without pipeline stages have no rows. Built from the other tables only (no trace is read here).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from muon_repro.model_config import PRESETS, stage_parts
from muon_repro.phases import BACKWARD, BUBBLE, FORWARD, OPTIMIZER, PP_FLUSH, PP_SEND_PHASES
from muon_repro.tables.schemas import SCHEMAS

_TRACE_COLUMNS = {"forward_ms": (FORWARD,), "backward_ms": (BACKWARD,), "optimizer_ms": (OPTIMIZER,)}
_TRACE_COLUMNS |= {"bubble_ms": (BUBBLE,), "flush_ms": (PP_FLUSH,), "send_ms": PP_SEND_PHASES}
_TIMED_COLUMNS = {"timed_fwd_bwd_ms": "fwd_bwd_ms", "timed_bubble_ms": "bubble_ms", "timed_optimizer_ms": "optimizer_ms"}


def stage_holdings(preset: str | None, pp: int, stage: int) -> tuple[int | None, str]:
    """(blocks, what else) stage ``stage`` of ``pp`` holds of ``preset``'s GPT: the embedding on the first, the
    final norm, head and loss on the last; (None, "") for an unknown preset."""
    config = PRESETS.get(str(preset))
    if config is None or config.n_layers < pp:
        return None, ""
    part = stage_parts(config.n_layers, pp)[stage]
    return part.layers, " + ".join(["embedding"] * part.embedding + ["head"] * part.head)


def stages_table(runs: pd.DataFrame, timed: pd.DataFrame, phases: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """One row per run with ``pp > 1`` and stage (see the module docstring)."""
    schema = SCHEMAS["stages"]
    if runs.empty or "pp" not in runs.columns:
        return schema.empty()
    rows = []
    for run in runs[runs["pp"].fillna(1).astype("int64") > 1].itertuples(index=False):
        pp = int(run.pp)
        mine_ranks = ranks[ranks["run"] == run.run]
        for stage in range(pp):
            blocks, holds = stage_holdings(run.preset, pp, stage)
            on_stage = mine_ranks[mine_ranks["pp_rank"] == stage]
            rows.append(
                {
                    "run": run.run,
                    "profile": run.profile,
                    "group": run.group,
                    "name": run.name,
                    "optimizer": run.optimizer,
                    "pp": pp,
                    "stage": stage,
                    "ranks": int(on_stage["rank"].nunique()) if len(on_stage) else None,
                    "blocks": blocks,
                    "holds": holds,
                    "local_params": _max(on_stage, "local_params"),
                    "state_bytes": _max(on_stage, "state_bytes"),
                    "ns_flops": _max(on_stage, "ns_flops"),
                    **_timed_columns(timed, run.run, stage),
                    **_trace_columns(phases, run.run, stage),
                }
            )
    if not rows:
        return schema.empty()
    out = pd.DataFrame(rows)
    optimizer = out["timed_optimizer_ms"].astype("float64")
    out["bubble_over_optimizer"] = out["timed_bubble_ms"].astype("float64") / optimizer.where(optimizer > 0)
    return out


def _max(frame: pd.DataFrame, column: str) -> Any:
    values = frame[column].dropna() if column in frame.columns else frame.iloc[0:0]
    return values.max() if len(values) else None


def _timed_columns(timed: pd.DataFrame, run: str, stage: int) -> dict[str, Any]:
    """Per round the median over steps of the mean over the stage's ranks, then the median over rounds."""
    empty = dict.fromkeys(_TIMED_COLUMNS) | {"rounds": None}
    if timed.empty or "stage" not in timed.columns:
        return empty
    mine = timed[(timed["run"] == run) & (timed["stage"] == stage)]
    if mine.empty:
        return empty
    per_step = mine.groupby(["trial", "step"])[list(_TIMED_COLUMNS.values())].mean()
    per_round = per_step.astype("float64").groupby(level="trial").median()
    medians = per_round.median()
    return {out: _finite(medians[column]) for out, column in _TIMED_COLUMNS.items()} | {"rounds": len(per_round)}


def _trace_columns(phases: pd.DataFrame, run: str, stage: int) -> dict[str, Any]:
    """Each column's phases summed per (trial, rank), then the mean over the stage's traced ranks."""
    mine = phases[(phases["run"] == run) & (phases["stage"] == stage)] if "stage" in phases.columns else phases.iloc[0:0]
    out = {}
    for column, names in _TRACE_COLUMNS.items():
        rows = mine[mine["phase"].isin(names)]
        per_rank = rows.groupby(["trial", "rank"])["ms_per_step"].sum(min_count=1).astype("float64").dropna()
        out[column] = float(per_rank.mean()) if len(per_rank) else None
    return out


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None
