"""A contributed ``config.json`` checked field by field before any check sizes anything by it.

``world_size`` decides how many traces and metrics entries a run must have, so a huge one would have
the checks build a set of every rank; a float (4.7) would be silently truncated. Every integer field
a check or the analysis counts with is read from the raw JSON: a JSON integer (``true`` and ``4.0``
refused), within :data:`~muon_repro.contrib.limits.CONFIG_INT_RANGES`; a field naming a choice (the optimizer,
layout, overlap, precision) one of :data:`~muon_repro.run_records.RECORD_CHOICES`; group and name follow the
name rules; ``dp * tp * pp`` (``pp`` 1 when absent) is ``world_size`` when dp, tp and world_size are given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from muon_repro.contrib.limits import CONFIG_INT_RANGES
from muon_repro.contrib.untrusted import name_problem, run_name_problem
from muon_repro.run_records import choice_problems, int_field_problem

RECORD_AGAIN = (
    "delete the trial folder and run again the `muon-repro bench` command that recorded it (its --out, --scale and "
    "--trials; config.json's `command`): it records only the trials missing"
)


@dataclass(frozen=True)
class CheckedConfig:
    """The fields of a config.json that passed: None where a field is absent or was refused."""

    group: str | None
    name: str | None
    world_size: int | None
    problems: tuple[str, ...]  # each names the field, the value, the rule and what to do


def _int_problem(key: str, value: Any) -> str | None:
    problem = int_field_problem(key, value)
    if problem is None:
        return None
    if "outside" in problem:  # a whole number out of range: where the limits are, and what to do
        fix = "the files come from another kind of run" if key == "world_size" else "fix the field"
        return f"{problem} (docs/contributing.md, Limits): {fix} or {RECORD_AGAIN}"
    return f"{problem}: {RECORD_AGAIN}"


def check_config(raw: Mapping[str, Any]) -> CheckedConfig:
    """``raw`` (config.json, decoded) checked; see the module's docstring for the rules."""
    problems: list[str] = []
    names: dict[str, str | None] = {}
    for key, what in (("group", "its group"), ("name", "its run name")):
        value = raw.get(key)
        if value is None or value == "":
            problems.append(f"has no {key!r}: {RECORD_AGAIN}")
            names[key] = None
        elif problem := run_name_problem(value, raw.get("group"), what) if key == "name" else name_problem(value, what):
            problems.append(problem)
            names[key] = None
        else:
            names[key] = value
    ints: dict[str, int] = {}
    for key in CONFIG_INT_RANGES:
        if key not in raw:
            if key == "world_size":
                problems.append(f"has no 'world_size' (the number of ranks): {RECORD_AGAIN}")
            continue
        problem = _int_problem(key, raw.get(key))
        if problem is None:
            ints[key] = raw[key]
        else:
            problems.append(problem)
    problems += [f"{problem}: {RECORD_AGAIN}" for problem in choice_problems(raw)]
    if {"dp", "tp", "world_size"} <= ints.keys() and ("pp" in ints or "pp" not in raw):  # a refused pp: said above
        pp = ints.get("pp", 1)  # a run recorded before pipelines has no pp: one stage
        if ints["dp"] * ints["tp"] * pp != ints["world_size"]:
            grid = f"dp {ints['dp']} x tp {ints['tp']}" + (f" x pp {pp}" if "pp" in ints else "")
            problems.append(
                f"{grid} is not world_size {ints['world_size']}: the run's ranks are its DP x TP x PP grid; {RECORD_AGAIN}"
            )
            ints.pop("world_size")
    return CheckedConfig(names["group"], names["name"], ints.get("world_size"), tuple(problems))
