"""The study tables, from the original study's imported traces (:mod:`muon_repro.study.sources`).

* ``study_runs``: one row per run of the study (a configuration: its 4 ranks, or rank 0 alone for the async
  runs): what it did (collectives, bytes and elements per rank and step) and its per-step times;
* ``study_ranks``: run x rank: what the rank held and sent;
* ``study_steps``: run x rank x step x scope (:mod:`muon_repro.study.scopes`), with the transfer time of its
  collectives matched across ranks;
* ``study_collectives``: run x rank x collective, in issue order: op, group, bytes, wait and transfer;
* ``study_method``: every number the study published, rebuilt by its own method
  (:mod:`muon_repro.study.method`), beside what we measure per step for the same quantity;
* ``study_method_parts``: per number, the event categories its sum holds.

A collective's *wait* is the time its kernel ran before the last rank of its group started the same
collective (matched by group and issue order, on the traces' shared clock), its *transfer* the rest.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from muon_repro.analysis.batch_read import TraceFailure, map_in_processes, worth_processes
from muon_repro.analysis.errors import TraceError, TraceWarning
from muon_repro.analysis.parallel_scan import default_workers
from muon_repro.analysis.trace_files import READ_BY_STUDY, TraceFile
from muon_repro.hardware import profile_or_unknown
from muon_repro.rundir import STUDY_TRACE_GLOB, RunDir, protocol_folders, study_folders, trace_rank
from muon_repro.study.method import PUBLISHED, Sums, matches_published, method_numbers, study_sums
from muon_repro.study.scopes import OPTIMIZER_SCOPES, STEP, StudyTrace, dp_group, read_study_trace
from muon_repro.study.sources import (
    GROUP,
    STUDY_ENVIRONMENT,
    STUDY_PROFILE,
    run_and_rank,
)
from muon_repro.tables.schemas import SCHEMAS
from muon_repro.values import command_line, recorded_commit

NS_PER_MS = 1e6
_T = TypeVar("_T")


@dataclass(frozen=True)
class StudyRun:
    """One configuration of the study, from its name (``muon_FULLSTEP_dp2_tp2_async``)."""

    name: str
    optimizer: str
    variant: str
    async_op: bool
    dp: int
    tp: int

    @classmethod
    def from_name(cls, name: str, world_size: int) -> StudyRun:
        grid = re.search(r"dp(\d+)_tp(\d+)", name)
        dp, tp = (int(grid[1]), int(grid[2])) if grid else (world_size, 1)
        return cls(
            name=name,
            optimizer="muon" if name.startswith("muon") else "adamw",
            variant="full_step" if "FULLSTEP" in name else "optimizer_only",
            async_op=name.endswith("_async"),
            dp=dp,
            tp=tp,
        )


@dataclass(frozen=True)
class Recording:
    """One recording of a run of the study's protocol: the study's own (its traces) or one recorded here (a trial)."""

    run: str  # <profile>/<group>/<name>
    profile: str
    group: str
    name: str
    trial: int
    protocol: str  # study | study-equal-work
    recorded_by: str  # "the original study" or "muon_repro"
    files: tuple[Path, ...]
    grid: tuple[int, int] | None  # (dp, tp) of a run recorded here: its gloo collectives' groups
    device: str
    backend: str
    command: str | None = None  # the command line that recorded it, and the commit: none for the study's own
    git_sha: str | None = None
    folder: Path | None = None  # where it was found: named when it holds no trace


def recordings(paths: Iterable[str | Path]) -> list[Recording]:
    """The study's own runs and the study-protocol runs recorded here, under ``paths``."""
    out = []
    for folder in study_folders(paths):
        names: dict[str, list[Path]] = {}
        for f in sorted(folder.glob(STUDY_TRACE_GLOB)):
            names.setdefault(run_and_rank(f.name)[0], []).append(f)
        for name, files in sorted(names.items()):
            run = f"{STUDY_PROFILE}/{GROUP}/{name}"
            device, backend = str(STUDY_ENVIRONMENT["accelerator"]), str(STUDY_ENVIRONMENT["backend"])
            out.append(Recording(run, STUDY_PROFILE, GROUP, name, 0, "study", ORIGINAL, tuple(files), None, device, backend))
    for folder in protocol_folders(paths):
        run_dir = RunDir(folder)
        config, env = run_dir.config_dict, run_dir.environment
        profile = profile_or_unknown(env)
        group, name = str(config["group"]), str(config["name"])
        files = tuple(sorted(f for f in folder.glob("rank*.json*") if trace_rank(f.name) is not None))
        device = str(env.get("accelerator") or "cpu")
        out.append(
            Recording(
                f"{profile}/{group}/{name}",
                profile,
                group,
                name,
                int(config.get("trial", 0)),
                str(config["protocol"]),
                RECORDED_HERE,
                files,
                (int(config["dp"]), int(config["tp"])),
                device,
                str(config.get("backend") or env.get("backend") or ""),
                command_line(config.get("command")),
                recorded_commit(env),
                folder,
            )
        )
    return out


def study_trace_files(paths: Iterable[str | Path]) -> list[TraceFile]:
    """The trace files of the study's runs under ``paths``, each with its run and rank (the ``trace_files`` table)."""
    return [
        TraceFile(rec.run, rec.profile, rec.group, rec.name, rec.trial, _file_rank(f), f, READ_BY_STUDY)
        for rec in recordings(paths)
        for f in rec.files
    ]


def _file_rank(file: Path) -> int:
    rank = trace_rank(file.name)
    return rank if rank is not None else run_and_rank(file.name)[1]


ORIGINAL, RECORDED_HERE = "the original study", "muon_repro"


class StudyRunLeftOut(TraceWarning):
    """A run of the study left out of the study tables because one of its traces cannot be read: the message names
    the file and the run and says what to do. ``muon-repro analyze`` reports its ``failure`` as it does a damaged
    trace of its own."""

    def __init__(self, failure: TraceFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def study_tables(
    paths: Iterable[str | Path],
    *,
    thresholds_record: bool = True,
    left_out: list[TraceFailure] | None = None,
    workers: int | None = None,
) -> dict[str, pd.DataFrame]:
    """Every study table from the study's runs and the study-protocol runs under ``paths`` (empty frames for none).
    ``thresholds_record=False`` leaves ``study_costmodel_thresholds`` empty, unread: ``muon-repro study fit``,
    which writes that record, must not depend on the old one.

    A run one of whose traces cannot be read (damaged, past a reader limit, not of the study's protocol) is left out
    of every table, so that one bad file costs its run alone: named in ``left_out`` when it is given, else in a
    :class:`StudyRunLeftOut` warning. ``workers`` bounds the processes that read the recordings (default: one per
    CPU, at most 8); a few megabytes of traces are read here, in this process."""
    found = recordings(paths)
    steps, collectives, ranks, runs = [], [], [], []
    rank0: dict[str, object] = {}
    method_sums: dict[tuple[str, str], dict[int, dict[str, object]]] = {}  # per set and round: the method's runs
    for rec, (rows, said) in zip(found, _rows_of_recordings(found, workers)):
        for category, message in said:  # what reading it warned of, in whichever process read it
            warnings.warn(message, category, stacklevel=2)
        if isinstance(rows, TraceError):
            _leave_out(rec, rows, left_out)
            continue
        if rows.sums is not None:
            method_sums.setdefault((rec.profile, rec.group), {}).setdefault(rec.trial, {})[rec.name] = rows.sums
            if rec.recorded_by == ORIGINAL:
                rank0[rec.name] = rows.sums
        steps.append(rows.steps)
        collectives.append(rows.collectives)
        ranks.append(rows.ranks)
        runs.append(rows.run)
    if not runs:  # none, or every one left out
        return {name: SCHEMAS[name].empty() for name in TABLES}
    tables = {
        "study_runs": pd.DataFrame(runs),
        "study_ranks": pd.concat(ranks, ignore_index=True),
        "study_steps": pd.concat(steps, ignore_index=True),
        "study_collectives": SCHEMAS["study_collectives"].rows_of(collectives),  # none on one rank
    }
    original = {name: _rows_of(df, STUDY_PROFILE) for name, df in tables.items()}
    if rank0:  # the study's method, on its own traces
        method, parts = _method_tables(rank0, original["study_steps"])
    else:
        method, parts = SCHEMAS["study_method"].empty(), SCHEMAS["study_method_parts"].empty()
    tables["study_method"], tables["study_method_parts"] = (df.assign(profile=STUDY_PROFILE) for df in (method, parts))
    from muon_repro.study.claims import protocol_rows

    tables["study_protocols"] = pd.DataFrame(protocol_rows(tables, method_sums), columns=SCHEMAS["study_protocols"].names)
    # the cost model on the study's machine: priced from its datasheet profile, then fitted to these kernel times
    from muon_repro.study.costmodel_check import study_costmodel_table

    if rank0:
        tables["study_costmodel"] = study_costmodel_table(original["study_steps"], original["study_collectives"])
    else:
        tables["study_costmodel"] = SCHEMAS["study_costmodel"].empty()
    tables["study_costmodel_thresholds"] = (
        _threshold_record(study_folders(paths), left_out) if thresholds_record else SCHEMAS["study_costmodel_thresholds"].empty()
    )
    return tables


@dataclass(frozen=True)
class RecordingRows:
    """One recording's rows of the study tables (each keyed by run, trial and profile), and the study's method's sums
    where that method reads it: what a reading process sends back, rather than the traces it read."""

    steps: pd.DataFrame
    collectives: pd.DataFrame
    ranks: pd.DataFrame
    run: dict[str, object]
    sums: Sums | None


def recording_rows(rec: Recording) -> RecordingRows | TraceError:
    """``rec``'s rows, or the :class:`TraceError` naming the file that cannot be read (returned, not raised, so that
    it comes back from a reading process as any other result)."""
    try:
        per_rank, config, sums = _read_recording(rec)
    except TraceError as exc:
        return exc
    key = {"run": rec.run, "trial": rec.trial, "profile": rec.profile}
    colls = _match_across_ranks(per_rank)
    run_steps = _steps_with_transfer(per_rank, colls)
    rank_rows = _rank_rows(per_rank, colls, config).assign(**key)
    run = _run_row(rec, config, per_rank, run_steps, rank_rows)
    return RecordingRows(run_steps.assign(**key), colls.assign(**key), rank_rows, run, sums)


def _rows_of_recordings(
    found: list[Recording], workers: int | None
) -> list[tuple[RecordingRows | TraceError, list[tuple[type[Warning], str]]]]:
    """:func:`recording_rows` of each recording, with the warnings reading it raised, in order: in reading processes
    when there is enough to read (the study-protocol runs a machine records are hundreds of traces; the study's own
    are 18), else here."""
    workers = workers or default_workers()
    if not worth_processes([f for rec in found for f in rec.files], workers):
        return [_rows_and_warnings(rec) for rec in found]
    return map_in_processes(_rows_and_warnings, [(rec,) for rec in found], workers, on_error=_not_returned)


def _rows_and_warnings(rec: Recording) -> tuple[RecordingRows | TraceError, list[tuple[type[Warning], str]]]:
    """:func:`recording_rows` and the warnings it raised, kept to be raised again by the caller: a reading process's
    own warnings go unseen."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = recording_rows(rec)
    return rows, [(w.category, str(w.message)) for w in caught]


def _not_returned(job: tuple[Recording], exc: BaseException) -> tuple[TraceError, list]:
    """A recording whose rows did not come back from its reading process: its run is left out, naming why."""
    (rec,) = job
    where = rec.folder or (rec.files[0].parent if rec.files else Path(rec.run))
    return TraceError(where, f"reading it in a worker process failed ({type(exc).__name__}: {exc}); please report it"), []


def _read_recording(rec: Recording) -> tuple[list[StudyTrace], StudyRun, Sums | None]:
    """A recording's traces by rank, its configuration, and the study's method's sums on rank 0 where that method
    reads the run (None elsewhere); a :class:`TraceError` naming the file that cannot be read."""
    if not rec.files:  # a trial of the protocol whose traces are gone (its config.json names the protocol)
        raise TraceError(rec.folder or Path(rec.run), "no trace file (rank<N>.json.gz) of the study's protocol here")
    per_rank = sorted((_read_one(read_study_trace, f, rec.grid) for f in rec.files), key=lambda t: t.rank)
    config = StudyRun.from_name(rec.name, per_rank[0].world_size or len(per_rank))
    if rec.recorded_by != ORIGINAL and config.variant != "full_step":
        return per_rank, config, None
    first = next((f for f, t in zip(rec.files, per_rank) if t.rank == 0), None)
    if first is None:  # the study's method reads rank 0's trace alone
        held = ", ".join(str(t.rank) for t in per_rank)
        raise TraceError(rec.files[0].parent, f"run {rec.name} has no trace of rank 0 (its traces hold rank(s) {held})")
    return per_rank, config, _read_one(study_sums, first)


def _read_one(read: Callable[..., _T], file: Path, *args: object) -> _T:
    """``read(file, *args)``; an error it raises for what the file holds, as a :class:`TraceError` naming the file."""
    try:
        return read(file, *args)
    except TraceError:
        raise
    except (ValueError, OSError, UnicodeError, MemoryError) as exc:
        raise TraceError(file, f"{type(exc).__name__}: {exc}") from None


def _leave_out(rec: Recording, problem: TraceError, left_out: list[TraceFailure] | None) -> None:
    """Say that ``rec``'s run is left out for ``problem``: in ``left_out`` when given, else as a warning."""
    trial = f" (trial {rec.trial})" if rec.recorded_by == RECORDED_HERE else ""
    todo = (
        "`muon-repro study import` brings the study's traces in again, checked against their published sha256"
        if rec.recorded_by == ORIGINAL
        else "restore the file, or record the trial again"
    )
    failure = TraceFailure(problem.path, f"{problem}; study run {rec.run}{trial} is left out of the study tables: {todo}")
    if left_out is None:
        warnings.warn(StudyRunLeftOut(failure), stacklevel=3)
    else:
        left_out.append(failure)


def _rows_of(df: pd.DataFrame, profile: str) -> pd.DataFrame:
    return df[df["profile"] == profile].reset_index(drop=True) if "profile" in df.columns else df


def thresholds_record_path(study_dir: Path) -> Path:
    """Where ``muon-repro study fit`` keeps how far the fit moves the thresholds, beside the study's folder."""
    return study_dir.parent / FIT_FOLDER / THRESHOLDS_RECORD


def _threshold_record(folders: list[Path], left_out: list[TraceFailure] | None = None) -> pd.DataFrame:
    """The threshold shift recorded by ``muon-repro study fit`` (it needs torch for the shard plans; the
    analysis does not), empty when it was not recorded. A damaged record raises a ValueError naming it, or with
    ``left_out`` given is named there and left out (empty)."""
    schema = SCHEMAS["study_costmodel_thresholds"]
    for folder in folders:
        path = thresholds_record_path(folder)
        if path.is_file():
            try:
                return _read_threshold_record(path, schema.names)
            except ValueError as exc:
                if left_out is None:
                    raise
                left_out.append(TraceFailure(str(path), f"{exc}; the study_costmodel_thresholds table is left empty"))
    return schema.empty()


def _read_threshold_record(path: Path, columns: list[str]) -> pd.DataFrame:
    """The record at ``path``, or a ValueError naming it (damaged, or another version's columns): ``study fit`` writes
    a header and a row per threshold, so anything else is a damaged record, to write again rather than to guess at."""
    again = "run `muon-repro study fit` again to write it"
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:  # pandas' EmptyDataError and ParserError, UnicodeDecodeError: ValueErrors
        raise ValueError(f"{path}: not a readable study_costmodel_thresholds record ({exc}); {again}") from None
    missing, unknown = [c for c in columns if c not in frame.columns], [c for c in frame.columns if c not in columns]
    if missing or unknown:
        raise ValueError(f"{path}: columns missing {missing}, unknown {unknown} for study_costmodel_thresholds; {again}")
    return frame


TABLES = (
    "study_runs",
    "study_ranks",
    "study_steps",
    "study_collectives",
    "study_method",
    "study_method_parts",
    "study_protocols",
    "study_costmodel",
    "study_costmodel_thresholds",
)
FIT_FOLDER = "costmodel_fit"  # <traces>/<study profile>/costmodel_fit/: the fit's threshold record (muon-repro study fit)
THRESHOLDS_RECORD = "study_costmodel_thresholds.csv"


def _match_across_ranks(per_rank: list[StudyTrace]) -> pd.DataFrame:
    """Every rank's collectives with wait and transfer: the k-th call of a group on each member is one collective."""
    frames = []
    for t in per_rank:
        c = t.collectives.copy()
        if c.empty:
            continue
        c["rank"] = t.rank
        c["seq"] = c.groupby("group_ranks").cumcount()
        frames.append(c)
    if not frames:
        return pd.DataFrame()
    c = pd.concat(frames, ignore_index=True)
    traced = {t.rank for t in per_rank}
    last_start = c.groupby(["group_ranks", "seq"])["start_ns"].transform("max")
    members = c.groupby(["group_ranks", "seq"])["rank"].transform("size")
    complete = c["group_ranks"].map(lambda g: set(map(int, g.split(","))) <= traced if g else False) & (
        members == c["group_size"]
    )
    start, end = c["start_ns"].astype("float64"), c["end_ns"].astype("float64")
    c["transfer_span_ms"] = (end - start) / NS_PER_MS
    c["wait_ms"] = np.where(complete, (last_start.astype("float64") - start) / NS_PER_MS, np.nan)
    c["transfer_ms"] = np.where(complete, (end - last_start.astype("float64")) / NS_PER_MS, np.nan)
    return c


def _steps_with_transfer(per_rank: list[StudyTrace], colls: pd.DataFrame) -> pd.DataFrame:
    frames = [t.scopes.assign(rank=t.rank) for t in per_rank]
    steps = pd.concat(frames, ignore_index=True)
    if colls.empty:
        steps["comm_transfer_ms"] = np.nan
        return steps
    by_scope = colls.groupby(["rank", "step", "scope"])["transfer_ms"].sum(min_count=1)
    by_step = colls.groupby(["rank", "step"])["transfer_ms"].sum(min_count=1)
    steps["comm_transfer_ms"] = [
        by_step.get((r, s), np.nan) if scope == STEP else by_scope.get((r, s, scope), np.nan)
        for r, s, scope in zip(steps["rank"], steps["step"], steps["scope"])
    ]
    return steps


def _rank_rows(per_rank: list[StudyTrace], colls: pd.DataFrame, config: StudyRun) -> pd.DataFrame:
    rows = []
    for t in per_rank:
        c = colls[colls["rank"] == t.rank] if len(colls) else colls
        n_steps = int(t.scopes["step"].max()) + 1
        ops = c.groupby(["op", "group_ranks"]).size() if len(c) else pd.Series(dtype="int64")
        rows.append(
            {
                "rank": t.rank,
                "device": t.device_names[t.rank] if t.rank < len(t.device_names) else None,
                "collectives_per_step": len(c) / n_steps,
                "collectives": "; ".join(f"{op} over ranks [{g}] x{n // n_steps}" for (op, g), n in ops.items()),
                "payload_bytes_per_step": c["payload_bytes"].sum() / n_steps if len(c) else 0,
                "ring_bytes_per_step": c["ring_bytes"].sum() / n_steps if len(c) else 0,
                "held_elements": _held_elements(c[c["step"] == 0] if len(c) else c, config, t.rank),
            }
        )
    return pd.DataFrame(rows)


def _held_elements(first_step: pd.DataFrame, config: StudyRun, rank: int) -> int | None:
    """The parameter elements the rank's optimizer holds, as its collectives show: AdamW all-reduces every
    full gradient; Muon's DP all-gather takes the rank's ZeRO shard of its TP-local buffer as input.

    The DP collective is the one over the rank's DP group (TP inner: ranks ``rank % tp``, ``+ tp``, ...), found by
    its members; a TP collective of the same size (DP 2 x TP 2) is not it, whichever is issued first. A trace that
    leaves any of its collectives' group ranks unnamed falls back on the group size."""
    if first_step.empty:
        return None
    if config.optimizer == "adamw":
        return int(first_step.loc[first_step["op"] == "all_reduce", "elements"].sum())
    dp_ranks = ",".join(map(str, dp_group(rank, config.tp, config.dp * config.tp)))
    named = first_step["group_ranks"].astype(str) != ""
    dp = first_step[first_step["group_ranks"] == dp_ranks] if named.all() else first_step[first_step["group_size"] == config.dp]
    first = dp.iloc[0] if len(dp) else None
    return None if first is None else int(first["elements"] // config.dp)


def _run_row(rec: Recording, config: StudyRun, per_rank: list[StudyTrace], steps: pd.DataFrame, ranks: pd.DataFrame) -> dict:
    whole = steps[steps["scope"] == STEP]
    optimizer = steps[steps["scope"].isin(OPTIMIZER_SCOPES)].groupby(["rank", "step"])
    fwd_bwd = steps[steps["scope"] == "FWD_BWD"]
    per_step = whole.groupby("step")
    return {
        "run": rec.run,
        "profile": rec.profile,
        "trial": rec.trial,
        "protocol": rec.protocol,
        "recorded_by": rec.recorded_by,
        "command": rec.command,
        "git_sha": rec.git_sha,
        "group": rec.group,
        "name": config.name,
        "optimizer": config.optimizer,
        "variant": config.variant,
        "async_op": config.async_op,
        "dp": config.dp,
        "tp": config.tp,
        "world_size": per_rank[0].world_size,
        "ranks_traced": len(per_rank),
        "steps": int(whole["step"].nunique()),
        "device": rec.device,
        "backend": rec.backend,
        "collectives_per_step": float(ranks["collectives_per_step"].mean()),
        "payload_bytes_per_step": float(ranks["payload_bytes_per_step"].mean()),
        "ring_bytes_per_step": float(ranks["ring_bytes_per_step"].mean()),
        "ring_bytes_per_step_max": float(ranks["ring_bytes_per_step"].max()),
        "step_ms": float(per_step["step_ms"].mean().mean()),
        "step_cpu_ms": float(per_step["cpu_ms"].mean().mean()),
        "optimizer_cpu_ms": float(optimizer["cpu_ms"].sum().mean()),
        "optimizer_gpu_busy_ms": float(optimizer["gpu_busy_ms"].sum().mean()),
        "optimizer_busy_ms": float(optimizer["busy_ms"].sum().mean()),
        "optimizer_done_ms": float(optimizer["gpu_done_ms"].max().mean()),
        "fwd_bwd_gpu_busy_ms": float(fwd_bwd["gpu_busy_ms"].mean()) if len(fwd_bwd) else np.nan,
        "comm_ms": float(per_step["comm_ms"].mean().mean()),
        "comm_transfer_ms": float(per_step["comm_transfer_ms"].mean().mean()),
    }


def _method_tables(rank0: dict, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The study's published numbers, rebuilt, beside our per-step measure of the same quantity (rank 0)."""
    rebuilt = method_numbers(rank0)  # type: ignore[arg-type]
    measured = _measured_per_step(steps)
    rows, parts = [], []
    for p in PUBLISHED:
        value = rebuilt.get(p.number_id, np.nan)
        ours, ours_what = measured.get(p.number_id, (np.nan, ""))
        rows.append(
            {
                "number_id": p.number_id,
                "published_in": p.table,
                "quantity": p.quantity,
                "optimizer": p.optimizer,
                "published": p.value,
                "unit": p.unit,
                "rebuilt": value,
                "rebuilt_matches": matches_published(p, value),
                "study_run": p.run or None,
                # a sum over the 5 traced steps, per step (an average per call is none)
                "rebuilt_per_step": value / 5 if p.unit == "ms" and p.run and "per_call" not in p.number_id else np.nan,
                "measured_per_step": ours,
                "measured_what": ours_what,
            }
        )
        if p.run and p.run in rank0:
            what = {"comm": "communication", "fwd": "FWD_BWD", "opt": "Muon_Step" if p.optimizer == "muon" else "AdamW_Step"}
            key = p.number_id.split("_")[0] if not p.number_id.startswith("async_comm") else "comm"
            total_key = "Muon_Full_Training_Step" if p.optimizer == "muon" else "AdamW_Full_Training_Step"
            target = {"comm": "communication", "fwd": "FWD_BWD", "optimizer": what["opt"], "total": total_key}.get(key)
            table = rank0[p.run].parts  # type: ignore[attr-defined]
            for row in table[table["what"] == target].itertuples():
                parts.append({"number_id": p.number_id, "category": row.cat, "events": row.events, "ms": row.ms})
    return pd.DataFrame(rows), pd.DataFrame(parts)


# What measured_per_step is for the study's communication numbers: study_steps.comm_ms (NCCL kernel time, not transfer).
COMM_KERNEL_WHAT = "collective kernel time per step, waits for peers included (union), rank 0"


def _measured_per_step(steps: pd.DataFrame) -> dict[str, tuple[float, str]]:
    """Our per-step measure of each published quantity on the same rank-0 traces, mean over their steps."""
    out: dict[str, tuple[float, str]] = {}
    r0 = steps[steps["rank"] == 0]

    def mean(run: str, scope: str, column: str) -> float:
        sel = r0[(r0["run"] == run) & (r0["scope"] == scope)] if "run" in r0 else r0.iloc[0:0]
        return float(sel.groupby("step")[column].sum().mean()) if len(sel) else np.nan

    for opt, full, asyn, step_scope in (
        ("muon", "muon_FULLSTEP_dp2_tp2", "muon_FULLSTEP_dp2_tp2_async", "Muon_Step"),
        ("adamw", "adamw_FULLSTEP", "adamw_FULLSTEP_async", "AdamW_Step"),
    ):
        run, arun = f"{STUDY_PROFILE}/{GROUP}/{full}", f"{STUDY_PROFILE}/{GROUP}/{asyn}"
        # the study's communication sums its NCCL kernels whole, waits for the peers included: so is comm_ms (the
        # transfer alone, comm_transfer_ms, has no value on the async runs, whose peers were not traced)
        out[f"comm_ms_{opt}"] = (mean(run, STEP, "comm_ms"), COMM_KERNEL_WHAT)
        out[f"async_comm_ms_{opt}"] = (mean(arun, STEP, "comm_ms"), COMM_KERNEL_WHAT)
        out[f"fwd_bwd_ms_{opt}"] = (mean(run, "FWD_BWD", "gpu_busy_ms"), "GPU busy time of the kernels FWD_BWD launched")
        # its compute: the kernels the optimizer launched, less its NCCL kernels (Table 5.2 has them as communication)
        opt_scopes = [step_scope] + (["AdamW_AllReduce"] if opt == "adamw" else [])
        compute = sum(mean(run, s, "gpu_kernel_ms") - mean(run, s, "comm_ms") for s in opt_scopes)
        out[f"optimizer_ms_{opt}"] = (
            compute,
            "kernel time of the optimizer's compute kernels, its NCCL kernels left out"
            + (" (AdamW_AllReduce and AdamW_Step)" if opt == "adamw" else ""),
        )
        out[f"total_ms_{opt}"] = (mean(run, STEP, "step_ms"), "step time: completion to completion")
    return out
