"""The 7B model on H100 nodes as TP8 x PP4 x DP, 32 to 1,024 GPUs: what a pipeline does to Muon's overhead.

The scale-out of :mod:`muon_repro.costmodel.records` (TP8 inside a node, DP across nodes, 4M tokens per step) with
four pipeline stages: ``DP = GPUs / 32``. Each DP replica's ``1024 / DP`` sequences of 4,096 tokens run as
micro-batches of one sequence, as Megatron-LM trains 7B at that length (``--micro-batch-size 1``; the number of
micro-batches follows from the global batch): ``M = 1024 / DP``, from 1,024 at 32 GPUs to 32 at 1,024. Priced in
bf16 mixed precision (activations cross the stages in bf16), without the profiler's cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from muon_repro.bench.configs import BenchConfig
from muon_repro.costmodel.machine import resolve_profile
from muon_repro.costmodel.machine_profile import MachineProfile
from muon_repro.costmodel.pipeline import PipelinePrediction
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.records import MODEL_7B, SCALE_OUT_GPUS, SCALE_OUT_TOKENS, Setting, run_config

if TYPE_CHECKING:
    import pandas as pd

PIPELINE_MACHINE = "h100-multinode-ib400"
PIPELINE_TP = 8  # inside a node
PIPELINE_PP = 4
MICRO_BATCH_SEQUENCES = 1  # Megatron-LM's --micro-batch-size for 7B at 4k tokens
MODEL_DTYPE = "bf16"
# The pipeline_scale_out table's columns, in order (muon_repro.tables.schemas.PIPELINE_SCALE_OUT documents them).
COLUMNS = (
    "machine",
    "model",
    "model_dtype",
    "optimizer",
    "gpus",
    "dp",
    "tp",
    "pp",
    "layout",
    "tokens_per_step",
    "micro_batches",
    "step_ms",
    "pipeline_ms",
    "optimizer_ms",
    "stage_optimizer_max_ms",
    "optimizer_exposed_ms",
    "optimizer_share",
    "bubble_ms",
    "bubble_max_ms",
    "bubble_fraction",
    "ideal_bubble_fraction",
    "activation_bytes",
    "p2p_ms",
    "muon_extra",
)


def pipeline_config(optimizer: str, gpus: int, *, tp: int = PIPELINE_TP, pp: int = PIPELINE_PP) -> BenchConfig:
    """The 7B run on ``gpus`` GPUs as TP ``tp`` x PP ``pp`` x DP, micro-batches of one sequence."""
    per_replica = tp * pp
    if gpus < per_replica or gpus % per_replica:
        raise ValueError(f"{gpus} GPUs do not split into TP{tp} x PP{pp} x DP: give a multiple of {per_replica}")
    dp = gpus // per_replica
    sequences = SCALE_OUT_TOKENS // MODEL_7B.seq_len
    if sequences % (dp * MICRO_BATCH_SEQUENCES):
        raise ValueError(f"{sequences} sequences per step do not split over DP{dp}: give fewer GPUs")
    base = run_config(Setting(PIPELINE_MACHINE, MODEL_7B, dp, tp), optimizer, SCALE_OUT_TOKENS)
    micro = sequences // (dp * MICRO_BATCH_SEQUENCES)
    return replace(base, name=f"{base.name}_pp{pp}", pp=pp, micro_batches=micro)


def pipeline_row(muon: PipelinePrediction, adamw: PipelinePrediction | None = None) -> dict:
    """One row of the table for ``muon`` (or any optimizer's prediction); ``muon_extra`` against ``adamw`` if given."""
    cfg = muon.cfg
    bubbles = [s.bubble_ms for s in muon.stages]
    return {
        "machine": muon.machine,
        "model": MODEL_7B.name if cfg.hidden == MODEL_7B.d_model else cfg.preset,
        "model_dtype": muon.stage_workloads[0].precision,
        "optimizer": cfg.optimizer,
        "gpus": cfg.world_size,
        "dp": cfg.dp,
        "tp": cfg.tp,
        "pp": cfg.pp,
        "layout": cfg.layout,
        "tokens_per_step": cfg.tokens_per_step,
        "micro_batches": cfg.micro_batches,
        "step_ms": muon.step_ms,
        "pipeline_ms": muon.pipeline_ms,
        "optimizer_ms": muon.optimizer_ms,
        "stage_optimizer_max_ms": muon.stage_optimizer_max_ms,
        "optimizer_exposed_ms": muon.optimizer_exposed_ms,
        "optimizer_share": muon.stage_optimizer_max_ms / muon.step_ms,
        "bubble_ms": muon.bubble_ms,
        "bubble_max_ms": max(bubbles),
        "bubble_fraction": muon.bubble_ms / muon.pipeline_ms,
        "ideal_bubble_fraction": (cfg.pp - 1) / (cfg.micro_batches + cfg.pp - 1),
        "activation_bytes": muon.activation_bytes,
        "p2p_ms": max(muon.transfer_ms),
        "muon_extra": muon.step_ms / adamw.step_ms - 1 if adamw is not None else None,
    }


def pipeline_scale_out_rows(
    gpus: Iterable[int] = SCALE_OUT_GPUS, machine: MachineProfile | None = None, *, pp: int = PIPELINE_PP
) -> list[dict]:
    """Muon's and AdamW's rows at each GPU count (:data:`COLUMNS`), predicted on ``machine`` (default the shipped
    H100 InfiniBand profile)."""
    machine = machine or resolve_profile(PIPELINE_MACHINE)
    rows = []
    for count in gpus:
        muon, adamw = (
            predict(pipeline_config(opt, count, pp=pp), machine, profiled=False, model_dtype=MODEL_DTYPE)
            for opt in ("muon", "adamw")
        )
        rows += [pipeline_row(muon, adamw), pipeline_row(adamw)]
    return rows


def pipeline_scale_out_table(gpus: Iterable[int] = SCALE_OUT_GPUS, machine: MachineProfile | None = None) -> pd.DataFrame:
    """:func:`pipeline_scale_out_rows` as a DataFrame with the ``pipeline_scale_out`` table's columns and dtypes."""
    import pandas as pd

    from muon_repro.tables.schemas import PIPELINE_SCALE_OUT

    return PIPELINE_SCALE_OUT.conform(pd.DataFrame(pipeline_scale_out_rows(gpus, machine), columns=list(COLUMNS)))


def format_scale_out(rows: list[dict]) -> str:
    """The rows as people read them, one line per GPU count and optimizer."""
    header = (
        f"{'gpus':>5} {'dp':>3} {'M':>5} {'optimizer':<9} {'step ms':>9} {'pipeline':>9} {'optim max':>9} "
        f"{'exposed':>9} {'share':>7} {'bubble':>7} {'bubble %':>8} {'ideal %':>7} {'extra':>7}"
    )
    lines = [header]
    for r in rows:
        extra = "-" if r["muon_extra"] is None else f"{r['muon_extra']:+.1%}"
        lines.append(
            f"{r['gpus']:>5} {r['dp']:>3} {r['micro_batches']:>5} {r['optimizer']:<9} {r['step_ms']:>9.1f} "
            f"{r['pipeline_ms']:>9.1f} {r['stage_optimizer_max_ms']:>9.1f} {r['optimizer_exposed_ms']:>9.1f} "
            f"{r['optimizer_share']:>7.2%} "
            f"{r['bubble_ms']:>7.1f} {r['bubble_fraction']:>8.2%} {r['ideal_bubble_fraction']:>7.2%} {extra:>7}"
        )
    return "\n".join(lines)
