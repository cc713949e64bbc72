"""The figure of "3-D parallelism (DP x TP x PP)": tables in, PNG + SVG path out.

    pipeline   left: per grid of the pipeline group, Muon's and AdamW's step timed without the profiler (the
               8-rank grid set apart); right: per stage of each Muon pipeline, its forward+backward less the
               bubble, the bubble, and the optimizer step after the flush (``stages``), so the bubble sits
               beside the step it could hide

The takeaway quotes the two pipeline claims from ``claims`` (:func:`muon_repro.report.stated.pipeline`).
Drawn only when the tables hold pipeline runs (:func:`has_pipeline`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from muon_repro.phases import BUBBLE, OPTIMIZER
from muon_repro.report import stated, style
from muon_repro.report.data import fmetric, require_columns
from muon_repro.report.pipeline_section import grid_of, muon_stages, pipeline_grids
from muon_repro.report.plotting import add_title, legend_below, new_figure, save_figure, styled
from muon_repro.report.selection import pipeline_runs

PIPELINE_FIGURES = ("pipeline", "pipeline_timeline")
PIPELINE_CAPTIONS = {
    "pipeline": "The pipeline group, steps timed without the profiler: Muon's and AdamW's step per DP × TP × PP grid "
    "at equal tokens per step (left; the grid of more ranks below the dashed line, not compared), and each Muon "
    "stage's step taken apart: forward+backward less the bubble, the bubble (time blocked on its neighbours), "
    "the optimizer step (right).",
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
            ax.text(v, yy, f" {v:.0f}", va="center", fontsize=7)
    if separator is not None:
        ax.axhline(separator, color="#555555", linestyle="--", linewidth=0.8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("step time (ms), median over rounds")
    ax.set_xlim(0, ax.get_xlim()[1] * 1.12)
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
        labels.append(f"{style.grid_label(*grid_of(by_run[str(s['run'])]))} stage {int(s['stage'])}")
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
    fig, axes = new_figure(2.9 + 0.2 * max(n_stages, 2 * len(pipeline_grids(group))) / 2, ncols=2)
    _steps_panel(axes[0], group)
    _stages_panel(axes[1], stages, group)
    handles = [Patch(color=style.OPTIMIZER_COLORS[o], label=f"{style.OPTIMIZER_LABELS[o]} step") for o in ("muon", "adamw")]
    handles += [
        Patch(color=COMPUTE_COLOR, label="forward+backward less the bubble"),
        Patch(facecolor=BUBBLE_COLOR, hatch="//", edgecolor="white", label=style.PHASE_LABELS[BUBBLE]),
        Patch(color=OPTIMIZER_COLOR, label="optimizer step (after the flush)"),
    ]
    bottom = legend_below(fig, handles, ncol=3)
    add_title(
        fig,
        "DP × TP × PP: the step per grid, and where each Muon stage's step goes (timed without the profiler)",
        stated.pipeline(claims, stated.profile_of(runs)).text,
        bottom_in=bottom,
    )
    return save_figure(fig, out)
