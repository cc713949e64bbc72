"""Behaviours of the statistics behind every claim's interval that no other test pinned, each found by a hand-made
mutant of the module that survived the fast tier: paired rounds and intervals (muon_repro.analysis.rounds), the
shared estimators and the disturbed-round rule (muon_repro.analysis.estimators), the wait/transfer matching of
traced collectives (muon_repro.analysis.waits) and of timed ones (muon_repro.analysis.timed_steps).

Every expected value is derived by hand from the documented formula (the modules' docstrings, docs/method.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.breakdown import TraceBreakdown
from muon_repro.analysis.estimators import disturbed, disturbed_rounds, typical_time
from muon_repro.analysis.rounds import (
    closest_rival_ratio,
    geometric_mean,
    largest_mean_interval,
    mean_interval,
    paired_ratio_interval,
    per_round_ratio,
    rounds_of,
    simulate_coverage,
    simulate_rounds,
    t_quantile,
)
from muon_repro.analysis.timed_steps import drain_idle, split_timed_waits, timed_run_columns
from muon_repro.analysis.trace_events import TraceMeta
from muon_repro.analysis.waits import split_wait_transfer

# ---------------------------------------------------------------- rounds: one value per run and round


def test_a_row_without_a_round_id_belongs_to_no_round():
    """``rounds_of``: the run's round ids; a row whose trial is null (not recorded in any round) adds none."""
    steps = pd.DataFrame(
        {"run": ["x"] * 4, "trial": pd.array([2, 0, None, 2], dtype="Int64"), "step": [0, 0, 0, 1], "step_ms": [1.0] * 4}
    )
    assert rounds_of(steps, "x").tolist() == [0, 2]


def test_a_step_without_a_step_time_counts_in_no_share():
    """A share is formed per step over the step's time; a step whose time is 0 (nothing recorded) has no share, and the
    round's median is over the other steps: median(10/100, 20/100) = 0.15, not an infinite share pulling it to 0.2."""
    steps = pd.DataFrame(
        {
            "run": "x",
            "trial": 0,
            "step": [0, 1, 2],
            "rank": 0,
            "optimizer_ms": [10.0, 20.0, 5.0],
            "step_ms": [100.0, 100.0, 0.0],
        }
    )
    share = per_round_ratio(steps, "x", "optimizer_ms", "step_ms")
    assert share.tolist() == [pytest.approx(0.15)]


# ---------------------------------------------------------------- rounds: intervals


def test_t_quantile_names_the_argument_it_refuses():
    """No degrees of freedom is a caller's error, refused with the rule it broke, not a math domain error."""
    with pytest.raises(ValueError, match="df > 0"):
        t_quantile(0.975, 0)


def test_a_mean_interval_counts_only_finite_rounds():
    """An infinite per-round value (a ratio over a zero) is no round's value: the estimate and interval are those of
    the finite rounds, 1, 2, 3: mean 2, half width t(0.975, 2) / sqrt(3)."""
    estimate, low, high = mean_interval(np.array([1.0, np.inf, 2.0, -np.inf, 3.0]))
    half = t_quantile(0.975, 2) * 1.0 / math.sqrt(3)  # the sample sd of 1, 2, 3 is 1
    assert (estimate, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half))


def test_the_largest_means_low_end_is_the_largest_low_end_of_any_mean():
    """A tight sample just below a noisy one: the largest mean is the noisy one's, but the interval's low end is the
    tight sample's low end, since the largest of the means is at least each mean (docstring)."""
    tight, noisy = np.array([3.0, 3.1, 2.9]), np.array([1.0, 6.0, 3.5])
    (estimate, low, high), largest = largest_mean_interval([tight, noisy])
    t = t_quantile(1 - 0.05 / 4, 2)  # Bonferroni over two samples, two-sided
    tight_low, noisy_low = 3.0 - t * 0.1 / math.sqrt(3), 3.5 - t * 2.5 / math.sqrt(3)
    assert largest == 1 and estimate == pytest.approx(3.5)
    assert noisy_low < tight_low and low == pytest.approx(tight_low)
    assert high == pytest.approx(3.5 + t * 2.5 / math.sqrt(3))


def test_the_closest_rival_leaves_out_rounds_a_rival_has_no_time_for():
    """On the log scale as :func:`paired_ratio_interval`: a round where a rival's time is 0 or negative (not
    recorded) is dropped for that rival, not a math error."""
    a = np.array([4.0, 6.0, 8.0, 5.0])
    rival = np.array([2.0, 3.0, 4.0, 0.0])
    (estimate, low, high), closest = closest_rival_ratio(a, [rival])
    assert closest == 0 and estimate == pytest.approx(2.0)
    assert (estimate, low, high) == pytest.approx(paired_ratio_interval(a[:3], rival[:3]))
    (estimate, _, _), _ = closest_rival_ratio(a, [np.array([2.0, 3.0, 4.0, -1.0])])
    assert estimate == pytest.approx(2.0)


def test_the_geometric_mean_is_over_the_finite_positive_values():
    """exp of the mean log: 2 and 8 give 4 (their arithmetic mean is 5); a 0, a negative value or a NaN counts in
    none, and nothing left gives NaN."""
    assert geometric_mean(np.array([2.0, 8.0])) == pytest.approx(4.0)
    assert geometric_mean(np.array([0.0, 2.0, np.nan, 8.0, -3.0])) == pytest.approx(4.0)
    assert math.isnan(geometric_mean(np.array([0.0, np.nan])))


def test_simulated_coverage_is_the_share_of_studies_whose_paired_interval_holds_the_truth():
    """``simulate_coverage`` is the procedure itself run on ``simulate_rounds``' studies: per round the median over its
    steps, then :func:`paired_ratio_interval`. Heavy-tailed step noise (t with 2 degrees of freedom) is what the
    median is for."""
    options = {"round_sd": 0.1, "jitter_sd": 0.02, "step_sd": 0.2, "step_noise_df": 2, "steps": 5}
    for seed in (1, 2, 3):
        a, b = simulate_rounds(1.5, 4, 300, seed, **options)
        holds = []
        for study in range(len(a)):
            _, low, high = paired_ratio_interval(np.median(a[study], axis=-1), np.median(b[study], axis=-1))
            holds.append(low <= 1.5 <= high)
        assert simulate_coverage(1.5, 4, 300, seed, **options) == pytest.approx(np.mean(holds), abs=1e-12)


# ---------------------------------------------------------------- estimators: the disturbed-round rule


def test_a_round_is_judged_in_scaled_median_absolute_deviations():
    """Rounds 90, 95, 100, 105, 110 and 150: median 102.5, absolute deviations 12.5, 7.5, 2.5, 2.5, 7.5, 47.5, their
    median (MAD) 7.5. The rule's spread is the MAD scaled to a standard deviation, 1.4826 * 7.5 = 11.1, so the 150 round
    (47.5 off, 46% of the median) is within 5 spreads (55.6) and kept; it would lie beyond 5 unscaled MADs (37.5).
    At 160 (57.5 off) it is beyond both thresholds (5 spreads and 25% of the median) and left out."""
    assert not disturbed(np.array([90.0, 95.0, 100.0, 105.0, 110.0, 150.0])).any()
    assert disturbed(np.array([90.0, 95.0, 100.0, 105.0, 110.0, 160.0])).tolist() == [False] * 5 + [True]


def test_a_round_exactly_at_the_floor_is_not_disturbed():
    """Disturbed means *more than* 25% of the median away (the spread of equal rounds is 0): 125 against rounds of
    100 is at the floor and kept; 125.5 is beyond it."""
    assert not disturbed(np.array([100.0, 100.0, 100.0, 125.0])).any()
    assert disturbed(np.array([100.0, 100.0, 100.0, 125.5])).tolist() == [False, False, False, True]


def test_a_round_is_disturbed_by_its_slowest_ranks_step_time():
    """A step lasts as long as its slowest rank: one rank of four 40% slower in round 2 makes that round's step 40%
    slower (disturbed), though the mean over ranks moved only 10% (which would not be)."""
    rows = []
    for trial in range(3):
        for step in range(3):
            for rank in range(4):
                slow = trial == 2 and rank == 3
                rows.append({"run": "r", "trial": trial, "step": step, "rank": rank, "step_ms": 140.0 if slow else 100.0})
    assert disturbed_rounds(pd.DataFrame(rows), "r") == {2}


def test_a_typical_time_is_the_median_of_the_rounds_that_have_a_time():
    """``typical_time``: the median over rounds of each round's median step; a round whose steps carry no time (NaN)
    has no median and counts in none: rounds of 10 and 30 ms give 20, not NaN."""
    step_ms = [10.0, 10.0, 30.0, 30.0, np.nan, np.nan]
    steps = pd.DataFrame({"run": "r", "trial": [0, 0, 1, 1, 2, 2], "step": [0, 1] * 3, "rank": 0, "step_ms": step_ms})
    assert typical_time(steps, "r", "step_ms", "max") == pytest.approx(20.0)


# ---------------------------------------------------------------- waits: matching traced collectives

BASE_NS = 1_790_000_000_000_000_000


def _trace(rank: int, rows: list[tuple], *, world_size: int | None = None) -> TraceBreakdown:
    """One rank's breakdown with only ``collectives``: rows of (step, phase, op, issue, start, end) in us, every rank
    on one base time."""
    frame = pd.DataFrame(rows, columns=["step", "phase", "op", "issue_ts", "start", "end"])
    frame["dur"] = frame["end"] - frame["start"]
    meta = TraceMeta(
        path=f"rank{rank}.json", rank=rank, rank_source="filename", world_size=world_size, backend="gloo", base_time_ns=BASE_NS
    )
    return TraceBreakdown(meta=meta, device="cpu", steps=pd.DataFrame(), collectives=frame)


def test_two_traces_claiming_one_rank_leave_the_run_unmatched():
    """Which of two traces of rank 0 is rank 0? Neither can be put in a group, even where they hold different steps
    and each step alone would pair with rank 1's: every call of the run is all transfer."""
    items = [
        _trace(0, [(1, "dp_gather", "all_gather", 0.0, 0.0, 100.0)]),
        _trace(0, [(2, "dp_gather", "all_gather", 200.0, 200.0, 300.0)]),
        _trace(1, [(1, "dp_gather", "all_gather", 60.0, 60.0, 100.0), (2, "dp_gather", "all_gather", 250.0, 250.0, 300.0)]),
    ]
    for split in split_wait_transfer(items, dp=2, tp=1):
        assert not split["matched"].any() and (split["wait_us"] == 0.0).all()


def test_the_dp_groups_of_every_pipeline_stage_are_matched():
    """dp=2, pp=2: the world is 4 ranks (dp * tp * pp), stage 1's DP group is {2, 3}; rank 2, arriving at 10 us,
    waits 30 us for rank 3 as rank 0 waits for rank 1 in stage 0."""
    arrival = {0: 0.0, 1: 30.0, 2: 10.0, 3: 40.0}
    items = [_trace(r, [(1, "dp_reduce_scatter", "reduce_scatter", arrival[r], arrival[r], 100.0)]) for r in range(4)]
    splits = split_wait_transfer(items, dp=2, tp=1, pp=2)
    assert [s["matched"].tolist() for s in splits] == [[True]] * 4
    assert [s["wait_us"].tolist() for s in splits] == [[30.0], [0.0], [30.0], [0.0]]


def test_a_rank_outside_the_world_is_none_of_its_members():
    """A world of dp * tp = 2 ranks (0 and 1): traces of ranks 1 and 2 are no whole world (rank 0 is missing, rank 2
    is none of it), so their common foreign call is unmatched."""
    items = [_trace(r, [(0, "forward", "all_reduce", 10.0 * r, 10.0 * r, 100.0)]) for r in (1, 2)]
    for split in split_wait_transfer(items, dp=2, tp=1):
        assert split["matched"].tolist() == [False] and split["wait_us"].tolist() == [0.0]


def test_the_kth_call_is_counted_in_issue_order_not_in_arrival_order():
    """Rank 0 issues A at 0 and B at 10, but A's transfer starts at 50 and B's at 40 (arrivals: B first). The k-th
    call in issue order is one collective: A with rank 1's first call (arrival 5), B with its second (arrival 200).
    A: rank 1 waits 50 - 5 = 45 for rank 0; B: rank 0 waits 200 - 40 = 160 for rank 1."""
    op = ("dp_gather", "all_gather")
    rank0 = _trace(0, [(1, *op, 0.0, 50.0, 60.0), (1, *op, 10.0, 40.0, 300.0)])
    rank1 = _trace(1, [(1, *op, 5.0, 5.0, 60.0), (1, *op, 200.0, 200.0, 300.0)])
    first, second = split_wait_transfer([rank0, rank1], dp=2, tp=1)
    assert first["wait_us"].tolist() == [0.0, 160.0]
    assert second["wait_us"].tolist() == [45.0, 0.0]


def test_a_step_whose_foreign_sequences_differ_anywhere_matches_none_of_its_foreign_calls():
    """Foreign calls match world-wide by position only where every rank issued the same sequence of ops in the step.
    Here both ranks start with an all_reduce, then rank 0 issues all_gather, all_reduce and rank 1 the other order:
    the sequences differ, so even the first all_reduce, which would line up, is unmatched (wait 0)."""
    ops = {0: ["all_reduce", "all_gather", "all_reduce"], 1: ["all_reduce", "all_reduce", "all_gather"]}

    def foreign(r: int, k: int, op: str) -> tuple:
        return (0, "other", op, 100.0 * k + 30.0 * r, 100.0 * k + 30.0 * r, 100.0 * k + 90.0)

    items = [_trace(r, [foreign(r, k, op) for k, op in enumerate(ops[r])], world_size=2) for r in (0, 1)]
    for split in split_wait_transfer(items):
        assert not split["matched"].any() and (split["wait_us"] == 0.0).all()


# ---------------------------------------------------------------- timed steps


def test_the_drain_idle_compares_stages_within_one_trial_only():
    """Per run, trial, step and pipeline: trial 0's stages end their last backward at 10 and 7 ms, trial 1's (same
    step number, recorded later) at 50 and 48 ms. Stage 1 idles 3 ms in trial 0 and 2 ms in trial 1, never 43 ms
    behind another trial's stage 0."""
    rows = pd.DataFrame(
        {
            "run": "r",
            "trial": [0, 0, 1, 1],
            "step": 0,
            "rank": [0, 1, 0, 1],
            "stage": [0, 1, 0, 1],
            "pipeline": [(0, 0)] * 4,
            "last_backward_ns": [10_000_000, 7_000_000, 50_000_000, 48_000_000],
        }
    )
    assert drain_idle(rows)["drain_idle_ms"].tolist() == [0.0, 3.0, 0.0, 2.0]


def _three_rounds(step_ms: dict[int, float]) -> pd.DataFrame:
    """A ``timed_steps`` table of run r: one rank, two identical steps per round, each round's step time given."""
    rows = [
        {"run": "r", "trial": trial, "rank": 0, "step": step, "step_ms": ms, "optimizer_ms": 1.0}
        for trial, ms in step_ms.items()
        for step in range(2)
    ]
    return pd.DataFrame(rows)


def test_the_profiler_overhead_is_the_median_of_the_traced_rounds_ratios():
    """Three traced rounds, profiled over timed 1.1, 1.2 and 1.9: the overhead is their median, 1.2 (their mean, 1.4,
    would let one slow profiled round speak for all)."""
    timed = _three_rounds({0: 100.0, 1: 100.0, 2: 100.0})
    profiled = pd.Series({0: 110.0, 1: 120.0, 2: 190.0})
    assert timed_run_columns(timed, "r", profiled)["profiler_overhead"] == pytest.approx(1.2)


def test_a_round_without_a_timed_step_time_gives_no_overhead_ratio():
    """A traced round whose timed steps read 0 ms has no ratio (not an infinite one), and a traced round that was not
    timed pairs with nothing: the overhead is the median of rounds 0 and 1's ratios, 1.1 and 1.3."""
    timed = _three_rounds({0: 100.0, 1: 100.0, 2: 0.0})
    profiled = pd.Series({0: 110.0, 1: 130.0, 2: 120.0, 5: 300.0})
    assert timed_run_columns(timed, "r", profiled)["profiler_overhead"] == pytest.approx(1.2)


def test_timed_calls_without_the_tp_size_are_unmatched_all_transfer():
    """A DP group is found from the dp and tp sizes; a run whose config lacks the tp size cannot be matched, so each
    call is all transfer (wait 0), as the trace analysis does without the sizes."""
    calls = pd.DataFrame(
        [(0, 0, "dp_gather", "all_gather", "dp", 100, 400), (1, 0, "dp_gather", "all_gather", "dp", 300, 400)],
        columns=["rank", "step", "phase", "kind", "group", "start_ns", "end_ns"],
    )
    split = split_timed_waits(calls, dp=2, tp=None)
    assert split["matched"].tolist() == [False, False]
    assert split["wait_ns"].tolist() == [0.0, 0.0] and split["transfer_ns"].tolist() == [300.0, 100.0]
