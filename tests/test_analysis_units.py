"""Building blocks of the analysis: interval arithmetic, collective names and sizes, schemas,
comparisons (no traces needed; claims: test_claims.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.collectives import busbw_factor, c10d_sizes, dtype_info, is_receive, normalize_op
from muon_repro.analysis.discover import find_traces, is_trace_name
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.intervals import Segments, innermost_enclosing
from muon_repro.analysis.reader import rank_from_filename
from muon_repro.analysis.tables import _comparisons_table
from muon_repro.tables.io import read_table, write_tables
from muon_repro.tables.reference import schema_markdown
from muon_repro.tables.schemas import SCHEMAS


def brute_cover(intervals: list[tuple[float, float]], grid: np.ndarray) -> np.ndarray:
    covered = np.zeros(len(grid) - 1, bool)
    mids = (grid[:-1] + grid[1:]) / 2
    for a, b in intervals:
        covered |= (mids >= a) & (mids < b)
    return covered


@pytest.mark.parametrize("seed", range(20))
def test_segments_agree_with_brute_force(seed):
    rng = np.random.default_rng(seed)
    grid = np.arange(0, 121, dtype=float)  # integer endpoints (at most 109): exact on a unit grid

    def intervals(n):
        a = rng.integers(0, 95, n).astype(float)
        return list(zip(a, a + rng.integers(0, 15, n)))

    ia, ib = intervals(rng.integers(0, 12)), intervals(rng.integers(0, 12))
    A = Segments.union(np.array([s for s, _ in ia]), np.array([e for _, e in ia]))
    B = Segments.union(np.array([s for s, _ in ib]), np.array([e for _, e in ib]))
    ca, cb = brute_cover(ia, grid), brute_cover(ib, grid)
    assert A.total == ca.sum()
    assert A.intersect(B).total == (ca & cb).sum()
    assert A.subtract(B).total == (ca & ~cb).sum()
    assert A.merge(B).total == (ca | cb).sum()
    assert np.all(np.diff(A.starts) > 0) and np.all(A.starts[1:] > A.ends[:-1])  # disjoint, sorted, not touching
    lo = rng.integers(0, 100, 8).astype(float)
    hi = lo + rng.integers(0, 30, 8)
    for low, high, got in zip(lo, hi, A.covered(lo, hi)):
        assert got == ca[int(low) : int(high)].sum()


def test_innermost_enclosing():
    keys = np.array([0, 0, 0, 1])
    starts = np.array([0.0, 10.0, 12.0, 0.0])
    ends = np.array([100.0, 50.0, 20.0, 100.0])
    q = innermost_enclosing(np.array([0, 0, 0, 0, 1, 2]), np.array([5.0, 11.0, 15.0, 60.0, 30.0, 5.0]), keys, starts, ends)
    assert q.tolist() == [0, 1, 2, 0, 3, -1]
    # half-open: an interval's end is outside it, its start inside
    at_ends = innermost_enclosing(np.array([0, 0, 0]), np.array([50.0, 100.0, 10.0]), keys[:3], starts[:3], ends[:3])
    assert at_ends.tolist() == [0, -1, 1]


@pytest.mark.parametrize(
    ("raw", "op"),
    [
        ("allreduce", "all_reduce"),
        ("_allgather_base", "all_gather"),
        ("all_gather_into_tensor_coalesced", "all_gather"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("reduce_scatter_tensor", "reduce_scatter"),
        ("c10d::allreduce_", "all_reduce"),
        ("c10d::_allgather_base_", "all_gather"),
        ("c10d::_reduce_scatter_base_", "reduce_scatter"),
        ("c10d::broadcast_", "broadcast"),
        ("c10d::alltoall_base_", "all_to_all"),
        ("gloo:all_reduce", "all_reduce"),
        ("nccl:_all_gather_base", "all_gather"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
        ("dp_gather", "all_gather"),
        ("tp_all_reduce", "all_reduce"),
        ("barrier", "barrier"),
        ("wait", None),
        ("aten::mm", None),
    ],
)
def test_normalize_op(raw, op):
    assert normalize_op(raw) == op


def test_only_a_pure_receive_sends_nothing():
    """A point-to-point op whose name says recv (and not send) sends no bytes; a send, a combined send-receive and
    any other op send theirs."""
    assert is_receive("send_recv", "c10d::recv_") and is_receive("send_recv", "gloo:recv")
    assert not is_receive("send_recv", "c10d::send") and not is_receive("send_recv", "c10d::sendrecv")
    assert not is_receive("all_reduce", "gloo:all_reduce")


def test_profiler_dtype_names():
    for names, canonical, size in (
        (("float", "Float"), "float32", 4),
        (("c10::BFloat16", "BFloat16"), "bfloat16", 2),
        (("c10::Half", "Half"), "float16", 2),
        (("long int", "Long"), "int64", 8),
        (("unsigned char", "Byte"), "uint8", 1),
    ):
        for name in names:
            assert dtype_info(name) == (canonical, size)
    assert dtype_info("TensorList") is None and dtype_info(None) is None


def test_busbw_factors_follow_nccl_tests():
    assert busbw_factor("all_reduce", 4) == 1.5
    assert busbw_factor("all_gather", 4) == busbw_factor("reduce_scatter", 4) == 0.75
    assert busbw_factor("broadcast", 4) == 1.0


def test_c10d_sizes_from_input_dims():
    # (full elements, dtype, group size) for the gloo caller ops, from their Input Dims
    assert c10d_sizes(
        "c10d::_allgather_base_", [[600], [300], [], [], []], ["c10::BFloat16", "c10::BFloat16", "", "Scalar", "Scalar"]
    ) == (600, ("bfloat16", 2), 2)
    assert c10d_sizes(
        "c10d::_reduce_scatter_base_", [[1000], [2000], [], [], [], []], ["float", "float", "", "", "Scalar", "Scalar"]
    ) == (2000, ("float32", 4), 2)
    assert c10d_sizes("c10d::allreduce_", [[[777]], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"]) == (
        777,
        None,
        None,
    )
    assert c10d_sizes("c10d::allreduce_", [[[2, 3], [4]], []], ["TensorList"]) == (10, None, None)


def test_rank_in_file_names_and_trace_discovery(tmp_path):
    assert rank_from_filename("rank3.json.gz") == 3
    assert rank_from_filename("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz") == 34
    assert rank_from_filename("trace_rank_2.json") == 2
    assert rank_from_filename("tracelens_h100.json.gz") is None
    # a hidden folder (a trial being recorded) and a cache hold no one's run: verify's manifest skips them too
    for name in (
        "rank0.json.gz",
        "a/rank1.json",
        "config.json",
        "metrics.json",
        "notes.txt",
        ".hidden/rank2.json",
        "a/__pycache__/rank3.json",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in find_traces([tmp_path])] == ["a/rank1.json", "rank0.json.gz"]
    assert not is_trace_name(tmp_path / "config.json")
    with pytest.raises(TraceError, match="no such file"):
        find_traces([tmp_path / "missing"])


# ---------------------------------------------------------------- tables


def _runs(rows: list[dict]) -> pd.DataFrame:
    base = {c: None for c in SCHEMAS["runs"].names}
    return SCHEMAS["runs"].conform(pd.DataFrame([{**base, **r} for r in rows]))


def _run(run, optimizer, dp, tp, **kw) -> dict:
    group, name = run.split("/")
    return {
        "run": run,
        "profile": "cpu-2c-gloo",
        "group": group,
        "name": name,
        "optimizer": optimizer,
        "dp": dp,
        "tp": tp,
        "world_size": dp * tp,
        "backend": "nccl",
        "device": "cuda",
        "ranks": dp * tp,
        "steps": 3,
        "layout": "contiguous",
        **kw,
    }


def test_comparisons_pair_muon_with_adamw_and_claims_decide():
    runs = _runs(
        [
            _run(
                "comparison/muon_dp2_tp2",
                "muon",
                2,
                2,
                comm_ms=5.7,
                comm_bytes=112,
                optimizer_ms=2.2,
                step_ms=101.0,
                state_bytes=500,
                exposed_comm_ms=1.0,
                optimizer_share=0.011,
            ),
            _run(
                "comparison/adamw_dp2_tp2",
                "adamw",
                2,
                2,
                comm_ms=10.0,
                comm_bytes=100,
                optimizer_ms=1.0,
                step_ms=100.0,
                state_bytes=1000,
                exposed_comm_ms=0.0,
            ),
            _run("distributed_muon/muon_dp4", "muon", 4, 1, step_ms=120.0),
            _run("distributed_muon/muon_tp4", "muon", 1, 4, step_ms=130.0),
            _run("distributed_muon/muon_dp2_tp2", "muon", 2, 2, step_ms=110.0),
            _run("other/muon_dp8", "muon", 8, 1, step_ms=1.0),  # no AdamW twin: no comparison
        ]
    )
    from test_claims import sweeps_of

    cmp = SCHEMAS["comparisons"].conform(_comparisons_table(runs, sweeps_of(runs)))
    assert len(cmp) == 2  # both dp2/tp2 Muon runs, against the only dp2/tp2 AdamW
    row = cmp[cmp["muon_run"] == "comparison/muon_dp2_tp2"].iloc[0]
    assert row["adamw_run"] == "comparison/adamw_dp2_tp2"
    assert math.isclose(row["comm_ms_ratio"], 0.57) and math.isclose(row["comm_bytes_ratio"], 1.12)
    assert math.isclose(row["state_bytes_ratio"], 0.5) and math.isclose(row["step_ms_ratio"], 1.01)
    assert pd.isna(row["exposed_comm_ms_ratio"])  # AdamW's value is 0: no ratio, not inf

    assert (cmp["tokens_per_step"].isna()).all()  # unknown work on both sides: paired, nothing to refuse


def test_schemas_conform_write_read_and_load_with_datasets(tmp_path):
    import datasets

    runs = _runs([_run("g/muon_dp2_tp2", "muon", 2, 2, step_ms=float("nan"), comm_ms=float("inf"), comm_bytes=3.0)])
    assert runs["step_ms"].isna().all() and runs["comm_ms"].isna().all()  # NaN and inf become nulls
    assert runs["comm_bytes"].dtype == "Int64" and runs.loc[0, "comm_bytes"] == 3
    tables = {name: schema.empty() for name, schema in SCHEMAS.items()}
    tables["runs"] = runs
    write_tables(tables, tmp_path)
    # nothing half-written left: the hidden files are the writer's marker alone
    assert not list(tmp_path.glob("*.tmp")) and [p.name for p in tmp_path.glob(".*")] == [".muon-repro-output"]
    for name in SCHEMAS:
        back = read_table(tmp_path / f"{name}.parquet")
        pd.testing.assert_frame_equal(back, SCHEMAS[name].conform(tables[name]))
        if len(tables[name]):  # datasets refuses a zero-row file ("corresponds to no data")
            ds = datasets.load_dataset("parquet", data_files=str(tmp_path / f"{name}.parquet"), split="train")
            assert ds.column_names == SCHEMAS[name].names and ds.num_rows == len(tables[name])
    text = schema_markdown()
    for schema in SCHEMAS.values():
        assert f"### `{schema.name}`" in text
        for column in schema.columns:
            assert column.description and f"`{column.name}`" in text
    with pytest.raises(ValueError, match="missing columns"):
        SCHEMAS["runs"].conform(pd.DataFrame({"run": ["x"]}))


def test_ranks_are_put_on_one_clock_by_their_base_time():
    """Rank 1's trace clock starts 2 ms (2,000,000 ns) after rank 0's: its span at the same trace time is 2 ms later on
    the common clock, counted from the earliest rank's step start."""
    from muon_repro.analysis.timeline import align_ranks

    spans = pd.DataFrame({"step": [0], "lane": ["coarse"], "phase": ["forward"], "start_us": [100.0], "end_us": [600.0]})
    steps = pd.DataFrame({"step": [0], "start_us": [0.0]})
    out = align_ranks([(0, 5_000_000, spans, steps), (1, 7_000_000, spans, steps)]).set_index("rank")
    assert out.loc[0, ["start_ms", "end_ms"]].tolist() == pytest.approx([0.1, 0.6])
    assert out.loc[1, ["start_ms", "end_ms"]].tolist() == pytest.approx([2.1, 2.6]) and out["aligned"].all()
