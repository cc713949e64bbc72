"""Start ``nprocs`` workers on this machine with torch's elastic launcher and collect results.

``torchrun --standalone`` semantics (c10d rendezvous on a free port chosen at run time), driven
from Python so commands and tests can launch a world without a shell. Each worker initializes
``torch.distributed`` from the launcher's environment, runs ``fn(*args)``, and tears down.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def default_backend(local_workers: int | None = None) -> str:
    """NCCL when every local worker can have its own GPU, else gloo.

    ``local_workers`` defaults to ``LOCAL_WORLD_SIZE`` (set by torchrun), else 1.
    """
    local = local_workers or int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local else "gloo"


def init_worker(backend: str) -> None:
    """Initialize ``torch.distributed`` from RANK/WORLD_SIZE/MASTER_* (set by torchrun or us)."""
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend 'nccl' needs CUDA GPUs and none is visible; use --backend gloo")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)


@record  # writes the worker's traceback where the launcher's ChildFailedError reports it
def _worker(fn: Callable[..., Any], backend: str, threads: int | None, args: tuple) -> Any:
    if threads:
        torch.set_num_threads(threads)
    init_worker(backend)
    try:
        return fn(*args)
    finally:
        dist.barrier()
        dist.destroy_process_group()


def launch(
    fn: Callable[..., Any],
    nprocs: int,
    *args: Any,
    backend: str = "gloo",
    threads: int | None = 1,
    stderr_dir: str | None = None,
) -> list[Any]:
    """Run ``fn(*args)`` on ``nprocs`` fresh worker processes; return their results by rank.

    With ``stderr_dir`` each worker's stderr (C++ warnings, profiler chatter) goes to
    ``stderr_dir/.../<rank>/stderr.log`` instead of the terminal; stdout stays on the terminal.

    ``fn`` must be importable (a module-level function). A worker's exception stops the whole
    world and is raised here as ``torch.distributed.elastic``'s ``ChildFailedError``, which names
    the failing rank and carries its traceback.
    """
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if backend == "nccl" and torch.cuda.device_count() < nprocs:
        raise ValueError(
            f"backend 'nccl' needs one GPU per worker: {nprocs} workers, "
            f"{torch.cuda.device_count()} GPU(s) visible; use --backend gloo"
        )
    logs_specs = None
    if stderr_dir is not None:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

        logs_specs = DefaultLogsSpecs(log_dir=stderr_dir, redirects=Std.ERR, tee=Std.NONE)
    config = LaunchConfig(
        logs_specs=logs_specs,
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nprocs,
        run_id=f"muon-repro-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=0.05,
        start_method="spawn",
    )
    results = elastic_launch(config, _worker)(fn, backend, threads, args)
    return [results[r] for r in range(nprocs)]
