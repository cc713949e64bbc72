"""The cost model in the 3-D section: how it priced each recorded pipeline run (``predictions`` rows with
``pp > 1``: the 1F1B schedule played back stage by stage, then the slowest stage's optimizer step), and what it
predicts for the 7B model as TP8 x PP4 x DP on H100 nodes over InfiniBand (``pipeline_scale_out``). From the
tables only; nothing when the cost model's records were not analyzed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from muon_repro.report.data import ReportData
from muon_repro.report.formatting import ms, percent

SCALE_OUT_HEADER = [
    "GPUs",
    "DP",
    "micro-batches",
    "Muon step",
    "AdamW step",
    "Muon optimizer (slowest stage)",
    "Muon / AdamW - 1",
    "bubble (ideal)",
]


VALIDATION_HEADER = ["run", "measured step", "predicted step", "error", "measured optimizer", "predicted optimizer", "error"]


def validation_rows(predictions: pd.DataFrame) -> list[list[str]]:
    """The cost model against each recorded pipeline run (``predictions`` rows with ``pp > 1``), as priced."""
    if predictions.empty or "pp" not in predictions.columns:
        return []
    rows = predictions[predictions["pp"].fillna(1).astype("int64") > 1].sort_values("run")
    return [
        [
            str(r["run"]).rsplit("/", 1)[-1],
            ms(r["measured_step_ms"]),
            ms(r["predicted_step_ms"]),
            percent(r["step_rel_error"], signed=True),
            ms(r["measured_optimizer_ms"]),
            ms(r["predicted_optimizer_ms"]),
            percent(r["optimizer_rel_error"], signed=True),
        ]
        for _, r in rows.iterrows()
    ]


def scale_out_rows(table: pd.DataFrame) -> list[list[str]]:
    """One row per GPU count: Muon's and AdamW's predicted step, Muon's optimizer share and extra, the bubble."""
    if table.empty:
        return []
    rows = []
    for gpus, at in table.sort_values("gpus").groupby("gpus", sort=True):
        muon, adamw = (at[at["optimizer"] == name] for name in ("muon", "adamw"))
        if muon.empty or adamw.empty:
            continue
        m, a = muon.iloc[0], adamw.iloc[0]
        rows.append(
            [
                f"{int(gpus):,}",
                f"{int(m['dp']):,}",
                f"{int(m['micro_batches']):,}",
                ms(m["step_ms"]),
                ms(a["step_ms"]),
                percent(m["optimizer_share"]),
                percent(m["muon_extra"], signed=True),
                f"{percent(m['bubble_fraction'])} ({percent(m['ideal_bubble_fraction'])})",
            ]
        )
    return rows


def pipeline_costmodel(data: ReportData) -> dict[str, Any]:
    """The cost-model paragraph's context: ``present`` False when the tables hold neither part."""
    table = data.pipeline_scale_out
    rows = scale_out_rows(table)
    validation = validation_rows(data.predictions)
    if not rows and not validation:
        return {"present": False}
    first = table.iloc[0] if len(table) else None
    setting = (
        f"The 7B model on {first['machine']} as TP{int(first['tp'])} x PP{int(first['pp'])} x DP, "
        f"{int(first['tokens_per_step']):,} tokens per step in micro-batches of one sequence, {first['model_dtype']}, "
        "1F1B (the cost model, pipeline_scale_out table; docs/method.md#pipeline-parallelism): as DP grows at a fixed "
        "batch, each replica has fewer micro-batches, the bubble grows, and the slowest stage's optimizer step weighs more."
        if first is not None
        else None
    )
    return {
        "present": True,
        "validation_header": VALIDATION_HEADER,
        "validation_rows": validation,
        "setting": setting,
        "header": SCALE_OUT_HEADER,
        "rows": rows,
    }
