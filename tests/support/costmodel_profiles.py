"""Hand-written machine profiles for the cost model's tests, as a profile's JSON file holds them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from muon_repro.costmodel.machine_profile import COLLECTIVE_OPS

# A 2-core CPU machine with only the figures a profile must have (and its compute share).
TWO_CORES = {
    "name": "two-cores",
    "device": "cpu",
    "backend": "gloo",
    "matmul_tflops": {"fp32": 0.04},
    "newton_schulz_tflops": {"fp32": 0.04},
    "elementwise_gbps": 20.0,
    "op_overhead_us": 2.0,
    "compute_share": {"2": 1.0, "4": 0.5},
    "collectives": [{"op": op, "alpha_us": 300.0, "beta_gbps": 0.5} for op in COLLECTIVE_OPS],
}
# The optional figures, each set, over TWO_CORES: the profile the range checks walk field by field.
EVERY_FIGURE = {
    "attention_tflops": {"fp32": 0.03},
    "cross_entropy_gbps": 3.0,
    "gelu_gbps": 4.0,
    "profiled_op_overhead_us": 4.0,
    "bandwidth_share": {"2": 0.5},
    "size_curves": {"gelu": {"1024": 4.0}},
    "arrival_jitter_us": {"2": 500.0},
    "arrival_jitter_curve_us": {"2": {"4000": 500.0}},
    "efficiency": {"matmul": 0.7},
    "collectives": [
        {"op": op, "alpha_us": 300.0, "beta_gbps": 0.5, "group_size": 2, "samples": [[4096, 3e-4], [1 << 20, 2e-3]]}
        for op in COLLECTIVE_OPS
    ],
}


def two_core_profile(*, every_figure: bool = False, **changes) -> dict:
    """A hand-written 2-core CPU profile as JSON holds it (``every_figure``: with every optional figure set), with
    ``changes`` applied; a change to None leaves the field out."""
    # a deep copy: tests edit nested figures in place, which must not reach the next profile
    raw = copy.deepcopy({**TWO_CORES, **(EVERY_FIGURE if every_figure else {})}) | changes
    return {k: v for k, v in raw.items() if v is not None}


def write_profile_json(folder: Path, raw: dict, name: str = "machine.json") -> Path:
    """``raw`` as ``folder/name`` (NaN and Infinity as Python's json writes and reads them); returns the path."""
    path = folder / name
    path.write_text(json.dumps(raw))
    return path
