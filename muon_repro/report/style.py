"""Colours, labels and figure conventions, defined once so every figure reads the same way.

Colour maps use the Okabe-Ito palette (safe for colour-blind readers) where a few categories
must be told apart at a glance: Muon is always vermillion, AdamW always blue. Optimizer phases
pair a gather with its inverse shard in one hue (the shard lighter), DP in oranges, TP in
magentas, Newton-Schulz in teal, so the DP gather -> TP gather -> NS -> TP shard -> DP shard flow
reads as warm -> pink -> teal -> pink -> warm.
"""

from __future__ import annotations

OPTIMIZER_COLORS = {"muon": "#D55E00", "adamw": "#0072B2"}
OPTIMIZER_LABELS = {"muon": "Muon", "adamw": "AdamW"}
OPTIMIZER_HATCH = {"muon": "", "adamw": "//"}  # second cue where colour already means something else

# Step phases (what the step is spent on) and activities (what the machine is doing).
PHASE_COLORS = {
    "forward": "#56B4E9",
    "backward": "#0072B2",
    "optimizer": "#E69F00",
    "other": "#DDDDDD",
    "compute": "#009E73",
    "exposed_comm": "#CC3311",
    "idle": "#BBBBBB",
    # optimizer sub-phases and communication labels (DESIGN.md section 3)
    "dp_reduce_scatter": "#7A3E9D",
    "momentum": "#F0E442",
    "dp_gather": "#D55E00",
    "tp_gather": "#CC79A7",
    "newton_schulz": "#117A65",
    "tp_shard": "#E8B5D3",
    "dp_shard": "#F4A582",
    "update": "#999933",
    "dp_all_gather": "#B07AC9",
    "tp_all_reduce": "#555555",
    "tp_all_gather": "#888888",
    "transfer": "#CC3311",
}
PHASE_LABELS = {
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "other": "other (data, sync)",
    "compute": "compute",
    "exposed_comm": "exposed communication",
    "idle": "idle",
    "dp_reduce_scatter": "DP reduce-scatter (grads)",
    "momentum": "momentum",
    "dp_gather": "DP gather",
    "tp_gather": "TP gather",
    "newton_schulz": "Newton-Schulz",
    "tp_shard": "TP shard",
    "dp_shard": "DP shard",
    "update": "update",
    "dp_all_gather": "DP all-gather (params)",
    "tp_all_reduce": "TP all-reduce (model)",
    "tp_all_gather": "TP all-gather (model)",
    "transfer": "gloo transfer (comm thread)",
}
# The optimizer's own communication phases, in data-flow order (bytes figure).
OPTIMIZER_COMM_PHASES = ("dp_reduce_scatter", "dp_gather", "tp_gather", "dp_all_gather")
# Fine phases shown inside the optimizer in the timeline, in data-flow order.
TIMELINE_FINE = (
    "dp_reduce_scatter", "momentum", "dp_gather", "tp_gather", "newton_schulz",
    "tp_shard", "dp_shard", "update", "dp_all_gather", "tp_all_reduce", "tp_all_gather",
)  # fmt: skip
TIMELINE_COARSE = ("forward", "backward", "optimizer")

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
WIDTH_IN = 7.0  # fits an A4 page's text width at 100%
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


def grid_label(dp: int, tp: int) -> str:
    """``DP2·TP2``, ``DP4``, ``TP4``, ``1 rank``: the names the seed used for its grids."""
    if dp > 1 and tp > 1:
        return f"DP{dp}·TP{tp}"
    if dp > 1:
        return f"DP{dp}"
    if tp > 1:
        return f"TP{tp}"
    return "1 rank"
