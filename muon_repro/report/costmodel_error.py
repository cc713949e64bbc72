"""How well the cost model prices the recorded runs, in the report's and docs/regimes.md's words: one row per
run (``predictions``), and a summary of the step and optimizer time errors, overall, on the held-out
configurations, per kind of grid (a pooled median can hide one grid the model prices badly) and per day recorded.
"""

from __future__ import annotations

import statistics

import pandas as pd

from muon_repro.report.data import is_missing
from muon_repro.values import counted


def prediction_rows(predictions: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in predictions.sort_values("run").itertuples():
        rows.append(
            [
                r.run,
                _text(r.recorded_on),
                f"{r.measured_step_ms:.0f}",
                f"{r.predicted_step_ms:.0f}",
                f"{r.step_rel_error:+.0%}" + (" (held out)" if _held(r.held_out) else ""),
                "–" if is_missing(r.profile_step_rel_error) else f"{r.profile_step_rel_error:+.0%}",
                f"{r.measured_optimizer_ms:.0f}",
                f"{r.predicted_optimizer_ms:.0f}",
                "–" if is_missing(r.optimizer_rel_error) else f"{r.optimizer_rel_error:+.0%}",
            ]
        )
    return rows


def _held(value: object) -> bool:
    """Whether a ``held_out`` cell says held out: the table's nullable booleans read back as numpy's, never ``True``
    itself, so the cell is tested by value (a missing one is not held out)."""
    return not is_missing(value) and bool(value)


def prediction_summary(predictions: pd.DataFrame) -> str:
    if predictions.empty:
        return "No predictions in these tables: `muon-repro regimes` writes them (after `muon-repro calibrate`)."
    step = predictions["step_rel_error"].astype(float)
    opt = predictions["optimizer_rel_error"].dropna().astype(float)
    worst = predictions.loc[step.abs().idxmax()]
    worst_opt = predictions.loc[opt.abs().idxmax()] if len(opt) else None
    machine = ", ".join(sorted(set(predictions["machine"].astype(str))))
    own = (predictions["priced_by"] == "own_calibration").sum() if "priced_by" in predictions else 0
    text = (
        f"{len(predictions)} runs priced on the profile {machine} ({own} by their own calibration): step time median "
        f"|error| {statistics.median(step.abs()):.1%}, worst {float(worst['step_rel_error']):+.1%} ({worst['run']}); "
        f"{(step.abs() <= 0.15).mean():.0%} of runs within 15%."
    )
    calibrated = predictions["profile_step_rel_error"].dropna().astype(float) if "profile_step_rel_error" in predictions else []
    if len(calibrated) and own:
        text += (
            f" Priced by the profile as calibrated instead: median |error| {statistics.median(calibrated.abs()):.1%}, worst "
            f"{calibrated.abs().max():.1%}; the runs' median day speed (compute) was "
            f"{predictions['day_compute'].dropna().astype(float).median():.2f} of the calibration's."
        )
    if worst_opt is not None:
        text += (
            f" Optimizer time: median |error| {statistics.median(opt.abs()):.1%}, worst "
            f"{float(worst_opt['optimizer_rel_error']):+.1%} "
            f"({worst_opt['run']})."
        )
    return text + _held_out(predictions) + _by_grid(predictions) + _by_day(predictions) + beyond_calibration(predictions)


def _held_out(predictions: pd.DataFrame) -> str:
    """The errors on the configurations the model was never tuned on: its validated error."""
    if "held_out" not in predictions:
        return ""
    held = predictions[predictions["held_out"].fillna(False).astype(bool)]
    if held.empty:
        return ""
    step = held["step_rel_error"].astype(float)
    return (
        f" On the {len(held)} held-out runs (never tuned on): step time median |error| {step.abs().median():.1%}, "
        f"from {step.min():+.1%} to {step.max():+.1%}."
    )


GRIDS = ("one device", "DP", "TP", "DP·TP", "PP")


def grid_kind(dp: int, tp: int, pp: int) -> str:
    """The kind of layout a run's ranks make: its error is reported per kind, as one kind can be mispriced alone."""
    if pp > 1:
        return "PP"
    if dp > 1 and tp > 1:
        return "DP·TP"
    return "DP" if dp > 1 else "TP" if tp > 1 else "one device"


def _by_grid(predictions: pd.DataFrame) -> str:
    """Step time error per kind of grid, over every run and over the held-out ones (a pooled median hides a grid the
    model prices badly)."""
    if not {"dp", "tp", "pp"} <= set(predictions.columns):
        return ""
    grids = [grid_kind(int(r.dp), int(r.tp), int(r.pp) if not is_missing(r.pp) else 1) for r in predictions.itertuples()]
    frame = predictions.assign(grid=grids)
    held = frame["held_out"].fillna(False).astype(bool) if "held_out" in frame else pd.Series(False, index=frame.index)
    parts = []
    for grid in GRIDS:
        rows = frame[frame["grid"] == grid]
        if rows.empty:
            continue
        step = rows["step_rel_error"].astype(float).abs()
        out = rows[held[rows.index]]["step_rel_error"].astype(float).abs()
        held_text = f"; held out: {len(out)}, worst {out.max():.1%}" if len(out) else "; none held out"
        runs = counted(len(rows), "run")
        parts.append(f"{grid}: {runs}, median {step.median():.1%}, worst {step.max():.1%}{held_text}")
    return " Step time |error| per grid: " + "; ".join(parts) + "." if parts else ""


def beyond_calibration(predictions: pd.DataFrame) -> str:
    """How many runs were priced past what the profile measured, and their error beside the others': whether the
    model's error comes from its extrapolation."""
    if "within_calibration" not in predictions:
        return ""
    judged = predictions[predictions["within_calibration"].notna()]
    beyond = judged[~judged["within_calibration"].astype(bool)]
    if beyond.empty:
        return " Every run was priced within what the profile measured." if len(judged) else ""
    within = judged[judged["within_calibration"].astype(bool)]
    step = beyond["step_rel_error"].astype(float).abs()
    if within.empty:
        text = f" Every run was priced beyond what the profile measured: median |error| {step.median():.1%}"
    else:
        text = (
            f" {len(beyond)} of {counted(len(judged), 'run')} were priced beyond what the profile measured: median |error| "
            f"{step.median():.1%}, against {within['step_rel_error'].astype(float).abs().median():.1%} for the rest"
        )
    return text + " (the predictions table's beyond_calibration says where)."


def _text(value) -> str:
    return "–" if is_missing(value) else str(value)


def _by_day(predictions: pd.DataFrame) -> str:
    """Step-time errors per recording day, when the runs span several: a machine's speed drifts between days,
    and one calibration prices every run at the speed of the day it was taken."""
    if "recorded_on" not in predictions or predictions["recorded_on"].dropna().nunique() < 2:
        return ""
    parts = []
    for day, rows in predictions.dropna(subset=["recorded_on"]).groupby("recorded_on"):
        error = rows["step_rel_error"].astype(float)
        parts.append(f"{day}: {len(rows)} runs, median error {error.median():+.1%} (median |error| {error.abs().median():.1%})")
    return (
        " By the day the runs were recorded: " + "; ".join(parts) + ". A run without a speed probe (recorded before "
        "probes existed) is priced as calibrated, and carries as error how much slower or faster the machine ran that day."
    )
