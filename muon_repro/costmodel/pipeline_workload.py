"""What one pipeline stage's ranks do in a step: the stage's share of forward and backward, and its optimizer step.

A run with ``pp > 1`` cuts the GPT into stages as the runtime does (:func:`~muon_repro.model_config.stage_layers`:
contiguous blocks, the spare ones to the first stages; the embedding on stage 0; the final norm, LM head and loss
on the last). Each stage is a DP x TP grid of its own, so its workload is the one
:mod:`~muon_repro.costmodel.workload` builds for a DP x TP run, on the stage's part of the model:

* forward and backward over the stage's blocks (and embedding, head) for all ``M`` micro-batches;
* the optimizer's step on the stage's parameters only (its own shard plan over the stage's DP group), as
  :func:`muon_repro.optim.pipeline_stage.stage_optimizer` builds it.

The transfers between stages are the pipeline's (:mod:`muon_repro.costmodel.pipeline`), not a stage's.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING

from muon_repro.bench.configs import BenchConfig
from muon_repro.costmodel.workload import ELEMENT_SIZE, Workload, assemble_workload, model_stages
from muon_repro.model_config import GPTConfig, stage_parts

if TYPE_CHECKING:  # imported where used: the cost model prices without importing torch
    from muon_repro.optim.layout import ShardPlan


def activation_bytes(cfg: BenchConfig, precision: str = "fp32") -> int:
    """Bytes of one micro-batch's activation between two stages, ``[micro-batch sequences, seq, hidden]``: the same
    for its gradient. The runtime sends fp32 (4 bytes); a bf16 pricing (Megatron) sends bf16."""
    return cfg.activation_elements * ELEMENT_SIZE[precision]


def build_stage_workload(cfg: BenchConfig, stage: int, device: str = "cpu", precision: str = "fp32") -> Workload:
    """Every rank's program of pipeline stage ``stage`` of ``cfg`` (its DP x TP grid), as
    :func:`~muon_repro.costmodel.workload.build_workload` builds one for a whole model."""
    if not 0 <= stage < cfg.pp:
        raise ValueError(f"config {cfg.key}: stage {stage} is not one of its pp={cfg.pp} stages; give 0 to {cfg.pp - 1}")
    model = cfg.model_config()
    part = stage_parts(model.n_layers, cfg.pp)[stage]
    plan = stage_shard_plan(model, cfg.tp, cfg.dp, cfg.optimizer, cfg.layout, cfg.bucket_elems, stage, cfg.pp, cfg.ns_unit_elems)
    ns_dtype = cfg.ns_dtype or ("bf16" if device == "cuda" else "fp32")
    forward, backward = model_stages(cfg, model, precision, part)
    workload = assemble_workload(cfg, model, plan, forward, backward, ns_dtype, precision, stage=stage)
    sends = cfg.pipeline_send_bytes(stage)  # as the bench records them: fp32 activations forward, gradients back
    return replace(workload, analytic_bytes=tuple({**b, **sends} for b in workload.analytic_bytes))


@functools.lru_cache(maxsize=32)
def stage_shard_plan(
    model: GPTConfig,
    tp: int,
    dp: int,
    optimizer: str,
    layout: str,
    bucket_elems: int | None,
    stage: int,
    pp: int,
    ns_unit_elems: int | None = None,
) -> ShardPlan:
    """The :class:`ShardPlan` the stage's optimizer builds: the full model's TP-local parameters (on the ``meta``
    device) that the stage holds, in the model's order, which is the stage module's
    (:class:`~muon_repro.model_stages.GPTStage` keeps the full model's names and order)."""
    from muon_repro.optim.layout import ShardPlan

    specs = list(_stage_param_specs(model, tp, pp, optimizer == "muon")[stage])
    return ShardPlan(specs, dp, layout, bucket_elems, ns_unit_elems if optimizer == "muon" else None)


@functools.lru_cache(maxsize=8)
def _stage_param_specs(model: GPTConfig, tp: int, pp: int, muon: bool) -> tuple[tuple, ...]:
    """Per stage, the ``ParamSpec`` of each TP-local parameter it holds, from one ``meta`` model: a 7B model takes
    a fifth of a second to build, and every DP size and stage of a scale-out shares it."""
    import torch

    from muon_repro.model import GPT
    from muon_repro.model_stages import stage_of_parameter
    from muon_repro.optim.comm_model import param_specs
    from muon_repro.parallel.comm import CommLedger, Group

    group = Group(name="tp", ranks=tuple(range(tp)), rank=0, process_group=None, ledger=CommLedger())  # building sends nothing
    with torch.device("meta"):
        gpt = GPT(model, group, device="meta")
    named = list(gpt.named_parameters())
    return tuple(
        tuple(param_specs([(n, p) for n, p in named if stage_of_parameter(n, model.n_layers, pp) == s], tp, muon=muon))
        for s in range(pp)
    )


def build_pipeline_workload(cfg: BenchConfig, device: str = "cpu", precision: str = "fp32") -> Workload:
    """Every stage's workload as one: programs, Newton-Schulz FLOPs and analytic bytes in global rank order (what
    each rank's metrics.json records), the whole model's training FLOPs. Not for simulation: a stage's programs
    line up only with its own (:func:`build_stage_workload`)."""
    return merge_stage_workloads([build_stage_workload(cfg, s, device, precision) for s in range(cfg.pp)])


def merge_stage_workloads(stages: list[Workload]) -> Workload:
    """``stages`` (first to last) as one :class:`Workload` (see :func:`build_pipeline_workload`)."""
    first = stages[0]
    return replace(
        first,
        programs=tuple(p for w in stages for p in w.programs),
        ns_flops=tuple(f for w in stages for f in w.ns_flops),
        analytic_bytes=tuple(b for w in stages for b in w.analytic_bytes),
        stage=0,
    )
