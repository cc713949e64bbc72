"""Each scope counted once: a phase's CPU annotation and Kineto's GPU copy of it are one phase. On a GPU trace the
phase's time is the GPU work it launched (HolisticTraceAnalysis's launch convention), its CPU span a column apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muon_repro.table_set import build_tables


def _x(name: str, cat: str, ts: float, dur: float, tid: int = 1, pid: int = 1, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _trace(
    tmp_path: Path, launches: tuple[tuple[float, float, float], ...] = ((120, 300, 200), (150, 600, 200), (195, 850, 50))
) -> Path:
    """One profiled step of 1 ms: the optimizer scope (100-200 us) holds newton_schulz (110-190 us) on the CPU; the
    GPU copies of both scopes span 300-900 us; three kernels: two launched inside newton_schulz (300-500, 600-800),
    one inside the optimizer after it (850-900)."""
    gpu = {"pid": 0, "tid": 7}
    events = [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x("optimizer", "user_annotation", 100, 100),
        _x("newton_schulz", "user_annotation", 110, 80),
        _x("optimizer", "gpu_user_annotation", 300, 600, **gpu),
        _x("newton_schulz", "gpu_user_annotation", 300, 500, **gpu),
    ]
    for corr, (launch, start, dur) in enumerate(launches, start=1):
        events.append(_x("cudaLaunchKernel", "cuda_runtime", launch, 3, correlation=corr))
        events.append(_x(f"gemm_{corr}", "kernel", start, dur, correlation=corr, **gpu))
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_a_scope_and_its_gpu_copy_are_one_phase_timed_by_its_kernels(tmp_path):
    phases = build_tables([_trace(tmp_path)], workers=1)["phases"].set_index("phase")
    ns, opt = phases.loc["newton_schulz"], phases.loc["optimizer"]
    # CPU spans, once each (the old sum of both views gave 80 + 500 and 100 + 600 us)
    assert ns["cpu_ms_per_step"] == pytest.approx(0.080)
    assert opt["cpu_ms_per_step"] == pytest.approx(0.100)
    # GPU time: the kernels each launched, whole; the optimizer holds Newton-Schulz's and its own
    assert ns["gpu_ms_per_step"] == pytest.approx(0.400)
    assert opt["gpu_ms_per_step"] == pytest.approx(0.450)
    assert ns["ms_per_step"] == ns["gpu_ms_per_step"] and opt["ms_per_step"] == opt["gpu_ms_per_step"]
    assert ns["ms_per_step"] <= opt["ms_per_step"]


def test_a_launch_at_a_phase_end_belongs_to_the_enclosing_phase_not_the_ended_one(tmp_path):
    """Phase and step windows are half-open, as the step assignment's: a launch at 190 us, where newton_schulz
    (110-190 us) ends, is the optimizer's own work."""
    trace = _trace(tmp_path, launches=((120, 300, 200), (190, 600, 200)))
    phases = build_tables([trace], workers=1)["phases"].set_index("phase")
    assert phases.loc["newton_schulz", "gpu_ms_per_step"] == pytest.approx(0.200)
    assert phases.loc["optimizer", "gpu_ms_per_step"] == pytest.approx(0.400)


def test_a_phases_time_is_per_profiled_step_over_several_steps(tmp_path):
    """The same step recorded twice (the second 1 ms after the first, as ProfilerStep#2): each phase's GPU and CPU
    time per step is one step's, never the two steps' sum."""
    path = _trace(tmp_path)
    doc = json.loads(path.read_text())
    second = [
        e
        | {
            "ts": e["ts"] + 1000,
            "name": "ProfilerStep#2" if e["name"] == "ProfilerStep#1" else e["name"],
            "args": {k: v + 10 if k == "correlation" else v for k, v in e["args"].items()},
        }
        for e in doc["traceEvents"]
    ]
    path.write_text(json.dumps(doc | {"traceEvents": doc["traceEvents"] + second}))
    phases = build_tables([path], workers=1)["phases"].set_index("phase")
    assert (phases["steps"] == 2).all()
    assert phases.loc["newton_schulz", "gpu_ms_per_step"] == pytest.approx(0.400)
    assert phases.loc["optimizer", "gpu_ms_per_step"] == pytest.approx(0.450)
    assert phases.loc["optimizer", "cpu_ms_per_step"] == pytest.approx(0.100)


def test_a_scope_that_ends_after_its_steps_window_is_no_phase_of_the_step(tmp_path):
    """A forward scope from 1.5 to 1.6 ms, after the only profiled step (0-1 ms) ended, belongs to no step."""
    path = _trace(tmp_path)
    doc = json.loads(path.read_text())
    doc["traceEvents"].append(_x("forward", "user_annotation", 1500, 100))
    path.write_text(json.dumps(doc))
    phases = build_tables([path], workers=1)["phases"]
    assert "forward" not in set(phases["phase"]) and {"optimizer", "newton_schulz"} <= set(phases["phase"])
