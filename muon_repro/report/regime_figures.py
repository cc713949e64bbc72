"""The figures of "Where the gains hold, vanish or invert", one function per figure, tables in, path out:

    regime_map     Muon's optimizer share and its extra step time over AdamW against tokens per step,
                   one colour per width: the sweep's measured points (95% intervals) and the cost
                   model's lines for this machine, the original study's ~1.1% and the paper's 3% marked
    closed_form    Newton-Schulz time over forward+backward time, measured, against the closed form
                   (10/3) d_model / T times the ranks that repeat each matrix, and the exact FLOP ratio
    profiles       the cost model on hardware we do not have: Muon's extra step time against tokens per
                   step for the original study's 4 GPUs and one 8-GPU H100 node (the gpu scale's model and the
                   LLaMA-7B-shaped one), and the latter scaled out over H100 nodes

Each draws what the tables (``regimes``, ``regime_model``, ``regime_thresholds``) have and says so when they have
nothing (no sweep recorded). Their captions and the section's text are :mod:`muon_repro.report.regimes_section`'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from muon_repro.claims import PAPER_LATENCY, STUDY_SHARE, claimed_level
from muon_repro.report import style
from muon_repro.report.formatting import count, percent
from muon_repro.report.plotting import (
    add_legend,
    add_title,
    legend_below,
    new_figure,
    plain_log_ticks,
    save_figure,
    show_no_data,
    styled,
)
from muon_repro.rundir import RENAMED_MACHINES

STUDY_MODEL = "gpu-scale-369m"  # muon_repro.costmodel.records.STUDY_MODEL: "the gpu scale's model" in the captions

REGIME_FIGURES = ("regime_map", "closed_form", "profiles")
LEVEL_LINES = {STUDY_SHARE: ":", PAPER_LATENCY: "--"}  # dotted: the original study's share; dashed: the paper's latency
# Okabe-Ito without its blue and vermillion: those mean AdamW and Muon in every figure, and these points are all Muon's
WIDTH_COLORS = ("#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
# Machines take WIDTH_COLORS too, not the optimizers' vermillion and blue: every line of profiles is Muon's extra
MACHINE_STYLES = {
    "4xRTXA4000-pcie-nccl": (WIDTH_COLORS[1], "Wei's study: 4x RTX A4000, PCIe Gen4 x4"),
    "h100-8x-nvlink": (WIDTH_COLORS[0], "8x H100, NVLink"),
}
MODEL_LINES = {STUDY_MODEL: "-", "7b": "--"}
NO_SWEEP = "no regime sweep in these tables: run `muon-repro regimes`, then `muon-repro analyze`"


def machine_style(machine: object) -> tuple[str, str]:
    """A shipped profile's colour and label (tables written before a profile was renamed: by its new name)."""
    name = RENAMED_MACHINES.get(str(machine), str(machine))
    return MACHINE_STYLES.get(name, ("#444444", name))


def draw_claimed_level(ax: Axes, metric: str, labels: bool = True, color: str = "#555555") -> None:
    """The claimed level of ``metric`` as a horizontal line in percent: the original study's ~1.1% (dotted) on an
    optimizer share, the paper's 3% (dashed) on Muon's extra step time; never one quantity's claim on another's axis."""
    level = claimed_level(metric)
    ax.axhline(100 * level.value, color=color, linestyle=LEVEL_LINES[level], linewidth=0.9)
    if labels:
        ax.annotate(
            f" {level.label}",
            (1.0, 100 * level.value),
            xycoords=("axes fraction", "data"),
            fontsize=style.SMALL_PT,
            va="center",
            ha="left",
            color=color,
        )


def main_axis(regimes: pd.DataFrame) -> pd.DataFrame:
    """The sweep's main axis: Muon at DP2·TP2, contiguous layout (the held-out validation points left out)."""
    r = regimes
    main = (r["optimizer"] == "muon") & (r["dp"] == 2) & (r["tp"] == 2) & (r["layout"] == "contiguous")
    if "validation_set" in r.columns:
        main &= r["validation_set"].isna()
    return r[main].sort_values("tokens_per_step")


@styled
def regime_map(regimes: pd.DataFrame, model: pd.DataFrame, out: str | Path) -> Path:
    """Optimizer share (left) and Muon's extra step time (right) against tokens per step, per width."""
    fig, axes = new_figure(3.7, 2)
    sweep = main_axis(regimes)
    lines = model[model["kind"] == "this_machine"]
    if sweep.empty:
        for ax in axes:
            show_no_data(ax, NO_SWEEP)
        add_title(fig, "Where Muon's optimizer step stops mattering", "no sweep recorded")
        return save_figure(fig, out)
    widths = sorted(int(w) for w in sweep["d_model"].unique())
    handles = []
    for i, width in enumerate(widths):
        color = WIDTH_COLORS[i % len(WIDTH_COLORS)]
        points = sweep[sweep["d_model"] == width]
        line = lines[lines["d_model"] == width].sort_values("tokens_per_step")
        for ax, col in zip(axes, ("optimizer_share", "muon_extra")):
            y = 100 * points[col].astype(float).to_numpy()
            lo = 100 * points[f"{col}_lo"].astype(float).to_numpy()
            hi = 100 * points[f"{col}_hi"].astype(float).to_numpy()
            ax.errorbar(
                points["tokens_per_step"], y, yerr=[y - lo, hi - y], fmt="o", color=color, markersize=4, capsize=2, linewidth=1
            )
            if not line.empty:
                ax.plot(line["tokens_per_step"], 100 * line[col].astype(float), color=color, linewidth=1.2, alpha=0.8)
        handles.append(Line2D([], [], color=color, marker="o", label=f"d_model {width}"))
    handles += [
        Line2D([], [], color="#444444", marker="o", linestyle="none", label="measured (95% interval)"),
        Line2D([], [], color="#444444", label="cost model, this machine"),
    ]
    for ax, label in zip(axes, ("Muon's optimizer step / step (%)", "Muon step / AdamW step - 1 (%)")):
        ax.set_xscale("log", base=2)
        plain_log_ticks(ax, "x", tokens=True)
        ax.set_xlabel("tokens per step (global)")
        ax.set_ylabel(label)
    axes[0].set_yscale("log")
    plain_log_ticks(axes[0], "y")
    axes[1].axhline(0, color="black", linewidth=0.6)
    top = 100 * float(sweep["muon_extra_hi"].astype(float).max())
    axes[1].set_ylim(-60, min(max(top, 20.0), 250.0) * 1.05)  # small steps' wide intervals would hide the large steps' points
    draw_claimed_level(axes[0], "optimizer_share")
    draw_claimed_level(axes[1], "muon_extra")
    bottom = legend_below(fig, handles, ncol=len(handles))
    largest = sweep[sweep["tokens_per_step"] == sweep["tokens_per_step"].max()].sort_values("d_model")
    share = ", ".join(
        f"{percent(s, 'regimes.optimizer_share')} at d {int(d)}" for d, s in zip(largest["d_model"], largest["optimizer_share"])
    )
    below = (largest["optimizer_share_hi"].astype(float) < STUDY_SHARE.value).sum()
    where = "under" if below == len(largest) else ("above" if below == 0 else "around")
    add_title(
        fig,
        "Where Muon's optimizer step stops mattering: DP2·TP2, gloo on this machine",
        f"Newton-Schulz's FLOPs do not grow with the batch, forward+backward's do. At the sweep's largest step, "
        f"{int(largest['tokens_per_step'].iloc[0]):,} tokens: {share}, {where} the {STUDY_SHARE.percent} of Wei's study.",
        bottom_in=bottom,
    )
    return save_figure(fig, out)


@styled
def closed_form(regimes: pd.DataFrame, out: str | Path) -> Path:
    """Newton-Schulz time over forward+backward time against T / d_model, measured and by the closed form."""
    fig, (ax,) = new_figure(3.2)
    muon = regimes[(regimes["optimizer"] == "muon") & regimes["adamw_run"].notna()]
    if muon.empty:
        show_no_data(ax, NO_SWEEP)
        add_title(fig, "Newton-Schulz against forward+backward", "no sweep recorded")
        return save_figure(fig, out)
    measured = pd.to_numeric(muon["ns_time_ratio"], errors="coerce").to_numpy(float)  # the table's, not recomputed
    x = muon["tokens_per_step"].to_numpy(float) / muon["d_model"].to_numpy(float)
    multiplier = muon["closed_form_ratio"].to_numpy(float) * x / (10 / 3)  # tp, times dp for the bucketed layout
    labels = [f"DP{int(d)}·TP{int(t)} {str(lay).replace('_', '-')}" for d, t, lay in zip(muon["dp"], muon["tp"], muon["layout"])]
    kinds = sorted(set(zip(multiplier.round(3), labels)))
    markers = dict(zip(sorted(set(labels)), "osD^v<>p"))
    for i, m in enumerate(sorted(set(multiplier.round(3)))):
        color = WIDTH_COLORS[i % len(WIDTH_COLORS)]
        grid = np.geomspace(x.min() / 1.5, x.max() * 1.5, 50)
        ax.plot(grid, m * (10 / 3) / grid, color=color, linewidth=1.2, label=f"closed form x{m:g}: (10/3)·{m:g}·d/T")
        for lab in sorted({lab for mm, lab in kinds if mm == m}):
            sel = (multiplier.round(3) == m) & (np.array(labels) == lab)
            ax.scatter(
                x[sel], measured[sel], color=color, marker=markers[lab], s=22, zorder=3, label=f"measured time ratio, {lab}"
            )
            flop_ratio = muon["flop_ratio"].to_numpy(float)[sel]
            ax.scatter(x[sel], flop_ratio, color=color, marker=markers[lab], s=22, facecolors="none", zorder=3)
    ax.scatter([], [], color="#444444", facecolors="none", label="exact FLOP ratio (busiest rank)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax, "x")
    plain_log_ticks(ax, "y")
    ax.set_xlabel("tokens per step / d_model")
    ax.set_ylabel("Newton-Schulz / forward+backward")
    add_legend(ax, ax.get_legend_handles_labels()[0], fontsize=style.SMALL_PT)
    add_title(
        fig,
        "Newton-Schulz against forward+backward: measured and the closed form",
        "Per matrix, NS/(fwd+bwd) ~ (20m + 10m²/n)/(6T) ~ (10/3)·d/T; every TP rank repeats the full matrix (x tp), "
        "the bucketed layout every DP rank too (x dp). "
        "Measured (regimes.ns_time_ratio): Muon's optimizer time beyond AdamW's over AdamW's step outside its "
        "optimizer (forward, backward and the rest).",
    )
    return save_figure(fig, out)


@styled
def profiles(model: pd.DataFrame, thresholds: pd.DataFrame, out: str | Path) -> Path:
    """Muon's predicted extra step time on hardware we do not have, and the LLaMA-7B-shaped model scaled out."""
    fig, axes = new_figure(5.4, 2)  # a four-line takeaway and a six-line legend leave the panels room
    grid = model[model["kind"] == "profile"]
    scale = model[model["kind"] == "scale_out"].sort_values("gpus")
    if grid.empty and scale.empty:
        for ax in axes:
            show_no_data(ax, "no cost-model lines in these tables: run `muon-repro regimes`, then `muon-repro analyze`")
        add_title(fig, "The cost model on other hardware", "no lines")
        return save_figure(fig, out)
    ax = axes[0]
    for (machine, name), line in grid.groupby(["machine", "model"], sort=True):
        color, label = machine_style(machine)
        line = line.sort_values("tokens_per_step")
        ax.plot(
            line["tokens_per_step"],
            100 * line["muon_extra"].astype(float),
            color=color,
            linestyle=MODEL_LINES.get(str(name), "-."),
            label=f"{label}, {name}",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain_log_ticks(ax, "x", tokens=True)
    plain_log_ticks(ax, "y")
    ax.set_xlabel("tokens per step (global)")
    ax.set_ylabel("Muon step / AdamW step - 1 (%)")
    draw_claimed_level(ax, "muon_extra")
    ax = axes[1]
    if not scale.empty:
        for col, color, label in (
            ("muon_extra", style.OPTIMIZER_COLORS["muon"], "Muon step / AdamW step - 1"),
            ("optimizer_share", "#444444", "Muon's optimizer share"),
        ):
            ax.plot(scale["gpus"], 100 * scale[col].astype(float), marker="o", color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(scale["gpus"].astype(int), [str(g) for g in scale["gpus"].astype(int)])
        ax.set_xlabel(f"H100 GPUs (TP{int(scale['tp'].iloc[0])} in a node, DP across 400 Gb/s IB)")
        ax.set_ylabel("predicted (%)")
        draw_claimed_level(ax, "muon_extra", color=style.OPTIMIZER_COLORS["muon"])
        draw_claimed_level(ax, "optimizer_share", color="#444444")
    else:
        show_no_data(ax, "no scale-out lines")
    handles = axes[0].get_legend_handles_labels()[0] + axes[1].get_legend_handles_labels()[0]
    bottom = legend_below(fig, handles, ncol=2)
    at_level = np.isclose(thresholds["level"].astype(float), PAPER_LATENCY.value)
    crossings = thresholds[(thresholds["metric"] == PAPER_LATENCY.metric) & at_level]
    said = "; ".join(f"{machine_style(r.machine)[1]}, {r.model}: {_crossing(r.tokens_per_step)}" for r in crossings.itertuples())
    trend = ""
    if len(scale) > 1:
        first, last = (float(scale["muon_extra"].iloc[k]) for k in (0, -1))
        trend = (
            f" Scale-out at {count(scale['tokens_per_step'].iloc[0], 'regime_model.tokens_per_step')} tokens per step: "
            f"Muon's extra goes from {percent(first)} on {int(scale['gpus'].iloc[0])} GPUs "
            f"to {percent(last)} on {int(scale['gpus'].iloc[-1])}."
        )
    add_title(
        fig,
        "The cost model on hardware we do not have (predictions, bf16 training)",
        f"Muon's extra step time falls to the paper's {PAPER_LATENCY.percent} at: {said}.{trend}",
        bottom_in=bottom,
    )
    return save_figure(fig, out)


def _crossing(value) -> str:
    if value is None or pd.isna(value):
        return "not reached"
    return f"{count(value, 'regime_thresholds.tokens_per_step')} tokens"
