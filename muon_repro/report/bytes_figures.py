"""The report's figures on bytes, each rank's: the optimizer state it holds (Muon vs AdamW per process
grid, and Muon's transient gather buffers), and the optimizer bytes it sends per step by ZeRO-1 layout
from three sources (analytic model, run-time ledger, trace). Tables in, PNG + SVG path out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from muon_repro.report import derive, stated, style
from muon_repro.report.formatting import mb, percent, ratio
from muon_repro.report.plotting import (
    add_legend,
    add_title,
    group_ticks,
    grouped_positions,
    legend_below,
    new_figure,
    save_figure,
    set_min_span,
    show_no_data,
    styled,
)
from muon_repro.report.selection import grids, pair_at, representative_runs, sort_runs, study_runs

# ---------------------------------------------------------------- 4. optimizer-state memory


@styled
def state_memory(runs: pd.DataFrame, ranks: pd.DataFrame, checks: pd.DataFrame, out: str | Path) -> Path:
    """Optimizer state per rank, Muon vs AdamW per (dp, tp): steady state (Muon momentum, AdamW
    moments; mean over ranks, tick: the largest rank) and, apart, the transient gather buffers. Bytes in MB as the
    report writes them (:func:`~muon_repro.report.formatting.mb`, the unit on the axes); the takeaway quotes the
    state check from ``checks`` (:func:`state_memory_stated`)."""
    reps = representative_runs(runs)
    st = derive.state_by_run(ranks, reps["run"]).set_index("run")
    fig, axes = new_figure(3.3, ncols=2, gridspec_kw={"width_ratios": [1.6, 1]})
    ax, ax_t = axes
    pos, ticks, groups = grouped_positions(reps)
    tallest = 0.0
    for x, (_, r) in zip(pos, ticks.iterrows()):
        row = st.loc[r["run"]]
        m, a, largest = (float(row[c]) for c in ("muon", "adamw", "largest"))
        ax.bar(x, m / style.MB, 0.7, color=style.OPTIMIZER_COLORS["muon"])
        ax.bar(x, a / style.MB, 0.7, bottom=m / style.MB, color=style.OPTIMIZER_COLORS["adamw"])
        ax.plot([x - 0.35, x + 0.35], [largest / style.MB] * 2, color="black", linewidth=1.6)
        mean_said, largest_said = _mb(m + a, "ranks state (mean over ranks)"), _mb(largest, "ranks.state_bytes (largest rank)")
        if mean_said == largest_said:  # the line sits on the bar: one number for both
            ax.text(x, max(m + a, largest) / style.MB, mean_said, ha="center", va="bottom", fontsize=style.SMALL_PT)
        else:  # each number by what it measures: the mean inside the bar's top, the largest rank's above its line
            ax.text(x, (m + a) / style.MB, mean_said, ha="center", va="top", color="white", fontsize=style.SMALL_PT)
            ax.text(x, largest / style.MB, largest_said, ha="center", va="bottom", fontsize=style.SMALL_PT)
        tallest = max(tallest, (m + a) / style.MB, largest / style.MB)
    group_ticks(ax, pos, ticks, groups)
    ax.set_ylim(0, tallest * 1.15 or 1.0)  # the labels stay inside the panel, under its title
    muon = reps[reps["optimizer"] == "muon"]
    if len(muon):
        muon_grids = [(int(r["dp"]), int(r["tp"])) for _, r in muon.iterrows()]
        t = [float(st.loc[r["run"], "transient"]) for _, r in muon.iterrows()]
        ax_t.bar(range(len(t)), [v / style.MB for v in t], 0.6, color="#DDDDDD", hatch="xx", edgecolor="#888888", linewidth=0.5)
        for i, v in enumerate(t):
            ax_t.text(i, v / style.MB, _mb(v, "ranks.transient_bytes"), ha="center", va="bottom", fontsize=style.SMALL_PT)
        ax_t.set_ylim(0, max(t) / style.MB * 1.15 or 1.0)
        ax_t.set_xticks(range(len(t)), [style.grid_label(*g) for g in muon_grids], fontweight="bold", fontsize=8.5)
        ax_t.grid(axis="x", visible=False)
        set_min_span(ax_t, 0, len(t) - 1, 2.4)
    else:
        show_no_data(ax_t, "no Muon run:\nno gather buffers")
    ax.set_ylabel("steady state per rank (MB)\nbar: mean over ranks")
    ax_t.set_ylabel("peak per rank (MB)")
    ax.set_title("optimizer state (steady)", fontsize=9)
    ax_t.set_title("Muon's gather buffers (transient)", fontsize=9)
    handles = [
        Patch(color=style.OPTIMIZER_COLORS["muon"], label="Muon momentum (1 value per element)"),
        Patch(color=style.OPTIMIZER_COLORS["adamw"], label="AdamW moments (2 values per element)"),
        Line2D([], [], color="black", linewidth=1.6, label="largest rank (ZeRO-1 chunks can be uneven)"),
    ]
    bottom = legend_below(fig, handles, ncol=3)
    add_title(
        fig,
        "Optimizer-state memory per rank, Muon vs AdamW (ZeRO-1 divides it by DP)",
        state_memory_stated(runs, ranks, checks).text,
        bottom_in=bottom,
    )
    return save_figure(fig, out)


def _mb(value: float, what: str) -> str:
    """Bytes as the report writes them in MB (``14.16``), without the unit the axis names."""
    return mb(value, what).removesuffix(" MB")


def state_memory_stated(runs: pd.DataFrame, ranks: pd.DataFrame, checks: pd.DataFrame) -> stated.Stated:
    """What ``state_memory`` prints above its panels: the Muon / AdamW ratio of the bars (the whole model's mean state
    per rank) per grid, and the state check's value as the checks table has it (the elements Muon manages only)."""
    reps = representative_runs(runs)
    st = derive.state_by_run(ranks, reps["run"]).set_index("run")
    ratios = []
    for dp, tp in grids(reps):
        pair = pair_at(reps, dp, tp)
        if pair:
            m, a = (float(st.loc[p["run"], "muon"] + st.loc[p["run"], "adamw"]) for p in pair)
            if a > 0:
                ratios.append(f"{style.grid_label(dp, tp)} {ratio(m / a, 'state ratio')}")
    if not ratios:
        return stated.Stated("only one optimizer recorded: no Muon / AdamW ratio")
    check = stated.state_check(checks, stated.profile_of(runs))
    text = "Muon / AdamW mean state, whole model (the bars): " + ", ".join(ratios)
    text += ", the elements Muon does not manage keeping AdamW's two moments"
    text += f"; {check.text}" if check.text else ""
    return stated.Stated(text, check.values)


# ---------------------------------------------------------------- 5. bytes per step by layout, three sources


@styled
def bytes_by_layout(
    runs: pd.DataFrame, phases: pd.DataFrame, checks: pd.DataFrame, numbers: pd.DataFrame, out: str | Path
) -> Path:
    """Optimizer bytes per rank per step by phase, for each layout: analytic model, run-time ledger, trace; the
    takeaway quotes the bytes checks' ratios (the DP group's optimizer traffic, the paper's quantity) and names the
    bar totals' ratios (Muon's TP gather included) as the other quantity they are (:func:`bytes_by_layout_stated`)."""
    (dp, tp), rs = _layout_runs(runs)
    sources = tuple(style.BYTE_SOURCE_HATCH)
    fig, (ax,) = new_figure(3.8)
    x, centers, group_labels, tallest = 0.0, [], [], 0.0
    tables = {str(r["run"]): derive.phase_bytes(phases, str(r["run"])) for _, r in rs.iterrows()}
    said = bytes_by_layout_stated(runs, phases, checks, numbers)
    for _, r in rs.iterrows():
        table = tables[str(r["run"])]
        starts, top = [], 0.0
        for source in sources:
            bottom = 0.0
            col = table[source]
            for phase in style.OPTIMIZER_COMM_PHASES:
                v = col.get(phase)
                if v is None or pd.isna(v):
                    continue
                ax.bar(
                    x,
                    v / style.MB,
                    0.8,
                    bottom=bottom,
                    color=style.PHASE_COLORS[phase],
                    hatch=style.BYTE_SOURCE_HATCH[source],
                    edgecolor="white",
                    linewidth=0.4,
                )
                bottom += v / style.MB
            top = max(top, bottom)
            if col.isna().all():
                ax.text(x, 0, "not\nrecorded", ha="center", va="bottom", fontsize=style.SMALL_PT, rotation=90)
            starts.append(x)
            x += 0.85
        tallest = max(tallest, top)
        total = derive.total_bytes(table)
        optimizer = str(r["optimizer"])
        dp_said = said.values.get(_dp_check(checks, runs, r)[0])
        lines = [] if np.isnan(total) else [mb(total, "phases bytes (bar total)")]  # no source recorded: no total
        lines += [f"DP group:\n{dp_said}"] if dp_said else []
        ax.text(
            float(np.mean(starts)),
            top,
            "\n".join(lines),  # one short line each: a group's label must not run into its neighbour's
            ha="center",
            va="bottom",
            fontsize=style.SMALL_PT,
        )
        centers.append(float(np.mean(starts)))
        label = style.OPTIMIZER_LABELS[optimizer] + ("" if optimizer == "adamw" else "\n" + str(r["layout"]).replace("_", "-"))
        group_labels.append(label)
        x += 0.6
    ax.set_xticks(centers, group_labels)
    ax.set_ylim(0, tallest * 1.35 or 1.0)  # three lines of label above the tallest group, inside the panel
    set_min_span(ax, centers[0] - 0.85, centers[-1] + 0.85, 5.0)
    ax.set_ylabel("bytes sent per rank per step (MB)\noptimizer phases only")
    handles = [Patch(color=style.PHASE_COLORS[p], label=style.PHASE_LABELS[p]) for p in style.OPTIMIZER_COMM_PHASES]
    handles += [
        Patch(
            facecolor="white",
            edgecolor="#555555",
            hatch=style.BYTE_SOURCE_HATCH[s],
            label=f"bar {i + 1}: {style.BYTE_SOURCE_LABELS[s]}",
        )
        for i, s in enumerate(sources)
    ]
    add_legend(ax, handles)
    add_title(fig, "Optimizer communication per rank per step by ZeRO-1 layout: analytic, ledger, trace", said.text)
    return save_figure(fig, out)


def _layout_runs(runs: pd.DataFrame) -> tuple[tuple[int, int], pd.DataFrame]:
    """The grid with the most variants (the layout ablation's DP2·TP2 in the reference set) and the runs the
    bytes figure draws there: its AdamW run, then one Muon run per layout."""
    reps = sort_runs(study_runs(runs))
    counts = reps.groupby(["dp", "tp"]).size().sort_values(ascending=False, kind="stable")
    dp, tp = (int(v) for v in counts.index[0])
    rs = reps[(reps["dp"] == dp) & (reps["tp"] == tp)]
    return (dp, tp), pd.concat([rs[rs["optimizer"] == "adamw"].head(1), rs[rs["optimizer"] == "muon"].drop_duplicates("layout")])


def _dp_check(checks: pd.DataFrame, runs: pd.DataFrame, run: pd.Series) -> tuple[str, str]:
    """(the key of ``Stated.values`` under which the DP-group bytes of ``run`` are printed, the layout of the
    bytes check they come from): a Muon run's layout's check, any for AdamW (each quotes the same AdamW
    run); ("", "") without one."""
    rows = stated.bytes_checks(checks, stated.profile_of(runs))
    optimizer = str(run["optimizer"])
    if optimizer == "muon":
        rows = rows[rows["layout"] == (run["layout"] if isinstance(run["layout"], str) else "contiguous")]
    if rows.empty:
        return "", ""
    return f"stated_numbers.{rows.iloc[0]['check_id']}.{optimizer}_dp_bytes", str(rows.iloc[0]["layout"])


def bytes_by_layout_stated(
    runs: pd.DataFrame, phases: pd.DataFrame, checks: pd.DataFrame, numbers: pd.DataFrame
) -> stated.Stated:
    """What ``bytes_by_layout`` prints: the takeaway (the bytes checks' ratios, the bar totals' ratios, whether
    the sources agree), and above each bar group its DP-group bytes as the bytes checks measured them."""
    (dp, tp), rs = _layout_runs(runs)
    profile = stated.profile_of(runs)
    sources = tuple(style.BYTE_SOURCE_HATCH)
    tables = {str(r["run"]): derive.phase_bytes(phases, str(r["run"])) for _, r in rs.iterrows()}
    gap = max(derive.source_gap(t) for t in tables.values())
    recorded = [s for s in sources if all(t[s].notna().all() for t in tables.values())]
    which = "the three sources" if len(recorded) == len(sources) else "the sources recorded (" + ", ".join(recorded) + ")"
    agree = f"{which} agree exactly" if gap == 0 else f"{which} differ by up to {percent(gap)}"
    adamw = rs[rs["optimizer"] == "adamw"]
    adamw_total = derive.total_bytes(tables[str(adamw.iloc[0]["run"])]) if len(adamw) else 0.0
    totals = {
        str(r["layout"]): derive.total_bytes(tables[str(r["run"])]) / adamw_total
        for _, r in rs[rs["optimizer"] == "muon"].iterrows()
        if adamw_total > 0 and isinstance(r["layout"], str)
    }
    bars = [lay if isinstance(lay, str) else "contiguous" for lay in rs.loc[rs["optimizer"] == "muon", "layout"]]
    said = stated.bytes_by_layout(style.grid_label(dp, tp), totals, agree, checks, profile, order=bars)
    values = dict(said.values)
    for _, r in rs.iterrows():
        key, layout = _dp_check(checks, runs, r)
        value = stated.dp_bytes(checks, numbers, profile, layout, str(r["optimizer"])) if key else None
        if value is not None:
            values[key] = stated.dp_mb(value)
    return stated.Stated(said.text, values)
