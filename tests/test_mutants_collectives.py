"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of the names and
sizes of collectives (muon_repro.analysis.collectives: the spellings of an op, receives, kinds, phase labels, step
names, dtype widths, bus bandwidth factors, the sizes read from Input Dims), of the bytes of a trace file
(muon_repro.analysis.byte_source: the limit plus one byte, gzip's magic and size hint, the errors, the decoder
override, the offset source, the whitespace scans) and of the step windows (muon_repro.analysis.step_windows).

Every expected value is derived by hand from the documented definitions (the modules' docstrings,
muon_repro.analysis.breakdown's definitions, docs/method.md "Communication model", "Bus bandwidth", "Trace
conventions")."""

from __future__ import annotations

import gzip
import os

import numpy as np
import pandas as pd
import pytest
from test_trace_robustness import analyze_warned, gpu_trace, write, x

from muon_repro.analysis import byte_source
from muon_repro.analysis.byte_source import OffsetSource, Source, last_non_ws, skip_ws
from muon_repro.analysis.collectives import (
    busbw_factor,
    c10d_sizes,
    coarse_phase,
    dtype_info,
    is_receive,
    kind_of,
    label_phase,
    normalize_op,
    numel_any,
    step_number,
)
from muon_repro.analysis.errors import TraceError, TraceLimitError
from muon_repro.analysis.limits import TraceLimits
from muon_repro.analysis.step_windows import assign_steps

# ---------------------------------------------------------------- collective names (normalize_op, is_receive, kind_of)


@pytest.mark.parametrize(
    ("raw", "op"),
    [
        # reduce, gather and scatter are kinds of their own (the steps table files them under "other")
        ("c10d::reduce_", "reduce"),
        ("c10d::gather_", "gather"),
        ("c10d::scatter_", "scatter"),
        # hyphens spell underscores
        ("all-reduce", "all_reduce"),
        # the unsnaked spelling, as for allgather / allreduce
        ("reducescatter", "reduce_scatter"),
        ("all_to_all", "all_to_all"),
        ("ncclDevKernel_AllToAll(ncclDevKernelArgsStorage<4096ul>)", "all_to_all"),
        # c10d's receive from any source is a point-to-point op too
        ("c10d::recv_any_source_", "send_recv"),
        ("c10d::_broadcast_oop", "broadcast"),
    ],
)
def test_more_spellings_of_a_collective_map_to_their_kind(raw, op):
    assert normalize_op(raw) == op


def test_a_name_that_says_recv_is_no_receive_unless_its_op_is_point_to_point():
    # only a send_recv op can be a receive; the pipeline's phase label says recv but is no collective call
    assert is_receive("send_recv", "c10d::recv_any_source_")
    assert not is_receive("other", "pp_recv_activation")


def test_the_kinds_without_a_column_of_their_own_are_other():
    # docs/method.md "Collectives": all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send_recv, or other
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv"):
        assert kind_of(op) == op
    for op in ("barrier", "reduce", "gather", "scatter"):
        assert kind_of(op) == "other"


# ---------------------------------------------------------------- phase labels and step names


def test_any_dp_or_tp_label_is_a_phase_of_ours_and_other_names_are_none():
    assert label_phase("dp_custom_bucket_2") == "dp_custom_bucket_2"
    assert label_phase("tp_custom") == "tp_custom"
    assert label_phase("pp_custom") is None and label_phase("aten::mm") is None


def test_a_torch_optimizer_step_annotation_is_the_optimizer_phase():
    # torch names it Optimizer.step#<class>.step
    assert coarse_phase("Optimizer.step#AdamW.step") == "optimizer"
    assert label_phase("Optimizer.step#Muon.step") == "optimizer"
    assert coarse_phase("Optimizer.zero_grad#AdamW.zero_grad") is None


def test_a_step_number_is_the_whole_number_after_the_hash():
    # HTA's pattern allows spaces around the hash; anything after the digits makes it no step name
    assert step_number("ProfilerStep#12") == 12
    assert step_number("ProfilerStep # 7") == 7
    assert step_number("ProfilerStep#12abc") is None
    assert step_number("ProfilerStep#") is None


# ---------------------------------------------------------------- dtypes and bus bandwidth factors


def test_the_byte_width_of_each_profiler_dtype():
    for name, expected in (
        ("double", ("float64", 8)),
        ("int", ("int32", 4)),
        ("short", ("int16", 2)),
        ("signed char", ("int8", 1)),
        ("bool", ("bool", 1)),
        ("c10::complex<float>", ("complex64", 8)),
        ("c10::complex<double>", ("complex128", 16)),
        # fp8 in any spelling is one byte
        ("c10::Float8_e4m3fn", ("float8", 1)),
        ("Float8_e5m2", ("float8", 1)),
    ):
        assert dtype_info(name) == expected, name
    assert dtype_info("") is None and dtype_info(4) is None


def test_busbw_factors_of_the_other_kinds_and_of_small_groups():
    # docs/method.md "Bus bandwidth": all_to_all (n-1)/n; send/recv, reduce, gather, scatter 1
    assert busbw_factor("all_to_all", 4) == 0.75
    for op in ("send_recv", "reduce", "gather", "scatter"):
        assert busbw_factor(op, 4) == 1.0
    # a group of one: 2(n-1)/n = 0 and (n-1)/n = 0, not unknown; a group of no rank has no factor
    assert busbw_factor("all_reduce", 1) == 0.0 and busbw_factor("all_gather", 1) == 0.0
    assert busbw_factor("all_reduce", 0) is None
    assert busbw_factor("barrier", 4) is None


# ---------------------------------------------------------------- sizes from Input Dims


def test_a_shape_is_a_list_of_non_negative_ints_and_a_scalar_has_one_element():
    assert numel_any([]) == 1  # a scalar's shape []
    assert numel_any([[2, 3], []]) == 7  # a TensorList: 6 + 1
    assert numel_any([2, -1]) is None and numel_any([True, 3]) is None
    assert numel_any([[2], "x"]) is None  # one part that is no shape: the list has no size


def test_an_op_with_fewer_input_dims_than_its_layout_has_no_size():
    assert c10d_sizes("c10d::allreduce_", [], []) == (None, None, None)
    assert c10d_sizes("c10d::_allgather_base_", [[8]], ["float"]) == (8, ("float32", 4), None)


def test_empty_tensors_give_no_group_size_and_no_error():
    # S = 0 elements: the group size n = out / in (all-gather) or in / out (reduce-scatter) is unknown, not 0 / 0
    assert c10d_sizes("c10d::_reduce_scatter_base_", [[0], [0]], ["float", "float"]) == (0, ("float32", 4), None)
    assert c10d_sizes("c10d::_allgather_base_", [[0], [0]], ["float", "float"]) == (0, ("float32", 4), None)


def test_coalesced_tensor_collectives_are_sized_like_their_base_ops():
    # allgather_into_tensor_coalesced_(outputs[], inputs[]): S = the outputs 8 + 6, n = 14 / 7
    assert c10d_sizes("c10d::allgather_into_tensor_coalesced_", [[[8], [6]], [[4], [3]]], ["TensorList", "TensorList"]) == (
        14,
        None,
        2,
    )
    # reduce_scatter_tensor_coalesced_(outputs[], inputs[]): S = the inputs 12 + 9, n = 21 / 7
    assert c10d_sizes("c10d::reduce_scatter_tensor_coalesced_", [[[4], [3]], [[12], [9]]], ["TensorList", "TensorList"]) == (
        21,
        None,
        3,
    )


def test_list_collectives_are_sized_by_the_full_side():
    # allgather_(outputs[][], inputs[]): S is all the outputs, 2 x 4
    assert c10d_sizes("c10d::allgather_", [[[[4], [4]]], [[4]]], ["GenericList", "TensorList"]) == (8, None, None)
    # reduce_scatter_(outputs[], inputs[][]): S is all the inputs, 3 x 5
    assert c10d_sizes("c10d::reduce_scatter_", [[[5]], [[[5], [5], [5]]]], ["TensorList", "GenericList"]) == (15, None, None)


# ---------------------------------------------------------------- byte sources


def _read_all(src: Source, chunk: int) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := src.readinto(memoryview(buf)):
        out += buf[:n]
        if n < chunk:
            break
    return bytes(out)


@pytest.mark.parametrize(
    ("gzipped", "said"), [(False, "the file holds more than 4 bytes"), (True, "decompressed more than 4 bytes")]
)
def test_a_source_hands_out_the_limit_plus_one_byte_then_names_the_limit(tmp_path, gzipped, said):
    data = b'{"traceEvents": []}'
    path = tmp_path / "t.json"
    path.write_bytes(gzip.compress(data) if gzipped else data)
    with Source(path, TraceLimits(max_trace_bytes=4)) as src, pytest.raises(TraceLimitError) as caught:
        src.readinto(memoryview(bytearray(64)))
    assert said in str(caught.value) and str(path) in str(caught.value)
    assert src.bytes_read == 5  # the byte that proves the stream is larger, and no more


def test_gzip_is_recognised_by_both_magic_bytes_not_the_first_alone(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(b"\x1fplain")  # the first magic byte only: a plain file, whatever its name
    with Source(path) as src:
        assert not src.gzipped and _read_all(src, 4) == b"\x1fplain"


def test_a_gzip_sources_size_hint_is_its_trailers_size_and_at_least_four_times_the_file(tmp_path):
    # the trailer's last 4 bytes: the decompressed size modulo 4 GiB, little-endian
    compressible, random = tmp_path / "zeros.gz", tmp_path / "random.gz"
    compressible.write_bytes(gzip.compress(bytes(100_000)))
    random.write_bytes(gzip.compress(os.urandom(1000)))
    with Source(compressible) as src:
        assert src.size_hint == 100_000 > 4 * compressible.stat().st_size
    with Source(random) as src:
        assert src.size_hint == 4 * random.stat().st_size > 1000
    plain = tmp_path / "plain.json"
    plain.write_bytes(b"[]" * 50)
    with Source(plain) as src:
        assert src.size_hint == 100 and not src.gzipped


def test_a_file_of_just_the_gzip_magic_opens_and_then_reads_as_truncated(tmp_path):
    # shorter than gzip's 18 bytes of header and trailer: no trailer to read the size from
    path = tmp_path / "t.json.gz"
    path.write_bytes(b"\x1f\x8b")
    with Source(path) as src:
        assert src.gzipped and src.size_hint == 2
        with pytest.raises(TraceError, match="truncated gzip file"):
            src.readinto(memoryview(bytearray(16)))


def test_an_unopenable_file_is_a_trace_error_naming_it_and_the_reason(tmp_path):
    path = tmp_path / "missing.json"
    with pytest.raises(TraceError) as caught:
        Source(path)
    assert str(caught.value) == f"{path}: cannot open: No such file or directory"


@pytest.mark.parametrize("value", ["ZLIB", " zlib "])
def test_the_zlib_override_ignores_case_and_spaces(monkeypatch, value):
    monkeypatch.setenv(byte_source.FORCE_VARIABLE, value)
    assert byte_source.gzip_decoder() == "zlib"


def test_an_offset_source_gives_the_prefix_then_the_file_from_the_offset_in_any_buffer_size(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b"0123456789")
    for chunk in (1, 3, 64):
        with OffsetSource(path, 6, b"[abcde") as src:
            assert _read_all(src, chunk) == b"[abcde6789", chunk


# ---------------------------------------------------------------- whitespace scans


def test_whitespace_is_jsons_four_bytes_carriage_return_included():
    assert skip_ws(b" \t\r\nx", 0) == 4
    assert last_non_ws(b"x\r\n\t ") == 0
    assert last_non_ws(b"ab\r") == 1


def test_skip_ws_past_the_end_is_where_it_started_and_all_whitespace_has_no_last_byte():
    assert skip_ws(b"ab", 5) == 5 and skip_ws(b"a  ", 1) == 3
    assert last_non_ws(b" \r\n\t") == -1 and last_non_ws(b"") == -1
    assert last_non_ws(b"x" + b" " * (3 * 2**16)) == 0  # found windows away from the back


# ---------------------------------------------------------------- step windows


def _windows(*rows: tuple[int, float, float]) -> pd.DataFrame:
    return pd.DataFrame({"step": [r[0] for r in rows], "start": [r[1] for r in rows], "dur": [r[2] for r in rows]})


def test_without_steps_every_time_belongs_to_the_one_window():
    # even a time outside the window [100, 150): a trace without steps is one window to which everything belongs
    w = _windows((-1, 100.0, 50.0))
    assert assign_steps(np.array([0.0, 100.0, 150.0, 1e9]), w).tolist() == [-1, -1, -1, -1]


def _steps(events: list[dict], tmp_path) -> tuple[pd.DataFrame, list[str]]:
    b, messages = analyze_warned(write(tmp_path / "rank0.json", events))
    return b.steps, messages


def test_steps_numbered_against_time_order_keep_their_windows(tmp_path):
    # ProfilerStep#5 over [0, 1000), then #3 over [1000, 2000): windows are ordered by time, not by number
    steps, messages = _steps(gpu_trace(((5, 0, 1000), (3, 1000, 2000))), tmp_path)
    by_step = steps.set_index("step")
    assert by_step.loc[5, "step_ms"] == 1.0 and by_step.loc[3, "step_ms"] == 1.0
    assert by_step.loc[3, "start_us"] == 1000.0 and not messages
    assert by_step["comm_calls"].tolist() == [1, 1]  # each step's all-reduce launched in its own window


def test_a_step_seen_on_two_threads_starts_at_the_earliest_of_them(tmp_path):
    # step 3 on thread 1 over [2000, 3000) and on thread 2 over [1900, 2500): one step over [1900, 3000)
    events = gpu_trace(((1, 0, 1000), (3, 2000, 3000)))
    events.append(x("ProfilerStep#3", 1900, 600, cat="user_annotation", tid=2))
    steps, messages = _steps(events, tmp_path)
    assert steps["start_us"].tolist() == [0.0, 1900.0] and steps["step_ms"].tolist() == [1.0, 1.1] and not messages


def test_an_annotation_inside_an_earlier_ones_extent_is_the_same_step(tmp_path):
    # step 2 over [1000, 2000) on thread 1, [1100, 1200) on thread 2 and [1500, 1700) on thread 3: the third starts
    # after the second ended but inside the first, so all three overlap the step: one step, not two sessions
    events = gpu_trace()
    events += [
        x("ProfilerStep#2", 1100, 100, cat="user_annotation", tid=2),
        x("ProfilerStep#2", 1500, 200, cat="user_annotation", tid=3),
    ]
    steps, messages = _steps(events, tmp_path)
    assert steps["step"].tolist() == [1, 2, 3] and steps["step_ms"].tolist() == [1.0, 1.0, 1.0] and not messages


def test_a_step_of_no_length_written_twice_is_left_out_not_refused(tmp_path):
    # an event written twice is one step; with no length it is left out with a warning, not two steps under one name
    events = gpu_trace()
    events[5]["dur"] = 0  # ProfilerStep#2
    events.append(dict(events[5]))
    steps, messages = _steps(events, tmp_path)
    assert steps["step"].tolist() == [1, 3]
    assert messages == [
        f"{tmp_path / 'rank0.json'}: step ProfilerStep#2 at ts=1000.0 has no length: left out; "
        "what was launched in it counts in no step"
    ]


def test_a_step_annotation_on_the_gpu_is_no_step_window(tmp_path):
    # Kineto mirrors ProfilerStep#N on the GPU timeline (gpu_user_annotation), over the GPU work of the step, which
    # runs past the CPU annotation's end: the CPU annotation alone makes the step, so step 3 stays [2000, 3000)
    events = gpu_trace()
    events.append(x("ProfilerStep#3", 2000, 1800, cat="gpu_user_annotation", pid=0, tid=7))
    steps, _ = _steps(events, tmp_path)
    assert steps["start_us"].tolist() == [0.0, 1000.0, 2000.0] and steps["step_ms"].tolist() == [1.0, 1.0, 1.0]


def test_the_first_step_number_beyond_int64_is_two_to_the_63(tmp_path):
    # int64 holds up to 2**63 - 1
    events = gpu_trace()
    events[5]["name"] = f"ProfilerStep#{2**63}"  # step 2's annotation
    events[10]["name"] = f"ProfilerStep#{2**63 - 1}"  # step 3's annotation
    steps, messages = _steps(events, tmp_path)
    assert steps["step"].tolist() == [1, 2**63 - 1]
    assert len(messages) == 1 and "step number beyond int64: not taken as a step" in messages[0]


def _no_step_trace() -> list[dict]:
    """CPU ops over [100, 300), and a kernel they launch that runs on the GPU until 900."""
    return [
        x("aten::mm", 100, 100),
        x("cudaLaunchKernel", 250, 50, cat="cuda_runtime", correlation=1),
        x("void gemm_kernel", 500, 400, cat="kernel", pid=0, tid=7, correlation=1),
    ]


def test_a_trace_without_steps_is_one_window_from_its_first_to_its_last_event_gpu_included(tmp_path):
    steps, _ = _steps(_no_step_trace(), tmp_path)
    assert steps["step"].tolist() == [-1]
    assert steps["start_us"].tolist() == [100.0] and steps["step_ms"].tolist() == [0.8]  # [100, 900)


def test_the_profilers_own_trace_span_does_not_widen_the_window_of_a_trace_without_steps(tmp_path):
    # Kineto's "PyTorch Profiler (0)" span (cat "Trace") covers the whole profiling session, more than any event
    events = [*_no_step_trace(), x("PyTorch Profiler (0)", 0, 5000, cat="Trace")]
    steps, _ = _steps(events, tmp_path)
    assert steps["start_us"].tolist() == [100.0] and steps["step_ms"].tolist() == [0.8]


def test_a_trace_of_nothing_but_the_profilers_span_is_one_window_over_it(tmp_path):
    steps, _ = _steps([x("PyTorch Profiler (0)", 10, 90, cat="Trace")], tmp_path)
    assert steps["step"].tolist() == [-1] and steps["start_us"].tolist() == [10.0]
    assert steps["step_ms"].tolist() == pytest.approx([0.09])
