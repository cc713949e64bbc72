"""What the claims are measured on: one profile's tables, the runs chosen from them, and the same-work check.

Runs are compared only when they did the same work (:data:`SAME_WORK`); :func:`check_same_work`
refuses the rest with an error naming both runs and the field they differ in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from muon_repro.analysis.bootstrap import per_step

# What two runs must share to be compared: the same work on the same kind of machine.
SAME_WORK = ("preset", "tokens_per_step", "seq_len", "reduce_dtype", "backend", "device")


class UnequalWork(ValueError):
    """Two runs to be compared did different work; the message names both runs and the field."""


def check_same_work(a: pd.Series, b: pd.Series, fields: tuple[str, ...] = SAME_WORK) -> None:
    """Refuse to compare runs that did different work; the error names both runs and the field."""
    for name in fields:
        va, vb = a.get(name), b.get(name)
        if is_missing(va) and is_missing(vb):
            continue
        if is_missing(va) or is_missing(vb) or va != vb:
            raise UnequalWork(
                f"runs {a['run']} and {b['run']} did different work: {name} is {va!r} vs {vb!r}; "
                f"record them with the same {name} to compare them"
            )


def is_missing(v) -> bool:
    """Whether a table cell holds no value (None, pandas' NA or NaN)."""
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def first_run(runs: pd.DataFrame, **where) -> pd.Series | None:
    """The first run matching ``where``, the seed's 'comparison' group and the contiguous layout first."""
    sel = runs
    for col, value in where.items():
        sel = sel[sel[col] == value]
    if sel.empty:
        return None
    order = sel.assign(_g=(sel["group"] != "comparison").astype(int), _l=(sel["layout"].fillna("") != "contiguous").astype(int))
    return order.sort_values(["_g", "_l", "run"], kind="stable").iloc[0]


def describe_runs(*rows: pd.Series) -> str:
    """The conditions of a measurement: each run with its backend, device, ranks, trials, steps and tokens per step."""
    return "; ".join(
        f"{r['run']} ({r['backend']} on {r['device']}, {int(r['ranks'])} ranks, {int(r['trials'])} trials x "
        f"{int(r['steps']) // max(int(r['trials']), 1)} steps, {int(r['tokens_per_step'])} tokens/step)"
        if not is_missing(r.get("tokens_per_step")) and not is_missing(r.get("trials"))
        else f"{r['run']}"
        for r in rows
    )


@dataclass
class ProfileTables:
    """One hardware profile's rows of the analysis tables: all a claim is measured on."""

    runs: pd.DataFrame
    steps: pd.DataFrame
    ranks: pd.DataFrame
    phases: pd.DataFrame
    regimes: pd.DataFrame = field(default_factory=pd.DataFrame)  # the regime sweep, when one was recorded
    thresholds: pd.DataFrame = field(default_factory=pd.DataFrame)  # the cost model's regime_thresholds
    convergence: pd.DataFrame | None = None  # analysis/convergence.py's tables, when given
    leading: pd.DataFrame | None = None

    def samples(self, run: pd.Series, column: str, how: str = "mean") -> np.ndarray:
        return per_step(self.steps, str(run["run"]), column, how)

    def phase_mean(self, run: pd.Series, phase: str, column: str) -> float:
        rows = self.phases[(self.phases["run"] == run["run"]) & (self.phases["phase"] == phase)][column].dropna()
        return float(rows.astype("float64").mean()) if len(rows) else 0.0
