"""The convergence figures: the learning-rate sweep's curves, and the PR thread's three panels
(smoothed loss, leading steps, leading ratio). Tables in (``convergence``, ``leading_steps``),
path out; with no convergence run in the tables each says so and names the command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from muon_repro.report import style
from muon_repro.report.plotting import (
    add_title,
    legend_below,
    legend_height,
    legends_under_panels,
    new_figure,
    save_figure,
    show_no_data,
    styled,
)

NO_RUN = "no convergence run in the tables:\nrun `muon-repro converge`, then `muon-repro analyze`"
HEADLINE_ALPHA = 0.05  # the leading_steps table's headline smoothing (analysis.convergence.HEADLINE_ALPHA)


def _empty(headline: str, out: str | Path, ncols: int = 1) -> Path:
    fig, axes = new_figure(2.4, ncols)
    for ax in axes:
        show_no_data(ax, NO_RUN)
    add_title(fig, headline, "the convergence and leading_steps tables are empty")
    return save_figure(fig, out)


@styled
def convergence_sweep(convergence: pd.DataFrame, out: str | Path) -> Path:
    """Validation loss against step for every learning rate (seed 0), one panel per optimizer, the best in bold."""
    headline = "Validation loss over the learning-rate sweep (same schedule, weight decay on every parameter)"
    runs = convergence
    if len(convergence):
        runs = convergence[convergence["sweep"].fillna(False).astype(bool)].dropna(subset=["val_loss"])
    if runs.empty:
        return _empty(headline, out, ncols=2)
    fig, axes = new_figure(3.4, 2, sharey=True)
    finals = []
    for ax, opt in zip(axes, ("muon", "adamw")):
        sub = runs[runs["optimizer"] == opt]
        if sub.empty:
            show_no_data(ax, f"no {style.OPTIMIZER_LABELS[opt]} run")
            continue
        lrs = sorted(sub["lr"].astype(float).unique())
        shades = np.linspace(0.35, 1.0, len(lrs))
        for lr, shade in zip(lrs, shades):
            g = sub[sub["lr"].astype(float) == lr].sort_values("step")
            best = bool(g["best_lr"].fillna(False).iloc[0])
            ax.plot(
                g["step"],
                g["val_loss"].astype(float),
                color=style.OPTIMIZER_COLORS[opt],
                alpha=1.0 if best else 0.25 + 0.4 * float(shade),
                linewidth=2.2 if best else 1.0,
                label=f"lr {lr:g}" + (" (best)" if best else ""),
            )
            if best:
                finals.append(f"{style.OPTIMIZER_LABELS[opt]} {g['val_loss'].astype(float).iloc[-1]:.3f} at lr {lr:g}")
        ax.set_title(style.OPTIMIZER_LABELS[opt], fontsize=9)
        ax.set_xlabel("step")
    axes[0].set_ylabel("validation loss (nats)")
    lo = runs["val_loss"].astype(float).min()
    axes[0].set_ylim(lo - 0.1, min(runs["val_loss"].astype(float).max(), lo + 2.5))
    first = runs.iloc[0]
    entries = max(len(ax.get_legend_handles_labels()[0]) for ax in axes)
    add_title(
        fig,
        headline,
        f"best final validation loss (seed 0), the choice: {', '.join(finals)}; {int(first['steps'])} steps x "
        f"{int(first['tokens_per_step'])} tokens, {int(first['params']):,} parameters, {first['corpus']}",
        bottom_in=legend_height(entries, 3),
    )
    legends_under_panels(fig, axes, ncol=3)
    return save_figure(fig, out)


@styled
def leading_steps(convergence: pd.DataFrame, leading: pd.DataFrame, out: str | Path) -> Path:
    """The PR thread's three panels at the headline smoothing: smoothed training loss of both optimizers at
    their best learning rates, leading steps and leading ratio against the Muon step (one line per seed)."""
    headline = "Muon leading steps: when does AdamW reach Muon's (smoothed) training loss?"
    lead = leading[leading["alpha"].astype(float) == HEADLINE_ALPHA] if len(leading) else leading
    if lead.empty:
        return _empty(headline, out, ncols=3)
    fig, axes = new_figure(3.2, 3)
    seeds = sorted(lead["seed"].astype(int).unique())
    dashes = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]
    for i, seed in enumerate(seeds):
        g = lead[lead["seed"] == seed].sort_values("muon_step")
        ls = dashes[i % len(dashes)]
        axes[0].plot(
            g["muon_step"],
            g["muon_loss_ewm"].astype(float),
            color=style.OPTIMIZER_COLORS["muon"],
            linestyle=ls,
            label=f"Muon, seed {seed}",
        )
        axes[0].plot(
            g["muon_step"],
            g["adamw_loss_ewm"].astype(float),
            color=style.OPTIMIZER_COLORS["adamw"],
            linestyle=ls,
            label=f"AdamW, seed {seed}",
        )
        axes[1].plot(g["muon_step"], g["leading_steps"].astype(float), color="#333333", linestyle=ls, label=f"seed {seed}")
        axes[2].plot(g["muon_step"], g["leading_ratio"].astype(float), color="#333333", linestyle=ls, label=f"seed {seed}")
    lo = lead[["muon_loss_ewm", "adamw_loss_ewm"]].astype(float).min().min()
    axes[0].set_ylim(lo - 0.1, lo + 2.0)
    axes[0].set_ylabel(f"training loss, EWM alpha {HEADLINE_ALPHA:g}")
    axes[1].set_ylabel("AdamW step - Muon step")
    axes[2].set_ylabel("leading ratio")
    for ax in axes:
        ax.set_xlabel("Muon step")
    for ax in axes[1:]:
        ax.axhline(0, color="#999999", linewidth=0.6)
    # The first steps' ratios divide by small step numbers: the axis follows the rest.
    later = lead[lead["muon_step"] > 10]["leading_ratio"].astype(float).to_numpy(dtype=float, na_value=np.nan)
    top = np.nanmax(later) if np.isfinite(later).any() else 1.0
    axes[2].set_ylim(min(-1.0, np.nanmin(later) * 1.1 if np.isfinite(later).any() else -1.0), max(1.0, top * 1.1))
    handles = [Line2D([], [], color=style.OPTIMIZER_COLORS[o], label=style.OPTIMIZER_LABELS[o]) for o in ("muon", "adamw")]
    handles += [
        Line2D([], [], color="#333333", linestyle=dashes[i % len(dashes)], label=f"seed {s}") for i, s in enumerate(seeds)
    ]
    bottom = legend_below(fig, handles, ncol=len(handles))
    ends = []
    for seed in seeds:
        g = lead[lead["seed"] == seed].dropna(subset=["adamw_matching_step"]).sort_values("muon_step")
        if len(g):
            last = g.iloc[-1]
            ends.append(f"seed {seed}: {float(last['leading_ratio']):+.2f} at Muon step {int(last['muon_step'])}")
    first = lead.iloc[0]
    add_title(
        fig,
        headline,
        f"Muon lr {float(first['muon_lr']):g} vs AdamW lr {float(first['adamw_lr']):g} (each its best); "
        f"leading ratio at the last Muon step AdamW reaches: {'; '.join(ends) or 'none'}. "
        "Lines end where AdamW never gets as low.",
        bottom_in=bottom,
    )
    return save_figure(fig, out)
