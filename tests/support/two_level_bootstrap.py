"""The two-level bootstrap the claims used before :mod:`muon_repro.analysis.rounds`, kept for the tests that
show why it was replaced (tests/test_rounds.py): intervals for runs recorded in several trials of several steps.

A run's per-step values are a two-level sample: trials (recordings at different times of a
shared machine) and steps within a trial. The bootstrap resamples both levels, trials with
replacement and then steps within each drawn trial, independently for every run that enters a
statistic, and recomputes the statistic (a ratio of medians, say) on every replicate; the 95%
interval is the 2.5th to 97.5th percentile of the replicates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

REPLICATES = 2000
LEVEL = 0.95


def per_step(steps: pd.DataFrame, run: str, column: str, how: str = "mean") -> np.ndarray:
    """A run's values of ``column`` per (trial, step), reduced over its ranks (``max`` for step time:
    a step lasts as long as its slowest rank), as a ``[trial, step]`` array padded with NaN."""
    rows = steps[steps["run"] == run]
    if rows.empty or column not in rows.columns:
        return np.full((0, 0), np.nan)
    values = rows.groupby(["trial", "step"])[column].agg(how).astype("float64")
    trials = [g.to_numpy() for _, g in values.groupby(level="trial")]
    width = max(len(t) for t in trials)
    return np.array([np.pad(t, (0, width - len(t)), constant_values=np.nan) for t in trials])


def resample_medians(samples: np.ndarray, rng: np.random.Generator, replicates: int = REPLICATES) -> np.ndarray:
    """Medians of ``replicates`` two-level bootstrap resamples of a ``[trial, step]`` array."""
    n_trials, n_steps = samples.shape
    trial_idx = rng.integers(0, n_trials, size=(replicates, n_trials))
    step_idx = rng.integers(0, n_steps, size=(replicates, n_trials, n_steps))
    drawn = samples[trial_idx[:, :, None], step_idx].reshape(replicates, -1)
    return np.nanmedian(drawn, axis=1)


def median(samples: np.ndarray) -> float:
    return float(np.nanmedian(samples)) if samples.size else float("nan")


def interval(
    statistic: Callable[..., float | np.ndarray],
    samples: Sequence[np.ndarray],
    *,
    replicates: int = REPLICATES,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(estimate, low, high): ``statistic`` of the runs' medians, and its bootstrap interval.

    ``statistic`` takes one median per run (floats, or arrays of replicates) and is written with
    numpy so that it works on both. The seed is fixed: the same tables give the same interval.
    """
    if any(s.size == 0 or np.isnan(s).all() for s in samples):
        return float("nan"), float("nan"), float("nan")
    estimate = float(statistic(*(median(s) for s in samples)))
    rng = np.random.default_rng(seed)
    draws = np.asarray(statistic(*(resample_medians(s, rng, replicates) for s in samples)), dtype="float64")
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.nanpercentile(draws, [tail, 100.0 - tail])
    return estimate, float(low), float(high)
