"""The per-step NCCL time of the original study's traces (``read_study_trace``): HTA's attribution convention.

A step's NCCL time is the union of the intervals of the NCCL kernels whose launching runtime call (matched by
``correlation``) lies in the step's CPU window ``[start_k, start_{k+1})``, the last window closing at the end
of the outer ``*_Battle``/``*_Full_Training_Step`` scope; ``start_k`` is the ts of the k-th repeat of the
iteration's first scope.

Default tier: that rule written out here from the raw JSON (plain ``json``/``gzip``), against our reader and
against the cross-check tool's own reading of the windows. Slow tier: against HolisticTraceAnalysis's parser
on every trace (``tools.study_hta_check``), within 2% per step.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from muon_repro.study.scopes import read_study_trace
from tools import study_hta_check

TRACES = study_hta_check.study_traces()
STUDY_TRACES = 18  # 2 optimizers x 2 variants x 4 ranks, and the 2 async full-step runs (rank 0)
STEPS = 5
OUTER = ("_Battle", "_Full_Training_Step")
SCOPES = {"FWD_BWD", "Attach_Grads", "Muon_Attach_Grads", "AdamW_Comm_AllReduce", "AdamW_AllReduce", "AdamW_Step", "Muon_Step"}
LAUNCH = ("cuda_runtime", "cuda_driver")
NCCL = ("ncclKernel", "ncclDevKernel")


# ---------------------------------------------------------------- the rule, from the raw JSON


def _union(intervals: list[tuple[float, float]]) -> float:
    total, lo, hi = 0.0, None, None
    for a, b in sorted(intervals):
        if hi is None or a > hi:
            total += 0.0 if hi is None else hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return total + (0.0 if hi is None else hi - lo)


def _raw(path: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float, float]]]:
    """(the step windows, the NCCL kernels as (ts, end, launch ts)) from the raw JSON."""
    with gzip.open(path, "rt") as fh:
        complete = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    notes = [e for e in complete if e.get("cat") == "user_annotation"]
    (outer,) = [e for e in notes if e["name"].endswith(OUTER)]
    lo, hi = outer["ts"], outer["ts"] + outer["dur"]
    inner = [e for e in notes if e["name"] in SCOPES and lo <= e["ts"] and e["ts"] + e["dur"] <= hi]
    inner.sort(key=lambda e: e["ts"])
    starts = [e["ts"] for e in inner if e["name"] == inner[0]["name"]]
    windows = list(zip(starts, starts[1:] + [hi]))
    launches: dict[int, float] = {}
    for e in complete:
        if e.get("cat") in LAUNCH:
            assert e["args"]["correlation"] not in launches, "two runtime calls share a correlation id"
            launches[e["args"]["correlation"]] = e["ts"]
    kernels = [
        (e["ts"], e["ts"] + e["dur"], launches[e["args"]["correlation"]])
        for e in complete
        if e.get("cat") == "kernel" and e["name"].startswith(NCCL) and e["args"].get("correlation") in launches
    ]
    return windows, kernels


def _nccl_ms(windows: list[tuple[float, float]], kernels: list[tuple[float, float, float]]) -> list[float]:
    last = len(windows) - 1
    return [
        _union([(ts, end) for ts, end, launch in kernels if lo <= launch < hi or (k == last and launch == hi)]) / 1000.0
        for k, (lo, hi) in enumerate(windows)
    ]


def test_the_study_traces_are_all_there():
    assert len(TRACES) == STUDY_TRACES, f"expected {STUDY_TRACES} study traces in {study_hta_check.TRACES}, found {len(TRACES)}"


@pytest.mark.parametrize("path", TRACES, ids=[p.name.removesuffix(".json.gz") for p in TRACES])
def test_per_step_nccl_time_is_the_union_of_nccl_kernels_launched_in_the_step(path):
    windows, kernels = _raw(path)
    expected = _nccl_ms(windows, kernels)
    assert len(expected) == STEPS and all(ms > 0 for ms in expected)
    steps = read_study_trace(path).scopes
    ours = steps.loc[steps["scope"] == "step"].sort_values("step")
    assert ours["step"].to_list() == list(range(STEPS))
    np.testing.assert_allclose(ours["comm_ms"].to_numpy(), expected, rtol=1e-9, atol=1e-9)
    # the cross-check tool reads the same windows and applies the same rule
    starts, outer_end = study_hta_check.study_windows(path)
    assert list(zip(starts, [*starts[1:], outer_end])) == windows
    np.testing.assert_allclose(study_hta_check.per_step_ms(np.array(kernels), starts, outer_end), expected, rtol=1e-9, atol=1e-9)


def test_union_and_windows_of_the_cross_check_tool():
    ts, end = np.array([0.0, 1.0, 5.0, 5.5, 9.0]), np.array([2.0, 3.0, 6.0, 5.7, 8.0])  # the last one ends before it starts
    assert study_hta_check.union_us(ts, end) == _union([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4.0
    assert study_hta_check.union_us(np.array([]), np.array([])) == 0.0
    starts = np.array([10.0, 20.0, 30.0])
    launches = np.array([5.0, 10.0, 19.9, 20.0, 35.0, 40.0, 40.1])
    assert study_hta_check.step_of(launches, starts, 40.0).tolist() == [-1, 0, 0, 1, 2, 2, -1]


@pytest.mark.parametrize(
    ("tolerance", "shown", "verdict"), [(0.02, "2%", "PASS"), (0.0005, "0.05%", "FAIL"), (0.00125, "0.125%", "PASS")]
)
def test_the_report_shows_the_tolerance_it_was_given(tolerance, shown, verdict):
    rows = [study_hta_check.Row("trace_rank0.json.gz", 0, ours_ms=1.001, hta_ms=1.0, kernels=3)]  # 0.1% apart
    report = study_hta_check.format_report(study_hta_check.Comparison(rows, "0.5.0", [], []), tolerance)
    assert report.endswith(f"tolerance {shown}: {verdict}"), report


# ---------------------------------------------------------------- against HolisticTraceAnalysis


@pytest.mark.slow
def test_per_step_nccl_time_agrees_with_holistic_trace_analysis():
    problem = study_hta_check.hta_problem(sys.executable)
    if problem:
        pytest.skip(
            f"HolisticTraceAnalysis cannot be imported ({problem}); it is a dev dependency: "
            "pip install -c constraints.txt -e '.[dev]', or run python -m tools.study_hta_check --hta-python PATH"
        )
    assert len(TRACES) == STUDY_TRACES
    result = study_hta_check.compare(TRACES)
    report = study_hta_check.format_report(result)
    assert not result.problems, report
    assert Counter(r.file for r in result.rows) == {p.name: STEPS for p in TRACES}, report
    assert all(r.kernels > 0 for r in result.rows), report
    worse = [r for r in result.rows if r.rel > study_hta_check.TOLERANCE]
    assert not worse, report
    assert report.endswith("PASS")


def _event(name: str, cat: str, tid: int, ts: float, dur: float, args: dict | None = None, pid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args or {}}


def test_a_collective_takes_the_kernel_it_launched_not_the_next_in_line(tmp_path):
    """A ``record_param_comms`` that launched no kernel (a coalesced call) takes none: the kernel after it belongs,
    by its External id, to the all-gather that launched it, whose size it then carries."""

    def comms(collective: str, elements: int, external: int) -> dict:
        out = 2 * elements if collective == "_allgather_base" else elements
        return {
            "Collective name": collective,
            "In msg nelems": elements,
            "Out msg nelems": out,
            "Group size": 2,
            "dtype": "Float",
            "Process Group Name": "1",
            "External id": external,
        }

    events = [
        _event("Muon_Full_Training_Step", "user_annotation", 1, 0, 1000),
        _event("Muon_Step", "user_annotation", 1, 10, 500),
        _event("record_param_comms", "cpu_op", 1, 20, 5, comms("allreduce", 1, 7)),  # launches no kernel
        _event("record_param_comms", "cpu_op", 1, 40, 5, comms("_allgather_base", 1000, 8)),
        _event("cudaLaunchKernel", "cuda_runtime", 1, 42, 2, {"correlation": 99, "External id": 8}),
        _event("ncclDevKernel_AllGather_RING_LL(x)", "kernel", 7, 50, 100, {"correlation": 99, "External id": 8}, pid=0),
    ]
    distributed = {"rank": 0, "world_size": 2, "pg_config": [{"pg_name": "1", "ranks": [0, 1], "pg_size": 2}]}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0, "distributedInfo": distributed}))
    collectives = read_study_trace(path).collectives
    assert collectives[["op", "elements", "payload_bytes", "ring_bytes"]].to_dict("records") == [
        {"op": "all_gather", "elements": 2000, "payload_bytes": 8000, "ring_bytes": 4000}
    ]
    assert (collectives["start_ns"].tolist(), collectives["end_ns"].tolist()) == ([50_000], [150_000])  # the kernel's
