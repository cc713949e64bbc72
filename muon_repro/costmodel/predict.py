"""Predicted step time of a run on a machine, per rank and per phase, with the waits across ranks.

Each rank's program (:mod:`muon_repro.costmodel.workload`) is played in lock-step, one stage at a
time, on a clock per rank:

* a compute stage takes its FLOPs over the profile's rates, its element-wise bytes over the
  bandwidths, plus an operator-dispatch cost per call (added on a CPU, where ops run on the
  host; on a GPU the host launches ahead, so a stage takes the larger of the two). Ranks that
  share a node's cores (``compute_share``) share them as processor sharing: while k ranks compute
  at once on C cores' worth, each gets min(1, C/k), and a rank that finishes early (a smaller
  Newton-Schulz share) leaves its core to the others;
* a collective is synchronous: every rank of the group waits for the last to arrive (``wait``),
  then all take the alpha-beta time of its ring bytes (``transfer``). The largest Newton-Schulz
  share therefore sets the pace of the DP group at the next gather or the parameter all-gather.
  Where ranks share cores, they also arrive out of step with equal work (time slices): each call
  adds the profile's measured wait for its group size and the compute since the group last met
  (``arrival_jitter_curve_us``, else ``arrival_jitter_us``) to the wait;
  An asynchronous gather (overlap=pipelined) starts when the last rank issues it and only blocks
  the rank that waits for it before it is done.

The step's time is the slowest rank's (as the ``runs`` table counts it); optimizer and
communication times are means over ranks (:mod:`muon_repro.costmodel.prediction` holds what a prediction is).
"""

from __future__ import annotations

import math

from muon_repro.bench.configs import BenchConfig
from muon_repro.costmodel.calibration_range import logging_prices
from muon_repro.costmodel.machine_profile import MachineProfile
from muon_repro.costmodel.prediction import MODEL_COMM, OPTIMIZER_PARTS, PARTS, Prediction, RankPrediction
from muon_repro.costmodel.workload import Comm, Compute, Stage, Workload, build_workload
from muon_repro.formulas import ring_bytes
from muon_repro.phases import (
    BACKWARD,
    FORWARD,
)

_EPS = 1e-15
# processor_sharing's passes per job: one admits it, one may jump the clock to it, one ends it (the bound that
# keeps the loop from running forever)
SHARING_PASSES_PER_JOB = 3


def predict(cfg: BenchConfig, machine: MachineProfile, *, profiled: bool = True, model_dtype: str | None = None) -> Prediction:
    """The predicted step of ``cfg`` on ``machine`` (``profiled``: under the bench's profiler, as recorded runs are).

    ``model_dtype``: the training's precision (:func:`~muon_repro.costmodel.workload.build_workload`); default
    the run's own (``cfg.precision``: fp32, or bf16 autocast). ``bf16`` prices mixed-precision training as
    Megatron-Core runs it: matmuls at the bf16 rate, activations and parameters moved in bf16.
    A pipeline (``cfg.pp > 1``) is priced stage by stage (:func:`muon_repro.costmodel.pipeline.predict_pipeline`)."""
    if cfg.pp > 1:
        from muon_repro.costmodel.pipeline import predict_pipeline

        return predict_pipeline(cfg, machine, profiled=profiled, model_dtype=model_dtype)
    # the bench's own run (no model_dtype) keeps fp32 parameters under bf16 autocast, and gathers them in fp32
    workload = build_workload(cfg, machine.device, model_dtype or cfg.precision, param_dtype=None if model_dtype else "fp32")
    with logging_prices() as priced:
        ranks = simulate(workload, machine, profiled)
    notes = tuple(machine.unused_figures())
    return Prediction(cfg, machine.name, machine.device, profiled, ranks, workload, notes, priced.beyond())


# ---------------------------------------------------------------- the simulation


def simulate(workload: Workload, machine: MachineProfile, profiled: bool = True) -> tuple[RankPrediction, ...]:
    """Play every rank's program stage by stage on a clock per rank (see the module docstring). A pipeline stage's
    workload holds that stage's DP x TP ranks (``rank`` is then the rank within the stage)."""
    cfg = workload.cfg
    world = workload.world_size
    ranks = tuple(RankPrediction(r, *divmod(r, cfg.tp)) for r in range(world))
    clock = [0.0] * world
    done = [0.0] * world  # each rank's compute (alone) so far in the step
    met: dict[tuple[int, ...], tuple[float, ...]] = {}  # a group's members' `done` when it last met: how far apart they can drift
    pending: dict[tuple[str, tuple[int, ...]], tuple[float, float]] = {}  # async gathers: (last issue, end)
    for k in range(len(workload.programs[0])):
        stages = [workload.programs[r][k] for r in range(world)]
        before = list(clock)
        if stages[0].compute is not None:
            _compute_stage(stages, clock, done, ranks, machine, workload, profiled)
        else:
            _comm_stage(stages, clock, done, met, ranks, machine, workload, pending)
        for r, stage in enumerate(stages):
            elapsed = clock[r] - before[r]
            if not math.isfinite(elapsed) or elapsed < 0:  # refused, not summed: an infinite step ends no table well
                raise ValueError(
                    f"machine {machine.name!r} prices rank {r}'s {stage.phase} of {cfg.key} at {elapsed!r} s; a stage takes "
                    "a finite time >= 0: check the profile's figures against their ranges (docs/method.md#machine-profile-ranges)"
                )
            ranks[r].parts[stage.part] += elapsed * 1e3
            if stage.phase in ranks[r].phases:
                ranks[r].phases[stage.phase] += elapsed * 1e3
    for r in ranks:
        r.step_ms = clock[r.rank] * 1e3
    return ranks


def _compute_stage(
    stages: list[Stage],
    clock: list[float],
    done: list[float],
    ranks,
    machine: MachineProfile,
    workload: Workload,
    profiled: bool,
) -> None:
    world = workload.cfg.world_size  # every rank of the run, all pipeline stages
    local = _local_ranks(machine, world)
    cores = machine.compute_cores(local)
    works = [compute_seconds(s.compute, machine, workload.ns_dtype, profiled, workload.precision) for s in stages]
    for r, work in enumerate(works):
        done[r] += work
    for node in _nodes(machine, len(stages), workload.first_rank):
        starts = [clock[r] for r in node]
        # A pipeline stage's ranks share their node's cores with the other stages' ranks there, taken as all
        # computing at once (1F1B's steady state): this stage's ranks get their share of the node's cores.
        node_cores = cores if cores is None or world == len(stages) else cores * len(node) / local
        ends = (
            processor_sharing(starts, [works[r] for r in node], node_cores)
            if node_cores is not None
            else [s + works[r] for s, r in zip(starts, node)]
        )
        for r, end in zip(node, ends):
            ranks[r].compute_ms += (end - clock[r]) * 1e3
            clock[r] = end


def compute_seconds(work: Compute, machine: MachineProfile, ns_dtype: str, profiled: bool, model_dtype: str = "fp32") -> float:
    """Time of ``work`` on one rank alone with the rates of ``machine``; ranks sharing cores are slowed by the
    compute share (processor sharing), memory-bound kernels alike (docs/method.md#cost-model says why not more)."""
    compute, memory = kernel_seconds(work, machine, ns_dtype, model_dtype)
    kernels = compute + memory
    host = work.ops * machine.op_seconds(profiled)
    return kernels + host if machine.device == "cpu" else max(kernels, host)


def kernel_seconds(work: Compute, machine: MachineProfile, ns_dtype: str, model_dtype: str = "fp32") -> tuple[float, float]:
    """Seconds of ``work``'s compute-bound kernels (matmuls, attention, Newton-Schulz) and of its memory-bound ones."""
    compute, activation = 0.0, work.activation_elems
    if work.matmul_flops or work.attention_flops:  # the bench's model and its gradients are fp32 (model_dtype)
        compute += work.matmul_flops / machine.matmul_flops_per_s(model_dtype, activation)
        compute += work.attention_flops / machine.attention_flops_per_s(model_dtype, activation)
    if work.ns_flops:  # only asked for when there is Newton-Schulz work: an AdamW run needs no NS figure
        compute += work.ns_flops / machine.newton_schulz_flops_per_s(ns_dtype)
    # the training's precision picks which size curves apply (MachineProfile.curve_prices)
    memory = work.vector_bytes / machine.elementwise_bytes_per_s(activation, model_dtype)
    memory += work.cross_entropy_bytes / machine.cross_entropy_bytes_per_s(work.logits_elems, model_dtype)
    memory += work.gelu_bytes / machine.gelu_bytes_per_s(work.mlp_elems, model_dtype)
    return compute, memory


def processor_sharing(starts: list[float], works: list[float], cores: float) -> list[float]:
    """When jobs that start at ``starts`` and need ``works`` seconds of one core end, if they share
    ``cores`` cores equally (each job runs on at most one): ``k`` jobs at once each go at min(1, cores/k).

    Every pass of the loop admits a job or ends one (the one with least work left is ended outright, not
    left to rounding), so it runs at most :data:`SHARING_PASSES_PER_JOB` passes per job: a non-finite start
    or work (which would never end) is refused first, and a pass count over the bound is an error, not a hang."""
    for name, values in (("start", starts), ("work", works)):
        bad = next((v for v in values if not math.isfinite(v)), None)
        if bad is not None:
            raise ValueError(
                f"processor sharing: a job's {name} time is {bad!r} s; every time must be finite "
                "(a machine profile's figure outside its range prices work at infinity)"
            )
    if not math.isfinite(cores) or cores <= 0:
        raise ValueError(f"processor sharing: {cores!r} cores; the cores shared must be a finite number > 0")
    end = [s + w if w <= 0 else math.inf for s, w in zip(starts, works)]
    left = list(works)
    waiting = sorted((s, i) for i, (s, w) in enumerate(zip(starts, works)) if w > 0)
    active: list[int] = []
    t = waiting[0][0] if waiting else 0.0
    bound = SHARING_PASSES_PER_JOB * len(waiting) + 1
    for _ in range(bound):
        if not (waiting or active):
            return end
        while waiting and waiting[0][0] <= t + _EPS:
            active.append(waiting.pop(0)[1])
        if not active:
            t = waiting[0][0]
            continue
        rate = min(1.0, cores / len(active))
        first = min(active, key=lambda i: left[i])
        finish = left[first] / rate
        if waiting and waiting[0][0] - t < finish:  # the next job arrives first: run until it does, exactly
            for i in active:
                left[i] -= (waiting[0][0] - t) * rate
            t = waiting[0][0]
        else:
            for i in active:
                left[i] -= finish * rate
            left[first] = 0.0  # ended outright, whatever the rounding left of it
            t += finish
        for i in [i for i in active if left[i] <= _EPS * max(1.0, works[i])]:
            end[i] = t
            active.remove(i)
    raise RuntimeError(
        f"processor sharing of {len(works)} jobs on {cores} cores did not end within {bound} passes "
        f"(starts {starts}, works {works}); please report this with the profile and the run shape"
    )


def _comm_stage(
    stages: list[Stage],
    clock: list[float],
    done: list[float],
    met: dict,
    ranks,
    machine: MachineProfile,
    workload: Workload,
    pending: dict,
) -> None:
    cfg, first = workload.cfg, workload.first_rank
    comm = stages[0].comm
    drifting = machine.shares_cores(_local_ranks(machine, cfg.world_size))
    for group in _groups(comm.group, cfg):
        calls = _agreed_calls(stages, group)
        if not calls:
            continue
        if comm.mode == "finish":
            _finish(group, clock, ranks, pending.pop((comm.key, group)))
            continue
        # Ranks sharing cores arrive out of step even with equal work: the group waits for its last,
        # at every call that follows compute (back-to-back calls find the group in step).
        meetings = len(calls) if comm.interleaved else 1
        # The drift grows with the compute since this group last met: meeting other groups keeps a rank
        # in step with those, not with this group (at DP2·TP2 the TP all-reduces of forward and backward
        # leave the DP pairs drifting apart until the optimizer's first DP collective).
        jitter = 0.0
        if drifting:
            last = met.get(group, (0.0,) * len(group))
            drift_s = max(done[r] - at for r, at in zip(group, last))
            jitter = machine.arrival_jitter_s(len(group), drift_s / meetings) * meetings
            met[group] = tuple(done[r] for r in group)
        arrival = max(clock[r] for r in group) + jitter
        scope = _scope(machine, tuple(first + r for r in group))
        transfer = transfer_seconds(comm, calls, len(group), machine, scope, cfg.world_size)
        if comm.mode == "start":
            pending[(comm.key, group)] = (arrival, arrival + transfer)
            continue
        for r in group:
            ranks[r].wait_ms += (arrival - clock[r]) * 1e3
            ranks[r].transfer_ms += transfer * 1e3
            clock[r] = arrival + transfer


def _finish(group: tuple[int, ...], clock: list[float], ranks, started: tuple[float, float]) -> None:
    """Wait for an asynchronous gather: blocked from now until it ends; the part of that before the last rank issued
    it is wait, the rest transfer (as the analysis splits a measured wait)."""
    arrival, end = started
    for r in group:
        blocked = max(0.0, end - clock[r])
        wait = min(blocked, max(0.0, arrival - clock[r]))
        ranks[r].wait_ms += wait * 1e3
        ranks[r].transfer_ms += (blocked - wait) * 1e3
        clock[r] += blocked


def transfer_seconds(
    comm: Comm, calls: tuple[int, ...], group_size: int, machine: MachineProfile, scope: str, world_size: int
) -> float:
    """The calls' alpha-beta time, each priced by its ring bytes per rank."""
    fit = machine.collective(comm.op, group_size, scope, world_size)
    return sum(
        machine.collective_seconds(fit, ring_bytes(comm.op, elements, comm.element_size, group_size), scope) for elements in calls
    )


def _agreed_calls(stages: list[Stage], group: tuple[int, ...]) -> tuple[int, ...]:
    calls = {stages[r].comm.calls for r in group}
    if len(calls) != 1:  # the optimizers issue the same collectives on every rank of a group
        raise RuntimeError(f"ranks {group} disagree on {stages[group[0]].phase}: {sorted(calls)}")
    return calls.pop()


def _groups(kind: str, cfg: BenchConfig) -> list[tuple[int, ...]]:
    """The process groups of ``kind``: TP groups hold adjacent ranks (rank = dp_rank * tp + tp_rank)."""
    if kind == "tp":
        return [tuple(d * cfg.tp + t for t in range(cfg.tp)) for d in range(cfg.dp)]
    return [tuple(d * cfg.tp + t for d in range(cfg.dp)) for t in range(cfg.tp)]


def _nodes(machine: MachineProfile, world: int, first_rank: int = 0) -> list[list[int]]:
    """Ranks 0..world-1 (global ranks first_rank + r) by the node they run on."""
    per_node = machine.ranks_per_node or first_rank + world
    nodes: dict[int, list[int]] = {}
    for r in range(world):
        nodes.setdefault((first_rank + r) // per_node, []).append(r)
    return list(nodes.values())


def _local_ranks(machine: MachineProfile, world: int) -> int:
    return min(world, machine.ranks_per_node or world)


def _scope(machine: MachineProfile, group: tuple[int, ...]) -> str:
    per_node = machine.ranks_per_node
    return "intra_node" if per_node is None or len({r // per_node for r in group}) == 1 else "inter_node"


# ---------------------------------------------------------------- text


def format_prediction(p: Prediction) -> str:
    """The prediction as people read it: the totals, then one line per rank."""
    cfg = p.cfg
    lines = [
        f"{cfg.key}: {cfg.optimizer} dp={cfg.dp} tp={cfg.tp} layout={cfg.layout} overlap={cfg.overlap} "
        f"model={_model_label(p)} tokens/step={cfg.tokens_per_step} seq_len={cfg.seq_len}",
        f"machine {p.machine} ({p.device}{', under the profiler' if p.profiled else ''}); trained in {p.workload.precision}, "
        f"Newton-Schulz in {p.workload.ns_dtype}, cross-entropy {cfg.cross_entropy}",
        f"predicted step {p.step_ms:.1f} ms (slowest rank): forward {p.mean(FORWARD):.1f}, backward {p.mean(BACKWARD):.1f}, "
        f"optimizer {p.optimizer_ms:.1f} ms; communication {p.comm_ms:.1f} ms (transfer {p.mean('transfer_ms'):.1f}, "
        f"wait {p.mean('wait_ms'):.1f}); means over ranks",
        "",
    ]
    names = [*PARTS, *OPTIMIZER_PARTS, *MODEL_COMM]
    header = ["rank", "dp", "tp", "step", *names, "transfer", "wait"]
    rows = [
        [
            str(r.rank),
            str(r.dp_rank),
            str(r.tp_rank),
            f"{r.step_ms:.1f}",
            *(f"{r.parts[n]:.1f}" if n in r.parts else f"{r.phases[n]:.1f}" for n in names),
            f"{r.transfer_ms:.1f}",
            f"{r.wait_ms:.1f}",
        ]
        for r in p.ranks
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths)) + "   (ms)")
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    lines.append(f"inputs: train FLOPs/step {p.workload.train_flops:.3e}; Newton-Schulz FLOPs/rank {_range(p.workload.ns_flops)}")
    lines += [f"note: {note}" for note in p.notes]
    lines += [f"beyond the measurements: {note}" for note in p.beyond_calibration]
    return "\n".join(lines)


def _model_label(p: Prediction) -> str:
    m = p.workload.model
    return f"{p.cfg.preset}" + (
        f" (h{m.hidden} l{m.n_layers} a{m.n_heads} f{m.ffn_hidden} v{m.vocab_size})" if p.cfg.model_overrides() else ""
    )


def _range(values: tuple[int, ...]) -> str:
    low, high = min(values), max(values)
    return f"{low:.3e}" if low == high else f"{low:.3e} to {high:.3e}"
