"""Run one stage's schedule (:mod:`muon_repro.parallel.schedule`) over the PP group: one training step's
forwards and backwards, micro-batch by micro-batch, with point-to-point transfers between neighbours.

Each step of the list does one thing:

=================  ===========================================================================
RecvActivation(m)  receive the activation from the previous stage, wait; keep it as a leaf that
                   requires grad (its ``.grad`` is what :class:`SendGrad` sends back)
Forward(m)         the stage's layers; on the last stage the loss of micro-batch ``m`` over ``M``
SendActivation(m)  send the output (detached) to the next stage; not waited for
RecvGrad(m)        receive the gradient of micro-batch ``m``'s output, wait
Backward(m)        backpropagate through the stage: parameter gradients accumulate in ``.grad``
SendGrad(m)        send the input activation's gradient to the previous stage; not waited for
=================  ===========================================================================

Every transfer is posted with ``batch_isend_irecv``. A send that the list follows with a receive from the
same neighbour (``SendActivation`` then ``RecvGrad``, ``SendGrad`` then ``RecvActivation``: 1F1B's steady
state) is posted in one batch with that receive (:func:`fused_sends`; Megatron's
``send_forward_recv_backward`` and ``send_backward_recv_forward``); the receive is still waited for in its own
step. Receives block and sends do not: a send's tensor is kept alive until the flush at the end of the step
waits for every send. This cannot deadlock under either backend's sends
(``tests/test_pipeline_equivalence.py`` simulates both for every stage's list):

* gloo: a send never holds its stage up (it is waited for only at the flush, after the stage's last receive),
  so each receive waits only for a send its neighbour issues earlier in its own list.
* NCCL: a send larger than NCCL's buffers completes only once the peer has posted the matching receive, and a
  rank's transfers run in issue order on one stream. Alone, stage ``s``'s send of activation ``m + 1`` would
  wait for stage ``s + 1``'s receive of it, which ``s + 1`` issues after its send of gradient ``m``, which waits
  for ``s``'s receive of it, issued after that first send: a circle. In one batch each stage posts the receive
  together with its send, so both sends find their receive.

The lone transfers go through ``batch_isend_irecv`` too, as batches of one: under NCCL's lazy initialization
torch carries batched transfers on the PP group's communicator but a lone ``isend``/``irecv`` on a two-rank one,
and a message must be sent and received on the same; and every stage's first transfer is then a batch, as the
call that creates the group's communicator requires. The same code runs on gloo (CPU tensors) and NCCL (CUDA
tensors): the receive buffers take the device of the stage's parameters.

The loss of every micro-batch is divided by ``M`` before its backward, so the gradients accumulated over
the ``M`` micro-batches are those of the mean loss over this DP replica's batch, the quantity the ZeRO-1
optimizers then average over the stage's DP group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.distributed as dist
from torch.profiler import record_function

from muon_repro.parallel.comm import Group
from muon_repro.parallel.mesh import ParallelDims
from muon_repro.parallel.schedule import (
    Backward,
    Forward,
    RecvActivation,
    RecvGrad,
    SendActivation,
    SendGrad,
    Step,
    one_f_one_b,
)
from muon_repro.phases import BACKWARD, FORWARD, PP_FLUSH, PP_RECV_ACTIVATION, PP_RECV_GRAD, PP_SEND_ACTIVATION, PP_SEND_GRAD
from muon_repro.values import is_count

# Profiler scope of each point-to-point step (muon_repro.phases names them for the analysis).
PP_PHASES = {
    RecvActivation: PP_RECV_ACTIVATION,
    SendActivation: PP_SEND_ACTIVATION,
    RecvGrad: PP_RECV_GRAD,
    SendGrad: PP_SEND_GRAD,
}
# A send and the receive from the same neighbour that may follow it in a stage's list: posted as one batch.
PAIRED_RECEIVE = {SendActivation: RecvGrad, SendGrad: RecvActivation}


def fused_sends(steps: Sequence[Step]) -> frozenset[int]:
    """The indices ``k`` of the sends that :func:`run_pipeline` posts in one batch with the receive ``steps[k + 1]``,
    which comes from the neighbour the send goes to."""
    return frozenset(k for k in range(len(steps) - 1) if PAIRED_RECEIVE.get(type(steps[k])) is type(steps[k + 1]))


def _post(ops: list[dist.P2POp]) -> list[dist.Work]:
    """Issue ``ops`` as one batch; one Work per op. Gloo returns one per op; NCCL coalesces the batch into one
    Work, which then stands for each of them."""
    works = dist.batch_isend_irecv(ops)
    if len(works) == len(ops):
        return works
    if len(works) == 1:
        return works * len(ops)
    raise RuntimeError(f"batch_isend_irecv returned {len(works)} works for {len(ops)} operations")


@dataclass
class _InFlight:
    """What one stage holds between the steps of a training step, by micro-batch."""

    inputs: dict[int, torch.Tensor] = field(default_factory=dict)  # tokens, or received activations
    outputs: dict[int, torch.Tensor] = field(default_factory=dict)  # activations to send, or scaled losses
    output_grads: dict[int, torch.Tensor] = field(default_factory=dict)
    sends: list[tuple[dist.Work, torch.Tensor]] = field(default_factory=list)  # the tensor lives until the wait
    # receives posted with the send before them, by their step, waited for in that step: the work and the buffer
    receives: dict[Step, tuple[dist.Work, torch.Tensor]] = field(default_factory=dict)
    loss: torch.Tensor | None = None  # last stage: the sum of the scaled micro-batch losses


@dataclass
class BlockedClock:
    """Host time a stage spends blocked on its neighbours, summed over a step: its receives and its flush (the
    bubble, with the transfers' own time). ``perf_counter_ns`` around the waits: on gloo the wait for the data;
    on NCCL the wait only orders the GPU stream, so the host reads little and the trace's kernels tell the time."""

    blocked_ns: int = 0
    # perf_counter_ns when the step's last backward ended: on one host, one clock for every rank, so the analysis
    # finds how long each stage idles after its last backward until its pipeline's drain ends
    last_backward_ns: int | None = None

    def reset(self) -> None:
        self.blocked_ns = 0
        self.last_backward_ns = None

    @property
    def blocked_ms(self) -> float:
        return self.blocked_ns / 1e6


def split_micro_batches(batch: torch.Tensor, micro_batches: int) -> list[torch.Tensor]:
    """``batch`` ``[B, ...]`` cut into ``micro_batches`` equal, consecutive micro-batches along dim 0."""
    if not is_count(micro_batches):
        raise ValueError(f"micro_batches must be a positive integer, got {micro_batches!r}")
    if batch.shape[0] % micro_batches != 0:
        raise ValueError(
            f"a batch of {batch.shape[0]} sequences does not split into {micro_batches} equal micro-batches; "
            "make the per-replica batch a multiple of micro_batches"
        )
    return list(batch.chunk(micro_batches, dim=0))


class PipelineStage(Protocol):
    """What the runner needs of a stage (:class:`muon_repro.model_stages.GPTStage` is one): where it sits, its TP
    group, its parameters, the shape of the activation it passes on, and its forward, which on the last stage
    takes the targets and returns the loss."""

    stage: int
    pp: int
    tp_group: Group

    @property
    def is_first(self) -> bool: ...

    @property
    def is_last(self) -> bool: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def activation_shape(self, batch: int, seq: int) -> tuple[int, ...]: ...

    def __call__(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor: ...


def check_stage_on_grid(stage: PipelineStage, grid: ParallelDims) -> None:
    """``ValueError`` unless ``stage`` is the stage this rank holds on ``grid``, sharded over the grid's TP group."""
    if (stage.stage, stage.pp) != (grid.pp_rank, grid.pp):
        raise ValueError(f"this rank is stage {grid.pp_rank} of {grid.pp}, but the model is stage {stage.stage} of {stage.pp}")
    if stage.tp_group.ranks != grid.tp_group.ranks:
        raise ValueError(
            f"the stage is sharded over TP ranks {stage.tp_group.ranks}, the grid's TP group is {grid.tp_group.ranks}"
        )


def run_pipeline(
    stage: PipelineStage,
    grid: ParallelDims,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    micro_batches: int,
    steps: list[Step] | None = None,
    clock: BlockedClock | None = None,
) -> torch.Tensor | None:
    """Forward and backward this replica's batch through this stage; the mean loss on the last stage, else None.

    ``tokens`` and ``targets`` (``[batch, seq]``) are this DP replica's; every stage of a PP group is given
    the same ones (the first uses the tokens, the last the targets, the others their shape). Gradients
    accumulate into the parameters' ``.grad``: zero them between training steps. ``steps`` defaults to
    this stage's 1F1B list. ``clock``, if given, adds the time this stage blocks in its receives and flush.
    """
    clock = clock if clock is not None else BlockedClock()
    check_stage_on_grid(stage, grid)
    token_mbs, target_mbs = split_micro_batches(tokens, micro_batches), split_micro_batches(targets, micro_batches)
    steps = one_f_one_b(grid.pp_rank, grid.pp, micro_batches) if steps is None else steps
    device = next(stage.parameters()).device
    shape = stage.activation_shape(*token_mbs[0].shape)
    group = grid.pp_group.process_group
    fused = fused_sends(steps)
    held = _InFlight()

    def peer(step: Step) -> int | None:
        """The global rank ``step`` sends to or receives from (None past either end of the pipeline)."""
        return grid.next_rank if isinstance(step, (SendActivation, RecvGrad)) else grid.prev_rank

    def receive_op(step: Step) -> tuple[dist.P2POp, torch.Tensor]:
        """A receive for ``step`` and the fresh buffer it fills."""
        buffer = torch.empty(shape, dtype=torch.float32, device=device)
        return dist.P2POp(dist.irecv, buffer, peer(step), group), buffer

    for k, step in enumerate(steps):
        mb = step.micro_batch
        if isinstance(step, Forward):
            with record_function(FORWARD):
                x = token_mbs[mb] if stage.is_first else held.inputs[mb]
                if stage.is_last:
                    out = stage(x, target_mbs[mb]) / micro_batches
                    held.loss = out.detach() if held.loss is None else held.loss + out.detach()
                else:
                    out = stage(x)
                held.outputs[mb] = out
        elif isinstance(step, Backward):
            with record_function(BACKWARD):
                out = held.outputs.pop(mb)
                torch.autograd.backward(out, grad_tensors=None if stage.is_last else held.output_grads.pop(mb))
            clock.last_backward_ns = time.perf_counter_ns()
        elif isinstance(step, (RecvActivation, RecvGrad)):
            with record_function(PP_PHASES[type(step)]):
                if step in held.receives:  # posted with the send before it
                    work, buffer = held.receives.pop(step)
                else:
                    op, buffer = receive_op(step)
                    (work,) = _post([op])
                start_ns = time.perf_counter_ns()
                work.wait()
                clock.blocked_ns += time.perf_counter_ns() - start_ns
            if isinstance(step, RecvActivation):
                held.inputs[mb] = buffer.requires_grad_(True)
            else:
                held.output_grads[mb] = buffer
        elif isinstance(step, (SendActivation, SendGrad)):
            with record_function(PP_PHASES[type(step)]):
                if isinstance(step, SendActivation):
                    tensor = held.outputs[mb].detach().contiguous()
                else:
                    tensor = held.inputs.pop(mb).grad.contiguous()
                send = dist.P2POp(dist.isend, tensor, peer(step), group)
                if k in fused:  # the next step receives from the same neighbour: post both at once (module docstring)
                    receive, buffer = receive_op(steps[k + 1])
                    send_work, receive_work = _post([send, receive])
                    held.receives[steps[k + 1]] = (receive_work, buffer)
                else:
                    (send_work,) = _post([send])
                held.sends.append((send_work, tensor))
        else:
            raise ValueError(f"unknown pipeline step {step!r}")
    with record_function(PP_FLUSH):  # every send delivered before the optimizer step
        start_ns = time.perf_counter_ns()
        for work, _tensor in held.sends:
            work.wait()
        clock.blocked_ns += time.perf_counter_ns() - start_ns
    if held.outputs or held.output_grads:
        raise ValueError(f"the schedule left micro-batches {sorted(held.outputs)} forwarded but not backwarded")
    return held.loss


def train_step(
    stage: PipelineStage,
    grid: ParallelDims,
    optimizer: torch.optim.Optimizer,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    micro_batches: int,
) -> torch.Tensor | None:
    """One training step: the pipeline's forwards and backwards, the flush, this stage's optimizer step."""
    loss = run_pipeline(stage, grid, tokens, targets, micro_batches)
    optimizer.step()
    optimizer.zero_grad()
    return loss
