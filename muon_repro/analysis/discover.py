"""Find trace files and the runs they belong to.

The benchmark writes one directory per run: ``traces/<group>/<name>/rank<r>.json.gz`` plus
``config.json`` (group, name, optimizer, layout, dp, tp, backend, device, ...) and
``metrics.json`` (per rank: ``state_bytes``, the byte ledger, peak memory, ...). Anything
else (a lone trace, a directory of foreign traces) is accepted too: without ``config.json``
a directory's traces form one run when their ranks are distinct, else each file is a run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muon_repro.analysis.errors import TraceError

NON_TRACE_FILES = frozenset({"config.json", "metrics.json", "environment.json", "manifest.json", "dataset_info.json"})


def is_trace_name(path: Path) -> bool:
    name = path.name
    return name.endswith((".json", ".json.gz")) and name not in NON_TRACE_FILES and not name.startswith(".")


def find_traces(paths: list[str | Path]) -> list[Path]:
    """Trace files named by ``paths``: files as given, directories searched recursively.

    A path that does not exist raises :class:`TraceError`; a directory with no traces is
    simply empty. Order is stable (sorted within each directory tree).
    """
    found: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and is_trace_name(p) and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        else:
            raise TraceError(path, "no such file or directory")
        for p in candidates:
            key = p.resolve()
            if key not in seen:
                seen.add(key)
                found.append(p)
    return found


def _read_json(path: Path) -> dict | None:
    """A small JSON side file (config.json, metrics.json); ``None`` if absent or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda _: None)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


@dataclass
class RunInfo:
    """One run: a directory's traces plus whatever ``config.json`` / ``metrics.json`` say."""

    path: Path
    group: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}" if self.group else self.name

    def get(self, key: str) -> Any:
        return self.config.get(key)

    def int_config(self, key: str) -> int | None:
        value = self.config.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def str_config(self, key: str) -> str | None:
        value = self.config.get(key)
        return str(value) if value is not None and not isinstance(value, (dict, list)) else None

    def group_sizes(self) -> dict[str, int]:
        """Group-size hints for the analysis: ``{"dp": d, "tp": t}`` from the config."""
        return {k: v for k in ("dp", "tp") if (v := self.int_config(k)) is not None and v > 0}

    def rank_metrics(self) -> dict[int, dict[str, Any]]:
        """``metrics.json`` per rank (its ``ranks`` list, keyed by each entry's ``rank``)."""
        out: dict[int, dict[str, Any]] = {}
        ranks = self.metrics.get("ranks")
        if isinstance(ranks, list):
            for i, entry in enumerate(ranks):
                if isinstance(entry, dict):
                    r = entry.get("rank", i)
                    out[r if isinstance(r, int) else i] = entry
        return out

    def state_bytes(self, rank: int) -> int | None:
        """Optimizer-state bytes of one rank (a number, or a dict summed over its values)."""
        value = self.rank_metrics().get(rank, {}).get("state_bytes")
        return _as_bytes(value)

    def peak_memory_bytes(self, rank: int) -> int | None:
        entry = self.rank_metrics().get(rank, {})
        return _as_bytes(entry.get("peak_memory_bytes", entry.get("peak_mem_bytes")))

    def peak_memory_source(self, rank: int) -> str | None:
        value = self.rank_metrics().get(rank, {}).get("peak_memory_source")
        return str(value) if value else None

    def ledger(self, rank: int) -> list[dict]:
        value = self.rank_metrics().get(rank, {}).get("ledger")
        return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _as_bytes(value: Any) -> int | None:
    if isinstance(value, dict):
        parts = [_as_bytes(v) for v in value.values()]
        parts = [p for p in parts if p is not None]
        return sum(parts) if parts else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value) if 0 <= value < 2**63 else None


def run_info_for(directory: Path) -> RunInfo:
    """The run a directory stands for, from its ``config.json`` if it has one."""
    config = _read_json(directory / "config.json") or {}
    metrics = _read_json(directory / "metrics.json") or {}
    group = config.get("group") if isinstance(config.get("group"), str) else directory.parent.name
    name = config.get("name") if isinstance(config.get("name"), str) else directory.name
    return RunInfo(path=directory, group=group, name=name, config=config, metrics=metrics)
