"""Distributed Muon and AdamW per pipeline stage: ZeRO-1 over the stage's DP group, TP as everywhere.

Each stage's parameters get their own optimizer, one of the existing ZeRO-1 classes unchanged
(:class:`~muon_repro.optim.distributed.DistributedMuon`, :class:`~muon_repro.optim.distributed.DistributedAdamW`),
handed the pipeline's :class:`~muon_repro.parallel.mesh.ParallelDims`: its ``dp_group`` and ``tp_group`` are this stage's,
so the gradient reduce-scatter, the parameter all-gather and Muon's DP gather run among the ``dp`` replicas
of this stage only, and the TP gather among this stage's TP ranks. Every layout
(:data:`~muon_repro.optim.layout.LAYOUTS`) works as on a DP x TP grid (tested), and so should every overlap
(not yet tested with PP). The flat buffer holds this stage's parameters only, in Megatron's reverse order.

The routing is :func:`~muon_repro.optim.muon_param_groups`'s on the stage's parameters, which keep the
full model's names: the embedding (first stage) and the LM head (last stage) go to AdamW, the block
matrices to Muon, so the first and last stages hold the AdamW-routed tensors and every stage Muon
matrices (each holds at least one block).
"""

from __future__ import annotations

from muon_repro.model_stages import GPTStage
from muon_repro.optim.distributed import DistributedAdamW, DistributedMuon
from muon_repro.optim.param_groups import muon_param_groups
from muon_repro.optim.zero1 import ZeroOneOptimizer
from muon_repro.parallel.mesh import ParallelDims
from muon_repro.parallel.pipeline_runner import check_stage_on_grid

STAGE_OPTIMIZERS = {"muon": DistributedMuon, "adamw": DistributedAdamW}


def stage_optimizer(stage: GPTStage, grid: ParallelDims, optimizer: str, **hyperparameters) -> ZeroOneOptimizer:
    """This stage's ZeRO-1 optimizer (``"muon"`` or ``"adamw"``); ``hyperparameters`` go to its constructor."""
    if optimizer not in STAGE_OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(STAGE_OPTIMIZERS)}")
    check_stage_on_grid(stage, grid)
    return STAGE_OPTIMIZERS[optimizer](muon_param_groups(stage), grid, **hyperparameters)
