"""The three quantities the claims, the runs and regime tables, the figures and the README state, defined once.

Each reads a steps-shaped table (``run``, ``trial``, ``step``, ``rank`` and the time columns: the profiled
``steps``, the ``timed_steps`` recorded without the profiler, or a regime point's recorded steps through
:func:`steps_frame`) and follows :mod:`muon_repro.analysis.rounds`: reduce over ranks per step, take the
median of each round's steps, then an estimate and a 95% t interval over rounds.

* :func:`optimizer_share`: per step, the optimizer's time (mean over ranks) over the step's (slowest rank);
  the mean over rounds of the rounds' medians. The original study's "~1.1% of training time".
* :func:`muon_extra`: Muon's step time (slowest rank) over AdamW's, paired by round, as a geometric mean,
  minus one. The paper's "1-3% added latency".
* :func:`time_ratio`: any time of one run over another's, paired by round (communication time: Muon over
  AdamW, the original study's 0.57x), as a geometric mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from muon_repro.analysis.rounds import align_rounds, mean_interval, paired_ratio_interval, per_round, per_round_ratio, rounds_of


class Interval(NamedTuple):
    """An estimate and its 95% interval (NaN bounds with one round: no interval)."""

    value: float
    low: float
    high: float


RunSteps = tuple[pd.DataFrame, str]  # a steps-shaped table and the run id whose rows to read


def optimizer_share(source: pd.DataFrame, run: str) -> Interval:
    """The optimizer's share of the step of ``run``, formed within each step (see the module docstring)."""
    return Interval(*mean_interval(per_round_ratio(source, run, "optimizer_ms", "step_ms", "mean", "max")))


def time_ratio(a: RunSteps, b: RunSteps, column: str, how: str) -> Interval:
    """``column`` (reduced over ranks with ``how`` per step, median per round) of run ``a`` over run ``b``, paired by
    round: the geometric mean over rounds and its t interval."""
    return Interval(*paired_ratio_interval(*paired_rounds(column, how, a, b)))


def muon_extra(muon: RunSteps, adamw: RunSteps) -> Interval:
    """Muon's step time over AdamW's at the same work, minus one (see the module docstring)."""
    return Interval(*(r - 1.0 for r in time_ratio(muon, adamw, "step_ms", "max")))


def paired_rounds(column: str, how: str, *runs: RunSteps) -> tuple[np.ndarray, ...]:
    """Each run's ``column`` per round (reduced over ranks with ``how``, median over steps), for the rounds every
    one of ``runs`` was recorded in."""
    return align_rounds(*((rounds_of(source, run), per_round(source, run, column, how)) for source, run in runs))


def steps_frame(run: str, trials: Sequence[np.ndarray]) -> pd.DataFrame:
    """A steps-shaped table of one run from its trials' recorded steps: per trial a ``[step, 2]`` array of the
    step time (slowest rank) and the optimizer time (mean over ranks), already reduced over ranks (one row per
    step, rank 0)."""
    frames = [
        pd.DataFrame(
            {
                "run": run,
                "trial": trial,
                "step": np.arange(len(recorded)),
                "rank": 0,
                "step_ms": recorded[:, 0],
                "optimizer_ms": recorded[:, 1],
            }
        )
        for trial, recorded in enumerate(trials)
        if len(recorded)
    ]
    columns = ["run", "trial", "step", "rank", "step_ms", "optimizer_ms"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
