"""The three quantities the claims, the runs and regime tables, the figures and the README state, defined once.

Each reads a steps-shaped table (``run``, ``trial``, ``step``, ``rank`` and the time columns: the profiled
``steps``, the ``timed_steps`` recorded without the profiler, or a regime point's recorded steps through
:func:`steps_frame`) and follows :mod:`muon_repro.analysis.rounds`: reduce over ranks per step, take the
median of each round's steps, then an estimate and a 95% t interval over rounds.

* :func:`optimizer_share`: per step, the optimizer's time (mean over ranks) over the step's (slowest rank);
  the mean over rounds of the rounds' medians, its interval cut to [0, 1] (:func:`~rounds.share_interval`). The
  original study's "~1.1% of training time".
* :func:`muon_extra`: Muon's step time (slowest rank) over AdamW's, paired by round, as a geometric mean,
  minus one. The paper's "1-3% added latency".
* :func:`time_ratio`: any time of one run over another's, paired by round (communication time: Muon over
  AdamW, the original study's 0.57x), as a geometric mean.
* :func:`typical_time`: one run's time, as the runs, regimes and predictions tables state it: the median over
  rounds of the rounds' medians.

Every estimator leaves out the *disturbed rounds* (:func:`disturbed`), by one rule for every table, declared in
:mod:`muon_repro.tables.rounds_rule`: a round whose median step time (slowest rank) lies more than ``DISTURBED_MADS``
scaled median absolute deviations, and more than ``DISTURBED_MIN_SHIFT`` of the median, from the median of the
run's rounds (with at least ``MIN_ROUNDS_JUDGED`` rounds). A paired statistic leaves out a round disturbed in any
of its runs. The tables count the rounds left out (``disturbed_rounds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd

from muon_repro.analysis.rounds import align_rounds, paired_ratio_interval, per_round, per_round_ratio, rounds_of, share_interval
from muon_repro.tables.rounds_rule import DISTURBED_MADS, DISTURBED_MIN_SHIFT, MAD_SCALE, MIN_ROUNDS_JUDGED


class Interval(NamedTuple):
    """An estimate and its 95% interval (NaN bounds with one round: no interval)."""

    value: float
    low: float
    high: float


RunSteps = tuple[pd.DataFrame, str]  # a steps-shaped table and the run id whose rows to read


def step_source(steps: pd.DataFrame, timed: pd.DataFrame, run: str) -> pd.DataFrame:
    """Where ``run``'s step times come from: its steps timed without the profiler when it has them (the profiler
    costs Muon and AdamW unequally), else its profiled steps."""
    return timed if not timed.empty and bool((timed["run"] == run).any()) else steps


def disturbed(round_step_ms: np.ndarray) -> np.ndarray:
    """Which rounds are disturbed (see the module docstring), from the rounds' median step times."""
    x = np.asarray(round_step_ms, dtype="float64")
    flags = np.zeros(x.shape, dtype=bool)
    ok = np.isfinite(x)
    if ok.sum() < MIN_ROUNDS_JUDGED:  # two rounds cannot say which of them is the odd one
        return flags
    median = float(np.median(x[ok]))
    spread = MAD_SCALE * float(np.median(np.abs(x[ok] - median)))
    flags[ok] = np.abs(x[ok] - median) > max(DISTURBED_MADS * spread, DISTURBED_MIN_SHIFT * abs(median))
    return flags


def disturbed_rounds(source: pd.DataFrame, run: str) -> set[int]:
    """The round ids of ``run`` that the estimators leave out."""
    ids = rounds_of(source, run)
    return {int(i) for i in ids[disturbed(per_round(source, run, "step_ms", "max"))]}


def left_out(*runs: RunSteps) -> set[int]:
    """The rounds a statistic over ``runs`` leaves out: those disturbed in any of them."""
    return set().union(*(disturbed_rounds(source, run) for source, run in runs))


def unpaired_rounds(*runs: RunSteps) -> set[int]:
    """The rounds that ``runs`` recorded in different sweeps (their steps' ``sweep``: one id per bench command):
    round k of a configuration re-recorded alone, or finished by a second command, is no pair of the others'
    round k. Runs recorded before sweeps were named (every id null) pair by index, as they always did."""
    if len(runs) < 2:
        return set()
    by_run = []
    for source, run in runs:
        if "sweep" not in source.columns:
            return set()
        rows = source.loc[source["run"] == run, ["trial", "sweep"]].drop_duplicates("trial")
        sweeps = rows["sweep"].astype(object).where(rows["sweep"].notna(), None)
        by_run.append(dict(zip(rows["trial"].astype("int64"), sweeps)))
    common = set.intersection(*(set(sweeps) for sweeps in by_run))
    return {int(k) for k in common if len({sweeps[k] for sweeps in by_run}) > 1}


def recorded_together(source: pd.DataFrame, a: str, b: str) -> bool:
    """Whether runs ``a`` and ``b`` of ``source`` (rows of run, trial, sweep) share a round recorded by one sweep
    (:func:`unpaired_rounds`' rule, the claims' pairing): what a ratio of their times needs, since a machine's speed
    drifts from one session to the next."""
    common = set(rounds_of(source, a).tolist()) & set(rounds_of(source, b).tolist())
    return bool(common - unpaired_rounds((source, a), (source, b)))


def optimizer_share(source: pd.DataFrame, run: str) -> Interval:
    """The optimizer's share of the step of ``run``, formed within each step (see the module docstring)."""
    shares = per_round_ratio(source, run, "optimizer_ms", "step_ms", "mean", "max")
    keep = ~np.isin(rounds_of(source, run), sorted(disturbed_rounds(source, run)))
    return Interval(*share_interval(shares[keep]))


def typical_time(source: pd.DataFrame, run: str, column: str, how: str) -> float:
    """``column`` of ``run`` (reduced over ranks with ``how`` per step, median per round), as one number: the median
    over its rounds. Every round counts (a median needs no rule for an odd one); NaN for a run without steps."""
    values = per_round(source, run, column, how)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else float("nan")


def time_ratio(a: RunSteps, b: RunSteps, column: str, how: str) -> Interval:
    """``column`` (reduced over ranks with ``how`` per step, median per round) of run ``a`` over run ``b``, paired by
    round: the geometric mean over rounds and its t interval."""
    return Interval(*paired_ratio_interval(*paired_rounds(column, how, a, b)))


def muon_extra(muon: RunSteps, adamw: RunSteps) -> Interval:
    """Muon's step time over AdamW's at the same work, minus one (see the module docstring)."""
    return Interval(*(r - 1.0 for r in time_ratio(muon, adamw, "step_ms", "max")))


def paired_rounds(column: str, how: str, *runs: RunSteps) -> tuple[np.ndarray, ...]:
    """Each run's ``column`` per round (reduced over ranks with ``how``, median over steps), for the rounds every
    one of ``runs`` was recorded in, by one sweep, and none of them was disturbed in."""
    skipped = sorted(left_out(*runs) | unpaired_rounds(*runs))
    per_run = []
    for source, run in runs:
        ids, values = rounds_of(source, run), per_round(source, run, column, how)
        keep = ~np.isin(ids, skipped)
        per_run.append((ids[keep], values[keep]))
    return align_rounds(*per_run)


def steps_frame(run: str, trials: Mapping[int, np.ndarray], sweeps: Mapping[int, str | None] | None = None) -> pd.DataFrame:
    """A steps-shaped table of one run from its trials' recorded steps: per trial (by its number, its round) a
    ``[step, 2]`` array of the step time (slowest rank) and the optimizer time (mean over ranks), already reduced over
    ranks (one row per step, rank 0). ``sweeps``: each trial's sweep id (config.json ``sweep``), so that rounds of
    two runs recorded by different sweeps are not paired (:func:`unpaired_rounds`)."""
    frames = [
        pd.DataFrame(
            {
                "run": run,
                "trial": trial,
                "step": np.arange(len(recorded)),
                "rank": 0,
                "step_ms": recorded[:, 0],
                "optimizer_ms": recorded[:, 1],
                **({"sweep": sweeps.get(trial)} if sweeps is not None else {}),
            }
        )
        for trial, recorded in sorted(trials.items())
        if len(recorded)
    ]
    columns = ["run", "trial", "step", "rank", "step_ms", "optimizer_ms", *(["sweep"] if sweeps is not None else [])]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
