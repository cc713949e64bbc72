"""Record configurations in interleaved trials: skip complete ones, write atomically, report failures clearly.

A *recording* is one trial of one configuration. The plan interleaves them in rounds, round k
holding trial k of every configuration, so that the drift of a shared machine hits every
configuration alike; within a round the order is shuffled (rounds 2j and 2j + 1 take the shuffle of
``random.Random(j)``, the second reversed: the same on every run of the same configurations), so that no
configuration always follows the same one or runs first in a round, and any two configurations (Muon and
its AdamW twin) run in either order equally often over each two rounds: a drift within a round then biases
their per-round ratio one way in one round and the other way in the next (the price: the last configuration of
round 2j opens round 2j + 1, twice in a row, each after its own warm-up steps). Each trial's config.json
records its ``round_order`` (its place in its round). Only the first ``traced_trials`` rounds run the
profiler and keep traces; the rounds after them record each configuration's timed steps only (:meth:`BenchConfig.untraced`), which
is all a claim's per-round values need and keeps a dataset of many rounds small. A sweep runs all
recordings of a world size in one launch of the workers
(process start and ``import torch`` are paid once, not per recording). Each recording is written
into ``<out>/<profile>/<group>/<name>/.trial<k>.partial`` (the hardware profile,
:mod:`muon_repro.hardware`, decided once per sweep by the launcher) and renamed to ``trial<k>`` once
every rank has finished, so a trial folder that exists is complete; an interrupted sweep leaves none
behind and simply redoes what is missing next time. A complete trial is skipped only when its
config.json is the run asked for (:mod:`muon_repro.bench.identity`): one recorded with other settings
stops the sweep before anything is recorded, naming the differing fields (``--force`` records it again); so does
one holding a file that cannot be read (:mod:`muon_repro.bench.trial_check`), naming the file and saying to delete
the trial folder.

One sweep at a time per run folder: ``<out>/<profile>/<group>/<name>/.lock`` (:mod:`muon_repro.bench.run_lock`)
is held while a sweep plans and records that run, so a second sweep into the same ``--out`` stops at
once with the first one's PID instead of sharing its ``.partial`` folders.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from muon_repro.bench.configs import DEFAULT_TRACED_TRIALS, DEFAULT_TRIALS, BenchConfig, check_trials_limit
from muon_repro.bench.environment import recording_profile
from muon_repro.bench.errors import BenchError, BenchInterrupted
from muon_repro.bench.identity import reuse_refusal, trial_differences
from muon_repro.bench.run_lock import LOCK_NAME, _lock_run_dir, locked_run_dirs  # noqa: F401 (the first two re-exported)
from muon_repro.bench.runner import run_rank
from muon_repro.bench.trial_check import config_readable, damage_refusal, trial_problems
from muon_repro.hardware import validate_profile_id
from muon_repro.rundir import LOG_FILE, TRIAL_PREFIX, RunDir, missing_files, partial_dir, trial_dir
from muon_repro.tables import files
from muon_repro.values import is_count


@dataclass(frozen=True)
class Recording:
    """One trial of one configuration, and where it goes."""

    cfg: BenchConfig
    trial: int
    trials: int
    final: Path
    profile: str | None = None  # the hardware profile: environment.json's, as its folder says
    round_order: int | None = None  # its place in its round (round k = trial k), the round shuffled
    sweep: str | None = None  # the bench command recording it (new_sweep_id): rounds pair only within one

    @property
    def partial(self) -> Path:
        return partial_dir(self.final)

    @property
    def label(self) -> str:
        # the folder's own name (trial<k>, from 0), and where it stands among the rounds asked for
        where = f"{self.cfg.key}/{TRIAL_PREFIX}{self.trial} ({self.trial + 1} of {self.trials})"
        return where + (" (timed only)" if self.cfg.timed_only else "")


@dataclass
class RunResult:
    key: str
    trial: int
    run_dir: Path
    status: str  # "recorded" | "skipped"
    # as the runs table reads a trial (RunDir.recorded_steps, timed_steps): medians over its steps of the slowest
    # rank's step and of the ranks' mean optimizer step
    step_ms: float | None = None  # the profiled steps
    optimizer_ms: float | None = None  # the profiled steps
    timed_step_ms: float | None = None  # the steps timed without the profiler
    loss_first: float | None = None  # the ranks' mean loss, first and last step run under the profiler
    loss_last: float | None = None


def run_dir_for(out: Path, cfg: BenchConfig, profile: str) -> Path:
    """``<out>/<profile>/<group>/<name>``: where the trials of ``cfg`` recorded on ``profile`` go."""
    return Path(out) / validate_profile_id(profile) / cfg.group / cfg.name


def plan_recordings(
    cfgs: list[BenchConfig],
    out: Path,
    trials: int = DEFAULT_TRIALS,
    *,
    profile: str,
    traced_trials: int | None = DEFAULT_TRACED_TRIALS,
) -> list[Recording]:
    """Every trial of every configuration, in rounds: all configurations' trial 0, then trial 1, ...; each
    round's order shuffled by :func:`round_order` (its index the seed). Rounds from ``traced_trials`` on
    (None: none) record the timed steps of configurations that have them, without profiler or trace."""
    if not is_count(trials):
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    traced = trials if traced_trials is None else traced_trials
    if not is_count(traced):
        raise ValueError(f"traced trials must be a positive integer (rounds that keep traces), got {traced_trials!r}")
    if traced > trials:
        raise ValueError(
            f"--traced-trials {traced} is more than --trials {trials}: the traced rounds are the first of the rounds "
            f"recorded; give --trials {traced} or more, or --traced-trials {trials} or fewer"
        )
    check_trials_limit(trials, traced)  # the plan lists every recording: its length is bounded first
    sweep = new_sweep_id()
    return [
        Recording(in_round, k, trials, _trial_home(out, cfg, profile, k), profile, position, sweep)
        for k in range(trials)
        for position, cfg in enumerate(round_order(cfgs, k))
        for in_round in [cfg.untraced() if k >= traced and cfg.profile and cfg.timed_steps else cfg]
    ]


def new_sweep_id() -> str:
    """One bench command's id, in every trial it records (config.json ``sweep``): round k of two configurations
    is a pair only when one command recorded both; a configuration re-recorded alone, or a round finished by a
    second command after an interruption, is not paired with the other's (analysis.estimators.unpaired_rounds)."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def round_order(cfgs: list[BenchConfig], round_index: int) -> list[BenchConfig]:
    """``cfgs`` in the order round ``round_index`` records them: shuffled by a generator seeded with the index of
    the round's pair (``round_index // 2``), the odd round of each pair in the reverse order of the even one, so
    that every two configurations swap places between the two (the module docstring says why). The same
    configurations are recorded in the same orders on every run of the sweep."""
    order = list(cfgs)
    random.Random(round_index // 2).shuffle(order)
    return order[::-1] if round_index % 2 else order


def _trial_home(out: Path, cfg: BenchConfig, profile: str, trial: int) -> Path:
    """Where trial ``trial`` of ``cfg`` lives: in the profile layout, unless a dataset recorded before
    profiles (``<out>/<group>/<name>/trial<k>``, not yet migrated) holds it for this profile; then there,
    so that it is skipped when complete (or redone in place with --force) rather than recorded twice."""
    legacy = trial_dir(Path(out) / cfg.group / cfg.name, trial)
    if legacy.is_dir() and RunDir(legacy).profile == profile:
        return legacy
    return trial_dir(run_dir_for(out, cfg, profile), trial)


def is_complete(run_dir: Path, cfg: BenchConfig) -> bool:
    return not missing_files(run_dir, cfg.world_size, cfg.profile)


def _reuse_problem(complete: list[Recording], backend: str) -> str | None:
    """The refusal of a sweep over complete trials it cannot skip (None: all reusable): first those recorded otherwise
    than asked (``--force`` records them again, the damaged ones with them), then those holding a file that cannot be
    read (:mod:`muon_repro.bench.trial_check`: each to be deleted and recorded again). A config.json that cannot be
    read is damage, not other settings."""
    readable = [rec for rec in complete if config_readable(rec.final)]
    mismatched = {rec.label: diffs for rec in readable if (diffs := trial_differences(rec.final, rec.cfg, backend))}
    if mismatched:
        return reuse_refusal(mismatched)
    damaged = {
        rec.final: problems for rec in complete if (problems := trial_problems(rec.final, rec.cfg.world_size, rec.cfg.profile))
    }
    return damage_refusal(damaged) if damaged else None


def _summary(rec: Recording, status: str) -> RunResult:
    result = RunResult(rec.cfg.key, rec.trial, rec.final, status)
    run = RunDir(rec.final)
    if timed := run.timed_steps():
        result.timed_step_ms = statistics.median(step for step, _ in timed)
    if recorded := run.recorded_steps():
        result.step_ms = statistics.median(step for step, _ in recorded)
        result.optimizer_ms = statistics.median(optimizer for _, optimizer in recorded)
    # the loss of a pipeline stage without the head is NaN (Training.share_losses fills it in): the mean of the others
    losses = [[v for v in step if v is not None and math.isfinite(v)] for step in zip(*(r.loss for r in run.ranks if r.loss))]
    losses = [math.fsum(step) / len(step) for step in losses if step]
    if losses:
        result.loss_first, result.loss_last = losses[0], losses[-1]
    return result


def check_backend(backend: str, world_size: int) -> None:
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; use 'gloo' or 'nccl'")
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ValueError("backend 'nccl' asked for, but no CUDA GPU is visible; use --backend gloo")
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        if gpus < local:
            raise ValueError(f"backend 'nccl' needs one GPU per local worker: {local} workers, {gpus} GPU(s); use --backend gloo")


def check_out_folder(out: Path) -> None:
    """``--out`` must be a folder, or one that can be created, that this process can write in."""
    files.check_out_folder(out, f"--out {out}")


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """What tells a trial folder recorded now from the one that was there before (a rename brings a new inode)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def _recorded_since(before: dict[Recording, tuple[int, int] | None]) -> list[Recording]:
    """The recordings whose trial folder is complete and new since ``before`` was taken."""
    return [rec for rec, was in before.items() if is_complete(rec.final, rec.cfg) and _folder_identity(rec.final) != was]


def _interrupted_message(in_progress: list[Recording], kept: list[Recording]) -> str:
    text = "interrupted, nothing kept for " + ", ".join(rec.label for rec in in_progress)
    if kept:
        text += f"; kept the {len(kept)} trial(s) completed before: " + ", ".join(rec.label for rec in kept)
    return text + "; run the same command again to record what is missing"


def record_local(
    cfgs: list[BenchConfig],
    out: Path,
    backend: str,
    *,
    trials: int = DEFAULT_TRIALS,
    traced_trials: int | None = DEFAULT_TRACED_TRIALS,
    force: bool = False,
    command: list[str] | None = None,
    progress: bool = True,
    profile: str | None = None,
) -> list[RunResult]:
    """Record every trial of ``cfgs`` on this machine into ``<out>/<profile>/``: one launch of ``dp*tp``
    workers per world size. ``profile``: ``--profile`` (default: ``$MUON_REPRO_PROFILE``, else derived).

    Raises :class:`BenchInterrupted` on Ctrl-C or SIGTERM (trials completed before are kept), and
    :class:`BenchError` before recording anything when a complete trial was recorded with other settings
    (:mod:`muon_repro.bench.identity`; ``force`` records it again).
    """
    command = command or list(sys.argv)
    out = Path(out)
    check_out_folder(out)
    plan = plan_recordings(cfgs, out, trials, profile=recording_profile(backend, profile), traced_trials=traced_trials)
    for world_size in sorted({rec.cfg.world_size for rec in plan}):
        check_backend(backend, world_size)
    with locked_run_dirs([rec.final.parent for rec in plan]):
        for rec in plan:  # a trial whose swap (_finalize) a hard kill cut between its renames: put back, not re-recorded
            files.recover_interrupted(rec.final)
        done = {rec: not force and is_complete(rec.final, rec.cfg) for rec in plan}
        refusal = _reuse_problem([rec for rec in plan if done[rec]], backend)
        if refusal:
            raise BenchError(refusal)
        todo = [rec for rec in plan if not done[rec]]
        before = {rec: _folder_identity(rec.final) for rec in todo}
        for world_size in sorted({rec.cfg.world_size for rec in todo}):
            batch = [rec for rec in todo if rec.cfg.world_size == world_size]
            _record_batch(batch, before, backend, command, progress)
    return [_summary(rec, "skipped" if done[rec] else "recorded") for rec in plan]


def _record_batch(
    batch: list[Recording], before: dict[Recording, tuple[int, int] | None], backend: str, command: list[str], progress: bool
) -> None:
    """One launch for the recordings of one world size; ``before``: every planned trial folder's identity before the sweep."""
    from muon_repro.parallel.launch import describe_failure, launch

    world_size = batch[0].cfg.world_size
    threads = max(1, (os.cpu_count() or 1) // world_size) if backend == "gloo" else None
    with tempfile.TemporaryDirectory(prefix="muon-repro-stderr-") as stderr_dir:
        try:
            launch(
                _bench_worker,
                world_size,
                batch,
                backend,
                command,
                progress,
                backend=backend,
                threads=threads,
                stderr_dir=stderr_dir,
            )
        except BaseException as exc:  # failure, Ctrl-C or SIGTERM: leave no partial trial behind
            in_progress = [rec for rec in batch if rec.partial.exists()]
            for rec in batch:
                shutil.rmtree(rec.partial, ignore_errors=True)
            recorded = _recorded_since(before)
            if isinstance(exc, KeyboardInterrupt):  # the launcher's LaunchInterrupted is one
                starting = [rec for rec in batch if rec not in recorded][:1]  # no .partial yet: the workers were starting
                message = _interrupted_message(in_progress or starting, recorded)
                raise BenchInterrupted(message, getattr(exc, "signum", signal.SIGINT)) from None
            if type(exc).__name__ == "ChildFailedError":
                failed = next((rec for rec in batch if rec not in recorded), batch[0])
                raise BenchError(f"{failed.label}: {describe_failure(exc)}") from None
            raise
        for rec in batch:
            _append_worker_stderr(rec.final / LOG_FILE, Path(stderr_dir))


def record_under_torchrun(
    cfgs: list[BenchConfig],
    out: Path,
    backend: str,
    *,
    trials: int = DEFAULT_TRIALS,
    traced_trials: int | None = DEFAULT_TRACED_TRIALS,
    force: bool = False,
    command: list[str] | None = None,
    profile: str | None = None,
) -> list[RunResult]:
    """Record every trial of ``cfgs`` as one rank of a world started by ``torchrun`` (any number of nodes).

    ``out`` must be a filesystem every node sees (rank 0 renames each finished trial into place).
    """
    from muon_repro.parallel.launch import init_worker

    world = int(os.environ["WORLD_SIZE"])
    for cfg in cfgs:
        if cfg.world_size != world:
            raise ValueError(
                f"config {cfg.key} needs dp*tp*pp = {cfg.dp}*{cfg.tp}*{cfg.pp} = {cfg.world_size} ranks, torchrun "
                f"started {world}: start {cfg.world_size} processes in all (--nnodes x --nproc-per-node), or name only "
                f"configurations of {world} ranks"
            )
    check_backend(backend, world)
    plan = plan_recordings(  # the same on every node
        cfgs, Path(out), trials, profile=recording_profile(backend, profile), traced_trials=traced_trials
    )
    init_worker(backend)
    try:
        decision: list = [None, None]
        if dist.get_rank() == 0:  # rank 0's view of the shared filesystem decides; only it reads the complete trials
            complete = [not force and is_complete(rec.final, rec.cfg) for rec in plan]
            decision = [complete, _reuse_problem([rec for rec, done in zip(plan, complete) if done], backend)]
        dist.broadcast_object_list(decision, src=0)
        if decision[1]:
            raise BenchError(decision[1])
        done = dict(zip(plan, decision[0]))
        record_all([rec for rec in plan if not done[rec]], backend, command or list(sys.argv), progress=False)
    finally:
        dist.destroy_process_group()
    return [_summary(rec, "skipped" if done[rec] else "recorded") for rec in plan]


def record_all(recordings: list[Recording], backend: str, command: list[str], progress: bool = True) -> None:
    """On every rank of an initialized world: record each recording in turn; rank 0 moves each into place."""
    rank = dist.get_rank()
    for i, rec in enumerate(recordings, 1):
        if rank == 0:
            shutil.rmtree(rec.partial, ignore_errors=True)
            rec.partial.mkdir(parents=True)
        dist.barrier()
        t0 = time.perf_counter()
        run_rank(
            rec.cfg,
            str(rec.partial),
            backend,
            command,
            progress,
            trial=rec.trial,
            trials=rec.trials,
            profile=rec.profile,
            round_order=rec.round_order,
            sweep=rec.sweep,
        )
        dist.barrier()
        if rank == 0:
            _finalize(rec)
            if progress:
                print(f"  [{i}/{len(recordings)}] {rec.label}: {time.perf_counter() - t0:.1f} s", flush=True)


def _bench_worker(recordings: list[Recording], backend: str, command: list[str], progress: bool) -> None:
    record_all(recordings, backend, command, progress)


def _append_worker_stderr(log: Path, stderr_dir: Path) -> None:
    """Keep what the workers printed to stderr (warnings, profiler notes) in the run's log.txt."""
    sections = []
    for path in sorted(stderr_dir.rglob("stderr.log"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0):
        text = path.read_text(errors="replace").strip()
        if text:
            sections.append(f"--- rank {path.parent.name} stderr ---\n{text}")
    if sections and log.is_file():
        with log.open("a") as f:
            f.write("\n".join(sections) + "\n")


def _finalize(rec: Recording) -> None:
    missing = missing_files(rec.partial, rec.cfg.world_size, rec.cfg.profile)
    if missing:
        shutil.rmtree(rec.partial, ignore_errors=True)
        raise BenchError(f"{rec.label}: the run finished without writing {', '.join(missing)}")
    files.swap_dir(rec.partial, rec.final)  # a finished trial replaces an earlier one whole


def format_results(results: list[RunResult]) -> str:
    """The recorded trials as a terminal table, each trial read as the runs table reads it: the medians over its steps
    of the slowest rank's step (timed without the profiler, and profiled) and of the ranks' mean optimizer step, and
    the ranks' mean loss at the first and last step run under the profiler (after the timed ones, which record no
    loss); '-' where a trial has none (a timed-only trial). The profiled times are the recorder's clock: the
    tables read the traces' step spans, a little apart."""

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    lines = [
        "medians over each trial's steps: the slowest rank's step, the ranks' mean optimizer step and loss",
        f"{'config':<42} {'trial':>5} {'status':<8} {'timed ms':>8} {'step ms':>8} {'optim ms':>8}  "
        "loss under the profiler: first -> last",
    ]
    for r in results:
        loss = "-" if r.loss_first is None else f"{r.loss_first:.3f} -> {r.loss_last:.3f}"
        lines.append(
            f"{r.key:<42} {r.trial:>5} {r.status:<8} {ms(r.timed_step_ms):>8} {ms(r.step_ms):>8} {ms(r.optimizer_ms):>8}  {loss}"
        )
    return "\n".join(lines)
