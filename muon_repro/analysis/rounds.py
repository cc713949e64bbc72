"""Intervals for statistics of runs recorded in interleaved rounds.

The configurations of a sweep are recorded in *rounds*: trial k of every configuration is
recorded in round k, one configuration after the other, close in time (A B C A B C ...). A shared
machine drifts between rounds, and that drift hits every configuration of a round alike, so runs
are *paired by round*; and the steps of one round share its state (caches, clocks, neighbours), so
they are not independent draws. The unit of replication is therefore the round, and the procedure
is:

1. Per step, reduce each quantity over the ranks: ``max`` for step time (a step lasts as long as
   its slowest rank), ``mean`` otherwise. A ratio of parts (the optimizer share: optimizer time
   over step time) is formed here, within each step, before anything is reduced over steps.
2. Per round, take the median over that round's steps (after warm-up: ``first_step``): one value
   per run and round (:func:`per_round`, :func:`per_round_ratio`).
3. Pair the runs of a statistic by round id (:func:`rounds_of`, :func:`align_rounds`; only rounds
   every run has), and form the statistic per round: the log ratio ``log(a_k / b_k)`` for a
   ratio of two runs, the value itself for a share or a difference. A statistic over the largest of
   several (the fastest of a grid's rivals, the stage a pipeline's step pays for) takes each one's mean and the
   largest, with Bonferroni intervals (:func:`largest_mean_interval`, :func:`closest_rival_ratio`), never the
   largest of each round's values, whose mean is biased in a near tie.
4. The estimate is the mean over rounds (``exp`` of the mean log ratio for a ratio, a geometric
   mean of the per-round ratios), and the interval is Student's ``mean +- t(level, n - 1) * sd /
   sqrt(n)`` over the n rounds (:func:`paired_ratio_interval`, :func:`mean_interval`). With 3
   rounds ``t(0.975, 2) = 4.30``: few rounds give honest, wide intervals rather than the range of
   three medians.

:func:`simulate_coverage` measures how often the interval covers a known ratio under a model of
this design (shared round drift, per-configuration jitter, heavy-tailed step noise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

LEVEL = 0.95
NAN3 = (float("nan"), float("nan"), float("nan"))


# --- Student's t quantile (no scipy: the regularized incomplete beta function by continued fraction) ---


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _beta_inc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _beta_inc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def _t_pdf(t: float, df: float) -> float:
    """Density of Student's t with ``df`` degrees of freedom at ``t``."""
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (~1e-12): Newton's method on :func:`t_cdf`,
    kept inside a bracket that each step narrows, and bisecting it whenever a Newton step would leave it (a few
    evaluations where bisection alone takes ~45; Welch's fractional ``df`` misses the cache every time)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    t = 0.5 * (lo + hi)
    for _ in range(200):
        below = t_cdf(t, df) - p
        lo, hi = (t, hi) if below < 0 else (lo, t)
        step = below / _t_pdf(t, df)
        following = t - step if lo < t - step < hi else 0.5 * (lo + hi)
        if abs(following - t) <= 1e-13 * following or hi - lo <= 1e-13 * hi:
            return following
        t = following
    return t


# --- one value per run and round ---


def _rows(steps: pd.DataFrame, run: str, first_step: int | None) -> pd.DataFrame:
    rows = steps[steps["run"] == run]
    return rows if first_step is None else rows[rows["step"] >= first_step]


def rounds_of(steps: pd.DataFrame, run: str) -> np.ndarray:
    """The run's round (trial) ids, in order: the positions of :func:`per_round`'s values."""
    return np.sort(steps.loc[steps["run"] == run, "trial"].dropna().unique().astype("int64"))


def _by_round(per_step: pd.Series, rounds: np.ndarray) -> np.ndarray:
    """Median over each round's steps of a (trial, step)-indexed series, one value per round (NaN for none)."""
    medians = per_step.astype("float64").groupby(level="trial").median()
    return medians.reindex(rounds).to_numpy(dtype="float64", na_value=np.nan)


def per_round(steps: pd.DataFrame, run: str, column: str, how: str = "mean", *, first_step: int | None = None) -> np.ndarray:
    """Per round: ``column`` reduced over ranks with ``how`` per step, then the median over the round's steps."""
    rows = _rows(steps, run, first_step)
    if rows.empty or column not in rows.columns:
        return np.zeros(0)
    values = rows.groupby(["trial", "step"])[column].agg(how)
    return _by_round(values, rounds_of(steps, run))


def per_round_ratio(
    steps: pd.DataFrame,
    run: str,
    numerator: str,
    denominator: str,
    how_num: str = "mean",
    how_den: str = "max",
    *,
    first_step: int | None = None,
) -> np.ndarray:
    """Per round: the median over steps of (numerator over ranks) / (denominator over ranks), formed per step."""
    rows = _rows(steps, run, first_step)
    if rows.empty or numerator not in rows.columns or denominator not in rows.columns:
        return np.zeros(0)
    grouped = rows.groupby(["trial", "step"])
    num = grouped[numerator].agg(how_num).astype("float64")
    den = grouped[denominator].agg(how_den).astype("float64")
    return _by_round(num / den.where(den > 0), rounds_of(steps, run))


def align_rounds(*runs: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Given ``(round_ids, values)`` per run, the values of the rounds every run has, in round order.

    For example ``a, b = align_rounds((rounds_of(s, x), per_round(s, x, c)), (rounds_of(s, y), per_round(s, y, c)))``.
    """
    if not runs:
        return ()
    common = np.asarray(runs[0][0])
    for ids, _ in runs[1:]:
        common = np.intersect1d(common, ids)
    picked = []
    for ids, values in runs:
        ids, values = np.asarray(ids), np.asarray(values, dtype="float64")
        if ids.shape != values.shape:
            raise ValueError(f"align_rounds needs one value per round id, got {ids.shape} and {values.shape}")
        order = np.argsort(ids, kind="stable")
        picked.append(values[order[np.searchsorted(ids[order], common)]])
    return tuple(picked)


# --- intervals over rounds ---


def _t_bounds(x: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and Student-t interval over the last axis (no NaN; at least 2 values)."""
    n = x.shape[-1]
    mean = x.mean(axis=-1)
    half = t_quantile((1.0 + level) / 2.0, n - 1) * x.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def mean_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(estimate, low, high): the mean of per-round values (a share, a difference) and its t interval."""
    x = np.asarray(values, dtype="float64")
    x = x[np.isfinite(x)]
    if x.size == 0:
        return NAN3
    if x.size == 1:
        return float(x[0]), float("nan"), float("nan")
    mean, low, high = _t_bounds(x, level)
    return float(mean), float(low), float(high)


def share_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """:func:`mean_interval` of per-round shares (each a part over its whole, in [0, 1]), its ends cut to [0, 1]. The
    truth lies there, so the cut interval holds it exactly when the whole one does; with few rounds the t interval
    runs past 0 (2 rounds: -9% on the H200), a share no one can have."""
    mean, low, high = mean_interval(values, level)
    return mean, float(np.clip(low, 0.0, 1.0)), float(np.clip(high, 0.0, 1.0))


def largest_mean_interval(samples: Sequence[np.ndarray], level: float = LEVEL) -> tuple[tuple[float, float, float], int]:
    """((estimate, low, high), index of the largest) of the largest of several means, each over its own per-round
    values: the largest mean, and the interval from the largest low end to the largest high end of Bonferroni
    intervals at ``1 - (1 - level) / k`` for ``k`` samples.

    Not the mean of each round's largest value: the largest of noisy values is biased high, so with tied means that
    interval misses the truth more often the more rounds there are. This one misses only if some mean's low end
    overshoots its truth or the largest mean's high end falls short of its, together at most ``(k + 1) / (2k)`` of
    ``1 - level``. A sample without an estimate leaves the result without one (NaN)."""
    if not samples:
        raise ValueError("largest_mean_interval needs at least one sample")
    per_sample = np.array([mean_interval(x, 1.0 - (1.0 - level) / len(samples)) for x in samples])
    estimates = per_sample[:, 0]
    largest = int(np.nanargmax(estimates)) if np.isfinite(estimates).any() else 0
    if np.isnan(estimates).any():
        return NAN3, largest
    return (float(estimates[largest]), float(per_sample[:, 1].max()), float(per_sample[:, 2].max())), largest


def natural_logs(values: np.ndarray) -> np.ndarray:
    """``log`` of each value by the C library, one at a time. numpy's vector ``log`` runs other code on a CPU with
    AVX-512 (Intel's SVML in the Linux wheels), whose last bits can differ: every ratio's estimate and interval is
    built on these logs, so a rebuild on such a machine would rewrite the tables."""
    flat = np.asarray(values, dtype="float64")
    return np.fromiter(map(math.log, flat.ravel().tolist()), dtype="float64", count=flat.size).reshape(flat.shape)


def closest_rival_ratio(
    a: np.ndarray, rivals: Sequence[np.ndarray], level: float = LEVEL
) -> tuple[tuple[float, float, float], int]:
    """((estimate, low, high), index of the closest rival) of ``a`` over the fastest of ``rivals``: the largest of
    the paired ratios a/rival (rounds paired by position, on the log scale as :func:`paired_ratio_interval`), by
    :func:`largest_mean_interval`. Not a/(each round's fastest rival): with three tied rivals that interval
    covered 0.53 at 10 rounds."""
    if not rivals:
        raise ValueError("closest_rival_ratio needs at least one rival")
    a = np.asarray(a, dtype="float64")
    logs = []
    for rival in rivals:
        b = np.asarray(rival, dtype="float64")
        if a.shape != b.shape:
            raise ValueError(f"closest_rival_ratio needs aligned rounds, got {a.shape} and {b.shape}")
        keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
        logs.append(natural_logs(a[keep]) - natural_logs(b[keep]))
    (estimate, low, high), closest = largest_mean_interval(logs, level)
    return (math.exp(estimate), math.exp(low), math.exp(high)), closest


def paired_ratio_interval(a: np.ndarray, b: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(estimate, low, high) of a/b from rounds paired by position: exp of the mean log ratio and its t interval.

    Rounds where either value is NaN or not positive are dropped.
    """
    a, b = np.asarray(a, dtype="float64"), np.asarray(b, dtype="float64")
    if a.shape != b.shape:
        raise ValueError(f"paired_ratio_interval needs aligned rounds, got {a.shape} and {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    estimate, low, high = mean_interval(natural_logs(a[keep]) - natural_logs(b[keep]), level)
    return math.exp(estimate) if math.isfinite(estimate) else estimate, math.exp(low), math.exp(high)


def geometric_mean(values: np.ndarray) -> float:
    """exp of the mean log of the finite, positive ``values``: the average :func:`paired_ratio_interval`'s estimate is the
    ratio of (NaN when none is left)."""
    v = np.asarray(values, dtype="float64")
    v = v[np.isfinite(v) & (v > 0)]
    return math.exp(float(natural_logs(v).mean())) if len(v) else float("nan")


# --- coverage under a model of the design ---


def simulate_rounds(
    true_ratio: float,
    n_rounds: int,
    studies: int,
    seed: int,
    *,
    round_sd: float = 0.15,
    jitter_sd: float = 0.05,
    step_sd: float = 0.05,
    step_noise_df: float = 3,
    steps: int = 6,
) -> tuple[np.ndarray, np.ndarray]:
    """Step times of configurations A and B, each ``[study, round, step]``; the ratio of A's to B's medians is ``true_ratio``.

    Per study and round: a shared drift ``exp(N(0, round_sd))`` hitting A and B alike, a jitter
    ``exp(N(0, jitter_sd))`` per configuration, and per step ``exp(step_sd * T(step_noise_df))``.
    """
    rng = np.random.default_rng(seed)
    shared = rng.normal(0.0, round_sd, size=(studies, n_rounds))
    jitter = rng.normal(0.0, jitter_sd, size=(2, studies, n_rounds))
    noise = np.exp(step_sd * rng.standard_t(step_noise_df, size=(2, studies, n_rounds, steps)))
    level = 100.0 * np.exp(shared + jitter)[..., None] * noise  # ms
    return true_ratio * level[0], level[1]


def simulate_coverage(
    true_ratio: float,
    n_rounds: int,
    studies: int,
    seed: int,
    *,
    round_sd: float = 0.15,
    step_noise_df: float = 3,
    steps: int = 6,
    jitter_sd: float = 0.05,
    step_sd: float = 0.05,
    level: float = LEVEL,
) -> float:
    """Fraction of ``studies`` simulated studies (:func:`simulate_rounds`) whose paired interval contains ``true_ratio``.

    Vectorized: 2,000 studies of 20 rounds of 6 steps take a few hundredths of a second.
    """
    a, b = simulate_rounds(
        true_ratio,
        n_rounds,
        studies,
        seed,
        round_sd=round_sd,
        jitter_sd=jitter_sd,
        step_sd=step_sd,
        step_noise_df=step_noise_df,
        steps=steps,
    )
    logs = np.log(np.median(a, axis=-1)) - np.log(np.median(b, axis=-1))
    _, low, high = _t_bounds(logs, level)
    truth = math.log(true_ratio)
    return float(np.mean((low <= truth) & (truth <= high)))
