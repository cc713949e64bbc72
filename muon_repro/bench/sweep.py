"""Record a list of configurations: skip complete runs, write atomically, report failures clearly.

Every run is written into ``<out>/<group>/.<name>.partial`` and renamed to ``<out>/<group>/<name>``
only once every rank has finished, so a run directory that exists is complete; an interrupted
sweep leaves none behind and simply redoes the run next time.
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

from muon_repro.bench.configs import BenchConfig
from muon_repro.bench.runner import run_rank

RUN_FILES = ("config.json", "environment.json", "metrics.json", "log.txt")


class BenchError(RuntimeError):
    """A run failed; the message names the config and the failing rank's error."""


@dataclass
class RunResult:
    key: str
    run_dir: Path
    status: str  # "recorded" | "skipped"
    wall_s: float
    step_ms: float | None = None  # median over recorded steps, rank 0
    optimizer_ms: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None


def run_dir_for(out: Path, cfg: BenchConfig) -> Path:
    return Path(out) / cfg.group / cfg.name


def partial_dir_for(out: Path, cfg: BenchConfig) -> Path:
    return Path(out) / cfg.group / f".{cfg.name}.partial"


def is_complete(run_dir: Path, world_size: int) -> bool:
    names = [*RUN_FILES, *(f"rank{r}.json.gz" for r in range(world_size))]
    return all((run_dir / n).is_file() for n in names)


def _summary(cfg: BenchConfig, run_dir: Path, status: str, wall_s: float) -> RunResult:
    import json

    result = RunResult(cfg.key, run_dir, status, wall_s)
    try:
        rank0 = json.loads((run_dir / "metrics.json").read_text())["ranks"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return result
    recorded = slice(cfg.wait + cfg.warmup, None)  # the profiled steps
    result.step_ms = statistics.median(rank0["step_ms"][recorded])
    result.optimizer_ms = statistics.median(rank0["optimizer_ms"][recorded])
    result.loss_first, result.loss_last = rank0["loss"][0], rank0["loss"][-1]
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


def record_local(cfgs: list[BenchConfig], out: Path, backend: str, *, force: bool = False, command: list[str] | None = None, progress: bool = True) -> list[RunResult]:
    """Record ``cfgs`` on this machine, launching ``dp*tp`` workers per run with torch's launcher."""
    from muon_repro.parallel.launch import launch

    command = command or list(sys.argv)
    results = []
    bar = _progress(len(cfgs), progress)
    for cfg in cfgs:
        final, partial = run_dir_for(out, cfg), partial_dir_for(out, cfg)
        if bar is not None:
            bar.set_description(cfg.key)
        if is_complete(final, cfg.world_size) and not force:
            results.append(_summary(cfg, final, "skipped", 0.0))
            _tick(bar)
            continue
        check_backend(backend, cfg.world_size)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        threads = max(1, (os.cpu_count() or 1) // cfg.world_size) if backend == "gloo" else None
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="muon-repro-stderr-") as stderr_dir:
            try:
                launch(_bench_worker, cfg.world_size, cfg, str(partial), backend, command, progress,
                       backend=backend, threads=threads, stderr_dir=stderr_dir)
            except BaseException as exc:  # failure, Ctrl-C or SIGTERM: leave nothing behind
                shutil.rmtree(partial, ignore_errors=True)
                if type(exc).__name__ == "ChildFailedError":
                    raise BenchError(f"{cfg.key}: {_failure_message(exc)}") from None
                raise
            _append_worker_stderr(partial / "log.txt", Path(stderr_dir))
        _finalize(cfg, partial, final)
        results.append(_summary(cfg, final, "recorded", time.perf_counter() - t0))
        _tick(bar)
    if bar is not None:
        bar.close()
    return results


def record_under_torchrun(cfgs: list[BenchConfig], out: Path, backend: str, *, force: bool = False, command: list[str] | None = None) -> list[RunResult]:
    """Record ``cfgs`` as one rank of a world started by ``torchrun`` (any number of nodes).

    ``out`` must be a filesystem every node sees (rank 0 renames the finished run into place).
    """
    from muon_repro.parallel.launch import init_worker

    world = int(os.environ["WORLD_SIZE"])
    for cfg in cfgs:
        if cfg.world_size != world:
            raise ValueError(f"config {cfg.key} needs dp*tp = {cfg.dp}*{cfg.tp} = {cfg.world_size} ranks, torchrun started {world}")
    check_backend(backend, world)
    init_worker(backend)
    rank = dist.get_rank()
    results = []
    try:
        for cfg in cfgs:
            final, partial = run_dir_for(out, cfg), partial_dir_for(out, cfg)
            decision = [is_complete(final, world) and not force]
            dist.broadcast_object_list(decision, src=0)
            if decision[0]:
                results.append(_summary(cfg, final, "skipped", 0.0))
                continue
            if rank == 0:
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
            dist.barrier()
            t0 = time.perf_counter()
            run_rank(cfg, str(partial), backend, command or list(sys.argv))
            dist.barrier()
            if rank == 0:
                _finalize(cfg, partial, final)
            results.append(_summary(cfg, final, "recorded", time.perf_counter() - t0))
    finally:
        dist.destroy_process_group()
    return results


def _bench_worker(cfg: BenchConfig, run_dir: str, backend: str, command: list[str], progress: bool) -> None:
    run_rank(cfg, run_dir, backend, command, progress)


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


def _finalize(cfg: BenchConfig, partial: Path, final: Path) -> None:
    if not is_complete(partial, cfg.world_size):
        missing = [n for n in (*RUN_FILES, *(f"rank{r}.json.gz" for r in range(cfg.world_size))) if not (partial / n).is_file()]
        shutil.rmtree(partial, ignore_errors=True)
        raise BenchError(f"{cfg.key}: run finished without writing {', '.join(missing)}")
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="run", dynamic_ncols=True)


def _tick(bar) -> None:
    if bar is not None:
        bar.update(1)
