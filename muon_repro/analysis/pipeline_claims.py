"""The two pipeline claims: does the hybrid DP2·TP2 optimum survive a PP dimension, and could the bubble hide
Muon's optimizer step. Measured on the ``pipeline`` group's runs (``muon-repro bench pipeline``): seven grids at
the same tokens per step, every one in micro-batches of one sequence, recorded interleaved round by round.

* :func:`hybrid_survives_pp`: per round, DP2·TP2's step time over the fastest of PP2·DP2, PP2·TP2 and PP4
  (slowest rank per step, median over the round's steps); below 1 the hybrid still wins.
* :func:`bubble_hides_step`: per stage of the deepest Muon pipeline, the idle time after the stage's last
  backward (until the last stage of its pipeline ends its last backward: the drain) over its optimizer step, per
  round, with a paired interval each. Only that idle time could hold the step: the bubble before a stage's last
  backward comes before its gradients are complete. The claim is judged on every stage at once (at or above 1 on
  every stage: reproduced; below 1 on any: not reproduced); no minimum over noisy stages is taken as an estimate.

Both take their times from the steps timed without the profiler, the only ones recorded in every round.
"""

from __future__ import annotations

import numpy as np
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
)
from muon_repro.analysis.rounds import (
    align_rounds,
    geometric_mean,
    mean_interval,
    paired_ratio_interval,
    per_round_ratio,
    rounds_of,
)
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
    fastest = np.minimum.reduce(rival_ms)
    value, low, high = paired_ratio_interval(hybrid_ms, fastest)
    winner = PP_GRIDS[int(np.argmin([float(np.median(ms)) for ms in rival_ms]))]
    quoted = {"hybrid_over_fastest_pp": value, "hybrid_over_fastest_pp_low": low, "hybrid_over_fastest_pp_high": high}
    tp_ms = t.phase_mean(hybrid, MODEL_COMM_PHASES[0], "ms_per_step")
    tp_text = absent_or(tp_ms, f"{tp_ms:.0f} ms per step")
    win = grids[winner]
    winner_ms = rival_ms[PP_GRIDS.index(winner)]
    quoted |= {"hybrid_step_ms": geometric_mean(hybrid_ms), "fastest_pp_step_ms": geometric_mean(winner_ms)}
    explanation = (
        f"Step time without the profiler, geometric mean over {len(hybrid_ms)} paired rounds of each round's median: "
        f"DP2·TP2 {geometric_mean(hybrid_ms):.0f} ms, the fastest pipeline {winner} {geometric_mean(winner_ms):.0f} ms "
        "(runs table: every grid). DP2·TP2 pays the model's TP all-reduces "
        f"({tp_text}); {winner} pays its bubble ({float(win['timed_bubble_ms']):.0f} ms) and orthogonalizes fewer matrices "
        f"per rank (Newton-Schulz {float(win['ns_flops_max_rank'] or 0) / 1e9:.1f} against "
        f"{float(hybrid['ns_flops_max_rank'] or 0) / 1e9:.1f} GFLOP on the busiest rank)."
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
    """Per stage of the deepest Muon pipeline with a drain recorded, the idle time after the stage's last backward
    (``timed_steps.drain_idle_ms``) over its optimizer step, per round (medians over the round's steps, means over
    the stage's ranks), with a paired interval each. The claim holds on every stage or not at all: reproduced when
    every stage's interval lies at or above 1, not reproduced when any lies below; the row's interval is
    [smallest low, smallest high] over stages, which decides exactly that, and its value the limiting stage's."""
    runs = _drained_pipelines(t)
    if isinstance(runs, str):
        return runs
    deepest = max(runs, key=lambda run: int(run["pp"]))
    per_stage = _idle_ratio_per_round(t.timed, deepest)
    if per_stage is None:
        return f"needs the drain of every stage of {deepest['run']} in its timed steps (timed_steps.drain_idle_ms)"
    rounds, ratios = per_stage
    if len(rounds) < 2:
        return f"needs 2 or more rounds of {deepest['run']} timed on every stage for an interval (has {len(rounds)})"
    stages = [mean_interval(ratios[s]) for s in range(len(ratios))]
    limiting = int(np.argmin([high for _, _, high in stages]))
    value, low, high = stages[limiting][0], min(lo for _, lo, _ in stages), stages[limiting][2]
    quoted: dict[str, float] = {}
    for s, (v, lo, hi) in enumerate(stages):
        quoted |= {f"stage{s}_idle_over_optimizer": v, f"stage{s}_idle_over_optimizer_low": lo}
        quoted[f"stage{s}_idle_over_optimizer_high"] = hi
    said = ", ".join(f"stage {s} {v:.2f} [{lo:.2f}, {hi:.2f}]" for s, (v, lo, hi) in enumerate(stages))
    explanation = (
        f"{deepest['name']}, {int(deepest['micro_batches'])} micro-batches: idle time after each stage's last backward "
        f"over its optimizer step ({len(rounds)} rounds): {said}. Stage {limiting} limits: "
        + (
            "it finishes the drain, so no idle time follows its last backward."
            if stages[limiting][2] == 0
            else "its idle time after the last backward is the shortest against its step."
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
        return "needs the pipeline runs' drain in their timed steps: record them again (muon-repro bench pipeline_bubble)"
    if (why := _timed(t, *runs)) is not None:
        return why
    return runs


def _idle_ratio_per_round(timed: pd.DataFrame, run: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """(rounds, ratios[stage, round]): per round the median over steps of the stage's drain idle over its optimizer
    step, each the mean over the stage's ranks; the rounds every stage was timed in. None when a stage has no drain."""
    name, per_stage = str(run["run"]), []
    mine = timed[timed["run"] == name]
    for stage in range(int(run["pp"])):
        rows = mine[mine["stage"] == stage]
        if rows.empty or rows["drain_idle_ms"].isna().all():
            return None
        ratio = per_round_ratio(rows, name, "drain_idle_ms", "optimizer_ms", how_num="mean", how_den="mean")
        per_stage.append((rounds_of(rows, name), ratio))
    rounds = np.array(sorted(set.intersection(*(set(r.tolist()) for r, _ in per_stage))), dtype="int64")
    return rounds, np.vstack(align_rounds(*per_stage))
