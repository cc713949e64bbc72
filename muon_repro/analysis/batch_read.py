"""Analyze many trace files at once: one process per file, failures collected, not raised; and
the process pool that runs them (:func:`map_in_processes`).

A run of N ranks has N trace files; they are read in parallel worker processes (``spawn``,
so it is safe from a process that has started threads, e.g. one that imported torch). A
single file is analyzed in this process, with its pieces decoded in parallel instead when
it is large. A bad file becomes a :class:`TraceFailure` (path and problem) and never stops
the others.

The pool's function must catch its own errors and return them as values: a result is never
lost to another input's failure. Only a pool that cannot run at all (the calling script has no
``__main__`` guard, or a worker was killed) sends the inputs it left undone back to this process.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import shlex
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from muon_repro.analysis.breakdown import TraceBreakdown, analyze_file
from muon_repro.analysis.convergence import find_records
from muon_repro.analysis.costmodel_tables import has_costmodel_inputs
from muon_repro.analysis.discover import (
    RunInfo,
    find_traces,
    folder_links,
    left_out_unreadable,
    no_traces_error,
    run_info_for,
    timed_only_trials,
)
from muon_repro.analysis.errors import TraceError, TraceWarning
from muon_repro.analysis.limits import TraceLimits
from muon_repro.analysis.parallel_scan import default_workers
from muon_repro.hardware import UNKNOWN_PROFILE
from muon_repro.run_records import CUSTOM_GROUP, DEFAULT_SCALE
from muon_repro.rundir import TRIAL_PREFIX, RunDir, SideFileError, trace_name, trial_of
from muon_repro.values import counted

SMALL_TOTAL_BYTES = 16 * 2**20  # below this, worker start-up costs more than it saves
# Decoding one file's pieces in parallel pays from 2 processes on: the reading process decodes
# its share of the pieces too (parallel_scan.scan_parallel). On the 2-core machine this was measured on,
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
    """Every trace found under the given paths, grouped into runs, plus the failures.

    ``failures`` names each file that could not be read and each trial folder left out (a side file that is there
    but unreadable, side files that describe no run, two files of one rank, a configuration other than its run's
    first trial's). ``incomplete`` names each run folder
    whose ``config.json`` promises more ranks than were analyzed (a trace missing, unreadable or not among the
    paths given): such a folder is no run. Its traces are analyzed one by one, each a run of its own without the
    folder's configuration, so that no table pools the ranks it has and no comparison or claim uses them. It also
    names the trials timed without traces that have no run to join (no traced trial of theirs was analyzed) or lack
    a rank's timed steps.
    """

    runs: list[tuple[RunInfo, list[TraceBreakdown]]] = field(default_factory=list)
    # trials recorded without traces in the rounds after a run's traced ones (config profile false, with
    # timed steps): their steps timed without the profiler join the traced trials' in the timed_steps table
    timed_only: list[RunInfo] = field(default_factory=list)
    # trials of runs recorded without any trace (every round untraced: a step whose trace would be too large to
    # keep); their runs are rows of the runs table with the timed columns and no trace-derived ones
    timed_runs: list[RunInfo] = field(default_factory=list)
    failures: list[TraceFailure] = field(default_factory=list)
    incomplete: list[TraceFailure] = field(default_factory=list)
    # what was analyzed: the cost model's and convergence records are found under them
    paths: list[Path] = field(default_factory=list)
    # runs holding fewer trials than their sweep asked for (a sweep cut short): said, not failed; their trials count
    notes: list[str] = field(default_factory=list)
    workers: int | None = None  # the reading processes it was given; the study's runs beside its traces are read by as many

    @property
    def has_records(self) -> bool:
        """Whether the paths hold convergence or cost-model records, which make tables without any trace."""
        return bool(find_records(self.paths)) or has_costmodel_inputs(self.paths) or has_study_runs(self.paths)

    @property
    def breakdowns(self) -> list[TraceBreakdown]:
        return [b for _, items in self.runs for b in items]


def check_options(*, workers: int | None, rank: int | None) -> None:
    """Refuse a worker count below 1 or a negative fallback rank, naming the value."""
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be 1 or more (processes reading traces), got {workers}")
    if rank is not None and rank < 0:
        raise ValueError(f"rank must be 0 or more (a global rank), got {rank}")


def _analyze_job(
    path: str, rank: int | None, group_sizes: dict[str, int], limits: TraceLimits, workers: int
) -> TraceBreakdown | TraceFailure:
    try:
        # The messages travel in the breakdown's ``warnings`` and are raised by the caller, in
        # this process, whichever process analyzed the file (a worker's warnings go unseen).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)
            return analyze_file(path, rank=rank, workers=workers, group_sizes=group_sizes, limits=limits)
    except TraceError as exc:
        return TraceFailure(path, str(exc))
    except (ValueError, OSError, UnicodeError, MemoryError) as exc:
        return TraceFailure(path, f"{path}: {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug on one file must not lose the other files' results
        return TraceFailure(path, f"{path}: internal error ({type(exc).__name__}: {exc}); please report it with this trace")


def analyze_paths(
    paths: list[str | Path], *, workers: int | None = None, rank: int | None = None, limits: TraceLimits | None = None
) -> Analysis:
    """Find, read and break down every trace under ``paths``; group them into runs.

    ``rank`` is the fallback rank for files that have neither ``distributedInfo`` nor a rank
    in their name. ``workers`` bounds the processes used (default: the CPU count, at most 8).
    ``limits`` bounds what each trace may hold (:class:`~muon_repro.analysis.limits.TraceLimits`,
    defaults in docs/limits.md). A path that holds nothing to analyze (no trace, record, cost-model input, study
    run or trial timed without traces) is a failure naming it; so is every file that cannot be read, or that passes
    a limit.
    """
    check_options(workers=workers, rank=rank)
    workers = workers or default_workers()
    limits = limits or TraceLimits()
    analysis = Analysis(paths=[Path(p) for p in paths], workers=workers)
    files = _find_files(paths, analysis.failures)
    infos = _run_infos(dict.fromkeys(f.parent for f in files), analysis.failures)
    files = [f for f in files if f.parent in infos]  # a folder whose side files cannot be read: reported, left out
    by_dir: dict[Path, list[TraceBreakdown]] = {}
    for f, result in zip(files, _analyze_files(files, infos, workers, rank, limits)):
        if isinstance(result, TraceFailure):
            analysis.failures.append(result)
        else:
            by_dir.setdefault(f.parent, []).append(result)
    for directory, items in by_dir.items():
        _add_folder(analysis, infos[directory], items, files)
    _add_timed_only(analysis)
    _leave_out_other_configurations(analysis)
    analysis.notes = _short_runs(analysis)
    return analysis


def _short_runs(analysis: Analysis) -> list[str]:
    """A note for each run whose folder holds fewer trials than its sweep asked for (config.json ``trials``): a sweep
    interrupted, or a trial removed, leaves complete trials that the tables use, and fewer rounds than were meant.
    Not said of trials the paths name one by one (chosen by hand)."""
    trials: dict[str, dict[int, RunInfo]] = {}
    for info in [*(info for info, _ in analysis.runs if info.has_config), *analysis.timed_only, *analysis.timed_runs]:
        trials.setdefault(info.key, {})[info.trial] = info
    analyzed = [p.resolve() for p in analysis.paths]
    notes = []
    for key, by_trial in sorted(trials.items()):
        asked = max(info.config.trials or 0 for info in by_trial.values())
        folder = next(iter(by_trial.values())).path.parent.resolve()
        if len(by_trial) >= asked or not any(p == folder or p in folder.parents for p in analyzed):
            continue
        missing = sorted(set(range(asked)) - set(by_trial))
        listed = ", ".join(f"{TRIAL_PREFIX}{k}" for k in missing[:5]) + (", ..." if len(missing) > 5 else "")
        notes.append(
            f"run {key} has {len(by_trial)} of the {asked} rounds its sweep asked for (config.json trials; missing "
            f"{listed}): a sweep cut short? The tables use the {len(by_trial)} here; the same bench command records the "
            "rest"
        )
    return notes


def _leave_out_other_configurations(analysis: Analysis) -> None:
    """Trials of a run recorded with another configuration than its first trial (another model, batch, layout or
    backend filed under the run's name, a contributed trial among them): each left out, named in ``failures``, so
    that no table pools two configurations' steps under one run (the runs table reads the first trial's config)."""
    firsts: dict[str, RunInfo] = {}
    traced = sorted((info for info, _ in analysis.runs if info.has_config), key=lambda info: info.trial)
    for info in [*traced, *sorted(analysis.timed_runs, key=lambda info: info.trial)]:
        firsts.setdefault(info.key, info)

    def agrees(info: RunInfo) -> bool:
        first = firsts.get(info.key)
        if first is None or first is info or not info.has_config:
            return True
        differing = info.config.differences(first.config)
        if differing:
            shown = ", ".join(f"{name}={mine!r} ({first.path.name}: {theirs!r})" for name, (mine, theirs) in differing.items())
            analysis.failures.append(
                TraceFailure(
                    str(info.path),
                    f"{info.path}: recorded with {shown}, unlike the first trial of run {info.key}; the trials of a run "
                    "measure one configuration, so this one is left out: record it into a folder of its own (another "
                    "--out), or remove it",
                )
            )
        return not differing

    analysis.runs = [(info, items) for info, items in analysis.runs if agrees(info)]
    analysis.timed_only = [info for info in analysis.timed_only if agrees(info)]
    analysis.timed_runs = [info for info in analysis.timed_runs if agrees(info)]


def _add_timed_only(analysis: Analysis) -> None:
    """The timed-only trials under the analyzed folders whose run has a traced trial; a word for the others."""
    traced = {info.key for info, _ in analysis.runs if info.has_config}
    orphans: dict[str, list[Path]] = {}  # by run: trials timed without traces whose run no traced trial stands for
    for folder, info in _run_infos(timed_only_trials(analysis.paths), analysis.failures).items():
        missing = info.missing_ranks(m.rank for m in info.ranks.values() if m.timed_step_ms)
        if info.key not in traced and not missing and not _has_traced_sibling(folder):
            analysis.timed_runs.append(info)  # a run timed in every round: no trace was ever recorded
        elif info.key not in traced:
            orphans.setdefault(info.key, []).append(folder)
        elif missing:
            analysis.incomplete.append(
                TraceFailure(
                    str(folder),
                    f"{folder}: metrics.json has no timed steps for rank(s) {', '.join(map(str, missing))} of "
                    f"{info.config.world_size}; the trial is left out: {_record_again(info)}",
                )
            )
        else:
            analysis.timed_only.append(info)
    left_out = {Path(failure.path) for failure in analysis.failures}
    for key, trials in orphans.items():
        analysis.incomplete.append(TraceFailure(str(trials[0].parent), _orphans_message(key, trials, left_out)))


def _orphans_message(key: str, trials: list[Path], left_out: set[Path]) -> str:
    """Why trials timed without traces were not joined to their run ``key``, and what to do: one line per run."""
    siblings = {p for p in trials[0].parent.iterdir() if trial_of(p) is not None} if trial_of(trials[0]) is not None else set()
    failed = sorted(p.name for p in (siblings & left_out) - set(trials) if find_traces([p]))  # a traced trial, not these
    listed = f"{trials[0]}" if len(trials) == 1 else f"{trials[0].parent} ({', '.join(p.name for p in trials)})"
    if failed:
        why = f"its traced trial {', '.join(failed)} was left out (above): restore it, and their times join it again"
    else:
        why = (
            "no traced trial of it was analyzed: record at least one traced round (`muon-repro bench --traced-trials 1`) "
            "or analyze the folder above it"
        )
    have = "has" if len(trials) == 1 else "have"
    return f"{listed}: {counted(len(trials), 'trial')} of run {key} timed without traces {have} no run to join; {why}"


def _run_infos(trials: Iterable[Path | RunDir], failures: list[TraceFailure]) -> dict[Path, RunInfo]:
    """Each trial folder's run, read from its side files, by folder; a folder whose side files cannot be read or
    describe no run (an environment.json whose counts are no counts, a backend that is no name) is a failure naming
    it, so that the others are analyzed."""
    infos = {}
    for trial in trials:
        folder = trial.path if isinstance(trial, RunDir) else trial
        try:
            infos[folder] = run_info_for(trial)
        except SideFileError as exc:  # names its file
            failures.append(TraceFailure(str(folder), left_out_unreadable(exc)))
        except ValueError as exc:
            failures.append(TraceFailure(str(folder), f"{folder}: {exc}; its traces are left out: fix or remove it"))
    return infos


def _has_traced_sibling(folder: Path) -> bool:
    """Whether another trial of ``folder``'s run (a sibling ``trial<k>`` folder) holds a trace."""
    from muon_repro.rundir import trial_of

    if trial_of(folder) is None:
        return False
    return any(
        other != folder and other.is_dir() and trial_of(other) is not None and find_traces([other])
        for other in folder.parent.iterdir()
    )


def _add_folder(analysis: Analysis, info: RunInfo, items: list[TraceBreakdown], files: list[Path]) -> None:
    """A folder's analyzed traces as its run(s); one by one, with a word, when its config names a rank they lack;
    refused by name when two files hold one rank, or its ranks recorded different steps."""
    if info.has_config and (why := _ranks_disagree(info, items)):
        analysis.failures.append(TraceFailure(str(info.path), f"{info.path}: {why}; the run is left out"))
        return
    missing = info.missing_ranks(b.meta.rank for b in items)
    if not missing:
        analysis.runs.extend(_group_runs(info, items))
        return
    failed = {Path(failure.path) for failure in analysis.failures}
    analysis.incomplete.append(TraceFailure(str(info.path), _incomplete_message(info, missing, files, failed)))
    analysis.runs.extend(_lone_runs(items, group=info.group, profile=info.profile, name_prefix=_lone_prefix(info)))


def _ranks_disagree(info: RunInfo, items: list[TraceBreakdown]) -> str | None:
    """Why the traces of one run cannot be one run (None: they can): two files of one rank (a copy beside the
    original would be counted as a third rank), or ranks that profiled different steps (per-step totals over ranks
    would mix steps)."""
    by_rank: dict[int, list[str]] = {}
    for b in items:
        by_rank.setdefault(b.meta.rank, []).append(Path(b.meta.path).name)
    world = info.config.world_size
    if world is not None and (outside := sorted(r for r in by_rank if not 0 <= r < world)):
        names = ", ".join(name for r in outside for name in by_rank[r])
        return f"rank {outside[0]} ({names}) is outside its world of {world} ranks (config.json world_size): remove it"
    doubled = {rank: names for rank, names in by_rank.items() if len(names) > 1}
    if doubled:
        rank, names = next(iter(sorted(doubled.items())))
        return f"{len(names)} traces of rank {rank} ({', '.join(sorted(names))}): a run has one per rank; remove the copy"
    steps = {b.meta.rank: tuple(sorted(b.steps["step"].tolist())) for b in items if "step" in b.steps.columns}
    if len(set(steps.values())) > 1:
        shown = "; ".join(f"rank {r}: steps {', '.join(map(str, s)) or 'none'}" for r, s in sorted(steps.items()))
        return f"its ranks profiled different steps ({shown}): re-record the run"
    return None


def has_study_runs(paths: list[str | Path]) -> bool:
    """Whether the paths hold the original study's traces or runs of its protocol (read by muon_repro.study)."""
    from muon_repro.rundir import protocol_folders, study_folders

    return bool(study_folders(paths) or protocol_folders(paths))


def _find_files(paths: list[str | Path], failures: list[TraceFailure]) -> list[Path]:
    """The trace files under ``paths``, each once; a path that does not exist or holds none is a failure."""
    files: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        try:
            found = find_traces([p])
            if not found and not find_records([p]) and not has_costmodel_inputs([p]) and not has_study_runs([p]):
                # records alone are no error, nor the original study's runs (muon_repro.study reads them), nor runs
                # timed in every round without a trace (a step too large to trace: the runs table's timed columns)
                if not timed_only_trials([p]):
                    raise no_traces_error(p)
        except TraceError as exc:
            failures.append(TraceFailure(str(p), str(exc)))
            continue
        failures.extend(
            TraceFailure(
                str(link),
                f"{link}: a link to a folder, not followed (it could lead out of {p} or back into it): copy the folder "
                "in, or analyze it on its own",
            )
            for link in (folder_links(p) if Path(p).is_dir() else [])
        )
        for f in found:
            if f.resolve() not in seen:
                seen.add(f.resolve())
                files.append(f)
    return files


def _analyze_files(
    files: list[Path], infos: dict[Path, RunInfo], workers: int, rank: int | None, limits: TraceLimits
) -> list[TraceBreakdown | TraceFailure]:
    """One result per file, in order: in worker processes when there is enough to read. Each
    file's :class:`TraceWarning` messages are raised here, once."""
    results = _analyze_files_quietly(files, infos, workers, rank, limits)
    for result in results:
        for message in getattr(result, "warnings", ()):
            warnings.warn(message, TraceWarning, stacklevel=4)
    return results


def _analyze_files_quietly(
    files: list[Path], infos: dict[Path, RunInfo], workers: int, rank: int | None, limits: TraceLimits
) -> list[TraceBreakdown | TraceFailure]:
    jobs = [(str(f), rank, infos[f.parent].group_sizes(), limits) for f in files]
    if len(jobs) > 1 and worth_processes(files, workers):
        return map_in_processes(
            _analyze_job,
            [(*job, 1) for job in jobs],
            workers,
            on_error=lambda job, exc: TraceFailure(job[0], f"{job[0]}: worker failed ({type(exc).__name__}: {exc})"),
        )
    per_file_workers = workers if len(jobs) == 1 and workers >= PIECE_PARALLEL_MIN_WORKERS else 1
    return [_analyze_job(*job, per_file_workers) for job in jobs]


def _incomplete_message(info: RunInfo, missing: list[int], files: list[Path], failed: set[Path]) -> str:
    """Which ranks a run folder lacks and why, and what to do about it."""
    given = set(files)
    reasons: dict[str, list[str]] = {}
    for r in missing:
        trace = info.path / trace_name(r)
        if trace in failed:
            reason = "could not be analyzed"
        elif not trace.is_file():
            reason = "missing"
        elif trace not in given:
            reason = "not among the paths given"
        else:
            reason = "holds another rank"
        reasons.setdefault(reason, []).append(trace.name)
    why = "; ".join(f"{', '.join(names)} {reason}" for reason, names in reasons.items())
    ranks = f"rank {missing[0]}" if len(missing) == 1 else "ranks " + ", ".join(str(r) for r in missing)
    verb = "has" if len(missing) == 1 else "have"
    todo = (
        f"name the folder {info.path} to analyze the run whole"
        if set(reasons) == {"not among the paths given"}
        else _record_again(info)
    )
    return (
        f"{info.path}: {ranks} of {info.config.world_size} {verb} no trace ({why}); its other traces are analyzed "
        f"one by one, not as a run, so no comparison or claim uses them: {todo}"
    )


def _lone_prefix(info: RunInfo) -> str:
    """``<name>/trial<k>``: where an incomplete run's traces lie, so that their lone runs keep distinct keys."""
    return f"{info.name}/{info.path.name}" if trial_of(info.path) is not None else info.name


def _group_runs(info: RunInfo, items: list[TraceBreakdown]) -> list[tuple[RunInfo, list[TraceBreakdown]]]:
    """A directory's traces as one run, unless (without config.json) their ranks collide."""
    ranks = [b.meta.rank for b in items]
    one_job = len({(b.meta.world_size, b.meta.backend) for b in items}) == 1 and len(set(ranks)) == len(ranks)
    if info.has_config or one_job:
        return [(info, sorted(items, key=lambda b: b.meta.rank))]
    return _lone_runs(items, group=info.path.name, profile=info.profile)


def _lone_runs(
    items: list[TraceBreakdown], *, group: str, profile: str, name_prefix: str = ""
) -> list[tuple[RunInfo, list[TraceBreakdown]]]:
    """Each trace a run of its own, named after its file, with no side files (as a foreign trace)."""
    out = []
    for b in items:
        name = Path(b.meta.path).name.removesuffix(".gz").removesuffix(".json")
        run = RunInfo(path=Path(b.meta.path), group=group, name=f"{name_prefix}/{name}" if name_prefix else name, profile=profile)
        out.append((run, [b]))
    return out


# -- the process pool

R = TypeVar("R")


def worth_processes(files: Iterable[Path], workers: int) -> bool:
    """Whether reading ``files`` in up to ``workers`` processes pays: more than one, over :data:`SMALL_TOTAL_BYTES`."""
    return workers > 1 and sum(f.stat().st_size for f in files if f.exists()) > SMALL_TOTAL_BYTES


def map_in_processes(
    fn: Callable[..., R], jobs: Sequence[tuple], workers: int, *, on_error: Callable[[tuple, BaseException], R]
) -> list[R]:
    """``[fn(*job) for job in jobs]``, in order, over at most ``workers`` processes.

    ``on_error(job, exc)`` stands for a job whose result could not come back (say, it did not
    pickle); ``fn``'s own exceptions should not get that far.
    """
    if workers <= 1 or len(jobs) <= 1:
        return [fn(*job) for job in jobs]
    undone = object()
    results: list = []
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        for job, future in zip(jobs, futures):
            try:
                results.append(future.result())
            except cf.process.BrokenProcessPool:
                results.append(undone)
            except Exception as exc:  # noqa: BLE001 - one job's failure must not lose the others
                results.append(on_error(job, exc))
    return [fn(*job) if r is undone else r for job, r in zip(jobs, results)]


def _record_again(info: RunInfo) -> str:
    """How to record an incomplete trial again: ``bench`` refuses a trial folder with files in it, and files its
    recordings under OUT/<profile>/<group>/<name>/trial<k>, so the command names the folder above the profile's."""
    if info.group == CUSTOM_GROUP:  # its name is derived from flags; bench takes the flags, not the name
        return (
            f"delete {info.path} and run again the `muon-repro bench custom` command that recorded it (config.json's "
            "`command`): it records only the trials missing"
        )
    run_dir = info.path.parent if trial_of(info.path) is not None else info.path
    profile_dir = run_dir.parent.parent  # a folder of the layout before profiles has none: OUT itself
    out = profile_dir.parent if profile_dir.name == info.profile else profile_dir
    command = ["muon-repro", "bench", f"{info.group}/{info.name}", "--out", str(out), "--trials", str(info.trial + 1)]
    if info.config.scale not in (None, DEFAULT_SCALE):  # another scale records another model
        command += ["--scale", info.config.scale]
    if info.profile != UNKNOWN_PROFILE:
        command += ["--profile", info.profile]
    return f"delete {info.path} and record it again (`{shlex.join(command)}` records only the trials missing)"
