"""Newton-Schulz units capped by ``ns_unit_elems``: what the plan cuts, and, on a 2x2 gloo grid for every
layout, the same bits as the layout's own units with less transient memory and the bytes the model prices."""

from __future__ import annotations

import math

import optim_workers
import pytest
import torch

from muon_repro.bench.configs import resolve
from muon_repro.costmodel.workload import shard_plan
from muon_repro.model_config import GPTConfig
from muon_repro.optim.comm_model import optimizer_bytes
from muon_repro.optim.layout import ParamSpec, ShardPlan
from muon_repro.parallel.launch import launch

LAYOUT_CASES = [("contiguous", None), ("whole_matrix", None), ("bucketed", 8192)]  # bucketed: 2-3 matrices a bucket
CAPS = [None, 1, 5000]  # the layout's units; one matrix per unit; a few matrices per unit (tiny: 1,024-4,096 each)


def _plan(layout: str, bucket_elems: int | None, cap: int | None, dp: int = 4) -> ShardPlan:
    base = shard_plan(GPTConfig.preset("small"), 2, dp, "muon", layout, bucket_elems)
    return ShardPlan(base.specs, dp, layout, bucket_elems, cap)


def _full(plan: ShardPlan, i: int) -> int:
    return math.prod(plan.specs[i].full_shape)


@pytest.mark.parametrize("layout, bucket_elems", [("contiguous", None), ("whole_matrix", None), ("bucketed", 1_000_000)])
@pytest.mark.parametrize("cap", [1, 100_000, 262_144, 600_000])
def test_a_capped_plan_orthogonalizes_every_matrix_once_per_rank_within_the_cap(layout, bucket_elems, cap):
    free, capped = _plan(layout, bucket_elems, None), _plan(layout, bucket_elems, cap)
    assert len(capped.ns_units) > len(free.ns_units)
    for r in range(capped.dp):
        mine_free = sorted(i for u in free.ns_units for i in free.ns_slots(u, r))
        mine = [i for u in capped.ns_units for i in capped.ns_slots(u, r)]
        assert sorted(mine) == mine_free  # the same matrices, each once
        for unit in capped.ns_units:
            sizes = [_full(capped, i) for i in capped.ns_slots(unit, r)]
            assert sum(sizes) <= cap or len(sizes) == 1, (r, sizes)  # within the cap, or one matrix past it
    gathered = lambda plan: sorted(i for u in plan.ns_units if u.dp_gathered for i in u.slots)  # noqa: E731
    assert gathered(capped) == gathered(free)  # the cap changes no matrix's DP gather


def test_the_units_of_held_matrices_give_every_rank_its_own_runs():
    plan = _plan("whole_matrix", None, 262_144)
    counts = [sum(bool(plan.ns_slots(u, r)) for u in plan.ns_units) for r in range(plan.dp)]
    assert len(plan.ns_units) == max(counts)  # no unit is empty on every rank
    for r in range(plan.dp):  # a rank's units are consecutive runs of its matrices in buffer order
        mine = [i for u in plan.ns_units for i in plan.ns_slots(u, r)]
        assert mine == sorted(mine, key=plan.order.index)


def test_the_cap_changes_the_bytes_only_by_the_dp_gathers_padding():
    specs = _plan("bucketed", 1_000_000, None).specs
    kw = dict(dp=4, tp=2, dp_rank=1, optimizer="muon", layout="bucketed", bucket_elems=1_000_000)
    free, capped = optimizer_bytes(specs, **kw), optimizer_bytes(specs, **kw, ns_unit_elems=1)
    assert {k: v for k, v in capped.items() if k != "dp_gather"} == {k: v for k, v in free.items() if k != "dp_gather"}
    assert capped["dp_gather"] >= free["dp_gather"]


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "4"])
def test_a_cap_that_is_no_positive_integer_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="ns_unit_elems must be a positive integer"):
        _plan("contiguous", None, bad)


def test_the_bench_config_records_a_cap_only_for_muon_and_only_when_set():
    muon = resolve("comparison/muon_dp2_tp2")
    assert "ns_unit_elems" not in muon.to_dict()  # config.json of every run before the field is unchanged
    from dataclasses import replace

    assert replace(muon, ns_unit_elems=4096).to_dict()["ns_unit_elems"] == 4096
    with pytest.raises(ValueError, match="AdamW has none"):
        replace(resolve("comparison/adamw_dp2_tp2"), ns_unit_elems=4096)


@pytest.fixture(scope="module", params=LAYOUT_CASES, ids=[c[0] for c in LAYOUT_CASES])
def runs(request) -> tuple[str, int | None, list[dict]]:
    layout, bucket_elems = request.param
    return layout, bucket_elems, launch(optim_workers.train_every_unit_cap, 4, layout, bucket_elems, CAPS)


@pytest.mark.slow
def test_capped_units_give_the_same_bits_with_less_transient_memory(runs):
    _, _, results = runs
    for rank, result in enumerate(results):
        reference = result[(None, "none")]
        for key, run in result.items():
            for name, value in run["params"].items():
                assert torch.equal(value, reference["params"][name]), (rank, key, name)
        one = result[(1, "none")]
        assert one["units"] > reference["units"]
        assert one["transient_bytes"] < reference["transient_bytes"], (rank, one["transient_bytes"], reference["transient_bytes"])
        assert one["tp_gathers_per_step"] > reference["tp_gathers_per_step"]


@pytest.mark.slow
def test_capped_units_send_the_bytes_the_analytic_model_prices(runs):
    layout, bucket_elems, results = runs
    for result in results:
        for (cap, _overlap), run in result.items():
            priced = optimizer_bytes(
                run["specs"],
                dp=2,
                tp=2,
                dp_rank=run["dp_rank"],
                optimizer="muon",
                layout=layout,
                bucket_elems=bucket_elems,
                ns_unit_elems=cap,
            )
            for phase in ("dp_gather", "tp_gather"):
                assert run["bytes_per_step"].get(phase, 0) == priced[phase], (cap, phase)


def test_a_unit_holds_up_to_the_cap_inclusive():
    """Three [16, 16] matrices (256 elements each) under a cap of 512: the first two fill a unit exactly, the third
    starts the next ("at most ns_unit_elems elements")."""
    specs = [ParamSpec(f"w{i}", (16, 16), None, 1, True) for i in range(3)]
    plan = ShardPlan(specs, 2, "bucketed", None, 512)
    assert [unit.slots for unit in plan.ns_units] == [(2, 1), (0,)]  # buffer order: the last parameter first
