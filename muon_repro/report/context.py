"""The tables -> the report's template context (plain strings, lists and dicts).

Every number is formatted here, through helpers that refuse a missing value with a
:class:`~muon_repro.report.data.MissingMetric` naming it; the templates only place strings. The
few values that may legitimately be absent (no GPU: no CUDA, NCCL or accelerator; a claim no run
can speak to) are written out as such ("none", "not measured"), never left empty.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

import muon_repro
from muon_repro import rundir
from muon_repro.hardware import rows_of_profile
from muon_repro.report import derive, style
from muon_repro.report.convergence_section import convergence_section
from muon_repro.report.data import TABLES, MissingMetric, ReportData, fmetric, is_missing, metric, require_columns
from muon_repro.report.figures import FIGURES
from muon_repro.report.profile_figures import PROFILE_CAPTIONS, wants_profile_figures
from muon_repro.report.regimes_section import regimes_section
from muon_repro.report.selection import first_pair, pair_at, representative_runs, run_label, sort_runs, titled

# (id, heading): the report's sections, in order; the tests look for every heading in the PDF.
SECTIONS = (
    ("summary", "Summary"),
    ("setup", "Setup"),
    ("method", "Method"),
    ("results", "Results"),
    ("decomposition", "The optimizer step, decomposed"),
    ("convergence", "Convergence on real text"),
    ("claims", "Claims"),
    ("regimes", "Where the gains hold, vanish or invert"),
    ("limitations", "Limitations"),
    ("reproduce", "How to reproduce"),
    ("cite", "How to cite"),
)

# How the claimed values read (the claims table has the number; these keep the claim's own wording).
CLAIMED_DISPLAY = {
    "comm_time_dp2_tp2": "0.57×",
    "optimizer_share": "~1.1%",
    "state_memory": "0.5× (50% less)",
    "hybrid_beats_pure": "below 1×",
    "async_slowdown": "~2×",
    "comm_bytes_ratio": "(1, 1.25]×",
    "latency_overhead": "1–3%",
    "muon_leading_steps": "above 0 (fewer steps)",
}
SHORT = {
    "comm_time_dp2_tp2": "communication (transfer) time Muon/AdamW",
    "comm_bytes_ratio": "bytes Muon/AdamW",
    "optimizer_share": "optimizer share of the step",
    "latency_overhead": "Muon step over AdamW step",
    "hybrid_beats_pure": "DP2·TP2 over the faster pure grid",
    "state_memory": "optimizer state Muon/AdamW",
    "async_slowdown": "async over sync",
    "muon_leading_steps": "leading ratio at the end",
}
SUMMARY_LINES = (
    ("Communication", ("comm_bytes_ratio", "comm_time_dp2_tp2")),
    ("Time", ("optimizer_share", "latency_overhead", "hybrid_beats_pure")),
    ("Memory", ("state_memory",)),
    ("Convergence", ("muon_leading_steps",)),
)
# The claims table's verdicts, as it writes them (muon_repro.analysis.claims); the report shows them as they are.
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not measured")
REQUIRED_ENV = ("hostname", "os", "python", "torch", "backend", "host_cpu", "host_cpu_cores", "host_memory_bytes")
# The sections of the repository's method notes the report links to (GitHub's heading anchors;
# tests/test_docs.py checks that each exists).
METHOD_SECTIONS = {
    "communication_model": "docs/method.md#communication-model",
    "wait_and_transfer": "docs/method.md#wait-and-transfer",
    "claims_table": "docs/method.md#claims",
    "phases_table": "docs/method.md#phases",
    "optimizer_state": "docs/method.md#optimizer-state",
    "trace_conventions": "docs/method.md#trace-conventions",
    "clock_alignment": "docs/method.md#clock-alignment-across-ranks",
    "cost_model": "docs/method.md#cost-model",
    "regimes": "docs/method.md#regimes",
}


# ---------------------------------------------------------------- formatting (None never passes)


def _num(value: Any, what: str) -> float:
    if is_missing(value):
        raise MissingMetric(f"metric {what} is missing")
    return float(value)


def ms(value: Any, what: str = "time") -> str:
    v = _num(value, what)
    return f"{v:.0f} ms" if abs(v) >= 100 else (f"{v:.1f} ms" if abs(v) >= 10 else f"{v:.2f} ms")


def pct(value: Any, what: str = "fraction", signed: bool = False) -> str:
    v = 100 * _num(value, what)
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def ratio(value: Any, what: str = "ratio", digits: int = 2) -> str:
    return f"{_num(value, what):.{digits}f}×"


def mb(value: Any, what: str = "bytes") -> str:
    return f"{_num(value, what) / style.MB:.2f} MB"


def mib(value: Any, what: str = "bytes") -> str:
    return f"{_num(value, what) / style.MIB:.1f} MiB"


def gib(value: Any, what: str = "bytes") -> str:
    return f"{_num(value, what) / 2**30:.1f} GiB"


# ---------------------------------------------------------------- claims


def report_verdict(row: pd.Series, runs: pd.DataFrame) -> str:
    """The claims table's verdict, as it is (one vocabulary, :data:`VERDICTS`, decided by the
    analysis from the 95% interval and the claim's region); ``runs`` is not consulted. A verdict
    outside the vocabulary (a claims table from an older analysis) is refused."""
    verdict = str(metric(row, "verdict", "claims", "claim_id"))
    if verdict not in VERDICTS:
        raise MissingMetric(f"metric claims.verdict of claim {row.get('claim_id', '?')} is {verdict!r}, not one of {', '.join(VERDICTS)}: "
                            "re-run `muon-repro analyze`")  # fmt: skip
    return verdict


def _kind(unit: str) -> str:
    """How a claim's numbers read, from its unit: ``ratio`` (×), ``fraction`` (%), ``change`` (signed %), else plain."""
    unit = unit or ""
    if unit.startswith("fraction"):
        return "change" if "- 1" in unit else "fraction"
    return "ratio" if unit.startswith("ratio") else "plain"


def claim_number(value: Any, unit: str, claim_id: str, what: str = "claims.measured_value", digits: int | None = None) -> str:
    """One number of a claim in its unit: ``1.62×``, ``33.6%``, ``+69.6%``."""
    kind, label = _kind(unit), f"{what} ({claim_id})"
    if digits == 0:  # a claim's bound: as few digits as it has (0.456×, 1.5×, 2.2%)
        v = _num(value, label)
        return {"ratio": f"{v:.3g}×", "fraction": f"{100 * v:.3g}%", "change": f"{100 * v:+.3g}%".replace("-", "−")}.get(kind, f"{v:.3g}")
    if kind == "fraction":
        return pct(value, label)
    if kind == "change":
        return pct(value, label, signed=True).replace("-", "−")
    if kind == "ratio":
        return ratio(value, label, digits or (3 if claim_id == "comm_bytes_ratio" else 2))
    return f"{_num(value, label):.3g}"


def claim_measured(row: pd.Series) -> str:
    """The measured value with its 95% interval: ``1.62× (1.48–1.77)``, ``−20.9% (−64.3% to +67.9%)``;
    ``(no spread)`` when the interval is a point (bytes, state: the same on every rank)."""
    cid, unit = str(row["claim_id"]), str(row["unit"])
    if is_missing(row.get("measured_value")):
        return "not measured"
    value = claim_number(row["measured_value"], unit, cid)
    if is_missing(row.get("measured_low")) or is_missing(row.get("measured_high")):
        raise MissingMetric(f"metric claims.measured_low/measured_high is missing for claim {cid} (its measured_value is {value})")
    low = claim_number(row["measured_low"], unit, cid, "claims.measured_low")
    high = claim_number(row["measured_high"], unit, cid, "claims.measured_high")
    if low == high == value:
        return f"{value} (no spread)"
    kind = _kind(unit)
    if kind == "change" or float(row["measured_low"]) < 0:
        return f"{value} ({low} to {high})"
    if kind == "ratio":
        return f"{value} ({low.removesuffix('×')}–{high.removesuffix('×')})"
    return f"{value} ({low.removesuffix('%')}–{high})"


_REGION = re.compile(r"^\s*([\[(])\s*([^,]+?)\s*,\s*([^\])]+?)\s*([\])])\s*$")


def claim_region(region: Any, unit: str, claim_id: str) -> str:
    """The claims table's region (``[0.456, 0.684]``, ``(-inf, 0.03]``) in the claim's unit:
    ``[0.456×, 0.684×]``, ``≤ +3.0%``."""
    if is_missing(region):
        raise MissingMetric(f"metric claims.region is missing for claim {claim_id}")
    m = _REGION.match(str(region))
    if not m:
        raise MissingMetric(f"metric claims.region of claim {claim_id} is {region!r}, not an interval such as [0.45, 0.55]")
    opening, lo, hi, closing = m.groups()

    def bound(text: str) -> float:
        try:
            return float(text)
        except ValueError as exc:
            raise MissingMetric(f"metric claims.region of claim {claim_id} has a bound {text!r} that is not a number") from exc

    low, high = bound(lo), bound(hi)

    def fmt(v: float) -> str:
        return claim_number(v, unit, claim_id, "claims.region", digits=0)

    if math.isinf(low) and math.isinf(high):
        return "any value"
    if math.isinf(low):
        return f"{'≤' if closing == ']' else '<'} {fmt(high)}"
    if math.isinf(high):
        return f"{'≥' if opening == '[' else '>'} {fmt(low)}"
    return f"{opening}{fmt(low)}, {fmt(high)}{closing}"


CLAIM_COLUMNS = ("claim_id", "claim", "source", "claimed_value", "region", "measured_value", "measured_low", "measured_high", "unit",
                 "conditions", "verdict", "explanation")  # fmt: skip


def claims_rows(data: ReportData, profile: str | None = None) -> list[dict[str, str]]:
    """The claims measured on one hardware profile (default: the view's, else the one with most runs)."""
    profile = profile or data.profile or data.profiles[0]
    claims = rows_of_profile(data.claims, profile)
    require_columns(claims, "claims", CLAIM_COLUMNS)
    if claims.empty:
        raise MissingMetric(f"metrics table 'claims' has no rows for profile {profile}")
    rows = []
    for _, c in claims.iterrows():
        cid = str(metric(c, "claim_id", "claims", "claim_id"))
        unit = str(metric(c, "unit", "claims", "claim_id"))
        claimed = CLAIMED_DISPLAY.get(cid) or (claim_number(c["claimed_value"], unit, cid, "claims.claimed_value")
                                               if not is_missing(c["claimed_value"]) else "not stated")  # fmt: skip
        verdict = report_verdict(c, data.runs)
        conditions = "" if is_missing(c["conditions"]) else str(c["conditions"]).strip()
        explanation = "" if is_missing(c["explanation"]) else str(c["explanation"]).strip()
        if verdict != "not measured" and not explanation:
            raise MissingMetric(f"metric claims.explanation is missing for claim {cid} (verdict {verdict})")
        rows.append(
            {
                "id": cid,
                "claim": str(metric(c, "claim", "claims", "claim_id")),
                "source": str(metric(c, "source", "claims", "claim_id")).split(":")[0],
                "source_full": str(c["source"]),
                "claimed": claimed,
                "region": claim_region(c["region"], unit, cid),
                "measured": claim_measured(c),
                "unit": unit,
                "conditions": conditions or "no run",
                "verdict": verdict,
                "explanation": explanation or "no explanation recorded",
            }
        )
    return rows


def claims_matrix(data: ReportData) -> tuple[list[str], list[list[str]], list[str]]:
    """The claims table: one row per claim, one column per hardware profile (its measurement and verdict),
    and each row's measured causes. With one profile it reads as the one-machine table did, the profile named."""
    profiles = data.profiles
    by_profile = {p: {c["id"]: c for c in claims_rows(data, p)} for p in profiles}
    first = by_profile[profiles[0]]
    if len(profiles) == 1:
        header = ["claim", "source", "claimed", "agrees if in", f"measured on {profiles[0]} (95% interval)", "verdict"]
        cells = lambda c: [first[c]["measured"], first[c]["verdict"]]  # noqa: E731
    else:
        header = ["claim", "source", "claimed", "agrees if in", *(f"{p}: measured (95% interval), verdict" for p in profiles)]
        cells = lambda c: [f"{by_profile[p][c]['measured']}, {by_profile[p][c]['verdict']}" if c in by_profile[p] else "no run" for p in profiles]  # noqa: E731
    rows = [[c["claim"], c["source"], c["claimed"], c["region"], *cells(cid)] for cid, c in first.items()]
    notes = [" ".join((f"{p}: " if len(profiles) > 1 else "") + by_profile[p][cid]["explanation"] for p in profiles if cid in by_profile[p])
             for cid in first]  # fmt: skip
    return header, rows, notes


def profiles_note(data: ReportData) -> str:
    """Which hardware profiles the tables hold, and which one the prose and figures describe."""
    profiles, counts = data.profiles, data.runs["profile"].astype(str).value_counts()
    if len(profiles) == 1:
        return f"Every run was recorded on one hardware profile, {profiles[0]} (docs/method.md#hardware-profiles)."
    listed = ", ".join(f"{p} ({int(counts.get(p, 0))} runs)" for p in profiles)
    return (f"The runs were recorded on {len(profiles)} hardware profiles: {listed}. The claims table has a column per profile; "
            f"the other sections and figures describe {profiles[0]}, the profile with most runs "
            f"(the others' are drawn under figures/<profile>/); a figure beside the claims table puts every claim of every "
            f"profile side by side.")  # fmt: skip


def summary_lines(claims: list[dict[str, str]]) -> list[str]:
    by_id = {c["id"]: c for c in claims}
    lines = []
    for name, ids in SUMMARY_LINES:
        parts = [f"{SHORT.get(i, i)} {by_id[i]['measured']} against the claimed {by_id[i]['claimed']}: {by_id[i]['verdict']}"
                 if by_id[i]["verdict"] != "not measured" else f"{SHORT.get(i, i)}: not measured (claimed {by_id[i]['claimed']})"
                 for i in ids if i in by_id]  # fmt: skip
        if parts:
            lines.append(f"{name}: " + "; ".join(parts) + ".")
    if not lines:
        raise MissingMetric("the claims table has none of the claims the summary reports (" + ", ".join(i for _, ids in SUMMARY_LINES for i in ids) + ")")
    return lines


def verdict_counts(claims: list[dict[str, str]]) -> str:
    """``2 reproduced, 3 not reproduced, 1 inconclusive, 1 not measured`` (verdicts with no claim left out)."""
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


# ---------------------------------------------------------------- setup


def _env_value(env: dict[str, str], key: str, run: str) -> str:
    if env.get(key) in (None, ""):
        raise MissingMetric(f"environment field {key!r} is missing for run {run} (metrics table 'environment')")
    return env[key]


def _sha(row: pd.Series) -> str:
    return str(metric(row, "git_sha"))


def environments(data: ReportData) -> list[dict[str, Any]]:
    """One entry per distinct machine and software stack, with the runs recorded on it."""
    require_columns(data.runs, "runs", ("run", "git_sha"))
    groups: dict[tuple, dict[str, Any]] = {}
    for _, r in data.runs.iterrows():
        run = str(r["run"])
        env = data.environment_of(run)
        for key in REQUIRED_ENV:
            _env_value(env, key, run)
        key = (*(env.get(k, "") for k in ("hostname", "torch", "backend", "accelerator", "cuda", "nccl")), _sha(r))
        if key not in groups:
            groups[key] = {"env": env, "sha": _sha(r), "runs": []}
        groups[key]["runs"].append(run)
    out = []
    for g in groups.values():
        env = g["env"]
        accel = env.get("accelerator")
        dirty = env.get("git_dirty") == "True"  # environment values are text
        rows = [
            ("host", f"{env['hostname']} ({env['os']})"),
            ("CPU", f"{env['host_cpu']}, {env['host_cpu_cores']} cores, {gib(env['host_memory_bytes'], 'environment.host_memory_bytes')} memory"),
            ("accelerator", f"{env.get('accelerator_count') or 1} × {accel}"
             + (f", {gib(env['accelerator_memory_bytes'])} each" if env.get("accelerator_memory_bytes") else "") if accel else "none (CPU only)"),
            ("interconnect", str(env["interconnect_topology"]).strip() if env.get("interconnect_topology") else (
                "none between accelerators (one CPU host; ranks are processes talking through gloo)" if not accel else "not recorded")),
            ("Python", env["python"]),
            ("PyTorch", env["torch"]),
            ("CUDA", env.get("cuda") or "not used"),
            ("NCCL", env.get("nccl") or "not used"),
            ("backend", f"{env['backend']}, {env.get('world_size', '?')} ranks" + (f" on {env['nodes']} node(s)" if env.get("nodes") else "")),
            ("torch threads per rank", env.get("torch_num_threads") or "not recorded"),
            ("muon_repro", f"{muon_repro.__version__}, git {g['sha'][:12]}" + (" (uncommitted changes)" if dirty else "")),
        ]  # fmt: skip
        out.append({"rows": rows, "runs": g["runs"], "count": len(g["runs"])})
    return out


def _grid(row: pd.Series) -> str:
    return style.grid_label(int(metric(row, "dp")), int(metric(row, "tp")))


def tokens_per_step(data: ReportData) -> str:
    """``1,024 for every run``, or each distinct value with its runs (runs that differ are never compared)."""
    require_columns(data.runs, "runs", ("tokens_per_step",))
    by_value: dict[int, list[str]] = {}
    for _, r in data.runs.iterrows():
        by_value.setdefault(int(metric(r, "tokens_per_step")), []).append(str(r["run"]))
    if len(by_value) == 1:
        return f"{next(iter(by_value)):,} for every run"
    return "; ".join(f"{v:,} ({', '.join(runs)})" for v, runs in by_value.items())


def workload(data: ReportData) -> list[tuple[str, str]]:
    """Model and training settings (runs table), each with the distinct values the runs used."""

    def distinct(column: str, fmt=str, rows: pd.DataFrame | None = None) -> str:
        values: list[str] = []
        for _, r in (data.runs if rows is None else rows).iterrows():
            text = fmt(metric(r, column))
            if text not in values:
                values.append(text)
        return ", ".join(values)

    def ns_dtype(value: Any) -> str:
        return "the optimizer's default (fp32 on CPU, bf16 on GPU)" if is_missing(value) else str(value)

    require_columns(data.runs, "runs", ("ns_dtype", "tokens_per_step", "seq_len", "dp", "tp", "trials", "steps", "train_steps"))
    ns = ", ".join(dict.fromkeys(ns_dtype(v) for v in data.runs["ns_dtype"]))  # null is a setting: the default
    # Per-DP-rank batch = tokens per step / (dp x seq_len): the grid decides it, the tokens per step do not change.
    batches: dict[str, str] = {}
    for _, r in sort_runs(data.runs).iterrows():
        tokens, dp, seq = int(metric(r, "tokens_per_step")), int(metric(r, "dp")), int(metric(r, "seq_len"))
        batch = f"{tokens // (dp * seq)} × {seq}" if tokens % (dp * seq) == 0 else f"{tokens / (dp * seq):.3g} × {seq}"
        batches.setdefault(_grid(r), batch)
    trials_steps = []
    for _, r in data.runs.iterrows():
        trials, profiled = int(metric(r, "trials")), int(metric(r, "steps"))
        text = f"{trials} × {int(metric(r, 'train_steps'))} steps ({profiled // max(trials, 1)} profiled per trial)"
        if text not in trials_steps:
            trials_steps.append(text)
    return [
        ("model preset", distinct("preset") + f" ({distinct('model_params', lambda p: f'{int(p):,}')} parameters, GPT with tensor-parallel attention and MLP)"),
        ("scale", distinct("scale")),
        ("tokens per step (all DP ranks)", tokens_per_step(data) + "; runs are compared only when they train the same tokens per step"),
        ("batch per DP rank × sequence length", "tokens per step / (DP × sequence length): "
         + ", ".join(f"{grid} {b}" for grid, b in batches.items())),
        ("trials × steps per run", ", ".join(trials_steps) + "; the trials of all configurations are interleaved"),
        ("dtypes", f"gradient reduce-scatter {distinct('reduce_dtype')}, Muon's gathers {distinct('gather_dtype')}, Newton-Schulz {ns}, parameters fp32"),
        ("learning rate, weight decay", f"{distinct('lr')}, {distinct('weight_decay')}"),
    ]  # fmt: skip


# ---------------------------------------------------------------- results tables


def _has(df: pd.DataFrame, column: str) -> bool:
    """Whether a column others may still be adding to the tables is there, with values."""
    return column in df.columns and bool(df[column].notna().any())


def runs_header(data: ReportData) -> list[str]:
    comm = "comm ms (waiting)" if _has(data.runs, "comm_wait_ms") else "comm ms"
    return ["configuration", "run", "trials × steps", "step ms (p10–p90)", "tokens/s", "forward / backward ms", "optimizer ms",
            "optimizer share", comm, "exposed comm ms", "MB sent / rank / step", "state MiB (largest rank)"]  # fmt: skip


def runs_rows(data: ReportData) -> list[list[str]]:
    """Per run, units in the header (ms, MB, MiB) so the cells stay short."""
    runs = data.runs
    require_columns(runs, "runs", ("step_ms", "step_ms_p10", "step_ms_p90", "forward_ms", "backward_ms", "optimizer_ms", "trials", "steps",
                                   "tokens_per_s", "comm_ms", "exposed_comm_ms", "comm_bytes", "state_bytes"))  # fmt: skip
    wait = _has(runs, "comm_wait_ms")
    rows = []
    for _, r in sort_runs(runs).iterrows():
        t = {col: ms(metric(r, col), f"runs.{col}").removesuffix(" ms") for col in
             ("step_ms", "step_ms_p10", "step_ms_p90", "forward_ms", "backward_ms", "optimizer_ms", "comm_ms", "exposed_comm_ms")}  # fmt: skip
        trials, steps = int(metric(r, "trials")), int(metric(r, "steps"))
        comm = t["comm_ms"] + (f" ({ms(metric(r, 'comm_wait_ms'), 'runs.comm_wait_ms').removesuffix(' ms')})" if wait else "")
        rows.append([
            run_label(r), str(r["run"]), f"{trials} × {steps // max(trials, 1)}", f"{t['step_ms']} ({t['step_ms_p10']}–{t['step_ms_p90']})",
            f"{fmetric(r, 'tokens_per_s'):,.0f}", f"{t['forward_ms']} / {t['backward_ms']}", t["optimizer_ms"], pct(derive.optimizer_share(r)),
            comm, t["exposed_comm_ms"], mb(metric(r, "comm_bytes")).removesuffix(" MB"), mib(metric(r, "state_bytes")).removesuffix(" MiB"),
        ])  # fmt: skip
    return rows


COMPARISON_RATIOS = ("comm_ms_ratio", "comm_transfer_ms_ratio", "comm_bytes_ratio", "optimizer_ms_ratio", "step_ms_ratio", "state_bytes_ratio")
COMPARISON_LABELS = {"comm_ms_ratio": "comm time", "comm_transfer_ms_ratio": "comm transfer", "comm_bytes_ratio": "bytes",
                     "optimizer_ms_ratio": "optimizer time", "step_ms_ratio": "step time", "state_bytes_ratio": "state"}  # fmt: skip


def _comparison_columns(comp: pd.DataFrame) -> list[str]:
    """The ratios shown: all of them, the transfer-time ratio only once the analysis writes it."""
    return [c for c in COMPARISON_RATIOS if c != "comm_transfer_ms_ratio" or _has(comp, c)]


def comparison_header(data: ReportData) -> list[str]:
    return ["grid, layout", "Muon run", "AdamW run", "tokens / step", *(COMPARISON_LABELS[c] for c in _comparison_columns(data.comparisons))]


def comparison_rows(data: ReportData) -> list[list[str]]:
    comp = data.comparisons
    cols = _comparison_columns(comp)
    require_columns(comp, "comparisons", ("muon_run", "adamw_run", "dp", "tp", "layout", "tokens_per_step", *cols))
    rows = []
    for _, c in comp.iterrows():
        grid = f"{style.grid_label(int(c['dp']), int(c['tp']))} {str(c['layout']).replace('_', '-')}"
        ratios = [ratio(metric(c, col, "comparisons", "muon_run"), f"comparisons.{col}") for col in cols]
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
    for _, r in sort_runs(data.runs).iterrows():
        t = derive.require_sources(derive.phase_bytes(data.phases, str(r["run"])), str(r["run"]))
        totals[str(r["run"])] = float(t["analytic"].sum())
        rows.append((r, t))
    out = []
    for r, t in rows:
        twin = adamw_partner(data, r)
        twin_total = totals.get(twin) if twin else None
        rel = (ratio(totals[str(r["run"])] / twin_total, "analytic bytes ratio", 3) if twin_total
               else "no AdamW twin" if twin_total is None else "AdamW sends nothing")  # fmt: skip
        out.append([run_label(r), str(r["run"]), *(mb(t[k].sum()).removesuffix(" MB") for k in derive.BYTE_SOURCES),
                    f"{100 * derive.source_gap(t):.2g}%", rel])  # fmt: skip
    return out, totals


def wire_lines(data: ReportData) -> list[str]:
    """Per run with a loopback count (gloo, one machine): what crossed the loopback interface
    against the ring model's bytes, all ranks and all traffic per step; empty when the runs
    table has neither column (older analyses) or no run has a count (NCCL, no /proc/net/dev)."""
    runs = data.runs
    if not (_has(runs, "loopback_bytes_per_step") and _has(runs, "ring_bytes_per_step")):
        return []
    out = []
    for _, r in sort_runs(runs).iterrows():
        if not (derive.has_value(r, "loopback_bytes_per_step") and derive.has_value(r, "ring_bytes_per_step")):
            continue
        wire, ring = fmetric(r, "loopback_bytes_per_step"), fmetric(r, "ring_bytes_per_step")
        rel = f" ({wire / ring:.3f}× the ring model)" if ring > 0 else ""
        out.append(f"{run_label(r)} ({r['run']}): {mb(wire)} per step over loopback against {mb(ring)} by the ring model{rel}.")
    return out


# ---------------------------------------------------------------- the optimizer step, decomposed


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


def decomposition_runs(data: ReportData) -> list[pd.Series]:
    """The runs the decomposition shows: Muon and AdamW at DP2·TP2 (the seed's comparison first),
    else the first grid with both, else the first configured run alone."""
    reps = representative_runs(data.runs)
    pair = pair_at(reps, 2, 2) or first_pair(reps)
    if pair:
        return list(pair)
    return [reps.iloc[0]] if len(reps) else []


def decomposition(data: ReportData, claims: list[dict[str, str]]) -> dict[str, Any]:
    """Per rank, ms per step (mean over trials) of every part of the optimizer step of the runs of
    :func:`decomposition_runs`; beside it the optimizer share (with the claims table's interval
    for the run it measured) and Muon's extra time per token."""
    shown = decomposition_runs(data)
    if not shown:
        return {"rows": [], "header": [], "runs": "", "notes": ["No run records its optimizer, dp and tp: there is no optimizer step to decompose."],
                "beside": [], "split": False}  # fmt: skip
    tables = {str(r["run"]): derive.optimizer_decomposition(data.phases, str(r["run"])) for r in shown}
    split = all(f"{k}_{n}" in t.columns for t in tables.values() for k in derive.SPLIT_PARTS for n in derive.SPLIT_COLUMNS)
    header = [""] + [f"{style.OPTIMIZER_LABELS.get(str(r['optimizer']), str(r['optimizer']))} r{rank}" for r in shown for rank in tables[str(r["run"])].index]
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
        beside.append(f"Optimizer share, {run_label(r)}: {pct(share)}, optimizer step time / training step time (median optimizer step "
                      f"{ms(metric(r, 'optimizer_ms'))}, median training step {ms(metric(r, 'step_ms'))}, over {int(metric(r, 'trials'))} trials × "
                      f"{int(metric(r, 'steps')) // max(int(metric(r, 'trials')), 1)} steps{interval}).")  # fmt: skip
    muon = [r for r in shown if str(r["optimizer"]) == "muon"]
    adamw = [r for r in shown if str(r["optimizer"]) == "adamw"]
    if muon and adamw:
        m, a = muon[0], adamw[0]
        tm, ta = int(metric(m, "tokens_per_step")), int(metric(a, "tokens_per_step"))
        if tm == ta:
            extra_us = (fmetric(m, "step_ms") - fmetric(a, "step_ms")) / tm * 1000.0
            beside.append(f"Muon's extra over AdamW per token: {extra_us:+.1f} µs per token".replace("-", "−")
                          + f" (the difference of the median step times, {ms(metric(m, 'step_ms'))} and {ms(metric(a, 'step_ms'))}, "
                          f"over the {tm:,} tokens each run trains per step).")  # fmt: skip
        else:
            beside.append(f"Muon's extra over AdamW per token: not comparable, the runs train {tm:,} and {ta:,} tokens per step.")

    notes = []
    for r in muon:
        flops = derive.ns_flops_by_rank(data.ranks, str(r["run"]))
        per_rank = ", ".join(f"r{rank} {v / 1e9:.3g}" for rank, v in flops.items())
        if flops.max() > flops.min():
            notes.append(f"Newton-Schulz work differs across the ranks of {run_label(r)} ({per_rank} GFLOP per step, ranks.ns_flops): the ranks "
                         "with less Newton-Schulz work wait in the DP gather for the others" + (" (the waiting rows)." if split else "."))  # fmt: skip
        else:
            notes.append(f"Every rank of {run_label(r)} does the same Newton-Schulz work ({flops.iloc[0] / 1e9:.3g} GFLOP per step, ranks.ns_flops).")
    return {"rows": rows, "header": header, "runs": " and ".join(titled(r) for r in shown), "notes": notes, "beside": beside, "split": split}


# ---------------------------------------------------------------- regimes (computed, never canned numbers)


def regimes(data: ReportData, state: pd.DataFrame, bytes_totals: dict[str, float]) -> list[str]:
    runs, comp = data.runs, data.comparisons
    out = []
    worse, better = [], []
    # Transfer time (from the group's last arrival) when the analysis splits it off: waiting for a
    # slower rank's Newton-Schulz is not communication (docs/method.md#wait-and-transfer).
    col = "comm_transfer_ms_ratio" if _has(comp, "comm_transfer_ms_ratio") else "comm_ms_ratio"
    what = "communication transfer time (waiting for other ranks left out)" if col == "comm_transfer_ms_ratio" else "communication time"
    for _, c in comp.iterrows():
        r_ = float(metric(c, col, "comparisons", "muon_run"))
        name = f"{style.grid_label(int(c['dp']), int(c['tp']))} {str(c['layout']).replace('_', '-')} ({r_:.2f}×, {c['muon_run']})"
        (worse if r_ >= 1 else better).append(name)
    if worse:
        out.append(f"Muon spends as much {what} as AdamW or more at " + "; ".join(worse)
                   + ". The seed's advantage (0.57× at DP2·TP2 on 4 GPUs) inverts there.")  # fmt: skip
    if better:
        out.append(f"Muon spends less {what} than AdamW at " + "; ".join(better) + ".")
    # Newton-Schulz against forward+backward: what makes Muon's optimizer step matter, and how it scales.
    for _, r in representative_runs(runs).iterrows():
        if r["optimizer"] != "muon" or not all(derive.has_value(r, c) for c in ("ns_flops_max_rank", "train_flops", "world_size", "tokens_per_step")):
            continue
        per_rank = fmetric(r, "train_flops") / fmetric(r, "world_size")
        if per_rank > 0:
            out.append(f"{run_label(r)}: Newton-Schulz does {fmetric(r, 'ns_flops_max_rank') / 1e9:.3g} GFLOP per step on the busiest rank, "
                       f"{fmetric(r, 'ns_flops_max_rank') / per_rank:.2g}× that rank's forward+backward ({per_rank / 1e9:.3g} GFLOP at "
                       f"{int(metric(r, 'tokens_per_step')):,} tokens per step). Forward+backward FLOPs grow with the tokens per step, "
                       "Newton-Schulz FLOPs do not (they depend on the matrices alone): the more tokens a step trains, the smaller "
                       "Muon's extra time per token.")  # fmt: skip
        break
    # Layouts: what each costs in bytes against the contiguous layout at the same grid.
    muon = runs[runs["optimizer"] == "muon"]
    for (dp, tp), g in muon.groupby(["dp", "tp"]):
        by_layout = {str(layout): bytes_totals[str(sort_runs(sub).iloc[0]["run"])] for layout, sub in g.groupby("layout", sort=False)}
        if "contiguous" in by_layout and len(by_layout) > 1:
            base = by_layout["contiguous"]
            parts = [f"{k.replace('_', '-')} {v / base:.2f}×" for k, v in by_layout.items() if k != "contiguous"]
            out.append(f"ZeRO-1 layout at {style.grid_label(int(dp), int(tp))}: optimizer bytes against the contiguous layout: "
                       + ", ".join(parts) + " (bucketed gathers every matrix on every DP rank; whole-matrix needs no DP gather).")  # fmt: skip
    pure_tp = comp[(comp["dp"] == 1) & (comp["tp"] > 1)]
    for _, c in pure_tp.iterrows():
        out.append(f"{style.grid_label(1, int(c['tp']))}: with no data parallelism AdamW has no optimizer communication at all, so every byte of "
                   f"Muon's TP gather is extra ({ratio(c['comm_bytes_ratio'], 'comparisons.comm_bytes_ratio')} AdamW's bytes, the model's own TP traffic included).")  # fmt: skip
    # State: the 50% saving applies to the matrices only.
    st = state.set_index("run")
    for _, r in representative_runs(runs).iterrows():
        if r["optimizer"] != "muon" or r["run"] not in st.index:
            continue
        m_b, a_b = float(st.loc[r["run"], "muon"]), float(st.loc[r["run"], "adamw"])
        if m_b + a_b <= 0:
            continue
        matrix_share = (m_b / 4) / (m_b / 4 + a_b / 8)  # fp32: 1 value per Muon element, 2 per AdamW element
        out.append(f"Optimizer state: {100 * matrix_share:.0f}% of the parameters are hidden matrices (Muon, one moment); embeddings, head and norms "
                   f"keep AdamW's two, so the best ratio here is {(matrix_share + 2 * (1 - matrix_share)) / 2:.2f}×, not 0.5×; "
                   "the larger the model, the closer to 0.5×.")  # fmt: skip
        uneven = [(float(st.loc[u, "largest"]) / (float(st.loc[u, "muon"] + st.loc[u, "adamw"])), u) for u in muon["run"] if u in st.index]
        worst, u = max(uneven)
        if worst > 1.2:
            u_row = runs[runs["run"] == u].iloc[0]
            out.append(f"{run_label(u_row)} ({u}): ZeRO-1 chunks split the state unevenly; the largest rank holds {mib(st.loc[u, 'largest'])} "
                       f"against a mean of {mib(st.loc[u, 'muon'] + st.loc[u, 'adamw'])} (a rank whose chunk is the embedding or head pays AdamW's "
                       "two moments for it), so the memory that limits a run saves less than the mean suggests.")  # fmt: skip
        transient = float(st.loc[r["run"], "transient"])
        twin = adamw_partner(data, r)
        if twin and twin in st.index:
            saved = float(st.loc[twin, "adamw"] + st.loc[twin, "muon"]) - (m_b + a_b)
            if transient > saved > 0:
                out.append(f"{run_label(r)}: Muon's transient Newton-Schulz gather buffers peak at {mib(transient)} per rank, more than the "
                           f"{mib(saved)} of state it saves; at this model size the peak, not the steady state, decides memory.")  # fmt: skip
        break
    shares = pd.Series([derive.optimizer_share(r) for _, r in muon.iterrows()], dtype="float64")
    if len(shares) and float(shares.min()) > 0.05:
        span = pct(shares.min()) if pct(shares.min()) == pct(shares.max()) else f"{pct(shares.min())}–{pct(shares.max())}"
        out.append(f"Compute-bound optimizer: on this hardware the Muon optimizer step is {span} of the step "
                   "(Newton-Schulz on CPU cores shared by all ranks): the optimizer's computation, not its communication, decides "
                   "Muon's step time here.")  # fmt: skip
    if not out:
        out.append("No regime in these runs where Muon's measured gains disappear or invert.")
    return out


def limitations(data: ReportData) -> list[str]:
    runs = data.runs
    backends = sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])})
    out = []
    if any(str(d) != "cuda" for d in runs["device"]):
        out.append("gloo on CPU is not NCCL over PCIe or NVLink: collectives are memory copies between processes on the same host, "
                   "all ranks share the host's cores (so compute and communication contend), and Newton-Schulz runs in fp32 on the CPU. "
                   "Times answer 'how does the data flow behave', not 'how fast is it on GPUs'.")  # fmt: skip
    out.append(f"Backends and devices measured: {', '.join(backends)}. A claim made on GPUs is judged here by the same rule as any "
               "other; where it does not hold, its explanation names the measured cause on this machine.")  # fmt: skip
    shapes = sorted({(int(metric(r, "trials")), int(metric(r, "steps")) // max(int(metric(r, "trials")), 1)) for _, r in runs.iterrows()})
    out.append("Each run profiles " + ", ".join(f"{t} trial(s) × {s} step(s)" for t, s in shapes) + " after warm-up; the 95% intervals "
               "of the claims say how far so few samples pin the medians down.")  # fmt: skip
    spreads = []
    for _, r in runs.iterrows():
        per_trial = derive.trial_medians(data.steps, str(r["run"]))
        if len(per_trial) > 1 and float(per_trial.min()) > 0:
            spreads.append((float(per_trial.max() / per_trial.min()), r, per_trial))
    if spreads:
        ratio_, r, per_trial = max(spreads, key=lambda x: x[0])
        out.append(f"Trial-to-trial spread: the median step time of one trial differs from another's by up to {ratio_:.2f}× "
                   f"({run_label(r)}: {', '.join(ms(v) for v in per_trial)} in its {len(per_trial)} trials); the machine is shared, "
                   "which is why the trials of all configurations are interleaved.")  # fmt: skip
    dup = runs.groupby(["optimizer", "dp", "tp", "layout"])["step_ms"].agg(["count", "min", "max"])
    dup = dup[dup["count"] > 1]
    for (opt, dp, tp, layout), d in dup.iterrows():
        out.append(f"Run-to-run spread: {style.OPTIMIZER_LABELS.get(opt, opt)} {style.grid_label(int(dp), int(tp))} {layout} was recorded "
                   f"{int(d['count'])} times, with median step times from {ms(d['min'])} to {ms(d['max'])}.")  # fmt: skip
    out.append("Loss is shown over a handful of steps as a check that both optimizers learn; it is not a convergence comparison.")
    out.append("Bytes count what each rank sends under the ring model (docs/method.md, Communication model); the trace's bytes come "
               "from call sizes, not from a NIC counter.")  # fmt: skip
    return out


# ---------------------------------------------------------------- reproduce, cite


def reproduce(data: ReportData, invocations: Iterable[str]) -> list[str]:
    """The recording commands (runs.command, each once), then the commands that made this report."""
    require_columns(data.runs, "runs", ("command",))
    recorded = list(dict.fromkeys(str(c) for c in data.runs["command"] if not is_missing(c) and str(c).strip()))
    if not recorded:
        raise MissingMetric("metric runs.command is missing for every run: no run records the command that made it")
    return [*recorded, *invocations]


def bibtex(data: ReportData) -> tuple[str, str]:
    shas = [str(s) for s in data.runs["git_sha"] if not is_missing(s)] if "git_sha" in data.runs.columns else []
    sha = shas[0] if shas else "unknown"
    artifact = (
        "@software{muon_repro,\n"
        "  title = {muon\\_repro: a reproducibility artifact for Distributed Muon},\n"
        "  author = {{muon\\_repro developers}},\n"
        f"  version = {{{muon_repro.__version__}}},\n"
        f"  note = {{git {sha[:12]}; traces, tables, figures and this report}},\n"
        "  year = {2025}\n"
        "}"
    )
    paper = (
        "@article{liu2025muon,\n"
        "  title = {Muon is Scalable for LLM Training},\n"
        "  author = {Jingyuan Liu and Jianlin Su and Xingcheng Yao and Zhejun Jiang and Guokun Lai and Yulun Du and others},\n"
        "  journal = {arXiv preprint arXiv:2502.16982},\n"
        "  year = {2025}\n"
        "}"
    )
    return artifact, paper


# ---------------------------------------------------------------- the context


FIGURE_CAPTIONS = {
    "comm_time_by_kind": "Communication time per step by collective kind, Muon beside AdamW at each process grid.",
    "step_breakdown": "Where a step's time goes, per configuration: by phase, and by what the machine does.",
    "optimizer_overhead": "The optimizer's share of the step, per configuration, against the seed's ~1.1%.",
    "state_memory": "Optimizer-state memory per rank (steady state) and Muon's transient gather buffers.",
    "bytes_by_layout": "Optimizer bytes per rank per step by ZeRO-1 layout: analytic model, run-time ledger and trace.",
    "grid_comparison": "Step time per DP × TP process grid: which grid wins, and by how much.",
    "timeline": "One step of every rank from the traces: the DP gather, TP gather, Newton-Schulz, TP shard, DP shard flow.",
    "loss": "Training loss per step, Muon vs AdamW.",
    "convergence_sweep": "Held-out loss on unseen Shakespeare plays over the learning-rate sweep, Muon and AdamW.",
    "leading_steps": "Muon leading steps: smoothed training loss at the best learning rates, leading steps and leading ratio.",
}


def method_links(out_dir: Path, root: Path) -> dict[str, str]:
    """Links from the report to the sections of the repository's ``docs/method.md`` (``root`` is
    the artifact root, the repository's in its own layout: traces/, metrics/, report/, docs/)."""
    links = {}
    for key, target in METHOD_SECTIONS.items():
        path, anchor = target.split("#")
        links[key] = Path(os.path.relpath(Path(root).resolve() / path, Path(out_dir).resolve())).as_posix() + "#" + anchor
    return links


def build_context(data: ReportData, figure_paths: dict[str, Path], out_dir: Path, *, invocations: Iterable[str]) -> dict[str, Any]:
    """The whole template context; raises MissingMetric (a ValueError) naming the first missing metric."""
    missing_figs = [name for name in FIGURES if name not in figure_paths or not Path(figure_paths[name]).is_file()]
    if missing_figs:
        raise FileNotFoundError(f"figure(s) {', '.join(missing_figs)} not found: run `muon-repro figures` first")
    state = derive.state_by_run(data.ranks, data.runs["run"])
    claims = claims_rows(data)
    bytes_table, totals = bytes_rows(data)
    runs = data.runs
    metrics_dir = Path(data.metrics_dir)

    def rel(p: str | Path) -> str:
        return Path(os.path.relpath(Path(p).resolve(), Path(out_dir).resolve())).as_posix()

    tables = {name: rel(metrics_dir / f"{name}.csv") for name in TABLES if (metrics_dir / f"{name}.csv").is_file()}
    profile_figure = None  # numbered after the results' figures, before the regime section's
    if wants_profile_figures(data.claims):
        path = Path(figure_paths.get("claims_by_profile", ""))
        if not path.is_file():
            raise FileNotFoundError(f"figure claims_by_profile not found at {path}: run `muon-repro figures` first")
        profile_figure = {"name": "claims_by_profile", "src": rel(path), "svg": rel(path.with_suffix(".svg")),
                          "caption": PROFILE_CAPTIONS["claims_by_profile"]}  # fmt: skip
    return {
        "title": "Distributed Muon vs AdamW: communication, time and memory, reproduced",
        "sections": dict(SECTIONS),
        "section_order": [s for s, _ in SECTIONS],
        "summary": summary_lines(claims),
        "n_runs": str(len(runs)),
        "backends": ", ".join(sorted({f"{b} on {d}" for b, d in zip(runs["backend"], runs["device"])})),
        "environments": environments(data),
        "workload": workload(data),
        "tokens_per_step": tokens_per_step(data),
        "runs_header": runs_header(data),
        "runs_comm_wait": _has(runs, "comm_wait_ms"),
        "runs_rows": runs_rows(data),
        "comparison_header": comparison_header(data),
        "comparison_rows": comparison_rows(data),
        "decomposition": decomposition(data, claims),
        "convergence": convergence_section(data.convergence, data.leading_steps),
        "bytes_header": ["configuration", "run", "analytic MB", "ledger MB", "trace MB", "largest gap", "vs AdamW (analytic)"],
        "bytes_rows": bytes_table,
        "wire": wire_lines(data),
        "figures": [{"name": n, "src": rel(figure_paths[n]), "svg": rel(Path(figure_paths[n]).with_suffix(".svg")), "caption": FIGURE_CAPTIONS[n]}
                    for n in FIGURES],
        "claims": claims,
        **dict(zip(("claims_header", "claims_rows", "claims_notes"), claims_matrix(data))),
        "profiles_note": profiles_note(data),
        "verdict_counts": verdict_counts(claims),
        "trials": ", ".join(str(t) for t in sorted({int(metric(r, "trials")) for _, r in runs.iterrows()})),
        "sources": sorted({c["source_full"] for c in claims}),
        "regimes": regimes(data, state, totals),
        "profile_figure": profile_figure,
        "regime": regimes_section(data, figure_paths, rel, len(FIGURES) + 1 + (profile_figure is not None)),
        "limitations": limitations(data),
        "commands": reproduce(data, invocations),
        "tables": tables,
        "method": method_links(out_dir, metrics_dir.parent),
        "phases": {"coarse": list(rundir.COARSE_PHASES), "optimizer": list(rundir.OPTIMIZER_PHASES)},
        "bibtex": bibtex(data),
        "version": muon_repro.__version__,
    }
