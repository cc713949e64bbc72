"""The report's "3-D parallelism (DP x TP x PP)" section and its figure: what the pipeline group ran, its grids'
step times, each Muon stage's step taken apart, the two claims asked of it, what they can and cannot say here,
and the cost model on pipelines.

From the tables only (``runs``, ``comparisons``, ``stages``, ``claims``, ``environment``, ``predictions``,
``pipeline_scale_out``): every number is a cell, or a number a claim's explanation states. Without a pipeline run
(a profile of single-device runs, a metrics folder older than the ``pp`` column) the section is one sentence and
draws nothing.

The cost model's part (:func:`pipeline_costmodel`): how it priced each recorded pipeline run (``predictions`` rows
with ``pp > 1``: the 1F1B schedule played back stage by stage, steps back to back, each stage's optimizer step after
its own drain), and what it predicts for the LLaMA-7B-shaped model as TP8 x PP4 x DP on H100 nodes over InfiniBand
(``pipeline_scale_out``, its parameters ``regime_model``'s); nothing when the cost model's records were not analyzed.

The figure, tables in, PNG + SVG path out, drawn only when the tables hold pipeline runs (:func:`has_pipeline`):

    pipeline   left: per grid of the pipeline group, Muon's and AdamW's step timed without the profiler (the
               8-rank grid set apart); right: per stage of each Muon pipeline, its forward+backward less the
               bubble, the bubble, and the optimizer step after the flush (``stages``), so the bubble sits
               beside the step it could hide

Its takeaway quotes the two pipeline claims from ``claims`` (:func:`muon_repro.report.stated.pipeline`); the
section's second figure, one step of the deepest Muon pipeline, is :mod:`muon_repro.report.timeline_figures`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from muon_repro.hardware import rows_of_profile
from muon_repro.phases import BUBBLE, OPTIMIZER
from muon_repro.report import stated, style
from muon_repro.report.abstract_section import not_comparable_reasons
from muon_repro.report.claims_section import claim_measured, report_verdict
from muon_repro.report.data import ReportData, fmetric, is_missing, metric, require_columns
from muon_repro.report.formatting import ms, percent, ratio
from muon_repro.report.plotting import add_title, legend_below, new_figure, save_figure, styled
from muon_repro.report.regimes_section import SHAPE_NOTES, model_said
from muon_repro.report.results_section import comparison_ratio
from muon_repro.report.selection import PIPELINE_GROUP, counted_by_group, pipeline_runs, pp_of
from muon_repro.values import counted

PIPELINE_CLAIMS = ("hybrid_survives_pp", "bubble_hides_step")
NO_PIPELINE = (
    "No pipeline run in these tables: `muon-repro bench pipeline --trials 6`, then `muon-repro analyze`, records the "
    "DP x TP x PP grids (docs/pipeline.md)."
)
GRID_HEADER = [
    "grid",
    "ranks",
    "micro-batches",
    "Muon step",
    "AdamW step",
    "Muon optimizer",
    "AdamW optimizer",
    "Muon / AdamW step",
    "Muon bubble",
]
STAGE_HEADER = ["grid", "stage", "holds", "fwd+bwd", "bubble", "optimizer", "bubble / optimizer"]
NOT_A_PIPELINE = "no stages"


def grid_of(row: pd.Series) -> tuple[int, int, int]:
    """(dp, tp, pp) of a run or a comparison."""
    return int(metric(row, "dp")), int(metric(row, "tp")), pp_of(row)


def grid_order(grid: tuple[int, int, int], ranks: int) -> tuple:
    """The docs' order: DP4, TP4, DP2·TP2, then PP2·DP2, PP2·TP2, PP4 (fewer stages first), the 8-rank grid last."""
    dp, tp, pp = grid
    return (ranks, pp, dp > 1 and tp > 1, tp > 1)


def pipeline_grids(runs: pd.DataFrame) -> list[tuple[tuple[int, int, int], pd.DataFrame]]:
    """The pipeline group's grids in the docs' order, each with its runs (Muon first)."""
    require_columns(runs, "runs", ("run", "optimizer", "dp", "tp", "pp", "world_size"))
    grids: dict[tuple[int, int, int], list[int]] = {}
    for i, (_, r) in enumerate(runs.iterrows()):
        grids.setdefault(grid_of(r), []).append(i)
    out = [(g, _muon_first(runs.iloc[idx])) for g, idx in grids.items()]
    return sorted(out, key=lambda gr: grid_order(gr[0], int(metric(gr[1].iloc[0], "world_size"))))


def _muon_first(rows: pd.DataFrame) -> pd.DataFrame:
    """Muon's runs first; within an optimizer the pipeline group's (the grids compared with each other), then by id."""
    other = rows["group"].astype(str) != PIPELINE_GROUP if "group" in rows.columns else False
    ordered = rows.assign(_other=other).sort_values(["optimizer", "_other", "run"], ascending=[False, True, True], kind="stable")
    return ordered.drop(columns="_other")


def run_label(run: pd.Series, runs: pd.DataFrame) -> str:
    """The run's grid (``PP4``), with its group when another run of its optimizer among ``runs`` has the same grid
    (``PP4 (pipeline_bubble)``): two runs never share a label."""
    grid = grid_of(run)
    twins = runs[(runs["optimizer"] == run["optimizer"]) & (runs["run"] != run["run"])]
    shared = any(grid_of(other) == grid for _, other in twins.iterrows())
    return f"{style.grid_label(*grid)} ({run['group']})" if shared else style.grid_label(*grid)


def _one(rows: pd.DataFrame, optimizer: str) -> pd.Series | None:
    picked = rows[rows["optimizer"] == optimizer]
    return picked.iloc[0] if len(picked) else None


def _timed(row: pd.Series | None, column: str) -> str:
    return "not measured" if row is None or is_missing(row.get(column)) else ms(row[column], f"runs.{column}")


def grid_rows(data: ReportData, runs: pd.DataFrame) -> list[list[str]]:
    """Per grid: its ranks and micro-batches, both optimizers' steps and optimizer steps timed without the profiler,
    the ratio of the two steps shown (comparisons.timed_step_ms_ratio; its step_ms_ratio is of the profiled steps,
    which the profiler slows unevenly from grid to grid) and Muon's bubble (the mean over ranks)."""
    comp = data.comparisons
    rows = []
    for grid, g in pipeline_grids(runs):
        muon, adamw = _one(g, "muon"), _one(g, "adamw")
        pair = comp[comp["muon_run"] == muon["run"]] if muon is not None else comp.iloc[0:0]
        step_ratio = comparison_ratio(pair.iloc[0], "timed_step_ms_ratio") if len(pair) else "not measured"
        bubble = NOT_A_PIPELINE if grid[2] <= 1 else _timed(muon, "timed_bubble_ms")
        first = g.iloc[0]
        rows.append(
            [
                style.grid_label(*grid),
                str(int(metric(first, "world_size"))),
                str(int(metric(first, "micro_batches"))),
                _timed(muon, "timed_step_ms"),
                _timed(adamw, "timed_step_ms"),
                _timed(muon, "timed_optimizer_ms"),
                _timed(adamw, "timed_optimizer_ms"),
                step_ratio,
                bubble,
            ]
        )
    return rows


def holds(row: pd.Series) -> str:
    """``2 blocks + embedding``, ``1 block``, ``1 block + head``: what a stage holds (stages.blocks, stages.holds)."""
    blocks = int(metric(row, "blocks", "stages"))
    extra = "" if is_missing(row.get("holds")) else str(row["holds"]).strip()
    said = counted(blocks, "block")
    return f"{said} + {extra}" if extra else said


def muon_stages(stages: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The stages table's rows of the Muon pipelines among ``runs``, in the grids' order, then by stage."""
    require_columns(stages, "stages", ("run", "optimizer", "stage", "blocks", "holds", "timed_fwd_bwd_ms"))
    in_order = [str(run) for _, g in pipeline_grids(runs) for run in g["run"]]  # grid by grid, each run's stages together
    order = {run: i for i, run in enumerate(in_order)}
    rows = stages[(stages["optimizer"] == "muon") & stages["run"].isin(list(order))]
    return rows.assign(_order=rows["run"].map(order)).sort_values(["_order", "stage"]).drop(columns="_order")


def stage_rows(data: ReportData, runs: pd.DataFrame) -> list[list[str]]:
    """Per stage of each Muon pipeline, timed without the profiler: forward+backward (transfers and flush in it),
    the bubble inside it, the optimizer step after it, and their ratio."""
    by_run = {str(r["run"]): r for _, r in runs.iterrows()}
    out = []
    for _, s in muon_stages(data.stages, runs).iterrows():
        what = f"stages.* of {s['run']} stage {s['stage']}"
        out.append(
            [
                run_label(by_run[str(s["run"])], runs),
                str(int(metric(s, "stage", "stages"))),
                holds(s),
                ms(s["timed_fwd_bwd_ms"], what),
                ms(s["timed_bubble_ms"], what),
                ms(s["timed_optimizer_ms"], what),
                ratio(s["bubble_over_optimizer"], what),
            ]
        )
    return out


def claim_lines(data: ReportData) -> list[dict[str, Any]]:
    """Each pipeline claim, and per hardware profile its measurement, verdict, why it is not compared (in a few
    words, from claims.outside_conditions) and its explanation."""
    claims = data.claims
    profiles = list(dict.fromkeys([data.described_profile, *claims["profile"].astype(str)]))
    out = []
    for cid in PIPELINE_CLAIMS:
        rows = claims[claims["claim_id"] == cid]
        if rows.empty:
            continue
        per_profile = []
        for profile in profiles:
            mine = rows_of_profile(rows, profile)
            if mine.empty:
                continue
            c = mine.iloc[0]
            verdict = report_verdict(c, data.runs)
            explanation = "" if is_missing(c["explanation"]) else str(c["explanation"])
            reasons = [r for r, _ in not_comparable_reasons(mine)]
            value = claim_measured(c)
            if reasons:
                why = f"{verdict}: {'; '.join(reasons)}. Measured here: {explanation}"
            else:
                why = f"{verdict}. {explanation}" if value != verdict else explanation
            per_profile.append(
                {"profile": profile, "said": f"{profile}: {why}" if value == verdict else f"{profile}: {value}, {why}"}
            )
        out.append({"id": cid, "claim": str(rows.iloc[0]["claim"]), "profiles": per_profile})
    return out


def _cores(data: ReportData, run: str) -> int | None:
    """The host's cores a run shared (environment.host_cpu_cores), None when it was not recorded."""
    value = data.environment_of(run).get("host_cpu_cores")
    return int(float(value)) if value else None


def _sequences_per_micro_batch(run: pd.Series) -> int:
    """Sequences in one micro-batch: tokens per step / (DP x micro-batches x sequence length)."""
    replicas = int(metric(run, "dp")) * int(metric(run, "micro_batches")) * int(metric(run, "seq_len"))
    return int(metric(run, "tokens_per_step")) // replicas


def intro(data: ReportData, runs: pd.DataFrame) -> str:
    """What was run: the grids, equal tokens per step in micro-batches of one sequence, rounds, the schedule."""
    grids = pipeline_grids(runs)
    labels = [f"{style.grid_label(*g)} ({int(metric(rs.iloc[0], 'world_size'))} ranks)" for g, rs in grids]
    tokens = sorted({int(metric(r, "tokens_per_step")) for _, r in runs.iterrows()})
    per_micro = sorted({_sequences_per_micro_batch(r) for _, r in runs.iterrows()})
    seq = sorted({int(metric(r, "seq_len")) for _, r in runs.iterrows()})
    micro = sorted({int(metric(r, "micro_batches")) for _, r in runs.iterrows()})
    optimizers = " and ".join(style.OPTIMIZER_LABELS[o] for o in ("muon", "adamw") if (runs["optimizer"] == o).any())
    sequences = "one sequence" if per_micro == [1] else f"{', '.join(map(str, per_micro))} sequences"
    return (
        f"The pipeline runs: {counted_by_group(runs)}, on {len(grids)} grids for {optimizers}: {', '.join(labels)}. Every grid "
        f"trains {', '.join(f'{t:,}' for t in tokens)} tokens per step in micro-batches of {sequences} of "
        f"{', '.join(map(str, seq))} tokens ({'–'.join(map(str, (micro[0], micro[-1]))) if len(micro) > 1 else micro[0]} "
        f"micro-batches per step and DP replica), so grids with and without stages run the same matmul shapes; "
        f"these runs are compared only with each other. {_rounds_said(runs)} The stages run the 1F1B schedule (PipeDream-Flush: "
        "warm-up forwards, one forward and one backward in turn, cool-down backwards, then a flush of the sends), and "
        "each stage's ZeRO-1 optimizer (Distributed Muon or AdamW) shards the stage's own parameters over its DP group "
        "and steps after the flush."
    )


def _rounds_said(runs: pd.DataFrame) -> str:
    """The interleaved rounds the runs were timed in, group by group where there are several (each group is recorded by
    its own command: its rounds interleave its own runs only)."""
    groups = runs.groupby(runs["group"].astype(str)) if "group" in runs.columns else [("", runs)]
    by_group = {group: sorted({int(metric(r, "rounds")) for _, r in rows.iterrows()}) for group, rows in groups}
    if len(by_group) == 1:
        (rounds,) = by_group.values()
        return f"Each was timed without the profiler in {', '.join(map(str, rounds))} interleaved rounds."
    said = ", ".join(f"the {group} group in {', '.join(map(str, rounds))}" for group, rounds in by_group.items())
    return f"They were timed without the profiler in interleaved rounds, each group's runs together: {said}."


def meaning(data: ReportData, runs: pd.DataFrame) -> list[str]:
    """What these runs say and what they do not, with the machine's numbers."""
    four = runs[runs["world_size"] == runs["world_size"].min()]
    cores = _cores(data, str(four.iloc[0]["run"]))
    share = f"{cores} cores" if cores else "the host's cores"
    ranks = int(four["world_size"].iloc[0])
    shared = cores is not None and set(four["device"].astype(str)) == {"cpu"} and ranks > cores  # ranks take turns
    lines = []
    if shared:
        lines.append(
            f"On {share} with {ranks} ranks, wall time follows the work summed over ranks: a rank blocked in the bubble "
            "gives its core to another rank. So a pipeline is fast here when its ranks do little work (each stage "
            "orthogonalizes only its own matrices), not because its bubble is small; on GPUs, one rank per device, the "
            "bubble is idle device time."
        )
    lines += [
        "The bubble as measured is the time a stage blocks on its neighbours (its receives and its flush), warm-up and "
        "cool-down included. It is an upper bound on what could hide the optimizer step: only the idle time after a "
        "stage's last backward, once its gradients are complete, could hold that stage's optimizer step.",
    ]
    for (dp, tp, pp), g in pipeline_grids(runs):
        world = int(metric(g.iloc[0], "world_size"))
        if world > int(four["world_size"].iloc[0]):
            per_core = f", {world // cores} ranks per core" if cores and world % cores == 0 else ""
            lines.append(
                f"{style.grid_label(dp, tp, pp)} runs {world} ranks on the same {share}{per_core}: it is shown, but not "
                "compared with the 4-rank grids."
            )
    return lines


def pipeline_section(data: ReportData) -> dict[str, Any]:
    """The section's context; ``present`` False (and only ``none``, one sentence) without a pipeline run."""
    runs = pipeline_runs(data.runs) if "pp" in data.runs.columns else data.runs.iloc[0:0]
    if runs.empty:
        return {"present": False, "none": NO_PIPELINE}
    return {
        "present": True,
        "intro": intro(data, runs),
        "grid_header": GRID_HEADER,
        "grid_rows": grid_rows(data, runs),
        "stage_header": STAGE_HEADER,
        "stage_rows": stage_rows(data, runs),
        "claims": claim_lines(data),
        "meaning": meaning(data, runs),
        "costmodel": pipeline_costmodel(data),
    }


# ---------------------------------------------------------------- the cost model


SCALE_OUT_HEADER = [
    "GPUs",
    "DP",
    "micro-batches",
    "Muon step",
    "AdamW step",
    "Muon optimizer share (slowest stage)",
    "Muon optimizer not hidden (slowest stage's)",
    "Muon / AdamW - 1",
    "bubble (ideal)",
]


VALIDATION_HEADER = [
    "run",
    "measured step",
    "predicted step",
    "error",
    "measured optimizer (mean over ranks)",
    "predicted optimizer (mean over ranks)",
    "error",
    "predicted optimizer not hidden (to the slowest stage's)",
]


def validation_rows(predictions: pd.DataFrame) -> list[list[str]]:
    """The cost model against each recorded pipeline run (``predictions`` rows with ``pp > 1``), as priced."""
    if predictions.empty or "pp" not in predictions.columns:
        return []
    rows = predictions[predictions["pp"].fillna(1).astype("int64") > 1].sort_values("run")
    names = [str(run).rsplit("/", 1)[-1] for run in rows["run"]]
    groups = [str(run).rsplit("/", 2)[-2] if str(run).count("/") >= 2 else "" for run in rows["run"]]
    labels = [f"{n} ({g})" if names.count(n) > 1 and g else n for n, g in zip(names, groups)]  # two groups' PP4
    return [
        [
            label,
            ms(r["measured_step_ms"]),
            ms(r["predicted_step_ms"]),
            percent(r["step_rel_error"], signed=True),
            ms(r["measured_optimizer_ms"]),
            ms(r["predicted_optimizer_ms"]),
            percent(r["optimizer_rel_error"], signed=True),
            "–" if pd.isna(r.get("predicted_optimizer_exposed_ms")) else ms(r["predicted_optimizer_exposed_ms"]),
        ]
        for label, (_, r) in zip(labels, rows.iterrows())
    ]


def scale_out_rows(table: pd.DataFrame) -> list[list[str]]:
    """One row per GPU count: Muon's and AdamW's predicted step, Muon's optimizer share and extra, the bubble."""
    if table.empty:
        return []
    rows = []
    for gpus, at in table.sort_values("gpus").groupby("gpus", sort=True):
        muon, adamw = (at[at["optimizer"] == name] for name in ("muon", "adamw"))
        if muon.empty or adamw.empty:
            continue
        m, a = muon.iloc[0], adamw.iloc[0]
        rows.append(
            [
                f"{int(gpus):,}",
                f"{int(m['dp']):,}",
                f"{int(m['micro_batches']):,}",
                ms(m["step_ms"]),
                ms(a["step_ms"]),
                percent(m["optimizer_share"]),
                _not_hidden(m),
                percent(m["muon_extra"], signed=True),
                f"{percent(m['bubble_fraction'])} ({percent(m['ideal_bubble_fraction'])})",
            ]
        )
    return rows


def _not_hidden(row: pd.Series) -> str:
    """``81.2 ms (83.4 ms)``: the optimizer time the step pays beyond its pipeline, and the slowest stage's step
    (a table written before ``optimizer_exposed_ms``: the latter alone)."""
    slowest = ms(row["stage_optimizer_max_ms"])
    exposed = row.get("optimizer_exposed_ms")
    return slowest if exposed is None or pd.isna(exposed) else f"{ms(exposed)} ({slowest})"


def pipeline_costmodel(data: ReportData) -> dict[str, Any]:
    """The cost-model paragraph's context: ``present`` False when the tables hold neither part."""
    table = data.pipeline_scale_out
    rows = scale_out_rows(table)
    validation = validation_rows(data.predictions)
    if not rows and not validation:
        return {"present": False}
    first = table.iloc[0] if len(table) else None
    model = model_said(first["model"], data.regime_model) if first is not None else ""
    note = f", {SHAPE_NOTES[str(first['model'])]}," if first is not None and str(first["model"]) in SHAPE_NOTES else ""
    setting = (
        f"{model[:1].upper()}{model[1:]}{note} on {first['machine']} as TP{int(first['tp'])} x "
        f"PP{int(first['pp'])} x DP, "
        f"{int(first['tokens_per_step']):,} tokens per step in micro-batches of one sequence, {first['model_dtype']}, "
        "1F1B (the cost model, pipeline_scale_out table; docs/method.md#pipeline-parallelism): as DP grows at a fixed "
        "batch, each replica has fewer micro-batches, the bubble grows, and Muon's optimizer step weighs more. Steps "
        "run back to back, each stage's optimizer step after its own drain: the optimizer time not hidden is what the "
        "step pays beyond its pipeline."
        if first is not None
        else None
    )
    return {
        "present": True,
        "validation_header": VALIDATION_HEADER,
        "validation_rows": validation,
        "setting": setting,
        "header": SCALE_OUT_HEADER,
        "rows": rows,
    }


# ---------------------------------------------------------------- the figure


PIPELINE_FIGURES = ("pipeline", "pipeline_timeline")
PIPELINE_CAPTIONS = {
    "pipeline": "The pipeline runs, steps timed without the profiler: Muon's and AdamW's step per DP × TP × PP grid "
    "at equal tokens per step (left; the grid of more ranks below the dashed line, not compared), and each Muon "
    "stage's step taken apart: forward+backward less the bubble, the bubble (time blocked on its neighbours), "
    "the optimizer step (right; the pipeline_bubble group's PP4, recorded again with each stage's last backward "
    "stamped, beside it, labelled).",
}
PIPELINE_CAPTIONS["pipeline_timeline"] = (
    "One profiled step of the deepest 4-rank Muon pipeline, stage by stage on one clock: the 1F1B forwards and "
    "backwards, the bubble (grey: blocked in a receive or the flush), the sends, then each stage's optimizer step after "
    "its flush (right: the optimizer, zoomed)."
)
COMPUTE_COLOR = style.PHASE_COLORS[style.COMPUTE]
BUBBLE_COLOR = style.PHASE_COLORS[style.IDLE]
OPTIMIZER_COLOR = style.PHASE_COLORS[OPTIMIZER]


def deepest_muon_pipeline(runs: pd.DataFrame) -> str:
    """The run the pipeline timeline draws: the Muon pipeline with most stages among the fewest ranks (PP4)."""
    muon = pipeline_runs(runs)
    muon = muon[(muon["optimizer"] == "muon") & (muon["pp"].fillna(1).astype("int64") > 1)]
    if muon.empty:
        raise ValueError("no Muon pipeline run to draw one step of (muon-repro bench pipeline)")
    ranked = muon.assign(_w=muon["world_size"].astype("int64"), _pp=-muon["pp"].astype("int64"))
    return str(ranked.sort_values(["_w", "_pp", "run"]).iloc[0]["run"])


def has_pipeline(runs: pd.DataFrame) -> bool:
    """Whether the runs hold a pipeline group to draw (tables older than ``runs.pp`` hold none)."""
    return "pp" in runs.columns and not pipeline_runs(runs).empty


def _steps_panel(ax, runs: pd.DataFrame) -> None:
    """Grouped horizontal bars: Muon's and AdamW's timed step per grid, the 8-rank grid below a dashed line."""
    grids = pipeline_grids(runs)
    smallest = min(int(g.iloc[0]["world_size"]) for _, g in grids)
    labels, y, separator = [], [], None
    for i, (grid, g) in enumerate(grids):
        world = int(g.iloc[0]["world_size"])
        yi = len(grids) - 1 - i
        if world > smallest and separator is None:
            separator = yi + 0.5
        labels.append(style.grid_label(*grid) + (f"\n({world} ranks)" if world > smallest else ""))
        y.append(yi)
        for j, opt in enumerate(("muon", "adamw")):
            rows = g[g["optimizer"] == opt]
            if rows.empty:
                continue
            v = fmetric(rows.iloc[0], "timed_step_ms")
            yy = yi + (0.2 if j == 0 else -0.2)
            faded = world > smallest
            ax.barh(yy, v, 0.38, color=style.OPTIMIZER_COLORS[opt], alpha=0.45 if faded else 1.0)
            ax.text(v, yy, f" {v:.0f}", va="center", fontsize=style.SMALL_PT)
    if separator is not None:
        ax.axhline(separator, color="#555555", linestyle="--", linewidth=0.8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("step time (ms), median over rounds")
    ax.set_xlim(0, ax.get_xlim()[1] * 1.2)  # the value labels right of the longest bar stay inside the panel
    ax.set_title("step per grid, equal tokens per step", fontsize=9)
    ax.grid(axis="y", visible=False)


def _stages_panel(ax, data_stages: pd.DataFrame, runs: pd.DataFrame) -> None:
    """Per Muon stage: forward+backward less the bubble, the bubble, then the optimizer step, stacked."""
    rows = muon_stages(data_stages, runs)
    by_run = {str(r["run"]): r for _, r in runs.iterrows()}
    y = np.arange(len(rows))[::-1]
    labels = []
    smallest = min(int(r["world_size"]) for r in by_run.values())
    for yi, (_, s) in zip(y, rows.iterrows()):
        if int(by_run[str(s["run"])]["world_size"]) > smallest and int(s["stage"]) == 0:
            ax.axhline(yi + 0.5, color="#555555", linestyle="--", linewidth=0.8)  # the 8-rank grid apart
        fwd_bwd, bubble, opt = (fmetric(s, c, "stages") for c in ("timed_fwd_bwd_ms", "timed_bubble_ms", "timed_optimizer_ms"))
        ax.barh(yi, fwd_bwd - bubble, 0.7, color=COMPUTE_COLOR)
        ax.barh(yi, bubble, 0.7, left=fwd_bwd - bubble, color=BUBBLE_COLOR, hatch="//", edgecolor="white", linewidth=0)
        ax.barh(yi, opt, 0.7, left=fwd_bwd, color=OPTIMIZER_COLOR)
        labels.append(f"{run_label(by_run[str(s['run'])], runs)} stage {int(s['stage'])}")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("time in one step (ms), Muon, median over rounds")
    ax.set_title("each Muon stage: where its step goes", fontsize=9)
    ax.grid(axis="y", visible=False)


@styled
def pipeline(runs: pd.DataFrame, stages: pd.DataFrame, claims: pd.DataFrame, out: str | Path) -> Path:
    """Left: Muon's and AdamW's timed step per pipeline-group grid; right: each Muon stage's compute, bubble and
    optimizer step (``stages``); the takeaway quotes the two pipeline claims (:func:`stated.pipeline`)."""
    require_columns(runs, "runs", ("timed_step_ms", "world_size", "pp"))
    require_columns(stages, "stages", ("timed_fwd_bwd_ms", "timed_bubble_ms", "timed_optimizer_ms"))
    group = pipeline_runs(runs)
    n_stages = len(muon_stages(stages, group))
    # rows tall enough that the two value labels of a grid (Muon above AdamW) stay apart
    fig, axes = new_figure(2.9 + 0.3 * max(n_stages, 2 * len(pipeline_grids(group))) / 2, ncols=2)
    _steps_panel(axes[0], group)
    _stages_panel(axes[1], stages, group)
    handles = [Patch(color=style.OPTIMIZER_COLORS[o], label=f"{style.OPTIMIZER_LABELS[o]} step") for o in ("muon", "adamw")]
    handles += [
        Patch(color=COMPUTE_COLOR, label="forward+backward less the bubble"),
        Patch(facecolor=BUBBLE_COLOR, hatch="//", edgecolor="white", label=style.PHASE_LABELS[BUBBLE]),
        Patch(color=OPTIMIZER_COLOR, label="optimizer step (after the flush)"),
    ]
    bottom = legend_below(fig, handles, ncol=3)
    # a headline within the figure's width: a wider one widens the PNG, and the PDF shrinks its text under 7 pt
    add_title(
        fig,
        "DP × TP × PP: the step per grid, and where each Muon stage's step goes",
        f"Steps timed without the profiler. {stated.pipeline(claims, stated.profile_of(runs)).text}",
        bottom_in=bottom,
    )
    return save_figure(fig, out)
