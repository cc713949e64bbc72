"""The report's section on the original study's own runs, its figure, and the sentence the abstract and the card
open with.

From the study tables alone (``study_runs``, ``study_method``, ``claims`` rows of the study's profile, and the cost
model's ``study_costmodel`` when present): the claims judged on the runs they were made on, the study's published
numbers rebuilt by its own method beside what we measure per step, and what each run did. The figure
(:data:`STUDY_FIGURES`) shows what the study's published numbers are made of, beside what we measure per step on
the same traces (``study_method`` and ``study_method_parts``, tables in, a path out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from muon_repro.hardware import rows_of_profile
from muon_repro.report import style
from muon_repro.report.claims_section import claim_measured, claim_note, claim_number, claim_short
from muon_repro.report.data import ReportData, is_missing, study_profile
from muon_repro.report.formatting import in_unit, ms
from muon_repro.report.plotting import add_title, legend_below, new_figure, save_figure, styled
from muon_repro.report.reproduce_section import study_import

NOT_DECIDED = ("not comparable here", "not measured")


def study_number(value: Any, unit: str) -> str:
    """A study_method number as the report's table and its figure write it (:func:`formatting.in_unit`); ``–`` where
    the table has none."""
    return "–" if is_missing(value) else in_unit(value, unit)


def study_claims(data: ReportData) -> list[dict[str, str]]:
    """The claims table's rows on the study's profile, in the report's words."""
    profile = study_profile(data)
    if profile is None:
        return []
    out = []
    for _, c in rows_of_profile(data.claims, profile).iterrows():
        rebuilt = c.get("study_method_rebuilt")
        method = "–" if is_missing(c.get("study_method_value")) else _claim_unit_number(c)
        out.append(
            {
                "id": str(c["claim_id"]),
                "claim": str(c["claim"]),
                "method": method + ("" if is_missing(rebuilt) else (" (rebuilt)" if bool(rebuilt) else " (not rebuilt)")),
                "measured": claim_measured(c),
                "verdict": str(c["verdict"]),
                "explanation": claim_note(c),
            }
        )
    return out


def _claim_unit_number(c: pd.Series) -> str:
    v = float(c["study_method_value"])
    return f"{100 * v:.2f}%" if str(c["unit_kind"]) in ("fraction", "change") else f"{v:.3f}×"


def study_sentence(data: ReportData) -> str:
    """One sentence: how the claims fare on the study's own runs ('' without them)."""
    claims = study_claims(data)
    if not claims:
        return ""
    method = data.study_method
    rebuilt = int(method["rebuilt_matches"].fillna(False).astype(bool).sum()) if len(method) else 0
    own = data.study_runs[data.study_runs["profile"] == study_profile(data)]
    decided = [c for c in claims if c["verdict"] not in NOT_DECIDED]
    said = "; ".join(f"{_short(c)} {c['measured']}, {c['verdict']}" for c in decided)
    return (
        f"On the original study's own runs (its {own['run'].nunique()} published runs, {_devices(own)}), its method "
        f"rebuilds {rebuilt} of its {len(method)} published numbers; measured per step, {said}."
    )


def _devices(runs: pd.DataFrame) -> str:
    """``4 GPUs, NCCL``: the most ranks a run of ``runs`` took, on GPUs (study_runs.device names the GPU) or CPU ranks,
    and its backend, as study_runs records them."""
    ranks = int(runs["world_size"].max())
    unit = "CPU rank" if set(runs["device"].astype(str).str.lower()) == {"cpu"} else "GPU"
    backends = "/".join(sorted({str(b).upper() for b in runs["backend"]}))
    return f"{ranks} {unit}{'' if ranks == 1 else 's'}, {backends}"


SHORT = {
    "comm_time_dp2_tp2": "Muon/AdamW transfer time",
    "optimizer_share": "Muon's optimizer share",
    "async_slowdown": "async over sync step",
}


def _short(c: dict[str, str]) -> str:
    """The study's own words for its claims; any other claim by its declaration's ``short``, never its bare id."""
    return SHORT.get(c["id"]) or claim_short(c["id"])


def study_section(data: ReportData) -> dict[str, Any]:
    """The context of the report's study section (``present`` False without the study's runs; its protocol recorded
    here is shown either way)."""
    profile = study_profile(data)
    if profile is None:
        return {"present": False, "import_traces": study_import(data), **protocols_table(data)}
    method = data.study_method
    method_rows = [
        [
            str(r.published_in),
            f"{r.quantity} ({r.optimizer})",
            study_number(r.published, str(r.unit)),
            study_number(r.rebuilt, str(r.unit)),
            "yes" if bool(r.rebuilt_matches) else "no",
            study_number(r.rebuilt_per_step, str(r.unit)),
            study_number(r.measured_per_step, str(r.unit))
            + ("" if not r.measured_what or is_missing(r.measured_what) else f": {r.measured_what}"),
        ]
        for r in method.itertuples()
    ]
    runs = data.study_runs[data.study_runs["profile"] == profile]
    run_rows = [
        [
            str(r.name),
            f"DP{int(r.dp)}·TP{int(r.tp)}",
            f"{int(r.ranks_traced)} of {int(r.world_size)}",
            f"{float(r.collectives_per_step):.1f}",
            f"{float(r.ring_bytes_per_step) / 1e6:.1f}",
            f"{float(r.step_ms):.1f}",
            f"{float(r.optimizer_cpu_ms):.2f}",
            f"{float(r.optimizer_gpu_busy_ms):.1f}",
            f"{float(r.comm_ms):.1f}",
            "–" if is_missing(r.comm_transfer_ms) else f"{float(r.comm_transfer_ms):.1f}",
        ]
        for r in runs.itertuples()
    ]
    claims = study_claims(data)
    return {
        "present": True,
        "profile": profile,
        "claims_header": ["claim", "the study's method on its traces", "measured per step (95% interval)", "verdict"],
        "claims_rows": [[c["claim"], c["method"], c["measured"], c["verdict"]] for c in claims],
        "claims_notes": [c["explanation"] for c in claims],
        "method_header": [
            "published in",
            "quantity",
            "published",
            "rebuilt",
            "matches",
            "rebuilt / 5 steps",
            "measured per step",
        ],
        "method_rows": method_rows,
        "runs_header": [
            "run",
            "grid",
            "ranks traced",
            "collectives / step",
            "MB sent / rank / step",
            "step ms",
            "optimizer CPU ms",
            "optimizer GPU ms",
            "NCCL ms",
            "NCCL transfer ms",
        ],
        "runs_rows": run_rows,
        "costmodel": costmodel_rows(data),
        **protocols_table(data),
    }


def protocols_table(data: ReportData) -> dict[str, Any]:
    """Each claimed number side by side: the study's traces, its protocol and the equal-work protocol recorded here,
    and our benchmark's value (the claims table's, on the profile with most runs)."""
    from muon_repro.report.claims_section import claim_measured

    table = data.study_protocols
    if table.empty:
        return {"protocols_header": [], "protocols_rows": []}
    # the study's, its protocol, equal work, its protocol on one rank
    order = {"comparison": 0, "study_protocol": 1, "study_equal_work": 2, "study_protocol_1rank": 3}
    sets = table.drop_duplicates(["profile", "group"])
    columns = sorted(((str(s.profile), str(s.group)) for s in sets.itertuples()), key=lambda pg: order.get(pg[1], 4))
    labels = {
        "comparison": "the study's traces",
        "study_protocol": "its protocol, recorded here",
        "study_equal_work": "equal work, recorded here",
        "study_protocol_1rank": "its protocol on one rank, recorded here",
    }
    bench = data.profiles[0]
    header = ["claim", *(f"{labels.get(g, g)} ({p})" for p, g in columns), f"our benchmark ({bench})"]
    rows = []
    claims = data.claims
    for claim_id in dict.fromkeys(table["claim_id"]):
        mine = claims[(claims["claim_id"] == claim_id) & (claims["profile"] == bench)]
        if mine.empty:
            continue
        kind = str(mine["unit_kind"].iloc[0])
        cells = []
        for profile, group in columns:
            row = table[(table["claim_id"] == claim_id) & (table["profile"] == profile) & (table["group"] == group)]
            if row.empty:
                cells.append("–")
                continue
            r = row.iloc[0]
            said = claim_measured(pd.Series({**r.to_dict(), "unit_kind": kind}))
            if r["equal_work"] is False or (not is_missing(r["equal_work"]) and not bool(r["equal_work"])):
                said += ", unequal work"
            rounds = int(r["rounds"])
            said = f"{said} ({rounds} rounds)" if rounds > 1 else said
            if not is_missing(r.get("study_method_value")):  # what the study's own sums make of the same traces
                method = claim_number(r["study_method_value"], kind, claim_id, "study_protocols.study_method_value")
                said += f"; its method: {method}"
            cells.append(said)
        rows.append([str(mine["claim"].iloc[0]), *cells, claim_measured(mine.iloc[0])])
    return {"protocols_header": header, "protocols_rows": rows}


def costmodel_rows(data: ReportData) -> dict[str, Any]:
    """The cost model priced on the study's machine against its kernel times, before and after the fit."""
    table = data.study_costmodel
    if table.empty:
        return {"present": False}
    rows = [
        [
            str(r.run).rsplit("/", 1)[-1],
            str(r.quantity),
            f"{float(r.measured_ms):.2f}",
            f"{float(r.datasheet_ms):.2f}",
            f"{100 * float(r.datasheet_rel_error):+.0f}%",
            f"{float(r.fitted_ms):.2f}",
            f"{100 * float(r.fitted_rel_error):+.0f}%",
        ]
        for r in table.itertuples()
    ]
    fitted_on = table[table["fitted_on"].fillna(False).astype(bool)]
    errors = fitted_on["datasheet_rel_error"].astype(float).abs(), fitted_on["fitted_rel_error"].astype(float).abs()
    held_out = table[~table["fitted_on"].fillna(False).astype(bool)]
    shift = data.study_costmodel_thresholds
    return {
        "present": True,
        "header": ["run", "quantity", "measured ms", "datasheet ms", "error", "fitted ms", "error after fit"],
        "rows": rows,
        "median_before": f"{100 * errors[0].median():.0f}%",
        "worst_before": f"{100 * errors[0].max():.0f}%",
        "median_after": f"{100 * errors[1].median():.0f}%",
        "worst_after": f"{100 * errors[1].max():.0f}%",
        "fitted_rows": str(len(fitted_on)),
        "held_out": str(len(held_out)),
        "held_out_median": "–" if held_out.empty else f"{100 * held_out['fitted_rel_error'].astype(float).abs().median():.0f}%",
        "shift_header": ["model", "metric", "level", "datasheet tokens/step", "fitted tokens/step", "fitted / datasheet"],
        "shift_rows": [
            [
                str(r.model),
                str(r.metric),
                f"{100 * float(r.level):.1f}%",
                f"{float(r.datasheet_tokens_per_step):,.0f}",
                f"{float(r.fitted_tokens_per_step):,.0f}",
                f"{float(r.ratio):.2f}×",
            ]
            for r in shift.itertuples()
        ],
    }


# ---------------------------------------------------------------- the figure


STUDY_FIGURES = ("study_numbers",)
STUDY_CAPTIONS = {
    "study_numbers": "The original study's published numbers, rebuilt from its traces by its method, split into the "
    "event categories its sums hold (left: communication, ms over the 5-step trace of rank 0; right: the optimizer, ms), "
    "beside our measure of the same work on the GPU, per step times 5 (black bar: study_method.measured_per_step: the NCCL "
    "kernels' time for communication, the compute kernels' for the optimizer, whose NCCL kernels the study counts as "
    "communication).",
}
# Which published numbers each panel shows, top to bottom.
PANELS = (
    ("communication (ms, 5 steps)", ("comm_ms_muon", "comm_ms_adamw", "async_comm_ms_muon", "async_comm_ms_adamw")),
    ("optimizer (ms, 5 steps)", ("optimizer_ms_muon", "optimizer_ms_adamw")),
)
# One per Kineto category of the summed events, safe for colour-blind readers: Okabe-Ito without its blue and
# vermillion (AdamW's and Muon's in every figure, and these bars are labelled by optimizer), and Tol's wine as a sixth.
CATEGORY_COLORS = {
    "kernel (collective)": "#009E73",
    "gpu_user_annotation (collective)": "#56B4E9",
    "cpu_op (collective)": "#E69F00",
    "user_annotation (collective)": "#F0E442",
    "gpu_user_annotation (scope)": "#CC79A7",
    "user_annotation (scope)": "#882255",
}
STEPS = 5


def wants_study_figures(method: pd.DataFrame) -> bool:
    return not method.empty


@styled
def study_numbers(method: pd.DataFrame, parts: pd.DataFrame, out: str | Path) -> Path:
    """Per panel, one stacked bar per published number (its summed events by category) and our measure x 5."""
    if method.empty:
        raise ValueError("study_numbers: the study_method table is empty (import the study: muon-repro study import)")
    fig, axes = new_figure(5.6, ncols=2)  # room for two-line labels above a legend of up to 7 rows
    by_id = method.set_index("number_id")
    seen: dict[str, str] = {}  # legend label -> colour, in the order drawn
    widest: dict[str, float] = {}  # category -> its widest part as a fraction of its panel's axis
    largest: dict[str, float] = {}  # category -> its largest part drawn (ms)
    for ax, (title, ids) in zip(axes, PANELS):
        ids = [i for i in ids if i in by_id.index]
        y = np.arange(len(ids))[::-1] * 1.0
        drawn: list[tuple[str, float]] = []
        for yi, number_id in zip(y, ids):
            left = 0.0
            mine = parts[parts["number_id"] == number_id]
            for cat, part_ms in zip(mine["category"].astype(str), mine["ms"].astype(float)):
                color = CATEGORY_COLORS.get(cat, "#999999")
                seen[cat] = color
                drawn.append((cat, part_ms))
                ax.barh(yi + 0.18, part_ms, left=left, height=0.34, color=color)
                left += part_ms
            ours = by_id.loc[number_id, "measured_per_step"]
            if pd.notna(ours):
                seen["ours: GPU kernel time of the same work x 5"] = "black"
                ax.barh(yi - 0.18, STEPS * float(ours), height=0.34, color="black")
            # the rebuilt number as the report's table writes it, without the unit its axis names
            rebuilt = study_number(by_id.loc[number_id, "rebuilt"], str(by_id.loc[number_id, "unit"]))
            ax.text(left, yi + 0.18, " " + rebuilt.removesuffix(" ms"), va="center", fontsize=style.SMALL_PT)
        optimizers = [str(by_id.loc[i, "optimizer"]) for i in ids]
        ax.set_yticks(
            y,
            [f"{by_id.loc[i, 'quantity']}\n{style.OPTIMIZER_LABELS.get(o, o)}" for i, o in zip(ids, optimizers)],
            fontsize=style.SMALL_PT,
        )
        ax.set_xlabel(title)
        ax.grid(axis="x", linewidth=0.4, alpha=0.5)
        ax.set_xlim(0, ax.get_xlim()[1] * 1.4)  # the published numbers right of the longest bars stay inside
        span = ax.get_xlim()[1]
        for cat, part_ms in drawn:
            widest[cat] = max(widest.get(cat, 0.0), part_ms / span)
            largest[cat] = max(largest.get(cat, 0.0), part_ms)
    # a category in the study's sums whose parts are too thin to see keeps its entry, which gives its size
    thin = {cat for cat, fraction in widest.items() if fraction < 0.005}
    labels = {label: label + (f": at most {ms(largest[label])}, too thin to see" if label in thin else "") for label in seen}
    bottom = legend_below(fig, [Patch(facecolor=color, label=labels[label]) for label, color in seen.items()], ncol=3)
    add_title(
        fig,
        "The original study's numbers, rebuilt, and what they hold",
        "Its sums count each NCCL kernel twice (the kernel and its GPU annotation) and its optimizer is the CPU launch "
        "time; the GPU kernel time of the same work is the black bar.",
        bottom_in=bottom,
    )
    return save_figure(fig, out)
