"""Worker functions for tests/test_pipeline_equivalence.py (importable by spawned workers, as tp_workers.py).

A :class:`PipelineCase` trains the tiny GPT (4 blocks, so that PP4 holds one block a stage) for
:data:`STEPS` steps on a DP x TP x PP grid with the 1F1B runner and the per-stage ZeRO-1 optimizers;
rank 0 returns the full (canonical tp=1) parameters after every step. :func:`reference_training` is the
single-device run they are compared with.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from muon_repro.model import GPT, GPTConfig, assemble_tensor
from muon_repro.model_stages import GPTStage
from muon_repro.optim.adamw import AdamW
from muon_repro.optim.comm_model import optimizer_bytes, param_specs
from muon_repro.optim.muon import Muon
from muon_repro.optim.param_groups import muon_param_groups
from muon_repro.optim.pipeline_stage import stage_optimizer
from muon_repro.parallel.comm import Group
from muon_repro.parallel.mesh import ParallelDims
from muon_repro.parallel.pipeline_runner import split_micro_batches, train_step
from muon_repro.phases import OPTIMIZER_COMM_PHASES

CONFIG = GPTConfig.preset("tiny", n_layers=4)  # hidden 32, 4 blocks: PP4 holds one block per stage
STEPS = 3
MICRO_BATCHES = 6  # > pp on every grid, so each stage runs warm-up, steady 1F1B and cool-down
MICRO_BATCH_SIZE = 2
SEQ_LEN = 16
LR = 0.02
BUCKET_ELEMS = 4096  # a third of a block's parameters: the bucketed layout cuts every stage into several buckets


@dataclass(frozen=True)
class PipelineCase:
    dp: int
    tp: int
    pp: int
    optimizer: str
    layout: str = "contiguous"

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    def hyperparameters(self) -> dict:
        common = {"lr": LR, "layout": self.layout, "bucket_elems": BUCKET_ELEMS if self.layout == "bucketed" else None}
        if self.optimizer == "muon":  # fp32 NS on fp32 gathers: the reference's arithmetic exactly
            return {**common, "ns_dtype": torch.float32, "gather_dtype": torch.float32}
        return common


def replica_batch(step: int, dp_rank: int, dp: int) -> tuple[torch.Tensor, torch.Tensor]:
    """DP replica ``dp_rank``'s consecutive slice of step ``step``'s global batch (tokens, targets)."""
    per_replica = MICRO_BATCHES * MICRO_BATCH_SIZE
    gen = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(CONFIG.vocab_size, (dp * per_replica, SEQ_LEN + 1), generator=gen)
    mine = tokens[dp_rank * per_replica : (dp_rank + 1) * per_replica]
    return mine[:, :-1], mine[:, 1:]


def replica_ordered_gradients(model: GPT, step: int, dp: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Step ``step``'s gradient of the whole model on one process, summed in the grid's order; each replica's loss.

    The gradient is accumulated over each replica's micro-batches in order (loss / M each, as the runner
    does), and the replicas' gradients are summed in replica order and divided by ``dp``, as ZeRO-1's
    reduce-scatter then ``div_(dp)`` does (a sum of two is the same in any order, so for ``dp <= 2`` this
    is exactly the grid's reduction).
    """
    replica_grads, losses = [], []
    for d in range(dp):
        tokens, targets = replica_batch(step, d, dp)
        loss = None  # summed as the runner sums the scaled micro-batch losses
        for tok, tgt in zip(split_micro_batches(tokens, MICRO_BATCHES), split_micro_batches(targets, MICRO_BATCHES)):
            scaled = model(tok, tgt) / MICRO_BATCHES
            scaled.backward()
            loss = scaled.detach() if loss is None else loss + scaled.detach()
        losses.append(loss.item())
        replica_grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)
    averaged = {}
    for name in replica_grads[0]:
        total = replica_grads[0][name].clone()
        for grads in replica_grads[1:]:
            total += grads[name]
        averaged[name] = total.div_(dp)
    return averaged, losses


def reference_training(optimizer: str, dp: int) -> dict[str, list]:
    """One process, the whole model, the whole global batch (:func:`replica_ordered_gradients`): the full
    parameters after every step (``params``) and every replica's loss at every step (``losses``)."""
    model = GPT(CONFIG, Group.single("tp"))
    groups = muon_param_groups(model)
    opt = (
        AdamW(groups, lr=LR) if optimizer == "adamw" else Muon(groups, lr=LR, ns_dtype=torch.float32, gather_dtype=torch.float32)
    )
    params, losses = [], []
    for step in range(STEPS):
        grads, step_losses = replica_ordered_gradients(model, step, dp)
        for name, param in model.named_parameters():
            param.grad = grads[name]
        opt.step()
        opt.zero_grad()
        params.append({n: p.detach().clone() for n, p in model.named_parameters()})
        losses.append(step_losses)
    return {"params": params, "losses": losses}


def _gather_to_root(obj: object, grid: ParallelDims) -> list | None:
    """Every rank's ``obj`` on rank 0 in rank order (harness traffic, not in the ledger)."""
    if grid.world_size == 1:
        return [obj]
    out = [None] * grid.world_size if grid.rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def _full_params(gathered: list[dict]) -> tuple[dict[str, torch.Tensor], float]:
    """Canonical full tensors from every rank's shards (DP replica 0's), and the largest difference
    between DP replicas of one shard (0.0: every replica holds the same parameters)."""
    by_coord = {(g["pp_rank"], g["dp_rank"], g["tp_rank"]): g for g in gathered}
    stages = sorted({g["pp_rank"] for g in gathered})
    tp = 1 + max(g["tp_rank"] for g in gathered)
    dp = 1 + max(g["dp_rank"] for g in gathered)
    full, replica_gap = {}, 0.0
    for s in stages:
        for name in by_coord[(s, 0, 0)]["params"]:
            shards = [by_coord[(s, 0, t)]["params"][name] for t in range(tp)]
            full[name] = assemble_tensor(name, shards, by_coord[(s, 0, 0)]["tp_dims"][name])
            for d, t in ((d, t) for d in range(1, dp) for t in range(tp)):
                gap = (by_coord[(s, d, t)]["params"][name] - shards[t]).abs().max().item()
                replica_gap = max(replica_gap, gap)
    return full, replica_gap


def _train_case(case: PipelineCase, grid: ParallelDims) -> dict | None:
    stage = GPTStage(CONFIG, grid.pp_rank, grid.pp, grid.tp_group)
    opt = stage_optimizer(stage, grid, case.optimizer, **case.hyperparameters())
    tp_dims = {n: getattr(p, "tp_partition_dim", None) for n, p in stage.named_parameters()}
    grid.ledger.clear()
    params, losses, replica_gaps = [], [], []
    for step in range(STEPS):
        grid.ledger.step = step
        tokens, targets = replica_batch(step, grid.dp_rank, grid.dp)
        loss = train_step(stage, grid, opt, tokens, targets, MICRO_BATCHES)
        payload = {
            "pp_rank": grid.pp_rank,
            "dp_rank": grid.dp_rank,
            "tp_rank": grid.tp_rank,
            "loss": None if loss is None else loss.item(),
            "params": {n: p.detach().clone() for n, p in stage.named_parameters()},
            "tp_dims": tp_dims,
        }
        gathered = _gather_to_root(payload, grid)
        if grid.rank == 0:
            full, gap = _full_params(gathered)
            params.append(full)
            replica_gaps.append(gap)
            losses.append([g["loss"] for g in gathered if g["loss"] is not None and g["tp_rank"] == 0])  # by DP replica
    ledger = grid.ledger.bytes_by_phase(step=STEPS - 1)
    specs = param_specs(stage.named_parameters(), grid.tp)
    analytic = optimizer_bytes(
        specs,
        dp=grid.dp,
        tp=grid.tp,
        dp_rank=grid.dp_rank,
        optimizer=case.optimizer,
        layout=case.layout,
        bucket_elems=case.hyperparameters()["bucket_elems"],
        gather_dtype=torch.float32,
    )
    rank_report = {
        "rank": grid.rank,
        "pp_rank": grid.pp_rank,
        "ledger_bytes": {p: ledger.get(p, 0) for p in OPTIMIZER_COMM_PHASES},
        "analytic_bytes": analytic,
        "dp_group": grid.dp_group.ranks,
        "param_names": sorted(tp_dims),
        "state_bytes": opt.state_bytes(),
    }
    ranks = _gather_to_root(rank_report, grid)
    if grid.rank != 0:
        return None
    return {"params": params, "losses": losses, "replica_gaps": replica_gaps, "ranks": ranks}


def train_cases(cases: list[PipelineCase]) -> list[dict | None]:
    """Every case of this world, in order; one grid (its process groups) per distinct (dp, tp, pp)."""
    results: list[dict | None] = []
    grid, sizes = None, None
    for case in cases:
        if sizes != (case.dp, case.tp, case.pp):
            if grid is not None:
                grid.close()
            grid, sizes = ParallelDims(case.dp, case.tp, case.pp), (case.dp, case.tp, case.pp)
        results.append(_train_case(case, grid))
    if grid is not None:
        grid.close()
    return results
