"""Round-paired intervals: per-round values, paired t intervals on log ratios, their coverage, and the defect they fix."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from support import two_level_bootstrap as bootstrap  # the procedure rounds.py replaced

from muon_repro.analysis.rounds import (
    align_rounds,
    closest_rival_ratio,
    geometric_mean,
    largest_mean_interval,
    mean_interval,
    natural_logs,
    paired_ratio_interval,
    per_round,
    per_round_ratio,
    rounds_of,
    share_interval,
    simulate_coverage,
    simulate_rounds,
    t_quantile,
)

T975_2 = 4.302652729749464


@pytest.mark.parametrize(
    ("p", "df", "expected"), [(0.975, 1, 12.7062), (0.975, 2, 4.302653), (0.975, 9, 2.262157), (0.975, 19, 2.093024)]
)
def test_t_quantile_known_values(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(1.0 - p, df) == pytest.approx(-expected, abs=1e-4)


def test_t_quantile_edges():
    assert t_quantile(0.5, 4) == 0.0
    assert t_quantile(0.975, 10_000) == pytest.approx(1.959964, abs=1e-3)
    for bad in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            t_quantile(*bad)


def test_t_quantile_matches_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    for p in (0.6, 0.9, 0.95, 0.975, 0.995, 0.9995):
        for df in (1, 2, 3, 4.5, 7, 30, 200):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8)


def _steps() -> pd.DataFrame:
    """Run x: rounds 0, 1, 2 (round 2 without values), two ranks, a warm-up step 0; run y: rounds 1 and 2."""
    rows = []
    # round 0: per-step optimizer (mean over ranks) 1, 5, 9 and step time (max over ranks) 10, 20, 100
    for step, opt, step_ms in [(0, 50.0, 1000.0), (1, 1.0, 10.0), (2, 5.0, 20.0), (3, 9.0, 100.0)]:
        rows.append(("x", 0, 0, step, step_ms - 4.0, opt - 0.5))
        rows.append(("x", 0, 1, step, step_ms, opt + 0.5))
    for step, step_ms in [(1, 30.0), (2, 40.0), (3, 35.0)]:
        rows.append(("x", 1, 0, step, step_ms, 2.0))
        rows.append(("x", 1, 1, step, step_ms - 1.0, 2.0))
    rows.append(("x", 2, 0, 1, np.nan, np.nan))
    for trial in (2, 1):
        for step in (1, 2):
            rows.append(("y", trial, 0, step, 10.0 * (trial + 1), 1.0))
    return pd.DataFrame(rows, columns=["run", "trial", "rank", "step", "step_ms", "optimizer_ms"]).astype({"trial": "Int64"})


def test_per_round_reduces_over_ranks_then_takes_the_median_over_steps():
    steps = _steps()
    assert rounds_of(steps, "x").tolist() == [0, 1, 2]
    np.testing.assert_allclose(per_round(steps, "x", "step_ms", "max", first_step=1), [20.0, 35.0, np.nan])
    np.testing.assert_allclose(per_round(steps, "x", "step_ms", "mean", first_step=1), [18.0, 34.5, np.nan])
    # the warm-up step 0 (1,000 ms) counts unless it is cut
    np.testing.assert_allclose(per_round(steps, "x", "step_ms", "max"), [60.0, 35.0, np.nan])
    assert per_round(steps, "nobody", "step_ms").size == 0
    assert per_round(steps, "x", "no_such_column").size == 0


def test_a_ratio_of_parts_is_formed_within_each_step():
    steps = _steps()
    share = per_round_ratio(steps, "x", "optimizer_ms", "step_ms", first_step=1)
    # round 0: per step 1/10, 5/20, 9/100 -> median 0.1; the ratio of the medians would be 5/20 = 0.25
    ratio_of_medians = per_round(steps, "x", "optimizer_ms", first_step=1) / per_round(steps, "x", "step_ms", "max", first_step=1)
    assert share[0] == pytest.approx(0.1) and ratio_of_medians[0] == pytest.approx(0.25)
    assert share[1] == pytest.approx(2.0 / 35.0)
    assert math.isnan(share[2])
    assert per_round_ratio(steps, "x", "optimizer_ms", "missing").size == 0


def test_runs_pair_by_round_id():
    steps = _steps()
    x = (rounds_of(steps, "x"), per_round(steps, "x", "step_ms", "max", first_step=1))
    y = (rounds_of(steps, "y"), per_round(steps, "y", "step_ms", "max"))
    assert y[0].tolist() == [1, 2] and y[1].tolist() == [20.0, 30.0]
    a, b = align_rounds(x, y)
    np.testing.assert_allclose(a, [35.0, np.nan])
    np.testing.assert_allclose(b, [20.0, 30.0])
    # shuffled ids pair the same way
    np.testing.assert_allclose(
        align_rounds((np.array([2, 0, 1]), np.array([7.0, 5.0, 6.0])), (np.array([1, 2]), np.ones(2)))[0], [6, 7]
    )


def test_paired_ratio_interval_by_hand():
    # log2 ratios 1, 1, 2: mean 4/3, sd 1/sqrt(3), n 3 -> half width t(0.975, 2) / 3 (in log2 units)
    a, b = np.array([2.0, 4.0, 8.0, np.nan, 0.0, 5.0]), np.array([1.0, 2.0, 2.0, 1.0, 1.0, -1.0])
    estimate, low, high = paired_ratio_interval(a, b)
    assert estimate == pytest.approx(2 ** (4 / 3))
    assert low == pytest.approx(2 ** (4 / 3 - T975_2 / 3))
    assert high == pytest.approx(2 ** (4 / 3 + T975_2 / 3))
    one = paired_ratio_interval(np.array([3.0, np.nan]), np.array([1.5, 1.0]))
    assert one[0] == pytest.approx(2.0) and math.isnan(one[1]) and math.isnan(one[2])
    assert all(math.isnan(v) for v in paired_ratio_interval(np.array([np.nan]), np.array([1.0])))
    assert all(math.isnan(v) for v in paired_ratio_interval(np.zeros(0), np.zeros(0)))
    with pytest.raises(ValueError):
        paired_ratio_interval(np.ones(2), np.ones(3))


def test_mean_interval_by_hand():
    estimate, low, high = mean_interval(np.array([1.0, 2.0, np.nan, 3.0]))
    assert estimate == pytest.approx(2.0)
    assert (low, high) == pytest.approx((2.0 - T975_2 / math.sqrt(3), 2.0 + T975_2 / math.sqrt(3)))
    assert mean_interval(np.array([-0.5, np.nan]))[0] == -0.5
    assert all(math.isnan(v) for v in mean_interval(np.zeros(0)))


def test_the_largest_mean_by_hand():
    """The largest of two means, each with its Bonferroni interval (t at 1 - 0.05/4 for two samples): from the
    largest low end to the largest high end."""
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.5, 3.0, 3.5, np.nan])
    (estimate, low, high), largest = largest_mean_interval([a, b])
    t = t_quantile(1 - 0.05 / 4, 2)
    assert largest == 1 and estimate == pytest.approx(3.0)
    assert low == pytest.approx(max(2.0 - t / math.sqrt(3), 3.0 - t * 0.5 / math.sqrt(3)))
    assert high == pytest.approx(max(2.0 + t / math.sqrt(3), 3.0 + t * 0.5 / math.sqrt(3)))
    assert all(math.isnan(v) for v in largest_mean_interval([a, np.zeros(0)])[0])
    with pytest.raises(ValueError, match="at least one sample"):
        largest_mean_interval([])


def test_the_closest_rival_is_the_largest_paired_ratio():
    """Against one rival it is the paired ratio itself; against two, the slower rival's ratio, never the ratio to
    each round's faster one."""
    x, y, z = np.array([3.0, 3.3, 2.7]), np.array([2.0, 1.0, 3.0]), np.array([1.0, 2.0, 1.0])
    assert closest_rival_ratio(x, [y])[0] == pytest.approx(paired_ratio_interval(x, y))
    (estimate, _, _), closest = closest_rival_ratio(x, [y, z])
    assert closest == 1 and estimate == pytest.approx(paired_ratio_interval(x, z)[0])
    assert estimate < paired_ratio_interval(x, np.minimum(y, z))[0]  # the per-round minimum's ratio, biased high
    with pytest.raises(ValueError, match="aligned rounds"):
        closest_rival_ratio(x, [np.ones(2)])


def test_pairing_removes_a_shared_round_effect():
    drift = np.array([1.0, 10.0, 100.0, 0.1])  # the machine's state, common to both runs of a round
    a = 50.0 * drift * np.array([1.01, 0.99, 1.0, 1.005])
    b = 25.0 * drift * np.array([1.0, 1.0, 0.995, 1.01])
    estimate, low, high = paired_ratio_interval(a, b)
    assert estimate == pytest.approx(2.0, rel=0.01)
    assert 1.97 < low < estimate < high < 2.03
    # resampling each run's rounds independently (the former bootstrap) keeps the drift in the interval
    _, old_low, old_high = bootstrap.interval(lambda m, n: m / n, [a[:, None], b[:, None]], replicates=500)
    assert old_high / old_low > 10.0


@pytest.mark.parametrize("n_rounds", [3, 5, 10, 20])
@pytest.mark.parametrize("true_ratio", [0.57, 1.0, 2.0])
def test_paired_interval_covers_the_true_ratio(n_rounds, true_ratio):
    assert 0.92 <= simulate_coverage(true_ratio, n_rounds, studies=2000, seed=0) <= 0.98
    # without a shared drift, and with round-to-round jitter that dominates the step noise
    assert (
        0.92 <= simulate_coverage(true_ratio, n_rounds, studies=2000, seed=1, round_sd=0.0, jitter_sd=0.1, step_sd=0.02) <= 0.98
    )


def _old_intervals(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([bootstrap.interval(lambda m, n: m / n, [a[s], b[s]], seed=s)[1:] for s in range(len(a))])


@pytest.mark.slow  # 600 simulated studies through the former bootstrap (~2 s)
def test_the_former_bootstrap_undercovers_with_three_rounds():
    """Where round-to-round variation dominates the step noise, the two-level bootstrap's 3-round interval is
    about the range of the rounds' medians, and misses the truth far more often than 5% of the time."""
    a, b = simulate_rounds(1.0, 3, 600, 2, round_sd=0.0, jitter_sd=0.1, step_sd=0.02)
    old = _old_intervals(a, b)
    assert np.mean((old[:, 0] <= 1.0) & (1.0 <= old[:, 1])) < 0.92  # 0.887 with these seeds
    new = np.array([paired_ratio_interval(np.median(a[s], 1), np.median(b[s], 1))[1:] for s in range(len(a))])
    assert 0.92 <= np.mean((new[:, 0] <= 1.0) & (1.0 <= new[:, 1])) <= 0.98


def test_the_former_bootstrap_keeps_a_shared_drift_in_its_width():
    """Under a drift shared by the configurations of a round, pairing gives narrower intervals (5 rounds)."""
    a, b = simulate_rounds(1.0, 5, 200, 3)
    old = _old_intervals(a, b)
    new = np.array([paired_ratio_interval(np.median(a[s], 1), np.median(b[s], 1))[1:] for s in range(len(a))])
    assert np.median(np.log(new[:, 1] / new[:, 0])) < 0.6 * np.median(np.log(old[:, 1] / old[:, 0]))


def test_a_share_interval_stays_within_what_a_share_can_be():
    """Two rounds of a small share: the t interval runs below 0 (t(0.975, 1) = 12.7); the share's is cut at 0, and at 1
    for a share near the whole, with the estimate untouched."""
    mean, low, high = mean_interval(np.array([0.01, 0.10]))
    assert low < 0
    assert share_interval(np.array([0.01, 0.10])) == (pytest.approx(mean), 0.0, pytest.approx(high))
    assert share_interval(np.array([0.90, 0.99]))[2] == 1.0
    assert all(np.isnan(share_interval(np.array([0.5])))[1:])  # one round: no interval, as mean_interval's


def test_ratios_do_not_depend_on_numpys_vector_log_or_exp(monkeypatch):
    """numpy's float64 log and exp run Intel's SVML on an AVX-512 CPU, whose last bits can differ from the C library's:
    here they are made to differ on purpose, and no estimate or interval may move by a bit."""
    from muon_repro.study.claims import welch_log_ratio

    rng = np.random.default_rng(11)
    a, b, c = (rng.uniform(50.0, 150.0, size=8) for _ in range(3))

    def every_ratio():
        return (
            paired_ratio_interval(a, b),
            closest_rival_ratio(a, [b, c]),
            geometric_mean(a),
            welch_log_ratio(a, c),
            natural_logs(np.stack([a, b])).tolist(),
        )

    before = every_ratio()
    for name in ("log", "exp"):
        exact = getattr(np, name)
        monkeypatch.setattr(np, name, lambda x, *args, _f=exact, **kwargs: np.nextafter(_f(x, *args, **kwargs), np.inf))
    assert np.log(2.0) != math.log(2.0)  # the stand-in is in place
    assert every_ratio() == before


def test_natural_logs_keep_the_shape_and_the_c_librarys_bits():
    values = np.random.default_rng(12).uniform(1e-6, 1e6, size=(3, 5))
    logs = natural_logs(values)
    assert logs.shape == (3, 5) and logs.tolist() == [[math.log(v) for v in row] for row in values.tolist()]
    assert natural_logs(np.array([])).shape == (0,)
