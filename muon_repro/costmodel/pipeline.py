"""A pipeline's predicted step (``pp > 1``): each stage priced on its own, then the 1F1B schedule played over them.

1. **Stages.** Each stage is a DP x TP grid running its part of the model
   (:mod:`~muon_repro.costmodel.pipeline_workload`), simulated as any DP x TP run
   (:func:`~muon_repro.costmodel.predict.simulate`). From its slowest rank: the forward ``f_s`` and backward ``b_s``
   of one micro-batch (the stage's forward and backward over ``M`` micro-batches, divided by ``M``; TP collectives
   included) and its optimizer step ``o_s``.
2. **Transfers.** One micro-batch's activation ``[micro-batch sequences, seq, hidden]`` crosses each stage
   boundary forward, its gradient backward: ``c`` seconds each way, the profile's two-rank all-gather fit at those
   bytes (each rank sends them once), on the link the boundary's ranks share (across nodes when they sit on two).
3. **1F1B.** Every stage runs the runtime's order (:func:`muon_repro.formulas.one_f_one_b_order`): ``min(pp - s - 1, M)``
   forwards, then one forward and one backward in turn, then the remaining backwards. An operation starts when its
   stage is free and its input has arrived (receives block, sends do not)::

       end F(s, i) = max(free_s, end F(s-1, i) + c) + f_s      (stage 0: no receive)
       end B(s, i) = max(free_s, end B(s+1, i) + c) + b_s      (last stage: after its own F(pp-1, i))

   The pipeline time ``T`` is when the last operation ends. With equal stages and free transfers it is the
   closed form :func:`one_f_one_b_closed_form`, ``(M + pp - 1) (f + b)``; the playback adds what unequal stages
   and blocking transfers make of it.
4. **Step.** Steps back to back, as the runtime runs them (:func:`back_to_back`): each stage runs its optimizer step
   ``o_s`` as soon as its own last backward (and flush) ends, then the next step's first operation, without waiting
   for the other stages. The step is the period these steps settle into. Stage 0 ends the drain under 1F1B, so
   its ``o_0`` is paid whole; a later stage's hides in its idle time after its last backward, in ``o_0`` and in the
   next step's fill until its first forward arrives. ``T + o_0 <= step <= T + max_s o_s``; the step's **exposed
   optimizer** time is ``step - T``. Stage ``s``'s **bubble** is ``T - M (f_s + b_s)``, its time in the pipeline
   not spent computing.

On a CPU whose ranks share cores, every stage's ranks are priced as if every rank computed at once (the steady
state): the fill and drain, when fewer compute, run faster than that. Not modelled: interleaved (virtual)
stages, zero-bubble schedules, and an optimizer step that overlaps its own stage's flush
(docs/method.md#pipeline-parallelism).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from muon_repro.bench.configs import BenchConfig
from muon_repro.costmodel.calibration_range import logging_prices
from muon_repro.costmodel.machine_profile import MachineProfile
from muon_repro.costmodel.pipeline_workload import activation_bytes, build_stage_workload, merge_stage_workloads
from muon_repro.costmodel.predict import simulate
from muon_repro.costmodel.prediction import RankPrediction, StepPrediction
from muon_repro.costmodel.workload import Workload
from muon_repro.formulas import one_f_one_b_order
from muon_repro.model_config import stage_parts
from muon_repro.phases import BACKWARD, FORWARD, OPTIMIZER
from muon_repro.values import is_count


@dataclass(frozen=True)
class PipelineTimes:
    """The 1F1B playback: when the pipeline ends, and when each stage's last backward ends (same unit as its inputs)."""

    total: float
    stage_end: tuple[float, ...]


def _check_times(forward: Sequence[float], backward: Sequence[float], transfer: Sequence[float], micro_batches: int) -> int:
    pp = len(forward)
    if pp < 1 or len(backward) != pp or len(transfer) != pp - 1:
        raise ValueError(
            f"1F1B: give one forward and one backward time per stage and one transfer time per boundary (pp - 1), got "
            f"{len(forward)} forward, {len(backward)} backward and {len(transfer)} transfer times"
        )
    if not is_count(micro_batches):
        raise ValueError(f"1F1B: micro_batches must be an integer >= 1, got {micro_batches!r}; a pipeline needs a micro-batch")
    for name, values in (("forward", forward), ("backward", backward), ("transfer", transfer)):
        bad = next((v for v in values if not (math.isfinite(v) and v >= 0)), None)
        if bad is not None:
            raise ValueError(f"1F1B: a {name} time is {bad!r}; every time must be finite and >= 0")
    return pp


def one_f_one_b(
    forward: Sequence[float],
    backward: Sequence[float],
    transfer: Sequence[float],
    micro_batches: int,
    start: Sequence[float] | None = None,
) -> PipelineTimes:
    """Play the 1F1B schedule (the module docstring's recurrence): ``forward[s]``, ``backward[s]``: one micro-batch
    on stage ``s``; ``transfer[s]``: one activation (or gradient) across the boundary of stages ``s`` and ``s + 1``;
    ``start[s]``: when stage ``s`` is free to begin (default: every stage at 0). Times are on one clock."""
    pp = _check_times(forward, backward, transfer, micro_batches)
    if start is not None and (len(start) != pp or not all(math.isfinite(t) for t in start)):
        raise ValueError(f"1F1B: give one finite start time per stage ({pp}), got {list(start)!r}")
    orders = [one_f_one_b_order(s, pp, micro_batches) for s in range(pp)]
    end: dict[tuple[str, int, int], float] = {}
    free, nxt = [0.0] * pp if start is None else [float(t) for t in start], [0] * pp
    # every pass runs at least one operation (1F1B cannot deadlock: tests/test_pipeline_equivalence.py), so the
    # number of operations bounds the passes
    for _ in range(2 * micro_batches * pp + 1):
        moved = False
        for s in range(pp):
            while nxt[s] < len(orders[s]):
                kind, i = orders[s][nxt[s]]
                if kind == "F":
                    ready = 0.0 if s == 0 else _arrival(end, ("F", s - 1, i), transfer[s - 1])
                else:
                    ready = end.get(("F", s, i)) if s == pp - 1 else _arrival(end, ("B", s + 1, i), transfer[s])
                if ready is None:
                    break
                free[s] = end[(kind, s, i)] = max(free[s], ready) + (forward[s] if kind == "F" else backward[s])
                nxt[s] += 1
                moved = True
        if not moved:
            break
    if any(n < len(o) for n, o in zip(nxt, orders)):
        raise RuntimeError(f"1F1B playback stalled at {nxt} of {[len(o) for o in orders]} operations; please report this")
    return PipelineTimes(max(free), tuple(free))


def _arrival(end: dict, key: tuple[str, int, int], transfer: float) -> float | None:
    return end[key] + transfer if key in end else None


@dataclass(frozen=True)
class BackToBack:
    """Training steps back to back (:func:`back_to_back`), in the unit of its inputs."""

    pipeline: float  # T: one step's 1F1B schedule, every stage starting together
    step: float  # the period the steps settle into

    @property
    def exposed_optimizer(self) -> float:
        """The time a step pays for the optimizer steps beyond its pipeline: ``step - pipeline``."""
        return self.step - self.pipeline


def back_to_back(
    forward: Sequence[float],
    backward: Sequence[float],
    transfer: Sequence[float],
    optimizer: Sequence[float],
    micro_batches: int,
    *,
    steps: int | None = None,
) -> BackToBack:
    """Steps back to back as the runtime runs them: stage ``s`` runs its optimizer step ``optimizer[s]`` when its
    own part of the 1F1B schedule ends, then starts the next step (its first operation still waits for its input).

    A step depends only on when the stages start relative to each other, so once those offsets repeat from one step
    to the next the steps keep that period: it is returned then. Otherwise (offsets that alternate) the step is the
    mean period over the second half of ``steps`` played steps (default ``4 pp + 4``; tests/test_costmodel_pipeline.py
    checks both against 120 steps)."""
    pp = _check_times(forward, backward, transfer, micro_batches)
    if len(optimizer) != pp or not all(math.isfinite(o) and o >= 0 for o in optimizer):
        raise ValueError(f"1F1B: give one finite optimizer time >= 0 per stage ({pp}), got {list(optimizer)!r}")
    steps = 4 * pp + 4 if steps is None else steps
    if steps < 2:
        raise ValueError(f"back to back: play at least 2 steps to find a period, got {steps}")
    pipeline = one_f_one_b(forward, backward, transfer, micro_batches).total
    start, done, offsets = [0.0] * pp, [0.0], [0.0] * pp
    for _ in range(steps):
        ends = one_f_one_b(forward, backward, transfer, micro_batches, start=start).stage_end
        start = [e + o for e, o in zip(ends, optimizer)]
        done.append(start[0])  # stage 0's step ends: every stage shares the period
        settled = [t - start[0] for t in start]
        if all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9 * pipeline) for a, b in zip(settled, offsets)):
            return BackToBack(pipeline, done[-1] - done[-2])
        offsets = settled
    half = steps // 2
    return BackToBack(pipeline, (done[-1] - done[half]) / (steps - half))


def one_f_one_b_closed_form(
    forward: Sequence[float], backward: Sequence[float], transfer: Sequence[float], micro_batches: int
) -> float:
    """``(M + pp - 1) * max_s (f_s + b_s) + 2 * sum(transfers)``: every slot as long as the slowest stage's, and the
    first forward and the last backward crossing every boundary. Equal to :func:`one_f_one_b` for equal stages and
    free transfers, an upper bound for unequal stages with free transfers; with transfers, blocking receives also
    expose them in the steady state, which only the playback counts."""
    pp = _check_times(forward, backward, transfer, micro_batches)
    return (micro_batches + pp - 1) * max(f + b for f, b in zip(forward, backward)) + 2 * sum(transfer)


# ---------------------------------------------------------------- a run's prediction


@dataclass(frozen=True)
class StagePrediction:
    """One stage's share of a pipeline's step, in milliseconds (per micro-batch where said)."""

    stage: int
    blocks: range  # the global indices of its blocks
    embedding: bool
    head: bool
    forward_ms: float  # one micro-batch, slowest rank
    backward_ms: float  # one micro-batch, slowest rank
    compute_ms: float  # M * (forward + backward)
    bubble_ms: float  # pipeline time - compute_ms
    optimizer_ms: float  # the stage's optimizer step, slowest rank
    p2p_bytes: int  # bytes one rank of the stage sends per step: activations forward, gradients backward
    ranks: tuple[RankPrediction, ...]

    def to_row(self, pipeline_ms: float) -> dict:
        return {
            "stage": self.stage,
            "blocks": len(self.blocks),
            "first_block": self.blocks.start,
            "embedding": self.embedding,
            "head": self.head,
            "forward_ms": self.forward_ms,
            "backward_ms": self.backward_ms,
            "compute_ms": self.compute_ms,
            "bubble_ms": self.bubble_ms,
            "bubble_fraction": self.bubble_ms / pipeline_ms if pipeline_ms else 0.0,
            "optimizer_ms": self.optimizer_ms,
            "p2p_bytes": self.p2p_bytes,
        }


@dataclass(frozen=True)
class PipelinePrediction(StepPrediction):
    """A pipeline run's predicted step: the interface of :class:`~muon_repro.costmodel.predict.Prediction` (step,
    optimizer and communication times, ``mean``, ``to_dict``, ``workload``) and the stages'. ``step_ms`` is the
    period of back-to-back steps (every rank's), :attr:`optimizer_exposed_ms` what it pays beyond
    :attr:`pipeline_ms`. ``optimizer_ms`` is the mean over ranks, as measured runs count it. ``comm_ms`` counts the
    collectives; the point-to-point transfers are in :attr:`pipeline_ms`."""

    cfg: BenchConfig
    machine: str
    device: str
    profiled: bool
    stages: tuple[StagePrediction, ...]
    stage_workloads: tuple[Workload, ...]
    pipeline_ms: float
    transfer_ms: tuple[float, ...]  # one activation (or gradient) across each boundary
    activation_bytes: int  # one micro-batch's activation (and its gradient)
    notes: tuple[str, ...] = ()
    beyond_calibration: tuple[str, ...] = ()  # what was priced past the profile's measurements (calibration_range)

    @property
    def ranks(self) -> tuple[RankPrediction, ...]:
        """Every rank of every stage, in global rank order."""
        return tuple(r for s in self.stages for r in s.ranks)

    @property
    def stage_optimizer_max_ms(self) -> float:
        return max(s.optimizer_ms for s in self.stages)

    @property
    def optimizer_exposed_ms(self) -> float:
        """The optimizer time a step pays beyond its pipeline: from stage 0's ``o_0`` (its step follows the end of
        the drain) up to the slowest stage's optimizer step."""
        return self.step_ms - self.pipeline_ms

    @property
    def bubble_ms(self) -> float:
        """The mean over stages of each stage's bubble."""
        return statistics.fmean(s.bubble_ms for s in self.stages)

    @property
    def workload(self) -> Workload:
        """The stages' workloads as one: every rank's program, Newton-Schulz FLOPs and analytic bytes in global rank
        order, and the whole model's training FLOPs."""
        return merge_stage_workloads(list(self.stage_workloads))

    def stage_rows(self) -> list[dict]:
        """One dict per stage: stage, blocks, first_block, embedding, head, forward_ms and backward_ms (one
        micro-batch), compute_ms, bubble_ms, bubble_fraction, optimizer_ms, p2p_bytes."""
        return [s.to_row(self.pipeline_ms) for s in self.stages]

    def to_dict(self) -> dict:
        own = {
            "pipeline_ms": self.pipeline_ms,
            "optimizer_exposed_ms": self.optimizer_exposed_ms,
            "stage_optimizer_max_ms": self.stage_optimizer_max_ms,
        }
        transfers = {"p2p_transfer_ms": list(self.transfer_ms), "activation_bytes": self.activation_bytes}
        return self._as_dict(
            [{"stage": s.stage, **r.to_dict()} for s in self.stages for r in s.ranks],
            after_step=own | {"bubble_ms": self.bubble_ms},
            after_times=transfers | {"stages": self.stage_rows()},
        )


def predict_pipeline(
    cfg: BenchConfig, machine: MachineProfile, *, profiled: bool = True, model_dtype: str | None = None
) -> PipelinePrediction:
    """The predicted step of pipeline run ``cfg`` (``cfg.pp > 1``) on ``machine`` (see the module docstring)."""
    precision = model_dtype or cfg.precision
    model = cfg.model_config()
    parts = stage_parts(model.n_layers, cfg.pp)  # refuses n_layers < pp with the runtime's message
    micro = cfg.micro_batches
    size = activation_bytes(cfg, precision)
    per_stage = cfg.dp * cfg.tp
    workloads, timed = [], []
    with logging_prices() as priced:
        scopes = [boundary_scope(machine, s, per_stage) for s in range(cfg.pp - 1)]
        transfer_s = [p2p_seconds(machine, size, scope, cfg.world_size) for scope in scopes]
        for s in range(cfg.pp):
            workload = build_stage_workload(cfg, s, machine.device, precision)
            ranks = simulate(workload, machine, profiled)
            for r in ranks:  # the rank within the stage -> the global rank
                r.rank += workload.first_rank
            workloads.append(workload)
            timed.append(ranks)
    forward = [max(r.parts[FORWARD] for r in ranks) / micro for ranks in timed]
    backward = [max(r.parts[BACKWARD] for r in ranks) / micro for ranks in timed]
    optimizer = [max(r.parts[OPTIMIZER] for r in ranks) for ranks in timed]
    steps = back_to_back(forward, backward, [t * 1e3 for t in transfer_s], optimizer, micro)
    pipeline_ms = steps.pipeline
    blocks, start = [], 0
    for part in parts:
        blocks.append(range(start, start + part.layers))
        start += part.layers
    stages = []
    for s, (part, ranks) in enumerate(zip(parts, timed)):
        for r in ranks:  # back to back, every rank steps at the pipeline's period
            r.step_ms = steps.step
        compute = micro * (forward[s] + backward[s])
        sends = micro * size * ((s < cfg.pp - 1) + (s > 0))
        stages.append(
            StagePrediction(
                s,
                blocks[s],
                part.embedding,
                part.head,
                forward[s],
                backward[s],
                compute,
                pipeline_ms - compute,
                optimizer[s],
                sends,
                tuple(ranks),
            )
        )
    return PipelinePrediction(
        cfg,
        machine.name,
        machine.device,
        profiled,
        tuple(stages),
        tuple(workloads),
        pipeline_ms,
        tuple(t * 1e3 for t in transfer_s),
        size,
        tuple(machine.unused_figures()),
        priced.beyond(),
    )


def p2p_seconds(machine: MachineProfile, nbytes: int, scope: str, world_size: int) -> float:
    """One point-to-point transfer of ``nbytes``: the profile's two-rank all-gather at ``nbytes`` per rank (in which
    each rank sends its ``nbytes`` once, as a send does), on ``scope``'s link."""
    fit = machine.collective("all_gather", 2, scope, world_size)
    return machine.collective_seconds(fit, nbytes, scope)


def boundary_scope(machine: MachineProfile, stage: int, per_stage: int) -> str:
    """The link between stage ``stage`` and the next: a rank sends to the rank ``per_stage`` (dp * tp) above it,
    across nodes when any such pair sits on two."""
    per_node = machine.ranks_per_node
    first = stage * per_stage
    ranks = range(first, first + per_stage)
    crosses = per_node is not None and any(r // per_node != (r + per_stage) // per_node for r in ranks)
    return "inter_node" if crosses else "intra_node"


# ---------------------------------------------------------------- text


def format_pipeline(p: PipelinePrediction) -> str:
    """The prediction as people read it: the step and its parts, then one line per stage."""
    cfg = p.cfg
    lines = [
        f"{cfg.key}: {cfg.optimizer} dp={cfg.dp} tp={cfg.tp} pp={cfg.pp} layout={cfg.layout} overlap={cfg.overlap} "
        f"model={cfg.preset} tokens/step={cfg.tokens_per_step} seq_len={cfg.seq_len} micro-batches={cfg.micro_batches}",
        f"machine {p.machine} ({p.device}{', under the profiler' if p.profiled else ''}); trained in "
        f"{p.stage_workloads[0].precision}, Newton-Schulz in {p.stage_workloads[0].ns_dtype}; 1F1B",
        f"predicted step {p.step_ms:.1f} ms = pipeline {p.pipeline_ms:.1f} + optimizer not hidden by the drain "
        f"{p.optimizer_exposed_ms:.1f} (stages back to back; slowest stage's optimizer {p.stage_optimizer_max_ms:.1f}); "
        f"optimizer mean over ranks {p.optimizer_ms:.1f} ms; bubble mean over stages "
        f"{p.bubble_ms:.1f} ms; activation {p.activation_bytes:,} bytes per micro-batch, "
        f"{', '.join(f'{t:.3f}' for t in p.transfer_ms)} ms per transfer",
        "",
    ]
    header = ["stage", "blocks", "fwd/mb", "bwd/mb", "compute", "bubble", "optimizer", "p2p bytes"]
    rows = [
        [
            str(s.stage),
            f"{s.blocks.start}-{s.blocks.stop - 1}" + ("+emb" if s.embedding else "") + ("+head" if s.head else ""),
            f"{s.forward_ms:.2f}",
            f"{s.backward_ms:.2f}",
            f"{s.compute_ms:.1f}",
            f"{s.bubble_ms:.1f}",
            f"{s.optimizer_ms:.1f}",
            f"{s.p2p_bytes:,}",
        ]
        for s in p.stages
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths)) + "   (ms)")
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    lines += [f"note: {note}" for note in p.notes]
    lines += [f"beyond the measurements: {note}" for note in p.beyond_calibration]
    return "\n".join(lines)
