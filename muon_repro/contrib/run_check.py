"""Find the recorded runs under a folder and check that each one is complete, before it is contributed.

A run folder is a folder with ``config.json`` or one named ``trial<k>``, in either layout:
``<profile>/<group>/<name>/trial<k>/`` or the older ``<group>/<name>/trial<k>/``. Its place on
the Hub comes from its own files, never from where it lies (as the analysis reads it): the
profile from ``environment.json`` (:func:`muon_repro.hardware.profile_from_environment`), group
and name from ``config.json``, the trial from the folder's name::

    traces/<profile>/<group>/<name>/trial<k>/<file>

A run is complete when ``config.json`` gives its group, name and ``world_size``, every rank has a
trace that the analysis's reader parses (runs timed without the profiler, ``"profile": false``,
have none), ``metrics.json`` names every rank, ``environment.json`` gives a valid profile, and
``log.txt`` is there. A hidden ``.trial<k>.partial`` folder anywhere is a problem of its own: a
trial still being recorded, or one that was interrupted. Every problem names the file and what
to do about it.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from muon_repro.hardware import PROFILE_FIELD, profile_from_environment, run_key
from muon_repro.rundir import (
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    LOG_FILE,
    METRICS_FILE,
    TRIAL_PREFIX,
    RankMetrics,
    RunConfig,
    expected_files,
    is_hidden_under,
    read_json,
    trace_name,
    trace_rank,
    trial_of,
)

TRACES_ROOT = "traces"
_PARTIAL = re.compile(r"^\..+\.partial$")
RECORD_AGAIN = "delete the trial folder and record it again (`muon-repro bench <group>/<name>` redoes only missing trials)"


@dataclass(frozen=True)
class RunProblem:
    """Something that keeps a run from being contributed: the file (or folder), what is wrong and what to do."""

    path: Path
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@dataclass(frozen=True)
class LocalRun:
    """A complete run folder and where it goes in the dataset."""

    folder: Path
    profile: str
    group: str
    name: str
    trial: int
    files: tuple[str, ...]  # the names in ``folder`` that are contributed: the run's side files and traces

    @property
    def dest(self) -> str:
        """``traces/<profile>/<group>/<name>/trial<k>``: the run's folder in the dataset."""
        return f"{TRACES_ROOT}/{run_key(self.profile, self.group, self.name)}/{TRIAL_PREFIX}{self.trial}"


@dataclass
class RunScan:
    """The runs found under a folder, the problems found in them, and the files that belong to no run."""

    root: Path
    runs: list[LocalRun] = field(default_factory=list)
    problems: list[RunProblem] = field(default_factory=list)
    left_out: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.problems


def run_folders(root: Path) -> list[Path]:
    """Every non-hidden folder under ``root`` (``root`` included) holding ``config.json`` or named ``trial<k>``."""
    found = {c.parent for c in root.rglob(CONFIG_FILE)} | {
        d for d in root.rglob("trial*") if d.is_dir() and trial_of(d) is not None
    }
    if (root / CONFIG_FILE).is_file():
        found.add(root)
    return sorted(d for d in found if not is_hidden_under(d, root))


def partial_folders(root: Path) -> list[Path]:
    return sorted(d for d in root.rglob(".*") if d.is_dir() and _PARTIAL.match(d.name))


def _trace_problem(path: Path, rank: int) -> str | None:
    """Why the trace at ``path`` cannot stand for ``rank``, or None: it parses with the analysis's reader and is that rank's."""
    from muon_repro.analysis.errors import TraceError, TraceWarning
    from muon_repro.analysis.reader import read_trace

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)  # repaired events are the analysis's business, not a refusal
            meta = read_trace(path).meta
    except TraceError as exc:
        return f"does not parse as a profiler trace ({exc.problem}); {RECORD_AGAIN}"
    if meta.rank_source == "distributedInfo" and meta.rank != rank:
        return f"holds rank {meta.rank}'s trace, not rank {rank}'s; put each rank's trace under its own name"
    return None


def _config_problems(folder: Path, config: RunConfig) -> list[RunProblem]:
    where = folder / CONFIG_FILE
    problems = [RunProblem(where, f"has no {key!r}: {RECORD_AGAIN}") for key in ("group", "name") if not getattr(config, key)]
    if config.world_size is None or config.world_size < 1:
        problems.append(RunProblem(where, f"world_size is {config.world_size!r}, not a positive integer: {RECORD_AGAIN}"))
    return problems


def _environment_profile(folder: Path) -> tuple[str | None, list[RunProblem]]:
    where = folder / ENVIRONMENT_FILE
    environment = read_json(where)
    if environment is None:
        what = "missing" if not where.exists() else "not a JSON object"
        return None, [RunProblem(where, f"{what}: it records the hardware the run is filed under (its profile); {RECORD_AGAIN}")]
    if not environment.get(PROFILE_FIELD) and not environment.get("backend"):
        return None, [
            RunProblem(
                where,
                f"names neither a {PROFILE_FIELD!r} nor a 'backend', so the run's hardware profile is unknown; "
                f'add "{PROFILE_FIELD}": "<id>" (e.g. 4xA100-pcie-nccl) or {RECORD_AGAIN}',
            )
        ]
    try:
        return profile_from_environment(environment), []
    except ValueError as exc:
        return None, [RunProblem(where, f"{exc}; fix the {PROFILE_FIELD!r} field")]


def _metrics_problems(folder: Path, world_size: int) -> list[RunProblem]:
    where = folder / METRICS_FILE
    raw = read_json(where)
    if raw is None or not isinstance(raw.get("ranks"), list):
        what = "missing" if not where.exists() else "has no 'ranks' list"
        return [RunProblem(where, f"{what}: {RECORD_AGAIN}")]
    named = {RankMetrics.from_dict(entry, i).rank for i, entry in enumerate(raw["ranks"]) if isinstance(entry, dict)}
    problems = []
    if missing := sorted(set(range(world_size)) - named):
        problems.append(
            RunProblem(
                where,
                f"names no metrics for rank(s) {', '.join(map(str, missing))} of world_size {world_size} "
                f"(config.json): {RECORD_AGAIN}",
            )
        )
    if extra := sorted(r for r in named if r >= world_size):
        problems.append(
            RunProblem(
                where,
                f"names rank(s) {', '.join(map(str, extra))} beyond world_size {world_size} (config.json): "
                "the files come from different recordings; record the trial again",
            )
        )
    return problems


def _trace_problems(folder: Path, config: RunConfig, world_size: int) -> list[RunProblem]:
    if config.profile is False:  # timed without the profiler: no traces by design
        return []
    problems = []
    for rank in range(world_size):
        path = folder / trace_name(rank)
        if not path.is_file():
            problems.append(RunProblem(path, f"missing: every rank of world_size {world_size} writes a trace; {RECORD_AGAIN}"))
        elif (problem := _trace_problem(path, rank)) is not None:
            problems.append(RunProblem(path, problem))
    for path in sorted(folder.iterdir()):
        rank = trace_rank(path.name)
        if rank is not None and rank >= world_size:
            problems.append(RunProblem(path, f"rank {rank} is beyond world_size {world_size} (config.json): remove it"))
    return problems


def check_run(folder: Path) -> tuple[LocalRun | None, list[RunProblem]]:
    """The run in ``folder`` and where it goes, or None and every problem that keeps it from being contributed."""
    raw = read_json(folder / CONFIG_FILE)
    if raw is None:
        what = "missing" if not (folder / CONFIG_FILE).exists() else "not a JSON object"
        return None, [RunProblem(folder / CONFIG_FILE, f"{what}: this trial folder is incomplete; {RECORD_AGAIN}")]
    config = RunConfig.from_dict(raw)
    problems = _config_problems(folder, config)
    profile, env_problems = _environment_profile(folder)
    problems += env_problems
    if config.world_size is not None and config.world_size >= 1:
        problems += _metrics_problems(folder, config.world_size)
        problems += _trace_problems(folder, config, config.world_size)
    if not (folder / LOG_FILE).is_file():
        problems.append(RunProblem(folder / LOG_FILE, f"missing: every recorded trial has one; {RECORD_AGAIN}"))
    if problems or profile is None or config.world_size is None:
        return None, problems
    trial = trial_of(folder)
    trial = trial if trial is not None else (config.trial or 0)  # a run recorded without trial folders: config.json says
    files = tuple(expected_files(config.world_size, profiled=config.profile is not False))
    return LocalRun(folder, profile, str(config.group), str(config.name), trial, files), []


def scan_runs(root: str | Path) -> RunScan:
    """Every run under ``root``, checked; files that belong to no run are listed as left out."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder of runs (record some with `muon-repro bench`)")
    scan = RunScan(root)
    for folder in partial_folders(root):
        scan.problems.append(
            RunProblem(
                folder,
                "a trial still being recorded, or one that was interrupted: let it finish "
                "(run the same `muon-repro bench` again: complete trials are skipped) or delete the folder",
            )
        )
    for folder in run_folders(root):
        run, problems = check_run(folder)
        scan.problems += problems
        if run is not None:
            scan.runs.append(run)
    by_dest: dict[str, list[LocalRun]] = {}
    for run in scan.runs:
        by_dest.setdefault(run.dest, []).append(run)
    for dest, same in by_dest.items():
        if len(same) > 1:
            others = ", ".join(str(r.folder) for r in same[1:])
            scan.problems.append(
                RunProblem(same[0].folder, f"goes to {dest}/ as {others} does: renumber one trial folder (trial<k>)")
            )
    contributed = {run.folder / name for run in scan.runs for name in run.files}
    scan.left_out = sorted(p for p in root.rglob("*") if p.is_file() and p not in contributed)
    return scan
