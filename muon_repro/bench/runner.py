"""One benchmark run on one rank: train, profile, and write this rank's trace and metrics.

Runs inside a worker whose ``torch.distributed`` world is already initialized (by our launcher
or by ``torchrun``). Writes into ``run_dir`` (a temporary directory the sweep renames into
place once every rank is done):

    rank<r>.json.gz    PyTorch profiler Chrome trace (Kineto), openable in ui.perfetto.dev
    metrics.json       rank 0 only: every rank's metrics (see :func:`run_rank`)
    config.json        rank 0 only: the resolved config, command line, seed
    environment.json   rank 0 only: software, hardware, git SHA (see environment.py)
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from muon_repro.bench.configs import BenchConfig
from muon_repro.bench.data import PermutationStream
from muon_repro.bench.environment import capture_environment
from muon_repro.model import GPT, GPTConfig
from muon_repro.optim import DistributedAdamW, DistributedMuon, muon_param_groups
from muon_repro.optim.distributed import ZeroOneOptimizer
from muon_repro.parallel import ParallelDims

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def build_optimizer(cfg: BenchConfig, model: torch.nn.Module, dims: ParallelDims) -> ZeroOneOptimizer:
    groups = muon_param_groups(model)
    common = dict(lr=cfg.lr, weight_decay=cfg.weight_decay, layout=cfg.layout, bucket_elems=cfg.bucket_elems, reduce_dtype=DTYPES[cfg.reduce_dtype])
    if cfg.optimizer == "adamw":
        return DistributedAdamW(groups, dims, **common)
    ns_dtype = DTYPES[cfg.ns_dtype] if cfg.ns_dtype else None
    return DistributedMuon(groups, dims, ns_dtype=ns_dtype, gather_dtype=DTYPES[cfg.gather_dtype], **common)


def _peak_memory_bytes(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "process_max_rss"


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def run_rank(cfg: BenchConfig, run_dir: str, backend: str, command: list[str], progress: bool = True) -> dict:
    """Train ``cfg.steps`` steps on this rank under the profiler; return this rank's metrics."""
    run_dir_path = Path(run_dir)
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world != cfg.world_size:
        raise ValueError(f"config {cfg.key} needs dp*tp = {cfg.dp}*{cfg.tp} = {cfg.world_size} ranks, the world has {world}")
    dims = ParallelDims(cfg.dp, cfg.tp)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    torch.manual_seed(cfg.seed)
    model_cfg = GPTConfig.preset(cfg.preset, qkv=cfg.qkv, seed=cfg.seed, max_seq_len=max(cfg.seq_len, GPTConfig.preset(cfg.preset).max_seq_len))
    model = GPT(model_cfg, dims.tp_group, device=device)
    opt = build_optimizer(cfg, model, dims)
    data = PermutationStream(model_cfg.vocab_size, cfg.seed)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    trace_path = run_dir_path / f"rank{dims.rank}.json.gz"
    step_ms, optimizer_ms, losses = [], [], []
    bar = _progress(cfg, dims.rank == 0 and progress)
    with profile(
        activities=activities,
        schedule=schedule(wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace_path)),
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for step in range(cfg.steps):
            dims.ledger.step = step
            tokens, targets = data.local_batch(step, cfg.batch_per_dp, cfg.seq_len, cfg.dp, dims.dp_rank)
            tokens, targets = tokens.to(device), targets.to(device)
            _sync(device)
            t0 = time.perf_counter()
            with record_function("forward"):
                loss = model(tokens, targets)
            with record_function("backward"):
                loss.backward()
            _sync(device)
            t1 = time.perf_counter()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            _sync(device)
            t2 = time.perf_counter()
            step_ms.append((t2 - t0) * 1e3)
            optimizer_ms.append((t2 - t1) * 1e3)
            losses.append(loss.item())
            prof.step()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}", step_ms=f"{step_ms[-1]:.0f}")
    if bar is not None:
        bar.close()

    peak, peak_source = _peak_memory_bytes(device)
    metrics = {
        "rank": dims.rank,
        "dp_rank": dims.dp_rank,
        "tp_rank": dims.tp_rank,
        "step_ms": step_ms,
        "optimizer_ms": optimizer_ms,
        "loss": losses,
        "ledger": dims.ledger.as_dicts(),
        "state_bytes": opt.state_bytes(),
        "transient_bytes": opt.stats.transient_bytes,
        "peak_memory_bytes": peak,
        "peak_memory_source": peak_source,
        "update_rms": {name: float(v) for name, v in opt.stats.update_rms.items()},
        "ns_calls": opt.stats.ns_calls,
        "ns_flops": opt.stats.ns_flops,
        "model_params": model.num_params(full=True),
        "local_params": model.num_params(full=False),
    }
    ranks = [None] * world if dims.rank == 0 else None
    if world > 1:
        dist.gather_object(metrics, ranks, dst=0)
    else:
        ranks = [metrics]
    if dims.rank == 0:
        log = [f"{cfg.key}: {cfg.optimizer} dp={cfg.dp} tp={cfg.tp} layout={cfg.layout} preset={cfg.preset} backend={backend}"]
        log += [f"step {i}: loss {l:.5f}  step {s:.1f} ms  optimizer {o:.1f} ms" for i, (l, s, o) in enumerate(zip(losses, step_ms, optimizer_ms))]
        (run_dir_path / "log.txt").write_text("\n".join(log) + "\n")
        _write_json(run_dir_path / "metrics.json", {"config": cfg.key, "ranks": ranks})
        _write_json(run_dir_path / "config.json", {**cfg.to_dict(), "backend": backend, "device": device.type, "command": command})
        _write_json(run_dir_path / "environment.json", capture_environment(backend))
    return metrics


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _progress(cfg: BenchConfig, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=cfg.steps, desc=f"  {cfg.key}", unit="step", leave=False, file=sys.stdout, dynamic_ncols=True)
