"""Whether a complete trial on disk is the run a sweep asks for, so that skipping it is right.

A trial folder is named by its configuration's group and name only: the same name at another
scale, with another model shape, schedule, precision or backend lands in the same folder. So a
complete trial is reused only when its ``config.json`` agrees with the asked configuration on every
field that changes its numbers (:data:`IDENTITY_FIELDS`, read through :func:`from_dict`'s rules for
files written before a field existed) and on the backend. Otherwise the sweep refuses, naming the
differing fields and ``--force``, which records the trial again in place.

Left out on purpose: ``profile`` (a traced trial holds the timed steps an untraced one records, and a
missing trace makes the trial incomplete anyway, so it is recorded again) and the fields that say
where or when a trial ran (trial, trials, round_order, sweep, command, device: the backend decides it).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path

from muon_repro.bench.configs import BenchConfig, from_dict
from muon_repro.rundir import CONFIG_FILE, load_json

# BenchConfig fields that change what a trial measures: all of them but ``profile`` (see the module doc).
IDENTITY_FIELDS = tuple(f.name for f in fields(BenchConfig) if f.name != "profile")
# config.json keys that say where and when a trial ran, not what it ran: no BenchConfig field.
TRIAL_KEYS = ("trial", "trials", "round_order", "sweep", "backend", "device", "command")
# config.json keys that are no BenchConfig field: derived from the fields, or where and when the trial ran.
RECORD_ONLY_KEYS = (*("key", "steps", "world_size", "batch_per_dp"), *TRIAL_KEYS)
SHOWN_TRIALS = 5  # differing trials a refusal lists one by one (the rest are counted): enough to see the pattern


def trial_differences(trial: Path, cfg: BenchConfig, backend: str) -> list[str]:
    """How the complete trial in ``trial`` differs from ``cfg`` recorded on ``backend``, one ``field: recorded
    X, asked Y`` per differing field; empty when it is the same run. An unreadable config.json is a difference."""
    try:
        recorded = load_json(trial / CONFIG_FILE)
    except ValueError as exc:  # SideFileError: the message names the file and says why
        return [f"{CONFIG_FILE} cannot be read ({exc})"]
    known = {f.name for f in fields(BenchConfig)}
    unknown = sorted(set(recorded) - known - set(RECORD_ONLY_KEYS))
    try:
        as_recorded = asdict(from_dict({k: v for k, v in recorded.items() if k in known}))
    except (TypeError, ValueError) as exc:
        return [f"{CONFIG_FILE} is no configuration this version reads ({exc})"]
    asked = asdict(cfg)
    differences = [
        f"{name}: recorded {as_recorded[name]!r}, asked {asked[name]!r}"
        for name in IDENTITY_FIELDS
        if as_recorded[name] != asked[name]
    ]
    if recorded.get("backend") != backend:
        differences.append(f"backend: recorded {recorded.get('backend')!r}, asked {backend!r}")
    differences += [f"{name}: recorded {recorded[name]!r}, a field this version does not know" for name in unknown]
    return differences


def listed_trials(problems: dict[str, list[str]] | dict[Path, list[str]]) -> str:
    """``trial (problem; problem), ...`` for the first :data:`SHOWN_TRIALS` trials, the rest counted."""
    shown = [f"{trial} ({'; '.join(said)})" for trial, said in list(problems.items())[:SHOWN_TRIALS]]
    more = len(problems) - len(shown)
    return ", ".join(shown) + (f", and {more} more" if more > 0 else "")


def reuse_refusal(mismatched: dict[str, list[str]]) -> str:
    """The message that refuses a sweep over complete trials recorded otherwise (``trial label`` -> its differences)."""
    listed = listed_trials(mismatched)
    return (
        f"{len(mismatched)} complete trial(s) were recorded with other settings than this sweep asks for, so they are not "
        f"reused: {listed}. Record them again with --force (each trial folder is replaced), or record into another --out"
    )
