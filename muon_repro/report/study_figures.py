"""The figure of the original study's own runs: what its published numbers are made of, beside what we measure
per step on the same traces (``study_method`` and ``study_method_parts``, tables in, a path out)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from muon_repro.report.plotting import add_title, legend_below, new_figure, save_figure, styled

STUDY_FIGURES = ("study_numbers",)
STUDY_CAPTIONS = {
    "study_numbers": "The original study's published numbers, rebuilt from its traces by its method, split into the "
    "event categories its sums hold (left: communication, ms over the 5-step trace of rank 0; right: the optimizer, ms), "
    "beside our per-step measure of the same quantity times 5 (black bar).",
}
# Which published numbers each panel shows, top to bottom.
PANELS = (
    ("communication (ms, 5 steps)", ("comm_ms_muon", "comm_ms_adamw", "async_comm_ms_muon", "async_comm_ms_adamw")),
    ("optimizer (ms, 5 steps)", ("optimizer_ms_muon", "optimizer_ms_adamw")),
)
CATEGORY_COLORS = {  # Okabe-Ito, one per Kineto category of the summed events
    "kernel (collective)": "#0072B2",
    "gpu_user_annotation (collective)": "#56B4E9",
    "cpu_op (collective)": "#E69F00",
    "user_annotation (collective)": "#F0E442",
    "gpu_user_annotation (scope)": "#CC79A7",
    "user_annotation (scope)": "#D55E00",
}
STEPS = 5


def wants_study_figures(method: pd.DataFrame) -> bool:
    return not method.empty


@styled
def study_numbers(method: pd.DataFrame, parts: pd.DataFrame, out: str | Path) -> Path:
    """Per panel, one stacked bar per published number (its summed events by category) and our measure x 5."""
    if method.empty:
        raise ValueError("study_numbers: the study_method table is empty (import the study: muon-repro study import)")
    fig, axes = new_figure(3.3, ncols=2)
    by_id = method.set_index("number_id")
    seen: dict[str, str] = {}  # legend label -> colour, in the order drawn
    for ax, (title, ids) in zip(axes, PANELS):
        ids = [i for i in ids if i in by_id.index]
        y = np.arange(len(ids))[::-1] * 1.0
        for yi, number_id in zip(y, ids):
            left = 0.0
            mine = parts[parts["number_id"] == number_id]
            for cat, ms in zip(mine["category"].astype(str), mine["ms"].astype(float)):
                color = CATEGORY_COLORS.get(cat, "#999999")
                seen[cat] = color
                ax.barh(yi + 0.18, ms, left=left, height=0.34, color=color)
                left += ms
            ours = by_id.loc[number_id, "measured_per_step"]
            if pd.notna(ours):
                seen["ours: GPU time per step (study_method.measured_per_step) x 5"] = "black"
                ax.barh(yi - 0.18, STEPS * float(ours), height=0.34, color="black")
            ax.text(left, yi + 0.18, f" {float(by_id.loc[number_id, 'rebuilt']):.2f}", va="center", fontsize=6)
        ax.set_yticks(y, [str(by_id.loc[i, "quantity"]) + f"\n{by_id.loc[i, 'optimizer']}" for i in ids], fontsize=6)
        ax.set_xlabel(title)
        ax.grid(axis="x", linewidth=0.4, alpha=0.5)
    bottom = legend_below(fig, [Patch(facecolor=color, label=label) for label, color in seen.items()], ncol=3)
    add_title(
        fig,
        "The original study's numbers, rebuilt, and what they hold",
        "Its sums count each NCCL kernel twice (the kernel and its GPU annotation) and its optimizer is the CPU launch "
        "time; the GPU time of the same work is the black bar.",
        bottom_in=bottom,
    )
    return save_figure(fig, out)
