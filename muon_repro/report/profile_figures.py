"""The figure across hardware profiles, drawn only when the tables hold more than one: every claim
measured on every profile, one panel per claim, one row per profile (the claims table's columns, as
a picture). Reads the ``claims`` table alone."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import PercentFormatter

from muon_repro.report import style
from muon_repro.report.claims_section import claim_short
from muon_repro.report.plotting import save_figure, styled

PROFILE_FIGURES = ("claims_by_profile",)
PROFILE_CAPTIONS = {
    "claims_by_profile": "Every claim measured on every hardware profile: the measured value with its 95% interval (an "
    "arrow where the interval has no end on that side), one row per profile, the values that agree with the claim shaded; "
    "the point's colour is the verdict.",
}
VERDICT_COLORS = {
    "reproduced": "#009E73",
    "not reproduced": "#882255",  # wine: Muon's vermillion would read as an optimizer
    "inconclusive": "#E69F00",
    "not comparable here": "#56B4E9",
    "unequal work": "#CC79A7",
}


AXIS_LABELS = {"ratio": "ratio (×)", "fraction": "fraction (%)", "change": "change (%)"}  # by claims.unit_kind


def region_bounds(row: pd.Series) -> tuple[float, float]:
    """``(low, high)`` of a claims row's region (columns region_low, region_high), an unbounded side infinite."""

    def bound(name: str, unbounded: float) -> float:
        value = pd.to_numeric(row.get(name), errors="coerce")
        return unbounded if pd.isna(value) else float(value)

    return bound("region_low", -math.inf), bound("region_high", math.inf)


def wants_profile_figures(claims: pd.DataFrame) -> bool:
    return "profile" in claims.columns and claims["profile"].nunique() > 1


@styled
def claims_by_profile(claims: pd.DataFrame, out: str | Path) -> Path:
    """One panel per claim measured on some profile: each profile's value and interval, the claim's region shaded."""
    measured = claims[claims["measured_value"].notna()]
    ids = list(dict.fromkeys(measured["claim_id"]))  # the claims table's order
    profiles = list(dict.fromkeys(claims["profile"].astype(str)))
    if not ids:
        raise ValueError("claims_by_profile: no claim is measured on any profile in the claims table")
    ncols = 2
    nrows = math.ceil(len(ids) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(style.WIDTH_IN, 0.4 + nrows * (0.6 + 0.22 * len(profiles))), squeeze=False)
    for ax, claim_id in zip(axes.flat, ids):
        rows = measured[measured["claim_id"] == claim_id]
        rows = rows.set_index(rows["profile"].astype(str))
        _claim_panel(ax, claim_id, rows, profiles, region_bounds(rows.iloc[0]))
    for ax in list(axes.flat)[len(ids) :]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=c, label=v) for v, c in VERDICT_COLORS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save_figure(fig, out)


def _claim_panel(
    ax: plt.Axes, claim_id: str, rows: pd.DataFrame, profiles: list[str], region: tuple[float, float] | None
) -> None:
    ys = np.arange(len(profiles))

    def column(name: str) -> list[float]:  # a missing value (no run, no interval from one round) is NaN
        return [float(pd.to_numeric(rows.loc[p, name], errors="coerce")) if p in rows.index else math.nan for p in profiles]

    values, lows, highs = column("measured_value"), column("measured_low"), column("measured_high")
    bounds = [b for b in (region or ()) if math.isfinite(b)]
    shown = [v for v in (*values, *lows, *highs, *bounds) if math.isfinite(v)]
    span_lo, span_hi = min(shown), max(shown)
    pad = 0.1 * (span_hi - span_lo or abs(span_hi) or 1.0)
    ax.set_xlim(span_lo - pad, span_hi + pad)  # an unbounded side of the region runs off the panel
    if region is not None:
        lo, hi = region
        left, right = lo if math.isfinite(lo) else span_lo - pad, hi if math.isfinite(hi) else span_hi + pad
        ax.axvspan(left, right, color="#999999", alpha=0.2, lw=0)
    for y, p, v, lo, hi in zip(ys, profiles, values, lows, highs):
        if not math.isfinite(v):
            ax.annotate(
                "not measured",
                (0.5, y),
                xycoords=("axes fraction", "data"),
                ha="center",
                va="center",
                fontsize=style.SMALL_PT,
                color="#555555",
            )
            continue
        color = VERDICT_COLORS.get(str(rows.loc[p, "verdict"]), "#555555")
        xerr = [[max(v - lo, 0.0)], [max(hi - v, 0.0)]] if math.isfinite(lo) and math.isfinite(hi) else None
        ax.errorbar([v], [y], xerr=xerr, fmt="o", color=color, capsize=2, markersize=4)
        if math.isfinite(lo) != math.isfinite(hi):  # one-sided (a bound): from its end to the panel's edge, an arrow
            end, edge = (lo, span_hi + pad) if math.isfinite(lo) else (hi, span_lo - pad)
            ax.annotate("", xy=(edge, y), xytext=(end, y), arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1})
            ax.plot([end, end], [y - 0.12, y + 0.12], color=color, lw=1)
    ax.set_yticks(ys, profiles, fontsize=style.SMALL_PT)
    ax.set_ylim(-0.6, len(profiles) - 0.4)
    ax.invert_yaxis()
    # the claims table's words, not its ids; on two lines where one would run past a half-width panel
    ax.set_title(textwrap.fill(claim_short(claim_id), 36), fontsize=style.SMALL_PT)
    kind = str(rows["unit_kind"].iloc[0]) if "unit_kind" in rows.columns and len(rows) else "ratio"
    if kind in ("fraction", "change"):  # the claims table's fractions, read as the report writes them
        ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    ax.set_xlabel(AXIS_LABELS.get(kind, kind), fontsize=style.SMALL_PT)
    ax.tick_params(axis="x", labelsize=style.SMALL_PT)
    ax.grid(axis="x", alpha=0.3)
