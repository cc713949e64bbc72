"""The report's "Results" tables: per run (times, bytes, state), per Muon/AdamW comparison (ratios),
optimizer bytes from the three sources, and what gloo sent over loopback against the ring model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from muon_repro.phases import DP_REDUCE_SCATTER
from muon_repro.report import derive
from muon_repro.report.data import ReportData, fmetric, is_missing, metric, require_columns
from muon_repro.report.formatting import mb, ms, pct, percent, ratio
from muon_repro.report.selection import (
    grid_said,
    pair_at,
    pp_of,
    representative_runs,
    run_label,
    run_labels,
    sort_runs,
    study_runs,
)
from muon_repro.tables.verdict_schemas import COMPARISON_TIME_RATIOS


def has_values(df: pd.DataFrame, column: str) -> bool:
    """Whether a column others may still be adding to the tables is there, with values."""
    return column in df.columns and bool(df[column].notna().any())


def has_timed_steps(run: pd.Series) -> bool:
    """Whether the run has steps timed without the profiler, the steps its optimizer_share is formed on
    (estimators.step_source); else the share is of its profiled steps."""
    return derive.has_value(run, "timed_step_ms")


def runs_header(data: ReportData) -> list[str]:
    comm = "comm ms (waiting)" if has_values(data.runs, "comm_wait_ms") else "comm ms"
    # The share and the ms columns come from different steps: the headers say which, so that no reader divides the
    # profiled optimizer ms by the profiled step ms and expects the share.
    timed = all(has_timed_steps(r) for _, r in data.runs.iterrows())
    return [
        "configuration",
        "run",
        "trials × steps",
        "profiled step ms (p10–p90)",
        "tokens/s (no profiler)",
        "forward / backward ms",
        "profiled optimizer ms",
        "optimizer share (no profiler)" if timed else "optimizer share (no profiler, else profiled)",
        comm,
        "exposed comm ms",
        "MB sent / rank / step",
        "state MB (largest rank)",
    ]


PP_NO_WAIT = "–"
"""A2's waiting cell for a run with pipeline stages and no matched collective: its waiting is not separable."""


def waiting_cell(run: pd.Series) -> str:
    """A2's waiting figure (runs.comm_wait_ms). With pipeline stages the stages' point-to-point calls are never
    matched across ranks (analysis/waits.py: wait 0, the whole call transfer), so the time a stage sits blocked on its
    neighbour is not in the figure: it is then a lower bound, the waiting of the run's matched collectives
    (``≥ 116``), or :data:`PP_NO_WAIT` where none matched, never a 0 that reads as no waiting."""
    wait = ms(metric(run, "comm_wait_ms"), "runs.comm_wait_ms").removesuffix(" ms")
    if pp_of(run) <= 1:
        return wait
    return f"≥ {wait}" if fmetric(run, "comm_wait_ms") > 0 else PP_NO_WAIT


def _share_cell(run: pd.Series) -> str:
    """The run's optimizer share, marked where it is of the profiled steps (a run timed only under the profiler)."""
    share = pct(derive.optimizer_share(run))
    return share if has_timed_steps(run) else f"{share} (profiled)"


def runs_rows(data: ReportData) -> list[list[str]]:
    """Per run, units in the header (ms, MB) so the cells stay short."""
    runs = data.runs
    require_columns(
        runs,
        "runs",
        (
            "step_ms",
            "step_ms_p10",
            "step_ms_p90",
            "forward_ms",
            "backward_ms",
            "optimizer_ms",
            "trials",
            "steps",
            "tokens_per_s",
            "comm_ms",
            "exposed_comm_ms",
            "comm_bytes",
            "state_bytes",
        ),
    )
    wait = has_values(runs, "comm_wait_ms")
    rows, ordered = [], sort_runs(runs)
    for label, (_, r) in zip(run_labels(ordered), ordered.iterrows()):
        t = {
            col: ms(metric(r, col), f"runs.{col}").removesuffix(" ms")
            for col in (
                "step_ms",
                "step_ms_p10",
                "step_ms_p90",
                "forward_ms",
                "backward_ms",
                "optimizer_ms",
                "comm_ms",
                "exposed_comm_ms",
            )
        }
        trials, steps = int(metric(r, "trials")), int(metric(r, "steps"))
        comm = t["comm_ms"] + (f" ({waiting_cell(r)})" if wait else "")
        rows.append(
            [
                label,
                str(r["run"]),
                f"{trials} × {steps // max(trials, 1)}",
                f"{t['step_ms']} ({t['step_ms_p10']}–{t['step_ms_p90']})",
                f"{fmetric(r, 'tokens_per_s'):,.0f}",
                f"{t['forward_ms']} / {t['backward_ms']}",
                t["optimizer_ms"],
                _share_cell(r),
                comm,
                t["exposed_comm_ms"],
                mb(metric(r, "comm_bytes")).removesuffix(" MB"),
                mb(metric(r, "state_bytes")).removesuffix(" MB"),  # MB like every other byte count of the report
            ]
        )
    return rows


COMPARISON_RATIOS = (
    "comm_ms_ratio",
    "comm_transfer_ms_ratio",
    "comm_bytes_ratio",
    "optimizer_ms_ratio",
    "step_ms_ratio",
    "state_bytes_ratio",
)
COMPARISON_LABELS = {
    "comm_ms_ratio": "comm time",
    "comm_transfer_ms_ratio": "comm transfer",
    "comm_bytes_ratio": "bytes",
    "optimizer_ms_ratio": "optimizer time",
    "step_ms_ratio": "step time",
    "state_bytes_ratio": "state",
}


PIPELINE_COMPARISON_LABELS = {
    "comm_transfer_ms_ratio": "comm transfer (PP: point-to-point calls whole)",
    "optimizer_ms_ratio": "optimizer time (profiled)",
}
"""The labels that say what a column is once pipeline pairs are in the table: their point-to-point calls are never
matched across ranks, so the transfer column counts them whole, blocked time included (analysis/waits.py); and their
optimizer ratio, of the profiled steps, can be far from that of the steps timed without the profiler
(:func:`optimizer_ratio_note`)."""


def _comparison_columns(comp: pd.DataFrame) -> list[str]:
    """The ratios shown: all of them, the transfer-time ratio only once the analysis writes it."""
    return [c for c in COMPARISON_RATIOS if c != "comm_transfer_ms_ratio" or has_values(comp, c)]


def has_stages(df: pd.DataFrame) -> bool:
    """Whether any row of a runs or comparisons table has pipeline stages."""
    return any(pp_of(r) > 1 for _, r in df.iterrows())


def comparison_header(data: ReportData) -> list[str]:
    labels = {**COMPARISON_LABELS, **(PIPELINE_COMPARISON_LABELS if has_stages(data.comparisons) else {})}
    return [
        "grid, layout",
        "Muon run",
        "AdamW run",
        "tokens / step",
        *(labels[c] for c in _comparison_columns(data.comparisons)),
    ]


NOT_TIMED_TOGETHER = "other sweep"
"""A time ratio's cell for two runs recorded by different sweeps (the comparisons table has none)."""


def timed_together(comparison: pd.Series) -> bool:
    """Whether a comparisons row's runs were recorded together, so that it has time ratios (a table from before
    the column: as it always did)."""
    together = comparison.get("recorded_together")
    return is_missing(together) or bool(together)


def comparison_ratio(comparison: pd.Series, column: str) -> str:
    """A comparisons row's ratio as the report writes it; :data:`NOT_TIMED_TOGETHER` for a time ratio of two runs
    recorded by different sweeps."""
    if column in COMPARISON_TIME_RATIOS and not timed_together(comparison):
        return NOT_TIMED_TOGETHER
    return ratio(metric(comparison, column, "comparisons", "muon_run"), f"comparisons.{column}")


def comparison_rows(data: ReportData) -> list[list[str]]:
    comp = data.comparisons
    cols = _comparison_columns(comp)
    require_columns(comp, "comparisons", ("muon_run", "adamw_run", "dp", "tp", "layout", "tokens_per_step", *cols))
    rows = []
    for _, c in comp.iterrows():
        grid = f"{grid_said(c)} {str(c['layout']).replace('_', '-')}"
        ratios = [comparison_ratio(c, col) for col in cols]
        tokens = f"{int(metric(c, 'tokens_per_step', 'comparisons', 'muon_run')):,}"
        rows.append([grid, str(c["muon_run"]), str(c["adamw_run"]), tokens, *ratios])
    return rows


def pipeline_wait_note(data: ReportData) -> str:
    """A2's note on its waiting figures for the runs with pipeline stages (:func:`waiting_cell`); '' when there is none
    or the runs table has no waiting."""
    runs = sort_runs(data.runs)
    staged = [r for _, r in runs.iterrows() if pp_of(r) > 1]
    if not staged or not has_values(data.runs, "comm_wait_ms"):
        return ""
    labels = dict(zip(runs["run"], run_labels(runs)))
    none = [labels[str(r["run"])] for r in staged if fmetric(r, "comm_wait_ms") <= 0]
    return (
        "With pipeline stages (PP > 1), a run's point-to-point sends and receives are not matched across ranks, so the "
        "time a stage sits blocked on its neighbour counts whole as communication, not as waiting: the brackets give the "
        f"waiting of its matched collectives (DP, TP) alone, a lower bound (≥){', or ' + PP_NO_WAIT if none else ''}"
        + (f" where none matched ({', '.join(none)})" if none else "")
        + "."
    )


def share_note(data: ReportData) -> str:
    """A2's note that its optimizer share is not its optimizer ms over its step ms: the share is formed on the steps
    timed without the profiler, the ms columns are the profiled steps' medians; the run where the two disagree most
    shows it with its own table values. '' when no run has steps timed without the profiler."""
    timed = [r for _, r in sort_runs(data.runs).iterrows() if has_timed_steps(r) and fmetric(r, "step_ms") > 0]
    if not timed:
        return ""

    def disagreement(r: pd.Series) -> float:
        profiled, share = fmetric(r, "optimizer_ms") / fmetric(r, "step_ms"), derive.optimizer_share(r)
        return abs(np.log(profiled / share)) if profiled > 0 and share > 0 else 0.0

    r = max(timed, key=disagreement)
    return (
        "The optimizer share is formed on the steps timed without the profiler, the step and optimizer ms on the "
        f"profiled steps, so the share is not one over the other: {run_label(r)} ({r['run']}), "
        f"{ms(metric(r, 'optimizer_ms'))} of a {ms(metric(r, 'step_ms'))} profiled step, "
        f"{pct(derive.optimizer_share(r))} without the profiler."
    )


OPTIMIZER_RATIOS_APART = 2.0
"""How far (either way) a pipeline pair's profiled optimizer time ratio must be from its unprofiled one for the report
to warn that the two differ: below it they tell the same story."""


def optimizer_ratio_note(data: ReportData) -> str:
    """What A3's optimizer time ratio is for the pipeline pairs: of the profiled steps, which the profiler slows
    unequally there, so it can be far from the ratio of the steps timed without the profiler (the 3-D section's);
    the pair where they are furthest apart, with its four table values. '' without a pair whose two ratios are
    :data:`OPTIMIZER_RATIOS_APART` times apart."""
    runs = data.runs.set_index("run")
    found = []
    for _, c in data.comparisons.iterrows():
        if pp_of(c) <= 1 or not timed_together(c) or not derive.has_value(c, "optimizer_ms_ratio"):
            continue
        muon_run, adamw_run = str(c["muon_run"]), str(c["adamw_run"])
        if muon_run not in runs.index or adamw_run not in runs.index:
            continue
        muon, adamw = runs.loc[muon_run], runs.loc[adamw_run]
        if not all(derive.has_value(r, "timed_optimizer_ms") and fmetric(r, "timed_optimizer_ms") > 0 for r in (muon, adamw)):
            continue
        timed_ratio = fmetric(muon, "timed_optimizer_ms") / fmetric(adamw, "timed_optimizer_ms")
        found.append((abs(np.log(fmetric(c, "optimizer_ms_ratio") / timed_ratio)), c, muon, adamw))
    if not found:
        return ""
    apart, c, muon, adamw = max(found, key=lambda x: x[0])
    if apart < np.log(OPTIMIZER_RATIOS_APART):
        return ""
    # Worded from the two ratios' distance, never a canned "order of magnitude"
    how_far = "by an order of magnitude" if apart >= np.log(10) else "severalfold"
    grid = grid_said(c)
    return (
        "The comparisons table's Muon / AdamW optimizer time ratios are of the profiled steps: for the pipeline runs, whose "
        f"optimizer steps the profiler slows unequally, they can differ {how_far} from those of the steps timed without "
        f"the profiler (the 3-D section's). {grid}: {ratio(c['optimizer_ms_ratio'], 'comparisons.optimizer_ms_ratio')} "
        f"profiled (Muon {ms(metric(muon, 'optimizer_ms'))}, AdamW {ms(metric(adamw, 'optimizer_ms'))}, "
        f"runs.optimizer_ms), against Muon {ms(metric(muon, 'timed_optimizer_ms'))}, "
        f"AdamW {ms(metric(adamw, 'timed_optimizer_ms'))} timed without the profiler (runs.timed_optimizer_ms)."
    )


def adamw_partner(data: ReportData, row: pd.Series) -> str | None:
    """The AdamW run a run is compared with: the comparisons table's partner for a Muon run (the
    same grid and the same work), the run itself for an AdamW run."""
    if str(row["optimizer"]) == "adamw":
        return str(row["run"])
    partner = data.comparisons[data.comparisons["muon_run"] == row["run"]]
    return str(partner.iloc[0]["adamw_run"]) if len(partner) else None


def bytes_rows(data: ReportData) -> tuple[list[list[str]], dict[str, float]]:
    """Per run: optimizer bytes per rank per step from the three sources; Muon/AdamW ratio against
    the AdamW run it is compared with (the comparisons table's pairs)."""
    rows, totals = [], {}
    for _, r in sort_runs(study_runs(data.runs)).iterrows():  # the pipeline's point-to-point bytes: the phases table
        t = derive.require_sources(derive.phase_bytes(data.phases, str(r["run"])), str(r["run"]))
        totals[str(r["run"])] = float(t["analytic"].sum())
        rows.append((r, t))
    out = []
    for label, (r, t) in zip(run_labels(pd.DataFrame([r for r, _ in rows])) if rows else [], rows):
        twin = adamw_partner(data, r)
        twin_total = totals.get(twin) if twin else None
        if twin_total:
            vs_adamw = ratio(totals[str(r["run"])] / twin_total, "analytic bytes ratio", 3)
        elif twin_total is None:
            vs_adamw = "no AdamW twin"
        else:
            vs_adamw = "AdamW sends nothing"
        out.append(
            [
                label,
                str(r["run"]),
                *(mb(t[k].sum()).removesuffix(" MB") for k in derive.BYTE_SOURCES),
                percent(derive.source_gap(t)),
                vs_adamw,
            ]
        )
    return out, totals


def wire_lines(data: ReportData) -> list[str]:
    """Per run with a loopback count (gloo, one machine): what crossed the loopback interface
    against the ring model's bytes, all ranks and all traffic per step; empty when the runs
    table has neither column (older analyses) or no run has a count (NCCL, no /proc/net/dev)."""
    runs = data.runs
    if not (has_values(runs, "loopback_bytes_per_step") and has_values(runs, "ring_bytes_per_step")):
        return []
    out = []
    for _, r in sort_runs(runs).iterrows():
        if not (derive.has_value(r, "loopback_bytes_per_step") and derive.has_value(r, "ring_bytes_per_step")):
            continue
        wire, ring = fmetric(r, "loopback_bytes_per_step"), fmetric(r, "ring_bytes_per_step")
        rel = f" ({wire / ring:.3f}× the ring model)" if ring > 0 else ""
        out.append(f"{run_label(r)} ({r['run']}): {mb(wire)} per step over loopback against {mb(ring)} by the ring model{rel}.")
    return out


def wire_against_ring_paragraph(data: ReportData) -> str:
    """docs/method.md's paragraph on what gloo sent against the ring model, for the DP2·TP2 Muon run of the profile
    with most runs (:func:`representative_runs`) and its AdamW partner (the comparisons table's): each one's loopback
    bytes over the ring model's, the share of the ring model's bytes the reduce-scatter's second pass does not explain
    (the headers), and Muon/AdamW both ways. '' when the profile has no such pair with a loopback count."""
    view = data.of_profile(data.profiles[0])
    runs = view.runs
    if not (has_values(runs, "loopback_bytes_per_step") and has_values(runs, "ring_bytes_per_step")):
        return ""
    pair = pair_at(representative_runs(runs), 2, 2)  # the run that stands for Muon DP2·TP2 everywhere in the report
    if pair is None:
        return ""
    muon_row = pair[0]
    partner = adamw_partner(view, muon_row)
    if partner is None:
        return ""
    adamw_row = runs[runs["run"] == partner].iloc[0]
    measured = {}
    for name, r in (("AdamW", adamw_row), ("Muon", muon_row)):
        if not (derive.has_value(r, "loopback_bytes_per_step") and derive.has_value(r, "ring_bytes_per_step")):
            return ""
        reduce_scatter = view.phases[(view.phases["run"] == r["run"]) & (view.phases["phase"] == DP_REDUCE_SCATTER)]
        wire, ring = fmetric(r, "loopback_bytes_per_step"), fmetric(r, "ring_bytes_per_step")
        measured[name] = (wire, ring, (wire - ring - float(reduce_scatter["trace_bytes"].sum())) / ring)
    (a_wire, a_ring, a_rest), (m_wire, m_ring, m_rest) = measured["AdamW"], measured["Muon"]
    return (
        f"On the CPU benchmark ({muon_row['profile']}, dp=2, tp=2: `{adamw_row['run']}` and `{muon_row['run']}`, "
        f"the traced round) the loopback counter reads {percent(a_wire / a_ring - 1, digits=3)} above the ring model for AdamW "
        f"({mb(a_wire)} vs {mb(a_ring)} per step) and {percent(m_wire / m_ring - 1, digits=3)} for Muon ({mb(m_wire)} vs "
        f"{mb(m_ring)}): the gradient reduce-scatter counted twice accounts for all but {percent(a_rest)} (AdamW) and "
        f"{percent(m_rest)} (Muon) of the ring model's bytes, the headers. Counting every collective of the step, "
        f"Muon/AdamW is {m_wire / a_wire:.3f} on gloo's wire and {m_ring / a_ring:.3f} by the ring model."
    )
