"""Colours, labels and figure conventions, defined once so every figure reads the same way.

Colour maps use the Okabe-Ito palette (safe for colour-blind readers) where a few categories
must be told apart at a glance: Muon is always vermillion, AdamW always blue. Optimizer phases
pair a gather with its inverse shard in one hue (the shard lighter), DP in browns and oranges (never
Muon's vermillion), TP in magentas, Newton-Schulz in teal, so the DP gather -> TP gather -> NS -> TP
shard -> DP shard flow reads as warm -> pink -> teal -> pink -> warm. Phase names and their labels come from
:mod:`muon_repro.phases`, the vocabulary the runs are recorded with; only colours are defined here.
"""

from __future__ import annotations

from muon_repro import phases

OPTIMIZER_COLORS = {"muon": "#D55E00", "adamw": "#0072B2"}
OPTIMIZER_LABELS = {"muon": "Muon", "adamw": "AdamW"}
OPTIMIZER_HATCH = {"muon": "", "adamw": "//"}  # second cue where colour already means something else

# Colours of the phases (names from muon_repro.phases) and of what a step's time is spent on
# besides them (activities, the rest of the step, the comm threads' transfers).
OTHER, COMPUTE, EXPOSED_COMM, IDLE, TRANSFER = "other", "compute", "exposed_comm", "idle", "transfer"
PHASE_COLORS = {
    phases.FORWARD: "#56B4E9",
    phases.BACKWARD: "#332288",  # indigo: AdamW's blue would read as an optimizer
    phases.OPTIMIZER: "#E69F00",
    OTHER: "#DDDDDD",
    COMPUTE: "#009E73",
    EXPOSED_COMM: "#CC3311",
    IDLE: "#BBBBBB",
    phases.DP_REDUCE_SCATTER: "#7A3E9D",
    phases.MOMENTUM: "#F0E442",
    phases.DP_GATHER: "#A6611A",  # a brown, not Muon's vermillion: a phase must not read as an optimizer
    phases.TP_GATHER: "#CC79A7",
    phases.NEWTON_SCHULZ: "#117A65",
    phases.TP_SHARD: "#E8B5D3",
    phases.DP_SHARD: "#F4A582",
    phases.UPDATE: "#999933",
    phases.DP_ALL_GATHER: "#B07AC9",
    phases.TP_ALL_REDUCE: "#555555",
    phases.TP_ALL_GATHER: "#888888",
    TRANSFER: "#CC3311",
    # A pipeline stage blocked on its neighbours (receives, flush) is its bubble: idle grey; its sends, teal.
    **dict.fromkeys((*phases.PIPELINE_WAIT_PHASES, phases.BUBBLE), "#BBBBBB"),
    **dict.fromkeys((*phases.PP_SEND_PHASES, "pp_send"), "#44AA99"),
}
PHASE_LABELS = {
    **phases.PHASE_LABELS,
    OTHER: "other (data, sync)",
    COMPUTE: "compute",
    EXPOSED_COMM: "exposed communication",
    IDLE: "idle",
    TRANSFER: "gloo transfer",
    phases.BUBBLE: "pipeline bubble (receives, flush)",
    "pp_send": "PP send (activations, gradients)",
}
OPTIMIZER_COMM_PHASES = phases.OPTIMIZER_COMM_PHASES  # bytes figure and table, data-flow order
TIMELINE_COARSE = phases.COARSE_PHASES
TIMELINE_FINE = phases.OPTIMIZER_PHASES + phases.MODEL_COMM_PHASES  # inside the optimizer, data-flow order
# The timeline's legend names a pipeline's scopes by what they are: its waits as the bubble, its sends as one.
TIMELINE_LEGEND_OF = dict.fromkeys(phases.PIPELINE_WAIT_PHASES, phases.BUBBLE) | dict.fromkeys(phases.PP_SEND_PHASES, "pp_send")
TIMELINE_PIPELINE = (phases.BUBBLE, "pp_send")

# How a run's gathers overlap (runs.overlap); "none" (blocking gathers) goes unsaid in a run's label.
OVERLAP_LABELS = {"none": "blocking", "naive_async": "naive async", "pipelined": "pipelined"}

KIND_COLORS = {
    "all_reduce": "#44AA99",
    "all_gather": "#CC6677",
    "reduce_scatter": "#882255",
    "broadcast": "#DDCC77",
    "all_to_all": "#117733",
    "send_recv": "#88CCEE",
    "other": "#AAAAAA",
}
KIND_LABELS = {k: k.replace("_", "-") for k in KIND_COLORS}

BYTE_SOURCE_HATCH = {"analytic": "", "ledger": "//", "trace": ".."}
BYTE_SOURCE_LABELS = {"analytic": "analytic model", "ledger": "run-time ledger", "trace": "profiler trace"}

DPI = 300  # print resolution for the PNGs (the SVGs are vector)
WIDTH_IN = 6.6  # with what sticks out of the axes, about an A4 page's text width: the PDF draws it at that width
PAGE_TEXT_WIDTH_PT = 515.9  # A4 (210 mm) less the report's 14 mm margins: the width every figure is drawn at
SMALL_PT = 8.0  # the smallest text of any figure (annotations, legends, ticks): at least 7 pt once on the page
MB = 1e6  # communication volumes in MB (nccl-tests convention)
MIB = 2**20  # memory in MiB (allocator convention)

RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "svg.fonttype": "none",  # text stays text in the SVG
    "svg.hashsalt": "muon_repro",  # stable SVG ids: same data, same file
    "savefig.bbox": "tight",
}


def grid_label(dp: int, tp: int, pp: int = 1) -> str:
    """``DP2·TP2``, ``DP4``, ``TP4``, ``1 rank``: the names the original study used for its grids; with pipeline
    stages, the names docs/pipeline.md and the claims use: ``PP2·DP2``, ``PP2·TP2``, ``PP4``, ``DP2·TP2·PP2``."""
    if pp > 1:
        if dp > 1 and tp > 1:
            return f"DP{dp}·TP{tp}·PP{pp}"
        return f"PP{pp}" + (f"·DP{dp}" if dp > 1 else "") + (f"·TP{tp}" if tp > 1 else "")
    if dp > 1 and tp > 1:
        return f"DP{dp}·TP{tp}"
    if dp > 1:
        return f"DP{dp}"
    if tp > 1:
        return f"TP{tp}"
    return "1 rank"
