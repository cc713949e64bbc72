"""The flat buffer in Megatron's order (the reverse of ``model.parameters()``) and the optimizer
state it leaves on each DP rank, checked against expectations computed here from the shapes alone."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from muon_repro.model import GPT, GPTConfig
from muon_repro.optim import muon_param_groups
from muon_repro.optim.comm_model import compare_state, optimizer_bytes, param_specs, state_bytes
from muon_repro.optim.layout import LAYOUTS, ParamSpec, ShardPlan
from muon_repro.parallel import Group, ParallelDims
from muon_repro.parallel.launch import launch

MUON_BYTES, ADAMW_BYTES = 4, 8  # one fp32 momentum; two fp32 moments


def tiny_model(tp: int = 1) -> GPT:
    """TP-local shapes of the tiny model on TP rank 0 (building one communicates nothing)."""
    group = (
        Group.single("tp")
        if tp == 1
        else Group(name="tp", ranks=tuple(range(tp)), rank=0, process_group=None, ledger=Group.single("x").ledger)
    )
    return GPT(GPTConfig.preset("tiny"), group)


def tiny_specs(tp: int = 1) -> list[ParamSpec]:
    return param_specs(tiny_model(tp).named_parameters(), tp)


def held_elements(buffer: list[ParamSpec], dp: int) -> list[dict[str, int]]:
    """Elements of each parameter every DP rank holds when ``buffer`` is laid out in one contiguous
    bucket, padded to a multiple of ``dp`` and cut into ``dp`` equal shards."""
    total = sum(s.numel for s in buffer)
    shard = math.ceil(total / dp)
    held: list[dict[str, int]] = [{} for _ in range(dp)]
    start = 0
    for spec in buffer:
        end = start + spec.numel
        for rank in range(dp):
            overlap = min(end, (rank + 1) * shard) - max(start, rank * shard)
            if overlap > 0:
                held[rank][spec.name] = overlap
        start = end
    return held


def state_of(buffer: list[ParamSpec], dp: int, *, muon: bool) -> list[dict[str, int]]:
    """Per rank: Muon momentum and AdamW moment bytes for the contiguous layout of ``buffer``."""
    use_muon = {s.name: s.use_muon and muon for s in buffer}
    out = []
    for held in held_elements(buffer, dp):
        out.append(
            {
                "muon": sum(n * MUON_BYTES for name, n in held.items() if use_muon[name]),
                "adamw": sum(n * ADAMW_BYTES for name, n in held.items() if not use_muon[name]),
            }
        )
    return out


def largest_rank_ratio(buffer: list[ParamSpec], dp: int) -> Fraction:
    """Muon's largest rank's state over AdamW's largest rank's, exactly."""
    return Fraction(
        max(sum(r.values()) for r in state_of(buffer, dp, muon=True)),
        max(sum(r.values()) for r in state_of(buffer, dp, muon=False)),
    )


def muon_fraction(specs: list[ParamSpec]) -> Fraction:
    return Fraction(sum(s.numel for s in specs if s.use_muon), sum(s.numel for s in specs))


def megatron_order(specs: list[ParamSpec]) -> list[ParamSpec]:
    return specs[::-1]


def old_order(specs: list[ParamSpec]) -> list[ParamSpec]:
    """The optimizer's param-group order this repository used before: Muon group, then AdamW."""
    return [s for s in specs if s.use_muon] + [s for s in specs if not s.use_muon]


# ---------------------------------------------------------------- the order


def test_param_groups_record_each_parameter_index_in_the_model():
    model = tiny_model()
    names = [n for n, _ in model.named_parameters()]
    for group in muon_param_groups(model):
        assert [names[i] for i in group["model_indices"]] == group["names"]


def test_analytic_specs_are_the_optimizers_own():
    model = tiny_model()
    from muon_repro.optim.distributed import DistributedMuon

    opt = DistributedMuon(muon_param_groups(model), ParallelDims(1, 1))
    assert opt.plan.specs == param_specs(model.named_parameters(), 1)
    assert [s.name for s in opt.plan.specs] == [n for n, _ in model.named_parameters()]


@pytest.mark.parametrize("layout", ["contiguous", "bucketed"])
def test_buffer_holds_the_model_last_parameter_first(layout):
    specs = tiny_specs()
    plan = ShardPlan(specs, dp=2, layout=layout, bucket_elems=4096 if layout == "bucketed" else None)
    starts = [slot.flat_start for slot in plan.slots]  # slots follow the specs: model order
    assert starts == sorted(starts, reverse=True)
    assert [specs[i].name for i in plan.order][:2] == ["lm_head.weight", "final_norm.weight"]
    assert plan.slots[0].spec.name == "embed.weight" and plan.slots[0].flat_start + plan.slots[0].spec.numel <= plan.total


@pytest.mark.parametrize("dp", [2, 4])
def test_whole_matrix_keeps_buffer_order_inside_each_owner_segment(dp):
    plan = ShardPlan(tiny_specs(), dp=dp, layout="whole_matrix")
    for rank in range(dp):
        mine = [slot.index for slot, _ in plan.pieces_of(rank)]  # flat order
        assert mine == sorted(mine, reverse=True), rank
        assert all(len(plan.slots[i].pieces) == 1 for i in mine)  # whole parameters only


def test_whole_matrix_balances_muon_matrices_by_newton_schulz_flops_not_elements():
    """NS FLOPs by hand (5 steps, 20 m^2 n + 10 m^3 with m <= n): a [32, 32] 983,040; b [4, 1024] 328,320;
    c [4, 256] 82,560. Largest first, each to the owner with the fewest FLOPs: a -> 0, b -> 1, and c -> 1
    (328,320 < 983,040), though rank 1 then holds 5,120 elements to rank 0's 1,024 (by elements c would go to 0)."""
    specs = [ParamSpec(n, shape, None, 1, True) for n, shape in (("a", (32, 32)), ("b", (4, 1024)), ("c", (4, 256)))]
    plan = ShardPlan(specs, dp=2, layout="whole_matrix")
    assert [slot.holders for slot in plan.slots] == [(0,), (1,), (1,)]


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("dp", [2, 4])
def test_lm_head_on_the_first_dp_rank_embedding_on_the_last(dp, tp):
    specs = tiny_specs(tp)
    expected = held_elements(megatron_order(specs), dp)
    plan = ShardPlan(specs, dp=dp)
    for slot in plan.slots:
        assert {p.dp_rank: p.length for p in slot.pieces} == {
            r: h[slot.spec.name] for r, h in enumerate(expected) if slot.spec.name in h
        }
    holders = {slot.spec.name: slot.holders for slot in plan.slots}
    # The LM head is the model's last matrix, first in the buffer; the embedding its first, last.
    assert holders["lm_head.weight"] == (0,) and holders["final_norm.weight"] == (0,)
    assert holders["embed.weight"] == (dp - 1,)


# ---------------------------------------------------------------- the state it leaves per rank


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("dp", [2, 4])
def test_analytic_state_per_rank_from_the_shapes(dp, tp):
    specs = tiny_specs(tp)
    buffer = megatron_order(specs)
    comparison = compare_state(specs, dp=dp)
    assert comparison.muon == state_of(buffer, dp, muon=True)
    assert comparison.adamw == state_of(buffer, dp, muon=False)
    assert comparison.muon == [state_bytes(specs, dp=dp, dp_rank=r, optimizer="muon") for r in range(dp)]
    # Same shard boundaries under both optimizers: every rank keeps exactly half for the Muon matrices.
    assert comparison.muon_managed_ratio == [0.5] * dp
    f = muon_fraction(specs)
    assert comparison.muon_fraction == pytest.approx(float(f), rel=1e-15)
    assert comparison.even_floor == pytest.approx(float(1 - f / 2), rel=1e-15)
    assert comparison.largest_rank_ratio == pytest.approx(float(largest_rank_ratio(buffer, dp)), rel=1e-15)


@pytest.mark.parametrize("dp", [2, 4])
def test_reverse_order_brings_the_largest_rank_towards_the_floor(dp):
    specs = tiny_specs()
    new, old = largest_rank_ratio(megatron_order(specs), dp), largest_rank_ratio(old_order(specs), dp)
    floor = 1 - muon_fraction(specs) / 2  # 0.627 here: Muon matrices are 74.6% of the tiny model
    assert floor <= new < old
    if dp == 2:  # the halves hold the same Muon and AdamW elements: exactly on the floor
        assert new == floor and old > 0.75
    else:  # the LM head fills half of rank 0, the embedding half of rank 3; before, rank 3 was all AdamW
        assert new < 0.752 and old == 1.0


def test_every_layout_spreads_state_at_dp2():
    specs = tiny_specs()
    for layout in LAYOUTS:
        comparison = compare_state(specs, dp=2, layout=layout, bucket_elems=4096 if layout == "bucketed" else None)
        assert comparison.largest_rank_ratio < 0.7, layout


# ---------------------------------------------------------------- at run time, on gloo


@pytest.fixture(scope="module")
def held_at_run_time() -> list[dict]:
    import optim_workers

    runs = launch(optim_workers.state_after_one_step, 2, [(2, 1)]) + launch(
        optim_workers.state_after_one_step, 4, [(4, 1), (2, 2)]
    )
    return [grid for rank in runs for grid in rank]


@pytest.mark.slow
@pytest.mark.parametrize("grid", [(2, 1), (4, 1), (2, 2)], ids=lambda g: f"dp{g[0]}-tp{g[1]}")
def test_state_per_rank_at_run_time(held_at_run_time, grid):
    dp, tp = grid
    ranks = [r for r in held_at_run_time if (r["dp"], r["tp"]) == grid]
    assert len(ranks) == dp * tp
    specs = tiny_specs(tp)
    muon_names = {s.name for s in specs if s.use_muon}
    for r in ranks:
        dp_rank = r["dp_rank"]
        # What the optimizers hold is what the plan says, and what the shapes say.
        assert r["muon"]["state_bytes"] == state_of(megatron_order(specs), dp, muon=True)[dp_rank]
        assert r["adamw"]["state_bytes"] == state_of(megatron_order(specs), dp, muon=False)[dp_rank]
        assert r["muon"]["state_bytes"] == state_bytes(specs, dp=dp, dp_rank=dp_rank, optimizer="muon")
        # ... and what their storages hold: a moment kept as a view of a full-size buffer reads as its shard by name
        for optimizer in ("muon", "adamw"):
            assert r[optimizer]["held_state_bytes"] == sum(r[optimizer]["state_bytes"].values()), optimizer
        # Muon-managed state: one moment where AdamW keeps two, exactly, rank by rank.
        muon_managed = sum(b for n, b in r["muon"]["by_param"].items() if n in muon_names)
        adamw_managed = sum(b for n, b in r["adamw"]["by_param"].items() if n in muon_names)
        assert muon_managed > 0 and muon_managed / adamw_managed == 0.5
        # The LM head's state lives on DP rank 0, the embedding's on the last DP rank.
        assert (r["muon"]["by_param"]["lm_head.weight"] > 0) == (dp_rank == 0)
        assert (r["muon"]["by_param"]["embed.weight"] > 0) == (dp_rank == dp - 1)
    largest = max(sum(r["muon"]["state_bytes"].values()) for r in ranks) / max(
        sum(r["adamw"]["state_bytes"].values()) for r in ranks
    )
    assert largest < largest_rank_ratio(old_order(specs), dp)


def test_the_reduce_scatter_is_priced_in_the_reduce_dtype_and_the_all_gather_in_the_param_dtype():
    # One AdamW matrix of 16 elements, dp=2: by the ring model (d-1)/d * N * bytes, by hand:
    # reduce-scatter in bf16 1/2 * 16 * 2 = 16 bytes, parameter all-gather in fp32 1/2 * 16 * 4 = 32 bytes.
    specs = [ParamSpec("w", (4, 4), None, 1, False)]
    sent = optimizer_bytes(
        specs, dp=2, tp=1, dp_rank=0, optimizer="adamw", reduce_dtype=torch.bfloat16, param_dtype=torch.float32
    )
    assert (sent["dp_reduce_scatter"], sent["dp_all_gather"]) == (16, 32)


def test_only_tp_sharded_muon_matrices_are_tp_gathered():
    # tp=2, dp=1: a [8, 16]-local matrix sharded on dim 0 is gathered over TP, (t-1) * N_local * 2 bytes (bf16)
    # = 1 * 128 * 2 = 256; a replicated [16, 16] matrix is whole on every TP rank and is not gathered.
    sharded = ParamSpec("sharded", (8, 16), 0, 2, True)
    replicated = ParamSpec("replicated", (16, 16), None, 2, True)
    sent = optimizer_bytes([sharded, replicated], dp=1, tp=2, dp_rank=0, optimizer="muon")
    assert sent["tp_gather"] == 256
    assert optimizer_bytes([replicated], dp=1, tp=2, dp_rank=0, optimizer="muon")["tp_gather"] == 0
