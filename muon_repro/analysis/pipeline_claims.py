"""The two pipeline claims: does the hybrid DP2·TP2 optimum survive a PP dimension, and could the bubble hide
Muon's optimizer step. Measured on the ``pipeline`` group's runs (``muon-repro bench pipeline``): seven grids at
the same tokens per step, every one in micro-batches of one sequence, recorded interleaved round by round.

* :func:`hybrid_survives_pp`: per round, DP2·TP2's step time over the fastest of PP2·DP2, PP2·TP2 and PP4
  (slowest rank per step, median over the round's steps); below 1 the hybrid still wins.
* :func:`bubble_hides_step`: per round and stage of the deepest Muon pipeline, the stage's bubble over its
  optimizer step (each the mean over the stage's ranks per step, the median over the round's steps); the
  round's value is the smallest over stages, since the step waits for the slowest stage. At 1 or more every
  stage idles at least as long as its optimizer step takes.

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
from muon_repro.analysis.rounds import align_rounds, mean_interval, paired_ratio_interval, per_round_ratio, rounds_of
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
    explanation = (
        f"Median step time without the profiler: DP2·TP2 {float(hybrid['timed_step_ms']):.0f} ms, the fastest pipeline "
        f"{winner} {float(win['timed_step_ms']):.0f} ms (runs table: every grid). DP2·TP2 pays the model's TP all-reduces "
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
    grids = _pipeline_group(t, "muon")
    if isinstance(grids, str):
        return grids
    deepest = max((grids[label] for label in PP_GRIDS), key=lambda run: int(run["pp"]))
    if (why := _timed(t, deepest)) is not None:
        return why
    per_stage = _bubble_ratio_per_round(t.timed, deepest)
    if per_stage is None:
        return f"needs the bubble of every stage of {deepest['run']} in its timed steps (timed_steps.bubble_ms)"
    rounds, ratios = per_stage
    value, low, high = mean_interval(np.nanmin(ratios, axis=0))
    quoted = {"bubble_over_optimizer": value, "bubble_over_optimizer_low": low, "bubble_over_optimizer_high": high}
    stage_medians = np.nanmedian(ratios, axis=1)
    quoted |= {f"stage{s}_bubble_over_optimizer": float(r) for s, r in enumerate(stage_medians)}
    shares = ", ".join(f"stage {s} {float(r):.2f}" for s, r in enumerate(stage_medians))
    explanation = (
        f"{deepest['name']}: {int(deepest['pp'])} stages, {int(deepest['micro_batches'])} micro-batches per step; the "
        f"bubble over the optimizer step per stage (median over {len(rounds)} rounds): {shares}; the step waits for "
        "the smallest. The whole bubble bounds what could hide the step from above: only the idle time after a stage's "
        "last backward can hold it."
    )
    return Measurement(value, low, high, describe_runs(deepest), explanation, (deepest,), quoted)


def _bubble_ratio_per_round(timed: pd.DataFrame, run: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """(rounds, ratios[stage, round]): per round the median over steps of the stage's bubble over its optimizer
    step, each the mean over the stage's ranks; None when a stage has no bubble recorded."""
    if timed.empty or "bubble_ms" not in timed.columns:
        return None
    name, per_stage = str(run["run"]), []
    mine = timed[timed["run"] == name]
    for stage in range(int(run["pp"])):
        rows = mine[mine["stage"] == stage]
        if rows.empty or rows["bubble_ms"].isna().all():
            return None
        ratio = per_round_ratio(rows, name, "bubble_ms", "optimizer_ms", how_num="mean", how_den="mean")
        per_stage.append((rounds_of(rows, name), ratio))
    rounds = np.array(sorted(set.intersection(*(set(r.tolist()) for r, _ in per_stage))), dtype="int64")
    return rounds, np.vstack(align_rounds(*per_stage))  # the rounds every stage was timed in
