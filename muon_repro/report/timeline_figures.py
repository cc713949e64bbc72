"""The report's timeline figure: one step of every rank from the traces (the ``timeline`` table), the
whole step beside a zoom on the optimizer, where Muon's DP gather -> TP gather -> Newton-Schulz -> TP
shard -> DP shard flow lives. Tables in, PNG + SVG path out.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.patches import Patch

from muon_repro.phases import DP_GATHER, NEWTON_SCHULZ, OPTIMIZER, TP_GATHER
from muon_repro.report import derive, profiler_cost, style
from muon_repro.report.data import rows_of
from muon_repro.report.plotting import add_title, new_figure, save_figure, styled
from muon_repro.report.selection import timeline_run, titled


@styled
def timeline(timeline_table: pd.DataFrame, runs: pd.DataFrame, out: str | Path, run: str | None = None) -> Path:
    """Gantt of one step on every rank: phases on the main thread, transfers on the comm threads.

    The run is ``run``, else the one :func:`~muon_repro.report.selection.timeline_run` picks; the
    step is its ``runs.typical_step`` in trial ``runs.typical_trial``. Left: the whole step.
    Right: the optimizer, where the DP gather -> TP gather -> Newton-Schulz -> TP shard -> DP
    shard flow lives (bars narrower than 0.3% of the window are widened to be seen).
    """
    row = timeline_run(runs) if run is None else rows_of(runs, "runs", run).iloc[0]
    trial, step = derive.typical(row)
    tl = derive.one_step(timeline_table, str(row["run"]), step, trial)
    spans, windows_ms = tl.spans, tl.windows
    ranks = sorted(windows_ms["rank"].tolist())
    fig, axes = new_figure(2.6 + 0.55 * len(ranks), ncols=2, gridspec_kw={"width_ratios": [1, 1.4]})
    opt = spans[(spans["lane"] == "coarse") & (spans["phase"] == OPTIMIZER)]
    windows = [(0.0, float(windows_ms["end_ms"].max()))]
    windows.append((float(opt["start_ms"].min()), float(opt["end_ms"].max())) if len(opt) else windows[0])
    lanes = {"coarse": (0.0, 0.3), "fine": (0.32, 0.3), "transfer": (0.64, 0.16)}
    seen: list[str] = []
    for ax, (w0, w1) in zip(axes, windows):
        min_w = 0.003 * max(w1 - w0, 1e-9)
        for i, rank in enumerate(ranks):
            base = len(ranks) - 1 - i
            st = windows_ms[windows_ms["rank"] == rank].iloc[0]
            ax.plot([st["start_ms"], st["end_ms"]], [base - 0.06] * 2, color="black", linewidth=0.8)
            for lane, (off, h) in lanes.items():
                s = spans[(spans["rank"] == rank) & (spans["lane"] == lane)].sort_values("start_ms")
                if lane == "coarse":
                    s = s[s["phase"] != OPTIMIZER] if ax is axes[1] else s
                for phase, a, b in zip(s["phase"], s["start_ms"], s["end_ms"]):
                    if b < w0 or a > w1:
                        continue
                    ax.broken_barh(
                        [(a, max(b - a, min_w))], (base + off, h), color=style.PHASE_COLORS.get(phase, "#AAAAAA"), linewidth=0
                    )
                    key = style.TIMELINE_LEGEND_OF.get(phase, phase)
                    if key not in seen:
                        seen.append(key)
        ax.set_xlim(w0 - 0.01 * (w1 - w0), w1 + 0.01 * (w1 - w0))
        ax.set_ylim(-0.2, len(ranks))
        ax.set_yticks([len(ranks) - 1 - i + 0.4 for i in range(len(ranks))], [_rank_label(row, r) for r in ranks])
        ax.set_xlabel("time (ms)")
        ax.grid(axis="y", visible=False)
    axes[0].set_title(f"whole step (trial {tl.trial}, ProfilerStep#{tl.step})", fontsize=9)
    axes[1].set_title("zoom: the optimizer step", fontsize=9)
    axes[1].tick_params(labelleft=False)
    order = [p for p in (*style.TIMELINE_COARSE, *style.TIMELINE_FINE, *style.TIMELINE_PIPELINE, style.TRANSFER) if p in seen]
    fig.legend(
        handles=[Patch(color=style.PHASE_COLORS[p], label=style.PHASE_LABELS[p]) for p in order],
        loc="lower center",
        ncol=4,
        bbox_to_anchor=(0.5, 0.0),
    )
    note = "" if tl.aligned else " (ranks not aligned: a trace had no baseTimeNanoseconds)"
    add_title(
        fig,
        f"One step of every rank: {profiler_cost.marked([titled(row)], row.to_frame().T)[0]}",
        _timeline_takeaway(tl) + note + profiler_cost.footnote(row.to_frame().T),
        bottom_in=0.19 * -(-len(order) // 4) + 0.1,
    )
    return save_figure(fig, out)


def _rank_label(run: pd.Series, rank: int) -> str:
    """``rank 3``; on a pipeline run ``stage 1 (rank 3)`` (rank = stage * dp * tp + ..., docs/pipeline.md)."""
    pp = run.get("pp")
    if pp is None or pd.isna(pp) or int(pp) <= 1:
        return f"rank {rank}"
    return f"stage {rank // (int(run['dp']) * int(run['tp']))} (rank {rank})"


def _timeline_takeaway(tl: derive.OneStep) -> str:
    """Per-rank spread of the phases that set the optimizer's pace (lane 'fine' and 'coarse')."""
    s = tl.spans.assign(ms=tl.spans["end_ms"] - tl.spans["start_ms"])
    per_rank = s[s["lane"].isin(("coarse", "fine"))].groupby(["phase", "rank"])["ms"].sum().unstack(fill_value=0.0)
    parts = []
    for phase in (NEWTON_SCHULZ, DP_GATHER, TP_GATHER, OPTIMIZER):
        if phase in per_rank.index and per_rank.loc[phase].max() > 0:
            v = per_rank.loc[phase].reindex(tl.windows["rank"], fill_value=0.0)
            parts.append(f"{style.PHASE_LABELS[phase]} {v.min():.0f}–{v.max():.0f} ms")
    step = float((tl.windows["end_ms"] - tl.windows["start_ms"]).max())
    return (
        "per rank: "
        + ", ".join(parts)
        + f" of a {step:.0f} ms step; lanes bottom to top: phases, sub-phases, gloo transfers (collectives on gloo's "
        "threads, point-to-point on the caller's)"
    )
