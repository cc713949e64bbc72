"""The report's "Results" tables: per run (times, bytes, state), per Muon/AdamW comparison (ratios),
optimizer bytes from the three sources, and what gloo sent over loopback against the ring model."""

from __future__ import annotations

import pandas as pd

from muon_repro.phases import DP_REDUCE_SCATTER
from muon_repro.report import derive, style
from muon_repro.report.data import ReportData, fmetric, is_missing, metric, require_columns
from muon_repro.report.formatting import mb, mib, ms, pct, percent, ratio
from muon_repro.report.selection import (
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


def runs_header(data: ReportData) -> list[str]:
    comm = "comm ms (waiting)" if has_values(data.runs, "comm_wait_ms") else "comm ms"
    return [
        "configuration",
        "run",
        "trials × steps",
        "step ms (p10–p90)",
        "tokens/s (no profiler)",
        "forward / backward ms",
        "optimizer ms",
        "optimizer share",
        comm,
        "exposed comm ms",
        "MB sent / rank / step",
        "state MiB (largest rank)",
    ]


def runs_rows(data: ReportData) -> list[list[str]]:
    """Per run, units in the header (ms, MB, MiB) so the cells stay short."""
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
        comm = t["comm_ms"] + (f" ({ms(metric(r, 'comm_wait_ms'), 'runs.comm_wait_ms').removesuffix(' ms')})" if wait else "")
        rows.append(
            [
                label,
                str(r["run"]),
                f"{trials} × {steps // max(trials, 1)}",
                f"{t['step_ms']} ({t['step_ms_p10']}–{t['step_ms_p90']})",
                f"{fmetric(r, 'tokens_per_s'):,.0f}",
                f"{t['forward_ms']} / {t['backward_ms']}",
                t["optimizer_ms"],
                pct(derive.optimizer_share(r)),
                comm,
                t["exposed_comm_ms"],
                mb(metric(r, "comm_bytes")).removesuffix(" MB"),
                mib(metric(r, "state_bytes")).removesuffix(" MiB"),
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


def _comparison_columns(comp: pd.DataFrame) -> list[str]:
    """The ratios shown: all of them, the transfer-time ratio only once the analysis writes it."""
    return [c for c in COMPARISON_RATIOS if c != "comm_transfer_ms_ratio" or has_values(comp, c)]


def comparison_header(data: ReportData) -> list[str]:
    return [
        "grid, layout",
        "Muon run",
        "AdamW run",
        "tokens / step",
        *(COMPARISON_LABELS[c] for c in _comparison_columns(data.comparisons)),
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
        grid = f"{style.grid_label(int(c['dp']), int(c['tp']), pp_of(c))} {str(c['layout']).replace('_', '-')}"
        ratios = [comparison_ratio(c, col) for col in cols]
        tokens = f"{int(metric(c, 'tokens_per_step', 'comparisons', 'muon_run')):,}"
        rows.append([grid, str(c["muon_run"]), str(c["adamw_run"]), tokens, *ratios])
    return rows


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
