"""Which step a moment of a trace belongs to: the step windows, and times assigned to them.

Steps are the CPU ``ProfilerStep#N`` annotations; the rules (one step seen on several threads,
one number at two separate times, steps of no length, a trace without steps) are defined in
:mod:`muon_repro.analysis.breakdown`. :func:`step_windows` finds the windows and
:func:`assign_steps` maps launch times to them; what belongs to no step gets :data:`NO_STEP`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import step_number
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.trace_events import TraceEvents

NO_STEP = -(2**31)


def step_windows(
    trace: TraceEvents,
    names: np.ndarray,
    name_codes: np.ndarray,
    cat_codes: np.ndarray,
    cats: np.ndarray,
    cpu_side: np.ndarray,
    messages: list[str],
) -> pd.DataFrame:
    """``step``, ``start``, ``dur`` per step, sorted; one window ``-1`` if there are no steps.

    Steps left out for having no length are reported in ``messages``."""
    ev = trace.events
    numbers = np.array([_step_number(trace.path, str(n), messages) for n in names], dtype=object)
    is_step_name = np.array([x is not None for x in numbers], bool)
    rows = np.flatnonzero(is_step_name[name_codes] & cpu_side)
    if len(rows):
        df = pd.DataFrame(
            {
                "step": [numbers[c] for c in name_codes[rows]],
                "start": ev["ts"].to_numpy()[rows],
                "dur": ev["dur"].to_numpy()[rows],
            }
        )
        # the same step on several threads: keep its widest extent
        df["stop"] = df["start"] + df["dur"]
        _refuse_repeated_steps(trace.path, df)
        df = df.groupby("step", as_index=False).agg(start=("start", "min"), stop=("stop", "max"))
        df["dur"] = df["stop"] - df["start"]
        messages.extend(_no_length_messages(trace.path, df[~(df["dur"] > 0)]))
        df = df[df["dur"] > 0].sort_values("start", kind="stable").reset_index(drop=True)
        # overlapping windows (malformed traces): clip each to the next one's start
        nxt = df["start"].shift(-1).to_numpy()
        stop = np.where(np.isfinite(nxt), np.minimum(df["stop"].to_numpy(), nxt), df["stop"].to_numpy())
        df["dur"] = np.maximum(stop - df["start"].to_numpy(), 0.0)
        if len(df):
            return df[["step", "start", "dur"]]
    real = cpu_side | ~np.isin(cat_codes, [i for i, c in enumerate(cats) if str(c) == "Trace"])
    keys = trace.threads
    numeric_pid = np.array([isinstance(p, int) for p in keys["pid"]], bool)
    real &= numeric_pid[ev["thread"].to_numpy()] if len(keys) else real
    ts, end = ev["ts"].to_numpy()[real], ev["end"].to_numpy()[real]
    if not len(ts):
        ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    lo, hi = float(ts.min()), float(end.max())
    return pd.DataFrame({"step": [-1], "start": [lo], "dur": [max(hi - lo, 0.0)]})


def _step_number(path: str, name: str, messages: list[str]) -> int | None:
    """N of a ``ProfilerStep#N`` name; ``None`` for other names and (reported in ``messages``)
    for an N beyond int64, which no table can hold."""
    number = step_number(name) if name.startswith("ProfilerStep") else None
    if number is not None and number >= 2**63:
        messages.append(f"{path}: annotation {name[:40]!r}...: step number beyond int64: not taken as a step")
        return None
    return number


def _refuse_repeated_steps(path: str, occurrences: pd.DataFrame) -> None:
    """Raise if one step number occurs at two separate times (``step``, ``start``, ``stop`` per
    annotation): overlapping ones are one step on several threads, separate ones are two steps
    under one name, which merged would make one step as long as both and the gap between."""
    df = occurrences.sort_values(["step", "start"], kind="stable")
    by_step = df.groupby("step", sort=False)
    reach = by_step["stop"].cummax()  # the furthest end of the earlier occurrences, this one's included
    earlier_reach = reach.groupby(df["step"], sort=False).shift()
    earlier_start = by_step["start"].shift()
    apart = (df["start"] >= earlier_reach) & (df["start"] > earlier_start)
    if not apart.any():
        return
    step, again = int(df.loc[apart, "step"].iloc[0]), float(df.loc[apart, "start"].iloc[0])
    first = float(df.loc[df["step"] == step, "start"].min())
    raise TraceError(
        path,
        f"ProfilerStep#{step} occurs at separate times (ts={first!r} and ts={again!r}): "
        "two profiling sessions in one file? Split the trace per session, or number its steps apart",
    )


def _no_length_messages(path: str, steps: pd.DataFrame) -> list[str]:
    return [
        f"{path}: step ProfilerStep#{step} at ts={float(start)!r} has no length: left out; "
        "what was launched in it counts in no step"
        for step, start in zip(steps["step"], steps["start"])
    ]


def assign_steps(t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    starts = windows["start"].to_numpy()
    stops = starts + windows["dur"].to_numpy()
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < stops[np.maximum(i, 0)])
    if len(windows) == 1 and int(windows["step"].iat[0]) == -1:
        ok = np.ones(len(t), bool)  # no steps: everything belongs to the one window
    steps = windows["step"].to_numpy(np.int64)
    return np.where(ok, steps[np.maximum(i, 0)], NO_STEP)
