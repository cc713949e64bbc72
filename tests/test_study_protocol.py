"""The original study's protocol replayed (muon_repro.bench.study_protocol, record): its runs read by the same path as the
study's own traces, and the equal-work variant's bytes against the analytic ring model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from muon_repro.analysis.discover import find_traces
from muon_repro.bench.study_protocol import (
    CPU_SCALE,
    RUNS,
    STUDY_SHAPES,
    STUDY_TP_DIMS,
    FlatShard,
    ProtocolConfig,
)
from muon_repro.formulas import ring_bytes
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
