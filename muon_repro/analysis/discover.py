"""Find trace files and the runs they belong to.

The benchmark writes one folder per trial of a run (its format is :mod:`muon_repro.rundir`'s):
``traces/<profile>/<group>/<name>/trial<k>/rank<r>.json.gz`` plus ``config.json``, ``metrics.json``,
``environment.json`` (older datasets: ``traces/<group>/<name>/trial<k>/``); trials of one run share its
key ``<profile>/<group>/<name>``, the profile read from environment.json (``unknown`` without one,
as for foreign traces), so a run's key does not depend on where its folder lies. Anything else (a lone
trace, a folder of foreign traces) is accepted too:
without ``config.json`` a folder's traces form one run when their ranks are distinct, else each
file is a run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muon_repro.analysis.errors import TraceError
from muon_repro.hardware import UNKNOWN_PROFILE, run_key
from muon_repro.provenance import is_generated
from muon_repro.run_records import RankMetrics, RunConfig, record_problems
from muon_repro.rundir import (
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    METRICS_FILE,
    RUN_FILES,
    RunDir,
    SideFileError,
    is_study_folder,
    is_trace_file,
    protocol_of,
    trial_folders,
    trial_of,
)
from muon_repro.values import is_count


def is_trace_name(path: Path) -> bool:
    return is_trace_file(path.name)


def no_traces_error(directory: str | Path) -> TraceError:
    """The error for a directory that holds no trace file, saying which names are looked for."""
    return TraceError(
        directory,
        "no trace files found: looked for *.json and *.json.gz files in it and every subfolder, except "
        f"{', '.join(n for n in RUN_FILES if n.endswith('.json'))} and hidden files and folders",
    )


def read_by_study(folder: Path) -> bool:
    """Whether ``folder``'s traces are read by :mod:`muon_repro.study`: the original study's imported traces, or a
    run of its protocol recorded here (config.json's ``protocol``)."""
    return is_study_folder(folder) or protocol_of(folder) is not None


def folder_links(root: str | Path) -> list[Path]:
    """The links to folders inside the folder ``root``, which the search for traces does not follow (a link could
    lead out of the tree or loop back into it): each is said, never silently skipped."""
    found = []
    for dirpath, dirnames, _ in os.walk(root, followlinks=False):
        found += [Path(dirpath) / d for d in sorted(dirnames) if (Path(dirpath) / d).is_symlink()]
    return found


def check_record_fields(config: dict[str, Any]) -> None:
    """Refuse a config.json whose integer fields break the run records' rules (``world_size: 2.9``, ``"2"``,
    ``-2``: :func:`~muon_repro.run_records.int_field_problem`, the rules a review applies to a contribution): read
    as absent, the traces' own count would stand in for it and a broken run would pass as a good one."""
    if problems := record_problems(config):
        raise ValueError(f"config.json: {'; '.join(problems)}")


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
            study: dict[Path, bool] = {}  # per folder, whether muon_repro.study reads it

            def study_folder(folder: Path, study: dict[Path, bool] = study) -> bool:
                if folder not in study:
                    study[folder] = read_by_study(folder)
                return study[folder]

            candidates = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and is_trace_name(p)
                and not is_generated(p.relative_to(path).as_posix())  # a trial being recorded, a cache: no one's run
                and not study_folder(p.parent)
            )
        else:
            raise TraceError(path, "no such file or directory")
        for p in candidates:
            key = p.resolve()
            if key not in seen:
                seen.add(key)
                found.append(p)
    return found


@dataclass
class RunInfo:
    """One run: a folder's traces plus what its side files say (all empty for foreign traces)."""

    path: Path
    group: str
    name: str
    config: RunConfig = field(default_factory=RunConfig)
    ranks: dict[int, RankMetrics] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    has_config: bool = False
    trial: int = 0  # which recording of the configuration this folder holds
    profile: str = UNKNOWN_PROFILE  # the hardware profile (muon_repro.hardware), from environment.json

    @property
    def key(self) -> str:
        return run_key(self.profile, self.group, self.name)

    def group_sizes(self) -> dict[str, int]:
        """Group-size hints for the analysis: ``{"dp": d, "tp": t}`` from the config."""
        return {k: v for k in ("dp", "tp") if (v := getattr(self.config, k)) is not None and v > 0}

    def rank(self, rank: int) -> RankMetrics | None:
        return self.ranks.get(rank)

    def missing_ranks(self, ranks: Iterable[int]) -> list[int]:
        """The ranks of config.json's ``world_size`` that ``ranks`` lacks (none for a folder without one)."""
        world_size = self.config.world_size if self.has_config else None
        return sorted(set(range(world_size)) - set(ranks)) if world_size else []


def run_info_for(trial: Path | RunDir) -> RunInfo:
    """The run a folder stands for, from its side files if it has them (a :class:`RunDir` already read is not read
    again). A side file that is there but cannot be read raises its :class:`~muon_repro.rundir.SideFileError`: read
    as absent (as a foreign folder's are), the run's optimizer and grid, profile or timed steps would be unknown and
    its rows would join the tables with them so. So is a missing config.json beside environment.json or
    metrics.json (a recording of ours, not a foreign folder)."""
    run_dir = trial if isinstance(trial, RunDir) else RunDir(trial)
    directory = run_dir.path
    for problem in run_dir.unreadable_side_files().values():
        raise problem
    recorded = [name for name in (ENVIRONMENT_FILE, METRICS_FILE) if (directory / name).exists()]
    if recorded and not (directory / CONFIG_FILE).exists():  # a recording's trial, not a foreign folder
        missing = f"missing beside its {' and '.join(recorded)} (a recorded trial holds all three)"
        raise SideFileError(directory / CONFIG_FILE, missing)
    config_dict = run_dir.config_dict
    check_record_fields(config_dict)
    config = RunConfig.from_dict(config_dict)
    run_folder = directory.parent if trial_of(directory) is not None else directory  # <group>/<name>[/trial<k>]
    return RunInfo(
        profile=run_dir.profile,
        path=directory,
        group=config.group or run_folder.parent.name,
        name=config.name or run_folder.name,
        trial=run_dir.trial,  # the folder's number first: a renamed trial keeps its own
        config=config,
        ranks={m.rank: m for m in run_dir.ranks},
        environment=run_dir.environment,
        has_config=bool(config_dict),
    )


def left_out_unreadable(problem: SideFileError) -> str:
    """What the analysis says of a trial left out because a side file of it cannot be read."""
    name = Path(problem.path).name
    return (
        f"{problem}; the trial is left out (without its {name}, its {_SIDE_FILE_HOLDS.get(name, 'records')} would be "
        "unknown): restore the file, or record the run again"
    )


_SIDE_FILE_HOLDS = {
    CONFIG_FILE: "optimizer, grid and settings",
    ENVIRONMENT_FILE: "hardware profile",
    METRICS_FILE: "timed steps and state",
}


def timed_only_trials(paths: Iterable[str | Path]) -> list[RunDir]:
    """The trial folders under the folders among ``paths`` that a sweep recorded in an untraced round: config
    ``profile`` false with timed steps (:meth:`muon_repro.bench.configs.BenchConfig.timed_only`), each once; and the
    untraced ones whose side files cannot be read, which :func:`run_info_for` then refuses by name. Each comes as
    the :class:`RunDir` it was found by, its side files read."""
    found: dict[Path, RunDir] = {}
    for raw in paths:
        root = Path(raw)
        if not root.is_dir():
            continue
        for folders in trial_folders(root).values():
            for folder in folders:
                run_dir = RunDir(folder)
                traced = any(is_trace_file(f.name) for f in folder.iterdir())  # read with its traces, refused there
                config = run_dir.config_dict
                timed = config.get("timed_steps")
                if (config.get("profile") is False and is_count(timed)) or (not traced and run_dir.unreadable_side_files()):
                    found.setdefault(folder.resolve(), run_dir)
    return list(found.values())
