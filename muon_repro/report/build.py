"""From a bundle's tables and run directories to the figures: the frames the figures need
beyond the tables (state split, analytic bytes, loss, the one-step timeline), and
:func:`make_figures`, which draws them all into one folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from muon_repro.report import figures
from muon_repro.report.analytic import analytic_bytes
from muon_repro.report.data import ReportData, is_missing, representative_runs, sort_runs
from muon_repro.report.timeline import Timeline, load_timeline


def state_frame(data: ReportData) -> pd.DataFrame:
    """run, muon, adamw (mean over ranks), largest (the largest rank's steady state), transient
    (the largest transient peak): optimizer-state bytes from metrics.json."""
    rows = []
    for run in data.runs["run"]:
        st = data.run_dir(run).state()
        rows.append({"run": run, "muon": float(st["muon"].mean()), "adamw": float(st["adamw"].mean()),
                     "largest": int((st["muon"] + st["adamw"]).max()), "transient": int(st["transient"].max())})  # fmt: skip
    return pd.DataFrame(rows, columns=["run", "muon", "adamw", "largest", "transient"])


def analytic_frame(data: ReportData) -> pd.DataFrame:
    """run, phase, bytes: the analytic model's bytes per rank per step in each optimizer phase."""
    rows = []
    for run in data.runs["run"]:
        for phase, nbytes in analytic_bytes(data.run_dir(run).config, run).items():
            rows.append({"run": run, "phase": phase, "bytes": nbytes})
    return pd.DataFrame(rows, columns=["run", "phase", "bytes"])


def loss_frame(data: ReportData) -> pd.DataFrame:
    """label, run, optimizer, dp, tp, step, loss for one run per (optimizer, dp, tp)."""
    frames = []
    for _, r in representative_runs(data.runs).iterrows():
        df = data.run_dir(r["run"]).loss()
        frames.append(df.assign(label=figures.run_label(r), run=r["run"], optimizer=r["optimizer"], dp=int(r["dp"]), tp=int(r["tp"])))
    if not frames:
        raise ValueError("no run has an optimizer, dp and tp (runs.optimizer, runs.dp, runs.tp): nothing to plot the loss of")
    return pd.concat(frames, ignore_index=True)


def timeline_run(runs: pd.DataFrame) -> pd.Series:
    """The run whose timeline shows the most: Muon with both DP and TP (all optimizer phases), the seed's first."""
    rs = sort_runs(runs[runs["optimizer"].notna() & runs["dp"].notna() & runs["tp"].notna()])
    if rs.empty:
        return runs.iloc[0]
    both = rs[(rs["optimizer"] == "muon") & (rs["dp"] > 1) & (rs["tp"] > 1)]
    return (both if len(both) else rs).iloc[0]


def load_run_timeline(data: ReportData) -> tuple[Timeline, pd.Series]:
    r = timeline_run(data.runs)
    return load_timeline(str(r["run"]), data.run_dir(str(r["run"])).trace_files()), r


def make_figures(data: ReportData, out_dir: str | Path) -> dict[str, Path]:
    """Draw every figure of :data:`figures.FIGURES` into ``out_dir``; returns name -> PNG path."""
    out = Path(out_dir)
    t = data.tables
    tl, tl_row = load_run_timeline(data)
    has_grid = not any(is_missing(tl_row.get(k)) for k in ("optimizer", "dp", "tp"))
    paths = {
        "comm_time_by_kind": figures.comm_time_by_kind(t["runs"], t["steps"], out / "comm_time_by_kind"),
        "step_breakdown": figures.step_breakdown(t["runs"], t["steps"], out / "step_breakdown"),
        "optimizer_overhead": figures.optimizer_overhead(t["runs"], out / "optimizer_overhead"),
        "state_memory": figures.state_memory(t["runs"], state_frame(data), out / "state_memory"),
        "bytes_by_layout": figures.bytes_by_layout(t["runs"], t["collectives"], analytic_frame(data), out / "bytes_by_layout"),
        "grid_comparison": figures.grid_comparison(t["runs"], out / "grid_comparison"),
        "timeline": figures.timeline(tl, out / "timeline", f"{figures.run_label(tl_row)} ({tl.run})" if has_grid else tl.run),
        "loss": figures.loss(loss_frame(data), out / "loss"),
    }
    return paths
