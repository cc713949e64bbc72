"""Record configurations in interleaved trials: skip complete ones, write atomically, report failures clearly.

A *recording* is one trial of one configuration. The plan interleaves them (A B C A B C ...), so
that the drift of a shared machine hits every configuration alike, and runs all recordings of a
world size in one launch of the workers (process start and ``import torch`` are paid once, not
per recording). Each recording is written into ``<out>/<group>/<name>/.trial<k>.partial`` and
renamed to ``trial<k>`` once every rank has finished, so a trial folder that exists is complete;
an interrupted sweep leaves none behind and simply redoes what is missing next time.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from muon_repro.bench.configs import DEFAULT_TRIALS, BenchConfig
from muon_repro.bench.runner import run_rank
from muon_repro.rundir import LOG_FILE, RunDir, missing_files, partial_dir, trial_dir


class BenchError(RuntimeError):
    """A run failed; the message names the config and the failing rank's error."""


@dataclass(frozen=True)
class Recording:
    """One trial of one configuration, and where it goes."""

    cfg: BenchConfig
    trial: int
    trials: int
    final: Path

    @property
    def partial(self) -> Path:
        return partial_dir(self.final)

    @property
    def label(self) -> str:
        return f"{self.cfg.key} trial {self.trial + 1}/{self.trials}"


@dataclass
class RunResult:
    key: str
    trial: int
    run_dir: Path
    status: str  # "recorded" | "skipped"
    train_s: float | None = None  # rank 0's summed step times, every step
    step_ms: float | None = None  # median over recorded steps, rank 0
    optimizer_ms: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None


def run_dir_for(out: Path, cfg: BenchConfig) -> Path:
    return Path(out) / cfg.group / cfg.name


def plan_recordings(cfgs: list[BenchConfig], out: Path, trials: int = DEFAULT_TRIALS) -> list[Recording]:
    """Every trial of every configuration, interleaved: all configurations' trial 0, then trial 1, ..."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    return [Recording(cfg, k, trials, trial_dir(run_dir_for(out, cfg), k)) for k in range(trials) for cfg in cfgs]


def is_complete(run_dir: Path, world_size: int) -> bool:
    return not missing_files(run_dir, world_size)


def _summary(rec: Recording, status: str) -> RunResult:
    result = RunResult(rec.cfg.key, rec.trial, rec.final, status)
    ranks = RunDir(rec.final).ranks
    recorded = slice(rec.cfg.wait + rec.cfg.warmup, None)  # the profiled steps
    if not ranks or None in ranks[0].step_ms[recorded] + ranks[0].optimizer_ms[recorded] or not ranks[0].loss:
        return result
    rank0 = ranks[0]
    result.train_s = sum(rank0.step_ms) / 1000.0
    result.step_ms = statistics.median(rank0.step_ms[recorded])
    result.optimizer_ms = statistics.median(rank0.optimizer_ms[recorded])
    result.loss_first, result.loss_last = rank0.loss[0], rank0.loss[-1]
    return result


def check_backend(backend: str, world_size: int) -> None:
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; use 'gloo' or 'nccl'")
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ValueError("backend 'nccl' asked for, but no CUDA GPU is visible; use --backend gloo")
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        if gpus < local:
            raise ValueError(f"backend 'nccl' needs one GPU per local worker: {local} workers, {gpus} GPU(s); use --backend gloo")


def _failure_message(exc: BaseException) -> str:
    """The failing rank and its error, from torch elastic's ChildFailedError."""
    try:
        rank, failure = exc.get_first_failure()  # type: ignore[attr-defined]
    except Exception:
        return str(exc)
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", message)
    if isinstance(message, dict):
        message = message.get("message", str(message))
    text = str(message).strip() or f"exit code {failure.exitcode}"
    return f"rank {rank} failed: {text.splitlines()[-1] if text else text}\n{text}"


def record_local(
    cfgs: list[BenchConfig], out: Path, backend: str, *, trials: int = DEFAULT_TRIALS, force: bool = False,
    command: list[str] | None = None, progress: bool = True,
) -> list[RunResult]:
    """Record every trial of ``cfgs`` on this machine: one launch of ``dp*tp`` workers per world size."""
    from muon_repro.parallel.launch import launch

    command = command or list(sys.argv)
    plan = plan_recordings(cfgs, Path(out), trials)
    done = {rec: not force and is_complete(rec.final, rec.cfg.world_size) for rec in plan}
    todo = [rec for rec in plan if not done[rec]]
    for world_size in sorted({rec.cfg.world_size for rec in todo}):
        batch = [rec for rec in todo if rec.cfg.world_size == world_size]
        check_backend(backend, world_size)
        threads = max(1, (os.cpu_count() or 1) // world_size) if backend == "gloo" else None
        with tempfile.TemporaryDirectory(prefix="muon-repro-stderr-") as stderr_dir:
            try:
                launch(_bench_worker, world_size, batch, backend, command, progress,
                       backend=backend, threads=threads, stderr_dir=stderr_dir)  # fmt: skip
            except BaseException as exc:  # failure, Ctrl-C or SIGTERM: leave no partial trial behind
                for rec in batch:
                    shutil.rmtree(rec.partial, ignore_errors=True)
                if type(exc).__name__ == "ChildFailedError":
                    failed = next((rec for rec in batch if not rec.final.is_dir()), batch[0])
                    raise BenchError(f"{failed.label}: {_failure_message(exc)}") from None
                raise
            for rec in batch:
                _append_worker_stderr(rec.final / LOG_FILE, Path(stderr_dir))
    return [_summary(rec, "skipped" if done[rec] else "recorded") for rec in plan]


def record_under_torchrun(
    cfgs: list[BenchConfig], out: Path, backend: str, *, trials: int = DEFAULT_TRIALS, force: bool = False, command: list[str] | None = None
) -> list[RunResult]:
    """Record every trial of ``cfgs`` as one rank of a world started by ``torchrun`` (any number of nodes).

    ``out`` must be a filesystem every node sees (rank 0 renames each finished trial into place).
    """
    from muon_repro.parallel.launch import init_worker

    world = int(os.environ["WORLD_SIZE"])
    for cfg in cfgs:
        if cfg.world_size != world:
            raise ValueError(f"config {cfg.key} needs dp*tp = {cfg.dp}*{cfg.tp} = {cfg.world_size} ranks, torchrun started {world}")
    check_backend(backend, world)
    plan = plan_recordings(cfgs, Path(out), trials)
    init_worker(backend)
    try:
        decision = [[not force and is_complete(rec.final, world) for rec in plan]]
        dist.broadcast_object_list(decision, src=0)  # rank 0's view of the shared filesystem decides
        done = dict(zip(plan, decision[0]))
        record_all([rec for rec in plan if not done[rec]], backend, command or list(sys.argv), progress=False)
    finally:
        dist.destroy_process_group()
    return [_summary(rec, "skipped" if done[rec] else "recorded") for rec in plan]


def record_all(recordings: list[Recording], backend: str, command: list[str], progress: bool = True) -> None:
    """On every rank of an initialized world: record each recording in turn; rank 0 moves each into place."""
    rank = dist.get_rank()
    for i, rec in enumerate(recordings, 1):
        if rank == 0:
            shutil.rmtree(rec.partial, ignore_errors=True)
            rec.partial.mkdir(parents=True)
        dist.barrier()
        t0 = time.perf_counter()
        run_rank(rec.cfg, str(rec.partial), backend, command, progress, trial=rec.trial, trials=rec.trials)
        dist.barrier()
        if rank == 0:
            _finalize(rec)
            if progress:
                print(f"  [{i}/{len(recordings)}] {rec.label}: {time.perf_counter() - t0:.1f} s", flush=True)


def _bench_worker(recordings: list[Recording], backend: str, command: list[str], progress: bool) -> None:
    record_all(recordings, backend, command, progress)


def _append_worker_stderr(log: Path, stderr_dir: Path) -> None:
    """Keep what the workers printed to stderr (warnings, profiler notes) in the run's log.txt."""
    sections = []
    for path in sorted(stderr_dir.rglob("stderr.log"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0):
        text = path.read_text(errors="replace").strip()
        if text:
            sections.append(f"--- rank {path.parent.name} stderr ---\n{text}")
    if sections and log.is_file():
        with log.open("a") as f:
            f.write("\n".join(sections) + "\n")


def _finalize(rec: Recording) -> None:
    missing = missing_files(rec.partial, rec.cfg.world_size)
    if missing:
        shutil.rmtree(rec.partial, ignore_errors=True)
        raise BenchError(f"{rec.label}: the run finished without writing {', '.join(missing)}")
    if rec.final.exists():
        shutil.rmtree(rec.final)
    os.replace(rec.partial, rec.final)
