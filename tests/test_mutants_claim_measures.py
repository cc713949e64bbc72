"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of how the claims
are measured (muon_repro.analysis.claim_measures, claim_inputs, leading_claim, pipeline_claims and budget_match).

Pinned here: which runs a claim compares (every field of the same work and of the grid, first_run's order, the
async run's twin on its grid, the one-device pair, the pipeline group at 4 ranks) and that a variant of other work
leaves a claim without a value; which column, ranks reduction and step source a ratio reads; the waits and FLOPs
an explanation quotes; the leading-steps claim's smoothing, configuration, rows and one-sided intervals; the bubble
claim's stages (means over ranks, steps timed on every stage, each round's median); AdamW's budgets matched to
Muon's loss (the runs that bracket it, the tokens per step, the seeds censored either way).

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/method.md
"Equal work, trials and intervals" and "Claims and verdicts")."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from test_claims import Bundle, _claims_with_timed, grid_run, study_grid
from test_pipeline_bench import ROUNDS as PIPELINE_ROUNDS
from test_pipeline_bench import STEP as PIPELINE_STEP
from test_pipeline_bench import _tables as _pipeline_tables

from muon_repro.analysis.budget_match import budget_match_table, censored_mean_interval, matched_tokens
from muon_repro.analysis.claim_inputs import (
    ProfileTables,
    UnequalWork,
    describe_runs,
    dp2_tp2_pair,
    equal_work_twins,
    first_run,
    twin_of,
    work_difference,
)
from muon_repro.analysis.claim_measures import _single_device_pair, _waits_compared, latency
from muon_repro.analysis.leading_claim import claim_group, leading_steps_claim
from muon_repro.analysis.pipeline_claims import bubble_hides_step, hybrid_survives_pp
from muon_repro.claims import UNEQUAL_WORK

# ---------------------------------------------------------------- the time claims (analysis/claim_measures.py)


def test_the_communication_claim_compares_transfer_times_where_both_runs_have_them():
    """comm_transfer_ms (from the last rank's arrival) is the column compared where the pair's steps have it, whatever
    another run (DP4, recorded before it) has: Muon's 2.85 ms against AdamW's 10 ms, not comm_ms' 5.7 against 10,
    which is quoted as the ratio with the waiting included."""
    b = study_grid(muon_comm=5.7, muon_step=101.0)
    for s in b.steps:
        if s["run"] == "comparison/muon_dp2_tp2":
            s["comm_transfer_ms"] = 2.85
        elif s["run"] == "distributed_muon/muon_dp4":
            s["comm_transfer_ms"] = float("nan")
    row = b.claims().loc["comm_time_dp2_tp2"]
    assert row["measured_value"] == pytest.approx(0.285, rel=0.03)
    assert "transfer time (from the last rank's arrival)" in row["explanation"]


@pytest.mark.parametrize(
    "without_transfer", [("comparison/muon_dp2_tp2", "comparison/adamw_dp2_tp2"), ("comparison/adamw_dp2_tp2",)]
)
def test_the_communication_claim_falls_back_to_comm_ms_where_a_compared_run_has_no_transfer_time(without_transfer):
    """docs/method.md: comm_ms (waits included) "where the steps have no transfer times", the steps of the runs
    compared, not of the profile: with the pair's (or AdamW's alone) left without, Muon's 5.7 ms against AdamW's 10 ms
    of comm_ms for both, like for like, though DP4 and TP4 have transfer times."""
    b = study_grid(muon_comm=5.7, muon_step=101.0)
    for s in b.steps:
        if s["run"] in without_transfer:
            s["comm_transfer_ms"] = float("nan")
        elif s["run"] == "comparison/muon_dp2_tp2":
            s["comm_transfer_ms"] = 2.85
    row = b.claims().loc["comm_time_dp2_tp2"]
    assert row["measured_value"] == pytest.approx(0.57, rel=0.03)
    assert row["explanation"].startswith("Compares communication time;")


def _waits(muon: dict[str, float], adamw: dict[str, float]) -> ProfileTables:
    phases = pd.DataFrame(
        [
            {"run": run, "phase": phase, "wait_ms_per_step": ms}
            for run, waits in (("m", muon), ("a", adamw))
            for phase, ms in waits.items()
        ]
    )
    empty = pd.DataFrame()
    return ProfileTables(empty, empty, empty, phases)


def test_the_waits_said_are_the_two_phases_where_muon_waits_longest_beyond_adamw():
    """Muon waits 2, 6 and 4 ms in p1, p2, p3 against AdamW's 1 ms in each: 1, 5 and 3 ms beyond it. The two
    longest, longest first: p2 then p3; p1 is not said."""
    t = _waits({"p1": 2.0, "p2": 6.0, "p3": 4.0}, {"p1": 1.0, "p2": 1.0, "p3": 1.0})
    said = _waits_compared(t, pd.Series({"run": "m"}), pd.Series({"run": "a"}))
    assert said == "Muon waits longer than AdamW (ms per step): p2 6.0 against 1.0; p3 4.0 against 1.0. "


def test_the_hybrid_claim_times_each_step_by_its_slowest_rank():
    """A step's time is its slowest rank's (docs/method.md): DP2·TP2 with rank 0 30% slower takes 130 ms a step (the
    ranks' mean would be 107.5 ms), over TP4's 120 ms, the faster of DP4 (130 ms) and TP4."""
    b = study_grid(muon_comm=5.7, muon_step=100.0, hybrid_step=100.0, dp4_step=130.0, tp4_step=120.0, noise=0.0)
    b.scale_steps("comparison/muon_dp2_tp2", 1.3, rank=0)
    assert b.claims().loc["hybrid_beats_pure", "measured_value"] == pytest.approx(130.0 / 120.0)


def test_the_hybrid_claim_leaves_out_the_pipeline_groups_micro_batched_grids():
    """The pipeline group's DP4 (micro-batched, 50 ms) is not the original study's DP4: the hybrid's 100 ms is compared
    with the study's DP4 (130 ms) and TP4 (120 ms), whatever order the groups sort in."""
    b = Bundle()
    b.run("comparison/muon_dp2_tp2", "muon", 2, 2, step_ms=100.0, noise=0.0)
    b.run("comparison/adamw_dp2_tp2", "adamw", 2, 2, step_ms=100.0, noise=0.0)
    b.run("study/muon_dp4", "muon", 4, 1, step_ms=130.0, noise=0.0)
    b.run("study/muon_tp4", "muon", 1, 4, step_ms=120.0, noise=0.0)
    b.run("pipeline/muon_dp4", "muon", 4, 1, step_ms=50.0, noise=0.0, micro_batches=4)
    row = b.claims().loc["hybrid_beats_pure"]
    assert row["measured_value"] == pytest.approx(100.0 / 120.0) and "pipeline/muon_dp4" not in row["conditions"]


def test_the_one_device_pair_is_of_benchmark_runs_never_of_the_convergence_groups_training_runs():
    """Training runs of the convergence group at dp=1, tp=1 (here at 65,536 tokens per step, more than any benchmark
    run) are not benchmark points: the pair stays at the benchmark runs' largest common tokens per step, 8,192."""
    runs = pd.DataFrame(
        [grid_run(f"{o}_8192", o, 1, 1, tokens=8192) for o in ("muon", "adamw")]
        + [grid_run(f"conv_{o}", o, 1, 1, tokens=65536, group="convergence") for o in ("muon", "adamw")]
    )
    assert [r["run"] for r in _single_device_pair(SimpleNamespace(runs=runs))] == ["c/muon_8192", "c/adamw_8192"]


@pytest.mark.parametrize("variant", ["naive_async", "pipelined"])
def test_an_async_variant_of_other_work_leaves_the_async_claim_unequal_work_with_no_value(variant):
    """The naive async run and the pipelined one are each checked against the blocking twin: one at half the tokens
    per step gives the claim no ratio (a ratio of unequal work judges nothing), not a value read 'unequal work'."""
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    half = {"tokens_per_step": 131072} if variant == "naive_async" else {}
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=200.0, overlap="naive_async", **half)
    b.run("overlap/muon_dp2_tp2", "muon", 2, 2, step_ms=100.0)
    if variant == "pipelined":
        b.run("overlap/muon_dp2_tp2_pipelined", "muon", 2, 2, step_ms=90.0, overlap="pipelined", tokens_per_step=131072)
    row = b.claims().loc["async_slowdown"]
    assert row["verdict"] == UNEQUAL_WORK and pd.isna(row["measured_value"])
    assert "tokens_per_step is 131072 vs 262144" in row["work_difference"] or "262144 vs 131072" in row["work_difference"]


def test_the_async_twin_is_on_the_same_grid():
    """The twin differs from the naive async run only in how its gathers overlap: a blocking run of the same sweep
    at dp=1, tp=2 (50 ms, sorting first) is not it; the DP2·TP2 one (100 ms) is: 200 / 100."""
    b = study_grid(muon_comm=5.7, muon_step=100.0, noise=0.0)
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=200.0, overlap="naive_async", noise=0.0)
    b.run("overlap/muon_dp1_tp2", "muon", 1, 2, step_ms=50.0, noise=0.0)
    b.run("overlap/muon_dp2_tp2", "muon", 2, 2, step_ms=100.0, noise=0.0)
    assert b.claims().loc["async_slowdown", "measured_value"] == pytest.approx(2.0)


def test_the_one_device_latency_refuses_a_pair_of_other_work():
    """One device's Muon and AdamW runs at the same tokens per step, AdamW in bf16: the latency claim does not compare
    them (the DP2·TP2 pair is checked by dp2_tp2_pair; the one-device pair by the claim itself)."""
    runs = pd.DataFrame(
        [grid_run("muon_one", "muon", 1, 1, precision="fp32"), grid_run("adamw_one", "adamw", 1, 1, precision="bf16")]
    )
    empty = pd.DataFrame()
    with pytest.raises(UnequalWork, match="precision is 'fp32' vs 'bf16'"):
        latency(ProfileTables(runs, empty, empty, empty))


def test_newton_schulz_is_set_against_the_forward_and_backward_of_one_rank():
    """The study grid's Muon run: 2 GFLOP of Newton-Schulz on its busiest rank, 4 GFLOP of forward+backward over 4
    ranks, 1 GFLOP a rank: 2x, not 0.5x (the whole run's)."""
    explanation = study_grid(muon_comm=5.7, muon_step=101.0).claims().loc["optimizer_share", "explanation"]
    assert "2.00 GFLOP per step on the busiest rank, 2x its forward+backward" in explanation


def test_the_one_device_share_is_muons_optimizer_step_over_muons_step():
    """Muon's optimizer step takes 50 of its 100 ms, AdamW's 10 of 100: the share on one device is Muon's, 0.5."""
    b = Bundle()
    b.run("single/muon", "muon", 1, 1, step_ms=100.0, optimizer_ms=50.0, noise=0.0, timed_optimizer_ms=50.0)
    b.run("single/adamw", "adamw", 1, 1, step_ms=100.0, optimizer_ms=10.0, noise=0.0, timed_optimizer_ms=10.0)
    assert b.claims().loc["optimizer_share", "measured_value"] == pytest.approx(0.5)


def test_the_hybrid_claim_says_profiled_where_its_times_come_from_the_profiled_steps():
    """Runs with a timed_step_ms cell but no steps timed without the profiler (the timed_steps table empty): their
    interval's times are the profiled steps', and the explanation says so."""
    b = study_grid(muon_comm=5.7, muon_step=100.0, hybrid_step=100.0)
    for r in b.runs:
        r["timed_step_ms"] = r["step_ms"]
    assert "Step time (profiled)" in b.claims().loc["hybrid_beats_pure", "explanation"]


def test_the_latency_on_nccl_reads_the_steps_timed_without_the_profiler():
    """Only the communication claim reads NCCL's traced kernels: the latency is a step time, read from the steps
    timed without the profiler (Muon 150 ms against AdamW's 100 ms there: +0.5), not the profiled ones (101 / 100)."""
    b = study_grid(muon_comm=5.7, muon_step=101.0, noise=0.0)
    timed = pd.DataFrame(b.steps).assign(comm_timing="host_launch")
    timed.loc[timed["run"] == "comparison/muon_dp2_tp2", "step_ms"] = 150.0
    row = _claims_with_timed(b, timed).loc["latency_overhead"]
    assert row["measured_value"] == pytest.approx(0.5)


# ---------------------------------------------------------------- the same-work check (analysis/claim_inputs.py)

# One run of each field docs/method.md "Equal work" names, and the value another run differs in.
SHARED_WORK = {
    "preset": ("small", "medium"),
    "d_model": (256, 512),
    "model_params": (1_000_000, 2_000_000),
    "qkv": ("fused", "separate"),
    "tokens_per_step": (1024, 2048),
    "seq_len": (128, 256),
    "precision": ("fp32", "bf16"),
    "reduce_dtype": ("fp32", "bf16"),
    "cross_entropy": ("vocab_parallel", "gathered"),
    "backend": ("gloo", "nccl"),
    "device": ("cpu", "cuda"),
}
SHARED_GRID = {"dp": (2, 4), "tp": (2, 1), "pp": (1, 2), "world_size": (4, 8), "micro_batches": (1, 2)}


def _one_run(name: str, **over) -> pd.Series:
    return pd.Series(
        {"run": name, "group": "g", "layout": "contiguous", **{k: v[0] for k, v in (SHARED_WORK | SHARED_GRID).items()}, **over}
    )


@pytest.mark.parametrize("field", sorted(SHARED_WORK))
def test_two_runs_that_differ_in_any_field_of_the_work_did_different_work(field):
    a, b = _one_run("a"), _one_run("b", **{field: SHARED_WORK[field][1]})
    said = work_difference(a, b)
    assert said is not None and f"{field} is {SHARED_WORK[field][0]!r} vs {SHARED_WORK[field][1]!r}" in said
    assert work_difference(a, _one_run("b")) is None


@pytest.mark.parametrize("field", sorted(SHARED_GRID))
def test_an_optimizers_twin_shares_the_grid_too(field):
    """A Muon run's AdamW partner shares the grid (dp, tp, pp, world size and micro-batches) besides the work."""
    muon = _one_run("muon")
    candidates = pd.DataFrame([_one_run("other", **{field: SHARED_GRID[field][1]}), _one_run("twin")])
    assert equal_work_twins(muon, candidates)["run"].tolist() == ["twin"]
    assert twin_of(muon, candidates)["run"] == "twin"


def test_the_first_run_is_the_comparison_groups_then_the_contiguous_layouts_then_by_name():
    """first_run's order: the original study's comparison group first, then the contiguous layout, then the run id;
    the group before the layout."""

    def first(*rows: tuple[str, str, str | None]) -> str:
        runs = pd.DataFrame([{"run": run, "group": group, "layout": layout} for run, group, layout in rows])
        return first_run(runs)["run"]

    assert first(("a/x", "a", "contiguous"), ("comparison/x", "comparison", "contiguous")) == "comparison/x"
    assert first(("c/a", "c", "whole_matrix"), ("c/b", "c", None), ("c/c", "c", "contiguous")) == "c/c"
    assert first(("a/x", "a", "contiguous"), ("comparison/x", "comparison", "bucketed")) == "comparison/x"
    assert first(("c/b", "c", "contiguous"), ("c/a", "c", "contiguous")) == "c/a"


def test_a_runs_conditions_say_its_profiled_steps_per_traced_trial():
    """15 profiled steps over 3 traced trials are 5 a trial; the 10 rounds timed without the profiler said first."""
    run = pd.Series(
        {
            "run": "c/x",
            "backend": "gloo",
            "device": "cpu",
            "ranks": 4,
            "trials": 3,
            "steps": 15,
            "rounds": 10,
            "tokens_per_step": 1024,
        }
    )
    said = describe_runs(run)
    assert (
        said == "c/x (gloo on cpu, 4 ranks, 10 rounds timed without the profiler, 3 traced x 5 profiled steps, 1024 tokens/step)"
    )


def test_ranks_per_core_is_read_on_the_trial_with_the_fewest_cores():
    """A run is inside a condition only where every trial shows it: trials on hosts of 2 and 8 cores give 4 ranks
    over 2 cores, 2 ranks per core (not 0.5)."""
    env = pd.DataFrame(
        [{"run": "c/x", "trial": trial, "key": "host_cpu_cores", "value": cores} for trial, cores in ((0, "2"), (1, "8"))]
    )
    empty = pd.DataFrame()
    t = ProfileTables(empty, empty, empty, empty, environment=env)
    assert t.ranks_per_core(pd.Series({"run": "c/x", "device": "cpu", "world_size": 4})) == 2.0


def test_the_dp2_tp2_pair_has_no_adamw_partner_off_its_grid():
    """Without an AdamW run at dp=2, tp=2 (only one at dp=2, tp=1) the DP2·TP2 claims are not measured: there is no
    run there to call of unequal work."""
    runs = pd.DataFrame([grid_run("muon", "muon", 2, 2), grid_run("adamw_dp2", "adamw", 2, 1)])
    assert dp2_tp2_pair(SimpleNamespace(runs=runs)) is None


# ---------------------------------------------------------------- the leading-steps claim (analysis/leading_claim.py)


def _conv_rows(group: str, seeds: int, *, params: int = 1000, steps: int = 100, tokens: dict | None = None) -> list[dict]:
    """A configuration's convergence runs at their best learning rates: Muon and AdamW, ``steps`` steps each seed,
    ``tokens`` per step by optimizer (100 each unless told)."""
    tokens = tokens or {"muon": 100, "adamw": 100}
    return [
        {
            "group": group,
            "run": f"{group}/{opt}_{seed}",
            "optimizer": opt,
            "seed": seed,
            "lr": 1e-3,
            "best_lr": True,
            "sweep": False,
            "steps": steps,
            "tokens_per_step": tokens[opt],
            "params": params,
            "corpus": "tiny",
            "dp": 1,
            "tp": 1,
            "backend": "gloo",
        }
        for seed in range(seeds)
        for opt in ("muon", "adamw")
    ]


def _lead_rows(group: str, alpha: float, seeds: float, ratio: tuple[float, float, float], *, matched: tuple[int, ...] = ()):
    """The leading_steps rows with their summaries over seeds (``end_leading_ratio_mean``, ``_low``, ``_high``), two
    Muon steps per seed; ``matched``: by seed, how many of them AdamW matched (both unless told; one seed where the
    summary has none)."""
    rows = []
    matched = matched or (2,) * (int(seeds) if seeds == seeds else 1)
    for seed, reached in enumerate(matched):
        for step in (1, 2):
            matched_at = float(step) if step <= reached else np.nan
            rows.append(
                {
                    "group": group,
                    "alpha": alpha,
                    "seed": seed,
                    "muon_step": step,
                    "adamw_matching_step": matched_at,
                    "leading_ratio": 0.0 if matched_at == matched_at else np.nan,
                    "seeds": seeds,
                    "end_leading_ratio_mean": ratio[0],
                    "end_leading_ratio_low": ratio[1],
                    "end_leading_ratio_high": ratio[2],
                    "end_leading_ratio_flops_mean": ratio[0],
                    "end_leading_ratio_flops_low": ratio[1],
                    "end_leading_ratio_flops_high": ratio[2],
                    "muon_gflop_per_step": 1.2,
                    "adamw_gflop_per_step": 1.0,
                }
            )
    return rows


def _leading_tables(conv: list[dict], lead: list[dict], budget: pd.DataFrame | None = None) -> ProfileTables:
    empty = pd.DataFrame()
    return ProfileTables(empty, empty, empty, empty, convergence=pd.DataFrame(conv), leading=pd.DataFrame(lead), budget=budget)


def test_the_lead_is_read_at_the_headline_smoothing_whatever_row_comes_first():
    """The leading_steps table holds every EWM alpha; the claim reads the headline one (0.05), even where the heavier
    smoothing's rows (0.005, where AdamW reached none of Muon's losses) come first."""
    lead = _lead_rows("g", 0.005, np.nan, (np.nan, np.nan, np.nan)) + _lead_rows("g", 0.05, 5, (0.6, 0.5, 0.7))
    m = leading_steps_claim(_leading_tables(_conv_rows("g", 5), lead))
    assert (m.value, m.low, m.high) == (0.6, 0.5, 0.7)


def test_runs_of_other_tokens_per_step_leave_the_lead_in_steps_unmeasured():
    """The lead is read in steps and said in tokens: only at equal tokens per step are they the same."""
    conv = _conv_rows("g", 5, tokens={"muon": 100, "adamw": 200})
    said = leading_steps_claim(_leading_tables(conv, _lead_rows("g", 0.05, 5, (0.6, 0.5, 0.7))))
    assert isinstance(said, str) and "different tokens per step" in said


def test_a_configuration_is_judged_by_muons_long_runs_not_its_short_sweep():
    """Configuration a: Muon's 100-step runs of 100 tokens on 1,000 parameters are 10 tokens per parameter
    (compute-optimal), on 2 seeds; its 4-step sweep run at the best rate (0.4 tokens per parameter, 1 seed) is not
    what it trained. Configuration b: 5 tokens per parameter on 5 seeds. Outside the claim's parameters both, the
    compute-optimal one is judged: a."""
    sweep = {**_conv_rows("a", 1)[0], "steps": 4, "sweep": True, "run": "a/muon_sweep"}
    conv = pd.DataFrame([sweep, *_conv_rows("a", 2), *_conv_rows("b", 5, steps=50)])
    assert claim_group(conv) == "a"


def test_a_seed_where_adamw_reached_none_of_muons_losses_is_left_out_not_counted_a_lower_bound():
    """Seed 0: AdamW matched both of Muon's steps (a lead, no bound); seed 1: none (no lead at all, so no lower bound
    either). The summary is over 1 seed; the explanation leaves seed 1 out and calls no seed a lower bound."""
    lead = _lead_rows("g", 0.05, 1, (0.6, np.nan, np.nan), matched=(2, 0))
    m = leading_steps_claim(_leading_tables(_conv_rows("g", 2), lead))
    assert "1 seed left out, one-sided" in m.explanation and "A lower bound" not in m.explanation
    bounded = _lead_rows("g", 0.05, 2, (0.6, 0.5, np.nan), matched=(2, 1))  # seed 1 matched all but Muon's last step
    assert (
        "A lower bound, one-sided, on 1 of 2 seeds"
        in leading_steps_claim(_leading_tables(_conv_rows("g", 2), bounded)).explanation
    )


def test_budgets_of_another_configuration_are_not_this_ones_lead():
    """budget_match holds every configuration's rows: a configuration without budgets of its own is measured on its
    curves' lead at the end (0.6), never on another one's budgets (lead 2.0)."""
    other = pd.DataFrame(
        {
            "group": "other",
            "seed": [0],
            "seeds": [5],
            "censored_seeds": [0],
            "censored": ["none"],
            "lead_bound": [np.nan],
            "budget_ratio": [3.0],
            "lead_mean": [2.0],
            "lead_low": [1.5],
            "lead_high": [2.5],
        }
    )
    m = leading_steps_claim(_leading_tables(_conv_rows("g", 5), _lead_rows("g", 0.05, 5, (0.6, 0.5, 0.7)), other))
    assert (m.value, m.low, m.high) == (0.6, 0.5, 0.7) and "AdamW also trained" not in m.conditions


def test_the_lead_is_read_on_the_judged_configurations_rows_only():
    """leading_steps holds every configuration's rows: another one's (h, lead 2.0, first in the table, whose runs are
    not in the convergence table here) is not the judged configuration's (g, 0.6)."""
    lead = _lead_rows("h", 0.05, 5, (2.0, 1.5, 2.5)) + _lead_rows("g", 0.05, 5, (0.6, 0.5, 0.7))
    m = leading_steps_claim(_leading_tables(_conv_rows("g", 5), lead))
    assert (m.value, m.low, m.high) == (0.6, 0.5, 0.7)


def test_a_summary_over_no_seed_is_not_measured():
    """The summary's seeds null: AdamW reached none of Muon's smoothed losses on any seed; there is nothing to read."""
    said = leading_steps_claim(_leading_tables(_conv_rows("g", 5), _lead_rows("g", 0.05, np.nan, (np.nan,) * 3)))
    assert said == "AdamW never reached any smoothed loss of Muon's run, or the curves are empty"


def test_a_summary_without_a_low_end_has_no_interval_not_a_one_sided_one():
    """Only a finite low end with a null high end is a one-sided interval [low, +inf); with both ends null there is
    no interval at all."""
    m = leading_steps_claim(_leading_tables(_conv_rows("g", 5), _lead_rows("g", 0.05, 5, (0.6, np.nan, np.nan))))
    assert m.value == 0.6 and np.isnan(m.low) and np.isnan(m.high)
    one_sided = leading_steps_claim(_leading_tables(_conv_rows("g", 5), _lead_rows("g", 0.05, 5, (0.6, 0.5, np.nan))))
    assert (one_sided.low, one_sided.high) == (0.5, np.inf)


# ---------------------------------------------------------------- the pipeline claims (analysis/pipeline_claims.py)


def test_the_pipeline_claims_grids_all_come_from_the_pipeline_group():
    """The grids are the pipeline group's, recorded interleaved; a DP2·TP2 run of the original study's comparison
    group (which first_run would otherwise prefer) is not its hybrid: the value stays 100 / 110 (PP2·DP2 the
    fastest pipeline)."""
    t = _pipeline_tables(PIPELINE_STEP, 50.0, 100.0)
    hybrid = t.runs[t.runs["name"] == "muon_dp2_tp2"].iloc[0]
    other = hybrid.copy()
    other["run"], other["group"], other["micro_batches"] = "p/comparison/muon_dp2_tp2", "comparison", 1
    m = hybrid_survives_pp(dataclasses.replace(t, runs=pd.concat([t.runs, other.to_frame().T], ignore_index=True)))
    assert m.value == pytest.approx(100.0 / 110.0, rel=0.02) and m.runs[0]["group"] == "pipeline"


def test_the_bubble_claim_reads_only_steps_timed_on_every_stage():
    """Round 0 of PP4 has no time of stage 3: its steps are not timed on every stage, so the round is not read (3
    rounds); read, its stages' mean would be (10 + 2 x 100) / 3 = 70 ms instead of (10 + 3 x 100) / 4 = 77.5."""
    t = _pipeline_tables(PIPELINE_STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0}, stage_optimizer={0: 10.0})
    timed = t.timed
    lost = (timed["run"] == "p/pipeline/muon_pp4") & (timed["trial"] == 0) & (timed["stage"] == 3)
    m = bubble_hides_step(dataclasses.replace(t, timed=timed[~lost].reset_index(drop=True)))
    assert f"{PIPELINE_ROUNDS - 1} rounds" in m.explanation
    assert m.value == pytest.approx(10.0 / 77.5, rel=0.03)


def test_the_bubble_claim_takes_each_rounds_median_step_not_its_mean():
    """Per step, then the median per round: one step in three whose stage 0 took 100 ms instead of 10 (a share of
    100 / ((100 + 3 x 100) / 4) = 1) leaves each round's median at 10 / 77.5; its mean would be about 0.42."""
    t = _pipeline_tables(PIPELINE_STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0}, stage_optimizer={0: 10.0})
    timed = t.timed.copy()
    slow = (timed["run"] == "p/pipeline/muon_pp4") & (timed["step"] == 0) & (timed["stage"] == 0)
    timed.loc[slow, "optimizer_ms"] *= 10.0
    m = bubble_hides_step(dataclasses.replace(t, timed=timed))
    assert m.value == pytest.approx(10.0 / 77.5, rel=0.03)


def test_the_bubble_claim_reads_the_pipelines_at_4_ranks_only():
    """A deeper Muon pipeline at 8 ranks (PP8, its drain timed) is not one of the 4-rank group's: the claim reads PP4."""
    t = _pipeline_tables(PIPELINE_STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0})
    pp4 = t.runs[t.runs["name"] == "muon_pp4"].iloc[0]
    pp8 = pp4.copy()
    pp8["run"], pp8["name"], pp8["pp"], pp8["world_size"] = "p/pipeline/muon_pp8", "muon_pp8", 8, 8
    timed = t.timed[t.timed["run"] == pp4["run"]].assign(run=pp8["run"])
    wider = dataclasses.replace(
        t, runs=pd.concat([t.runs, pp8.to_frame().T], ignore_index=True), timed=pd.concat([t.timed, timed])
    )
    m = bubble_hides_step(wider)
    assert m.runs[0]["name"] == "muon_pp4" and m.value == pytest.approx(1.0, rel=0.03)


def test_a_stages_times_are_the_mean_over_its_ranks():
    """PP2·DP2 (the deepest once PP4 is gone): stage 1's ranks take 100 and 300 ms for their optimizer step, a mean of
    200, idle 150 ms after their last backward: 50 ms paid, against the stages' mean (10 + 200) / 2 = 105 ms. With the
    slowest rank's 300 ms it would be 150 / 155."""
    t = _pipeline_tables(PIPELINE_STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0}, stage_optimizer={0: 10.0})
    timed = t.timed.copy()
    timed.loc[(timed["run"] == "p/pipeline/muon_pp2_dp2") & (timed["rank"] == 3), "optimizer_ms"] *= 3.0
    m = bubble_hides_step(dataclasses.replace(t, runs=t.runs[t.runs["name"] != "muon_pp4"], timed=timed))
    assert m.runs[0]["name"] == "muon_pp2_dp2" and m.value == pytest.approx(50.0 / 105.0, rel=0.05)


# ---------------------------------------------------------------- AdamW's longer budgets (analysis/budget_match.py)


def _finals(optimizer: str, seed: int, steps: int, test_loss: float, *, tokens_per_step: int = 100) -> dict:
    """A convergence row at the final step of a run at its best learning rate."""
    return {
        "optimizer": optimizer,
        "seed": seed,
        "steps": steps,
        "step": steps,
        "best_lr": True,
        "lr": 1e-3,
        "tokens_per_step": tokens_per_step,
        "params": 1000,
        "test_loss": test_loss,
    }


def test_a_budget_whose_run_before_has_no_loss_is_matched_at_that_budget_never_before_it():
    """Interpolation needs a loss on both sides: where the budget before the first one that reaches Muon's loss has
    none (diverged), AdamW is known to reach it only at that first budget, 2,000 tokens, not at the 1,000 that
    never finished."""
    tokens, censored = matched_tokens(np.array([1000.0, 2000.0]), np.array([np.nan, 3.0]), 3.5)
    assert censored == "none" and tokens == pytest.approx(2000.0)


def test_a_seed_without_an_adamw_run_of_muons_length_has_no_budget_row():
    """Budgets bracket Muon's loss from AdamW's run of Muon's own length: without that run (only 15 and 20 steps
    against Muon's 10) nothing says AdamW had not reached it at Muon's length, so the seed gets no row (not a lead
    'censored below' at 0)."""
    conv = pd.DataFrame(
        [_finals("muon", 0, 10, 3.0), _finals("adamw", 0, 15, 2.9), _finals("adamw", 0, 20, 2.8)]
        + [_finals("muon", 1, 10, 3.0), _finals("adamw", 1, 10, 3.2), _finals("adamw", 1, 20, 2.8)]
    )
    table = budget_match_table(conv)
    assert sorted(set(table["seed"])) == [1] and int(table["seeds"].iloc[0]) == 1
    assert table["censored"].tolist() == ["none", "none"]


def test_a_seed_whose_adamw_budgets_ran_other_tokens_per_step_has_no_budget_row():
    """A budget is a multiple of Muon's steps, and so of its tokens, only at Muon's tokens per step: AdamW's runs at
    200 tokens a step against Muon's 100 are not compared."""
    conv = pd.DataFrame(
        [_finals("muon", 0, 10, 3.0), _finals("adamw", 0, 10, 3.2, tokens_per_step=200)]
        + [_finals("adamw", 0, 20, 2.8, tokens_per_step=200)]
    )
    assert budget_match_table(conv).empty


def test_seeds_censored_both_ways_give_no_mean_and_no_interval():
    """One seed beyond the largest budget (a lower bound) and one reached at Muon's length (an upper bound): the
    mean is neither, so none is given."""
    lead = pd.Series([np.nan, np.nan, 0.5, 0.6])
    kinds = pd.Series(["above", "below", "none", "none"])
    bound = pd.Series([2.0, 0.0, np.nan, np.nan])
    assert all(np.isnan(v) for v in censored_mean_interval(lead, kinds, bound))


def test_a_seed_censored_below_is_counted_censored_and_leaves_the_interval_without_a_low_end():
    """Seed 0's AdamW run of Muon's length already ends below Muon's loss (2.9 against 3.0): censored below, at a
    bound of 0, and counted among the censored seeds as one censored above would be."""
    conv = pd.DataFrame(
        [_finals("muon", 0, 10, 3.0), _finals("adamw", 0, 10, 2.9), _finals("adamw", 0, 20, 2.8)]
        + [_finals("muon", 1, 10, 3.0), _finals("adamw", 1, 10, 3.2), _finals("adamw", 1, 20, 2.8)]
    )
    per_seed = budget_match_table(conv).drop_duplicates("seed").set_index("seed")
    assert per_seed.loc[0, "censored"] == "below" and per_seed.loc[0, "lead_bound"] == 0.0
    assert int(per_seed["censored_seeds"].iloc[0]) == 1 and int(per_seed["seeds"].iloc[0]) == 2
    assert per_seed["lead_low"].iloc[0] == -np.inf


def test_a_seed_with_only_a_short_sweep_run_of_muon_is_not_matched_on_the_sweeps_length():
    """Budgets are multiples of Muon's long runs (10 steps here; the 4-step sweep is shorter): seed 0, whose long Muon
    run is missing, is not compared on its 4-step sweep runs; seed 1 is, on its 10- and 20-step AdamW runs."""
    conv = pd.DataFrame(
        [_finals("muon", 0, 4, 3.5), _finals("adamw", 0, 4, 3.6), _finals("adamw", 0, 10, 3.2), _finals("adamw", 0, 20, 2.8)]
        + [_finals("muon", 1, 10, 3.0), _finals("adamw", 1, 10, 3.2), _finals("adamw", 1, 20, 2.8)]
    )
    table = budget_match_table(conv)
    assert sorted(set(table["seed"])) == [1] and sorted(table["adamw_steps"]) == [10, 20]
