"""The analysis on real traces that no one here wrote (tests/data/external, see its README)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.breakdown import STEP_COLUMNS, analyze_file
from muon_repro.analysis.collectives import COMM_KINDS
from muon_repro.analysis.reader import read_trace
from muon_repro.table_set import build_tables
from muon_repro.tables.schemas import SCHEMAS

EXTERNAL = Path(__file__).resolve().parent / "data" / "external"
TRACES = sorted(EXTERNAL.glob("*.json.gz"))
A100 = EXTERNAL / "hta_a100_nccl_ddp_rank0.json.gz"


def test_the_four_external_traces_are_here():
    """The tests below are parametrized over them: without the files they would pass with no case at all."""
    assert [p.name for p in TRACES] == [
        "hta_a100_nccl_ddp_rank0.json.gz",
        "hta_cpu_gloo_rank34.json.gz",
        "tracelens_b200_eager.json.gz",
        "tracelens_h100_qwen0.5b.json.gz",
    ]


FRACTIONS = ("compute_frac", "comm_frac", "exposed_comm_frac", "idle_frac", "optimizer_share")


@pytest.fixture(scope="module")
def breakdowns():
    return {p.name: analyze_file(str(p)) for p in TRACES}


def _raw(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()), strict=False)


def test_all_four_are_there():
    assert {p.name for p in TRACES} >= {
        "hta_a100_nccl_ddp_rank0.json.gz",
        "hta_cpu_gloo_rank34.json.gz",
        "tracelens_b200_eager.json.gz",
        "tracelens_h100_qwen0.5b.json.gz",
    }


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_every_trace_loads_with_finite_numbers(path, breakdowns):
    b = breakdowns[path.name]
    steps = b.steps
    assert list(steps.columns) == list(STEP_COLUMNS)
    assert len(steps) >= 1
    numeric = steps.drop(columns=["peak_mem_bytes"]).to_numpy(dtype=float)
    assert np.isfinite(numeric).all(), steps
    for col in FRACTIONS:
        assert steps[col].between(0.0, 1.0).all(), col
    for col in [c for c in steps.columns if c.endswith("_ms")]:
        assert (steps[col] >= 0).all(), col
    assert (steps["comm_window_ms"] <= steps["step_ms"] + 1e-9).all()
    # the window columns add up (the launch-step columns need not: work may run past the step)
    busy = steps["compute_window_ms"] + steps["comm_window_ms"] - steps["overlap_ms"]
    np.testing.assert_allclose(busy + steps["idle_ms"], steps["step_ms"], rtol=1e-9, atol=1e-6)
    inst = b.collectives
    assert inst[["start", "end", "issue_ts"]].notna().all().all()
    assert (inst["end"] >= inst["start"]).all()
    summary = b.summary()
    json.dumps(summary)  # JSON-ready, no NaN
    assert all(math.isfinite(v) for v in summary["comm_ms"].values())


def test_what_each_trace_is(breakdowns):
    a100 = breakdowns["hta_a100_nccl_ddp_rank0.json.gz"]
    assert (a100.meta.rank, a100.meta.rank_source, a100.meta.world_size, a100.meta.backend, a100.device) == (
        0,
        "distributedInfo",
        2,
        "nccl",
        "cuda",
    )
    assert list(a100.steps["step"]) == [4, 5, 6]
    assert (
        a100.steps["forward_ms"].gt(0).all() and a100.steps["backward_ms"].gt(0).all() and a100.steps["optimizer_ms"].gt(0).all()
    )
    gloo = breakdowns["hta_cpu_gloo_rank34.json.gz"]
    assert (gloo.meta.rank, gloo.meta.backend, gloo.device) == (34, "gloo", "cpu")
    assert (gloo.collectives["op"] == "all_reduce").all() and (gloo.collectives["source"] == "gloo").all()
    b200 = breakdowns["tracelens_b200_eager.json.gz"]
    assert list(b200.steps["step"]) == [-1]  # no ProfilerStep: one window
    (row,) = b200.collectives.itertuples()
    # ncclDevKernel all-gather of 25136 bf16 elements per rank on 8 ranks (kernel args)
    assert (row.op, row.group_size, row.dtype, row.elements, row.size_bytes, row.bytes) == (
        "all_gather",
        8,
        "bfloat16",
        201088,
        402176,
        7 * 25136 * 2,
    )
    h100 = breakdowns["tracelens_h100_qwen0.5b.json.gz"]
    assert (h100.meta.rank, h100.meta.rank_source, h100.meta.backend) == (0, "assumed", None)
    assert h100.steps["peak_mem_bytes"].notna().all()  # profile_memory: [memory] events
    assert h100.collectives.empty


def _a100_independent() -> tuple[dict[int, float], dict[int, int]]:
    """Per ProfilerStep: NCCL kernel time clipped to the step window, and bytes issued in it,
    computed straight from the raw JSON (no code from muon_repro.analysis). The launch-step
    figures are checked in test_hta_convention.py."""
    events = _raw(A100)["traceEvents"]
    windows = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
    }
    kernels = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith(("ncclKernel", "ncclDevKernel"))]
    launches = {e["args"]["External id"]: e["ts"] for e in events if e.get("name") == "record_param_comms"}
    time_ms = {s: 0.0 for s in windows}
    sent = {s: 0 for s in windows}
    for k in kernels:
        a, b = k["ts"], k["ts"] + k["dur"]
        for s, (w0, w1) in windows.items():
            time_ms[s] += max(0.0, min(b, w1) - max(a, w0)) / 1000.0
        issued = launches[k["args"]["External id"]]
        n, nelems = k["args"]["Group size"], k["args"]["In msg nelems"]
        size = {"Float": 4, "Long": 8}[k["args"]["dtype"]]
        factor = 2 * (n - 1) if k["args"]["Collective name"] == "allreduce" else None
        nbytes = factor * math.ceil(nelems / n) * size if factor else nelems * size  # broadcast sends the array
        for s, (w0, w1) in windows.items():
            if w0 <= issued < w1:
                sent[s] += nbytes
    return time_ms, sent


def test_a100_nccl_time_and_bytes_per_step_match_the_raw_json(breakdowns):
    steps = breakdowns[A100.name].steps.set_index("step")
    time_ms, sent = _a100_independent()
    assert sorted(time_ms) == sorted(steps.index)
    for s in time_ms:
        assert time_ms[s] > 0
        assert steps.loc[s, "comm_window_ms"] == pytest.approx(time_ms[s], rel=1e-9, abs=1e-9)
        # on this trace every kernel ends inside the step that launched it and none overlap,
        # so the launch-step union and per-kind sums equal the window figure
        assert steps.loc[s, "comm_ms"] == pytest.approx(time_ms[s], rel=1e-9, abs=1e-9)
        kinds = sum(steps.loc[s, f"comm_{k}_ms"] for k in COMM_KINDS)
        # kinds add the kernels' own dur; time_ms subtracts clock times (~0.5 ns resolution here)
        assert kinds == pytest.approx(time_ms[s], rel=1e-9, abs=1e-6)
        assert steps.loc[s, "comm_bytes"] == sent[s]


def test_a100_collectives_are_linked_to_their_caller_and_phase(breakdowns):
    inst = breakdowns[A100.name].collectives
    assert set(inst["source"]) == {"nccl_kernel"}
    assert set(inst[inst["op"] == "all_reduce"]["phase"]) == {"backward"}  # DDP's all-reduce runs on the autograd thread
    assert set(inst[inst["op"] == "broadcast"]["phase"]) == {"forward"}  # DDP's buffer broadcast in forward
    assert (inst["issue_ts"] < inst["start"]).all()  # issued on the CPU before the kernel runs


def test_tables_over_the_external_directory(tmp_path):
    tables = build_tables([EXTERNAL], workers=1)
    for name, df in tables.items():
        assert list(df.columns) == SCHEMAS[name].names
        for col in df.columns:
            if isinstance(df[col].dtype, (pd.Float64Dtype,)):
                values = df[col].dropna().to_numpy(dtype=float)
                assert np.isfinite(values).all(), (name, col)
    # four unrelated traces in one directory: four runs, not one
    assert len(tables["runs"]) == len(TRACES)
    assert set(tables["claims"]["verdict"]) == {"not measured"}


@pytest.mark.slow
def test_reading_is_the_same_through_every_path(tmp_path):
    """Small pieces, the tolerant path and the parallel path all give the same table."""
    reference = read_trace(A100)
    small = read_trace(A100, piece_bytes=64 * 1024)
    plain = tmp_path / "a100.json"
    plain.write_bytes(gzip.decompress(A100.read_bytes()))
    parallel = read_trace(plain, workers=2, piece_bytes=1 << 20)
    assert (reference.meta.decoded_by, parallel.meta.decoded_by) == ("sequential", "parallel")
    for other in (small, parallel):
        pd.testing.assert_frame_equal(other.events, reference.events)
        pd.testing.assert_frame_equal(other.threads, reference.threads)
        assert other.args.index.tolist() == reference.args.index.tolist()
    assert len(reference.events) == sum(1 for e in _raw(A100)["traceEvents"] if e.get("ph") == "X")
