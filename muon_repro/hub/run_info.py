"""What the card says about the runs: their traces, the environment they ran in, the commands that made them.

Reads ``traces/[<profile>/]<group>/<name>/trial<k>/{config,environment}.json`` as the bench runner writes them and
tolerates anything missing: a run without ``environment.json`` simply adds nothing to the
environment table.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, RUN_FILES, flatten, is_trace_file, trace_rank

__all__ = ["RUN_FILES", "EnvRow", "RunDoc", "describe_runs", "environment_rows", "git_shas", "is_trace", "run_commands"]

# The order in which the environment table lists what it knows; anything else follows alphabetically.
ENV_ORDER = (
    "accelerator", "accelerator_count", "accelerator_memory_bytes", "driver", "cuda", "nccl", "backend",
    "gloo_available", "world_size", "nodes", "host_cpu", "host_cpu_cores", "host_memory_bytes", "os", "python",
    "torch", "torch_num_threads", "git_sha", "git_dirty",
)  # fmt: skip
ENV_SKIP = ("hostname",)  # says nothing about the results, and may be private
ENV_BLOCKS = ("interconnect_topology",)  # multi-line text, shown as a code block
ENV_LISTS = ("pip_freeze",)  # long lists: counted here, kept in environment.json


def is_trace(path: str) -> bool:
    return path.startswith("traces/") and is_trace_file(PurePosixPath(path).name)


@dataclass(frozen=True)
class RunDoc:
    run: str  # "<group>/<name>", the folder under traces/
    traces: tuple[str, ...]
    size: int
    config: dict[str, Any]
    environment: dict[str, Any]


@dataclass(frozen=True)
class EnvRow:
    key: str
    value: str  # one value, or the distinct values with the runs that had them


def _read_json(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # verify reports unreadable files; the card just has less to say
    return data if isinstance(data, dict) else {}


def describe_runs(files: Mapping[str, Path], sizes: Mapping[str, int]) -> list[RunDoc]:
    """One :class:`RunDoc` per folder under ``traces/`` holding traces, sorted by run id."""
    by_dir: dict[str, list[str]] = {}
    for path in files:
        if is_trace(path):
            by_dir.setdefault(str(PurePosixPath(path).parent), []).append(path)
    runs = []
    for folder, traces in sorted(by_dir.items()):
        run = folder[len("traces/") :] if folder != "traces" else "."
        runs.append(
            RunDoc(
                run=run,
                traces=tuple(sorted(traces, key=_rank_order)),
                size=sum(sizes.get(p, 0) for p in traces),
                config=_read_json(files.get(f"{folder}/{CONFIG_FILE}")),
                environment=_read_json(files.get(f"{folder}/{ENVIRONMENT_FILE}")),
            )
        )
    return runs


def _rank_order(path: str) -> tuple[int, str]:
    rank = trace_rank(PurePosixPath(path).name)
    return (rank if rank is not None else 1 << 30, path)


def _show(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and key.endswith("_bytes"):
        from muon_repro.hub.fsutil import human_size

        return f"{value} ({human_size(value)})"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def environment_rows(runs: list[RunDoc]) -> tuple[list[EnvRow], dict[str, str], dict[str, int]]:
    """(table rows, code blocks by key, list lengths by key) summarizing every run's environment."""
    values: dict[str, dict[str, list[str]]] = {}
    blocks: dict[str, str] = {}
    counts: dict[str, int] = {}
    for run in runs:
        for key, value in flatten(run.environment).items():
            if value is None or key in ENV_SKIP:
                continue
            if key in ENV_LISTS and isinstance(value, list):
                counts[key] = max(counts.get(key, 0), len(value))
            elif key in ENV_BLOCKS:
                blocks.setdefault(key, str(value))
            else:
                values.setdefault(key, {}).setdefault(_show(key, value), []).append(run.run)
    order = [k for k in ENV_ORDER if k in values] + sorted(k for k in values if k not in ENV_ORDER)
    rows = []
    for key in order:
        seen = values[key]
        if len(seen) == 1:
            rows.append(EnvRow(key, next(iter(seen))))
        else:
            rows.append(EnvRow(key, "; ".join(f"{v} ({len(r)} run{'s' if len(r) > 1 else ''})" for v, r in seen.items())))
    return rows, blocks, counts


def run_commands(runs: list[RunDoc]) -> list[str]:
    """The distinct command lines recorded in the runs' ``config.json`` (``command``), shell-quoted."""
    out: list[str] = []
    for run in runs:
        command = run.config.get("command")
        if isinstance(command, list) and command:
            line = shlex.join(str(c) for c in command)
        elif isinstance(command, str) and command.strip():
            line = command.strip()
        else:
            continue
        if line not in out:
            out.append(line)
    return out


def git_shas(runs: list[RunDoc]) -> list[str]:
    shas = []
    for run in runs:
        sha = run.environment.get("git_sha")
        if isinstance(sha, str) and sha and sha not in shas:
            shas.append(sha)
    return shas
