"""The report's "The optimizer step, decomposed" section: per rank, the milliseconds of every part of the
optimizer step of one Muon run and its AdamW twin, the optimizer share beside it, and Muon's extra time per token."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from muon_repro.phases import DP_GATHER
from muon_repro.report import derive, style
from muon_repro.report.data import ReportData, fmetric, is_missing, metric
from muon_repro.report.formatting import ms, pct
from muon_repro.report.selection import first_pair, pair_at, representative_runs, run_label, titled
from muon_repro.values import counted

PART_LABELS = {
    "zero1_reduce_scatter": "ZeRO-1 gradient reduce-scatter",
    "zero1_all_gather": "ZeRO-1 parameter all-gather",
    "muon_dp_gather": "DP gather (Muon)",
    "muon_tp_gather": "TP gather (Muon)",
    "muon_newton_schulz": "Newton-Schulz (Muon)",
    "elementwise": "momentum + element-wise update",
    "muon_shards": "TP and DP shard, local copies (Muon)",
    "rest": "rest of the optimizer scope",
    "optimizer": "optimizer step (whole)",
}
SPLIT_LABELS = {"transfer": "↳ transfer (from the last rank's arrival)", "wait": "↳ waiting for the group's last rank"}


def _names_run(conditions: str, run: str) -> bool:
    """Whether a claim's conditions (``run (backend on device, ...); run (...)``) name ``run``."""
    return re.search(rf"(^|; ){re.escape(run)}( \(|;|$)", conditions) is not None


def _share_source(r: pd.Series, decomposed: pd.DataFrame | None = None, table: str | None = None) -> str:
    """Which steps the runs table's optimizer_share reads (estimators.step_source) and their medians, then the
    profiled steps' medians (runs.optimizer_ms, mean over ranks; runs.step_ms, slowest rank) when those are others:
    the steps the appendix's rank-by-rank table ``table`` (its heading, ``A5. ...``) decomposes, whose whole optimizer
    step it gives per rank as a mean per profiled step (``decomposed``: derive.optimizer_decomposition's)."""
    profiled = (
        f"median optimizer step {ms(metric(r, 'optimizer_ms'))} of a {ms(metric(r, 'step_ms'))} median step, over "
        f"{counted(int(metric(r, 'trials')), 'trial')} × {int(metric(r, 'steps')) // max(int(metric(r, 'trials')), 1)} "
        "profiled steps"
    )
    if table:
        number = table.split(".", 1)[0]
        profiled += f" (appendix table {number}, below, decomposes these steps"
        if decomposed is not None and len(decomposed):
            low, high = float(decomposed["optimizer"].min()), float(decomposed["optimizer"].max())
            span = ms(low) if ms(low) == ms(high) else f"{ms(low).removesuffix(' ms')}–{ms(high)}"
            profiled += f"; it gives each rank's mean per profiled step, not a median: {span} for the whole optimizer step"
        profiled += ")"
    timed_opt, timed_step = r.get("timed_optimizer_ms"), r.get("timed_step_ms")
    if pd.isna(timed_opt) or pd.isna(timed_step):  # a run without steps timed without the profiler
        return f"per step, the mean over trials of each trial's median ({profiled})"
    left_out = 0 if pd.isna(r.get("disturbed_rounds")) else int(r["disturbed_rounds"])
    disturbed = f", {left_out} disturbed left out" if left_out else ""
    return (
        f"per step, the mean over the {int(metric(r, 'rounds'))} rounds timed without the profiler of each round's "
        f"median{disturbed} (over those rounds, the median of each round's median, per step the optimizer's mean over "
        f"ranks and the step's slowest rank: optimizer step {ms(timed_opt)} of a {ms(timed_step)} step); on the profiled "
        f"steps, with the same per-step statistics: {profiled}"
    )


def decomposition_runs(data: ReportData) -> list[pd.Series]:
    """The runs the decomposition shows: Muon and AdamW at DP2·TP2 (the original study's comparison first),
    else the first grid with both, else the first configured run alone."""
    reps = representative_runs(data.runs)
    pair = pair_at(reps, 2, 2) or first_pair(reps)
    if pair:
        return list(pair)
    return [reps.iloc[0]] if len(reps) else []


def decomposition(data: ReportData, claims: list[dict[str, str]], table: str | None = None) -> dict[str, Any]:
    """Per rank, ms per step (mean over trials) of every part of the optimizer step of the runs of
    :func:`decomposition_runs`; beside it the optimizer share (with the claims table's interval
    for the run it measured) and Muon's extra time per token. ``table``: the heading of the appendix table that shows
    the decomposition (``A5. The optimizer step, rank by rank``), which the optimizer share's lines point to."""
    shown = decomposition_runs(data)
    if not shown:
        return {
            "rows": [],
            "header": [],
            "runs": "",
            "notes": ["No run records its optimizer, dp and tp: there is no optimizer step to decompose."],
            "beside": [],
            "split": False,
        }
    tables = {str(r["run"]): derive.optimizer_decomposition(data.phases, str(r["run"])) for r in shown}
    split = all(f"{k}_{n}" in t.columns for t in tables.values() for k in derive.SPLIT_PARTS for n in derive.SPLIT_COLUMNS)
    header = [""] + [
        f"{style.OPTIMIZER_LABELS.get(str(r['optimizer']), str(r['optimizer']))} r{rank}"
        for r in shown
        for rank in tables[str(r["run"])].index
    ]
    muon_only = {k for k, _, only in derive.OPTIMIZER_PARTS if only}

    def cells(key: str) -> list[str]:
        out = []
        for r in shown:
            t = tables[str(r["run"])]
            base = key.split("_transfer")[0].split("_wait")[0]
            if str(r["optimizer"]) != "muon" and base in muon_only:
                out += ["—"] * len(t.index)
            else:
                out += [ms(v, f"phases.ms_per_step ({key}, {r['run']})").removesuffix(" ms") for v in t[key]]
        return out

    rows = []
    for key in (*(k for k, _, _ in derive.OPTIMIZER_PARTS), "rest", "optimizer"):
        rows.append([PART_LABELS[key], *cells(key)])
        if split and key in derive.SPLIT_PARTS:
            rows += [[SPLIT_LABELS[n], *cells(f"{key}_{n}")] for n in derive.SPLIT_COLUMNS]

    beside = []
    share_claim = {str(c["conditions"]): c for c in claims if c["id"] == "optimizer_share" and c["verdict"] != "not measured"}
    for r in shown:
        share = derive.optimizer_share(r)
        claimed = next((c for cond, c in share_claim.items() if _names_run(cond, str(r["run"]))), None)
        interval = f"; the claims table's estimate and 95% interval: {claimed['measured']}" if claimed else ""
        what = "optimizer step time / training step time"
        source = _share_source(r, tables[str(r["run"])], table)
        beside.append(f"Optimizer share, {run_label(r)}: {pct(share)}, {what}, {source}{interval}.")
    muon = [r for r in shown if str(r["optimizer"]) == "muon"]
    adamw = [r for r in shown if str(r["optimizer"]) == "adamw"]
    if muon and adamw:
        m, a = muon[0], adamw[0]
        tm, ta = int(metric(m, "tokens_per_step")), int(metric(a, "tokens_per_step"))
        if tm == ta:
            # the steps timed without the profiler where both runs have them: the profiler slows runs unequally
            column = "timed_step_ms" if all(not is_missing(r.get("timed_step_ms")) for r in (m, a)) else "step_ms"
            which = "timed without the profiler" if column == "timed_step_ms" else "profiled"
            extra_us = (fmetric(m, column) - fmetric(a, column)) / tm * 1000.0
            beside.append(
                f"Muon's extra over AdamW per token: {extra_us:+.1f} µs per token".replace("-", "−")
                + f" (the difference of the median step times {which}, {ms(metric(m, column))} and "
                f"{ms(metric(a, column))}, over the {tm:,} tokens each run trains per step)."
            )
        else:
            beside.append(f"Muon's extra over AdamW per token: not comparable, the runs train {tm:,} and {ta:,} tokens per step.")

    notes = []
    for r in muon:
        flops = derive.ns_flops_by_rank(data.ranks, str(r["run"]))
        per_rank = ", ".join(f"r{rank} {v / 1e9:.3g}" for rank, v in flops.items())
        if flops.max() > flops.min():
            notes.append(
                f"Newton-Schulz work differs across the ranks of {run_label(r)} ({per_rank} GFLOP per step, ranks.ns_flops)"
                + _gather_waits(data, str(r["run"]), flops)
                + (" (the waiting rows)." if split else ".")
            )
        else:
            notes.append(
                f"Every rank of {run_label(r)} does the same Newton-Schulz work "
                f"({flops.iloc[0] / 1e9:.3g} GFLOP per step, ranks.ns_flops)."
            )
    return {
        "rows": rows,
        "header": header,
        "runs": " and ".join(titled(r) for r in shown),
        "notes": notes,
        "beside": beside,
        "split": split,
    }


def _gather_waits(data: ReportData, run: str, flops: pd.Series) -> str:
    """What the DP gather's waits (phases.wait_ms_per_step, mean over traced trials per rank) say of uneven
    Newton-Schulz work: whether the rank with the least waits longest for the others, as measured."""
    phases = data.phases
    if "wait_ms_per_step" not in phases.columns:
        return ""
    rows = phases[(phases["run"] == run) & (phases["phase"] == DP_GATHER)].dropna(subset=["wait_ms_per_step"])
    if rows.empty:
        return ""
    waits = rows.groupby("rank")["wait_ms_per_step"].mean()
    least, longest = int(flops.idxmin()), int(waits.idxmax())
    if least == longest:
        return (
            f": r{least}, with the least, waits longest in the DP gather for the others "
            f"({waits[least]:.1f} ms per step, phases.wait_ms_per_step)"
        )
    return (
        f"; the DP gather's longest wait is r{longest}'s ({waits[longest]:.1f} ms per step, phases.wait_ms_per_step), "
        f"not the least-loaded rank's (r{least})"
    )
