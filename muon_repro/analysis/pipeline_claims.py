"""The two pipeline claims: does the hybrid DP2·TP2 optimum survive a PP dimension, and could the bubble hide
Muon's optimizer step. Measured on the ``pipeline`` group's runs (``muon-repro bench pipeline``): seven grids at
the same tokens per step, every one in micro-batches of one sequence, recorded interleaved round by round.

* :func:`hybrid_survives_pp`: DP2·TP2's step time over the fastest of PP2·DP2, PP2·TP2 and PP4 (slowest rank per
  step, median over the round's steps): the largest of the three paired ratios, with Bonferroni intervals
  (:func:`~muon_repro.analysis.rounds.closest_rival_ratio`); below 1 the hybrid still wins.
* :func:`bubble_hides_step`: the optimizer time the deepest Muon pipeline's step pays after its last backward
  over a stage's optimizer step (the mean over stages). A stage's idle time after its own last backward (until the pipeline's
  last backward ends: the drain) is the only bubble that could hold its optimizer step: the bubble before a
  stage's last backward comes before its gradients are complete. Under 1F1B stage 0 ends the drain, so its step
  is paid whole, and the bubble can hide no more than what the later stages' steps exceed it by.

Both take their times from the steps timed without the profiler, the only ones recorded in every round.
"""

from __future__ import annotations

import pandas as pd

from muon_repro.analysis.claim_inputs import (
    Measurement,
    ProfileTables,
    UnequalWork,
    absent_or,
    check_same_work,
    describe_runs,
    first_run,
    is_missing,
    ns_gflop,
)
from muon_repro.analysis.estimators import disturbed_rounds
from muon_repro.analysis.rounds import closest_rival_ratio, geometric_mean, largest_mean_interval
from muon_repro.analysis.timed_steps import HOST_LAUNCH, comm_timing
from muon_repro.phases import MODEL_COMM_PHASES

GRIDS = {"DP2·TP2": (2, 2, 1), "PP2·DP2": (2, 1, 2), "PP2·TP2": (1, 2, 2), "PP4": (1, 1, 4), "DP4": (4, 1, 1), "TP4": (1, 4, 1)}
PP_GRIDS = ("PP2·DP2", "PP2·TP2", "PP4")


def _pipeline_group(t: ProfileTables, optimizer: str) -> dict[str, pd.Series] | str:
    """The grids of the group with Muon pipeline runs at 4 ranks, by label; or what is missing."""
    if "pp" not in t.runs.columns:
        return "needs the runs table's pp column: re-run muon-repro analyze"
    runs = t.runs[(t.runs["optimizer"] == optimizer) & (t.runs["world_size"] == 4)]
    with_pp = runs[runs["pp"].fillna(1).astype("int64") > 1]
    if with_pp.empty:
        return f"needs {optimizer} runs with pipeline stages at 4 ranks (muon-repro bench pipeline)"
    group = runs[runs["group"] == first_run(with_pp)["group"]]
    grids = {label: first_run(group, dp=dp, tp=tp, pp=pp) for label, (dp, tp, pp) in GRIDS.items()}
    missing = [label for label in ("DP2·TP2", *PP_GRIDS) if grids[label] is None]
    if missing:
        return f"needs {optimizer} runs of the grids {', '.join(missing)} in one group (muon-repro bench pipeline)"
    return {label: run for label, run in grids.items() if run is not None}


def _timed(t: ProfileTables, *runs: pd.Series) -> str | None:
    """Why ``runs`` cannot be compared on their timed steps (None: they can)."""
    if not t.unprofiled(*runs) or any(is_missing(r.get("timed_step_ms")) for r in runs):
        return "needs the pipeline runs' steps timed without the profiler (recorded with timed steps)"
    return None


def hybrid_survives_pp(t: ProfileTables) -> Measurement | str:
    grids = _pipeline_group(t, "muon")
    if isinstance(grids, str):
        return grids
    hybrid, rivals = grids["DP2·TP2"], [grids[label] for label in PP_GRIDS]
    if (why := _timed(t, hybrid, *rivals)) is not None:
        return why
    for rival in rivals:
        check_same_work(hybrid, rival)
        _check_same_micro_batch(hybrid, rival)
    hybrid_ms, *rival_ms = t.paired("step_ms", "max", hybrid, *rivals)
    (value, low, high), closest = closest_rival_ratio(hybrid_ms, rival_ms)
    winner = PP_GRIDS[closest]  # the fastest pipeline: the smallest geometric mean, the largest ratio
    quoted = {"hybrid_over_fastest_pp": value, "hybrid_over_fastest_pp_low": low, "hybrid_over_fastest_pp_high": high}
    tp_ms = t.phase_mean(hybrid, MODEL_COMM_PHASES[0], "ms_per_step")
    tp_text = absent_or(tp_ms, f"{tp_ms:.0f} ms per step profiled")
    win = grids[winner]
    winner_ms = rival_ms[PP_GRIDS.index(winner)]
    micro_batches = int(hybrid["micro_batches"])
    quoted |= {
        "hybrid_step_ms": geometric_mean(hybrid_ms),
        "fastest_pp_step_ms": geometric_mean(winner_ms),
        "hybrid_micro_batches": micro_batches,
    }
    explanation = (
        f"Step time without the profiler, geometric mean over {len(hybrid_ms)} paired rounds of each round's median: "
        f"DP2·TP2 {geometric_mean(hybrid_ms):.0f} ms, the fastest pipeline {winner} {geometric_mean(winner_ms):.0f} ms. "
        "DP2·TP2 pays the model's TP all-reduces "
        f"({tp_text}, over {micro_batches} micro-batches); "
        f"{winner} pays its bubble ({float(win['timed_bubble_ms']):.0f} ms) and orthogonalizes fewer matrices "
        f"per rank (Newton-Schulz {ns_gflop(win)} against {ns_gflop(hybrid)} GFLOP on the busiest rank)."
    )
    return Measurement(value, low, high, describe_runs(hybrid, *rivals), explanation, (hybrid, *rivals), quoted)


def _check_same_micro_batch(a: pd.Series, b: pd.Series) -> None:
    """A pipeline needs micro-batches, so the grids compared with one train in micro-batches of the same size."""
    sizes = [int(r["batch_per_dp"]) // max(int(r["micro_batches"]), 1) for r in (a, b)]
    if sizes[0] != sizes[1]:
        raise UnequalWork(
            f"runs {a['run']} and {b['run']} did different work: micro-batches of {sizes[0]} vs {sizes[1]} sequences; "
            "record them with the same micro-batch size to compare them"
        )


def bubble_hides_step(t: ProfileTables) -> Measurement | str:
    """How much of Muon's optimizer step the deepest Muon pipeline's step still pays after its last backward, over
    its stages' optimizer step (the mean over stages: what the step would pay with balanced stages and no idle time
    to hide the steps in).

    Stage k starts its optimizer step when its last backward ends, ``drain_idle_ms`` before the pipeline's last
    backward ends (timed_steps; under 1F1B stage 0 ends the drain, so its idle time is 0). Per step the pipeline so
    pays ``max_k(optimizer_k - idle_k, 0)`` after its last backward (each stage's times the mean over its ranks): at
    most the fill more than it pays, since stage k also hides its step while the next step's first forward reaches
    it (docs/pipeline.md), and exactly it where stage 0's term is the largest. Each stage's term over ``mean_k
    optimizer_k`` (a mean, not the slowest stage: the largest of several equally slow stages' noisy steps would bias
    the ratio low), per step, the median per round; the value is the largest stage's mean over rounds, its interval
    :func:`~muon_repro.analysis.rounds.largest_mean_interval`'s (the mean of each step's largest term is biased high
    where stages nearly tie: it covered 72.9% at 10 rounds). About 1: nothing is hidden; near 0 the bubble hides the
    step, which needs a first stage with little optimizer work (stage 0 pays its own whole); above 1 a later stage's
    step outlasts its idle time. The per-stage times the explanation gives are what decides it."""
    runs = _drained_pipelines(t)
    if isinstance(runs, str):
        return runs
    deepest = max(runs, key=lambda run: int(run["pp"]))
    per_step = _stage_steps(t.timed, deepest)
    if per_step is None:
        return f"needs the drain of every stage of {deepest['run']} in its timed steps (timed_steps.drain_idle_ms)"
    stages = per_step["stages"]
    paid = (stages["optimizer_ms"] - stages["drain_idle_ms"]).clip(lower=0.0)
    average = per_step["average_ms"].reindex(stages.index.droplevel("stage")).to_numpy()
    shares = (paid / average).groupby(level=["trial", "stage"]).median().unstack("stage")  # round x stage
    disturbed = disturbed_rounds(*t.steps_of(deepest))  # the one rule of every estimator (claims' _left_out_note)
    shares = shares[~shares.index.isin(sorted(disturbed))]
    if len(shares) < 2:
        return f"needs 2 or more rounds of {deepest['run']} timed on every stage for an interval (has {len(shares)})"
    (value, low, high), _ = largest_mean_interval([shares[stage].to_numpy() for stage in shares.columns])
    stage_means = per_step["stages"].groupby(level="stage").mean()  # per stage: ms, means over rounds and steps
    paid_by = int((stage_means["optimizer_ms"] - stage_means["drain_idle_ms"]).idxmax())
    quoted: dict[str, float] = {}
    for stage, row in stage_means.iterrows():
        quoted |= {f"stage{stage}_optimizer_ms": float(row["optimizer_ms"]), f"stage{stage}_idle_ms": float(row["drain_idle_ms"])}
    said = ", ".join(
        f"stage {stage} {row['optimizer_ms']:.0f} / {row['drain_idle_ms']:.0f}" for stage, row in stage_means.iterrows()
    )
    # under 1F1B stage 0 is never idle in the drain: the estimate cannot fall below its step over the stages' mean
    floor = float(stage_means["optimizer_ms"].iloc[0] / stage_means["optimizer_ms"].mean())
    quoted["stage0_over_mean_ratio"] = floor
    explanation = (
        f"{deepest['name']}, {int(deepest['micro_batches'])} micro-batches, {len(shares)} rounds. Per stage, optimizer "
        f"step / idle after its last backward (ms): {said}. "
        + (
            f"Stage 0 ends the drain and pays its step whole: the estimate (not the interval) is at least {floor:.2f}, "
            "its step over the mean."
            if paid_by == 0
            else f"Stage {paid_by}'s optimizer step outlasts its idle time the most: it sets what the step pays."
        )
    )
    return Measurement(value, low, high, describe_runs(deepest), explanation, (deepest,), quoted)


def _drained_pipelines(t: ProfileTables) -> list[pd.Series] | str:
    """The Muon pipeline runs at 4 ranks whose timed steps hold the drain (``timed_steps.drain_idle_ms``)."""
    if "pp" not in t.runs.columns:
        return "needs the runs table's pp column: re-run muon-repro analyze"
    muon = t.runs[(t.runs["optimizer"] == "muon") & (t.runs["world_size"] == 4) & (t.runs["pp"].fillna(1) > 1)]
    if muon.empty:
        return "needs muon runs with pipeline stages at 4 ranks (muon-repro bench pipeline_bubble)"
    timed = t.timed
    if timed.empty or "drain_idle_ms" not in timed.columns:
        return "needs the pipeline runs' drain in their timed steps: record them again (muon-repro bench pipeline_bubble)"
    drained = set(timed.loc[timed["drain_idle_ms"].notna(), "run"])
    runs = [run for _, run in muon.iterrows() if run["run"] in drained]
    if not runs:
        if (muon["backend"].map(comm_timing) == HOST_LAUNCH).all():  # the timed steps' own test of the clock
            return (
                "not measured on NCCL: a stage's host reads its clock after its last backward once the kernels are "
                "queued, not when they end, so the drain it would hide its step in is unknown (timed_steps.drain_idle_ms)"
            )
        return "needs the pipeline runs' drain in their timed steps: record them again (muon-repro bench pipeline_bubble)"
    if (why := _timed(t, *runs)) is not None:
        return why
    return runs


def _stage_steps(timed: pd.DataFrame, run: pd.Series) -> dict[str, pd.Series | pd.DataFrame] | None:
    """The steps of ``run`` timed on every stage: per (trial, step, stage), ``stages`` (optimizer_ms and
    drain_idle_ms, means over the stage's ranks); per (trial, step), ``average_ms`` (a stage's optimizer step, the
    mean over stages). None when a stage has no drain."""
    pp, mine = int(run["pp"]), timed[timed["run"] == str(run["run"])]
    if any(mine.loc[mine["stage"] == stage, "drain_idle_ms"].notna().sum() == 0 for stage in range(pp)):
        return None
    stages = mine.groupby(["trial", "step", "stage"])[["optimizer_ms", "drain_idle_ms"]].mean().dropna()
    complete = stages.groupby(level=["trial", "step"]).size() == pp  # steps timed on every stage
    stages = stages[complete.reindex(stages.index.droplevel("stage")).to_numpy()]
    average = stages["optimizer_ms"].groupby(level=["trial", "step"]).mean()
    return {"average_ms": average, "stages": stages}
