"""Record the original study's protocol (:mod:`muon_repro.bench.study_protocol`) on this machine.

One launch per protocol and round runs the study's six runs one after the other on the same 4 ranks, as its script
did, each profiled over its 5 steps; each run lands in its own trial folder,
``<out>/<profile>/<group>/<run>/trial<k>/rank<r>.json.gz`` (:func:`~muon_repro.rundir.protocol_group`), with
``config.json`` (the protocol, its sizes, what was scaled and what differs from the study) and ``environment.json``.
A round records both protocols, their order alternating from round to round. Folders are written under a temporary
name and renamed when complete; complete trials are skipped. Under ``torchrun`` (4 GPUs, NCCL) the ranks are
torchrun's. ``world_size=1`` records the study's protocol on one rank (DP1·TP1, no collectives) into its own group.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

from muon_repro.bench.configs import check_trials_limit
from muon_repro.bench.study_protocol import (
    PROTOCOLS,
    RUNS,
    STUDY_WORLD,
    Grid,
    ProtocolConfig,
    ProtocolRun,
    ReplicaAdamW,
    ShardedAdamW,
    StudyMuon,
)
from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, PROTOCOL_FIELD, protocol_group, trace_name
from muon_repro.tables.files import swap_dir


def _outer(run: ProtocolRun) -> str:
    return f"{run.prefix}_{'Full_Training_Step' if run.full_step else 'Battle'}"


def _generate(cfg: ProtocolConfig, device: torch.device) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """The study's parameters and per-step random gradients, the same on every rank (seed 0)."""
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed)
    params = [torch.randn(shape, generator=gen).to(device) for shape in cfg.shapes]
    grads = [[torch.randn(shape, generator=gen).to(device) for shape in cfg.shapes] for _ in range(cfg.steps)]
    return params, grads


def _fwd_bwd(cfg: ProtocolConfig, device: torch.device) -> None:
    """The study's simulated forward-backward: a square randn, chained matmuls, then a device synchronisation."""
    dummy = torch.randn(cfg.fwd_bwd_size, cfg.fwd_bwd_size, device=device)
    for _ in range(cfg.fwd_bwd_matmuls):
        dummy = torch.matmul(dummy, dummy)
    if device.type == "cuda":
        torch.cuda.synchronize()


def _optimizer(run: ProtocolRun, cfg: ProtocolConfig, grid: Grid, params: list[torch.Tensor]):
    if run.optimizer == "muon":
        return StudyMuon(params, cfg, grid, run.async_op)
    if cfg.protocol == "study":
        return ReplicaAdamW(params, run.async_op)
    return ShardedAdamW(params, cfg, grid, run.async_op)


def _iteration(run: ProtocolRun, cfg: ProtocolConfig, opt, grads, device: torch.device, *, fwd_bwd: bool = True) -> None:
    """One step inside the study's scopes (its names, so that its traces and ours are read by one path); ``grads`` as
    the optimizer's ``prepare`` laid them out. ``fwd_bwd`` False leaves out the simulated forward-backward, as the
    study's warm-up step does."""
    if run.full_step and fwd_bwd:
        with record_function("FWD_BWD"):
            _fwd_bwd(cfg, device)
    attach = "Attach_Grads" if run.full_step else ("Muon_Attach_Grads" if run.optimizer == "muon" else None)
    if attach:
        with record_function(attach):
            opt.attach(grads)
    else:
        opt.attach(grads)
    if run.optimizer == "adamw":
        with record_function("AdamW_AllReduce" if run.full_step else "AdamW_Comm_AllReduce"):
            opt.reduce()
        with record_function("AdamW_Step"):
            opt.step()
    else:
        with record_function("Muon_Step"):
            opt.step()


def _records_shapes(run: ProtocolRun, device: torch.device) -> bool:
    """The study profiled its optimizer-only runs with ``record_shapes`` and its full-step runs without. A gloo
    trace says a collective's size only in its operator's shapes (NCCL's events carry it either way), so on a CPU
    every run records them: the one departure of the profiler's settings, and it adds host time to every scope."""
    return not run.full_step or device.type != "cuda"


def record_runs_on_rank(cfg_dict: dict, run_names: list[str], folders: list[str]) -> None:
    """This rank's part of one launch: every run of ``run_names``, its trace into the matching folder."""
    cfg = ProtocolConfig(
        **{**cfg_dict, "shapes": tuple(tuple(s) for s in cfg_dict["shapes"]), "tp_dims": tuple(cfg_dict["tp_dims"])}
    )
    device = torch.device("cuda", torch.cuda.current_device()) if cfg.device == "cuda" else torch.device("cpu")
    grid = Grid.build(cfg.dp, cfg.tp)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    by_name = {r.name_at(cfg.dp, cfg.tp): r for r in RUNS}
    for name, folder in zip(run_names, folders):
        run = by_name[name]
        params, grads = _generate(cfg, device)
        opt = _optimizer(run, cfg, grid, params)
        step_grads = [opt.prepare(g) for g in grads]  # each rank's gradients, laid out before the steps as the study's
        # The study's warm-up: one optimizer step, unprofiled, without the forward-backward; then, with no
        # synchronisation or barrier between (the study has none), its profiled steps.
        for _ in range(cfg.warmup):
            _iteration(run, cfg, opt, step_grads[0], device, fwd_bwd=False)
        with profile(activities=activities, record_shapes=_records_shapes(run, device)) as prof:
            with record_function(_outer(run)):
                for step in range(cfg.steps):
                    _iteration(run, cfg, opt, step_grads[step], device)
        from muon_repro.bench.runner import export_trace

        export_trace(prof, Path(folder) / trace_name(dist.get_rank()))
        dist.barrier()


def run_folder(out: Path, profile_id: str, protocol: str, run: str, trial: int, world_size: int = STUDY_WORLD) -> Path:
    return Path(out) / profile_id / protocol_group(protocol, world_size) / run / f"trial{trial}"


def is_complete(folder: Path, world_size: int = STUDY_WORLD) -> bool:
    return (folder / CONFIG_FILE).is_file() and all((folder / trace_name(r)).is_file() for r in range(world_size))


def record_protocols(
    out: str | Path,
    *,
    protocols: tuple[str, ...] = PROTOCOLS,
    trials: int = 1,
    world_size: int = STUDY_WORLD,
    backend: str | None = None,
    profile_id: str | None = None,
    command: list[str] | None = None,
    progress: bool = True,
) -> list[Path]:
    """Record ``trials`` rounds of each protocol's six runs on ``world_size`` ranks (the study's 4, or 1) into
    ``out``; returns the trial folders written. Under ``torchrun`` this process is one of its ranks (rank 0 files
    the runs); else the ranks are started here."""
    from muon_repro.bench.environment import capture_environment, recording_profile
    from muon_repro.parallel.launch import default_backend, init_worker, launch

    for p in protocols:
        if p not in PROTOCOLS:
            raise ValueError(f"protocol {p!r}: choose from {', '.join(PROTOCOLS)}")
    if trials < 1:
        raise ValueError(f"trials {trials}: record at least one round")
    check_trials_limit(trials)
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    backend = backend or default_backend(world_size)
    if torchrun:
        if int(os.environ["WORLD_SIZE"]) != world_size:
            raise ValueError(
                f"the study's protocol runs on {world_size} ranks here (--world-size); torchrun started "
                f"{os.environ['WORLD_SIZE']}"
            )
        if not dist.is_initialized():
            init_worker(backend)
    filer = not torchrun or dist.get_rank() == 0  # the process that makes and files the folders
    device = "cuda" if backend == "nccl" else "cpu"
    configs = {p: ProtocolConfig.for_device(p, device, world_size) for p in protocols}  # refused before any launch
    profile_id = recording_profile(backend, profile_id)
    written = []
    for trial in range(trials):
        order = protocols if trial % 2 == 0 else tuple(reversed(protocols))  # interleaved rounds
        for protocol in order:
            cfg = configs[protocol]
            folder_of = {
                r: run_folder(Path(out), profile_id, protocol, r.name_at(cfg.dp, cfg.tp), trial, world_size) for r in RUNS
            }
            todo = [r for r in RUNS if not is_complete(folder_of[r], world_size)]
            if not todo:
                continue
            finals = [folder_of[r] for r in todo]
            partials = [f.with_name(f".{f.name}.partial") for f in finals]
            if filer:
                for p in partials:
                    shutil.rmtree(p, ignore_errors=True)
                    p.mkdir(parents=True)
            if progress and filer:
                print(f"round {trial}: {protocol} ({len(todo)} runs, {backend})", flush=True)
            names, folders = [r.name_at(cfg.dp, cfg.tp) for r in todo], [str(p) for p in partials]
            try:
                if torchrun:
                    dist.barrier()  # the folders exist before any rank writes into them
                    record_runs_on_rank(cfg.to_dict(), names, folders)
                else:
                    # The workers' stderr off the terminal: the study's script calls collectives torch deprecates
                    # (a FutureWarning per call site and rank) and the profiler notes each start; a failure's
                    # traceback travels in the launcher's error, not on stderr.
                    with tempfile.TemporaryDirectory(prefix="muon-repro-stderr-") as stderr_dir:
                        launch(
                            record_runs_on_rank, world_size, cfg.to_dict(), names, folders, backend=backend, stderr_dir=stderr_dir
                        )
                if filer:
                    environment = capture_environment(backend, profile_id) | {"world_size": world_size}
                    written += [
                        _file(run, protocol, trial, cfg, backend, command, environment, p, f)
                        for run, p, f in zip(todo, partials, finals)
                    ]
            finally:
                if filer:
                    for p in partials:
                        shutil.rmtree(p, ignore_errors=True)
    return written


def _file(
    run: ProtocolRun,
    protocol: str,
    trial: int,
    cfg: ProtocolConfig,
    backend: str,
    command: list[str] | None,
    environment: dict,
    partial: Path,
    final: Path,
) -> Path:
    """Write the run's config.json and environment.json into its complete folder and rename it into place."""
    from muon_repro.rundir import write_json  # noqa: I001

    config = {
        PROTOCOL_FIELD: protocol,
        "group": protocol_group(protocol, cfg.world_size),
        "name": run.name_at(cfg.dp, cfg.tp),
        "trial": trial,
        "optimizer": run.optimizer,
        "full_step": run.full_step,
        "async_op": run.async_op,
        "world_size": cfg.world_size,
        "backend": backend,
        "command": " ".join(command or ["muon-repro", "bench", "--protocol", protocol]),
        **cfg.to_dict(),
    }
    write_json(partial / CONFIG_FILE, config)
    write_json(partial / ENVIRONMENT_FILE, environment)
    final.parent.mkdir(parents=True, exist_ok=True)
    swap_dir(partial, final)  # an incomplete earlier trial is removed only once this one is in its place
    return final
