"""HolisticTraceAnalysis's per-step convention: GPU work counts, whole, in the step whose
window contains the runtime call that launched it (see the breakdown module docstring).

Expected values are computed here from the raw JSON with plain ``json``/``gzip``; nothing of
the analysis is imported beyond its public entry point ``analyze_file``.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from muon_repro.analysis.breakdown import analyze_file

EXTERNAL = Path(__file__).resolve().parent / "data" / "external"  # MIT, see its README
TRACES = sorted(EXTERNAL.glob("*.json.gz"))
A100 = "hta_a100_nccl_ddp_rank0.json.gz"

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv", "other")
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
COMM_KERNEL = ("ncclKernel", "ncclDevKernel")
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
NO_STEP = None


# ---------------------------------------------------------------- the rule, from the raw JSON


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _kind(raw: str) -> str:
    """Collective kind from a Collective name, an nccl:<op> annotation or a kernel name."""
    s = raw.lower().replace("_", "")
    for needle, kind in (
        ("reducescatter", "reduce_scatter"),
        ("allgather", "all_gather"),
        ("allreduce", "all_reduce"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("sendrecv", "send_recv"),
    ):
        if needle in s:
            return kind
    return "other"


def _windows(events: list[dict]) -> dict[int, tuple[float, float]]:
    """CPU ProfilerStep#N windows (widest extent per N); {-1: whole trace} without steps."""
    found: dict[int, tuple[float, float]] = {}
    for e in events:
        m = STEP_NAME.match(str(e.get("name", "")))
        if e.get("ph") == "X" and m and not str(e.get("cat", "")).startswith("gpu_"):
            lo, hi = found.get(int(m.group(1)), (e["ts"], e["ts"] + e["dur"]))
            found[int(m.group(1))] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    return found or {-1: (-np.inf, np.inf)}


def _launch_ts(events: list[dict]) -> dict[int, float]:
    """correlation id -> start of the runtime call with that id; checked against the ac2g flows."""
    launches = {e["args"]["correlation"]: e["ts"] for e in events if e.get("ph") == "X" and e.get("cat") in LAUNCH}
    flows = {e["id"]: e["ts"] for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    assert all(flows[i] == t for i, t in launches.items() if i in flows), "ac2g flows and correlation ids disagree"
    return launches


def _step_of(t: float | None, windows: dict[int, tuple[float, float]]):
    if t is None:
        return NO_STEP
    for step, (lo, hi) in windows.items():
        if lo <= t < hi:
            return step
    return NO_STEP


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, run_lo, run_hi = 0.0, None, None
    for lo, hi in sorted(intervals):
        if run_hi is None or lo > run_hi:
            total += 0.0 if run_hi is None else run_hi - run_lo
            run_lo, run_hi = lo, hi
        else:
            run_hi = max(run_hi, hi)
    return (total + (run_hi - run_lo if run_hi is not None else 0.0)) / 1000.0


def _expected_comm(events: list[dict]) -> tuple[dict, dict]:
    """Per launch step: {kind: summed kernel ms} and the union (ms) of its comm kernels."""
    windows = _windows(events)
    launches = _launch_ts(events)
    callers = {
        e["args"]["External id"]: e["args"].get("Collective name", "")
        for e in events
        if e.get("name") == "record_param_comms" and "External id" in e.get("args", {})
    }
    sums: dict = {s: defaultdict(float) for s in windows}
    spans: dict = {s: [] for s in windows}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "kernel" or not e["name"].startswith(COMM_KERNEL):
            continue
        args = e.get("args", {})
        step = -1 if -1 in windows else _step_of(launches.get(args.get("correlation")), windows)
        if step is NO_STEP:
            continue
        name = args.get("Collective name") or callers.get(args.get("External id")) or e["name"]
        sums[step][_kind(name)] += e["dur"] / 1000.0
        spans[step].append((e["ts"], e["ts"] + e["dur"]))
    return sums, {s: _union_ms(v) for s, v in spans.items()}


def _expected_compute(events: list[dict]) -> dict:
    """Per launch step: union (ms) of the non-NCCL kernels, memcpys and memsets."""
    windows = _windows(events)
    launches = _launch_ts(events)
    spans: dict = {s: [] for s in windows}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_WORK or e["name"].startswith(COMM_KERNEL):
            continue
        step = -1 if -1 in windows else _step_of(launches.get(e.get("args", {}).get("correlation")), windows)
        if step is not NO_STEP:
            spans[step].append((e["ts"], e["ts"] + e["dur"]))
    return {s: _union_ms(v) for s, v in spans.items()}


def _has(events: list[dict], cats: tuple[str, ...], prefixes: tuple[str, ...] = ("",)) -> bool:
    return any(e.get("ph") == "X" and e.get("cat") in cats and str(e.get("name", "")).startswith(prefixes) for e in events)


# ---------------------------------------------------------------- the real traces


@pytest.fixture(scope="module")
def raw() -> dict[str, list[dict]]:
    return {p.name: _events(p) for p in TRACES}


def test_the_a100_trace_has_communication_kernels(raw):
    with_comm = {name for name, events in raw.items() if _has(events, ("kernel",), COMM_KERNEL)}
    assert A100 in with_comm
    assert "tracelens_b200_eager.json.gz" in with_comm  # the others: gloo on CPU, no collectives


@functools.cache
def _complete_events(path: Path) -> frozenset[tuple[str, str]]:
    """(category, name) of every complete event of a trace: read once at collection, however many lists ask."""
    return frozenset((str(e.get("cat")), str(e.get("name", ""))) for e in _events(path) if e.get("ph") == "X")


def _traces_with(cats: tuple[str, ...], prefixes: tuple[str, ...] = ("",)) -> list[str]:
    """The external traces that have such events (collected once, so no test is a skip in disguise)."""
    found = [p.name for p in TRACES if any(c in cats and n.startswith(prefixes) for c, n in _complete_events(p))]
    return found or ["(none)"]


@pytest.mark.parametrize("name", _traces_with(("kernel",), COMM_KERNEL))
def test_per_step_kernel_time_per_kind_follows_the_launch_step(name, raw):
    events = raw[name]
    sums, unions = _expected_comm(events)
    steps = analyze_file(str(EXTERNAL / name)).steps.set_index("step")
    assert sorted(steps.index) == sorted(sums)
    for step, by_kind in sums.items():
        for kind in KINDS:
            assert steps.loc[step, f"comm_{kind}_ms"] == pytest.approx(by_kind.get(kind, 0.0), rel=1e-9, abs=1e-9), (step, kind)
        assert steps.loc[step, "comm_ms"] == pytest.approx(unions[step], rel=1e-9, abs=1e-9), step
    assert sum(v for by_kind in sums.values() for v in by_kind.values()) > 0


@pytest.mark.parametrize("name", _traces_with(GPU_WORK))
def test_per_step_gpu_compute_follows_the_launch_step(name, raw):
    events = raw[name]
    expected = _expected_compute(events)
    steps = analyze_file(str(EXTERNAL / name)).steps.set_index("step")
    for step, ms in expected.items():
        assert steps.loc[step, "compute_ms"] == pytest.approx(ms, rel=1e-9, abs=1e-9), step


def test_h100_kernels_outside_their_launch_step_move(raw):
    """On this trace 501 kernels launched before the step run inside it and 78 launched in it
    run after it: the launch-step compute differs from the window-clipped one."""
    name = "tracelens_h100_qwen0.5b.json.gz"
    if name not in raw:
        pytest.fail(f"{name} is absent")
    (row,) = analyze_file(str(EXTERNAL / name)).steps.itertuples()
    assert row.compute_ms < 0.8 * row.compute_window_ms


def test_gloo_transfers_count_in_the_step_of_their_call(raw):
    """gloo on CPU: the launch of a transfer is its c10d:: caller; this foreign trace has none,
    so each gloo:<op> worker annotation is its own launch. The kind column sums durations."""
    name = "hta_cpu_gloo_rank34.json.gz"
    if name not in raw:
        pytest.fail(f"{name} is absent")
    events = raw[name]
    assert not any(str(e.get("name", "")).startswith("c10d::") for e in events)
    windows = _windows(events)
    expected: dict = {s: defaultdict(float) for s in windows}
    for e in events:
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("gloo:"):
            step = _step_of(e["ts"], windows)
            if step is not NO_STEP:
                expected[step][_kind(e["name"])] += e["dur"] / 1000.0
    steps = analyze_file(str(EXTERNAL / name)).steps.set_index("step")
    for step, by_kind in expected.items():
        assert by_kind  # the trace has gloo transfers
        for kind in KINDS:
            assert steps.loc[step, f"comm_{kind}_ms"] == pytest.approx(by_kind.get(kind, 0.0), rel=1e-9, abs=1e-9)
        # two worker threads overlap: the union is less than the sum
        assert steps.loc[step, "comm_ms"] < steps.loc[step, "comm_all_reduce_ms"]


# ---------------------------------------------------------------- synthetic traces

CPU, GPU_PID, STREAM = 100, 0, 7


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid=CPU, tid=1, **args) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = {k.replace("_", " ") if k.startswith(("External", "Collective")) else k: v for k, v in args.items()}
    return e


def _steps(*bounds: tuple[int, float, float]) -> list[dict]:
    return [_x(f"ProfilerStep#{n}", lo, hi - lo, cat="user_annotation") for n, lo, hi in bounds]


def _launch(ts: float, correlation: int, ext: int, name: str = "cudaLaunchKernel") -> list[dict]:
    """A runtime call and the ac2g flow from it (as Kineto writes them)."""
    return [
        _x(name, ts, 5, cat="cuda_runtime", correlation=correlation, External_id=ext),
        {"ph": "s", "id": correlation, "pid": CPU, "tid": 1, "ts": ts, "cat": "ac2g", "name": "ac2g"},
    ]


def _kernel(name: str, ts: float, dur: float, correlation: int, ext: int | None = None, **args) -> dict:
    extra = {"External_id": ext} if ext is not None else {}
    return _x(name, ts, dur, cat="kernel", pid=GPU_PID, tid=STREAM, correlation=correlation, **extra, **args)


def _rpc(ts: float, dur: float, ext: int, collective: str, **sizes) -> dict:
    """A ``record_param_comms`` caller; ``sizes``: more of its args (``{"In msg nelems": 1024}``...)."""
    return _x("record_param_comms", ts, dur, External_id=ext, Collective_name=collective, dtype="Float", **sizes)


def _breakdown(tmp_path: Path, events: list[dict], name: str = "rank0.json", **kwargs):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return analyze_file(str(path), **kwargs)


def _analyze(tmp_path: Path, events: list[dict], name: str = "rank0.json"):
    return _breakdown(tmp_path, events, name).steps.set_index("step")


def _gloo_threads() -> list[dict]:
    """Thread names of a gloo rank: the caller (tid 1) and a worker (tid 2)."""
    return [
        {"ph": "M", "name": "thread_name", "pid": CPU, "tid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": CPU, "tid": 2, "args": {"name": "pt_gloo_runloop"}},
    ]


def test_a_kernel_launched_in_step_1_that_runs_in_step_2(tmp_path):
    events = [
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        _rpc(900, 40, ext=7, collective="allreduce"),
        *_launch(910, correlation=42, ext=7),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 1200, 300, correlation=42, ext=7),
        _x("aten::mm", 950, 20),
        *_launch(960, correlation=43, ext=8),
        _kernel("sgemm_128x64", 1400, 200, correlation=43, ext=8),
        *_launch(1010, correlation=44, ext=9),
        _kernel("sgemm_128x64", 1020, 100, correlation=44, ext=9),
    ]
    steps = _analyze(tmp_path, events)
    s1, s2 = steps.loc[1], steps.loc[2]
    # launch step: the whole kernel counts in step 1
    assert s1["comm_all_reduce_ms"] == pytest.approx(0.3) and s1["comm_ms"] == pytest.approx(0.3)
    assert s2["comm_all_reduce_ms"] == 0 and s2["comm_ms"] == 0
    assert (s1["comm_calls"], s2["comm_calls"]) == (1, 0)
    assert s1["compute_ms"] == pytest.approx(0.2) and s2["compute_ms"] == pytest.approx(0.1)
    # window: it ran in step 2
    assert s1["comm_window_ms"] == 0 and s2["comm_window_ms"] == pytest.approx(0.3)
    assert s1["compute_window_ms"] == 0 and s2["compute_window_ms"] == pytest.approx(0.3)
    assert s2["overlap_ms"] == pytest.approx(0.1)  # sgemm [1400, 1600) under the all-reduce [1200, 1500)
    busy = steps["compute_window_ms"] + steps["comm_window_ms"] - steps["overlap_ms"]
    np.testing.assert_allclose(busy + steps["idle_ms"], steps["step_ms"], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    ("label", "linked_by"),
    [("allgather", "External id"), ("_allgather_base", "enclosing"), ("nccl:all_gather", "enclosing")],
)
def test_a_generic_kernel_gets_the_kind_of_its_launcher(tmp_path, label, linked_by):
    """ncclDevKernel_Generic names no op and carries no Collective name: its kind is that of
    the record_param_comms (or nccl:<op> annotation) that launched it, in every step."""
    events = [*_steps((1, 0, 1000), (2, 1000, 2000))]
    for step, t0 in ((1, 0.0), (2, 1000.0)):
        ext, corr = 10 + step, 100 + step
        launcher = (
            _x(label, t0 + 100, 50, cat="user_annotation", External_id=ext + 1000)
            if label.startswith("nccl:")
            else _rpc(t0 + 100, 50, ext=ext, collective=label)
        )
        kernel_ext = ext if linked_by == "External id" else 999  # links nothing: found by enclosing the launch
        events += [
            launcher,
            *_launch(t0 + 120, correlation=corr, ext=kernel_ext, name="hipExtModuleLaunchKernel"),
            _kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", t0 + 200, 100, correlation=corr, ext=kernel_ext),
        ]
    for e in events:  # an AMD trace: hip_runtime launches
        if e.get("cat") == "cuda_runtime":
            e["cat"] = "hip_runtime"
    steps = _analyze(tmp_path, events)
    np.testing.assert_allclose(steps["comm_all_gather_ms"], [0.1, 0.1])
    np.testing.assert_allclose(steps["comm_other_ms"], [0.0, 0.0])


def test_a_generic_kernel_without_a_launcher_is_other(tmp_path):
    events = [
        *_steps((1, 0, 1000)),
        *_launch(120, correlation=5, ext=1),
        _kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 200, 100, correlation=5, ext=1),
    ]
    assert _analyze(tmp_path, events).loc[1, "comm_other_ms"] == pytest.approx(0.1)


def test_the_last_step_is_kept_and_counts_what_it_launched_in_full(tmp_path):
    """Every ProfilerStep#N is kept, the last included; a kernel launched in the last step
    counts whole in it even though it ends after the trace's last CPU event. A kernel
    launched before the first step belongs to none (but its window time is counted)."""
    events = [
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        *_launch(-50, correlation=1, ext=1),
        _kernel("ncclDevKernel_Broadcast_RING_LL(x)", 10, 40, correlation=1, Collective_name="broadcast"),
        _rpc(1900, 30, ext=2, collective="allreduce"),
        *_launch(1910, correlation=2, ext=2),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 1950, 1050, correlation=2, ext=2),
    ]
    steps = _analyze(tmp_path, events)
    assert list(steps.index) == [1, 2]
    last = steps.loc[2]
    assert last["comm_all_reduce_ms"] == pytest.approx(1.05) and last["comm_ms"] == pytest.approx(1.05)
    assert last["comm_window_ms"] == pytest.approx(0.05)
    first = steps.loc[1]
    assert first["comm_ms"] == 0 and first["comm_broadcast_ms"] == 0 and first["comm_calls"] == 0
    assert first["comm_window_ms"] == pytest.approx(0.04)


def test_gloo_transfer_counts_in_the_step_of_its_c10d_call(tmp_path):
    """On CPU the launch is the caller's c10d:: op: a transfer issued at the end of step 1
    that the worker runs into step 2 counts whole in step 1; its window time is split."""
    dims = {"Input Dims": [[4, 4]], "Input type": ["float"]}
    events = [
        *_gloo_threads(),
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        _x("aten::mm", 100, 300),
        {**_x("c10d::allreduce_", 950, 20), "args": dims},
        {**_x("gloo:all_reduce", 990, 310, cat="user_annotation", tid=2), "args": dims},
    ]
    steps = _analyze(tmp_path, events, name="rank1.json")
    assert steps.loc[1, "comm_all_reduce_ms"] == pytest.approx(0.31) and steps.loc[1, "comm_ms"] == pytest.approx(0.31)
    assert steps.loc[2, "comm_all_reduce_ms"] == 0 and steps.loc[2, "comm_calls"] == 0
    assert steps.loc[1, "comm_window_ms"] == pytest.approx(0.01) and steps.loc[2, "comm_window_ms"] == pytest.approx(0.3)
    np.testing.assert_allclose(steps["compute_ms"], steps["compute_window_ms"])  # CPU ops: where they ran


def test_the_tolerant_decoder_links_kernels_the_same_way(tmp_path):
    """A piece only json.loads accepts (a NaN) decodes correlation ids like the fast path."""
    events = [
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        _rpc(900, 40, ext=7, collective="allgather"),
        *_launch(910, correlation=42, ext=7),
        _kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 1200, 300, correlation=42, ext=7),
        *_launch(960, correlation=43, ext=8),
        _kernel("sgemm_128x64", 1400, 200, correlation=43, ext=8),
    ]
    clean = _analyze(tmp_path, events, name="rank0.json")
    dirty = _analyze(tmp_path, [*events, _x("odd", 5, 1, x=float("nan"))], name="rank1.json")
    for col in ("comm_ms", "comm_all_gather_ms", "comm_window_ms", "compute_ms", "compute_window_ms"):
        np.testing.assert_allclose(dirty[col], clean[col], err_msg=col)
    assert clean.loc[1, "comm_all_gather_ms"] == pytest.approx(0.3) and clean.loc[1, "compute_ms"] == pytest.approx(0.2)


def test_a_launch_belongs_to_the_step_whose_half_open_window_holds_it(tmp_path):
    """Windows are [start, stop): a kernel launched exactly at step 2's start (1000) counts in step 2, and one
    launched exactly at step 2's stop (2000, with step 3 only from 2500) counts in no step."""
    events = [
        *_steps((1, 0, 1000), (2, 1000, 2000), (3, 2500, 3500)),
        *_launch(1000, correlation=1, ext=1),
        _kernel("sgemm_128x64", 1100, 100, correlation=1),
        *_launch(2000, correlation=2, ext=2),
        _kernel("sgemm_128x64", 2100, 200, correlation=2),
    ]
    steps = _analyze(tmp_path, events)
    assert steps["compute_ms"].tolist() == pytest.approx([0.0, 0.1, 0.0])


def test_exposed_communication_and_the_optimizer_share_of_a_step(tmp_path):
    """One 1 ms step: an all-reduce kernel over [100, 500), a matmul over [300, 400) under it, an optimizer
    annotation over [600, 800). Overlap 0.1 ms; exposed = comm 0.4 - overlap 0.1 = 0.3 ms; idle = 1 - (0.4 + 0.1
    - 0.1) = 0.6 ms; the optimizer's share is of the step (0.2 / 1), not of the compute."""
    events = [
        *_steps((1, 0, 1000)),
        _rpc(50, 40, ext=7, collective="allreduce"),
        *_launch(60, correlation=1, ext=7),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 100, 400, correlation=1, ext=7),
        *_launch(70, correlation=2, ext=8),
        _kernel("sgemm_128x64", 300, 100, correlation=2, ext=8),
        _x("optimizer", 600, 200, cat="user_annotation"),
    ]
    step = _analyze(tmp_path, events).loc[1]
    expected = {
        "comm_window_ms": 0.4,
        "compute_window_ms": 0.1,
        "overlap_ms": 0.1,
        "exposed_comm_ms": 0.3,
        "exposed_comm_frac": 0.3,
        "idle_ms": 0.6,
        "optimizer_ms": 0.2,
        "optimizer_share": 0.2,
    }
    assert step[list(expected)].to_dict() == pytest.approx(expected)


def test_gpu_work_without_a_correlation_id_is_linked_to_no_launch(tmp_path):
    """A kernel with no ``args.correlation`` is not joined to a runtime call that has none either (a
    cudaDeviceSynchronize in step 1): it was launched outside what the trace links, so it counts in no step."""
    events = [
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        _x("cudaDeviceSynchronize", 100, 5, cat="cuda_runtime"),
        _x("sgemm_128x64", 1200, 100, cat="kernel", pid=GPU_PID, tid=STREAM),
        *_launch(1010, correlation=5, ext=5),
        _kernel("sgemm_128x64", 1500, 200, correlation=5),
    ]
    steps = _analyze(tmp_path, events)
    assert steps["compute_ms"].tolist() == pytest.approx([0.0, 0.2])
    assert steps["compute_window_ms"].tolist() == pytest.approx([0.0, 0.3])  # where it ran, it still counts


def test_a_kernel_whose_runtime_call_is_missing_counts_in_its_callers_step(tmp_path):
    """No cudaLaunchKernel with the kernel's correlation: its launch is its record_param_comms caller's start (900,
    step 1, linked by External id), though it runs in step 2."""
    events = [
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        _rpc(900, 40, ext=7, collective="allreduce"),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 1200, 300, correlation=42, ext=7),
    ]
    b = _breakdown(tmp_path, events)
    assert b.steps["comm_all_reduce_ms"].tolist() == pytest.approx([0.3, 0.0])
    assert b.collectives[["step", "launch_ts"]].values.tolist() == [[1, 900.0]]


def test_collectives_launched_before_the_first_step_are_left_out_of_the_collectives_table(tmp_path):
    """The collectives table holds the calls that count in a step: the broadcast launched at -50 (before step 1)
    is not in it, the all-reduce launched in step 2 is."""
    events = [
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        *_launch(-50, correlation=1, ext=1),
        _kernel("ncclDevKernel_Broadcast_RING_LL(x)", 10, 40, correlation=1, Collective_name="broadcast"),
        _rpc(1900, 30, ext=2, collective="allreduce"),
        *_launch(1910, correlation=2, ext=2),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 1950, 100, correlation=2, ext=2),
    ]
    assert _breakdown(tmp_path, events).collectives[["op", "step"]].values.tolist() == [["all_reduce", 2]]


def test_nccl_sizes_are_of_the_full_array_and_from_the_kernel_first(tmp_path):
    """S is the full array: a reduce-scatter's input (2048 of float32, group 2: sends (2-1) * 1024 * 4 = 4096 B),
    a gather's output (4096: sends the array once, 16384 B), the larger of in and out for ops other than all-gather
    and reduce-scatter. Sizes come from the kernel's own args when it has them (1024, group 2: an all-reduce sends
    2 * (2-1) * 512 * 4 = 4096 B), not from its caller's (4096, group 4)."""
    events = [
        *_steps((1, 0, 1000)),
        _rpc(
            100, 40, ext=1, collective="_reduce_scatter_base", **{"In msg nelems": 2048, "Out msg nelems": 1024, "Group size": 2}
        ),
        *_launch(110, correlation=1, ext=1),
        _kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(x)", 200, 100, correlation=1, ext=1),
        _rpc(400, 40, ext=2, collective="gather", **{"In msg nelems": 1024, "Out msg nelems": 4096, "Group size": 4}),
        *_launch(410, correlation=2, ext=2),
        _kernel("ncclDevKernel_Generic(x)", 500, 100, correlation=2, ext=2),
        _rpc(600, 40, ext=3, collective="allreduce", **{"In msg nelems": 4096, "Out msg nelems": 4096, "Group size": 4}),
        *_launch(610, correlation=3, ext=3),
        _kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
            700,
            100,
            correlation=3,
            ext=3,
            Collective_name="allreduce",
            dtype="Float",
            **{"In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2},
        ),  # fmt: skip
    ]
    b = _breakdown(tmp_path, events)
    columns = ["op", "group_size", "elements", "size_bytes", "bytes"]
    assert b.collectives[columns].values.tolist() == [
        ["reduce_scatter", 2, 2048, 8192, 4096],
        ["gather", 4, 4096, 16384, 16384],
        ["all_reduce", 2, 1024, 4096, 4096],
    ]
    assert b.steps["comm_bytes"].tolist() == [4096 + 16384 + 4096]


def test_an_op_enclosing_a_collective_call_is_not_computation(tmp_path):
    """On CPU, an autograd Function around one c10d:: call sits blocked in it: only the matmul is compute (0.1 ms),
    not the 0.3 ms Function."""
    dims = {"Input Dims": [[4, 4]], "Input type": ["float"]}
    events = [
        *_gloo_threads(),
        *_steps((1, 0, 1000)),
        _x("MyFunctionBackward", 100, 300),
        {**_x("c10d::allreduce_", 150, 20), "args": dims},
        {**_x("gloo:all_reduce", 160, 200, cat="user_annotation", tid=2), "args": dims},
        _x("aten::mm", 500, 100),
    ]
    step = _analyze(tmp_path, events, name="rank1.json").loc[1]
    assert (step["compute_ms"], step["compute_window_ms"]) == pytest.approx((0.1, 0.1))


def test_a_gloo_transfer_without_a_caller_counts_in_the_step_where_it_starts(tmp_path):
    """An unmatched worker transfer is its own launch: started at 990 (step 1), it counts whole in step 1 although
    it ends at 1300, in step 2."""
    dims = {"Input Dims": [[4, 4]], "Input type": ["float"]}
    events = [
        *_gloo_threads(),
        *_steps((1, 0, 1000), (2, 1000, 2000)),
        {**_x("gloo:all_reduce", 990, 310, cat="user_annotation", tid=2), "args": dims},
    ]
    steps = _analyze(tmp_path, events, name="rank1.json")
    assert steps["comm_all_reduce_ms"].tolist() == pytest.approx([0.31, 0.0]) and steps["comm_calls"].tolist() == [1, 0]


BF16_ALL_GATHER = {
    "Input Dims": [[600], [300], [], [], []],
    "Input type": ["c10::BFloat16", "c10::BFloat16", "", "Scalar", "Scalar"],
}
BF16_SHARD = {"Input Dims": [[300]], "Input type": ["c10::BFloat16"]}  # what gloo's worker annotation shows


def test_a_gloo_all_gather_matches_its_shard_sized_transfer_within_a_microsecond(tmp_path):
    """c10d::_allgather_base_ (output 600, input 300 of bf16: group 2) and its worker's gloo:all_gather of the
    300-element shard, stamped 0.5 us before the caller (clock rounding): one call, moved by the worker, of the full
    600 elements (1200 B), sending (2-1) * 300 * 2 = 600 B."""
    events = [
        *_gloo_threads(),
        *_steps((1, 0, 1000)),
        {**_x("c10d::_allgather_base_", 100, 20), "args": BF16_ALL_GATHER},
        {**_x("gloo:all_gather", 99.5, 200, cat="user_annotation", tid=2), "args": BF16_SHARD},
    ]
    coll = _breakdown(tmp_path, events, name="rank1.json").collectives
    columns = ["op", "source", "group_size", "elements", "size_bytes", "bytes", "start", "issue_ts"]
    assert coll[columns].values.tolist() == [["all_gather", "gloo", 2, 600, 1200, 600, 99.5, 100.0]]


def test_an_unmatched_gloo_all_gather_is_sized_as_the_full_array(tmp_path):
    """A worker's gloo:all_gather with no caller shows only the shard (300 bf16): S is shard x group size (2)."""
    events = [
        *_gloo_threads(),
        *_steps((1, 0, 1000)),
        {**_x("gloo:all_gather", 100, 200, cat="user_annotation", tid=2), "args": BF16_SHARD},
    ]
    coll = _breakdown(tmp_path, events, name="rank1.json", group_sizes={"*": 2}).collectives
    assert coll[["source", "group_size", "elements", "size_bytes", "bytes"]].values.tolist() == [["gloo", 2, 600, 1200, 600]]


def test_a_point_to_point_receive_sends_no_bytes(tmp_path):
    """gloo's send and recv run on the calling thread: the send of 256 float32 sends the array (1024 B), the
    receive of the same size sends nothing."""
    dims = {"Input Dims": [[256], [], []], "Input type": ["float", "", ""]}
    events = [
        *_gloo_threads(),
        *_steps((1, 0, 1000)),
        {**_x("c10d::send", 100, 50), "args": dims},
        {**_x("c10d::recv_", 300, 50), "args": dims},
    ]
    b = _breakdown(tmp_path, events, name="rank1.json", group_sizes={"*": 2})
    assert b.collectives[["op", "size_bytes", "bytes"]].values.tolist() == [["send_recv", 1024, 1024], ["send_recv", 1024, 0]]
    assert b.steps["comm_bytes"].tolist() == [1024]
