"""Muon's step batched by shape (issue 43): the same bits as one matrix at a time, and operator calls that grow
with the distinct shapes, not the matrices."""

from __future__ import annotations

import pytest
import torch

from muon_repro.model_config import GPTConfig
from muon_repro.optim.newton_schulz import orthogonalize_many, zeropower_via_newtonschulz5
from muon_repro.optim.op_calls import optimizer_op_calls

# Operator calls of one single-device Muon step on the 369M preset ("large") with the per-matrix step this replaced
# (commit 3b689d6, counted by optimizer_op_calls): the target is at least 8x fewer.
PER_MATRIX_MUON_CALLS_369M = 3578


def _matrices(dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(48, 16), (16, 48), (32, 32), (48, 16), (2, 3, 8, 12), (12, 8), (64, 48)]
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_batch_orthogonalizes_each_matrix_exactly_as_alone(dtype):
    matrices = _matrices(dtype)
    updates, rms = orthogonalize_many(matrices, 5, dtype, scales=[2.0] * len(matrices), batched=True)
    for m, u, r in zip(matrices, updates, rms):
        assert u.shape == m.shape and u.dtype == m.dtype
        alone = zeropower_via_newtonschulz5(m, 5, dtype)
        assert torch.equal(u, alone)  # bit for bit: tall, wide, square and batched ones
        assert r.item() == pytest.approx(2.0 * alone.float().square().mean().sqrt().item(), rel=1e-5)
    # the same matrix in another batch (other batch-mates, other position): the same bits
    again, _ = orthogonalize_many([matrices[3], matrices[1]], 5, dtype, batched=True)
    assert torch.equal(again[0], updates[3]) and torch.equal(again[1], updates[1])


def test_a_groups_scale_multiplies_its_rms_without_a_copy_to_the_device(monkeypatch):
    """One scale per shape group is a number: torch.tensor(..., device=cuda) was a blocking copy, a CUDA stream
    synchronized inside Muon's step for a statistic. Scales that differ within a group still scale each matrix."""
    from muon_repro.optim import newton_schulz

    matrices = _matrices(torch.float32)[:4]  # (48, 16) and (16, 48) twice, and (32, 32): two shape groups
    unscaled = [u.square().mean().sqrt().item() for u in orthogonalize_many(matrices, 5, batched=True)[0]]
    built = []
    real_tensor = torch.tensor
    monkeypatch.setattr(newton_schulz.torch, "tensor", lambda *a, **k: built.append(k) or real_tensor(*a, **k))
    _, rms = orthogonalize_many(matrices, 5, scales=[2.0] * 4, batched=True)
    assert built == [] and [r.item() for r in rms] == pytest.approx([2.0 * u for u in unscaled], rel=1e-6)
    _, rms = orthogonalize_many(matrices, 5, scales=[1.0, 3.0, 1.0, 5.0], batched=True)
    assert "device" not in built[0] and [r.item() for r in rms] == pytest.approx(
        [s * u for s, u in zip([1.0, 3.0, 1.0, 5.0], unscaled)], rel=1e-6
    )


def test_rounding_the_input_is_the_gathers_rounding():
    matrices = _matrices(torch.float32)[:4]
    for batched in (True, False):
        rounded, _ = orthogonalize_many(matrices, 5, torch.float32, round_to=torch.bfloat16, batched=batched)
        for m, u in zip(matrices, rounded):
            assert torch.equal(u, zeropower_via_newtonschulz5(m.bfloat16().float(), 5, torch.float32))


def test_a_steps_operator_calls_grow_with_shapes_not_layers():
    two, four = (GPTConfig.preset("tiny", n_layers=n) for n in (2, 4))
    for optimizer in ("muon", "adamw"):
        assert optimizer_op_calls(two, optimizer).calls == optimizer_op_calls(four, optimizer).calls
    # hidden 32: fused QKV is 96 x 32, the projection 32 x 32, fc1 and fc2 128 x 32 and 32 x 128: three shapes up to
    # transposition; with an FFN of 96, fc1 and fc2 share QKV's: two shapes, one batched chain fewer
    shared = GPTConfig.preset("tiny", n_layers=4, ffn_hidden=96)
    assert optimizer_op_calls(shared, "muon").calls < optimizer_op_calls(four, "muon").calls


@pytest.mark.slow  # steps the 369M preset's optimizer twice (~4 s)
def test_muons_step_on_the_369m_preset_calls_at_least_8x_fewer_operators():
    counted = optimizer_op_calls(GPTConfig.preset("large"), "muon")
    print(f"369M single-device Muon step: {counted.calls} operator calls, {PER_MATRIX_MUON_CALLS_369M} per matrix before")
    assert counted.calls * 8 <= PER_MATRIX_MUON_CALLS_369M
    assert counted.by_op.get("aten.baddbmm.default", 0) == 10 * 3  # two per iteration, five iterations, three shapes


def _trained(monkeypatch, batched_on_cpu: bool, distributed: bool) -> dict[str, torch.Tensor]:
    from muon_repro.model import GPT
    from muon_repro.optim import DistributedMuon, Muon, muon_param_groups, newton_schulz
    from muon_repro.parallel.comm import CommLedger, Group
    from muon_repro.parallel.mesh import ParallelDims

    monkeypatch.setattr(newton_schulz, "BATCHED_DEVICES", ("cpu",) if batched_on_cpu else ())
    model = GPT(
        GPTConfig.preset("tiny", n_layers=3), Group(name="tp", ranks=(0,), rank=0, process_group=None, ledger=CommLedger())
    )
    groups = muon_param_groups(model)
    opt = DistributedMuon(groups, ParallelDims(1, 1), gather_dtype=torch.float32) if distributed else Muon(groups)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g) * 1e-2
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_the_batched_step_trains_the_same_bits_as_one_matrix_at_a_time(monkeypatch):
    reference = _trained(monkeypatch, batched_on_cpu=False, distributed=False)
    for batched, distributed in ((True, False), (True, True), (False, True)):
        trained = _trained(monkeypatch, batched, distributed)
        assert all(torch.equal(trained[n], reference[n]) for n in reference), (batched, distributed)
