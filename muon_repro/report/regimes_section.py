"""What "Where the gains hold, vanish or invert" shows besides its bullets: its figures' captions (the figures are
:mod:`muon_repro.report.regime_figures`'s), the cost model's prediction errors, the tokens per step at which Muon's
overhead falls to the claimed levels, the scale-out, and the overlap variants. Every number comes from a table
(``regimes``, ``predictions``, ``regime_model``, ``regime_thresholds``, ``runs``, ``claims``); nothing is canned.
The section's bullets are :mod:`muon_repro.report.caveats_section`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from muon_repro.claims import PAPER_LATENCY, STUDY_SHARE, claimed_level, level_of
from muon_repro.hardware import rows_of_profile
from muon_repro.report.claims_section import claim_note
from muon_repro.report.costmodel_error import prediction_rows, prediction_summary
from muon_repro.report.data import ReportData, fmetric, is_missing
from muon_repro.report.figure_files import checked_figures
from muon_repro.report.formatting import count, percent
from muon_repro.report.plotting import empty_reason
from muon_repro.report.regime_figures import REGIME_FIGURES, STUDY_MODEL, main_axis
from muon_repro.rundir import RENAMED_MACHINES, split_measured_compute
from muon_repro.values import counted

REGIME_CAPTIONS = {
    "regime_map": "Muon's optimizer share (left) and its extra step time over AdamW (right) against tokens per step, DP2·TP2, "
    "contiguous layout, one colour per width: the regime sweep's measured points with 95% intervals and the cost model's lines "
    f"for this machine; the original study's ~{STUDY_SHARE.percent} (dotted) on the share, the paper's {PAPER_LATENCY.percent} "
    "(dashed) on the extra step time.",
    "closed_form": "Newton-Schulz time over forward+backward time against tokens per step / d_model: measured (Muon's optimizer "
    "time beyond its AdamW twin's, over the twin's forward+backward), the exact FLOP ratio of the busiest rank (hollow) and the "
    "closed form (10/3)·d/T times the ranks that repeat each matrix.",
    # {large} and {scale_out}: from the regime_model table (profiles_caption)
    "profiles": "The cost model on the shipped profiles (predictions, bf16 training). Left: Muon's extra step time against "
    "tokens per step for the original study's 4 GPUs (DP2·TP2) and one 8-GPU H100 node (DP4·TP2), at the gpu scale's model "
    f"and at {{large}}, with the paper's {PAPER_LATENCY.percent} dashed. Right: {{scale_out}}: the extra step time against "
    f"the paper's {PAPER_LATENCY.percent} (dashed), the optimizer share against the original study's ~{STUDY_SHARE.percent} "
    "(dotted), each line in its quantity's colour.",
}
# The cost model's models named after the model whose sizes they take (muon_repro.costmodel.records.MODEL_7B): this GPT's
# MLP has two matrices where LLaMA's has three, so "7b" has fewer parameters than its name says; the table has them.
MODEL_SHAPES = {"7b": "LLaMA-7B"}
# What a shape-named model keeps of its namesake and what it does not, said where the report lists the models priced
SHAPE_NOTES = {
    "7b": "which keeps LLaMA's widths and depth but this repository's two-matrix GELU MLP, not LLaMA's three-matrix "
    "SwiGLU (fewer parameters than LLaMA's; two MLP matrices per block for Newton-Schulz, not three)"
}
MACHINE_NAMES = {
    "4xRTXA4000-pcie-nccl": "Wei's study: 4x RTX A4000, PCIe Gen4 x4",
    "h100-8x-nvlink": "8x H100 NVLink node",
    "h100-multinode-ib400": "H100 nodes, 400 Gb/s IB",
}
METRIC_NAMES = {"optimizer_share": "Muon's optimizer share", "muon_extra": "Muon step / AdamW step - 1"}


def machine_name(machine: object) -> str:
    """A shipped profile's name in tables (tables written before a profile was renamed: by its new name); a shipped
    profile's links priced with a device's measured kernels (``<links>+<device>-compute``,
    :func:`muon_repro.costmodel.records.measured_compute_profile`) by both."""
    if (hybrid := split_measured_compute(str(machine))) is not None:
        return f"{machine_name(hybrid[0])} links, {hybrid[1]}'s measured compute"
    name = RENAMED_MACHINES.get(str(machine), str(machine))
    return MACHINE_NAMES.get(name, name)


def model_said(model: str, table: pd.DataFrame) -> str:
    """A cost-model model as the report names it: ``the LLaMA-7B-shaped model (7b, 5,295,575,040 parameters)``, its
    parameters the ``regime_model`` table's (``model_params``); without a row of it there, its shape and key alone."""
    key = str(model)
    rows = table[table["model"].astype(str) == key] if {"model", "model_params"} <= set(table.columns) else table.iloc[0:0]
    params = ", ".join(f"{p:,}" for p in sorted({int(p) for p in rows["model_params"].dropna()}))
    said = f"{key}, {params} parameters" if params else key
    shape = MODEL_SHAPES.get(key)
    return f"the {shape}-shaped model ({said})" if shape else (f"{key} ({params} parameters)" if params else key)


def models_said(table: pd.DataFrame) -> str:
    """The models the cost model prices on the shipped profiles (``regime_model`` rows of kind ``profile``), each by
    :func:`model_said`: ``gpu-scale-369m (369,148,928 parameters) and the LLaMA-7B-shaped model (7b, ...)``."""
    models = list(dict.fromkeys(_of_kind(table, "profile")["model"].astype(str)))
    return " and ".join(model_said(m, table) + (f", {SHAPE_NOTES[m]}" if m in SHAPE_NOTES else "") for m in models)


def _of_kind(table: pd.DataFrame, kind: str) -> pd.DataFrame:
    """``regime_model``'s rows of one kind (``profile``: the shipped profiles' grid; ``scale_out``), none without it."""
    return table[table["kind"] == kind] if "kind" in table.columns else table.iloc[0:0]


def scale_out_where(table: pd.DataFrame) -> str:
    """Where the cost model scales out (``regime_model`` rows of kind ``scale_out``): ``at 4,194,304 tokens per step on
    32 to 1,024 GPUs of H100 nodes, 400 Gb/s IB, TP8 inside a node, DP across nodes``; '' without them."""
    scale = _of_kind(table, "scale_out")
    if scale.empty:
        return ""
    gpus = scale["gpus"].astype(int)
    tokens = ", ".join(f"{t:,}" for t in sorted(set(scale["tokens_per_step"].astype(int))))
    machines = "; ".join(machine_name(m) for m in dict.fromkeys(scale["machine"]))
    tp = "/".join(str(t) for t in sorted(set(scale["tp"].astype(int))))
    on = f"{gpus.min():,} to {gpus.max():,} GPUs of {machines}"
    return f"at {tokens} tokens per step on {on}, TP{tp} inside a node, DP across nodes"


def scale_out_said(table: pd.DataFrame) -> str:
    """The scale-out's model and where: ``the LLaMA-7B-shaped model (7b, 5,295,575,040 parameters) at ...``."""
    scale = _of_kind(table, "scale_out")
    if scale.empty:
        return ""
    return " and ".join(model_said(m, table) for m in dict.fromkeys(scale["model"].astype(str))) + " " + scale_out_where(table)


def profiles_caption(table: pd.DataFrame) -> str:
    """The profiles figure's caption, its models and its scale-out said from ``regime_model``."""
    grid = _of_kind(table, "profile")
    large = [m for m in dict.fromkeys(grid["model"].astype(str)) if m != STUDY_MODEL]
    scale = list(dict.fromkeys(_of_kind(table, "scale_out")["model"].astype(str)))
    models = " and ".join(model_said(m, table) for m in large) or "no other model"
    if not scale:
        right = "no scale-out"
    elif scale == large[-1:]:  # the left panel's last model, named there
        right = f"the latter {scale_out_where(table)}"
    else:
        right = scale_out_said(table)
    return REGIME_CAPTIONS["profiles"].format(large=models, scale_out=right)


def regimes_section(
    data: ReportData, figure_paths: dict[str, Path], rel: Callable[[str | Path], str], first_number: int
) -> dict[str, Any]:
    """The section's context: figures (numbered from ``first_number``), tables and lines."""
    checked_figures(figure_paths, REGIME_FIGURES)
    return {
        "figures": [
            {
                "name": n,
                "src": rel(figure_paths[n]),
                "svg": rel(Path(figure_paths[n]).with_suffix(".svg")),
                "caption": profiles_caption(data.regime_model) if n == "profiles" else REGIME_CAPTIONS[n],
                "empty": empty_reason(figure_paths[n]),
            }
            for n in REGIME_FIGURES
        ],
        "first_number": first_number,
        "sweep": sweep_lines(data.regimes),
        "predictions_header": [
            "run",
            "recorded",
            "step ms",
            "predicted",
            "error",
            "as calibrated",
            "optimizer ms",
            "predicted",
            "error",
        ],
        "predictions_rows": prediction_rows(data.predictions),
        "predictions_summary": prediction_summary(data.predictions) + share_summary(data.regimes),
        "thresholds_header": list(THRESHOLDS_HEADER),
        "thresholds_rows": threshold_rows(data.regime_thresholds),
        "thresholds_note": threshold_range_note(data.regime_thresholds),
        "scale_out_header": ["GPUs", "grid", "Muon step s", "AdamW step s", "Muon extra", "Muon optimizer share", "Muon comm ms"],
        "scale_out_rows": scale_out_rows(data.regime_model),
        "scale_out_said": scale_out_said(data.regime_model),
        "models_said": models_said(data.regime_model),
        "overlap": overlap_lines(data),
    }


def _pct(value: Any, digits: int = 2) -> str:
    return "–" if is_missing(value) else percent(value, digits=digits)


def _tokens(value: Any, missing: str = "not reached (>134M)") -> str:
    """Tokens per step as '223k' or '1.29M' (k = 1,000, M = 1,000,000)."""
    if is_missing(value):
        return missing
    return count(value, "tokens per step")


def _held_out_said(held_out: pd.DataFrame) -> str:
    """The held-out points by their set: those still held out validate the cost model; an earlier set the model's
    last change saw (first_held_out) no longer does."""
    validating = int(held_out["held_out"].fillna(False).astype(bool).sum()) if "held_out" in held_out.columns else 0
    seen = len(held_out) - validating
    said = f"{len(held_out)} held-out points: {validating} that validate the cost model"
    return said + (f", {seen} of an earlier held-out set that its last change saw" if seen else "")


def sweep_lines(regimes: pd.DataFrame) -> list[str]:
    """What the sweep measured, in words: the range of the optimizer share and Muon's extra, and the inversions."""
    if regimes.empty:
        return ["No regime sweep in these tables: `muon-repro regimes` records it (about 6 minutes a trial on 2 cores)."]
    held = regimes["validation_set"].notna() if "validation_set" in regimes.columns else pd.Series(False, regimes.index)
    measured = regimes[regimes["optimizer"] == "muon"].assign(held=held)  # every point, for where the extra vanishes
    held_out, regimes = regimes[held], regimes[~held]  # the validation points are the predictions' business
    muon = regimes[regimes["optimizer"] == "muon"]
    main = main_axis(regimes)
    lines = [
        f"The sweep: {len(regimes)} points ({regimes['d_model'].nunique()} widths, tokens per step "
        f"{int(regimes['tokens_per_step'].min()):,}–{int(regimes['tokens_per_step'].max()):,}, "
        f"{regimes[['dp', 'tp']].drop_duplicates().shape[0]} DP×TP shapes, {regimes['layout'].nunique()} layouts), "
        f"{int(regimes['trials'].max())} interleaved trials each, timed without the profiler"
        + (f", and {_held_out_said(held_out)}." if len(held_out) else ".")
    ]
    for width, rows in main.groupby("d_model"):
        lo, hi = rows.loc[rows["tokens_per_step"].idxmin()], rows.loc[rows["tokens_per_step"].idxmax()]
        lines.append(
            f"d_model {int(width)}: Muon's optimizer share {_pct(lo['optimizer_share'])} at {int(lo['tokens_per_step']):,} "
            "tokens, "
            f"{_pct(hi['optimizer_share'])} [{_pct(hi['optimizer_share_lo'])}, {_pct(hi['optimizer_share_hi'])}] at "
            f"{int(hi['tokens_per_step']):,}; Muon's step over AdamW's {_pct(lo['muon_extra'])} → {_pct(hi['muon_extra'])} "
            f"[{_pct(hi['muon_extra_lo'])}, {_pct(hi['muon_extra_hi'])}]."
        )
    # over every measured point, the held-out ones named as such: a list of the sweep's alone read as complete
    vanished = measured[(measured["muon_extra_lo"] <= 0) & measured["muon_extra_lo"].notna()]
    if len(vanished):
        lines.append(
            "Where Muon's extra step time is not distinguishable from zero (its 95% interval reaches 0): "
            + ", ".join(_point(r, _pct(r.muon_extra)) for r in vanished.itertuples())
            + "."
        )
    inverted = measured[measured["muon_extra_hi"] < 0]
    if len(inverted):
        lines.append("Where Muon's step is faster than AdamW's: " + ", ".join(_point(r) for r in inverted.itertuples()) + ".")
    for (dp, tp, layout), rows in muon[(muon["dp"] != 2) | (muon["tp"] != 2) | (muon["layout"] != "contiguous")].groupby(
        ["dp", "tp", "layout"]
    ):
        parts = ", ".join(
            f"{_pct(r.muon_extra)} at {int(r.tokens_per_step):,} tokens" for r in rows.sort_values("tokens_per_step").itertuples()
        )
        lines.append(
            f"DP{int(dp)}·TP{int(tp)} {str(layout).replace('_', '-')} at d_model {int(rows['d_model'].iloc[0])}: Muon's step "
            f"over AdamW's {parts}."
        )
    return lines


def _point(row: Any, value: str = "") -> str:
    """A point's run name, then in parentheses ``value`` and whether the point is held out."""
    said = ", ".join(part for part in (value, "held out" if row.held else "") if part)
    return row.run.split("/")[-1] + (f" ({said})" if said else "")


def share_summary(regimes: pd.DataFrame) -> str:
    """How well the model predicts Muon's optimizer share of the step, the quantity the regime map rests on (its
    Muon points only: an AdamW point's share is no point of the map)."""
    muon = regimes["optimizer"].astype(str) == "muon"
    rows = regimes[muon & regimes["predicted_optimizer_share"].notna() & (regimes["optimizer_share"] > 0)]
    if rows.empty:
        return ""
    error = (rows["predicted_optimizer_share"].astype(float) / rows["optimizer_share"].astype(float) - 1).abs()
    return (
        f" Muon's optimizer share of the step, the regime map's quantity: median |error| {error.median():.1%} over the "
        f"{counted(len(rows), 'Muon sweep point')} (worst {error.max():.0%}, {rows.loc[error.idxmax(), 'run']})."
    )


THRESHOLDS_HEADER = ("profile", "model", "grid", "Muon's overhead", "claimed level", "tokens/step at that level (range)")


def threshold_rows(thresholds: pd.DataFrame) -> list[list[str]]:
    """One row per profile, model, grid and metric: the tokens per step at which the metric falls to the level a claim
    states of that same quantity (the optimizer share to the original study's ~1.1%, the extra step time to the paper's
    3%), with the range the model's validated error allows (regime_thresholds tokens_per_step_low / _high)."""
    rows = []
    for (machine, model, dp, tp, metric), g in thresholds.groupby(["machine", "model", "dp", "tp", "metric"], sort=False):
        level = claimed_level(str(metric))
        at = {level_of(r.level): r for r in g.itertuples()}
        rows.append(
            [
                machine_name(machine),
                str(model),
                f"DP{int(dp)}·TP{int(tp)}",
                METRIC_NAMES.get(str(metric), str(metric)),
                f"{level.percent} ({level.label.rsplit(' ', 1)[0]})",
                _threshold(at.get(level)),
            ]
        )
    return rows


def threshold_range_note(thresholds: pd.DataFrame) -> str:
    """Why thresholds carry no range, when none does: the table's own ``error_basis`` (no held-out runs on GPUs)."""
    if thresholds.empty or ("range_coverage" in thresholds.columns and thresholds["range_coverage"].notna().any()):
        return ""
    basis = thresholds["error_basis"].dropna().astype(str) if "error_basis" in thresholds.columns else pd.Series([], dtype=str)
    why = basis.iloc[0] if len(basis) else "no error spread recorded"
    return f"No threshold has a range: the model's error on these profiles is {why} (regime_thresholds.error_basis)."


def _threshold(row) -> str:
    """A threshold as '106k (80k–150k, 90%)': the predicted crossing, then where the true curve could cross at the
    range's stated coverage; '>134M' where it does not cross within the grid."""
    if row is None:
        return "–"
    end = getattr(row, "grid_max_tokens", None)
    beyond = "beyond the grid" if is_missing(end) else f">{_tokens(end)}"
    said = beyond if is_missing(row.tokens_per_step) else _tokens(row.tokens_per_step)
    low, high = getattr(row, "tokens_per_step_low", None), getattr(row, "tokens_per_step_high", None)
    coverage = getattr(row, "range_coverage", None)
    if is_missing(coverage) or (is_missing(low) and is_missing(high)):
        return said
    return f"{said} ({_tokens(low, 'under the grid')}–{_tokens(high, beyond)}, {float(coverage):.0%})"


def scale_out_rows(model: pd.DataFrame) -> list[list[str]]:
    rows = []
    for r in model[model["kind"] == "scale_out"].sort_values("gpus").itertuples():
        rows.append(
            [
                str(int(r.gpus)),
                f"DP{int(r.dp)}·TP{int(r.tp)}",
                f"{r.muon_step_ms / 1e3:.2f}",
                f"{r.adamw_step_ms / 1e3:.2f}",
                _pct(r.muon_extra),
                _pct(r.optimizer_share),
                f"{r.muon_comm_ms:.0f}",
            ]
        )
    return rows


def overlap_lines(data: ReportData) -> list[str]:
    """The overlap variants at DP2·TP2 as recorded (runs table) and the async claim's measurement (claims table)."""
    runs = data.runs[data.runs["overlap"].isin(["none", "naive_async", "pipelined"]) & (data.runs["group"] == "overlap")]
    if runs.empty:
        return ["No overlap variants in these runs: `muon-repro bench overlap` records them."]
    # the steps the claim reads (timed without the profiler) where every variant has them: the profiler slows the
    # variants unevenly, so their profiled medians can order them otherwise than the claim's interval does
    timed = "timed_step_ms" in runs.columns and bool(runs["timed_step_ms"].notna().all())
    if timed:
        parts = [
            f"{r['overlap']}: {fmetric(r, 'timed_step_ms'):.0f} ms per step, optimizer {fmetric(r, 'timed_optimizer_ms'):.0f} ms"
            for _, r in runs.iterrows()
        ]
        which = "median over rounds of the steps timed without the profiler"
    else:
        parts = [
            f"{r['overlap']}: {fmetric(r, 'step_ms'):.0f} ms per step (p10–p90 "
            f"{fmetric(r, 'step_ms_p10'):.0f}–{fmetric(r, 'step_ms_p90'):.0f}), "
            f"optimizer {fmetric(r, 'optimizer_ms'):.0f} ms"
            for _, r in runs.iterrows()
        ]
        which = "profiled steps"
    lines = [
        f"Overlap of Muon's gathers at DP2·TP2 ({runs['layout'].iloc[0]} layout, the three recorded interleaved; {which}): "
        + "; ".join(parts)
        + "."
    ]
    # the view's own profile: the claims table keeps every profile's rows (ReportData.of_profile)
    claims = rows_of_profile(data.claims, data.described_profile)
    claim = claims[claims["claim_id"] == "async_slowdown"]
    if len(claim):
        lines.append(claim_note(claim.iloc[0]))
    return lines
