"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of the reading of
trace files and the per-step breakdown of one trace.

* muon_repro.analysis.breakdown: the per-trace summary (`analyze --json`: medians over steps, launch-step
  communication, rank source), step warnings kept in the breakdown, a launch call that is the file's first event;
* muon_repro.analysis.instances: the group size assumed when a collective does not state one (the trace's process
  groups, the world, the caller's hints by phase prefix), NCCL sizes and kinds (the full array of an all-gather, the
  order in which the kernel, its caller, an nccl: annotation and the kernel's name name the kind), the matching of
  gloo calls to their worker transfers (reduce-scatter run as an all-reduce, 1 us of slack, size, earliest first,
  the caller's dtype first, a shard never taken for the full array, sends on the calling thread) and the coarse
  phase of a kernel without a caller;
* muon_repro.analysis.scan: the keys after the events array (a parse window cut inside a literal, anything after
  the document or after a bare array refused), the byte offsets in its error messages (in UTF-8 bytes of the file,
  whole or in pieces), cuts inside strings retried, a file of whitespace, a traceEvents that is no array;
* muon_repro.analysis.batch_read: the options, when processes pay, a folder named twice, runs put together from the
  files (foreign traces of one rank, rank order, the lowest-numbered trial as the first), the note of a run short of
  rounds, the words of an incomplete run and of a file that failed, the command to record a trial again.

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/method.md's
trace conventions, docs/limits.md)."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from test_analysis_inputs import _rewrite_json, write_run
from test_hta_convention import (
    BF16_SHARD,
    GPU_PID,
    STREAM,
    _analyze,
    _breakdown,
    _gloo_threads,
    _kernel,
    _launch,
    _rpc,
    _steps,
    _x,
)
from test_trace_robustness import analyze_warned, gpu_trace, write

from muon_repro.analysis import batch_read
from muon_repro.analysis.batch_read import SMALL_TOTAL_BYTES, analyze_paths, check_options, worth_processes
from muon_repro.analysis.breakdown import analyze_file
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.limits import TraceLimits
from muon_repro.analysis.reader import read_trace
from muon_repro.rundir import CONFIG_FILE, trace_name

# ---------------------------------------------------------------- breakdown: the per-trace summary (`analyze --json`)


def _three_uneven_steps() -> list[dict]:
    """Steps of 1, 1 and 2 ms; all-reduces of 1024 float32 on 2 ranks (each sends 2 * (2-1)/2 * 4096 = 4096 B):
    one of 100 us in step 1, one of 200.4 us launched in step 2 that runs from 1850 into step 3, three of 200 us one
    after another in step 3."""
    events = [*_steps((1, 0, 1000), (2, 1000, 2000), (3, 2000, 4000))]
    sizes = {"In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2}
    calls = [(1, 100, 100.0), (2, 1800, 200.4), (3, 2100, 200.0), (4, 2400, 200.0), (5, 2700, 200.0)]
    for n, t0, dur in calls:
        events += [
            _rpc(t0, 20, ext=n, collective="allreduce", **sizes),
            *_launch(t0 + 5, correlation=n, ext=n),
            _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", t0 + 50, dur, correlation=n, ext=n),
        ]
    return events


def test_the_summary_holds_medians_over_steps_not_means_or_maxima(tmp_path):
    """``summary()``: "medians over steps". Per step: step_ms 1, 1, 2 (median 1, mean 1.33); comm_ms by launch step
    0.1, 0.2004, 0.6 (median 0.2004, kept to the microsecond's tenth, not rounded to 0.2; clipped to the windows it
    would be 0.1, 0.15, 0.6504: median 0.15); calls 1, 1, 3 (median 1, max 3); bytes 4096, 4096, 12288 (median
    4096). The rank comes from the file name rank2.json."""
    summary = _breakdown(tmp_path, _three_uneven_steps(), name="rank2.json").summary()
    assert (summary["rank"], summary["rank_source"], summary["device"]) == (2, "filename", "cuda")
    assert summary["steps"] == 3
    assert summary["step_ms"] == pytest.approx(1.0, abs=1e-9)
    assert summary["comm_ms"]["total"] == pytest.approx(0.2004, abs=1e-9)
    assert summary["comm_ms"]["all_reduce"] == pytest.approx(0.2004, abs=1e-9)
    assert summary["comm_calls"] == 1
    assert summary["comm_bytes"] == 4096
    assert summary["comm_window_ms"] == pytest.approx(0.15, abs=1e-9)


def test_step_warnings_travel_in_the_breakdown_and_its_summary(tmp_path):
    """A step of no length is left out with a TraceWarning; the message is also kept in ``warnings`` (and the
    summary's), for `analyze --json` from a worker process, where ``warnings.warn`` goes unseen."""
    events = gpu_trace()
    events[5]["dur"] = 0  # ProfilerStep#2
    b, messages = analyze_warned(write(tmp_path / "rank0.json", events))
    assert b.steps["step"].tolist() == [1, 3]
    assert any("step ProfilerStep#2 at ts=1000.0 has no length: left out" in m for m in b.warnings)
    assert b.warnings == messages and b.summary()["warnings"] == messages


def test_a_launch_call_that_is_the_traces_first_event_still_links_its_kernel(tmp_path):
    """The runtime call may be the file's first event (row 0): the sgemm it launched at 100 us counts in step 1's
    compute_ms (0.1 ms), though it runs in step 2."""
    events = [*_launch(100, correlation=1, ext=1), *_steps((1, 0, 1000), (2, 1000, 2000))]
    events.append(_kernel("sgemm_128x64", 1200, 100, correlation=1))
    steps = _analyze(tmp_path, events)
    assert steps["compute_ms"].tolist() == pytest.approx([0.1, 0.0])
    assert steps["compute_window_ms"].tolist() == pytest.approx([0.0, 0.1])


# ---------------------------------------------------------------- instances: group sizes a collective does not state

F32_256 = {"Input Dims": [[256]], "Input type": ["float"]}  # 256 float32: S = 1024 B


def _gloo_doc(events: list[dict], **info) -> dict:
    return {"traceEvents": [*_gloo_threads(), *_steps((1, 0, 1000)), *events], "distributedInfo": {"backend": "gloo", **info}}


def _collectives(tmp_path, doc: dict, **kwargs):
    path = tmp_path / "rank1.json"
    path.write_text(json.dumps(doc))
    return analyze_file(str(path), **kwargs).collectives


def _lone_all_reduce(ts: float = 100.0) -> dict:
    """A gloo worker's all-reduce transfer with no caller op: its events do not say which group it ran on."""
    return {**_x("gloo:all_reduce", ts, 50, cat="user_annotation", tid=2), "args": F32_256}


@pytest.mark.parametrize(
    ("pg_config", "expected"),
    [
        # the one size shared by the non-default groups (the default group is the world: not a hint)
        ([{"pg_desc": "default_pg", "pg_size": 8}, {"pg_desc": "dp", "pg_size": 2}, {"pg_desc": "dp2", "pg_size": 2}], 2),
        # a group of one rank is no group: the size shared by the others
        ([{"pg_desc": "default_pg", "pg_size": 8}, {"pg_desc": "solo", "pg_size": 1}, {"pg_desc": "tp", "pg_size": 4}], 4),
        # two sizes: no single one to assume, the world's
        ([{"pg_desc": "dp", "pg_size": 2}, {"pg_desc": "tp", "pg_size": 4}], 8),
        ([], 8),  # no groups at all: the world
    ],
)
def test_the_group_size_assumed_comes_from_the_traces_process_groups(tmp_path, pg_config, expected):
    """``group_size_fallback``: the single size shared by all non-default groups (of more than one rank), else the
    world (8). An all-reduce of 1024 B on n ranks sends 2 (n-1)/n x 1024 B."""
    doc = _gloo_doc([_lone_all_reduce()], rank=1, world_size=8, pg_config=pg_config)
    coll = _collectives(tmp_path, doc)
    assert coll[["group_size", "size_bytes", "bytes"]].values.tolist() == [
        [expected, 1024, 2 * (expected - 1) * 1024 // expected]
    ]


def test_a_group_size_given_by_the_caller_wins_over_the_traces(tmp_path):
    """``group_sizes`` passed in override the trace's own fallback (world of 8): 2 ranks, sending 1024 B."""
    doc = _gloo_doc([_lone_all_reduce()], rank=1, world_size=8)
    coll = _collectives(tmp_path, doc, group_sizes={"*": 2})
    assert coll[["group_size", "bytes"]].values.tolist() == [[2, 1024]]


def test_the_group_size_of_a_phase_is_looked_up_by_its_prefix(tmp_path):
    """A c10d all-reduce inside our ``tp_all_reduce`` scope runs on the tp group: ``group_sizes["tp"]`` (4), not the
    default ``"*"`` (2); S = 1024 B, so it sends 2 * 3/4 * 1024 = 1536 B."""
    events = [
        _x("tp_all_reduce", 90, 100, cat="user_annotation"),
        {**_x("c10d::allreduce_", 100, 20), "args": F32_256},
        {**_x("gloo:all_reduce", 105, 50, cat="user_annotation", tid=2), "args": F32_256},
    ]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1), group_sizes={"tp": 4, "*": 2})
    assert coll[["phase", "source", "group_size", "bytes"]].values.tolist() == [["tp_all_reduce", "gloo", 4, 1536]]


@pytest.mark.parametrize("stated", [0, True, 2.5, -2])
def test_an_nccl_group_size_that_is_no_count_is_unknown_and_the_world_is_assumed(tmp_path, stated):
    """``Group size`` 0, a boolean, a fraction or a negative number names no group: the trace's world (4) stands for
    it, as for a missing size. An all-reduce of 1024 float32 (4096 B) on 4 ranks sends 2 * 3/4 * 4096 = 6144 B."""
    events = [
        *_steps((1, 0, 1000)),
        _rpc(100, 40, ext=1, collective="allreduce", **{"In msg nelems": 1024, "Out msg nelems": 1024, "Group size": stated}),
        *_launch(110, correlation=1, ext=1),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 200, 100, correlation=1, ext=1),
    ]
    doc = {"traceEvents": events, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 4}}
    coll = _collectives(tmp_path, doc)
    assert coll[["group_size", "size_bytes", "bytes"]].values.tolist() == [[4, 4096, 6144]]


# ---------------------------------------------------------------- instances: sizes and the calls gloo runs


@pytest.mark.parametrize(
    ("sizes", "elements"),
    [
        ({"In msg nelems": 1024, "Out msg nelems": 4096, "Group size": 2}, 4096),  # the output is the full array
        ({"In msg nelems": 1024, "Group size": 2}, 2048),  # no output size: the shard times the group
    ],
)
def test_an_nccl_all_gathers_array_is_its_output_else_its_input_times_the_group(tmp_path, sizes, elements):
    """S of an all-gather is the full array: its ``Out msg nelems`` when stated, else ``In msg nelems`` x group."""
    events = [
        *_steps((1, 0, 1000)),
        _rpc(100, 40, ext=1, collective="_allgather_base", **sizes),
        *_launch(110, correlation=1, ext=1),
        _kernel("ncclDevKernel_AllGather_RING_LL(x)", 200, 100, correlation=1, ext=1),
    ]
    coll = _breakdown(tmp_path, events).collectives
    assert coll[["op", "elements", "size_bytes"]].values.tolist() == [["all_gather", elements, 4 * elements]]


def test_a_send_on_the_calling_thread_does_not_make_it_a_gloo_worker(tmp_path):
    """gloo runs sends on the calling thread (tid 1) and collectives on its worker (tid 2): the all-reduce called on
    tid 1 after a send there is still matched to the worker's transfer (issued at its c10d call, 300), and the send
    is one call."""
    dims = {"Input Dims": [[256], [], []], "Input type": ["float", "", ""]}
    events = [
        {**_x("c10d::send", 100, 50), "args": dims},
        {**_x("gloo:send", 110, 30, cat="user_annotation"), "args": F32_256},
        {**_x("c10d::allreduce_", 300, 20), "args": F32_256},
        {**_x("gloo:all_reduce", 305, 50, cat="user_annotation", tid=2), "args": F32_256},
    ]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1, world_size=2))
    rows = coll.sort_values("issue_ts")[["op", "issue_ts", "start"]].values.tolist()
    assert rows == [["send_recv", 100.0, 110.0], ["all_reduce", 300.0, 305.0]]


def test_a_gloo_reduce_scatter_is_matched_to_the_all_reduce_its_worker_runs(tmp_path):
    """gloo runs a reduce-scatter as an all-reduce of the full input: c10d::_reduce_scatter_base_ (output 128, input
    256 float32: group 2) and the worker's gloo:all_reduce of 256 are one call, a reduce-scatter of S = 1024 B that
    sends (2-1)/2 x 1024 = 512 B, moved by the worker from 105."""
    events = [
        {**_x("c10d::_reduce_scatter_base_", 100, 20), "args": {"Input Dims": [[128], [256]], "Input type": ["float", "float"]}},
        {**_x("gloo:all_reduce", 105, 50, cat="user_annotation", tid=2), "args": F32_256},
    ]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1))
    columns = ["op", "source", "group_size", "elements", "size_bytes", "bytes", "start", "issue_ts"]
    assert coll[columns].values.tolist() == [["reduce_scatter", "gloo", 2, 256, 1024, 512, 105.0, 100.0]]


@pytest.mark.parametrize(
    ("caller_type", "dtype", "size_bytes"),
    [
        (["float"], "float32", 1024),  # the caller's type is the call's (256 x 4 B)
        (["TensorList"], "bfloat16", 512),  # a caller that names none: the worker's transfer's (256 x 2 B)
    ],
)
def test_a_matched_gloo_call_takes_its_dtype_from_its_caller_first(tmp_path, caller_type, dtype, size_bytes):
    events = [
        {**_x("c10d::allreduce_", 100, 20), "args": {"Input Dims": [[256]], "Input type": caller_type}},
        {
            **_x("gloo:all_reduce", 105, 50, cat="user_annotation", tid=2),
            "args": {"Input Dims": [[256]], "Input type": ["c10::BFloat16"]},
        },
    ]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1, world_size=2))
    assert coll[["source", "dtype", "size_bytes"]].values.tolist() == [["gloo", dtype, size_bytes]]


def test_a_gloo_all_gather_whose_caller_states_no_size_is_not_sized_by_its_shard(tmp_path):
    """The worker's gloo:all_gather shows only this rank's shard (300): with a caller that states no size and no group
    size known, S (the full array) is unknown (-1), not the shard."""
    events = [
        _x("c10d::_allgather_base_", 100, 20),
        {**_x("gloo:all_gather", 105, 50, cat="user_annotation", tid=2), "args": BF16_SHARD},
    ]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1))
    assert coll[["op", "source", "group_size", "elements", "size_bytes"]].values.tolist() == [["all_gather", "gloo", -1, -1, -1]]


@pytest.mark.parametrize(("transfer_ts", "matched"), [(99.0, True), (98.5, False)])
def test_a_gloo_transfer_is_matched_to_a_call_it_precedes_by_at_most_a_microsecond(tmp_path, transfer_ts, matched):
    """The transfer starts at or after its c10d call, with 1 us of slack for clock rounding: one stamped exactly 1 us
    before the call (99 against 100) is its transfer, one 1.5 us before is not (the call is then timed by itself, and
    the transfer counts as a call of its own)."""
    events = [{**_x("c10d::allreduce_", 100, 20), "args": F32_256}, _lone_all_reduce(transfer_ts)]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1, world_size=2))
    rows = sorted(coll[["source", "start", "issue_ts"]].values.tolist(), key=lambda r: r[1])
    if matched:
        assert rows == [["gloo", transfer_ts, 100.0]]
    else:
        assert rows == [["gloo", transfer_ts, transfer_ts], ["cpu_op", 100.0, 100.0]]


def test_a_gloo_call_is_matched_to_the_earliest_later_transfer_of_its_size(tmp_path):
    """Pending worker transfers of 128 (at 105) and 256 elements (at 110): the all-reduce of 256 called at 100 is
    the second; the first, of another size, stays a call of its own."""
    events = [
        {**_x("c10d::allreduce_", 100, 20), "args": F32_256},
        {**_x("gloo:all_reduce", 105, 3, cat="user_annotation", tid=2), "args": {"Input Dims": [[128]], "Input type": ["float"]}},
        _lone_all_reduce(110.0),
    ]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1, world_size=2))
    rows = sorted(coll[["start", "elements", "issue_ts"]].values.tolist())
    assert rows == [[105.0, 128, 105.0], [110.0, 256, 100.0]]


def test_a_gloo_reduce_scatter_takes_the_earliest_of_the_transfers_it_may_be(tmp_path):
    """A reduce-scatter's transfer may show as gloo:reduce_scatter or gloo:all_reduce: of the two pending (at 120 and
    at 105), the earliest at or after the call (105) is its transfer."""
    full = {"Input Dims": [[256]], "Input type": ["float"]}
    events = [
        {**_x("c10d::_reduce_scatter_base_", 100, 20), "args": {"Input Dims": [[128], [256]], "Input type": ["float", "float"]}},
        {**_x("gloo:reduce_scatter", 120, 10, cat="user_annotation", tid=2), "args": full},
        {**_x("gloo:all_reduce", 105, 10, cat="user_annotation", tid=2), "args": full},
    ]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1, world_size=2))
    matched = coll[coll["issue_ts"] == 100.0]
    assert matched[["op", "source", "start"]].values.tolist() == [["reduce_scatter", "gloo", 105.0]]


def test_an_unmatched_gloo_all_gather_on_a_group_of_unknown_size_has_no_size(tmp_path):
    """A worker's all-gather shows the shard (300 bf16); with no group size known (no world, no hint) the full array
    cannot be known: S is -1, not the shard's 300."""
    events = [{**_x("gloo:all_gather", 100, 200, cat="user_annotation", tid=2), "args": BF16_SHARD}]
    coll = _collectives(tmp_path, _gloo_doc(events, rank=1))
    assert coll[["group_size", "elements", "size_bytes", "bytes"]].values.tolist() == [[-1, -1, -1, -1]]


@pytest.mark.parametrize(
    ("kernel_name", "kernel_args", "caller", "annotation", "op"),
    [
        # the kernel's Collective name first, before its caller's
        ("ncclDevKernel_Generic(x)", {"Collective_name": "allgather"}, "allreduce", None, "all_gather"),
        # then the caller's, before the kernel's name
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", {}, "broadcast", None, "broadcast"),
        # without a caller: the nccl:<op> annotation around the launch, before the kernel's name
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", {}, None, "nccl:all_gather", "all_gather"),
        # nothing else: the kernel's name
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", {}, None, None, "all_reduce"),
    ],
)
def test_an_nccl_kernels_kind_comes_from_the_first_that_names_one(tmp_path, kernel_name, kernel_args, caller, annotation, op):
    """instances: "the kernel's Collective name, the caller's, the nccl:<op> annotation linked the same way, the
    kernel's name"."""
    events = [*_steps((1, 0, 1000))]
    if caller:
        events.append(_rpc(100, 40, ext=1, collective=caller))
    if annotation:
        events.append(_x(annotation, 100, 40, cat="user_annotation"))
    events += [*_launch(110, correlation=1, ext=1), _kernel(kernel_name, 200, 100, correlation=1, ext=1, **kernel_args)]
    assert _breakdown(tmp_path, events).collectives["op"].tolist() == [op]


@pytest.mark.parametrize(("gpu_annotation", "phase"), [(True, "forward"), (False, "backward")])
def test_a_kernel_without_a_caller_takes_the_coarse_phase_around_its_start(tmp_path, gpu_annotation, phase):
    """An all-reduce kernel [300, 400) with no caller op: its phase is the coarse annotation around its start on the
    GPU side (a ``gpu_user_annotation`` "## forward ##" over [250, 450)), and without one on the GPU, the CPU's
    ("## backward ##" over [100, 600))."""
    events = [
        *_steps((1, 0, 1000)),
        _x("## backward ##", 100, 500, cat="user_annotation"),
        *_launch(150, correlation=1, ext=1),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 300, 100, correlation=1, ext=1),
    ]
    if gpu_annotation:
        events.append(_x("## forward ##", 250, 200, cat="gpu_user_annotation", pid=GPU_PID, tid=STREAM))
    assert _breakdown(tmp_path, events).collectives["phase"].tolist() == [phase]


# ---------------------------------------------------------------- scan: the document around the events array


@pytest.mark.parametrize("literal", ["true", "false", "null", "-1.5e3"])
def test_keys_after_the_events_are_read_whatever_token_the_first_parse_window_cuts(tmp_path, literal):
    """The text after the events array is parsed a window at a time (the first 256 bytes, then more while the parse
    runs out of text): a window that ends inside a literal (``tr|ue``) or a number has merely run out, and the keys
    after it are still read (distributedInfo: rank 5 of 8)."""
    events = gpu_trace()
    head = json.dumps({"traceEvents": events})[:-1]  # the document up to its closing "}"
    pad_to = 254  # the literal starts 2 bytes before the end of the first window
    before, after = ', "pad": "', '", "flag": '
    trailer_start = before + "x" * (pad_to - len(before) - len(after)) + after
    assert len(trailer_start) == pad_to
    text = f'{head}{trailer_start}{literal}, "distributedInfo": {{"backend": "nccl", "rank": 5, "world_size": 8}}}}'
    assert json.loads(text)["distributedInfo"]["rank"] == 5
    trace = read_trace(write(tmp_path / "trace.json", text=text))
    assert (trace.meta.rank, trace.meta.world_size) == (5, 8)
    assert trace.events["name"].astype(str).tolist().count("ProfilerStep#1") == 1


@pytest.mark.parametrize(("value", "type_name"), [({"a": 1}, "dict"), ("events", "str"), (3, "int")])
def test_a_trace_events_key_that_is_no_array_is_named_with_its_type(tmp_path, value, type_name):
    path = write(tmp_path / "rank0.json", text=json.dumps({"traceEvents": value}))
    with pytest.raises(TraceError, match=rf"'traceEvents' is a {type_name}, not an array"):
        read_trace(path)


def _with_a_two_byte_name() -> str:
    events = gpu_trace()
    events[4]["name"] = "aten::mm_é"  # a 2-byte character: byte offsets and character offsets part
    return json.dumps({"traceEvents": events}, ensure_ascii=False)


@pytest.mark.parametrize("piece_bytes", [None, 512])
def test_a_malformed_event_is_reported_at_the_files_own_byte(tmp_path, piece_bytes):
    """Past the 2-byte character, a doubled comma inside an event: the message gives json's reason and the byte of
    the file where json.loads stops (its character position, counted in UTF-8 bytes), read whole or in pieces."""
    text = _with_a_two_byte_name()
    at = text.rindex('"dur": 5, "args"') + len('"dur": 5,')  # in the last step's launch call
    text = text[:at] + "," + text[at:]
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    assert text.index("é") < expected.value.pos
    byte = len(text[: expected.value.pos].encode("utf-8"))
    path = write(tmp_path / "rank0.json", text=text)
    with pytest.raises(TraceError, match=rf"truncated or malformed JSON in traceEvents: {expected.value.msg} at byte {byte}$"):
        read_trace(path, **({"piece_bytes": piece_bytes} if piece_bytes else {}))


def test_malformed_keys_after_the_events_are_reported_with_where_the_array_ends(tmp_path):
    """``"x": }`` after the events: the message says the array was read and gives its end, the byte just past its
    closing ``]`` (as json's end positions, in UTF-8 bytes)."""
    text = _with_a_two_byte_name()[:-1] + ', "x": }'
    end = len(text[: text.rindex("]") + 1].encode("utf-8"))
    path = write(tmp_path / "rank0.json", text=text)
    with pytest.raises(TraceError, match=rf"malformed JSON after the traceEvents array, which ends at byte {end}$"):
        read_trace(path)


def _many_events_with_separators_in_their_names(n: int = 1500) -> list[dict]:
    """~600 kB of events (more than the reader's smallest buffer, 64 KiB) whose args hold the bytes between two
    events (``}, {"``) early on, then a long string: most places near a piece's end that look like a cut are not."""
    events = gpu_trace()
    for i in range(n):
        events.append(_x('void k<{lambda()#1}, {"x"}>::f}, {"', 5000 + i, 1, nested=[{"a": 1}, {"b": "y" * 300}]))
    return events


def test_cuts_inside_strings_are_retried_at_an_earlier_cut_when_read_in_pieces(tmp_path):
    """Read in 4 KiB pieces (a 64 KiB buffer moved along the file), each piece is cut where the decoder accepts it:
    the same events, names whole, as read in one piece."""
    events = _many_events_with_separators_in_their_names()
    path = write(tmp_path / "rank0.json", events)
    whole = read_trace(path)
    pieces = read_trace(path, piece_bytes=4096)
    assert len(pieces.events) == len(events)
    assert pieces.events["name"].astype(str).tolist() == whole.events["name"].astype(str).tolist()
    assert pieces.events["name"].astype(str).tolist()[-1] == 'void k<{lambda()#1}, {"x"}>::f}, {"'


def test_a_malformed_event_deep_in_a_file_read_in_pieces_is_reported_at_the_files_own_byte(tmp_path):
    """As above, 250 kB into the file, read in 4 KiB pieces: the byte counts from the file's start, not the piece's."""
    events = [*gpu_trace(), *(_x(f"aten::op{i}", 5000 + i, 1) for i in range(3000))]
    text = json.dumps({"traceEvents": events})
    at = text.index('"name": "aten::op2900"') + len('"name": "aten::op2900"')
    text = text[:at] + ",," + text[at + 1 :]
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    assert expected.value.pos > 200_000
    path = write(tmp_path / "rank0.json", text=text)
    with pytest.raises(TraceError, match=rf"in traceEvents: {expected.value.msg} at byte {expected.value.pos}$"):
        read_trace(path, piece_bytes=4096)


@pytest.mark.parametrize("text", ["", "   \n\t\r\n", "\n" * 70_000], ids=["nothing", "a line of blanks", "70 kB of newlines"])
def test_a_file_of_nothing_but_whitespace_is_an_empty_file(tmp_path, text):
    with pytest.raises(TraceError, match="empty file"):
        read_trace(write(tmp_path / "rank0.json", text=text))


@pytest.mark.parametrize("after", ['{"a": 1}', "]", "x"])
def test_anything_after_a_bare_array_of_events_is_refused(tmp_path, after):
    """A bare array (the Chrome "JSON array format") is the whole document: only whitespace may follow its ``]``."""
    text = json.dumps(gpu_trace()) + " " + after
    path = write(tmp_path / "rank0.json", text=text)
    with pytest.raises(TraceError, match="malformed JSON after the traceEvents array"):
        read_trace(path)


@pytest.mark.parametrize("after", ["x", "}", '{"a": 1}'])
def test_anything_after_the_document_is_refused_even_far_behind_it(tmp_path, after):
    """Text after the document's closing ``}``, behind 300 bytes of whitespace (past the first window the trailer is
    parsed in), is not a trace: refused, not silently dropped."""
    text = json.dumps({"traceEvents": gpu_trace(), "distributedInfo": {"rank": 0}}) + " " * 300 + after
    path = write(tmp_path / "rank0.json", text=text)
    with pytest.raises(TraceError, match="malformed JSON after the traceEvents array"):
        read_trace(path)


# ---------------------------------------------------------------- batch_read: options and the process pool


def test_rank_zero_and_one_worker_are_valid_options():
    """Refused are a worker count below 1 and a negative rank: rank 0 (the first global rank) and 1 worker are fine."""
    check_options(workers=1, rank=0)
    check_options(workers=None, rank=None)
    with pytest.raises(ValueError, match=r"rank must be 0 or more \(a global rank\), got -1"):
        check_options(workers=None, rank=-1)


def _sparse(path, size: int):
    with open(path, "wb") as fh:
        fh.truncate(size)  # a sparse file: its size without writing it
    return path


@pytest.mark.parametrize(
    ("sizes", "workers", "worth"),
    [
        ((SMALL_TOTAL_BYTES + 1,), 2, True),  # over the threshold, more than one worker
        ((SMALL_TOTAL_BYTES + 1,), 1, False),  # one worker: no processes
        ((SMALL_TOTAL_BYTES,), 2, False),  # not over the threshold
        ((SMALL_TOTAL_BYTES // 2, SMALL_TOTAL_BYTES // 2 + 1), 2, True),  # the files' total counts
    ],
)
def test_processes_pay_from_two_workers_and_more_than_the_small_total(tmp_path, sizes, workers, worth):
    files = [_sparse(tmp_path / f"rank{i}.json", size) for i, size in enumerate(sizes)]
    assert worth_processes(files, workers) is worth


# ---------------------------------------------------------------- batch_read: runs put together from the files found


def _copy_trial(first, name: str, **changes):
    trial = first.parent / name
    shutil.copytree(first, trial)
    _rewrite_json(trial / CONFIG_FILE, **changes)
    return trial


def test_a_folder_named_twice_is_analyzed_once(tmp_path):
    """The same folder given twice (once by another spelling of its path): its traces are found once, one run of its
    two ranks, not four traces that collide."""
    muon = write_run(tmp_path / "traces" / "g" / "muon_dp2_tp1" / "trial0")
    analysis = analyze_paths([muon, muon.parent / ".." / muon.parent.name / "trial0"], workers=1)
    assert not analysis.failures and not analysis.incomplete
    assert [[b.meta.rank for b in items] for _, items in analysis.runs] == [[0, 1]]


def test_foreign_traces_of_one_rank_in_a_folder_are_runs_of_their_own(tmp_path):
    """Without config.json a folder's traces are one run only if they could be one job: here both are rank 0, so
    each is a run of its own, named after its file."""
    folder = tmp_path / "foreign"
    folder.mkdir()
    for name in ("first.json.gz", "second.json.gz"):
        doc = {"traceEvents": gpu_trace(), "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}}
        (folder / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    analysis = analyze_paths([folder], workers=1)
    assert not analysis.failures
    assert sorted((info.name, len(items)) for info, items in analysis.runs) == [("first", 1), ("second", 1)]


def test_of_two_trials_recorded_differently_the_lower_numbered_one_stands_for_the_run(tmp_path):
    """trial2 and trial10 of one run, trial10 with another layout: the first trial is the lowest-numbered (2, though
    "trial10" sorts before "trial2" as a name), so trial10 is the one left out."""
    first = write_run(tmp_path / "traces" / "g" / "muon_dp2_tp1" / "trial2")
    other = _copy_trial(first, "trial10", layout="bucketed")
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert [f.path for f in analysis.failures] == [str(other)]
    assert [info.trial for info, _ in analysis.runs] == [2]


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        (2, None),  # both rounds there: nothing to say
        (7, "missing trial2, trial3, trial4, trial5, trial6)"),  # five missing: all named
        (8, "missing trial2, trial3, trial4, trial5, trial6, ...)"),  # six missing: the first five, and more
    ],
)
def test_a_run_short_of_the_rounds_its_sweep_asked_for_names_the_missing_ones(tmp_path, asked, said):
    first = write_run(tmp_path / "traces" / "g" / "muon_dp2_tp1" / "trial0")
    _rewrite_json(first / CONFIG_FILE, trials=asked)
    _copy_trial(first, "trial1", trial=1, trials=asked)
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert not analysis.failures
    if said is None:
        assert analysis.notes == []
    else:
        (note,) = analysis.notes
        assert f"has 2 of the {asked} rounds its sweep asked for (config.json trials; {said}" in note


def test_the_command_to_record_a_trial_of_the_default_scale_again_names_no_scale(tmp_path):
    """`bench NAME` records the default scale (cpu) by itself: a run recorded at it is recorded again without
    ``--scale``."""
    muon = write_run(tmp_path / "traces" / "g" / "muon_dp2_tp1" / "trial0")
    _rewrite_json(muon / CONFIG_FILE, scale="cpu")
    (muon / trace_name(1)).unlink()
    message = analyze_paths([tmp_path / "traces"], workers=1).incomplete[0].message
    assert f"`muon-repro bench g/muon_dp2_tp1 --out {tmp_path / 'traces'} --trials 1 --profile " in message
    assert "--scale" not in message


def test_the_ranks_of_a_run_are_in_rank_order(tmp_path):
    """A run of 12 ranks: its breakdowns come in rank order (0, 1, 2, ..., 11), not in the order of the file names
    (rank10 and rank11 sort before rank2)."""
    write_run(tmp_path / "traces" / "g" / "muon_dp12_tp1" / "trial0", dp=12)
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert [[b.meta.rank for b in items] for _, items in analysis.runs] == [list(range(12))]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (OSError(5, "Input/output error"), "{path}: OSError: [Errno 5] Input/output error"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "{path}: UnicodeDecodeError: 'utf-8' codec"),
        (KeyError("ts"), "{path}: internal error (KeyError: 'ts'); please report it with this trace"),
    ],
)
def test_a_file_that_fails_to_be_analyzed_is_a_failure_naming_it_and_the_error(tmp_path, monkeypatch, error, said):
    """A file's failure becomes a value (never lost among the others' results), naming the file and what went wrong:
    the kind of error as well as its words."""
    path = str(tmp_path / "rank0.json")

    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr(batch_read, "analyze_file", fails)
    failure = batch_read._analyze_job(path, None, {}, TraceLimits(), 1)
    assert isinstance(failure, batch_read.TraceFailure) and failure.path == path
    assert failure.message.startswith(said.format(path=path))


def test_the_rounds_a_sweep_asked_for_are_the_most_any_of_its_trials_says(tmp_path):
    """trial0 was recorded by a sweep of 3 rounds, trial1 by one of 2: the run asked for 3, and trial2 is missing."""
    first = write_run(tmp_path / "traces" / "g" / "muon_dp2_tp1" / "trial0")
    _rewrite_json(first / CONFIG_FILE, trials=3)
    _copy_trial(first, "trial1", trial=1, trials=2)
    (note,) = analyze_paths([tmp_path / "traces"], workers=1).notes
    assert "has 2 of the 3 rounds its sweep asked for (config.json trials; missing trial2)" in note


def test_a_run_missing_two_ranks_names_both(tmp_path):
    muon = write_run(tmp_path / "traces" / "g" / "muon_dp4_tp1" / "trial0", dp=4)
    for rank in (1, 2):
        (muon / trace_name(rank)).unlink()
    (incomplete,) = analyze_paths([tmp_path / "traces"], workers=1).incomplete
    assert f"{muon}: ranks 1, 2 of 4 have no trace (rank1.json.gz, rank2.json.gz missing)" in incomplete.message
