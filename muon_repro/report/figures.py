"""The report's figures: one function per figure, tables in, path out (PNG at print resolution + SVG).

Each function takes analysis tables (as read by :mod:`muon_repro.report.data`) and an output
path, and returns the PNG's path; the SVG lies beside it. Which runs a figure shows comes from
:mod:`muon_repro.report.selection`, the few reductions of a table it needs from
:mod:`muon_repro.report.derive`. Colours come from :mod:`muon_repro.report.style` (Muon
vermillion, AdamW blue, one colour per phase). With only one optimizer or one configuration a
figure still draws what it has and says in its title what is missing; it never fails for lack
of a comparison.
"""

from __future__ import annotations

import functools
import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from muon_repro import rundir
from muon_repro.report import derive, style
from muon_repro.report.data import MissingMetric, fmetric, require_columns, rows_of
from muon_repro.report.selection import (
    first_pair,
    grids,
    pair_at,
    representative_runs,
    run_label,
    sort_runs,
    timeline_run,
    titled,
)

FIGURES = (
    "comm_time_by_kind",
    "step_breakdown",
    "optimizer_overhead",
    "state_memory",
    "bytes_by_layout",
    "grid_comparison",
    "timeline",
    "loss",
    "convergence_sweep",  # muon_repro.report.convergence_figures
    "leading_steps",
)


# ---------------------------------------------------------------- helpers


def _save(fig: plt.Figure, out: str | Path) -> Path:
    """Write ``out`` as .png and .svg, each atomically (temporary name, then rename)."""
    png = Path(out).with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    for path, fmt, meta in ((png, "png", {"Software": None}), (png.with_suffix(".svg"), "svg", {"Date": None})):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fig.savefig(tmp, format=fmt, dpi=style.DPI, metadata=meta)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    plt.close(fig)
    return png


def _styled(draw: Callable[..., Path]) -> Callable[..., Path]:
    """Run a figure function under the report's rcParams (text takes them when it is created)."""

    @functools.wraps(draw)
    def wrapper(*args, **kwargs) -> Path:
        with plt.rc_context(style.RC):
            return draw(*args, **kwargs)

    return wrapper


def _figure(height: float, ncols: int = 1, **kw) -> tuple[plt.Figure, np.ndarray]:
    fig, axes = plt.subplots(1, ncols, figsize=(style.WIDTH_IN, height), squeeze=False, **kw)
    for ax in axes.flat:
        ax.set_axisbelow(True)
    return fig, axes[0]


def _title(fig: plt.Figure, headline: str, takeaway: str, bottom_in: float = 0.0) -> None:
    """Headline says what is plotted; the lines under it say what to see. Margins in inches."""
    h = fig.get_figheight()
    lines = textwrap.wrap(takeaway, 120)  # ~7 in at 8.5 pt: the figure keeps the page's width
    fig.suptitle(headline, x=0.01, y=1 - 0.04 / h, ha="left", va="top", fontsize=10, fontweight="bold")
    fig.text(0.01, 1 - 0.27 / h, "\n".join(lines), ha="left", va="top", fontsize=8.5, color="#333333")
    fig.tight_layout(rect=(0, bottom_in / h, 1, 1 - (0.36 + 0.15 * len(lines)) / h))


def _no_data(ax: plt.Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666666", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _opt(row: pd.Series) -> str:
    return str(row["optimizer"])


def _legend(ax: plt.Axes, handles: list, **kw) -> None:
    if handles:
        ax.legend(handles=handles, **{"loc": "upper left", "bbox_to_anchor": (1.0, 1.0), **kw})


def _opt_handles(optimizers) -> list[Patch]:
    return [
        Patch(facecolor="white", edgecolor=style.OPTIMIZER_COLORS[o], hatch=style.OPTIMIZER_HATCH[o], linewidth=1.5, label=style.OPTIMIZER_LABELS[o])
        for o in ("muon", "adamw")
        if o in set(optimizers)
    ]


# ---------------------------------------------------------------- 1. communication time per collective kind


@_styled
def comm_time_by_kind(runs: pd.DataFrame, steps: pd.DataFrame, out: str | Path) -> Path:
    """Stacked bars: communication time per step by collective kind, Muon beside AdamW, per (dp, tp)."""
    kinds = [k for k in style.KIND_COLORS if f"comm_{k}_ms" in steps.columns]
    require_columns(steps, "steps", ("run", "trial", "step", *(f"comm_{k}_ms" for k in kinds)))
    require_columns(runs, "runs", ("comm_ms",))
    reps = representative_runs(runs)
    values: dict[str, dict[str, float]] = {}
    for _, r in reps.iterrows():
        s = steps[steps["run"] == r["run"]]
        if s.empty:
            raise ValueError(f"metric steps.comm_*_ms is missing for run {r['run']} (no rows in the steps table)")
        # Mean over ranks per step, median over the steps of every trial (as the runs table).
        per_step = s.groupby(["trial", "step"])[[f"comm_{k}_ms" for k in kinds]].mean().median()
        values[r["run"]] = {k: float(per_step[f"comm_{k}_ms"]) for k in kinds}
    used = [k for k in kinds if any(v[k] > 0 for v in values.values())]
    fig, (ax,) = _figure(3.6)
    pos, ordered, groups = _grouped_positions(reps)
    for x, (_, r) in zip(pos, ordered.iterrows()):
        bottom = 0.0
        for k in used:
            v = values[r["run"]][k]
            ax.bar(x, v, 0.7, bottom=bottom, color=style.KIND_COLORS[k], edgecolor=style.OPTIMIZER_COLORS[_opt(r)],
                   linewidth=1.5, hatch=style.OPTIMIZER_HATCH[_opt(r)])  # fmt: skip
            bottom += v
        union = fmetric(r, "comm_ms")
        ax.plot([x - 0.35, x + 0.35], [union, union], color="black", linewidth=1.6)
        ax.text(x, union, f"{union:.0f}", ha="center", va="bottom", fontsize=7.5,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5})  # fmt: skip
    _group_ticks(ax, pos, ordered, groups)
    ax.set_ylabel("communication time per step (ms)")
    handles = [Patch(color=style.KIND_COLORS[k], label=style.KIND_LABELS[k]) for k in used] + _opt_handles(reps["optimizer"])
    handles.append(Line2D([], [], color="black", linewidth=1.6, label="all kinds together\n(union: kinds overlap)"))
    _legend(ax, handles)
    ratios = []
    for dp, tp in grids(reps):
        pair = pair_at(reps, dp, tp)
        if pair:
            m, a = (fmetric(p, "comm_ms") for p in pair)
            if a > 0:
                ratios.append(f"{style.grid_label(dp, tp)} {m / a:.2f}×")
    takeaway = ("Muon / AdamW communication time: " + ", ".join(ratios) + " (seed, 4 GPUs: 0.57× at DP2·TP2)") if ratios else (
        "only one optimizer recorded: no Muon / AdamW ratio")  # fmt: skip
    _title(fig, "Communication time per step, by collective kind (mean over ranks, median over trials and steps)", takeaway)
    return _save(fig, out)


# ---------------------------------------------------------------- 2. step time breakdown


@_styled
def step_breakdown(runs: pd.DataFrame, steps: pd.DataFrame, out: str | Path) -> Path:
    """Per configuration, its typical step (``runs.typical_step`` of ``runs.typical_trial``, mean
    over ranks): by phase (forward, backward, optimizer, other) and by activity (compute, exposed
    comm, idle)."""
    phases = {rundir.FORWARD: "forward_ms", rundir.BACKWARD: "backward_ms", rundir.OPTIMIZER: "optimizer_ms"}
    activities = {style.COMPUTE: "compute_ms", style.EXPOSED_COMM: "exposed_comm_ms", style.IDLE: "idle_ms"}
    require_columns(steps, "steps", ("run", "step", "step_ms", *phases.values(), *activities.values()))
    rs = sort_runs(runs)
    typical = pd.DataFrame([derive.typical_step(steps, r) for _, r in rs.iterrows()])
    height = 2.4 + 0.3 * len(rs)  # title, panel titles, axis labels and the legend need ~2.4 in
    fig, axes = _figure(height, ncols=2, sharey=True)
    y = np.arange(len(rs))[::-1]
    handles = []
    for ax, parts, with_other in ((axes[0], phases, True), (axes[1], activities, False)):
        left = np.zeros(len(rs))
        for name, col in parts.items():
            v = np.array([fmetric(t, col, "steps") for _, t in typical.iterrows()])
            handles.append(ax.barh(y, v, 0.7, left=left, color=style.PHASE_COLORS[name], label=style.PHASE_LABELS[name]))
            left += v
        if with_other:
            other = np.clip(typical["step_ms"].to_numpy(dtype=float) - left, 0, None)
            handles.append(ax.barh(y, other, 0.7, left=left, color=style.PHASE_COLORS[style.OTHER], label=style.PHASE_LABELS[style.OTHER]))
        ax.set_xlabel("time in one step (ms)")
        ax.grid(axis="y", visible=False)
    axes[0].set_yticks(y, [run_label(r, group=True) for _, r in rs.iterrows()])
    axes[0].set_title("by phase", fontsize=9)
    axes[1].set_title("by activity (adds up to the step)", fontsize=9)
    fig.legend(handles=handles, loc="lower center", ncol=4, bbox_to_anchor=(0.55, 0.0))
    pair = first_pair(representative_runs(runs))
    if pair:
        m, a = (derive.typical_step(steps, p) for p in pair)
        d_step, d_opt = m["step_ms"] - a["step_ms"], m["optimizer_ms"] - a["optimizer_ms"]
        takeaway = (f"{style.grid_label(int(pair[0]['dp']), int(pair[0]['tp']))}: Muon's step is {d_step:+.0f} ms against AdamW's; "
                    f"the optimizer phase accounts for {d_opt:+.0f} ms of it")  # fmt: skip
    else:
        takeaway = "only one optimizer recorded: no Muon / AdamW difference to show"
    _title(fig, "Where a step's time goes, per configuration (the median step of all trials, mean over ranks)", takeaway, bottom_in=0.45)
    return _save(fig, out)


# ---------------------------------------------------------------- 3. optimizer overhead


@_styled
def optimizer_overhead(runs: pd.DataFrame, out: str | Path, seed_share: float = 0.011) -> Path:
    """Per configuration: the optimizer step's share of step time (%), against the seed's ~1.1%
    (the seed's definition, as the claims table measures it: :func:`derive.optimizer_share`)."""
    require_columns(runs, "runs", ("optimizer_ms", "step_ms"))
    rs = sort_runs(runs)
    share = np.array([100 * derive.optimizer_share(r) for _, r in rs.iterrows()])
    fig, (ax,) = _figure(1.8 + 0.3 * len(rs))
    y = np.arange(len(rs))[::-1]
    ax.barh(y, share, 0.7, color=[style.OPTIMIZER_COLORS[_opt(r)] for _, r in rs.iterrows()])
    for yi, v in zip(y, share):
        ax.text(v, yi, f" {v:.1f}%", va="center", fontsize=7.5)
    ax.axvline(100 * seed_share, color="black", linestyle="--", linewidth=1)
    ax.text(100 * seed_share, y.max() + 0.6, f" seed: {100 * seed_share:.1f}% (4 GPUs)", fontsize=7.5, va="bottom")
    ax.set_yticks(y, [run_label(r, group=True) for _, r in rs.iterrows()])
    ax.set_xlabel("optimizer step time / training step time (%), medians")
    ax.set_xlim(0, max(float(share.max()) * 1.18, 100 * seed_share * 3))
    ax.set_ylim(-0.6, y.max() + 1.4)
    ax.grid(axis="y", visible=False)
    _legend(ax, [Patch(color=style.OPTIMIZER_COLORS[o], label=style.OPTIMIZER_LABELS[o]) for o in ("muon", "adamw") if o in set(rs["optimizer"])])
    parts = []
    for opt in ("muon", "adamw"):
        v = share[(rs["optimizer"] == opt).to_numpy()]
        if len(v):
            same = f"{v.min():.1f}" == f"{v.max():.1f}"
            parts.append(f"{style.OPTIMIZER_LABELS[opt]} {v.min():.1f}%" if same else f"{style.OPTIMIZER_LABELS[opt]} {v.min():.1f}–{v.max():.1f}%")
    _title(fig, "Optimizer overhead: share of the step spent in the optimizer", "here: " + ", ".join(parts) + f"; the seed measured ~{100 * seed_share:.1f}% for Muon")
    return _save(fig, out)


# ---------------------------------------------------------------- 4. optimizer-state memory


@_styled
def state_memory(runs: pd.DataFrame, ranks: pd.DataFrame, out: str | Path) -> Path:
    """Optimizer state per rank, Muon vs AdamW per (dp, tp): steady state (Muon momentum, AdamW
    moments; mean over ranks, tick: the largest rank) and, apart, the transient gather buffers."""
    reps = representative_runs(runs)
    st = derive.state_by_run(ranks, reps["run"]).set_index("run")
    fig, axes = _figure(3.3, ncols=2, gridspec_kw={"width_ratios": [1.6, 1]})
    ax, ax_t = axes
    pos, ticks, groups = _grouped_positions(reps)
    for x, (_, r) in zip(pos, ticks.iterrows()):
        row = st.loc[r["run"]]
        m, a = float(row["muon"]) / style.MIB, float(row["adamw"]) / style.MIB
        ax.bar(x, m, 0.7, color=style.OPTIMIZER_COLORS["muon"])
        ax.bar(x, a, 0.7, bottom=m, color=style.OPTIMIZER_COLORS["adamw"])
        largest = float(row["largest"]) / style.MIB
        ax.plot([x - 0.35, x + 0.35], [largest] * 2, color="black", linewidth=1.6)
        ax.text(x, m + a, f"{m + a:.3g}", ha="center", va="bottom", fontsize=7.5)
    _group_ticks(ax, pos, ticks, groups)
    muon = reps[reps["optimizer"] == "muon"]
    if len(muon):
        muon_grids = [(int(r["dp"]), int(r["tp"])) for _, r in muon.iterrows()]
        t = [float(st.loc[r["run"], "transient"]) / style.MIB for _, r in muon.iterrows()]
        ax_t.bar(range(len(t)), t, 0.6, color="#DDDDDD", hatch="xx", edgecolor="#888888", linewidth=0.5)
        for i, v in enumerate(t):
            ax_t.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=7.5)
        ax_t.set_xticks(range(len(t)), [style.grid_label(*g) for g in muon_grids], fontweight="bold", fontsize=8.5)
        ax_t.grid(axis="x", visible=False)
        _min_span(ax_t, 0, len(t) - 1, 2.4)
    else:
        _no_data(ax_t, "no Muon run:\nno gather buffers")
    ax.set_ylabel("steady state per rank (MiB)\nbar: mean over ranks")
    ax_t.set_ylabel("peak per rank (MiB)")
    ax.set_title("optimizer state (steady)", fontsize=9)
    ax_t.set_title("Muon's gather buffers (transient)", fontsize=9)
    handles = [Patch(color=style.OPTIMIZER_COLORS["muon"], label="Muon momentum (1 value per element)"),
               Patch(color=style.OPTIMIZER_COLORS["adamw"], label="AdamW moments (2 values per element)"),
               Line2D([], [], color="black", linewidth=1.6, label="largest rank (ZeRO-1 chunks are uneven)")]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=3, bbox_to_anchor=(0.5, 0.0))
    ratios = []
    for dp, tp in grids(reps):
        pair = pair_at(reps, dp, tp)
        if pair:
            m, a = (float(st.loc[p["run"], "muon"] + st.loc[p["run"], "adamw"]) for p in pair)
            if a > 0:
                ratios.append(f"{style.grid_label(dp, tp)} {m / a:.2f}×")
    takeaway = ("Muon / AdamW mean state: " + ", ".join(ratios) + " (claim 0.5×: only the matrices drop to one moment)") if ratios else (
        "only one optimizer recorded: no Muon / AdamW ratio")  # fmt: skip
    _title(fig, "Optimizer-state memory per rank, Muon vs AdamW (ZeRO-1 divides it by DP)", takeaway, bottom_in=0.3)
    return _save(fig, out)


def _grouped_positions(reps: pd.DataFrame) -> tuple[list[float], pd.DataFrame, list[tuple[float, str]]]:
    """Bar positions for runs grouped by grid: (positions, the runs in that order, (center, grid label))."""
    pos, rows, groups, x = [], [], [], 0.0
    for dp, tp in grids(reps):
        members = reps[(reps["dp"] == dp) & (reps["tp"] == tp)]
        start = x
        for _, r in members.iterrows():
            pos.append(x)
            rows.append(r)
            x += 0.8
        groups.append(((start + x - 0.8) / 2, style.grid_label(dp, tp)))
        x += 0.5
    return pos, pd.DataFrame(rows), groups


def _min_span(ax: plt.Axes, lo: float, hi: float, span: float = 3.2) -> None:
    """Keep bars bar-shaped when there are only one or two of them."""
    center, half = (lo + hi) / 2, max((hi - lo) / 2 + 0.6, span / 2)
    ax.set_xlim(center - half, center + half)


def _group_ticks(ax: plt.Axes, pos: list[float], runs: pd.DataFrame, groups: list[tuple[float, str]]) -> None:
    """Optimizer names under the bars, the grid's name under each group."""
    ax.set_xticks(pos, [style.OPTIMIZER_LABELS.get(o, o) for o in runs["optimizer"]], fontsize=8)
    _min_span(ax, min(pos), max(pos))
    for center, label in groups:
        ax.annotate(label, (center, 0), xycoords=("data", "axes fraction"), xytext=(0, -22), textcoords="offset points",
                    ha="center", va="top", fontweight="bold", fontsize=8.5)  # fmt: skip
    ax.grid(axis="x", visible=False)


# ---------------------------------------------------------------- 5. bytes per step by layout, three sources


@_styled
def bytes_by_layout(runs: pd.DataFrame, phases: pd.DataFrame, out: str | Path) -> Path:
    """Optimizer bytes per rank per step by phase, for each layout: analytic model, run-time ledger, trace."""
    reps = sort_runs(runs)
    # The grid with the most variants (the layout ablation's DP2·TP2 in the reference set).
    counts = reps.groupby(["dp", "tp"]).size().sort_values(ascending=False, kind="stable")
    dp, tp = (int(v) for v in counts.index[0])
    rs = reps[(reps["dp"] == dp) & (reps["tp"] == tp)]
    rs = pd.concat([rs[rs["optimizer"] == "adamw"].head(1), rs[rs["optimizer"] == "muon"].drop_duplicates("layout")])
    sources = tuple(style.BYTE_SOURCE_HATCH)
    fig, (ax,) = _figure(3.8)
    x, centers, group_labels, ratio_text = 0.0, [], [], []
    adamw_total = None
    tables = {str(r["run"]): derive.phase_bytes(phases, str(r["run"])) for _, r in rs.iterrows()}
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
                ax.bar(x, v / style.MB, 0.8, bottom=bottom, color=style.PHASE_COLORS[phase], hatch=style.BYTE_SOURCE_HATCH[source], edgecolor="white", linewidth=0.4)
                bottom += v / style.MB
            top = max(top, bottom)
            if col.isna().all():
                ax.text(x, 0, "not\nrecorded", ha="center", va="bottom", fontsize=6, rotation=90)
            starts.append(x)
            x += 0.85
        total = derive.total_bytes(table)
        if _opt(r) == "adamw":
            adamw_total = total
        ax.text(float(np.mean(starts)), top, f"{total / style.MB:.3g} MB", ha="center", va="bottom", fontsize=7.5)
        centers.append(float(np.mean(starts)))
        label = style.OPTIMIZER_LABELS[_opt(r)] + ("" if _opt(r) == "adamw" else "\n" + str(r["layout"]).replace("_", "-"))
        group_labels.append(label)
        x += 0.6
    ax.set_xticks(centers, group_labels)
    _min_span(ax, centers[0] - 0.85, centers[-1] + 0.85, 5.0)
    ax.set_ylabel("bytes sent per rank per step (MB)\noptimizer phases only")
    handles = [Patch(color=style.PHASE_COLORS[p], label=style.PHASE_LABELS[p]) for p in style.OPTIMIZER_COMM_PHASES]
    handles += [Patch(facecolor="white", edgecolor="#555555", hatch=style.BYTE_SOURCE_HATCH[s], label=f"bar {i + 1}: {style.BYTE_SOURCE_LABELS[s]}") for i, s in enumerate(sources)]
    _legend(ax, handles)
    if adamw_total:
        for _, r in rs[rs["optimizer"] == "muon"].iterrows():
            total = derive.total_bytes(tables[str(r["run"])])
            ratio_text.append(f"{str(r['layout']).replace('_', '-')} {total / adamw_total:.3f}×")
    gap = max(derive.source_gap(t) for t in tables.values())
    recorded = [s for s in sources if all(t[s].notna().all() for t in tables.values())]
    which = "the three sources" if len(recorded) == len(sources) else "the sources recorded (" + ", ".join(recorded) + ")"
    agree = f"{which} agree exactly" if gap == 0 else f"{which} differ by up to {100 * gap:.2g}%"
    takeaway = (f"{style.grid_label(dp, tp)}: Muon / AdamW bytes " + ", ".join(ratio_text) + f" (paper: (1, 1.25]); {agree}") if ratio_text else (
        f"{style.grid_label(dp, tp)}: {agree} (no AdamW run to compare with)")  # fmt: skip
    _title(fig, "Optimizer communication per rank per step by ZeRO-1 layout: analytic, ledger, trace", takeaway)
    return _save(fig, out)


# ---------------------------------------------------------------- 6. DP x TP comparison


@_styled
def grid_comparison(runs: pd.DataFrame, out: str | Path) -> Path:
    """Step time per (dp, tp) grid at one world size, Muon and AdamW: which grid wins, by how much."""
    require_columns(runs, "runs", ("step_ms", "step_ms_p10", "step_ms_p90", "world_size"))
    reps = representative_runs(runs, groups=("distributed_muon", "comparison", "layout_ablation"))
    world = reps["world_size"].astype("Int64").mode().iloc[0] if len(reps) else None
    reps = reps[reps["world_size"] == world]
    same_layout = runs[(runs["world_size"] == world) & (runs["layout"].fillna("contiguous") == "contiguous")]
    present_grids = grids(reps)
    optimizers = [o for o in ("muon", "adamw") if o in set(reps["optimizer"])]
    fig, (ax,) = _figure(3.2)
    width = 0.8 / max(len(optimizers), 1)
    verdicts, repeated = [], False
    for j, opt in enumerate(optimizers):
        sub = reps[reps["optimizer"] == opt]
        xs, ys, lo, hi = [], [], [], []
        for i, (dp, tp) in enumerate(present_grids):
            r = sub[(sub["dp"] == dp) & (sub["tp"] == tp)]
            if r.empty:
                continue
            r = r.iloc[0]
            xs.append(i + (j - (len(optimizers) - 1) / 2) * width)
            ys.append(fmetric(r, "step_ms"))
            lo.append(fmetric(r, "step_ms") - fmetric(r, "step_ms_p10"))
            hi.append(fmetric(r, "step_ms_p90") - fmetric(r, "step_ms"))
        best = int(np.argmin(ys))
        ax.bar(xs, ys, width * 0.9, color=style.OPTIMIZER_COLORS[opt], label=style.OPTIMIZER_LABELS[opt],
               yerr=[lo, hi], capsize=3, error_kw={"linewidth": 0.8})  # fmt: skip
        for xv, (dp, tp) in zip(xs, [g for g in present_grids if len(sub[(sub["dp"] == g[0]) & (sub["tp"] == g[1])])]):
            again = same_layout[(same_layout["optimizer"] == opt) & (same_layout["dp"] == dp) & (same_layout["tp"] == tp)]
            if len(again) > 1:  # the same configuration recorded in several groups: run-to-run spread
                ax.plot([xv] * len(again), [fmetric(r, "step_ms") for _, r in again.iterrows()], "o", color="black",
                        markersize=3, markerfacecolor="white", zorder=3)  # fmt: skip
                repeated = True
        for k, (xv, yv) in enumerate(zip(xs, ys)):
            ax.text(xv, yv + hi[k], f"{yv:.0f}" + (" ★" if k == best and len(ys) > 1 else ""), ha="center", va="bottom", fontsize=7.5)
        present = [g for g in present_grids if len(sub[(sub["dp"] == g[0]) & (sub["tp"] == g[1])])]
        if len(ys) > 1:
            runner_up = sorted(ys)[1]
            verdicts.append(f"{style.OPTIMIZER_LABELS[opt]}: {style.grid_label(*present[best])} fastest, "
                            f"{100 * (1 - ys[best] / runner_up):.0f}% faster than the next")  # fmt: skip
    ax.set_xticks(range(len(present_grids)), [style.grid_label(dp, tp) for dp, tp in present_grids])
    _min_span(ax, 0, len(present_grids) - 1)
    ax.set_xlabel(f"process grid ({world} ranks)")
    ax.set_ylabel("step time (ms)\nmedian, whiskers p10–p90")
    ax.grid(axis="x", visible=False)
    handles = [Patch(color=style.OPTIMIZER_COLORS[o], label=style.OPTIMIZER_LABELS[o]) for o in optimizers]
    if repeated:
        handles.append(Line2D([], [], marker="o", linestyle="", color="black", markerfacecolor="white", markersize=3,
                              label="each recording of the\nsame configuration"))  # fmt: skip
    _legend(ax, handles)
    takeaway = "; ".join(verdicts) + " (★ fastest; the seed found DP2·TP2 fastest)" if verdicts else "only one grid recorded: nothing to compare"
    _title(fig, "DP × TP: step time per process grid", takeaway)
    return _save(fig, out)


# ---------------------------------------------------------------- 7. one-step timeline


@_styled
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
    fig, axes = _figure(2.6 + 0.55 * len(ranks), ncols=2, gridspec_kw={"width_ratios": [1, 1.4]})
    opt = spans[(spans["lane"] == "coarse") & (spans["phase"] == rundir.OPTIMIZER)]
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
                    s = s[s["phase"] != rundir.OPTIMIZER] if ax is axes[1] else s
                for phase, a, b in zip(s["phase"], s["start_ms"], s["end_ms"]):
                    if b < w0 or a > w1:
                        continue
                    ax.broken_barh([(a, max(b - a, min_w))], (base + off, h), color=style.PHASE_COLORS.get(phase, "#AAAAAA"), linewidth=0)
                    if phase not in seen:
                        seen.append(phase)
        ax.set_xlim(w0 - 0.01 * (w1 - w0), w1 + 0.01 * (w1 - w0))
        ax.set_ylim(-0.2, len(ranks))
        ax.set_yticks([len(ranks) - 1 - i + 0.4 for i in range(len(ranks))], [f"rank {r}" for r in ranks])
        ax.set_xlabel("time (ms)")
        ax.grid(axis="y", visible=False)
    axes[0].set_title(f"whole step (trial {tl.trial}, ProfilerStep#{tl.step})", fontsize=9)
    axes[1].set_title("zoom: the optimizer step", fontsize=9)
    axes[1].tick_params(labelleft=False)
    order = [p for p in (*style.TIMELINE_COARSE, *style.TIMELINE_FINE, style.TRANSFER) if p in seen]
    fig.legend(handles=[Patch(color=style.PHASE_COLORS[p], label=style.PHASE_LABELS[p]) for p in order],
               loc="lower center", ncol=4, bbox_to_anchor=(0.5, 0.0))  # fmt: skip
    note = "" if tl.aligned else " (ranks not aligned: a trace had no baseTimeNanoseconds)"
    _title(fig, f"One step of every rank: {titled(row)}", _timeline_takeaway(tl) + note, bottom_in=0.19 * -(-len(order) // 4) + 0.1)
    return _save(fig, out)


def _timeline_takeaway(tl: derive.OneStep) -> str:
    """Per-rank spread of the phases that set the optimizer's pace (lane 'fine' and 'coarse')."""
    s = tl.spans.assign(ms=tl.spans["end_ms"] - tl.spans["start_ms"])
    per_rank = s[s["lane"] != "transfer"].groupby(["phase", "rank"])["ms"].sum().unstack(fill_value=0.0)
    parts = []
    for phase in (rundir.NEWTON_SCHULZ, rundir.DP_GATHER, rundir.TP_GATHER, rundir.OPTIMIZER):
        if phase in per_rank.index and per_rank.loc[phase].max() > 0:
            v = per_rank.loc[phase].reindex(tl.windows["rank"], fill_value=0.0)
            parts.append(f"{style.PHASE_LABELS[phase]} {v.min():.0f}–{v.max():.0f} ms")
    step = float((tl.windows["end_ms"] - tl.windows["start_ms"]).max())
    return "per rank: " + ", ".join(parts) + f" of a {step:.0f} ms step; lanes bottom to top: phases, sub-phases, comm-thread transfers"


# ---------------------------------------------------------------- 8. loss


@_styled
def loss(losses_table: pd.DataFrame, runs: pd.DataFrame, out: str | Path) -> Path:
    """Training loss per step, Muon vs AdamW (one line per configuration; mean over ranks)."""
    reps = representative_runs(runs)
    if reps.empty:
        raise MissingMetric("no run has an optimizer, dp and tp (runs.optimizer, runs.dp, runs.tp): nothing to plot the loss of")
    losses = pd.concat(
        [derive.mean_loss(losses_table, str(r["run"])).assign(label=run_label(r), optimizer=r["optimizer"], dp=int(r["dp"]), tp=int(r["tp"]))
         for _, r in reps.iterrows()],
        ignore_index=True,
    )  # fmt: skip
    fig, (ax,) = _figure(3.0)
    dashes = ["-", "--", ":", "-."]
    loss_grids = grids(losses.drop_duplicates("label"))
    for label, g in losses.groupby("label", sort=False):
        opt = str(g["optimizer"].iloc[0])
        grid = (int(g["dp"].iloc[0]), int(g["tp"].iloc[0]))
        ax.plot(g["step"], g["loss"], color=style.OPTIMIZER_COLORS[opt], linestyle=dashes[loss_grids.index(grid) % len(dashes)],
                marker="o", markersize=3, label=label)  # fmt: skip
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (cross-entropy, nats)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    _legend(ax, ax.get_legend_handles_labels()[0])
    last = losses.sort_values("step").groupby("optimizer")["loss"].last()
    final = {o: losses[(losses["optimizer"] == o) & (losses["step"] == losses.loc[losses["optimizer"] == o, "step"].max())]["loss"].mean() for o in last.index}
    parts = [f"{style.OPTIMIZER_LABELS[o]} {final[o]:.2f}" for o in ("muon", "adamw") if o in final]
    steps = int(losses["step"].max()) + 1
    _title(fig, f"Training loss over the {steps} recorded steps (a smoke test of learning, not a convergence study)",
           "final loss (mean over configurations): " + ", ".join(parts) +
           "; one optimizer's grids differ because each DP rank adds its own sequences to the global batch")  # fmt: skip
    return _save(fig, out)

