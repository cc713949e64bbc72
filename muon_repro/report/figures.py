"""The report's figures: the catalogue (:data:`FIGURES`, in the report's order) and the figures on time
(communication per collective kind, the step's breakdown, the optimizer's share, the process grids) and loss.
The others are drawn by ``bytes_figures`` (state memory, bytes by layout), ``timeline_figures`` and
``convergence_figures``; the toolkit they share (figure, title, legend, saving) is :mod:`muon_repro.report.plotting`.

One function per figure: it takes analysis tables (as read by :mod:`muon_repro.report.data`) and an
output path, and returns the PNG's path (print resolution); the SVG lies beside it. Which runs a figure
shows comes from :mod:`muon_repro.report.selection`, the few reductions of a table it needs from
:mod:`muon_repro.report.derive`. Colours come from :mod:`muon_repro.report.style` (Muon
vermillion, AdamW blue, one colour per phase). With only one optimizer or one configuration a
figure still draws what it has and says in its title what is missing; it never fails for lack
of a comparison.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from muon_repro.phases import BACKWARD, FORWARD, OPTIMIZER
from muon_repro.report import derive, profiler_cost, stated, style
from muon_repro.report.data import MissingMetric, fmetric, require_columns
from muon_repro.report.formatting import ms, pct, percent
from muon_repro.report.plotting import (
    add_legend,
    add_title,
    group_ticks,
    grouped_positions,
    new_figure,
    optimizer_handles,
    save_figure,
    set_min_span,
    styled,
)
from muon_repro.report.selection import (
    first_pair,
    grids,
    pair_at,
    representative_runs,
    run_label,
    run_labels,
    sort_runs,
    study_runs,
)

# The results' figures, in the report's order (numbered 1, 2, ...); each is drawn here unless the
# module that draws it is named.
FIGURES = (
    "comm_time_by_kind",
    "step_breakdown",
    "optimizer_overhead",
    "state_memory",  # muon_repro.report.bytes_figures
    "bytes_by_layout",  # muon_repro.report.bytes_figures
    "grid_comparison",
    "timeline",  # muon_repro.report.timeline_figures
    "loss",
    "convergence_sweep",  # muon_repro.report.convergence_figures
    "leading_steps",  # muon_repro.report.convergence_figures
)


def _opt(row: pd.Series) -> str:
    return str(row["optimizer"])


# ---------------------------------------------------------------- 1. communication time per collective kind


@styled
def comm_time_by_kind(
    runs: pd.DataFrame, steps: pd.DataFrame, claims: pd.DataFrame, numbers: pd.DataFrame, out: str | Path
) -> Path:
    """Stacked bars: communication time per step by collective kind, Muon beside AdamW, per (dp, tp). The
    bars are the profiled steps' collectives, waiting included; the takeaway quotes the claim
    ``comm_time_dp2_tp2`` (transfer time) from ``claims`` beside their ratios (:func:`comm_time_stated`)."""
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
    fig, (ax,) = new_figure(3.6)
    pos, ordered, groups = grouped_positions(reps)
    tallest = 0.0
    for x, (_, r) in zip(pos, ordered.iterrows()):
        bottom = 0.0
        for k in used:
            v = values[r["run"]][k]
            ax.bar(
                x,
                v,
                0.7,
                bottom=bottom,
                color=style.KIND_COLORS[k],
                edgecolor=style.OPTIMIZER_COLORS[_opt(r)],
                linewidth=1.5,
                hatch=style.OPTIMIZER_HATCH[_opt(r)],
            )
            bottom += v
        union = fmetric(r, "comm_ms")
        ax.plot([x - 0.35, x + 0.35], [union, union], color="black", linewidth=1.6)
        # the kinds overlap in time, so the stack can stand above the union's line: the label goes above both
        label_at = max(union, bottom)
        tallest = max(tallest, label_at)
        ax.text(x, label_at, f"{union:.0f}", ha="center", va="bottom", fontsize=style.SMALL_PT)
    group_ticks(ax, pos, ordered, groups, mark_profiled=True)
    ax.set_ylim(0, tallest * 1.12 or 1.0)  # room for the labels inside the panel
    ax.set_ylabel("communication time per step (ms)\nwaiting included")
    handles = [Patch(color=style.KIND_COLORS[k], label=style.KIND_LABELS[k]) for k in used] + optimizer_handles(reps["optimizer"])
    handles.append(Line2D([], [], color="black", linewidth=1.6, label="all kinds together\n(union: kinds overlap)"))
    add_legend(ax, handles)
    add_title(
        fig,
        "Communication time per step by collective kind (profiled steps, waiting included)",
        comm_time_stated(runs, claims, numbers).text + profiler_cost.footnote(ordered),
    )
    return save_figure(fig, out)


def comm_time_stated(runs: pd.DataFrame, claims: pd.DataFrame, numbers: pd.DataFrame) -> stated.Stated:
    """What ``comm_time_by_kind`` prints above its bars: their Muon / AdamW ratios per grid (``runs.comm_ms``,
    waiting included) and the claim's value from ``claims``."""
    reps = representative_runs(runs)
    ratios = {}
    for dp, tp in grids(reps):
        pair = pair_at(reps, dp, tp)
        if pair:
            m, a = (fmetric(p, "comm_ms") for p in pair)
            if a > 0:
                ratios[style.grid_label(dp, tp)] = m / a
    return stated.comm_time(ratios, claims, numbers, stated.profile_of(runs))


# ---------------------------------------------------------------- 2. step time breakdown


@styled
def step_breakdown(runs: pd.DataFrame, steps: pd.DataFrame, out: str | Path) -> Path:
    """Per configuration, its typical step (``runs.typical_step`` of ``runs.typical_trial``, mean
    over ranks): by phase (forward, backward, optimizer, other) and by activity (compute, exposed
    comm, idle). One profiled step, not the steps timed without the profiler: the figure says so, and
    over which traced trials (``runs.trials``) it is the median (:func:`typical_step_said`)."""
    phases = {FORWARD: "forward_ms", BACKWARD: "backward_ms", OPTIMIZER: "optimizer_ms"}
    activities = {style.COMPUTE: "compute_ms", style.EXPOSED_COMM: "exposed_comm_ms", style.IDLE: "idle_ms"}
    require_columns(steps, "steps", ("run", "step", "step_ms", *phases.values(), *activities.values()))
    rs = sort_runs(study_runs(runs))
    typical = pd.DataFrame([derive.typical_step(steps, r) for _, r in rs.iterrows()])
    height = 2.4 + 0.3 * len(rs)  # title, panel titles, axis labels and the legend need ~2.4 in
    fig, axes = new_figure(height, ncols=2, sharey=True)
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
            handles.append(
                ax.barh(y, other, 0.7, left=left, color=style.PHASE_COLORS[style.OTHER], label=style.PHASE_LABELS[style.OTHER])
            )
        ax.set_xlabel("time in one step (ms)")
        ax.grid(axis="y", visible=False)
    axes[0].set_yticks(y, profiler_cost.marked(run_labels(rs, group=True), rs))
    axes[0].set_title("by phase", fontsize=9)
    axes[1].set_title("by activity (adds up to the step)", fontsize=9)
    fig.legend(handles=handles, loc="lower center", ncol=4, bbox_to_anchor=(0.55, 0.0))
    pair = first_pair(representative_runs(runs))
    if pair:
        m, a = (derive.typical_step(steps, p) for p in pair)
        d_step, d_opt = m["step_ms"] - a["step_ms"], m["optimizer_ms"] - a["optimizer_ms"]
        takeaway = (
            f"{style.grid_label(int(pair[0]['dp']), int(pair[0]['tp']))}: Muon's profiled step is "
            f"{ms(d_step, 'steps.step_ms difference', signed=True)} against AdamW's; the optimizer phase accounts for "
            f"{ms(d_opt, 'steps.optimizer_ms difference', signed=True)} of it"
        )
    else:
        takeaway = "only one optimizer recorded: no Muon / AdamW difference to show"
    add_title(
        fig,
        "Where a profiled step's time goes, per configuration (mean over ranks)",
        f"{typical_step_said(rs)}. {takeaway}" + profiler_cost.footnote(rs),
        bottom_in=0.45,
    )
    return save_figure(fig, out)


def typical_step_said(runs: pd.DataFrame) -> str:
    """Which step ``step_breakdown`` draws per run, in words: the median of the profiled steps (``runs.typical_step``)
    of the traced trials only (``runs.trials``), so that its times are not read as the steps timed without the
    profiler (``runs.timed_step_ms``), which the claims and the grid comparison state."""
    traced = {int(t) for t in pd.to_numeric(runs["trials"], errors="coerce").dropna()} if "trials" in runs else set()
    if traced == {1}:
        which = "in its single traced trial"
    elif len(traced) == 1:
        which = f"over its {traced.pop()} traced trials"
    else:
        which = "over its traced trials (runs.trials)"
    return f"Each row: the run's median profiled step (runs.typical_step) {which}, not its steps timed without the profiler"


# ---------------------------------------------------------------- 3. optimizer overhead


@styled
def optimizer_overhead(runs: pd.DataFrame, claims: pd.DataFrame, out: str | Path) -> Path:
    """Per configuration: the optimizer step's share of step time (%), against the original study's ~1.1%
    (``runs.optimizer_share`` with its 95% interval: the claims' estimator, so the claim's run shows the claims
    table's value); the takeaway quotes the claim ``optimizer_share`` and the study's value from ``claims``
    (:func:`optimizer_share_stated`)."""
    require_columns(runs, "runs", ("optimizer_share", "optimizer_share_low", "optimizer_share_high"))
    rs = sort_runs(study_runs(runs))
    study_share = stated.study_share(claims, stated.profile_of(runs))
    share = np.array([100 * derive.optimizer_share(r) for _, r in rs.iterrows()])
    fig, (ax,) = new_figure(1.8 + 0.3 * len(rs))
    y = np.arange(len(rs))[::-1]
    low, high = (
        np.array([100 * float(pd.to_numeric(r[c], errors="coerce")) for _, r in rs.iterrows()])
        for c in ("optimizer_share_low", "optimizer_share_high")
    )
    ax.barh(y, share, 0.7, color=[style.OPTIMIZER_COLORS[_opt(r)] for _, r in rs.iterrows()])
    # whiskers only where the interval is known: a zero-length one (caps on the bar's end) would read as certainty
    known = np.isfinite(low) & np.isfinite(high)
    if known.any():
        whiskers = np.vstack([share - low, high - share])[:, known]
        ax.errorbar(share[known], y[known], xerr=whiskers, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    ends = np.fmax(share, high)  # each label starts past its interval, not on its whisker
    for yi, v, end in zip(y, share, ends):
        ax.text(end, yi, " " + pct(v / 100), va="center", fontsize=style.SMALL_PT)
    ax.axvline(100 * study_share, color="black", linestyle="--", linewidth=1)
    ax.text(
        100 * study_share, y.max() + 0.6, f" Wei's study: {percent(study_share)} (4 GPUs)", fontsize=style.SMALL_PT, va="bottom"
    )
    ax.set_yticks(y, run_labels(rs, group=True))
    ax.set_xlabel("optimizer step time / training step time (%): per step, then per round, mean over rounds (95% interval)")
    ax.set_xlim(0, max(float(np.nanmax(ends)) * 1.22, 100 * study_share * 3))
    ax.set_ylim(-0.6, y.max() + 1.4)
    ax.grid(axis="y", visible=False)
    add_legend(
        ax,
        [
            Patch(color=style.OPTIMIZER_COLORS[o], label=style.OPTIMIZER_LABELS[o])
            for o in ("muon", "adamw")
            if o in set(rs["optimizer"])
        ],
    )
    add_title(fig, "Optimizer overhead: share of the step spent in the optimizer", optimizer_share_stated(runs, claims).text)
    return save_figure(fig, out)


def optimizer_share_stated(runs: pd.DataFrame, claims: pd.DataFrame) -> stated.Stated:
    """What ``optimizer_overhead`` prints above its bars: the range of their shares per optimizer, the claim's
    estimate and the original study's value from ``claims``."""
    rs = sort_runs(study_runs(runs))
    shares = {
        style.OPTIMIZER_LABELS[opt]: [derive.optimizer_share(r) for _, r in rs[rs["optimizer"] == opt].iterrows()]
        for opt in ("muon", "adamw")
        if (rs["optimizer"] == opt).any()
    }
    return stated.optimizer_share(shares, claims, stated.profile_of(runs))


# ---------------------------------------------------------------- 6. DP x TP comparison


@styled
def grid_comparison(runs: pd.DataFrame, out: str | Path) -> Path:
    """Step time per (dp, tp) grid at one world size, Muon and AdamW: which grid wins, by how much."""
    require_columns(runs, "runs", ("step_ms", "step_ms_p10", "step_ms_p90", "world_size"))
    reps = representative_runs(runs, groups=("distributed_muon", "comparison", "layout_ablation"))
    world = reps["world_size"].astype("Int64").mode().iloc[0] if len(reps) else None
    # one world size per figure (grids compare at equal ranks): the runs at any other are left out, and the takeaway says so
    left_out = reps[reps["world_size"] != world]
    reps = reps[reps["world_size"] == world]
    study = study_runs(runs)  # the pipeline group's grids run in micro-batches: another question, its own figure
    same_layout = study[(study["world_size"] == world) & (study["layout"].fillna("contiguous") == "contiguous")]
    present_grids = grids(reps)
    optimizers = [o for o in ("muon", "adamw") if o in set(reps["optimizer"])]
    # the steps timed without the profiler, as the claims read them, where every run has them: the profiler slows
    # some grids far more than others (runs.profiler_overhead), which would change the winner
    timed = "timed_step_ms" in reps.columns and len(reps) > 0 and bool(reps["timed_step_ms"].notna().all())
    column = "timed_step_ms" if timed else "step_ms"
    fig, (ax,) = new_figure(3.2)
    width = 0.8 / max(len(optimizers), 1)
    verdicts, repeated = [], False
    for j, optimizer in enumerate(optimizers):
        sub = reps[reps["optimizer"] == optimizer]
        xs, ys, lo, hi, present = [], [], [], [], []  # present: the grids this optimizer has a run of
        for i, (dp, tp) in enumerate(present_grids):
            at_grid = sub[(sub["dp"] == dp) & (sub["tp"] == tp)]
            if at_grid.empty:
                continue
            row = at_grid.iloc[0]
            present.append((dp, tp))
            xs.append(i + (j - (len(optimizers) - 1) / 2) * width)
            ys.append(fmetric(row, column))
            lo.append(0.0 if timed else fmetric(row, "step_ms") - fmetric(row, "step_ms_p10"))
            hi.append(0.0 if timed else fmetric(row, "step_ms_p90") - fmetric(row, "step_ms"))
        best = int(np.argmin(ys))
        ax.bar(
            xs,
            ys,
            width * 0.9,
            color=style.OPTIMIZER_COLORS[optimizer],
            label=style.OPTIMIZER_LABELS[optimizer],
            yerr=None if timed else [lo, hi],
            capsize=3,
            error_kw={"linewidth": 0.8},
        )
        for xv, (dp, tp) in zip(xs, present):
            again = same_layout[(same_layout["optimizer"] == optimizer) & (same_layout["dp"] == dp) & (same_layout["tp"] == tp)]
            if len(again) > 1:  # the same configuration recorded in several groups: run-to-run spread
                ax.plot(
                    [xv] * len(again),
                    [fmetric(r, column) for _, r in again.iterrows()],
                    "o",
                    color="black",
                    markersize=3,
                    markerfacecolor="white",
                    zorder=3,
                )
                repeated = True
        for k, (xv, yv) in enumerate(zip(xs, ys)):
            ax.text(
                xv,
                yv + hi[k],
                f"{yv:.0f}" + (" ★" if k == best and len(ys) > 1 else ""),
                ha="center",
                va="bottom",
                fontsize=style.SMALL_PT,
            )
        if len(ys) > 1:
            runner_up = sorted(ys)[1]
            verdicts.append(
                f"{style.OPTIMIZER_LABELS[optimizer]}: {style.grid_label(*present[best])} fastest, "
                f"{100 * (1 - ys[best] / runner_up):.0f}% faster than the next by these medians"
            )
    ax.set_xticks(range(len(present_grids)), [style.grid_label(dp, tp) for dp, tp in present_grids])
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)  # the value labels above the tallest bar stay inside the panel
    set_min_span(ax, 0, len(present_grids) - 1)
    ax.set_xlabel(f"process grid ({world} ranks)")
    timed_label = "median step time (ms)\nwithout the profiler, no interval"
    ax.set_ylabel(timed_label if timed else "step time (ms), profiled\nmedian, whiskers p10–p90")
    ax.grid(axis="x", visible=False)
    handles = [Patch(color=style.OPTIMIZER_COLORS[o], label=style.OPTIMIZER_LABELS[o]) for o in optimizers]
    if repeated:
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="",
                color="black",
                markerfacecolor="white",
                markersize=3,
                label="each recording of the\nsame configuration",
            )
        )
    add_legend(ax, handles)
    takeaway = (
        "; ".join(verdicts) + " (★ fastest; Wei's study found DP2·TP2 fastest)"
        if verdicts
        else "only one grid recorded: nothing to compare"
    )
    add_title(fig, "DP × TP: step time per process grid", takeaway + _left_out_said(left_out, world))
    return save_figure(fig, out)


def _left_out_said(left_out: pd.DataFrame, world: object) -> str:
    """The runs ``grid_comparison`` does not draw for being at another world size than ``world``: how many, at
    which sizes; "" when it drops none."""
    if left_out.empty:
        return ""
    sizes = [f"{w} ranks" for w in sorted({int(w) for w in left_out["world_size"].dropna()})]
    sizes += ["an unknown world size"] if left_out["world_size"].isna().any() else []
    runs = "run" if len(left_out) == 1 else "runs"
    return f"; not drawn: {len(left_out)} {runs} at {' and '.join(sizes)} (this figure compares {world} ranks)"


# ---------------------------------------------------------------- 8. loss


@styled
def loss(losses_table: pd.DataFrame, runs: pd.DataFrame, out: str | Path) -> Path:
    """Training loss per step, Muon vs AdamW (one line per configuration; mean over ranks)."""
    reps = representative_runs(runs)
    if reps.empty:
        raise MissingMetric("no run has an optimizer, dp and tp (runs.optimizer, runs.dp, runs.tp): nothing to plot the loss of")
    losses = pd.concat(
        [
            derive.mean_loss(losses_table, str(r["run"])).assign(
                label=run_label(r), optimizer=r["optimizer"], dp=int(r["dp"]), tp=int(r["tp"])
            )
            for _, r in reps.iterrows()
        ],
        ignore_index=True,
    )
    fig, (ax,) = new_figure(3.0)
    dashes = ["-", "--", ":", "-."]
    loss_grids = grids(losses.drop_duplicates("label"))
    for label, g in losses.groupby("label", sort=False):
        opt = str(g["optimizer"].iloc[0])
        grid = (int(g["dp"].iloc[0]), int(g["tp"].iloc[0]))
        ax.plot(
            g["step"],
            g["loss"],
            color=style.OPTIMIZER_COLORS[opt],
            linestyle=dashes[loss_grids.index(grid) % len(dashes)],
            marker="o",
            markersize=3,
            label=label,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (cross-entropy, nats)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    add_legend(ax, ax.get_legend_handles_labels()[0])
    last = losses.sort_values("step").groupby("optimizer")["loss"].last()
    final = {
        o: losses[(losses["optimizer"] == o) & (losses["step"] == losses.loc[losses["optimizer"] == o, "step"].max())][
            "loss"
        ].mean()
        for o in last.index
    }
    parts = [f"{style.OPTIMIZER_LABELS[o]} {final[o]:.2f}" for o in ("muon", "adamw") if o in final]
    steps = int(losses["step"].nunique())
    add_title(
        fig,
        f"Training loss over the {steps} steps under the profiler (a smoke test, not a convergence study)",
        "final loss (mean over configurations): "
        + ", ".join(parts)
        + "; at equal tokens per step every grid of one optimizer trains the same global batch: its curves coincide",
    )
    return save_figure(fig, out)
