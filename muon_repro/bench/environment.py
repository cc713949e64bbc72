"""What a run ran on: the MLPerf system-description fields that apply, plus provenance."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import torch
import torch.distributed as dist

from muon_repro.hardware import PROFILE_FIELD, resolve_profile
from muon_repro.provenance import SOURCE_DIGEST_FIELD, source_digest, tree_commit


def _run(cmd: list[str], cwd: str | None = None, timeout: float = 20) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpu_model() -> str | None:
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


# The instructions that execute bf16 arithmetic (x86's AVX-512 BF16 and AMX, Arm's BF16): without them a bf16 matmul
# runs on a slow fallback, 65x slower than fp32 on an AVX2 CPU of ours, and a bf16 Newton-Schulz with it.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_has_bf16(cpuinfo: str) -> bool | None:
    """Whether ``/proc/cpuinfo``'s text lists an instruction that computes in bf16 (x86 ``flags``, Arm
    ``Features``); None when it lists no features at all (not Linux, or a CPU that does not say)."""
    features = [line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith(("flags", "Features"))]
    if not features:
        return None
    return any(BF16_FLAGS.intersection(f) for f in features)


def _memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _accelerators() -> dict:
    if not torch.cuda.is_available():
        return {"accelerator": None, "accelerator_count": 0, "accelerator_memory_bytes": None, "interconnect_topology": None}
    props = torch.cuda.get_device_properties(0)
    topo = _run(["nvidia-smi", "topo", "-m"]) if shutil.which("nvidia-smi") else None
    return {
        "accelerator": props.name,
        "accelerator_count": torch.cuda.device_count(),
        "accelerator_memory_bytes": props.total_memory,
        "interconnect_topology": topo,
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) if topo else None,
    }


def _nccl_version() -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # no CUDA build, or NCCL missing
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


@functools.cache
def _installed() -> tuple[str, ...]:
    """``pip freeze``, read once per process: a sweep records many runs in one process."""
    return tuple(sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"]))


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not every platform has one
        return None


def _nodes() -> int:
    return int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("SLURM_NNODES", "1")))


def recording_profile(backend: str | None, override: str | None = None) -> str:
    """The hardware profile a recording on this machine is filed under (muon_repro.hardware): ``override``
    (``--profile``), else ``$MUON_REPRO_PROFILE``, else derived from the accelerators, nodes and backend.
    The launcher decides it once per recording, so that the folder and environment.json agree."""
    facts = {"backend": backend, "nodes": _nodes(), "host_cpu_cores": os.cpu_count(), **_accelerators()}
    return resolve_profile(facts, override)


def capture_environment(backend: str | None = None, profile: str | None = None) -> dict:
    """The facts that decide whether two runs are comparable. Safe to call on any rank.
    ``profile``: the recording's hardware profile, as the launcher decided it (else derived here)."""
    repo = Path(__file__).resolve().parents[2]
    environment = {
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": _nccl_version(),
        "gloo_available": dist.is_gloo_available(),
        "backend": backend,
        "world_size": dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1")),
        "nodes": _nodes(),
        "host_cpu": _cpu_model(),
        "host_cpu_cores": os.cpu_count(),
        # The vector instructions torch's CPU kernels use (AVX2, AVX512, ...) and whether the CPU computes in bf16: two
        # CPUs of one name may differ in both (the study replay's bf16 Muon step: 60-67 ms on the reference's 2-core
        # "AMD EPYC", 5 s on an AVX2 one of the same name).
        "host_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "host_cpu_bf16": cpu_has_bf16(_cpuinfo()),
        "host_memory_bytes": _memory_bytes(),
        "torch_num_threads": torch.get_num_threads(),
        # Other work on the machine when the run ended (1-minute load average, this run's ranks included):
        # times recorded beside a busy neighbour are slower, and this says so.
        "load_average_1m": _load_average(),
        **_accelerators(),
        **tree_commit(repo),  # git's, else a copied tree's commit stamp
        SOURCE_DIGEST_FIELD: source_digest(),  # the package as it was: verify checks it against a bundle's source
        "pip_freeze": list(_installed()),
    }
    environment[PROFILE_FIELD] = profile or resolve_profile(environment)
    return environment
