"""Analyze many trace files at once: one process per file, failures collected, not raised.

A run of N ranks has N trace files; they are read in parallel worker processes (``spawn``,
so it is safe from a process that has started threads, e.g. one that imported torch). A
single file is analyzed in this process, with its pieces decoded in parallel instead when
it is large. A bad file becomes a :class:`TraceFailure` (path and problem) and never stops
the others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from muon_repro.analysis.breakdown import TraceBreakdown, analyze_file
from muon_repro.analysis.discover import RunInfo, find_traces, run_info_for
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.pool import map_in_processes

SMALL_TOTAL_BYTES = 16 * 2**20  # below this, worker start-up costs more than it saves
# Decoding one file's pieces in parallel pays from 2 processes on: the reading process decodes
# its share of the pieces too (scan.scan_parallel). On the 2-core machine this was measured on,
# a 1 GB trace read in ~3.0 s with 2 processes against ~5.2 s with 1 (quiet machine; with the
# cores busy with other work, 2 processes can be slower).
PIECE_PARALLEL_MIN_WORKERS = 2


@dataclass(frozen=True)
class TraceFailure:
    """A file that could not be analyzed, and why (the message names the file)."""

    path: str
    message: str


@dataclass
class Analysis:
    """Every trace found under the given paths, grouped into runs, plus the failures."""

    runs: list[tuple[RunInfo, list[TraceBreakdown]]] = field(default_factory=list)
    failures: list[TraceFailure] = field(default_factory=list)

    @property
    def breakdowns(self) -> list[TraceBreakdown]:
        return [b for _, items in self.runs for b in items]


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def _analyze_job(path: str, rank: int | None, group_sizes: dict[str, int], workers: int) -> TraceBreakdown | TraceFailure:
    try:
        return analyze_file(path, rank=rank, workers=workers, group_sizes=group_sizes)
    except TraceError as exc:
        return TraceFailure(path, str(exc))
    except (ValueError, OSError, UnicodeError, MemoryError) as exc:
        return TraceFailure(path, f"{path}: {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug on one file must not lose the other files' results
        return TraceFailure(path, f"{path}: internal error ({type(exc).__name__}: {exc}); please report it with this trace")


def analyze_paths(paths: list[str | Path], *, workers: int | None = None, rank: int | None = None) -> Analysis:
    """Find, read and break down every trace under ``paths``; group them into runs.

    ``rank`` is the fallback rank for files that have neither ``distributedInfo`` nor a rank
    in their name. ``workers`` bounds the processes used (default: the CPU count, at most 8).
    """
    workers = workers or default_workers()
    analysis = Analysis()
    files: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        try:
            found = find_traces([p])
        except TraceError as exc:
            analysis.failures.append(TraceFailure(str(p), str(exc)))
            continue
        for f in found:
            if f.resolve() not in seen:
                seen.add(f.resolve())
                files.append(f)
    infos: dict[Path, RunInfo] = {}
    jobs = []
    for f in files:
        info = infos.setdefault(f.parent, run_info_for(f.parent))
        jobs.append((str(f), rank, info.group_sizes()))

    total = sum(f.stat().st_size for f in files if f.exists())
    if len(jobs) > 1 and workers > 1 and total > SMALL_TOTAL_BYTES:
        results = map_in_processes(
            _analyze_job, [(*job, 1) for job in jobs], workers,
            on_error=lambda job, exc: TraceFailure(job[0], f"{job[0]}: worker failed ({type(exc).__name__}: {exc})"),
        )  # fmt: skip
    else:
        per_file_workers = workers if len(jobs) == 1 and workers >= PIECE_PARALLEL_MIN_WORKERS else 1
        results = [_analyze_job(*job, per_file_workers) for job in jobs]

    by_dir: dict[Path, list[TraceBreakdown]] = {}
    for f, result in zip(files, results):
        if isinstance(result, TraceFailure):
            analysis.failures.append(result)
        else:
            by_dir.setdefault(f.parent, []).append(result)
    for directory, items in by_dir.items():
        analysis.runs.extend(_group_runs(infos[directory], items))
    return analysis


def _group_runs(info: RunInfo, items: list[TraceBreakdown]) -> list[tuple[RunInfo, list[TraceBreakdown]]]:
    """A directory's traces as one run, unless (without config.json) their ranks collide."""
    ranks = [b.meta.rank for b in items]
    one_job = len({(b.meta.world_size, b.meta.backend) for b in items}) == 1 and len(set(ranks)) == len(ranks)
    if info.has_config or one_job:
        return [(info, sorted(items, key=lambda b: b.meta.rank))]
    out = []
    for b in items:
        name = Path(b.meta.path).name.removesuffix(".gz").removesuffix(".json")
        out.append((RunInfo(path=Path(b.meta.path), group=info.path.name, name=name), [b]))
    return out
