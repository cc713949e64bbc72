"""Process grid layout and the collectives' byte ledger, on a real 4-rank gloo world."""

import pytest
import torch

from muon_repro.formulas import ring_bytes
from muon_repro.parallel import (
    CommLedger,
    Group,
    ParallelDims,
    comm,
)
from muon_repro.parallel.launch import launch


def collectives_worker() -> dict:
    dims = ParallelDims(dp=2, tp=2)
    rank = dims.rank
    out = {
        "rank": rank,
        "dp_rank": dims.dp_rank,
        "tp_rank": dims.tp_rank,
        "dp_ranks": dims.dp_group.ranks,
        "tp_ranks": dims.tp_group.ranks,
    }

    shard = torch.full((5,), float(rank))
    full = torch.empty(10)
    comm.all_gather_into(full, shard, dims.dp_group, phase="dp_gather")
    out["gathered"] = full

    full_bf16 = torch.arange(10, dtype=torch.bfloat16) * (rank + 1)
    shard_bf16 = torch.empty(5, dtype=torch.bfloat16)
    comm.reduce_scatter_into(shard_bf16, full_bf16, dims.dp_group, phase="dp_reduce_scatter")
    out["scattered"] = shard_bf16.float()

    summed = comm.all_reduce_(torch.full((7,), float(rank)), dims.tp_group, phase="tp_all_reduce")
    out["summed"] = summed
    # MAX: each element's largest value over the TP ranks (rank r sends [r, -r, 3r - 5]); timed like SUM.
    dims.ledger.timer.on = True
    maxed = torch.tensor([1.0, -1.0, 3.0]) * rank + torch.tensor([0.0, 0.0, -5.0])
    out["maxed"] = comm.all_reduce_(maxed, dims.tp_group, phase="tp_all_reduce", op="max")
    dims.ledger.timer.on = False
    out["timer"] = dims.ledger.timer.columns()

    world = ParallelDims(dp=4, tp=1)  # a second grid on the same world: its own ledger
    comm.all_gather_into(torch.empty(12), torch.ones(3), world.dp_group, phase="dp_all_gather")
    comm.all_reduce_(torch.ones(10), world.dp_group, phase="tp_all_reduce")
    comm.all_reduce_(torch.ones(10), world.tp_group, phase="tp_all_reduce")  # tp=1: nothing sent
    out["ledger"] = dims.ledger.as_dicts()
    out["world_ledger"] = world.ledger.as_dicts()
    return out


@pytest.fixture(scope="module")
def results():
    return launch(collectives_worker, 4)


@pytest.mark.slow
def test_tp_ranks_are_adjacent(results):
    assert [(r["dp_rank"], r["tp_rank"]) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert results[0]["tp_ranks"] == (0, 1) and results[3]["tp_ranks"] == (2, 3)
    assert results[0]["dp_ranks"] == (0, 2) and results[3]["dp_ranks"] == (1, 3)


@pytest.mark.slow
def test_collectives_compute_the_right_values(results):
    for r in results:
        dp_peers = r["dp_ranks"]
        assert torch.equal(r["gathered"], torch.tensor([float(dp_peers[0])] * 5 + [float(dp_peers[1])] * 5))
        total = sum(p + 1 for p in dp_peers)
        chunk = torch.arange(10, dtype=torch.float32)[5 * r["dp_ranks"].index(r["rank"]) :][:5]
        assert torch.equal(r["scattered"], chunk * total)
        assert torch.equal(r["summed"], torch.full((7,), float(sum(r["tp_ranks"]))))
        low, high = r["tp_ranks"]
        assert torch.equal(r["maxed"], torch.tensor([float(high), -float(low), 3.0 * high - 5]))
        timer = r["timer"]
        assert [timer["kinds"][k] for k in timer["kind"]] == ["all_reduce"] and timer["phases"] == ["tp_all_reduce"]


@pytest.mark.slow
def test_ledger_bytes_follow_the_ring_model_exactly(results):
    ledger = results[0]["ledger"]
    assert [(e["phase"], e["op"], e["group"], e["group_size"], e["elements"], e["dtype"], e["bytes"]) for e in ledger] == [
        ("dp_gather", "all_gather", "dp", 2, 10, "float32", (2 - 1) * 5 * 4),  # (n-1)/n * 10 fp32
        ("dp_reduce_scatter", "reduce_scatter", "dp", 2, 10, "bfloat16", (2 - 1) * 5 * 2),
        ("tp_all_reduce", "all_reduce", "tp", 2, 7, "float32", 2 * (2 - 1) * 4 * 4),  # chunk ceil(7/2)
        ("tp_all_reduce", "all_reduce", "tp", 2, 3, "float32", 2 * (2 - 1) * 2 * 4),  # MAX costs what SUM does
    ]
    world = results[0]["world_ledger"]
    assert [(e["op"], e["group_size"], e["bytes"]) for e in world] == [
        ("all_gather", 4, 3 * 3 * 4),  # (4-1)/4 of 12 fp32
        ("all_reduce", 4, 2 * 3 * 3 * 4),  # 2(4-1) chunks of ceil(10/4) fp32
    ]


def test_ring_formula():
    assert ring_bytes("all_gather", 1024, 4, 4) == 3 * 1024  # (n-1)/n * S
    assert ring_bytes("reduce_scatter", 1024, 2, 8) == 7 * 128 * 2
    assert ring_bytes("all_reduce", 1024, 4, 4) == 2 * 3 * 1024
    assert ring_bytes("all_reduce", 1024, 4, 1) == 0


def test_the_ledger_records_only_the_collectives_it_knows():
    ledger = CommLedger()
    pair = Group(name="dp", ranks=(0, 1), rank=0, process_group=None, ledger=ledger)
    ledger.record("dp_gather", "all_gather", pair, 10, torch.float32)
    assert [(r.op, r.bytes) for r in ledger.records] == [("all_gather", 5 * 4)]
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        ledger.record("dp_gather", "broadcast", pair, 1, torch.float32)


def test_single_process_group_is_a_no_op_and_records_nothing():
    group = Group.single("dp")
    full = torch.empty(4)
    comm.all_gather_into(full, torch.arange(4.0), group, phase="dp_gather")
    assert torch.equal(full, torch.arange(4.0)) and group.ledger.records == []
    with pytest.raises(ValueError, match="expected 1 x 3"):
        comm.all_gather_into(torch.empty(4), torch.ones(3), group, phase="dp_gather")
    assert torch.equal(comm.all_reduce_(torch.arange(3.0), group, phase="tp_all_reduce", op="max"), torch.arange(3.0))
    with pytest.raises(ValueError, match="unknown op 'min'; choose one of sum, max"):
        comm.all_reduce_(torch.ones(2), group, phase="tp_all_reduce", op="min")


@pytest.mark.parametrize("dp, tp", [(2, 1), (1, 3), (2, 2)])
def test_grid_must_match_world_size(dp, tp):
    with pytest.raises(ValueError, match=f"dp={dp} \\* tp={tp} = {dp * tp}.*1 process"):
        ParallelDims(dp=dp, tp=tp)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_grid_sizes_must_be_positive_integers(bad):
    with pytest.raises(ValueError, match="ParallelDims.dp"):
        ParallelDims(dp=bad, tp=1)


def test_ledger_totals_by_phase():
    ledger = CommLedger()
    group = Group(name="dp", ranks=(0, 1), rank=0, process_group=None, ledger=ledger)
    ledger.record("dp_gather", "all_gather", group, 8, torch.float32)
    ledger.step = 1
    ledger.record("dp_gather", "all_gather", group, 8, torch.bfloat16)
    assert ledger.bytes_by_phase() == {"dp_gather": 16 + 8}
    assert ledger.bytes_by_phase(step=1) == {"dp_gather": 8}
