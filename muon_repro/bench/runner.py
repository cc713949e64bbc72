"""One benchmark run on one rank: train, profile, and write this rank's trace and metrics.

Runs inside a worker whose ``torch.distributed`` world is already initialized (by our launcher
or by ``torchrun``). Writes into ``run_dir`` (a temporary directory the sweep renames into
place once every rank is done):

    rank<r>.json.gz    PyTorch profiler Chrome trace (Kineto), openable in ui.perfetto.dev (none when the
                       config says profile=false: the steps are only timed)
    metrics.json       rank 0 only: every rank's :class:`~muon_repro.run_records.RankMetrics`
    config.json        rank 0 only: the resolved config, command line, seed
    environment.json   rank 0 only: software, hardware, git SHA (see environment.py), and the speed probe
                       every rank took together before the first step (muon_repro.bench.speed_probe)

A run first trains ``timed_warmup + timed_steps`` steps with no profiler object at all,
timed with ``time.perf_counter_ns()`` (whole step, forward+backward, optimizer step; device synced
around each) and every collective's entry and exit (:class:`~muon_repro.parallel.comm.CommTimer`),
then goes on training the same model under the profiler: the profiled steps take the batches that
follow (no batch is trained twice), so the timed steps measure the same work without the profiler's
cost. The byte ledger is emptied between the two, so it covers the profiled steps as before. A trial
of an untraced round (``cfg.timed_only``: config ``profile`` false, with timed steps) stops after its
timed steps: no profiler, no trace, no profiled steps.

The format is :mod:`muon_repro.rundir`'s. Besides what it measures, each rank records what only
the run knows: the analytic bytes of its optimizer phases, its Newton-Schulz FLOPs and its share
of the ZeRO-1 shard plan, so the analysis never has to rebuild the model.
"""

from __future__ import annotations

import contextlib
import gzip
import resource
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from muon_repro.bench.configs import BenchConfig
from muon_repro.bench.data import PermutationStream
from muon_repro.bench.environment import capture_environment
from muon_repro.bench.loopback import LoopbackMeter, all_ranks_local, loopback_tx_bytes
from muon_repro.bench.speed_probe import SpeedProbe, measure_speed
from muon_repro.bench.training import DTYPES, Training
from muon_repro.model import GPTConfig
from muon_repro.optim import DistributedMuon
from muon_repro.optim.comm_model import optimizer_bytes
from muon_repro.optim.held_memory import held_memory
from muon_repro.optim.zero1 import ZeroOneOptimizer
from muon_repro.parallel import ParallelDims
from muon_repro.run_records import RankMetrics, ShardSummary
from muon_repro.rundir import RunDir, trace_name
from muon_repro.tables.files import write_atomic


def _peak_memory_bytes(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process_max_rss"


def analytic_bytes(cfg: BenchConfig, opt: ZeroOneOptimizer, dims: ParallelDims) -> dict[str, int]:
    """Bytes this rank sends per step in each optimizer phase, by the analytic ring model, and with pipeline
    stages its point-to-point sends: one activation per micro-batch forward, one gradient back."""
    return optimizer_bytes(
        opt.plan.specs,
        dp=cfg.dp,
        tp=cfg.tp,
        dp_rank=dims.dp_rank,
        optimizer=cfg.optimizer,
        layout=cfg.layout,
        bucket_elems=cfg.bucket_elems,
        reduce_dtype=DTYPES[cfg.reduce_dtype],
        gather_dtype=DTYPES[cfg.gather_dtype],
        ns_unit_elems=cfg.ns_unit_elems,
    ) | cfg.pipeline_send_bytes(dims.pp_rank)


def shard_summary(opt: ZeroOneOptimizer, dp_rank: int) -> ShardSummary:
    plan = opt.plan
    ns_slots = {i for unit in plan.ns_units for i in plan.ns_slots(unit, dp_rank)} if isinstance(opt, DistributedMuon) else set()
    gathered = (
        {i for unit in plan.ns_units if unit.dp_gathered for i in unit.slots} if isinstance(opt, DistributedMuon) else set()
    )
    return ShardSummary(
        layout=plan.layout,
        buckets=len(plan.buckets),
        shard_elems=sum(b.shard_size for b in plan.buckets),
        muon_matrices=len(plan.muon_slots()) if isinstance(opt, DistributedMuon) else 0,
        ns_matrices=len(ns_slots),
        dp_gathered_matrices=len(gathered),
        muon_elems=opt.shard_elems_by_rule()["muon"],
    )


def run_rank(
    cfg: BenchConfig,
    run_dir: str,
    backend: str,
    command: list[str],
    progress: bool = True,
    *,
    trial: int = 0,
    trials: int = 1,
    profile: str | None = None,
    round_order: int | None = None,
    sweep: str | None = None,
) -> RankMetrics:
    """Train ``cfg.timed_total`` steps timed without the profiler, then ``cfg.profiled_steps`` under it
    (none for a trial of an untraced round); return this rank's metrics. ``round_order``: the recording's
    place in its round of the sweep; ``sweep``: the sweep's id.

    Trials of a configuration train the same model on the same data from the same seed: they
    differ only in when they ran, which is what their spread measures."""
    run_dir_path = Path(run_dir)
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world != cfg.world_size:
        raise ValueError(
            f"config {cfg.key} needs dp*tp*pp = {cfg.dp}*{cfg.tp}*{cfg.pp} = {cfg.world_size} ranks, the world has {world}"
        )
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    # How fast the machine runs right now (about a second, every rank at once): the run's own calibration
    probe = measure_speed(device.type)
    if device.type == "cuda":  # one launch records a sweep's runs in turn: each run's peak is its own, not the probe's
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(cfg.seed)
    model_cfg: GPTConfig = cfg.model_config()  # the preset with the shape overrides of a custom run
    training = Training.build(cfg, device)
    dims, opt = training.dims, training.opt
    data = PermutationStream(model_cfg.vocab_size, cfg.seed)

    bar = _progress(cfg, dims.rank == 0 and progress)
    timed = _timed_steps(cfg, training, data, bar)
    recorded = _profiled_steps(cfg, training, data, run_dir_path / trace_name(dims.rank), bar, backend, world)
    if bar is not None:
        bar.close()

    peak, peak_source = _peak_memory_bytes(device)
    held = held_memory(opt)
    metrics = RankMetrics(
        rank=dims.rank,
        dp_rank=dims.dp_rank,
        tp_rank=dims.tp_rank,
        pp_rank=training.pp_rank,
        step_ms=recorded.step_ms,
        optimizer_ms=recorded.optimizer_ms,
        bubble_ms=recorded.bubble_ms if training.pp_rank is not None else [],
        loss=recorded.losses,
        ledger=dims.ledger.as_dicts(),
        state_bytes=opt.state_bytes(),
        transient_bytes=opt.stats.transient_bytes,
        held_state_bytes=held.state_bytes,
        held_buffer_bytes=held.buffer_bytes,
        peak_memory_bytes=peak,
        peak_memory_source=peak_source,
        update_rms={name: float(v) for name, v in opt.stats.update_rms.items()},
        ns_calls=opt.stats.ns_calls,
        ns_flops=opt.stats.ns_flops,
        model_params=training.model_params,
        local_params=training.local_params,
        analytic_bytes=analytic_bytes(cfg, opt, dims),
        shard=shard_summary(opt, dims.dp_rank),
        train_flops=model_cfg.flops_per_token(cfg.seq_len) * cfg.tokens_per_step,
        loopback_bytes=recorded.loopback_bytes,
        loopback_steps=cfg.active if recorded.loopback_bytes is not None else None,
        **timed,
    )
    # One more step, its optimizer step's operator calls counted, after everything above was measured
    after = cfg.timed_total + cfg.profiled_steps  # the batch after the timed and the profiled steps' batches
    tokens, targets = data.local_batch(after, cfg.batch_per_dp, cfg.seq_len, cfg.dp, dims.dp_rank)
    metrics = replace(metrics, optimizer_op_calls=training.optimizer_op_calls(tokens, targets))
    ranks: list[RankMetrics] | None = [None] * world if dims.rank == 0 else None  # type: ignore[list-item]
    if world > 1:
        dist.gather_object(metrics, ranks, dst=0)
    else:
        ranks = [metrics]
    if dims.rank == 0:
        _write_run(
            run_dir_path,
            cfg,
            backend,
            device,
            profile,
            probe,
            ranks,
            trial=trial,
            trials=trials,
            round_order=round_order,
            sweep=sweep,
            command=command,
        )
    training.close()  # the next recording of the sweep builds its own groups
    return metrics


@dataclass
class ProfiledSteps:
    """What each step under the profiler measured on this rank, and the loopback bytes of the recorded ones."""

    step_ms: list[float]
    optimizer_ms: list[float]
    bubble_ms: list[float]
    losses: list[float]
    loopback_bytes: int | None


def _profiled_steps(
    cfg: BenchConfig, training: Training, data: PermutationStream, trace_path: Path, bar, backend: str, world: int
) -> ProfiledSteps:
    """``cfg.profiled_steps`` steps under the profiler, on the batches after the timed steps', the trace written to
    ``trace_path``; the losses are the last pipeline stage's, on every stage.

    A ``ProfilerStep`` window holds the training step the timed steps time and nothing else of this loop: the
    batches are built before the profiler starts (a Python loop, 1,179 operators and 2 to 5 ms a step at the cpu
    scale, that the profiled step would pay and the timed one not) and the losses read after it stops."""
    dims = training.dims
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if training.device.type == "cuda" else [])
    step_ms, optimizer_ms, bubble_ms, loss_tensors = [], [], [], []
    first_batch = cfg.timed_total  # the profiled steps train the batches after the timed steps'
    batches = [
        data.local_batch(first_batch + step, cfg.batch_per_dp, cfg.seq_len, cfg.dp, dims.dp_rank)
        for step in range(cfg.profiled_steps)
    ]
    # gloo, one machine: rank 0 reads the bytes every rank sent through loopback over the recorded steps
    # (docs/method.md#communication-model); the meter's barriers run outside every recorded step.
    measure_loopback = backend == "gloo" and world > 1 and all_ranks_local(world) and cfg.profiled_steps > 0
    read = loopback_tx_bytes if dims.rank == 0 else lambda: None
    loopback_meter = LoopbackMeter(sync=dist.barrier, read=read) if measure_loopback else None
    first_recorded = cfg.wait + cfg.warmup
    if loopback_meter is not None and first_recorded == 0:
        loopback_meter.start()
    with _profiler(cfg, activities, trace_path) as prof:
        for step, (tokens, targets) in enumerate(batches):
            dims.ledger.step = step
            t0, t1, t2, loss = training.step(tokens, targets)
            step_ms.append((t2 - t0) / 1e6)
            optimizer_ms.append((t2 - t1) / 1e6)
            bubble_ms.append(training.bubble_ms)
            loss_tensors.append(loss)
            if loopback_meter is not None and step + 1 == first_recorded:
                loopback_meter.start()  # before prof.step() opens the first recorded step
            prof.step()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(step_ms=f"{step_ms[-1]:.0f}")
    loopback_bytes = loopback_meter.stop() if loopback_meter is not None else None
    losses = training.share_losses([_loss_value(loss) for loss in loss_tensors])  # outside every recorded step
    return ProfiledSteps(step_ms, optimizer_ms, bubble_ms, losses, loopback_bytes)


def _write_run(
    run_dir: Path,
    cfg: BenchConfig,
    backend: str,
    device: torch.device,
    profile: str | None,
    probe: SpeedProbe,
    ranks: list[RankMetrics],
    *,
    trial: int,
    trials: int,
    round_order: int | None,
    sweep: str | None,
    command: list[str],
) -> None:
    """Rank 0 writes the run folder: the config (with the trial, its place in the sweep and the command), the
    environment with the speed probe, every rank's metrics, and the log of its steps."""
    metrics = ranks[0]
    log = [
        f"{cfg.key} trial {trial}: {cfg.optimizer} dp={cfg.dp} tp={cfg.tp} pp={cfg.pp} layout={cfg.layout} "
        f"overlap={cfg.overlap} preset={cfg.preset} "
        f"tokens/step={cfg.tokens_per_step} backend={backend}"
    ]
    log += [
        f"timed step {i}: step {s:.1f} ms  forward+backward {f:.1f} ms  optimizer {o:.1f} ms (no profiler)"
        for i, (s, f, o) in enumerate(zip(metrics.timed_step_ms, metrics.timed_fwd_bwd_ms, metrics.timed_optimizer_ms))
    ]
    log += [
        f"step {i}: loss {loss:.5f}  step {s:.1f} ms  optimizer {o:.1f} ms"
        for i, (loss, s, o) in enumerate(zip(metrics.loss, metrics.step_ms, metrics.optimizer_ms))
    ]
    config = {
        **cfg.to_dict(),
        "trial": trial,
        "trials": trials,
        **({"round_order": round_order} if round_order is not None else {}),
        **({"sweep": sweep} if sweep is not None else {}),
        "backend": backend,
        "device": device.type,
        "command": command,
    }
    environment = {**capture_environment(backend, profile), "speed_probe": probe.to_dict()}
    RunDir(run_dir).write(config, environment, ranks, "\n".join(log) + "\n")


TRACE_GZIP_LEVEL = 6
"""gzip's own default. torch's ``.gz`` export uses level 9 line by line: on this 2-core machine
that took 4-5 s per rank and recording against 0.8 s here, for files 12% smaller."""


def export_trace(prof: profile, path: Path) -> None:
    """Write the profiler's Chrome trace to ``path`` (``.json.gz``): plain JSON first, then gzip."""
    plain = path.with_name(path.name.removesuffix(".gz") + ".tmp")

    def pack(packed: Path) -> None:
        with plain.open("rb") as src, gzip.open(packed, "wb", compresslevel=TRACE_GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    try:
        prof.export_chrome_trace(str(plain))
        write_atomic(path, pack)
    finally:
        plain.unlink(missing_ok=True)


def _profiler(cfg: BenchConfig, activities: list, trace_path: Path):
    """The profiler that writes this rank's trace, or, for a run that is only timed
    (``cfg.profile`` false), a stand-in whose ``step()`` does nothing: no profiler cost in the times."""
    if not cfg.profile:
        return contextlib.nullcontext(SimpleNamespace(step=lambda: None))
    return profile(
        activities=activities,
        schedule=schedule(wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=1),
        on_trace_ready=lambda prof: export_trace(prof, trace_path),
        record_shapes=True,
        profile_memory=True,
    )


def _timed_steps(cfg: BenchConfig, training: Training, data: PermutationStream, bar) -> dict:
    """Train ``cfg.timed_total`` steps with no profiler: the ``RankMetrics`` ``timed_*`` fields of the
    ``cfg.timed_steps`` kept ones (the first ``cfg.timed_warmup`` are run, not kept); ``{}`` without any.

    The same step as the profiled loop's (same scopes, syncs and clocks around the same work), on
    batches 0 .. timed_total-1 of the data stream; the collectives of the kept steps are timed on the
    ledger's :class:`~muon_repro.parallel.comm.CommTimer`, whose step is the kept step's index."""
    if not cfg.timed_total:
        return {}
    dims = training.dims
    ledger, timer = dims.ledger, dims.ledger.timer
    step_ms, fwd_bwd_ms, optimizer_ms, bubble_ms, last_backward_ns = [], [], [], [], []
    for i in range(cfg.timed_total):
        kept = i - cfg.timed_warmup  # negative: a warm-up step
        ledger.step = kept
        tokens, targets = data.local_batch(i, cfg.batch_per_dp, cfg.seq_len, cfg.dp, dims.dp_rank)
        timer.on = kept >= 0
        t0, t1, t2, loss = training.step(tokens, targets)
        timer.on = False
        if kept >= 0:
            step_ms.append((t2 - t0) / 1e6)
            fwd_bwd_ms.append((t1 - t0) / 1e6)
            optimizer_ms.append((t2 - t1) / 1e6)
            bubble_ms.append(training.bubble_ms)
            last_backward_ns.append(training.last_backward_ns)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{_loss_value(loss):.3f}", step_ms=f"{(t2 - t0) / 1e6:.0f}", timed="yes")
    comm = timer.columns()
    timer.clear()
    ledger.clear()  # the ledger covers the profiled steps (the analysis matches it to the trace's)
    ledger.step = 0
    pipeline = {"timed_bubble_ms": bubble_ms, "timed_last_backward_ns": last_backward_ns} if training.pp_rank is not None else {}
    return {
        "timed_step_ms": step_ms,
        "timed_fwd_bwd_ms": fwd_bwd_ms,
        "timed_optimizer_ms": optimizer_ms,
        "timed_comm": comm,
        **pipeline,
    }


def _loss_value(loss: torch.Tensor | None) -> float:
    """The step's loss; NaN on a pipeline stage without the head (filled in by Training.share_losses)."""
    return float("nan") if loss is None else loss.item()


def _progress(cfg: BenchConfig, enabled: bool):
    """A bar of the trial's steps on a terminal; none where the output goes to a file (each redraw a line there)."""
    if not enabled or not sys.stdout.isatty():
        return None
    from tqdm import tqdm

    return tqdm(
        total=cfg.timed_total + cfg.profiled_steps,
        desc=f"  {cfg.key}",
        unit="step",
        leave=False,
        file=sys.stdout,
        dynamic_ncols=True,
    )
