"""The 1F1B pipeline schedule (PipeDream-Flush, Megatron's non-interleaved schedule), as plain lists of steps.

Each stage runs its own list of steps over one training step's ``M`` micro-batches; the lists are data,
built here from the order :func:`muon_repro.formulas.one_f_one_b_order` states (the one the cost model plays back),
printed by ``python -m muon_repro.parallel.schedule --pp 4 --micro-batches 8``, and executed by
:mod:`muon_repro.parallel.pipeline_runner`. Stage ``s`` of ``pp``:

* **warm-up**: ``w = min(pp - s - 1, M)`` forwards, so that the stage has work when the first gradient
  comes back from the last stage;
* **steady 1F1B**: ``M - w`` rounds of one forward (micro-batch ``w + i``) then one backward
  (micro-batch ``i``);
* **cool-down**: the ``w`` backwards left.

A forward on any stage but the first is preceded by :class:`RecvActivation`, and on any stage but the
last followed by :class:`SendActivation`; a backward on any stage but the last is preceded by
:class:`RecvGrad`, and on any stage but the first followed by :class:`SendGrad`. Every stage forwards
and backwards micro-batches in order ``0 .. M-1``, so the sends of one stage and the receives of its
neighbour come in the same order (point-to-point messages between two ranks match in order), and the
gradients accumulate in the same order on every grid. At most ``min(pp - s, M)`` micro-batches are in
flight on stage ``s`` (forwarded, not yet backwarded): the activation memory 1F1B bounds, against ``M``
for GPipe's all-forwards-then-all-backwards.

The optimizer step comes after the last backward of every stage: the pipeline flush. Its idle time
(the bubble) is ``(pp - 1)`` forward+backward slots per stage in the ideal, balanced pipeline.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from muon_repro.formulas import check_stage, one_f_one_b_order, warmup_forwards


@dataclass(frozen=True)
class Step:
    """One step of a stage's schedule, on micro-batch ``micro_batch``."""

    micro_batch: int

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.micro_batch})"


class RecvActivation(Step):
    """Receive this micro-batch's input activation from the previous stage."""


class Forward(Step):
    """Run this stage's layers on the micro-batch (the last stage: to the loss)."""


class SendActivation(Step):
    """Send this micro-batch's output activation to the next stage."""


class RecvGrad(Step):
    """Receive the gradient of this micro-batch's output activation from the next stage."""


class Backward(Step):
    """Backpropagate the micro-batch through this stage, accumulating parameter gradients."""


class SendGrad(Step):
    """Send the gradient of this micro-batch's input activation to the previous stage."""


SENDS = {SendActivation: RecvActivation, SendGrad: RecvGrad}  # each send and the receive it meets on the neighbour
COMPUTE = (Forward, Backward)


def one_f_one_b(stage: int, pp: int, micro_batches: int) -> list[Step]:
    """Stage ``stage``'s steps for one training step of ``micro_batches`` micro-batches: the 1F1B order's forwards and
    backwards, each with its receive and send."""
    order = one_f_one_b_order(stage, pp, micro_batches)
    first, last = stage == 0, stage == pp - 1

    def forward(mb: int) -> list[Step]:
        return [*([] if first else [RecvActivation(mb)]), Forward(mb), *([] if last else [SendActivation(mb)])]

    def backward(mb: int) -> list[Step]:
        return [*([] if last else [RecvGrad(mb)]), Backward(mb), *([] if first else [SendGrad(mb)])]

    steps: list[Step] = []
    for kind, mb in order:
        steps += forward(mb) if kind == "F" else backward(mb)
    return steps


def pipeline_schedule(pp: int, micro_batches: int) -> list[list[Step]]:
    """Every stage's steps, first stage first."""
    check_stage(0, pp, micro_batches)
    return [one_f_one_b(s, pp, micro_batches) for s in range(pp)]


def in_flight(steps: list[Step]) -> int:
    """The most micro-batches forwarded and not yet backwarded at any point of ``steps``."""
    live = peak = 0
    for step in steps:
        if isinstance(step, Forward):
            live += 1
            peak = max(peak, live)
        elif isinstance(step, Backward):
            live -= 1
    return peak


def compute_order(steps: list[Step]) -> str:
    """The forwards and backwards alone, compactly: ``F0 F1 B0 F2 B1 B2``."""
    return " ".join(f"{type(s).__name__[0]}{s.micro_batch}" for s in steps if isinstance(s, COMPUTE))


def _ops(steps: list[Step]) -> list[list[Step]]:
    """``steps`` cut into one micro-batch's forward or backward each, with its receive and send."""
    sends = tuple(SENDS)
    ops: list[list[Step]] = []
    current: list[Step] = []
    for k, step in enumerate(steps):
        current.append(step)
        following = steps[k + 1] if k + 1 < len(steps) else None
        if isinstance(step, sends) or (isinstance(step, COMPUTE) and not isinstance(following, sends)):
            ops.append(current)
            current = []
    return ops


def format_schedule(pp: int, micro_batches: int) -> str:
    """The schedule as a reader checks it: per stage its phases, then every step, one micro-batch's op a line."""
    lines = [
        f"1F1B schedule: pp={pp} stages, {micro_batches} micro-batches (stage 0 holds the embedding, stage {pp - 1} the head)"
    ]
    for s, steps in enumerate(pipeline_schedule(pp, micro_batches)):
        warmup = warmup_forwards(s, pp, micro_batches)
        lines.append("")
        lines.append(
            f"stage {s}: warm-up {warmup} forwards, steady {micro_batches - warmup} x (1F 1B), cool-down {warmup} backwards; "
            f"at most {in_flight(steps)} in flight"
        )
        lines.append(f"  order: {compute_order(steps)}")
        lines += ["    " + " ".join(map(str, op)) for op in _ops(steps)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m muon_repro.parallel.schedule", description="Print the 1F1B schedule.")
    parser.add_argument("--pp", type=int, default=4, help="pipeline stages (default 4)")
    parser.add_argument("--micro-batches", type=int, default=8, help="micro-batches per training step (default 8)")
    args = parser.parse_args(argv)
    try:
        print(format_schedule(args.pp, args.micro_batches))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
