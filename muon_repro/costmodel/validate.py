"""The cost model against recorded runs: one ``predictions`` row per run under a traces folder.

For each run (the trials of one configuration): the configuration from ``config.json`` (:mod:`muon_repro.rundir`),
the measured medians from ``metrics.json`` (a step's time is its slowest rank's, the optimizer's the mean over ranks;
the median over each trial's steps, then over trials: the ``runs`` table's ``timed_*`` numbers), and two predictions:

* by the run's own calibration (the default): the machine profile as fast as the machine ran that
  day, from the speed probe every trial took before its first step (:mod:`~muon_repro.bench.speed_probe`;
  the median day's speed over trials, per kind of work);
* by the profile alone, as it was calibrated: the difference between the two is the "slow day", measured.

Steps are compared without the profiler: every trial times steps with no profiler before its profiled
ones, and those are what is measured here (runs recorded before timed steps existed are priced with
the profiler's per-operator cost instead, and say so in ``profiled``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from muon_repro.analysis.estimators import steps_frame, typical_time
from muon_repro.bench.configs import BenchConfig, from_dict
from muon_repro.bench.identity import TRIAL_KEYS
from muon_repro.bench.regimes import validation_set
from muon_repro.bench.speed_probe import DAY_KINDS, SpeedProbe
from muon_repro.costmodel.machine_profile import MachineProfile, ProfileError
from muon_repro.costmodel.predict import predict
from muon_repro.phases import BACKWARD, FORWARD
from muon_repro.run_records import POOLED_FIELDS, record_problems
from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, RunDir, trial_folders

# config.json keys that tell where a run ran and so change its times, though BenchConfig does not hold them
_PLACE_KEYS = ("backend", "device")
# Trials that differ only in POOLED_FIELDS (run_records: as the analysis pools them) are priced together; whether the
# kept steps ran under the profiler is compared on its own (STEPS_UNDER_PROFILER), as it changes the step priced.
STEPS_UNDER_PROFILER = "steps timed under the profiler"  # a trial without timed steps: its profiled ones are measured


@dataclass(frozen=True)
class Measured:
    """A run's measured medians over its trials of each trial's median step (timed without the profiler where they
    were): ``trials`` counts the trials with steps, ``steps`` their steps."""

    step_ms: float
    optimizer_ms: float
    trials: int
    steps: int
    profiled: bool = True  # whether any of the steps were profiled ones (a trial recorded before timed steps)


def run_folders(root: str | Path) -> dict[str, list[Path]]:
    """Trial folders (those with a config file) under ``root``, by run key, hidden (partial) folders left out."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"--validate {root} is not a folder of recorded runs (such as traces/)")
    runs = trial_folders(root)
    if not runs:
        raise ValueError(f"--validate {root}: no recorded run (no {CONFIG_FILE}) under it")
    return runs


def bench_config(trial: RunDir) -> BenchConfig:
    """The :class:`BenchConfig` a trial was recorded with, from its config file."""
    raw = trial.side_file_or_raise(CONFIG_FILE)  # SideFileError naming the file when it cannot be read (truncated, not JSON)
    if problems := record_problems(raw):  # the rules the analysis reads it by, each naming the field and value
        raise ValueError(f"{trial.path / CONFIG_FILE}: {'; '.join(problems)}: record the run again, or move it out")
    try:
        return from_dict({k: v for k, v in raw.items() if k not in TRIAL_KEYS})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{trial.path / CONFIG_FILE}: not a configuration the bench records ({exc})") from None


def measured(trials: list[RunDir]) -> Measured | None:
    """A run's measured step (slowest rank) and optimizer step (mean over ranks), as the ``runs`` table's
    ``timed_step_ms`` and ``timed_optimizer_ms`` state them (:func:`~muon_repro.analysis.estimators.typical_time`:
    the median over trials, the rounds of a sweep, of each trial's median step). A trial's steps are those timed
    without the profiler where it has them (the model predicts a step without the profiler's cost), else its
    profiled ones (runs recorded before timed steps)."""
    per_trial, profiled = {}, False
    for trial in trials:
        timed = trial.timed_steps()
        recorded = timed or trial.recorded_steps()
        if recorded:
            per_trial[trial.trial] = np.asarray(recorded, dtype="float64")
            profiled |= not timed
    if not per_trial:
        return None
    frame = steps_frame("run", per_trial)
    return Measured(
        typical_time(frame, "run", "step_ms", "max"),
        typical_time(frame, "run", "optimizer_ms", "mean"),
        len(per_trial),
        sum(len(steps) for steps in per_trial.values()),
        profiled,
    )


def check_trials_readable(trials: list[RunDir]) -> None:
    """Refuse a run whose trial has a side file that cannot be read (truncated, not JSON): read as empty, the trial
    would drop out of the run's measured time without a word, and the records would judge the model against it."""
    for trial in trials:
        for problem in trial.unreadable_side_files().values():
            raise ValueError(
                f"{problem}; its trial would drop out of the run's measured time: record it again (delete {trial.path}, "
                "then the command that recorded it redoes missing trials) or move it out of the traces folder"
            )


def recorded_on(trials: list[RunDir]) -> str | None:
    """The UTC date (``YYYY-MM-DD``) the earliest of ``trials`` was recorded, from environment.json."""
    dates = sorted(str(stamp)[:10] for t in trials if (stamp := t.environment.get("recorded_at")))
    return dates[0] if dates else None


def run_probes(trials: list[RunDir]) -> list[SpeedProbe]:
    """The speed probes the trials of a run took (environment.json ``speed_probe``; none before probes existed)."""
    probes = []
    for trial in trials:
        stored = trial.environment.get("speed_probe")
        if stored is not None:
            probes.append(SpeedProbe.from_dict(stored, f"{trial.path / ENVIRONMENT_FILE}: speed_probe"))
    return probes


def validate(
    root: str | Path,
    machine: MachineProfile,
    *,
    profiled: bool | None = None,
    profile: str | None = None,
    own_calibration: bool = True,
    warn: Callable[[str], None] | None = None,
) -> list[dict]:
    """One ``predictions`` row per run under ``root`` that has measured steps (of hardware ``profile`` only,
    when given: a run's profile is its environment's, wherever its folder sits). ``profiled``: price
    every run with (True) or without (False) the profiler's cost; None: as each run's measured steps were timed.
    ``own_calibration``: the ``predicted_*`` columns price each run as fast as the machine ran that day, where the
    run and the profile have speed probes (else, and when False, with the profile as calibrated). Runs recorded on
    another kind of device than the machine's (a GPU run against a CPU profile) are left out: its rates are not theirs.
    A run whose trials disagree on their configuration gives a row per set of trials (:func:`trial_sets`), told to
    ``warn``."""
    rows = []
    for run_key, folders in run_folders(root).items():
        trials = [RunDir(folder) for folder in folders]  # each side file parsed once, whoever reads it
        check_trials_readable(trials)
        if profile is not None and trials[0].profile != profile:
            continue
        if trials[0].config_dict.get("device", machine.device) != machine.device:
            continue
        for key, trial_set in trial_sets(run_key, trials, warn):
            row = _row(key, trial_set, machine, profiled, own_calibration)
            if row is not None:
                rows.append(row)
    return rows


def trial_sets(key: str, trials: list[RunDir], warn: Callable[[str], None] | None = None) -> list[tuple[str, list[RunDir]]]:
    """The trials of run ``key`` in sets of identical configurations (every field but :data:`POOLED_FIELDS`), each
    with its row's run id: ``key`` when they all agree, else ``key@trial0+trial2`` per set, and ``warn`` names the
    trials and the fields that differ.

    Split, not refused: one run whose trials were recorded under different code or flags (an older config read with
    another default) should not stop the validation of every other run under the folder (``muon-repro regimes`` runs
    it over all of traces/), and each set is a real measurement of its own configuration, priced as that one. Not
    pooled: a median over two configurations compared with the prediction of one is an error nobody made."""
    by_config: dict[tuple, list[RunDir]] = {}
    described: dict[tuple, dict] = {}
    for trial in trials:
        fields = _priced_fields(trial)
        config = tuple(sorted(fields.items()))  # field names are unique: sorted by name alone
        by_config.setdefault(config, []).append(trial)
        described[config] = fields
    if len(by_config) == 1:
        return [(key, trials)]
    configs = list(described.values())
    differing = sorted(name for name in configs[0] if any(c.get(name) != configs[0].get(name) for c in configs))
    sets = [(f"{key}@{'+'.join(t.path.name for t in members)}", members) for members in by_config.values()]
    if warn is not None:
        detail = "; ".join(
            f"{', '.join(t.path.name for t in members)}: "
            + ", ".join(f"{name}={described[config][name]!r}" for name in differing)
            for config, members in by_config.items()
        )
        warn(
            f"{key}: its trials were recorded with different configurations ({detail}); each set is priced and compared "
            f"on its own, as {', '.join(run for run, _ in sets)}: record the run again into a clean folder to pool them"
        )
    return sets


def _priced_fields(trial: RunDir) -> dict:
    """What of a trial's configuration changes its numbers: its BenchConfig but POOLED_FIELDS, where it ran, and
    whether its measured steps ran under the profiler."""
    cfg = asdict(bench_config(trial))  # its fields: what to_dict derives (steps, world size) follows from them
    fields = {name: value for name, value in cfg.items() if name not in POOLED_FIELDS}
    fields.update({name: trial.config_dict.get(name) for name in _PLACE_KEYS})
    fields[STEPS_UNDER_PROFILER] = bool(cfg.get("profile")) and not trial.timed_steps()
    return {name: _hashable(value) for name, value in fields.items()}


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _row(
    key: str,
    trials: list[RunDir],
    machine: MachineProfile,
    profiled: bool | None,
    own_calibration: bool,
) -> dict | None:
    """The ``predictions`` row of one set of trials (None: none of them has measured steps)."""
    times = measured(trials)
    if times is None:
        return None
    cfg = bench_config(trials[0])
    held_out_set = validation_set(cfg)
    priced_profiled = (cfg.profile and times.profiled) if profiled is None else profiled
    by_profile = predict(cfg, machine, profiled=priced_profiled)
    probes = run_probes(trials)
    ratios = machine.day_ratios(*probes) if probes and machine.calibration_probes() else {}
    # A GPU's probe (a 256x512x512 fp32 matmul, synced every 8 calls) times launches and clocks, not the
    # GPU's rate: its ratios are recorded, not applied
    on_day = _on_day(machine, probes, key) if own_calibration and ratios and machine.device == "cpu" else None
    p = predict(cfg, on_day, profiled=priced_profiled) if on_day is not None else by_profile
    return {
        "run": key,
        "profile": trials[0].profile,
        "machine": machine.name,
        "optimizer": cfg.optimizer,
        "layout": cfg.layout,
        "overlap": cfg.overlap,
        "dp": cfg.dp,
        "tp": cfg.tp,
        "pp": cfg.pp,
        "trials": times.trials,
        "steps": times.steps,
        "profiled": priced_profiled,
        "recorded_on": recorded_on(trials),
        "measured_step_ms": times.step_ms,
        "predicted_step_ms": p.step_ms,
        "step_rel_error": p.step_ms / times.step_ms - 1,
        "measured_optimizer_ms": times.optimizer_ms,
        "predicted_optimizer_ms": p.optimizer_ms,
        "optimizer_rel_error": p.optimizer_ms / times.optimizer_ms - 1 if times.optimizer_ms else None,
        "predicted_forward_ms": p.mean(FORWARD),
        "predicted_backward_ms": p.mean(BACKWARD),
        "predicted_comm_ms": p.comm_ms,
        "predicted_wait_ms": p.mean("wait_ms"),
        "predicted_optimizer_exposed_ms": getattr(p, "optimizer_exposed_ms", None),  # pipelines only
        "priced_by": "own_calibration" if p is not by_profile else "profile",
        **{f"day_{kind}": ratios.get(kind) for kind in DAY_KINDS},
        "profile_predicted_step_ms": by_profile.step_ms,
        "profile_step_rel_error": by_profile.step_ms / times.step_ms - 1,
        "profile_predicted_optimizer_ms": by_profile.optimizer_ms,
        "profile_optimizer_rel_error": by_profile.optimizer_ms / times.optimizer_ms - 1 if times.optimizer_ms else None,
        "within_calibration": not p.beyond_calibration,
        "beyond_calibration": "; ".join(p.beyond_calibration) or None,
        "held_out": held_out_set == "held_out",
        "validation_set": held_out_set,
        "path": str(trials[0].path.parent if len(trials) > 1 else trials[0].path),
    }


def _on_day(machine: MachineProfile, probes: list[SpeedProbe], key: str) -> MachineProfile:
    """The profile as fast as the machine ran on the day of run ``key``; a day's speed outside its range names the run."""
    try:
        return machine.on_day(*probes)
    except ProfileError as exc:
        raise ProfileError(
            f"run {key}: its speed probes against machine {machine.name!r}'s calibration give {exc}; the run's "
            f"{ENVIRONMENT_FILE} speed_probe or the profile's calibration.speed_probe measured something else: record "
            "the run again, or price it as calibrated (--as-calibrated)"
        ) from None


def format_validation(rows: list[dict]) -> str:
    """The predictions against the measurements (the step's error also as calibrated, and the day's compute speed),
    then the median and the worst relative errors."""
    lines = [
        f"{'run':<44} {'step ms':>9} {'predicted':>9} {'error':>7} {'as calib':>8} {'day':>5}   "
        f"{'optim ms':>8} {'predicted':>9} {'error':>7}"
    ]
    for r in rows:
        opt_err = "-" if r["optimizer_rel_error"] is None else f"{r['optimizer_rel_error']:+.1%}"
        day = "-" if r["day_compute"] is None else f"{r['day_compute']:.2f}"
        lines.append(
            f"{r['run']:<44} {r['measured_step_ms']:>9.1f} {r['predicted_step_ms']:>9.1f} {r['step_rel_error']:>+7.1%} "
            f"{r['profile_step_rel_error']:>+8.1%} {day:>5}   "
            f"{r['measured_optimizer_ms']:>8.1f} {r['predicted_optimizer_ms']:>9.1f} {opt_err:>7}"
        )
    step_errors = [abs(r["step_rel_error"]) for r in rows]
    calibrated = [abs(r["profile_step_rel_error"]) for r in rows]
    opt_errors = [abs(r["optimizer_rel_error"]) for r in rows if r["optimizer_rel_error"] is not None]
    worst = max(rows, key=lambda r: abs(r["step_rel_error"]))
    lines.append(
        f"step time: median |error| {statistics.median(step_errors):.1%}, worst {worst['step_rel_error']:+.1%} ({worst['run']}); "
        f"as calibrated: median |error| {statistics.median(calibrated):.1%}, worst {max(calibrated):.1%}; "
        f"optimizer: median |error| {statistics.median(opt_errors):.1%}, worst {max(opt_errors):.1%}"
    )
    beyond = [abs(r["step_rel_error"]) for r in rows if not r["within_calibration"]]
    if beyond:
        within = [abs(r["step_rel_error"]) for r in rows if r["within_calibration"]]
        rest = f"; within them: median |error| {statistics.median(within):.1%}" if within else ""
        lines.append(
            f"priced beyond the profile's measurements: {len(beyond)} of {len(rows)} runs, median |error| "
            f"{statistics.median(beyond):.1%}{rest} (the predictions table's beyond_calibration says what)"
        )
    return "\n".join(lines)
