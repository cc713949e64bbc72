"""The figure of a profile whose runs ran on one device (a GPU session, docs/gpu.md): Muon against tokens per step.

    single_device  Muon's optimizer share and its extra step time over AdamW against tokens per step on
                   one device: the runs' steps timed without the profiler (median over rounds), and the
                   cost model's line for that device (``regime_model`` kind ``this_machine``), the original
                   study's ~1.1% and the paper's 3% marked

A profile of one device has no DP x TP grid, so the CPU runs' figures (communication, grids, layouts) have
nothing to draw there: :func:`figures_for` says which figures a profile's view draws.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from muon_repro.claims import LEVELS, PAPER_LATENCY, STUDY_SHARE
from muon_repro.report import style
from muon_repro.report.formatting import count, percent
from muon_repro.report.gpu_section import single_device_pairs
from muon_repro.report.plotting import add_legend, add_title, new_figure, plain_log_ticks, save_figure, show_no_data, styled
from muon_repro.report.regime_figures import LEVEL_LINES

GPU_FIGURES = ("single_device",)


def one_device_only(runs: pd.DataFrame) -> bool:
    """Whether every run of these tables ran on one rank (dp=1, tp=1): a single-device profile."""
    return len(runs) > 0 and bool(((runs["dp"] == 1) & (runs["tp"] == 1)).all())


@styled
def single_device(runs: pd.DataFrame, model: pd.DataFrame, out: str | Path) -> Path:
    """Muon's optimizer share and extra step time on one device against tokens per step, measured and predicted."""
    points = single_device_pairs(runs)
    fig, axes = new_figure(2.9, ncols=2)
    if points.empty:
        for ax in axes:
            show_no_data(ax, "no Muon and AdamW pair on one device in these tables")
        add_title(fig, "One device: Muon's overhead against tokens per step", "nothing recorded on one device")
        return save_figure(fig, out)
    line = model[(model["kind"] == "this_machine") & (model["dp"] == 1) & (model["tp"] == 1)] if len(model) else model
    line = line.sort_values("tokens_per_step") if len(line) else line
    panels = (
        ("optimizer_share", "optimizer step / step time", False),
        ("muon_extra", "Muon step / AdamW step - 1", True),
    )
    for ax, (column, label, signed) in zip(axes, panels):
        x = points["tokens_per_step"].to_numpy(float)
        y = points[column].to_numpy(float)
        ax.plot(x, 100 * y, "o", color=style.OPTIMIZER_COLORS["muon"], zorder=3)
        for xi, yi in zip(x, y):
            ax.annotate(percent(yi, signed=signed), (xi, 100 * yi), textcoords="offset points", xytext=(5, 4), fontsize=7)
        if len(line):
            ax.plot(line["tokens_per_step"].astype(float), 100 * line[column].astype(float), "-", color="#444444", lw=1)
        for level in LEVELS:
            ax.axhline(100 * level.value, color="black", lw=0.8, ls=LEVEL_LINES[level])
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_ticks(ax, "y")
        ax.set_xlabel("tokens per step")
        ax.set_ylabel(f"{label} (%)")
        ticks = np.array(sorted(set(x)))
        ax.set_xticks(ticks, [count(t) for t in ticks])
        ax.minorticks_off()
    handles = [
        Line2D([], [], marker="o", ls="", color=style.OPTIMIZER_COLORS["muon"], label="measured (timed steps)"),
        Line2D([], [], ls="-", color="#444444", label="cost model, this device"),
        Line2D([], [], ls=LEVEL_LINES[STUDY_SHARE], color="black", label=STUDY_SHARE.label),
        Line2D([], [], ls=LEVEL_LINES[PAPER_LATENCY], color="black", label=PAPER_LATENCY.label),
    ]
    add_legend(axes[1], handles)
    last = points.iloc[-1]
    add_title(
        fig,
        "One device: Muon's overhead against tokens per step",
        f"At {count(last['tokens_per_step'])} tokens per step Muon's optimizer step is "
        f"{percent(last['optimizer_share'])} of its step, and its step {percent(last['muon_extra'])} longer than "
        "AdamW's; both fall as 1/tokens per step.",
    )
    return save_figure(fig, out)
