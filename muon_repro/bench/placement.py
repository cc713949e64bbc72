"""Where a sweep's runs go on this machine: which backend, and which configurations cannot run here as asked.

A GPU machine records on its GPUs, one rank per GPU over NCCL, whatever else the sweep holds: a configuration
needing more ranks than there are GPUs is refused by name, with what would record it, and the others are recorded.
A machine without GPUs records on its CPU over gloo, except the ``gpu`` scale (a 369M model at half a million
tokens a step), which is refused there. ``--backend gloo`` asks for the CPU anyway and gets it; ``--backend nccl``
without enough GPUs is refused like the rest. Nothing ever falls back to the CPU unasked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from muon_repro.bench.configs import BenchConfig
from muon_repro.parallel.launch import MAX_LOCAL_WORKERS

GPU_SCALE = "gpu"


@dataclass(frozen=True)
class Placement:
    """The backend of a sweep, the configurations it records, and those it refuses with the reason for each."""

    backend: str
    runnable: list[BenchConfig]
    refused: list[tuple[BenchConfig, str]] = field(default_factory=list)

    def refusals(self) -> str:
        """One line per refused configuration, for the terminal."""
        return "\n".join(f"  {cfg.key}: {reason}" for cfg, reason in self.refused)


def _grid(cfg: BenchConfig) -> str:
    return f"dp*tp*pp = {cfg.dp}*{cfg.tp}*{cfg.pp} = {cfg.world_size}"


def place(cfgs: list[BenchConfig], gpus: int, asked: str | None = None) -> Placement:
    """The placement of ``cfgs`` on a machine with ``gpus`` visible GPUs; ``asked``: ``--backend`` (None: choose).

    A :class:`ValueError` names every configuration when none of them can run here."""
    if asked not in (None, "gloo", "nccl"):
        raise ValueError(f"unknown backend {asked!r}; use 'gloo' or 'nccl'")
    backend = asked or ("nccl" if gpus > 0 else "gloo")
    runnable, refused = [], []
    for cfg in cfgs:
        if backend == "nccl" and cfg.world_size > gpus:
            where = f"this machine has {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU is visible"
            refused.append(
                (
                    cfg,
                    f"needs {cfg.world_size} GPUs, one per rank ({_grid(cfg)}), and {where}: record it on a machine "
                    f"with {cfg.world_size} GPUs (or under torchrun across nodes), or on the CPU with --backend gloo",
                )
            )
        elif cfg.world_size > MAX_LOCAL_WORKERS:
            refused.append(
                (
                    cfg,
                    f"needs {cfg.world_size} ranks ({_grid(cfg)}), and one machine starts at most {MAX_LOCAL_WORKERS} "
                    "worker processes (docs/limits.md): record it under torchrun across nodes",
                )
            )
        elif backend == "gloo" and cfg.scale == GPU_SCALE and asked != "gloo":
            refused.append(
                (
                    cfg,
                    "the gpu scale trains the 369M model at half a million tokens a step, and no GPU is visible: "
                    "record --scale cpu here, or ask for the CPU anyway with --backend gloo",
                )
            )
        else:
            runnable.append(cfg)
    placement = Placement(backend, runnable, refused)
    if not runnable:
        raise ValueError(f"no configuration can be recorded here as asked:\n{placement.refusals()}")
    return placement


def torchrun_backend(cfgs: list[BenchConfig], gpus: int, local_ranks: int, asked: str | None = None) -> str:
    """The backend of the ranks torchrun started on this node (``local_ranks`` of them, ``gpus`` visible): NCCL when
    each has its own GPU; gloo only when asked, or when the node has no GPU and no configuration is of the gpu scale.
    Anything else is a ValueError with the launch that would work, never the CPU unasked on a GPU node."""
    if asked not in (None, "gloo", "nccl"):
        raise ValueError(f"unknown backend {asked!r}; use 'gloo' or 'nccl'")
    if asked == "gloo":
        return "gloo"
    if gpus >= local_ranks and gpus > 0:
        return "nccl"
    if gpus > 0 or asked == "nccl":
        have = f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU"
        raise ValueError(
            f"torchrun started {local_ranks} ranks on this node, which has {have}: NCCL needs one GPU per rank; "
            f"start torchrun with --nproc-per-node {max(gpus, 1)} on each node, or pass --backend gloo for the CPU"
        )
    gpu_scale = [cfg.key for cfg in cfgs if cfg.scale == GPU_SCALE]
    if gpu_scale:
        raise ValueError(
            f"no GPU is visible on this node, and {', '.join(gpu_scale)} is of the gpu scale (the 369M model at half a "
            "million tokens a step): record --scale cpu here, or ask for the CPU anyway with --backend gloo"
        )
    return "gloo"


def visible_gpus() -> int:
    """CUDA GPUs this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
