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

The same checks run on a pull request's downloaded runs (``review``), so everything here treats the
files as a stranger's: ``config.json``'s numbers are range-checked before anything is sized by them
(:mod:`muon_repro.contrib.config_check`), each file's size is checked before it is read
(:mod:`muon_repro.contrib.limits`), and names are printed escaped. A symbolic link, or anything but a
regular file or folder, anywhere under the runs folder is refused and its folder is not read: a
link could upload a file from outside the folder.
"""

from __future__ import annotations

import os
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muon_repro.contrib.config_check import RECORD_AGAIN, check_config
from muon_repro.contrib.limits import MAX_TRACE_EXPANSION, MAX_TRIAL, MAX_WORLD_SIZE, binary_size, file_limit, trace_allowance
from muon_repro.contrib.untrusted import describe_ranks, profile_problem, shown
from muon_repro.hardware import PROFILE_FIELD, described_profiles, profile_from_environment, run_key
from muon_repro.rundir import (
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    LOG_FILE,
    METRICS_FILE,
    PROTOCOL_FIELD,
    PROTOCOL_RUN_FILES,
    RUN_FILES,
    STUDY_PROTOCOLS,
    TRIAL_PREFIX,
    RankMetrics,
    RunConfig,
    SideFileError,
    expected_files,
    is_hidden_under,
    load_json,
    protocol_group,
    trace_name,
    trace_rank,
    trial_of,
)
from muon_repro.tables.files import human_size

TRACES_ROOT = "traces"
_PARTIAL = re.compile(r"^\..+\.partial$")
# Missing traces listed one problem each up to this many; more are one problem with their ranges (a run of
# world_size 1,000 without traces is one line, not 1,000).
MAX_LISTED_MISSING = 8

__all__ = ["RECORD_AGAIN", "TRACES_ROOT", "LocalRun", "RunProblem", "RunScan", "check_run", "scan_runs"]


@dataclass(frozen=True)
class RunProblem:
    """Something that keeps a run from being contributed: the file (or folder), what is wrong and what to do."""

    path: Path
    problem: str

    def __str__(self) -> str:
        return f"{shown(self.path)}: {self.problem}"


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


@dataclass(frozen=True)
class _Tree:
    """What lies under a runs folder, links not followed: its folders, its regular files, and everything else."""

    folders: list[Path]
    files: list[Path]
    refused: list[RunProblem]  # symbolic links, devices, pipes, sockets: one problem each


def _walk(root: Path) -> _Tree:
    folders, files, refused = [root], [], []
    for top, dir_names, file_names in os.walk(root, followlinks=False):
        for name in sorted(dir_names + file_names):
            path = Path(top, name)
            if path.is_symlink():
                refused.append(
                    RunProblem(
                        path,
                        f"is a symbolic link (to {shown(os.readlink(path))}): contribute uploads only files that lie in the "
                        "runs folder; put a copy of the file in its place, or remove the link",
                    )
                )
            elif path.is_dir():
                folders.append(path)
            elif path.is_file():
                files.append(path)
            else:
                refused.append(RunProblem(path, "is not a regular file (a device, pipe or socket): remove it from --runs"))
    return _Tree(sorted(folders), sorted(files), refused)


def run_folders(root: Path, tree: _Tree | None = None) -> list[Path]:
    """Every non-hidden folder under ``root`` (``root`` included) holding ``config.json`` or named ``trial<k>``."""
    tree = tree or _walk(root)
    found = {f.parent for f in tree.files if f.name == CONFIG_FILE} | {d for d in tree.folders if trial_of(d) is not None}
    return sorted(d for d in found if not is_hidden_under(d, root))


def partial_folders(root: Path, tree: _Tree | None = None) -> list[Path]:
    tree = tree or _walk(root)
    return [d for d in tree.folders if d != root and _PARTIAL.match(d.name)]


def _trace_problem(path: Path, rank: int) -> str | None:
    """Why the trace at ``path`` cannot stand for ``rank``, or None: it parses with the analysis's reader and is that rank's."""
    from muon_repro.analysis.errors import TraceError, TraceLimitError, TraceWarning
    from muon_repro.analysis.limits import TraceLimits
    from muon_repro.analysis.reader import read_trace

    allowed = min(TraceLimits().max_trace_bytes, trace_allowance(path.stat().st_size))  # a gzip bomb stops early
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)  # repaired events are the analysis's business, not a refusal
            meta = read_trace(path, limits=TraceLimits(max_trace_bytes=allowed)).meta
    except TraceLimitError as exc:
        return (
            f"past a limit of the trace reader ({shown(exc.problem.split(': past', 1)[0][:200])}); a contributed trace "
            f"may decompress to {MAX_TRACE_EXPANSION} times its compressed size, here {human_size(allowed)} "
            f"(docs/contributing.md, Limits); {RECORD_AGAIN}"
        )
    except TraceError as exc:
        return f"does not parse as a profiler trace ({shown(exc.problem[:500])}); {RECORD_AGAIN}"
    if meta.rank_source == "distributedInfo" and meta.rank != rank:
        return f"holds rank {meta.rank}'s trace, not rank {rank}'s; put each rank's trace under its own name"
    return None


def _too_large(path: Path) -> str | None:
    """Why ``path`` is too large to read, or None (no limit for its name, or within it)."""
    limit = file_limit(path.name)
    size = path.stat().st_size if limit is not None and path.is_file() else 0
    if limit is None or size <= limit:
        return None
    return (
        f"{human_size(size)} ({size} bytes), more than the {binary_size(limit)} a file of its kind may be "
        f"(docs/contributing.md, Limits): {RECORD_AGAIN}"
    )


def read_side_file(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A run's JSON side file as (object, None), or (None, why not): missing, larger than a file of its kind may be,
    or what the analysis would refuse it for (:func:`muon_repro.rundir.load_json`: not UTF-8 JSON, nested deeper
    than a record, not an object), so that a contribution checked here is one the analysis reads."""
    if not path.exists():
        return None, "missing"
    if not path.is_file():
        return None, "not a regular file"
    if (too_large := _too_large(path)) is not None:
        return None, too_large
    try:
        return load_json(path), None
    except SideFileError as exc:
        return None, exc.problem


def _environment_profile(folder: Path, config_backend: Any) -> tuple[str | None, list[RunProblem]]:
    """The profile ``environment.json`` files the run under, or the problems that keep it from being one: a stated
    profile the file's own hardware fields do not describe (the profile decides which runs pool and compare), or a
    backend other than ``config.json``'s."""
    where = folder / ENVIRONMENT_FILE
    environment, why_not = read_side_file(where)
    if environment is None:
        return None, [
            RunProblem(where, f"{why_not}: it records the hardware the run is filed under (its profile); {RECORD_AGAIN}")
        ]
    if not environment.get(PROFILE_FIELD) and not environment.get("backend"):
        return None, [
            RunProblem(
                where,
                f"names neither a {PROFILE_FIELD!r} nor a 'backend', so the run's hardware profile is unknown; "
                f'add "{PROFILE_FIELD}": "<id>" (e.g. 4xA100-pcie-nccl) or {RECORD_AGAIN}',
            )
        ]
    try:
        profile = profile_from_environment(environment)
    except (ValueError, TypeError) as exc:
        return None, [RunProblem(where, f"{shown(str(exc)[:300])}; fix the {PROFILE_FIELD!r} field")]
    if (problem := profile_problem(profile, f"its {PROFILE_FIELD}")) is not None:
        return None, [RunProblem(where, f"{problem}; fix the {PROFILE_FIELD!r} field")]
    problems = []
    described = described_profiles(environment)
    if described is not None and profile not in described:
        said = " or ".join(shown(p) for p in sorted(described))
        problems.append(
            RunProblem(
                where,
                f"files the run under profile {shown(profile)}, but its hardware fields (backend, accelerator, counts) "
                f"describe {said}: runs pool and compare by profile, so a run is filed under the hardware it ran on; "
                f"set {PROFILE_FIELD!r} to what they describe, or {RECORD_AGAIN}",
            )
        )
    backend = environment.get("backend")
    if backend and config_backend and str(backend).lower() != str(config_backend).lower():
        problems.append(
            RunProblem(
                where,
                f"says backend {shown(str(backend))}, but config.json says {shown(str(config_backend))}: the two files "
                f"come from different recordings; {RECORD_AGAIN}",
            )
        )
    return (None if problems else profile), problems


def _metrics_problems(folder: Path, world_size: int) -> list[RunProblem]:
    where = folder / METRICS_FILE
    raw, why_not = read_side_file(where)
    if raw is None or not isinstance(raw.get("ranks"), list):
        return [RunProblem(where, f"{why_not or 'has no ranks list'}: {RECORD_AGAIN}")]
    if len(raw["ranks"]) > MAX_WORLD_SIZE:  # before reading each entry: the list may be long
        return [RunProblem(where, f"lists {len(raw['ranks'])} ranks, more than world_size {world_size}: {RECORD_AGAIN}")]
    entries = raw["ranks"]
    if not all(isinstance(entry, dict) for entry in entries):
        return [RunProblem(where, f"its ranks list holds entries that are no objects (one per rank): {RECORD_AGAIN}")]
    ranks = [RankMetrics.from_dict(entry, i).rank for i, entry in enumerate(entries)]
    named = set(ranks)
    problems = []
    if repeated := {r for r, n in Counter(ranks).items() if n > 1}:  # the analysis keeps the last: which is a guess
        problems.append(RunProblem(where, f"names rank(s) {describe_ranks(repeated)} more than once: {RECORD_AGAIN}"))
    if negative := {r for r in named if r < 0}:
        problems.append(RunProblem(where, f"names rank(s) {describe_ranks(negative)}, below 0: {RECORD_AGAIN}"))
    if missing := set(range(world_size)) - named:
        problems.append(
            RunProblem(
                where,
                f"names no metrics for rank(s) {describe_ranks(missing)} of world_size {world_size} (config.json): "
                + RECORD_AGAIN,
            )
        )
    if extra := {r for r in named if r >= world_size}:
        problems.append(
            RunProblem(
                where,
                f"names rank(s) {describe_ranks(extra)} beyond world_size {world_size} (config.json): "
                "the files come from different recordings; record the trial again",
            )
        )
    return problems


def _trace_problems(folder: Path, profiled: bool, world_size: int) -> list[RunProblem]:
    if not profiled:  # timed without the profiler: no traces by design
        return []
    problems = []
    missing = [rank for rank in range(world_size) if not (folder / trace_name(rank)).is_file()]
    if len(missing) > MAX_LISTED_MISSING:
        problems.append(
            RunProblem(
                folder,
                f"has no trace for ranks {describe_ranks(missing)} of world_size {world_size}: every rank writes "
                f"rank<r>.json.gz; {RECORD_AGAIN}",
            )
        )
    else:
        problems += [
            RunProblem(folder / trace_name(r), f"missing: every rank of world_size {world_size} writes a trace; {RECORD_AGAIN}")
            for r in missing
        ]
    for rank in (r for r in range(world_size) if r not in missing):
        path = folder / trace_name(rank)
        problem = _too_large(path) or _trace_problem(path, rank)
        if problem is not None:
            problems.append(RunProblem(path, problem))
    beyond = [(rank, p) for p in folder.iterdir() if (rank := trace_rank(p.name)) is not None and rank >= world_size]
    beyond_problem = f"is beyond world_size {world_size} (config.json): remove it"
    problems += [RunProblem(path, f"rank {rank} {beyond_problem}") for rank, path in sorted(beyond)]
    return problems


def check_run(folder: Path) -> tuple[LocalRun | None, list[RunProblem]]:
    """The run in ``folder`` and where it goes, or None and every problem that keeps it from being contributed."""
    raw, why_not = read_side_file(folder / CONFIG_FILE)
    if raw is None:
        return None, [RunProblem(folder / CONFIG_FILE, f"{why_not}: this trial folder is incomplete; {RECORD_AGAIN}")]
    checked = check_config(raw)
    problems = [RunProblem(folder / CONFIG_FILE, p) for p in checked.problems]
    profile, env_problems = _environment_profile(folder, raw.get("backend"))
    problems += env_problems
    protocol = raw.get(PROTOCOL_FIELD) if raw.get(PROTOCOL_FIELD) in STUDY_PROTOCOLS else None
    profiled = raw.get("profile") is not False  # false: timed without the profiler, no traces
    if checked.world_size is not None:
        if protocol is None:  # a study protocol's run keeps no metrics.json (its traces hold its times)
            problems += _metrics_problems(folder, checked.world_size)
        elif checked.group is not None and checked.group != protocol_group(protocol, checked.world_size):
            problems.append(
                RunProblem(
                    folder / CONFIG_FILE,
                    f"its protocol {protocol!r} on {checked.world_size} rank(s) files its runs under group "
                    f"{protocol_group(protocol, checked.world_size)}, not {shown(checked.group)}: {RECORD_AGAIN}",
                )
            )
        problems += _trace_problems(folder, profiled, checked.world_size)
    log = folder / LOG_FILE
    if protocol is None:  # the protocol's recorder writes no log.txt
        if not log.is_file():
            problems.append(RunProblem(log, f"missing: every recorded trial has one; {RECORD_AGAIN}"))
        elif (too_large := _too_large(log)) is not None:
            problems.append(RunProblem(log, too_large))
    if problems or profile is None or checked.world_size is None or checked.group is None or checked.name is None:
        return None, problems
    trial = trial_of(folder)
    trial = trial if trial is not None else (RunConfig.from_dict(raw).trial or 0)  # recorded without trial folders
    if trial > MAX_TRIAL:
        return None, [RunProblem(folder, f"trial {trial} is beyond {MAX_TRIAL} (docs/contributing.md, Limits): renumber it")]
    side_files = RUN_FILES if protocol is None else PROTOCOL_RUN_FILES
    files = tuple(expected_files(checked.world_size, profiled=profiled, side_files=side_files))
    return LocalRun(folder, profile, checked.group, checked.name, trial, files), []


def scan_runs(root: str | Path) -> RunScan:
    """Every run under ``root``, checked; files that belong to no run are listed as left out.

    A folder holding a symbolic link (or a device, pipe or socket) is not read: the link is the problem.
    """
    root = Path(root)
    if not root.is_dir():
        said = "a file, not a folder of runs" if root.exists() else "no such folder of runs"
        raise FileNotFoundError(f"{shown(root)}: {said} (record some with `muon-repro bench`)")
    tree = _walk(root)
    scan = RunScan(root, problems=list(tree.refused))
    unread = {p.path.parent for p in tree.refused}
    for folder in partial_folders(root, tree):
        scan.problems.append(
            RunProblem(
                folder,
                "a trial still being recorded, or one that was interrupted: let it finish "
                "(run the same `muon-repro bench` again: complete trials are skipped) or delete the folder",
            )
        )
    for folder in run_folders(root, tree):
        if folder in unread:
            continue
        run, problems = check_run(folder)
        scan.problems += problems
        if run is not None:
            scan.runs.append(run)
    by_dest: dict[str, list[LocalRun]] = {}
    for run in scan.runs:
        by_dest.setdefault(run.dest, []).append(run)
    for dest, same in by_dest.items():
        if len(same) > 1:
            others = ", ".join(shown(r.folder) for r in same[1:])
            scan.problems.append(
                RunProblem(same[0].folder, f"goes to {dest}/ as {others} does: renumber one trial folder (trial<k>)")
            )
    contributed = {run.folder / name for run in scan.runs for name in run.files}
    scan.left_out = [p for p in tree.files if p not in contributed]
    return scan
