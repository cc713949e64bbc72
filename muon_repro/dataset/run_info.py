"""What the card says about the runs: their traces, the machines they ran on, the commands that made them.

The traces are files of the bundle; everything the runs recorded about themselves comes from the
tables, as for every stage after the analysis: ``metrics/environment.parquet`` (each trial's
environment.json, flattened) and ``metrics/runs.parquet`` (each run's command). A trial the tables
do not know simply adds nothing to the environment summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pandas as pd

from muon_repro.hardware import topology_matrix
from muon_repro.rundir import ENVIRONMENT_FILE, RUN_FILES, is_trace_file, trace_rank, trial_of
from muon_repro.tables.files import human_size
from muon_repro.tables.io import read_table
from muon_repro.values import counted

__all__ = ["RUN_FILES", "EnvRow", "RecordedEnvironment", "RunDoc", "describe_runs", "is_trace", "recorded_environment"]

# The order in which the environment table lists what it knows; anything else follows alphabetically.
ENV_ORDER = (
    "accelerator", "accelerator_count", "accelerator_memory_bytes", "driver", "cuda", "nccl", "backend",
    "gloo_available", "world_size", "nodes", "host_cpu", "host_cpu_capability", "host_cpu_bf16", "host_cpu_cores",
    "host_memory_bytes", "os", "python", "torch", "torch_num_threads", "git_sha", "git_dirty",
)  # fmt: skip
ENV_SKIP = ("hostname",)  # says nothing about the results, and may be private
# the machine's speed and load at recording time, per run: the environment table has them
ENV_SKIP_PREFIXES = ("speed_probe.", "load_average")
ENV_BLOCKS = ("interconnect_topology",)  # multi-line text, shown as a code block
ENV_LISTS = ("pip_freeze",)  # long lists: counted here, kept in environment.json
BOOLEANS = {"True": "yes", "False": "no"}


def is_trace(path: str) -> bool:
    return path.startswith("traces/") and is_trace_file(PurePosixPath(path).name)


@dataclass(frozen=True)
class RunDoc:
    run: str  # the folder under traces/ holding the traces: <profile>/<group>/<name>/trial<k>
    traces: tuple[str, ...]
    size: int

    @property
    def key(self) -> tuple[str | None, str, str, int]:
        """(profile or None in the old layout, group, name, trial): how the tables name this folder's recording."""
        folder = PurePosixPath(self.run)
        trial = trial_of(Path(folder.name))
        run_dir = folder.parent if trial is not None else folder
        parts = run_dir.parts
        profile = parts[-3] if len(parts) >= 3 else None
        return profile, parts[-2] if len(parts) >= 2 else "", run_dir.name, trial or 0


@dataclass(frozen=True)
class EnvRow:
    key: str
    value: str  # one value, or the distinct values with the runs that had them


@dataclass(frozen=True)
class RecordedEnvironment:
    """What the runs recorded about their machine and software, summarized for the card."""

    rows: list[EnvRow] = field(default_factory=list)
    blocks: dict[str, str] = field(default_factory=dict)  # multi-line values by key
    # the long lists by key: the most entries any run's list has, and that run's environment.json, to read it whole
    counts: dict[str, tuple[int, str]] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)  # the distinct command lines, shell-quoted
    git_shas: list[str] = field(default_factory=list)  # the commits of every kind of run recorded here
    # the runs whose record names no commit, said by kind ("65 convergence runs name no commit"), beside the commits
    without_commit: list[str] = field(default_factory=list)


def describe_runs(files: Mapping[str, Path], sizes: Mapping[str, int]) -> list[RunDoc]:
    """One :class:`RunDoc` per folder under ``traces/`` holding traces, sorted by run id."""
    by_dir: dict[str, list[str]] = {}
    for path in files:
        if is_trace(path):
            by_dir.setdefault(str(PurePosixPath(path).parent), []).append(path)
    runs = []
    for folder, traces in sorted(by_dir.items()):
        run = folder[len("traces/") :] if folder != "traces" else "."
        runs.append(RunDoc(run=run, traces=tuple(sorted(traces, key=_rank_order)), size=sum(sizes.get(p, 0) for p in traces)))
    return runs


@dataclass(frozen=True)
class RunGroupDoc:
    """The traced runs of one ``<profile>/<group>`` folder, as the card lists them: one line per group keeps the
    card a page long however many runs a group holds (each run's files are in MANIFEST.sha256)."""

    folder: str  # <profile>/<group>/ (or <group>/ in the old layout)
    runs: int  # configurations (<group>/<name>)
    trials: int  # their traced recordings (trial folders)
    traces: int
    size: int


# Another tool's traces of several runs in one folder, as the original study published them: trace_<run>_rank<r>.json.gz
_FLAT_TRACE = re.compile(r"^(?:trace_)?(?P<run>.+?)_rank\d+\.json(?:\.gz)?$")


def _folder_runs(run: RunDoc) -> tuple[str, set[str]]:
    """The ``<profile>/<group>/`` folder a trace folder is counted under, and the runs it holds: a folder of our
    traces (rank<r>.json.gz, in a trial folder or not) is one recording of one run of its group; a folder of another
    tool's traces is a group of its own, one recording of each run its files name (the original study's 18 traces
    are 6 runs)."""
    if all(trace_rank(PurePosixPath(p).name) is not None for p in run.traces):
        profile, group, name, _trial = run.key
        return "/".join(p for p in (profile, group) if p) + "/", {name}
    names = {m["run"] for p in run.traces if (m := _FLAT_TRACE.match(PurePosixPath(p).name))}
    return f"{run.run}/", names or {run.run}


def describe_run_groups(runs: list[RunDoc]) -> list[RunGroupDoc]:
    """``runs`` summed per ``<profile>/<group>`` folder, in run order: its configurations, their traced recordings
    (trial folders), traces and bytes."""
    groups: dict[str, list[tuple[RunDoc, set[str]]]] = {}
    for run in runs:
        folder, names = _folder_runs(run)
        groups.setdefault(folder, []).append((run, names))
    return [
        RunGroupDoc(
            folder,
            runs=len(set().union(*(names for _, names in members))),
            trials=sum(len(names) for _, names in members),
            traces=sum(len(r.traces) for r, _ in members),
            size=sum(r.size for r, _ in members),
        )
        for folder, members in groups.items()
    ]


def _environment_file(files: Mapping[str, Path], run: tuple[str, str, str], trial: int) -> str | None:
    """The bundle's ``environment.json`` of a run's ``trial`` (``run``: profile, group, name), in its trial folder or,
    for a run of one recording, beside its traces, under its profile or (the old layout) not; None if there is none."""
    profile, group, name = run
    for folder in (f"traces/{profile}/{group}/{name}", f"traces/{group}/{name}"):
        for path in (f"{folder}/trial{trial}/{ENVIRONMENT_FILE}", f"{folder}/{ENVIRONMENT_FILE}"):
            if path in files:
                return path
    return None


def _rank_order(path: str) -> tuple[int, str]:
    rank = trace_rank(PurePosixPath(path).name)
    return (rank if rank is not None else 1 << 30, path)


def _show(key: str, value: str) -> str:
    """A value of the environment table (text) as the card shows it."""
    if value in BOOLEANS:
        return BOOLEANS[value]
    if key.endswith("_bytes") and value.isdigit():
        return f"{value} ({human_size(int(value))})"
    if key.endswith(("_sha", "_sha256")) and re.fullmatch("[0-9a-f]{40,64}", value):
        return value[:12]  # a digest's prefix names it (git takes it too); the environment table has it whole
    return value


MAX_LISTED_VALUES = 3  # more distinct values than this (timestamps, load, probe speeds): the card shows their range


def _as_number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _value_range(seen: Mapping[str, list[str]]) -> str:
    """Many distinct values of one key, as their range: ``from 3.32 to 4.31 (10 values over 11 runs)``."""
    runs = len(set().union(*seen.values()))  # a run whose trials recorded different values counts once
    numbers = [_as_number(v) for v in seen]
    if all(n is not None for n in numbers):
        low, high = f"{min(numbers):.4g}", f"{max(numbers):.4g}"  # type: ignore[type-var]
    else:
        low, high = min(seen), max(seen)  # ISO 8601 timestamps sort as text
    return f"from {low} to {high} ({len(seen)} values over {runs} runs)"


def _list_length(value: str) -> int:
    """Entries of a list the environment table holds joined by ', '."""
    return len(value.split(", ")) if value else 0


Recording = tuple[str | None, str, str, int]  # (profile, group, name, trial): RunDoc.key


def _lookup(index: Mapping[Recording, list], key: Recording) -> list:
    """The rows of ``index`` recorded as ``key``; a key without a profile (the old layout) matches any profile."""
    if key[0] is not None:
        return index.get(key, [])
    return next((rows for k, rows in index.items() if k[1:] == key[1:]), [])


def recorded_environment(files: Mapping[str, Path], runs: list[RunDoc]) -> RecordedEnvironment:
    """The environment summary of every run the bundle's environment table knows (traced or timed only: a run kept
    with its metrics alone recorded its machine too), counted by run; the commands from the runs table."""
    if "metrics/environment.parquet" not in files:
        return RecordedEnvironment()
    env = read_table(files["metrics/environment.parquet"], "environment", check_set=False)
    by_run: dict[tuple[str, str, str], list[tuple[int, str, str]]] = {}  # (profile, group, name) -> (trial, key, value)
    for profile, group, name, trial, key, value in zip(
        env["profile"], env["group"], env["name"], env["trial"], env["key"], env["value"]
    ):
        by_run.setdefault((str(profile), str(group), str(name)), []).append((int(trial), str(key), str(value)))
    values: dict[str, dict[str, list[str]]] = {}  # key -> shown value -> the runs that recorded it (each once)
    blocks: dict[str, str] = {}
    counts: dict[str, tuple[int, str]] = {}
    for run_key, items in by_run.items():
        run = "/".join(run_key)
        for trial, key, value in items:
            if key in ENV_SKIP or key.startswith(ENV_SKIP_PREFIXES):
                continue
            if key in ENV_LISTS:
                where = _environment_file(files, run_key, trial)
                if where and _list_length(value) > counts.get(key, (0, ""))[0]:
                    counts[key] = (_list_length(value), where)
            elif key in ENV_BLOCKS:
                blocks.setdefault(key, topology_matrix(value))
            else:
                holders = values.setdefault(key, {}).setdefault(_show(key, value), [])
                if run not in holders:
                    holders.append(run)
    run_shas = [v for items in by_run.values() for _, k, v in items if k == "git_sha" and v]
    others = _other_tables(files)  # read once: their commands and their commits
    other_shas, without_commit = _other_commits(others)
    order = [k for k in ENV_ORDER if k in values] + sorted(k for k in values if k not in ENV_ORDER)
    rows = []
    for key in order:
        seen = values[key]
        if len(seen) == 1:
            rows.append(EnvRow(key, next(iter(seen))))
        elif len(seen) <= MAX_LISTED_VALUES:
            rows.append(EnvRow(key, "; ".join(f"{v} ({counted(len(r), 'run')})" for v, r in seen.items())))
        else:
            rows.append(EnvRow(key, _value_range(seen)))
    return RecordedEnvironment(
        rows=rows,
        blocks=blocks,
        counts=counts,
        commands=_commands(files, runs, others),
        git_shas=list(dict.fromkeys(_show("git_sha", sha) for sha in [*run_shas, *other_shas])),
        without_commit=without_commit,
    )


def _commands(files: Mapping[str, Path], runs: list[RunDoc], others: Mapping[str, pd.DataFrame]) -> list[str]:
    """The distinct command lines that recorded the runs (the runs table's ``command``), in run order, then those of
    the runs it does not hold (``others``: :func:`_other_tables`)."""
    if "metrics/runs.parquet" not in files:
        return []
    table = read_table(files["metrics/runs.parquet"], "runs", check_set=False)
    index: dict[Recording, list[str]] = {}
    for profile, group, name, command in zip(table["profile"], table["group"], table["name"], table["command"]):
        if isinstance(command, str) and command.strip():
            index[(str(profile), str(group), str(name), 0)] = [command.strip()]
    lines = (_lookup(index, (*run.key[:3], 0)) for run in runs)
    return list(dict.fromkeys([*(line for found in lines for line in found), *_other_commands(others)]))


# The runs recorded here that the runs table does not hold, by table, with what the card calls them: the regime sweep,
# the study's protocol replayed (the original study's own rows name no command or commit), the convergence runs.
OTHER_RECORDINGS = {"regimes": "regime sweep point", "study_runs": "study-protocol run", "convergence_runs": "convergence run"}


def _other_tables(files: Mapping[str, Path]) -> dict[str, pd.DataFrame]:
    """The tables of :data:`OTHER_RECORDINGS` in the bundle, each with only the runs recorded here."""
    tables = {}
    for name in OTHER_RECORDINGS:
        path = files.get(f"metrics/{name}.parquet")
        if path is not None:
            table = read_table(path, name, check_set=False)
            tables[name] = table[table["recorded_by"] == "muon_repro"] if "recorded_by" in table.columns else table
    return tables


def _other_commands(others: Mapping[str, pd.DataFrame]) -> list[str]:
    """The command lines of the runs the runs table does not hold (their tables' ``command``), in table order."""
    found: list[str] = []
    for table in others.values():
        if "command" in table.columns:
            found += [c.strip() for c in table["command"].dropna().astype(str) if c.strip()]
    return list(dict.fromkeys(found))


def _other_commits(others: Mapping[str, pd.DataFrame]) -> tuple[list[str], list[str]]:
    """The commits that recorded the runs the runs table does not hold, and how many of each kind name none."""
    shas: list[str] = []
    without: list[str] = []
    for name, table in others.items():
        if "git_sha" not in table.columns:
            table = table.assign(git_sha=None)
        shas += [str(sha) for sha in table["git_sha"].dropna() if str(sha).strip()]
        runs = table.drop_duplicates("run") if "run" in table.columns else table  # study_runs: a row per trial
        if missing := int(runs["git_sha"].isna().sum()):
            without.append(f"{counted(missing, OTHER_RECORDINGS[name])} {'names' if missing == 1 else 'name'} no commit")
    return list(dict.fromkeys(shas)), without
