"""DistributedMuon / DistributedAdamW against the single-device reference, on gloo.

One launch per world size runs every configuration of that size (launching is the slow part).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from muon_repro.optim.equivalence import (
    END_TO_END_RTOL,
    ISOLATED_RTOL_BF16,
    EquivalenceConfig,
    run_equivalence_suite,
)
from muon_repro.optim.layout import LAYOUTS, ParamSpec, ShardPlan
from muon_repro.optim.newton_schulz import zeropower_via_newtonschulz5
from muon_repro.parallel.launch import launch

GRIDS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4)]
FP32_CASES = [EquivalenceConfig(dp=dp, tp=tp, optimizer=o, layout=lay) for (dp, tp), lay, o in itertools.product(GRIDS, LAYOUTS, ("muon", "adamw"))]
BF16_CASES = [
    EquivalenceConfig(dp=2, tp=2, layout=lay, ns_dtype=ns, gather_dtype="bf16")
    for lay, ns in itertools.product(LAYOUTS, ("bf16", "fp32"))
]


@pytest.fixture(scope="module")
def reports() -> dict[EquivalenceConfig, dict]:
    cases = FP32_CASES + BF16_CASES
    return dict(zip(cases, run_equivalence_suite(cases)))


def case_id(cfg: EquivalenceConfig) -> str:
    return f"{cfg.optimizer}-dp{cfg.dp}-tp{cfg.tp}-{cfg.layout}-ns{cfg.ns_dtype}-g{cfg.effective_gather_dtype}"


@pytest.mark.slow
@pytest.mark.parametrize("cfg", FP32_CASES, ids=case_id)
def test_fp32_equivalence_and_ledger(reports, cfg):
    report = reports[cfg]
    assert len(report["steps"]) == cfg.steps >= 5
    for step in report["steps"]:
        # Same arithmetic on the same inputs: bit-identical to the single-device reference.
        assert step["isolated"]["max_abs"] == 0.0, step
        assert step["end_to_end"]["max_rel"] < END_TO_END_RTOL, step
    for rank in report["ranks"]:
        assert rank["ledger_bytes"] == rank["analytic_bytes"], rank


@pytest.mark.slow
@pytest.mark.parametrize("cfg", BF16_CASES, ids=case_id)
def test_bf16_gather_equivalence(reports, cfg):
    for step in reports[cfg]["steps"]:
        if cfg.ns_dtype == "bf16":
            # NS rounds its input to bf16 anyway: a bf16 gather changes nothing.
            assert step["isolated"]["max_abs"] == 0.0, step
        else:
            assert 0.0 < step["isolated"]["max_rel"] < ISOLATED_RTOL_BF16, step
    for rank in reports[cfg]["ranks"]:
        assert rank["ledger_bytes"] == rank["analytic_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("grid", GRIDS[1:], ids=lambda g: f"dp{g[0]}-tp{g[1]}")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_muon_state_is_half_of_adamw_for_muon_matrices(reports, grid, layout):
    dp, tp = grid
    muon = reports[EquivalenceConfig(dp=dp, tp=tp, optimizer="muon", layout=layout)]["ranks"]
    adamw = reports[EquivalenceConfig(dp=dp, tp=tp, optimizer="adamw", layout=layout)]["ranks"]
    muon_bytes = [r["muon_managed_state_bytes"] for r in muon]
    adamw_bytes = [r["muon_managed_state_bytes"] for r in adamw]
    assert 2 * sum(muon_bytes) == sum(adamw_bytes) > 0  # one fp32 moment instead of two
    if layout != "whole_matrix":  # same shard boundaries for both optimizers: rank by rank too
        assert all(2 * m == a for m, a in zip(muon_bytes, adamw_bytes))


def _ns_calls(report: dict, tp_rank: int = 0) -> list[int]:
    return [r["ns_calls"] for r in report["ranks"] if r["tp_rank"] == tp_rank]


@pytest.mark.slow
@pytest.mark.parametrize("grid", [(2, 1), (4, 1), (2, 2)], ids=lambda g: f"dp{g[0]}-tp{g[1]}")
def test_layouts_gather_and_orthogonalize_as_documented(reports, grid):
    dp, tp = grid
    contiguous = reports[EquivalenceConfig(dp=dp, tp=tp, layout="contiguous")]
    bucketed = reports[EquivalenceConfig(dp=dp, tp=tp, layout="bucketed")]
    whole = reports[EquivalenceConfig(dp=dp, tp=tp, layout="whole_matrix")]
    n = contiguous["plan"]["muon_matrices"]
    for tp_rank in range(tp):
        # contiguous: only straddling matrices are gathered; each matrix is orthogonalized once
        # per TP rank, plus once more for each extra DP rank holding a piece of a straddler.
        plan = contiguous["plan"]
        assert plan["dp_gathered_matrices"] == plan["straddling_matrices"] < n
        assert sum(_ns_calls(contiguous, tp_rank)) == n + plan["extra_holders"]
        # bucketed: every matrix gathered and orthogonalized on every DP rank.
        assert bucketed["plan"]["dp_gathered_matrices"] == n
        assert _ns_calls(bucketed, tp_rank) == [n] * dp
        # whole_matrix: no DP gather, each matrix orthogonalized by its owner only.
        assert whole["plan"]["dp_gathered_matrices"] == 0
        assert sum(_ns_calls(whole, tp_rank)) == n
    assert all(r["ledger_bytes"]["dp_gather"] == 0 for r in whole["ranks"])
    assert all(r["ledger_bytes"]["dp_gather"] > 0 for r in bucketed["ranks"])
    straddling = contiguous["plan"]["straddling_matrices"] > 0
    assert all((r["ledger_bytes"]["dp_gather"] > 0) == straddling for r in contiguous["ranks"])
    # whole_matrix pays in padding instead (its owners' segments are equal-sized), not in gathers.
    assert bucketed["bytes"]["ratio_dp"] > contiguous["bytes"]["ratio_dp"] >= 1.0 and whole["bytes"]["ratio_dp"] >= 1.0


def test_tp_gather_uses_the_real_partition_dim():
    """The PoC's inverted tp_split_dim ran NS per TP block; that gives a different update.

    The fp32 equivalence above is bit-exact at tp=2 and tp=4 for the row-parallel (dim 1) and
    column-parallel (dim 0) matrices alike, so per-block NS, or a concatenation along the wrong
    dim, could not pass it: here is how far apart those are.
    """
    G = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    full = zeropower_via_newtonschulz5(G, dtype=torch.float32)
    for dim in (0, 1):
        per_block = torch.cat([zeropower_via_newtonschulz5(b, dtype=torch.float32) for b in G.chunk(2, dim=dim)], dim=dim)
        assert (per_block - full).abs().max() > 0.1
    plan = ShardPlan([ParamSpec("proj", (32, 16), 1, 2, True), ParamSpec("fc1", (64, 32), 0, 2, True)], dp=1)
    assert [s.spec.full_shape for s in plan.slots] == [(32, 32), (128, 32)]


@pytest.mark.slow
def test_checkpoint_round_trip_continues_bit_identically(tmp_path):
    import optim_workers

    expected = launch(optim_workers.uninterrupted_then_save, 4, str(tmp_path))
    resumed = launch(optim_workers.resume, 4, str(tmp_path))
    for rank, (want_steps, got_steps) in enumerate(zip(expected, resumed)):
        assert len(got_steps) == 3
        for want, got in zip(want_steps, got_steps):
            for name in want:
                assert torch.equal(want[name], got[name]), (rank, name)
    errors = launch(optim_workers.load_mismatched, 4, str(tmp_path))
    assert all("does not match" in e or "parameter" in e for e in errors), errors


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"layout": "ring"}, "unknown ZeRO-1 layout 'ring'"),
        ({"layout": "bucketed", "bucket_elems": 0}, "bucket_elems must be a positive integer, got 0"),
        ({"layout": "contiguous", "bucket_elems": 10}, "bucket_elems applies to the 'bucketed' layout only"),
    ],
)
def test_bad_layout_arguments(kwargs, message):
    from muon_repro.model import GPT, GPTConfig
    from muon_repro.optim import muon_param_groups
    from muon_repro.optim.distributed import DistributedMuon
    from muon_repro.parallel import Group, ParallelDims

    model = GPT(GPTConfig.preset("tiny"), Group.single("tp"))
    with pytest.raises(ValueError, match=message):
        DistributedMuon(muon_param_groups(model), ParallelDims(1, 1), **kwargs)


def test_reassigned_parameter_is_rejected():
    from muon_repro.model import GPT, GPTConfig
    from muon_repro.optim import muon_param_groups
    from muon_repro.optim.distributed import DistributedAdamW
    from muon_repro.parallel import Group, ParallelDims

    model = GPT(GPTConfig.preset("tiny"), Group.single("tp"))
    opt = DistributedAdamW(muon_param_groups(model), ParallelDims(1, 1))
    model.lm_head.weight.data = torch.zeros_like(model.lm_head.weight)
    with pytest.raises(ValueError, match="'lm_head.weight'.*no longer lives in the optimizer's flat buffer"):
        opt.step()
