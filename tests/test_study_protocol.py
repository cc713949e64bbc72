"""The original study's protocol replayed (muon_repro.bench.study_protocol, record): its runs read by the same path as the
study's own traces, and the equal-work variant's bytes against the analytic ring model."""

from __future__ import annotations

import collections
import gzip
import json
import math
from pathlib import Path

import pytest
import torch

from muon_repro.analysis.discover import find_traces
from muon_repro.bench.study_protocol import (
    CPU_SCALE,
    NS_STEPS,
    RUNS,
    STUDY_SHAPES,
    STUDY_TP_DIMS,
    FlatShard,
    ProtocolConfig,
    ProtocolRun,
    study_newton_schulz,
)
from muon_repro.bench.study_record import _records_shapes
from muon_repro.formulas import ring_bytes
from muon_repro.optim.newton_schulz import zeropower_via_newtonschulz5
from muon_repro.study.scopes import PHASE_SCOPES, STEP
from muon_repro.study.sources import GROUPS, PROTOCOLS, study_folder
from muon_repro.study.tables import study_tables
from muon_repro.tables.schemas import SCHEMAS

REPO = Path(__file__).resolve().parents[1]


def test_the_config_scales_on_cpu_and_keeps_the_study_sizes_on_cuda():
    gpu = ProtocolConfig.for_device("study", "cuda")
    assert gpu.shapes == STUDY_SHAPES and gpu.fwd_bwd_size == 2048 and gpu.scaled == ""
    cpu = ProtocolConfig.for_device("study-equal-work", "cpu")
    assert cpu.fwd_bwd_size == 2048 // CPU_SCALE and "divided by 8" in cpu.scaled and cpu.differences
    for (a, b), (sa, sb), dim in zip(cpu.shapes, STUDY_SHAPES, STUDY_TP_DIMS):
        assert a >= sa / CPU_SCALE and b >= sb / CPU_SCALE
        assert dim == -1 or (a, b)[dim] % 2 == 0
    with pytest.raises(ValueError, match="protocol 'ddp'"):
        ProtocolConfig.for_device("ddp", "cpu")
    with pytest.raises(ValueError, match="does not split 2 ways"):
        ProtocolConfig("study", "cpu", ((3, 4),), (0,))


def test_the_flat_shard_is_cut_in_equal_chunks_and_each_matrix_found_in_them():
    locals_ = [torch.arange(6.0).view(2, 3), torch.arange(5.0).view(5, 1)]
    halves = [FlatShard.of(locals_, 2, r) for r in (0, 1)]
    assert halves[0].chunk == 6 and halves[0].overlap(0) == (0, 6) and halves[0].overlap(1) == (0, 0)
    assert halves[1].overlap(1) == (0, 5)
    full = halves[0].flat(locals_, torch.float32)
    assert torch.equal(torch.cat([h.shard(full) for h in halves]), full)  # the chunks put back the buffer
    assert torch.equal(halves[1].matrix(full, 1), locals_[1])


@pytest.mark.parametrize("shape", [(48, 20), (20, 48), (32, 32)])
def test_the_studys_newton_schulz_is_the_quintic_in_its_inputs_dtype(shape):
    g = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    ours = zeropower_via_newtonschulz5(g, NS_STEPS, torch.float32)
    assert torch.allclose(study_newton_schulz(g), ours, atol=1e-5)  # the same arithmetic, the operators unfused
    half = study_newton_schulz(g.bfloat16())
    assert half.dtype == torch.bfloat16 and half.shape == g.shape  # run in bf16, as the study's gathered momentum
    assert torch.allclose(half.float(), ours, atol=0.05)


def test_shapes_are_recorded_as_the_study_did_except_where_gloo_needs_them():
    full, only = ProtocolRun("muon", True), ProtocolRun("muon", False)
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert not _records_shapes(full, cuda) and _records_shapes(only, cuda)  # the study's profiler settings
    assert _records_shapes(full, cpu)  # a gloo collective's size is in its shapes alone


def _analytic_ring_bytes(cfg: ProtocolConfig, optimizer: str, rank: int) -> int:
    """What a rank of the equal-work protocol sends per step, ring model, from the config alone."""
    dp_rank, tp_rank = rank // cfg.tp, rank % cfg.tp
    locals_ = [
        torch.zeros(*(s // cfg.tp if i == d else s for i, s in enumerate(shape))) for shape, d in zip(cfg.shapes, cfg.tp_dims)
    ]
    layout = FlatShard.of(locals_, cfg.dp, dp_rank)
    full = layout.chunk * cfg.dp
    sent = ring_bytes("reduce_scatter", full, 4, cfg.dp) + ring_bytes("all_gather", full, 4, cfg.dp)
    if optimizer == "muon":
        sent += ring_bytes("all_gather", full, 2, cfg.dp)  # the DP gather of the bf16 momentum
        for i, dim in enumerate(cfg.tp_dims):
            if dim != -1 and layout.overlap(i)[1] > 0:
                sent += ring_bytes("all_gather", cfg.tp * math.prod(locals_[i].shape), 2, cfg.tp)
    del tp_rank
    return sent


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    from muon_repro.bench.study_record import record_protocols

    out = tmp_path_factory.mktemp("protocol")
    written = record_protocols(out, trials=1, backend="gloo", profile_id="cpu-2c-gloo", progress=False)
    assert len(written) == len(PROTOCOLS) * len(RUNS)
    return out


@pytest.mark.slow
def test_recorded_runs_carry_the_study_scopes_and_read_like_its_traces(recorded):
    tables = study_tables([recorded, study_folder(REPO / "traces")])  # ours beside the study's own traces
    runs = tables["study_runs"]
    mine = runs[runs["profile"] == "cpu-2c-gloo"]
    assert set(mine["protocol"]) == set(PROTOCOLS) and len(mine) == len(PROTOCOLS) * len(RUNS)
    assert (mine["steps"] == 5).all() and (mine["ranks_traced"] == 4).all()
    steps = tables["study_steps"]
    ours = steps[steps["profile"] == "cpu-2c-gloo"]
    assert set(ours["scope"]) - {STEP} <= set(PHASE_SCOPES)
    theirs = steps[steps["profile"] != "cpu-2c-gloo"]
    # one path: the same columns, filled for both (the GPU ones zero on CPU)
    for name, df in tables.items():
        SCHEMAS[name].conform(df)
    for column in ("cpu_ms", "busy_ms", "comm_ms"):
        assert ours[column].notna().all() and theirs[column].notna().all(), column
    for df in (ours, theirs):
        assert df.loc[df["scope"] == STEP, "step_ms"].gt(0).all()
    assert (ours.loc[ours["scope"] == STEP, "comm_transfer_ms"].notna()).all()  # gloo collectives matched across ranks
    protocols = tables["study_protocols"]
    assert set(protocols["group"]) == {"comparison", *GROUPS.values()}
    equal = protocols[(protocols["group"] == "study_equal_work") & (protocols["claim_id"] == "comm_time_dp2_tp2")]
    assert bool(equal["equal_work"].iloc[0])  # both reduce and shard alike: Muon adds only its gathers
    study = protocols[(protocols["group"] == "study_protocol") & (protocols["claim_id"] == "comm_time_dp2_tp2")]
    assert not bool(study["equal_work"].iloc[0])
    assert float(study["study_method_value"].iloc[0]) > 0  # the study's own sums, on our recording of its protocol
    # one number, one path: on the study's traces the method's values are study_method's rebuilt numbers
    method = tables["study_method"].set_index("number_id")["rebuilt"]
    theirs = protocols[protocols["group"] == "comparison"].set_index("claim_id")["study_method_value"]
    assert theirs["comm_time_dp2_tp2"] == pytest.approx(method["comm_ratio"])
    assert theirs["optimizer_share"] == pytest.approx(method["optimizer_share_muon"])
    # the main analysis leaves these folders to the study's reader, and a folder of them alone is no error
    assert not find_traces([recorded])
    from muon_repro.analysis.batch_read import analyze_paths

    alone = analyze_paths([recorded], workers=1)
    assert not alone.failures and alone.has_records


@pytest.mark.slow
def test_the_equal_work_bytes_are_the_analytic_models(recorded):
    tables = study_tables([recorded])
    ranks = tables["study_ranks"]
    cfg = ProtocolConfig.for_device("study-equal-work", "cpu")
    for optimizer, name in (("adamw", "adamw_FULLSTEP"), ("muon", "muon_FULLSTEP_dp2_tp2")):
        rows = ranks[ranks["run"] == f"cpu-2c-gloo/{GROUPS['study-equal-work']}/{name}"]
        assert len(rows) == 4
        for r in rows.itertuples():
            assert r.ring_bytes_per_step == _analytic_ring_bytes(cfg, optimizer, int(r.rank)), (name, r.rank)
    config = json.loads((recorded / "cpu-2c-gloo" / GROUPS["study-equal-work"] / "adamw" / "trial0" / "config.json").read_text())
    assert config["protocol"] == "study-equal-work" and config["scaled"] and config["differences"]


def test_one_rank_is_the_study_protocol_at_dp1_tp1_and_names_its_grid():
    from muon_repro.bench.study_protocol import ProtocolRun
    from muon_repro.rundir import protocol_group

    one = ProtocolConfig.for_device("study", "cuda", 1)
    assert (one.dp, one.tp, one.world_size, one.shapes) == (1, 1, 1, STUDY_SHAPES)
    assert "no collective is issued" in " ".join(one.differences)
    assert ProtocolConfig.for_device("study", "cuda").world_size == 4
    with pytest.raises(ValueError, match="do the same work"):
        ProtocolConfig.for_device("study-equal-work", "cpu", 1)
    with pytest.raises(ValueError, match="world size 2"):
        ProtocolConfig.for_device("study", "cpu", 2)
    muon_async = ProtocolRun("muon", True, True)
    assert muon_async.name == "muon_FULLSTEP_dp2_tp2_async" and muon_async.name_at(1, 1) == "muon_FULLSTEP_dp1_tp1_async"
    assert ProtocolRun("adamw", True).name_at(1, 1) == "adamw_FULLSTEP"  # AdamW's names never held a grid
    assert protocol_group("study") == "study_protocol" and protocol_group("study", 1) == "study_protocol_1rank"


def test_world_size_is_refused_outside_the_study_protocol(capsys):
    from muon_repro.cli import main

    assert main(["bench", "comparison", "--world-size", "1", "--out", "unused"]) == 2
    assert "--world-size" in capsys.readouterr().err


def test_the_study_method_on_a_set_renames_its_grid_and_divides_by_no_zero():
    from muon_repro.study.claims import method_values
    from muon_repro.study.method import Sums

    def sums(comm_ms: float, calls: int, scopes: dict[str, float]) -> Sums:
        scopes = {"FWD_BWD": 150.0, **scopes}  # a full step's simulated forward-backward, CPU and GPU views
        return Sums(comm_ms, calls, scopes, dict.fromkeys(scopes, 5), None)

    one_rank = {
        0: {
            "muon_FULLSTEP_dp1_tp1": sums(0.0, 0, {"Muon_Step": 2.0, "Muon_Full_Training_Step": 100.0}),
            "adamw_FULLSTEP": sums(0.0, 0, {"AdamW_Step": 1.0, "AdamW_Full_Training_Step": 80.0}),
        },
        1: {
            "muon_FULLSTEP_dp1_tp1": sums(0.0, 0, {"Muon_Step": 4.0, "Muon_Full_Training_Step": 100.0}),
            "adamw_FULLSTEP": sums(0.0, 0, {"AdamW_Step": 1.0, "AdamW_Full_Training_Step": 80.0}),
        },
    }
    values = method_values(one_rank, 1, 1)
    assert values["optimizer_share_muon"] == pytest.approx(0.03)  # the mean of the rounds' 2% and 4%
    assert values["total_ratio"] == pytest.approx(1.25)
    assert math.isnan(values["comm_ratio"]) and math.isnan(values["comm_per_call_muon"])  # nothing to divide by


@pytest.fixture(scope="module")
def recorded_one_rank(tmp_path_factory) -> Path:
    from muon_repro.bench.study_record import record_protocols

    out = tmp_path_factory.mktemp("protocol1")
    written = record_protocols(
        out, protocols=("study",), trials=2, world_size=1, backend="gloo", profile_id="cpu-2c-gloo", progress=False
    )
    assert len(written) == 2 * len(RUNS)
    return out


@pytest.mark.slow
def test_one_rank_issues_no_collective_and_the_study_method_reads_its_share(recorded_one_rank):
    tables = study_tables([recorded_one_rank])
    runs = tables["study_runs"]
    assert set(runs["group"]) == {"study_protocol_1rank"} and (runs["world_size"] == 1).all()
    assert (runs["collectives_per_step"] == 0).all() and tables["study_collectives"].empty
    steps = tables["study_steps"]
    assert {"Muon_Step", "AdamW_Step", "FWD_BWD"} <= set(steps["scope"])  # the study's scopes, kept
    rows = tables["study_protocols"].set_index("claim_id")
    assert set(rows.index) == {"optimizer_share", "latency_overhead"}  # no collective to time
    share = rows.loc["optimizer_share"]
    assert int(share["rounds"]) == 2
    # On a CPU the scope's host span is the device's time: the study's sums and our per-step share must agree.
    assert abs(float(share["study_method_value"]) - float(share["measured_value"])) < 0.05
    folder = recorded_one_rank / "cpu-2c-gloo" / "study_protocol_1rank" / "muon_dp1_tp1" / "trial1"
    config = json.loads((folder / "config.json").read_text())
    assert (config["dp"], config["tp"], config["world_size"]) == (1, 1, 1)


def test_the_rounds_of_a_set_are_those_every_run_of_it_has():
    """A set whose one run lacks a round says the rounds all its runs share: the ones its intervals can pair."""
    from muon_repro.study.claims import protocol_rows
    from muon_repro.tables.io import read_tables

    study = read_tables(REPO / "metrics", ("study_runs", "study_steps", "study_ranks", "study_collectives"))
    run = "cpu-2c-gloo/study_protocol/adamw_FULLSTEP"
    dropped = {name: df[~((df["run"] == run) & (df["trial"] == 2))] for name, df in study.items()}
    recorded = int(study["study_runs"].loc[study["study_runs"]["run"] == run, "trial"].nunique())  # the committed rounds
    assert recorded >= 3
    rounds = {(r["group"], r["claim_id"]): r["rounds"] for r in protocol_rows(dropped)}
    assert {g for (g, _), n in rounds.items() if n == recorded - 1} == {"study_protocol"}
    assert rounds[("study_equal_work", "optimizer_share")] == recorded


def _operators_per_muon_step(trace: Path, names: tuple[str, ...], category: str = "cpu_op") -> list[tuple[int, ...]]:
    """How many events of each of ``names`` (operators, or another ``category``'s) every ``Muon_Step`` of a trace
    holds, nested ones too."""
    events = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    counts = []
    for step in (e for e in events if e["name"] == "Muon_Step"):
        lo, hi = step["ts"], step["ts"] + step["dur"]
        inside = collections.Counter(
            e["name"] for e in events if e.get("cat") == category and lo <= e["ts"] and e["ts"] + e["dur"] <= hi
        )
        counts.append(tuple(inside[n] for n in names))
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("name", ["muon_dp2_tp2", "muon_FULLSTEP_dp2_tp2"])
def test_the_replayed_muon_step_issues_the_studys_operators_on_every_rank(recorded, name):
    """The study's Newton-Schulz is unfused (a launch per scalar product and sum) and per matrix: the replay's
    optimizer scope holds the operators of the study's own trace, rank by rank, step by step, and the scope torch
    opens around an Optimizer's step."""
    names = ("aten::matmul", "aten::mul", "aten::add", "aten::add_", "aten::mul_", "aten::div")
    theirs_dir = study_folder(REPO / "traces")
    ours_dir = recorded / "cpu-2c-gloo" / GROUPS["study"] / name / "trial0"
    for rank in range(4):
        theirs = _operators_per_muon_step(theirs_dir / f"trace_{name}_rank{rank}.json.gz", names)
        ours = _operators_per_muon_step(ours_dir / f"rank{rank}.json.gz", names)
        assert len(ours) == 5 and ours == theirs, (name, rank)
        scope = ("Optimizer.step#Muon.step",)
        assert _operators_per_muon_step(ours_dir / f"rank{rank}.json.gz", scope, "user_annotation") == [(1,)] * 5
