"""The report's bookkeeping says what the tables count: the steps each round times without the profiler beside the
traced pass's; the rounds and tokens per step of every profile of the claims table, not the main profile's alone; which
claims take a log-ratio interval and which a linear one cut to [0, 1]; where the optimizer share's profiled medians
are decomposed, and what statistic that table gives; that the original study trained no model; the one-rank protocol
set only where the tables hold one; and a check that is a bound said as a bound.

Rendered from the committed tables with stand-in figures (the words are checked, not the pixels)."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from support.markdown import markdown_section

from muon_repro.claims import CLAIMS
from muon_repro.cli import main
from muon_repro.report import derive
from muon_repro.report.checks_section import BOUNDS, checks_matrix
from muon_repro.report.context import APPENDIX_TABLES, appendix_headings
from muon_repro.report.data import study_profile
from muon_repro.report.decomposition_section import decomposition, decomposition_runs
from muon_repro.report.formatting import ms
from muon_repro.report.setup_section import (
    LARGEST_LOG_RATIO,
    LARGEST_SHARE,
    LOG_RATIO,
    OVER_SEEDS,
    SHARE,
    cpu_instructions,
    one_rank_protocol,
    rounds_and_steps,
    timed_steps_per_round,
    traced_rounds,
    workload,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report(committed_report) -> str:
    return committed_report


def _paragraph(md: str, opening: str) -> str:
    (found,) = [p for p in md.split("\n\n") if p.startswith(opening)]
    return found


def _timed_steps(timed: pd.DataFrame, runs: pd.Series) -> set[int]:
    """The distinct steps each (run, trial, rank) of ``runs`` timed without the profiler."""
    mine = timed[timed["run"].isin(set(runs))]
    return set(mine.groupby(["run", "trial", "rank"])["step"].nunique().astype(int))


# --- finding 3: rounds, steps and tokens per step ---


def test_the_setup_says_the_steps_each_round_times_beside_the_traced_pass(figure_data):
    """Each round times 8 steps without the profiler (timed_steps); the row read as if each were "6 steps (5
    profiled)", the traced pass's."""
    (row,) = [value for key, value in workload(figure_data) if key == "rounds × steps per run"]
    runs = figure_data.runs
    for group, rows in runs.groupby("group"):
        (n,) = _timed_steps(figure_data.timed_steps, rows["run"])
        (rounds,) = set(rows["rounds"].astype(int))
        (train,) = set(rows["train_steps"].astype(int))
        (profiled,) = set((rows["steps"] // rows["trials"]).astype(int))
        said = f"{rounds} rounds, each timing {n} steps without the profiler, the first round then running a traced pass "
        assert f"{said}of {train} steps ({profiled} of them profiled)" in row, (group, row)
        assert str(group) in row
    assert "the first 1 " not in row and "(5 profiled)" not in row


def test_the_rounds_and_steps_read_for_one_and_for_several_traced_rounds():
    run = pd.Series({"run": "r", "trials": 1, "steps": 5, "train_steps": 6, "rounds": 10})
    assert rounds_and_steps(run, "8") == (
        "10 rounds, each timing 8 steps without the profiler, the first round then running a traced pass of 6 steps "
        "(5 of them profiled)"
    )
    two = rounds_and_steps(run.replace({1: 2, 5: 10}), "8")
    assert two.endswith("the first 2 rounds then running a traced pass of 6 steps (5 of them profiled)"), two
    assert rounds_and_steps(run.replace({10: 2}).replace({1: 2, 5: 10}), "8").endswith(
        "every round then running a traced pass of 6 steps (5 of them profiled)"
    )
    assert rounds_and_steps(run.replace({1: 0, 5: 0}), "5") == "10 rounds, each timing 5 steps without the profiler, none traced"
    assert rounds_and_steps(run, None) == "1 traced × 6 steps (5 profiled)"  # no step timed without the profiler


def test_the_timed_steps_are_counted_per_run_trial_and_rank():
    timed = pd.DataFrame(
        {"run": ["a"] * 5 + ["b"] * 3, "trial": [0, 0, 0, 1, 1, 0, 0, 0], "rank": 0, "step": [0, 1, 2, 0, 1, 0, 1, 2]}
    )
    assert timed_steps_per_round(timed) == {"a": "2–3", "b": "3"}
    assert timed_steps_per_round(timed.iloc[:0]) == {}


def test_like_for_like_names_each_profiles_tokens_rounds_and_steps(report_data, report):
    """The paragraph said "1,024 for every run" and "10 rounds", which held for cpu-2c-gloo only: the H200 column's
    runs train 8k-262k tokens per step in 2 rounds, and the original study's train none."""
    paragraph = _paragraph(report, "Every claim is measured like for like")
    runs, timed = report_data.runs, report_data.timed_steps
    assert len(set(runs["profile"])) > 1, "the committed tables hold two profiles of our runs"
    for profile, mine in runs.groupby("profile"):
        part = paragraph.split(f"The runs of {profile} (", 1)[1].split(". ", 1)[0]
        tokens = sorted(set(mine["tokens_per_step"].astype(int)))
        if len(tokens) == 1:
            assert f"{tokens[0]:,} tokens per step for every run" in part, part
        else:
            assert all(f"{t:,}" in part for t in tokens) and "for every run" not in part, part
        rounds = sorted(set(mine["rounds"].astype(int)))
        listed = part.split("rounds: ", 1)[1].split(", each timing", 1)[0]
        assert {int(n) for n in re.findall(r"\d+", listed)} == set(rounds), part
        (steps,) = _timed_steps(timed, mine["run"])
        assert f"each timing {steps} steps without the profiler" in part, part
        traced = set(mine["trials"].astype(int))
        assert ("none traced" in part) == (0 in traced), part
    study = study_profile(report_data)
    assert study is not None and f"The original study's runs ({study}" in paragraph
    assert "train no tokens" in paragraph
    assert "of which 1 traced" not in paragraph


def test_the_method_says_which_rounds_are_traced_in_words(figure_data, report):
    method = markdown_section(report, "Method")
    assert "only the first 1 " not in method
    assert traced_rounds(figure_data.runs) in method
    assert traced_rounds(pd.DataFrame({"trials": [1, 1]})) == "only the first also runs the profiler and keeps traces"
    assert traced_rounds(pd.DataFrame({"trials": [2]})) == "only the first 2 also run the profiler and keep traces"
    assert traced_rounds(pd.DataFrame({"trials": [0, 1]})).endswith("(none in some runs)")


# --- finding 4: the intervals' two scales ---


def test_every_claim_has_one_interval_scale():
    said = [*LOG_RATIO, *LARGEST_LOG_RATIO, *SHARE, *LARGEST_SHARE, *OVER_SEEDS]
    assert sorted(said) == sorted(c.claim_id for c in CLAIMS)


def test_the_tables_intervals_have_the_shapes_the_method_gives(report_data):
    """A log-ratio interval is symmetric in logs; the share's is symmetric in its own units, cut at 0 where the t
    interval ran below (the H200's 2 rounds)."""
    claims = report_data.claims.dropna(subset=["measured_value", "measured_low", "measured_high", "rounds"])
    checked = {"log": 0, "share": 0, "cut": 0}
    for _, c in claims.iterrows():
        value, low, high = (float(c[k]) for k in ("measured_value", "measured_low", "measured_high"))
        if c["claim_id"] in LOG_RATIO:
            offset = 1.0 if c["unit_kind"] == "change" else 0.0  # Muon's extra: the ratio less 1
            v, lo, hi = (math.log(x + offset) for x in (value, low, high))
            assert v - lo == pytest.approx(hi - v, rel=1e-6), c["claim_id"]
            checked["log"] += 1
        elif c["claim_id"] in SHARE and low > 0:
            assert value - low == pytest.approx(high - value, rel=1e-6), c["claim_id"]
            checked["share"] += 1
        elif c["claim_id"] in SHARE:
            assert low == 0 and high - value > value, c["claim_id"]  # cut at 0
            checked["cut"] += 1
    assert all(checked.values()), checked


def test_the_method_describes_both_interval_scales_and_the_rounds(report_data, report):
    method = markdown_section(report, "Method")
    assert "t interval on their mean log ratio" in method
    assert "cut to [0, 1]" in method and "the claims table marks a cut at 0" in method
    shares = method.split("A share is averaged on the linear scale", 1)[1].split(". A claim", 1)[0]
    assert "optimizer share of the step" in shares, shares
    claims = report_data.claims.dropna(subset=["rounds"])
    for profile, rows in claims.groupby("profile"):
        for n in set(rows["rounds"].astype(int)):
            assert re.search(rf"\b{n}\b[^;]*? on {re.escape(str(profile))}", method), (profile, n)
    assert "with 3 rounds the t factor is 4.30" not in method


# --- finding 5: the pointer to the decomposition ---


def test_the_optimizer_share_points_to_the_appendix_table_and_its_statistic(figure_data, report):
    section = markdown_section(report, "The optimizer step, decomposed")
    assert "decomposed above" not in section
    shown = decomposition_runs(figure_data)
    headings = appendix_headings(key for key, _ in APPENDIX_TABLES)
    number = headings["decomposition"]["heading"].split(".", 1)[0]
    assert f"### {headings['decomposition']['heading']}" in report
    lines = [ln for ln in section.splitlines() if ln.startswith("- Optimizer share, ")]
    assert len(lines) == len(shown)
    for line, run in zip(lines, shown):
        means = derive.optimizer_decomposition(figure_data.phases, str(run["run"]))["optimizer"]
        span = f"{ms(means.min()).removesuffix(' ms')}–{ms(means.max())}"
        assert f"appendix table {number}, below" in line, line
        assert f"each rank's mean per profiled step, not a median: {span} for the whole optimizer step" in line, line
        assert f"median optimizer step {ms(run['optimizer_ms'])} of a {ms(run['step_ms'])} median step" in line
    without = decomposition(figure_data, [])["beside"][0]  # no appendix heading given: no pointer
    assert "appendix table" not in without


# --- finding 11: the study trained no model ---


def test_the_thresholds_say_the_study_trained_no_model(report):
    assert "does not publish its model" not in report
    paragraph = _paragraph(report, "Tokens per step at which Muon's optimizer share falls")
    assert "the original study trained no model" in paragraph and "random gradients" in paragraph


# --- finding 12: the one-rank protocol set ---


def test_the_one_rank_set_is_described_only_where_the_tables_hold_one(report_data, report, capsys):
    groups = set(report_data.study_protocols["group"].astype(str))
    assert not any(g.endswith("_1rank") for g in groups), "the committed tables hold no one-rank set"
    assert not one_rank_protocol(report_data)
    assert "A set recorded on one rank" not in report
    said = _paragraph(report, "**The protocol or Muon?**")
    assert "No set recorded on one rank is in the tables: `muon-repro bench --protocol study --world-size 1` records one" in said
    assert "`study_protocol_1rank`" in said
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--world-size {4,1}" in help_text and "study_protocol_1rank" in help_text
    one_rank = report_data.study_protocols.assign(group="study_protocol_1rank")
    assert one_rank_protocol(dataclasses.replace(report_data, study_protocols=one_rank))


# --- finding 15: a check that is a bound ---


def test_a_bound_check_is_said_as_a_bound_and_the_tables_agree(figure_data, report):
    checks = figure_data.checks
    for _, c in checks.iterrows():
        if c["check_id"] in BOUNDS:
            assert bool(c["holds"]) == (float(c["measured_high"]) < float(c["expected"])), c["check_id"]
        elif bool(c["holds"]):  # an equality that holds: the value is the expected one on every rank
            for k in ("measured_value", "measured_low", "measured_high"):
                assert float(c[k]) == pytest.approx(float(c["expected"]), rel=1e-9), (c["check_id"], k)
    header, rows, _ = checks_matrix(figure_data)
    assert header[1] == "expected (or bound)"
    bound = checks[checks["check_id"] == "state_with_transients"].iloc[0]
    (row,) = [r for r in rows if r[0] == bound["check"]]
    assert row[1] == "below 1.000×"
    assert all(not r[1].startswith("below") for r in rows if r[0] != bound["check"])
    abstract = markdown_section(report, "Abstract")
    assert f"{str(bound['check']).rstrip('.')} (2.31, not below 1)" in abstract
    assert "expected 1)" not in abstract


def test_a_grid_without_its_width_names_the_table_and_the_run():
    """Every section writes a grid with one helper; a row without dp or tp is refused naming its table and run."""
    from muon_repro.report.data import MissingMetric
    from muon_repro.report.selection import grid_said

    assert grid_said(pd.Series({"run": "m", "dp": 2, "tp": 2, "pp": pd.NA})) == "DP2·TP2"
    with pytest.raises(MissingMetric, match=r"runs\.dp is missing for run m\b"):
        grid_said(pd.Series({"run": "m", "dp": pd.NA, "tp": 2}))
    with pytest.raises(MissingMetric, match=r"comparisons\.tp is missing for muon_run m\b"):
        grid_said(pd.Series({"muon_run": "m", "dp": 2, "tp": None}))


def test_the_method_says_the_rule_that_leaves_rounds_out_and_the_rule_does_that(committed_report):
    """A claim's rounds were fewer than those recorded (2 of 3 in a user's run) and the report never said why: the
    Method now states the rule with its numbers, and the estimators do what it says."""
    import numpy as np

    from muon_repro.analysis.estimators import disturbed
    from muon_repro.report.setup_section import disturbed_rule

    said = disturbed_rule()
    assert "more than 5 scaled median absolute deviations and more than 25% from the median" in said
    assert "a run of 3 rounds or more" in said and said in committed_report
    assert not disturbed(np.array([100.0, 300.0])).any()  # two rounds: neither is the odd one
    assert disturbed(np.array([100.0, 101.0, 99.0, 200.0])).tolist() == [False, False, False, True]  # 2x a steady run
    assert not disturbed(np.array([100.0, 101.0, 99.0, 120.0])).any()  # 20% off: under the 25%


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"host_cpu_capability": "AVX2", "host_cpu_bf16": "False"}, " (AVX2, no bf16 instructions)"),
        ({"host_cpu_capability": "AVX512", "host_cpu_bf16": "True"}, " (AVX512, bf16 instructions)"),
        ({"host_cpu_capability": "DEFAULT", "host_cpu_bf16": ""}, " (DEFAULT)"),  # a CPU whose flags say nothing
        ({}, ""),  # recorded before the environment said
    ],
)
def test_the_setup_names_the_cpus_instructions_where_the_run_recorded_them(env, said):
    assert cpu_instructions({"host_cpu": "AMD EPYC", **env}) == said


def test_a_checks_numbers_keep_the_digits_that_tell_it_from_a_rounder_one_and_its_sign():
    """A ratio gets 3 to 6 decimals (1.000122 is not the 1.000 of a check that sits outside the claimed region), a
    fraction no sign, a change its sign with a minus, not a hyphen."""
    from muon_repro.report.checks_section import check_number

    assert check_number(1.000122, "ratio", "x") == "1.000122×"
    assert check_number(1.0, "ratio", "x") == "1.000×" and check_number(0.25, "ratio", "x") == "0.250×"
    assert check_number(0.5, "fraction", "x") == "50.0%"
    assert check_number(-0.034, "change", "x") == "−3.4%" and check_number(0.034, "change", "x") == "+3.4%"


def _check_row(**changes) -> dict:
    row = {
        "check_id": "bytes_contiguous",
        "check": "Bytes agree.",
        "expected": 1.0,
        "measured_value": 1.0,
        "measured_low": 1.0,
        "measured_high": 1.0,
        "unit": "ratio",
        "unit_kind": "ratio",
        "holds": True,
        "claimed_region": "(1, 1.25]",
        "in_claimed_region": False,
        "fails_if": "a collective the model does not price",
        "explanation": "Compared per rank.",
    }
    return row | changes


def test_a_checks_row_gives_its_range_over_ranks_its_region_and_a_missing_verdict_as_not_checked():
    from muon_repro.report.checks_section import _measured, check_claimed, check_verdict

    assert _measured(pd.Series(_check_row())) == "1.000×"
    # the ranks agree with each other but not with the value stated (a mean over ranks): the range is said
    assert _measured(pd.Series(_check_row(measured_value=1.5, measured_low=2.0, measured_high=2.0))) == "1.500× (2.000×–2.000×)"
    assert check_claimed(pd.Series(_check_row())) == "(1, 1.25] (outside)"
    assert check_claimed(pd.Series(_check_row(in_claimed_region=True))) == "(1, 1.25] (inside)"
    assert [check_verdict(pd.Series(_check_row(holds=h))) for h in (True, False, None)] == ["holds", "fails", "not checked"]


def test_the_checks_summary_counts_only_those_that_hold_and_names_an_unchecked_one(figure_data):
    from muon_repro.report.checks_section import checks_summary

    rows = [
        _check_row(check="A holds.", holds=True),
        _check_row(check="B is unchecked.", holds=None),
        _check_row(check="C fails.", holds=False),
    ]
    checks = pd.DataFrame(rows).assign(profile=figure_data.described_profile)
    said = checks_summary(dataclasses.replace(figure_data, checks=checks))
    assert said.endswith(": 1 of 3 hold, 1 not checked (nothing recorded to hold them against); fails: 'C fails.'.")
