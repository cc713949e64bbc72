"""What one benchmark rank trains: its process grid, its model, its ZeRO-1 optimizer, and one training step.

Without pipeline stages (``pp == 1``) a rank holds its TP shard of the whole GPT on a
:class:`~muon_repro.parallel.ParallelDims` grid and runs forward and backward over its micro-batches in
turn (gradient accumulation). With ``pp > 1`` it holds one stage (:class:`GPTStage`) of the same grid
and runs the 1F1B schedule (:func:`run_pipeline`), whose flush ends before the optimizer step. Either way
one step is timed as three clock readings around device syncs:

    t0 ── forward+backward (with pp > 1: the whole pipeline and its flush) ── t1 ── optimizer ── t2

Only the last stage computes the loss; :meth:`Training.share_losses` copies it to the other stages
once training is over, outside every timed and profiled step.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.profiler import record_function

from muon_repro.bench.configs import BenchConfig
from muon_repro.model import GPT
from muon_repro.model_stages import GPTStage
from muon_repro.optim import DistributedAdamW, DistributedMuon, muon_param_groups
from muon_repro.optim.op_calls import OpCounter
from muon_repro.optim.zero1 import ZeroOneOptimizer
from muon_repro.parallel import ParallelDims
from muon_repro.parallel.pipeline_runner import BlockedClock, run_pipeline, split_micro_batches
from muon_repro.phases import BACKWARD, FORWARD, OPTIMIZER

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
StepTimes = tuple[int, int, int, torch.Tensor | None]  # t0, t1, t2 (perf_counter_ns) and the step's loss


def build_optimizer(cfg: BenchConfig, model: torch.nn.Module, dims: ParallelDims) -> ZeroOneOptimizer:
    """The ZeRO-1 optimizer ``cfg`` names, over ``model``'s parameters (a whole GPT or one stage) on ``dims``."""
    groups = muon_param_groups(model)
    common = dict(
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        layout=cfg.layout,
        bucket_elems=cfg.bucket_elems,
        reduce_dtype=DTYPES[cfg.reduce_dtype],
    )
    if cfg.optimizer == "adamw":
        return DistributedAdamW(groups, dims, **common)
    ns_dtype = DTYPES[cfg.ns_dtype] if cfg.ns_dtype else None
    return DistributedMuon(
        groups,
        dims,
        ns_dtype=ns_dtype,
        ns_method=cfg.ns_method,
        gather_dtype=DTYPES[cfg.gather_dtype],
        overlap=cfg.overlap,
        ns_unit_elems=cfg.ns_unit_elems,
        **common,
    )


@dataclass
class Training:
    """One rank's share of a run: grid, model (or stage), optimizer, and the step they take together."""

    cfg: BenchConfig
    dims: ParallelDims
    model: GPT | GPTStage
    opt: ZeroOneOptimizer
    device: torch.device
    blocked: BlockedClock = field(default_factory=BlockedClock)  # the last step's bubble on a pipeline stage
    _op_counter: OpCounter | None = field(default=None, repr=False)  # set for the one step optimizer_op_calls counts

    @classmethod
    def build(cls, cfg: BenchConfig, device: torch.device) -> Training:
        model_cfg = cfg.model_config()
        dims = ParallelDims(cfg.dp, cfg.tp, cfg.pp)
        if cfg.pp == 1:
            model: GPT | GPTStage = GPT(model_cfg, dims.tp_group, device=device, cross_entropy=cfg.cross_entropy)
        else:
            model = GPTStage(model_cfg, dims.pp_rank, cfg.pp, dims.tp_group, device=device, cross_entropy=cfg.cross_entropy)
        return cls(cfg, dims, model, build_optimizer(cfg, model, dims), device)

    @property
    def pp_rank(self) -> int | None:
        """This rank's pipeline stage; None without pipeline stages."""
        return self.dims.pp_rank if self.dims.pp > 1 else None

    @property
    def model_params(self) -> int:
        """Parameters of the whole model (every stage), whatever this rank holds."""
        return self.model.num_params(full=True) if isinstance(self.model, GPT) else self.cfg.model_config().num_params()

    @property
    def local_params(self) -> int:
        """Parameters this rank holds: its TP shard of the model, or of its stage."""
        if isinstance(self.model, GPT):
            return self.model.num_params(full=False)
        return sum(p.numel() for p in self.model.parameters())

    def step(self, tokens: torch.Tensor, targets: torch.Tensor) -> StepTimes:
        """One training step on this DP replica's batch; the loss is None on a stage without the head."""
        tokens, targets = tokens.to(self.device), targets.to(self.device)
        if isinstance(self.model, GPTStage):
            self.blocked.reset()
            return pipeline_step(
                self.model,
                self.dims,
                self.opt,
                tokens,
                targets,
                self.device,
                self.cfg.micro_batches,
                self.blocked,
                counter=self._op_counter,
            )
        return train_step(
            self.model,
            self.opt,
            tokens,
            targets,
            self.device,
            precision=self.cfg.precision,
            micro_batches=self.cfg.micro_batches,
            counter=self._op_counter,
        )

    def optimizer_op_calls(self, tokens: torch.Tensor, targets: torch.Tensor) -> int:
        """Train one more step and count the operator calls of its optimizer step on this rank (every ATen call,
        views, ``torch._foreach_*`` and collectives included, each once: the launches a GPU pays for whatever their
        size; :class:`~muon_repro.optim.op_calls.OpCounter`). Run after the recorded steps: the counter's own
        Python cost never lands in a timed or profiled step."""
        self._op_counter = OpCounter()
        try:
            self.step(tokens, targets)
            return self._op_counter.calls
        finally:
            self._op_counter = None

    @property
    def bubble_ms(self) -> float | None:
        """The last step's time blocked on pipeline neighbours (receives and flush); None without pipeline stages."""
        return self.blocked.blocked_ms if isinstance(self.model, GPTStage) else None

    @property
    def last_backward_ns(self) -> int | None:
        """When the last step's last backward ended (perf_counter_ns); None without pipeline stages."""
        return self.blocked.last_backward_ns if isinstance(self.model, GPTStage) else None

    def share_losses(self, losses: list[float]) -> list[float]:
        """Every step's loss as the last stage computed it, on every stage (``losses`` unchanged without PP)."""
        if self.dims.pp == 1:
            return losses
        pp_group = self.dims.pp_group
        received = [losses]
        dist.broadcast_object_list(received, src=pp_group.ranks[-1], group=pp_group.process_group)
        return received[0]

    def close(self) -> None:
        self.dims.close()


def train_step(
    model: torch.nn.Module,
    opt: ZeroOneOptimizer,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    device: torch.device,
    *,
    precision: str = "fp32",
    micro_batches: int = 1,
    counter: OpCounter | None = None,
) -> StepTimes:
    """One training step, its phases labelled for the profiler: (start, end of backward, end) in
    ``perf_counter_ns`` around device syncs, and the loss (the mean over the step's tokens).

    ``micro_batches`` > 1 accumulates gradients: forward and backward run on equal slices of the
    batch in turn (each its own ``forward``/``backward`` scope), every loss scaled by 1/micro_batches so
    the summed gradient is the whole batch's mean. ``precision`` "bf16" runs the forward under bf16
    autocast; the backward follows the forward's dtypes, as autocast intends. ``counter`` counts the optimizer
    step's operator calls."""
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    _sync(device)
    t0 = time.perf_counter_ns()
    losses = []
    # equal slices or a ValueError: chunk() would return fewer or unequal ones, which 1/micro_batches misweights
    slices = zip(split_micro_batches(tokens, micro_batches), split_micro_batches(targets, micro_batches))
    for tokens_micro, targets_micro in slices:
        with record_function(FORWARD), autocast:
            loss_micro = model(tokens_micro, targets_micro)
            if micro_batches > 1:  # one pass (every run without accumulation) keeps its ops as they were
                loss_micro = loss_micro / micro_batches
        with record_function(BACKWARD):
            loss_micro.backward()
        losses.append(loss_micro.detach())
    loss = losses[0] if micro_batches == 1 else torch.stack(losses).sum()
    _sync(device)
    t1 = time.perf_counter_ns()
    _optimizer_step(opt, counter)
    _sync(device)
    return t0, t1, time.perf_counter_ns(), loss


def pipeline_step(
    stage: GPTStage,
    grid: ParallelDims,
    opt: ZeroOneOptimizer,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    device: torch.device,
    micro_batches: int,
    blocked: BlockedClock | None = None,
    *,
    counter: OpCounter | None = None,
) -> StepTimes:
    """One training step of one pipeline stage, timed like :func:`train_step`: t1 falls after the flush.
    ``blocked`` adds the time the stage waits on its neighbours."""
    _sync(device)
    t0 = time.perf_counter_ns()
    loss = run_pipeline(stage, grid, tokens, targets, micro_batches, clock=blocked)
    _sync(device)
    t1 = time.perf_counter_ns()
    _optimizer_step(opt, counter)
    _sync(device)
    return t0, t1, time.perf_counter_ns(), loss


def _optimizer_step(opt: ZeroOneOptimizer, counter: OpCounter | None = None) -> None:
    with record_function(OPTIMIZER):
        with counter if counter is not None else nullcontext():
            opt.step()
        opt.zero_grad(set_to_none=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
