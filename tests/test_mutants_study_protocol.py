"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of the replay of the
original study's protocol (muon_repro.bench.study_protocol: the run names on a grid, the config's validation, its
recorded differences and CPU scaling, the ZeRO layout, the DP x TP rank placement and process groups, the study's
Newton-Schulz guard, the optimizer scope's name, the collectives' labels, and what each optimizer does to its gradients
and parameters in one step) and of the reading of its traces per step and scope (muon_repro.study.scopes: the outer
and inner scopes, the step a launch belongs to, the completion-to-completion step time, a scope's CPU time, kernels and
start, and the DP and TP groups of the study's grid).

The optimizers run without a process group: ``torch.distributed`` is stood in for by identical ranks (every rank holds
the same tensors, so a gather repeats this rank's piece and a sum multiplies by the group's size). Every expected value
is derived by hand from the documented definitions (the modules' docstrings and those of
muon_repro.optim.update_rules, docs/recording.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist
from test_phase_scopes import _x

from muon_repro.analysis.errors import TraceError
from muon_repro.bench import study_protocol as sp
from muon_repro.bench.study_protocol import (
    ADAMW_BETAS,
    ADAMW_EPS,
    ADAMW_LR,
    ADAMW_WD,
    EQUAL_WORK_DIFFERENCES,
    GROUP_LABELS,
    MUON_LR,
    MUON_MOMENTUM,
    MUON_WD,
    ONE_RANK_DIFFERENCES,
    Grid,
    ProtocolConfig,
    ProtocolRun,
    ReplicaAdamW,
    ShardedAdamW,
    StudyMuon,
    optimizer_step_scope,
    study_newton_schulz,
    tp_local,
)
from muon_repro.study.scopes import GROUP_PREFIXES, STEP, dp_group, read_study_trace, tp_group

REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- names, config, scaling


def test_a_muon_runs_name_carries_dp_then_tp():
    # "muon_dp2_tp2" is the study's grid; on another grid the DP degree comes first, then the TP degree
    assert ProtocolRun("muon", False).name_at(4, 1) == "muon_dp4_tp1"
    assert ProtocolRun("muon", True, True).name_at(1, 4) == "muon_FULLSTEP_dp1_tp4_async"


def test_a_shape_must_split_tp_ways_along_its_tp_dim_whatever_dp_is():
    ProtocolConfig("study", "cpu", ((6, 3),), (1,), dp=2, tp=3)  # 3 splits 3 ways (not 2: DP does not split it)
    ProtocolConfig("study", "cpu", ((5, 4),), (1,), dp=3, tp=2)  # 4 splits 2 ways
    with pytest.raises(ValueError, match=r"does not split 3 ways along dimension 0"):
        ProtocolConfig("study", "cpu", ((4, 6),), (0,), dp=2, tp=3)
    ProtocolConfig("study", "cpu", ((5, 7),), (-1,), dp=2, tp=2)  # -1: not split, any size


def test_a_config_needs_a_tp_dim_per_shape_one_step_and_no_negative_warmup():
    with pytest.raises(ValueError, match="2 shapes but 1 tp_dims"):
        ProtocolConfig("study", "cpu", ((4, 4), (4, 4)), (0,))
    with pytest.raises(ValueError, match="steps 0"):
        ProtocolConfig("study", "cpu", ((4, 4),), (0,), steps=0)
    with pytest.raises(ValueError, match="warmup -1"):
        ProtocolConfig("study", "cpu", ((4, 4),), (0,), warmup=-1)
    assert ProtocolConfig("study", "cpu", ((4, 4),), (0,), steps=1, warmup=0).warmup == 0  # no warm-up is allowed


def test_the_config_records_what_differs_from_the_study_and_only_that():
    assert ProtocolConfig.for_device("study", "cuda").differences == ()  # the study as it ran: nothing differs
    assert ProtocolConfig.for_device("study", "cpu").differences == ()
    assert ProtocolConfig.for_device("study-equal-work", "cuda").differences == EQUAL_WORK_DIFFERENCES
    assert ProtocolConfig.for_device("study", "cuda", 1).differences == ONE_RANK_DIFFERENCES
    assert ProtocolConfig.for_device("study", "cpu", 1).differences == ONE_RANK_DIFFERENCES


def test_the_cpu_config_states_each_scaled_size_beside_the_studys():
    cpu = ProtocolConfig.for_device("study", "cpu")
    # ceil(size / 8), then the TP dimension up to even: 324/8 = 40.5 -> 41 -> 42 (dim 1); 876/8 = 109.5 -> 110 (dim 1);
    # 456/8 = 57 stays odd (tp_dim -1, not split)
    assert cpu.shapes == ((512, 512), (128, 42), (57, 128), (85, 110), (16, 16))
    assert "parameters 512x512, 128x42, 57x128, 85x110, 16x16 for the study's 4096x4096, 1024x324," in cpu.scaled
    assert cpu.scaled.endswith("FWD_BWD 256x256 for 2048x2048")


# ---------------------------------------------------------------- layout and grid


def test_a_rank_of_a_grid_has_dp_rank_rank_div_tp_and_tp_rank_rank_mod_tp():
    grid = Grid(rank=5, world=6, dp=2, tp=3, dp_group=None, tp_group=None)  # TP inner: rank = dp_rank * tp + tp_rank
    assert (grid.dp_rank, grid.tp_rank) == (1, 2)
    grid = Grid(rank=2, world=6, dp=3, tp=2, dp_group=None, tp_group=None)
    assert (grid.dp_rank, grid.tp_rank) == (1, 0)


def test_a_ranks_tp_shard_is_the_chunk_of_its_tp_rank():
    full = torch.arange(24.0).view(4, 6)
    grid = Grid(rank=1, world=4, dp=2, tp=2, dp_group=None, tp_group=None)  # dp_rank 0, tp_rank 1
    assert torch.equal(tp_local(full, 1, grid), full[:, 3:])
    assert torch.equal(tp_local(full, 0, grid), full[2:])
    assert tp_local(full, -1, grid) is full


# ---------------------------------------------------------------- torch.distributed stood in for


class _Work:
    def wait(self) -> None:
        pass


class _IdenticalRanks:
    """``torch.distributed`` seen from ``rank`` of ``world`` identical ranks: a group is the tuple of its ranks; a
    gather repeats the piece every member holds (this rank's), a sum multiplies by the group's size."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.groups: list[tuple[int, ...]] = []
        self.calls: list[tuple[str, int]] = []  # (collective, group size)

    def get_rank(self, group=None) -> int:
        return self.rank

    def get_world_size(self, group=None) -> int:
        return self.world if group is None else len(group)

    def new_group(self, ranks):
        self.groups.append(tuple(ranks))
        return tuple(ranks)

    def all_gather_into_tensor(self, out, inp, group=None, async_op=False):
        n = self.get_world_size(group)
        self.calls.append(("all_gather", n))
        out.copy_(inp.repeat(n))
        return _Work() if async_op else None

    def reduce_scatter_tensor(self, out, inp, group=None, async_op=False):
        n = self.get_world_size(group)
        self.calls.append(("reduce_scatter", n))
        at = (group or tuple(range(self.world))).index(self.rank)
        out.copy_(n * inp[at * out.numel() : (at + 1) * out.numel()])
        return _Work() if async_op else None

    def all_reduce(self, t, op=None, group=None, async_op=False):
        self.calls.append(("all_reduce", self.get_world_size(group)))
        t.mul_(self.get_world_size(group))
        return _Work() if async_op else None


@pytest.fixture
def ranks(monkeypatch):
    def of(rank: int, world: int) -> _IdenticalRanks:
        fake = _IdenticalRanks(rank, world)
        for name in ("get_rank", "get_world_size", "new_group", "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"):
            monkeypatch.setattr(dist, name, getattr(fake, name))
        return fake

    return of


def test_a_grid_makes_strided_dp_groups_and_adjacent_tp_groups(ranks):
    fake = ranks(3, 6)
    grid = Grid.build(dp=3, tp=2)  # TP inner: ranks 0-5 are (dp_rank, tp_rank) = (r // 2, r % 2)
    assert fake.groups == [(0, 2, 4), (1, 3, 5), (0, 1), (2, 3), (4, 5)]  # every group, by every rank, in one order
    assert grid.dp_group == (1, 3, 5) and grid.tp_group == (2, 3)
    assert (grid.dp_rank, grid.tp_rank) == (1, 1)
    ranks(4, 6)
    grid = Grid.build(dp=3, tp=2)  # rank 4: tp_rank 0, dp_rank 2
    assert grid.dp_group == (0, 2, 4) and grid.tp_group == (4, 5)
    ranks(0, 6)
    assert Grid.build(dp=2, tp=3).dp_group == (0, 3) and Grid.build(dp=2, tp=3).tp_group == (0, 1, 2)
    with pytest.raises(ValueError, match="DP=2 x TP=2 needs 4 ranks, the world has 6"):
        Grid.build(dp=2, tp=2)


def test_the_replica_adamw_averages_the_all_reduced_gradients(ranks):
    fake = ranks(0, 4)
    g = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    opt = ReplicaAdamW([torch.zeros(3, 4)], async_op=False)
    opt.attach(opt.prepare([g.clone()]))
    opt.reduce()  # 4 ranks sum the same gradient: the mean is that gradient
    assert fake.calls == [("all_reduce", 4)]
    assert torch.allclose(opt.params[0].grad, g)


def test_the_sharded_adamw_averages_over_dp_and_steps_as_torchs_adamw(ranks):
    ranks(1, 2)
    cfg = ProtocolConfig("study-equal-work", "cpu", ((4, 3), (2, 5)), (-1, -1), dp=2, tp=1)
    grid = Grid(1, 2, 2, 1, dp_group=(0, 1), tp_group=(1,))
    gen = torch.Generator().manual_seed(2)
    params = [100 + torch.rand(4, 3, generator=gen), 100 + torch.rand(2, 5, generator=gen)]
    grads = [torch.randn(4, 3, generator=gen), torch.randn(2, 5, generator=gen)]
    opt = ShardedAdamW(params, cfg, grid, async_op=False)
    before = opt.param_shard.clone()
    opt.attach(opt.prepare(grads))
    opt.reduce()
    # 22 elements, 2 chunks of 11: rank 1 owns elements 11..21 (the last of matrix 0, then matrix 1), the mean of 2 sums
    flat_g = torch.cat([grads[0].reshape(-1), grads[1].reshape(-1)])
    assert torch.allclose(opt.grad_shard, flat_g[11:22])
    opt.step()
    # step 1 of torch's AdamW: p (1 - lr wd) - lr m^ / (sqrt(v^) + eps), with m^ = g and v^ = g^2
    g = flat_g[11:22]
    expected = before * (1 - ADAMW_LR * ADAMW_WD) - ADAMW_LR * g / (g.abs() + ADAMW_EPS)
    assert torch.allclose(opt.param_shard, expected, rtol=0, atol=1e-5)
    assert ADAMW_BETAS == (0.9, 0.999)
    assert torch.equal(opt.param_full[11:22], opt.param_shard)  # the gather puts the updated shard in its place


def _muon_expected(w: torch.Tensor, ns_input: torch.Tensor, full_shape: tuple[int, int]) -> torch.Tensor:
    """Muon's update (docstrings of StudyMuon and update_rules): p (1 - lr wd) - lr 0.2 sqrt(max(A, B)) NS(bf16 input)."""
    scale = 0.2 * math.sqrt(max(full_shape))
    return w * (1 - MUON_LR * MUON_WD) - MUON_LR * scale * study_newton_schulz(ns_input.bfloat16()).float()


def test_the_study_muon_on_one_rank_is_nesterov_momentum_newton_schulz_and_decoupled_decay(ranks):
    ranks(0, 1)
    cfg = ProtocolConfig("study", "cpu", ((6, 4), (3, 5)), (0, -1), dp=1, tp=1)
    grid = Grid(0, 1, 1, 1, dp_group=(0,), tp_group=(0,))
    gen = torch.Generator().manual_seed(3)
    w = [torch.randn(6, 4, generator=gen), torch.randn(3, 5, generator=gen)]
    steps = [[torch.randn(6, 4, generator=gen), torch.randn(3, 5, generator=gen)] for _ in range(2)]
    opt = StudyMuon(w, cfg, grid, async_op=False)
    for grads in steps:
        opt.attach(opt.prepare(grads))
        opt.step()
    mu = MUON_MOMENTUM
    for i in range(2):
        g1, g2 = steps[0][i], steps[1][i]
        buf1 = g1  # buf = mu buf + g, from 0
        w1 = _muon_expected(w[i], g1 + mu * buf1, tuple(w[i].shape))  # Nesterov input g + mu buf
        buf2 = mu * buf1 + g2
        w2 = _muon_expected(w1, g2 + mu * buf2, tuple(w[i].shape))
        assert torch.allclose(opt.layout.matrix(opt.param_shard, i), w2, atol=1e-4), i


def test_the_study_muon_scales_a_tp_shards_update_by_the_full_matrixs_shape(ranks):
    fake = ranks(0, 2)
    cfg = ProtocolConfig("study", "cpu", ((8, 4),), (0,), dp=1, tp=2)
    grid = Grid(0, 2, 1, 2, dp_group=(0,), tp_group=(0, 1))
    gen = torch.Generator().manual_seed(4)
    top, g_top = torch.randn(4, 4, generator=gen), torch.randn(4, 4, generator=gen)
    opt = StudyMuon([torch.cat([top, top])], cfg, grid, async_op=False)  # both TP ranks hold the same half
    opt.attach(opt.prepare([torch.cat([g_top, g_top])]))
    opt.step()
    assert fake.calls == [("all_gather", 2)]  # one TP gather (a DP group of one rank gathers nothing)
    ns_input = g_top * (1 + MUON_MOMENTUM)
    update = study_newton_schulz(torch.cat([ns_input, ns_input]).bfloat16()).float()[:4]  # NS on the full 8x4, rank 0's half
    expected = top * (1 - MUON_LR * MUON_WD) - MUON_LR * 0.2 * math.sqrt(8) * update  # max(8, 4), not the shard's 4
    assert torch.allclose(opt.layout.matrix(opt.param_shard, 0), expected, atol=1e-4)


def test_the_study_muon_gathers_over_tp_only_the_matrices_its_zero_chunk_holds(ranks):
    fake = ranks(0, 4)
    # TP-local 4x2 (8 elements) and 2x4 (8): two chunks of 8, rank 0 (dp_rank 0) holds the first matrix alone
    cfg = ProtocolConfig("study", "cpu", ((4, 4), (4, 4)), (1, 0), dp=2, tp=2)
    grid = Grid(0, 4, 2, 2, dp_group=(0, 2), tp_group=(0, 1))
    opt = StudyMuon([torch.ones(4, 4), torch.ones(4, 4)], cfg, grid, async_op=False)
    assert opt.mine == [0]
    opt.attach(opt.prepare([torch.ones(4, 4), torch.ones(4, 4)]))
    opt.step()
    assert fake.calls == [("all_gather", 2), ("all_gather", 2)]  # the DP gather, then one TP gather


# ---------------------------------------------------------------- the study's Newton-Schulz and scopes


def test_the_studys_newton_schulz_of_a_zero_matrix_is_zero_not_nan():
    out = study_newton_schulz(torch.zeros(4, 3))  # the norm guard: 0 / (0 + eps)
    assert torch.equal(out, torch.zeros(4, 3))


def test_the_optimizer_scope_is_the_one_torch_opens_around_an_optimizers_step():
    assert optimizer_step_scope("Muon").name == "Optimizer.step#Muon.step"
    assert optimizer_step_scope("AdamW").name == "Optimizer.step#AdamW.step"


def test_each_collectives_label_names_the_group_the_trace_reader_takes_from_it():
    for group, label in GROUP_LABELS.items():
        assert [g for prefix, g in GROUP_PREFIXES.items() if label.startswith(prefix)] == [group]
    assert sp.GROUP_LABELS is GROUP_LABELS


# ---------------------------------------------------------------- reading a trace of the protocol


def _study_trace(tmp_path: Path, events: list[dict], outer: tuple[str, float, float] = ("Muon_Battle", 0, 1000)) -> Path:
    path = tmp_path / "rank0.json"
    doc = {"schemaVersion": 1, "traceEvents": [_x(outer[0], "user_annotation", outer[1], outer[2]), *events]}
    path.write_text(json.dumps(doc))
    return path


def _kernel(corr: int, launch: float, start: float, dur: float) -> list[dict]:
    gpu = {"pid": 0, "tid": 7}
    return [
        _x("cudaLaunchKernel", "cuda_runtime", launch, 3, correlation=corr),
        _x(f"gemm_{corr}", "kernel", start, dur, correlation=corr, **gpu),
    ]


def _two_steps() -> list[dict]:
    """Two steps of Muon_Step then Muon_Attach_Grads (100-200, 200-250 us; 400-500, 500-550 us)."""
    return [
        _x("Muon_Step", "user_annotation", 100, 100),
        _x("Muon_Attach_Grads", "user_annotation", 200, 50),
        _x("Muon_Step", "user_annotation", 400, 100),
        _x("Muon_Attach_Grads", "user_annotation", 500, 50),
    ]


def test_a_trace_with_two_outer_scopes_is_refused(tmp_path):
    path = _study_trace(tmp_path, [_x("AdamW_Battle", "user_annotation", 2000, 100), *_two_steps()])
    with pytest.raises(TraceError, match="found 2"):
        read_study_trace(path)


def test_the_outer_scope_names_the_variant_and_the_optimizer(tmp_path):
    inner = [_x("AdamW_Step", "user_annotation", 100, 100), _x("AdamW_Step", "user_annotation", 400, 100)]
    full = read_study_trace(_study_trace(tmp_path, inner, ("AdamW_Full_Training_Step", 0, 1000)))
    assert (full.variant, full.optimizer, full.outer_scope) == ("full_step", "adamw", "AdamW_Full_Training_Step")
    only = read_study_trace(_study_trace(tmp_path, _two_steps()))
    assert (only.variant, only.optimizer) == ("optimizer_only", "muon")


def test_a_gloo_collective_belongs_to_its_step_its_labels_group_and_is_no_kernel(tmp_path, monkeypatch):
    """On gloo (no GPU work) the collectives are the analysis's instances; one issued before the first step is no
    step's, one under no group label ran over the whole world, and a transfer is no kernel of its scope."""
    from muon_repro.study import scopes

    instances = pd.DataFrame(
        {
            "source": "gloo",
            "phase": ["dp_collective", "tp_collective", "", "dp_collective"],
            "op": "all_gather",
            "dtype": "float32",
            "elements": 8,
            "size_bytes": 32,
            "issue_ts": [50.0, 120.0, 130.0, 410.0],  # before step 0, in step 0's Muon_Step twice, in step 1's
            "start": [51.0, 121.0, 131.0, 411.0],
            "end": [60.0, 125.0, 140.0, 420.0],
        }
    )
    monkeypatch.setattr(scopes, "collective_instances", lambda trace: instances)
    path = _study_trace(tmp_path, _two_steps())
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc | {"distributedInfo": {"rank": 1, "world_size": 4}}))
    trace = read_study_trace(path, (2, 2))
    assert list(trace.collectives["step"]) == [0, 0, 1]
    assert list(trace.collectives["group_ranks"]) == ["0,1", "0,1,2,3", "1,3"]  # TP pair, the world, DP pair of rank 1
    scopes_ = trace.scopes.set_index(["step", "scope"])
    assert scopes_.loc[(0, "Muon_Step"), "kernels"] == 0 and scopes_.loc[(0, STEP), "kernels"] == 0
    assert scopes_.loc[(0, "Muon_Step"), "comm_ms"] == pytest.approx((4 + 9) / 1000)  # 121-125 and 131-140 us


def test_a_scope_ending_after_the_outer_scope_is_no_scope_of_the_loop(tmp_path):
    path = _study_trace(tmp_path, [*_two_steps(), _x("Muon_Step", "user_annotation", 900, 200)])  # ends at 1100 > 1000
    scopes = read_study_trace(path).scopes
    assert list(scopes.loc[scopes["scope"] == STEP, "step"]) == [0, 1]


def test_a_launch_at_a_steps_start_is_that_steps_and_at_the_outer_end_the_last_steps(tmp_path):
    events = [*_two_steps(), *_kernel(1, 400, 410, 20), *_kernel(2, 1000, 1010, 30)]
    scopes = read_study_trace(_study_trace(tmp_path, events)).scopes.set_index(["step", "scope"])
    assert scopes.loc[(0, STEP), "kernels"] == 0
    assert scopes.loc[(1, STEP), "kernels"] == 2
    assert scopes.loc[(1, STEP), "gpu_kernel_ms"] == pytest.approx(0.050)
    assert scopes.loc[(1, "Muon_Step"), "kernels"] == 1  # launched at its start: inside [400, 500]


def test_a_step_runs_from_the_previous_steps_completion_to_its_own(tmp_path):
    # step 0 (window 100-400): no GPU work, its scopes return at 200 and 250: complete at 250
    # step 1 (window 400-1000): its scopes return at 550, its kernel (launched at 450) ends at 900: complete at 900
    events = [*_two_steps(), *_kernel(1, 450, 600, 300)]
    scopes = read_study_trace(_study_trace(tmp_path, events)).scopes
    step = scopes[scopes["scope"] == STEP].set_index("step")["step_ms"]
    assert step[0] == pytest.approx((250 - 100) / 1000)  # the first from its own start to its last scope's return
    assert step[1] == pytest.approx((900 - 250) / 1000)  # from the previous completion to the end of its GPU work


def test_a_scope_entered_twice_in_a_step_is_timed_by_its_two_spans_not_their_window(tmp_path):
    events = [
        _x("Muon_Step", "user_annotation", 100, 100),
        _x("AdamW_AllReduce", "user_annotation", 210, 10),
        _x("Muon_Attach_Grads", "user_annotation", 230, 20),
        _x("AdamW_AllReduce", "user_annotation", 260, 30),
        _x("Muon_Step", "user_annotation", 400, 100),
    ]
    scopes = read_study_trace(_study_trace(tmp_path, events)).scopes
    step0 = scopes[scopes["step"] == 0]
    assert list(step0["scope"]) == [STEP, "Muon_Step", "AdamW_AllReduce", "Muon_Attach_Grads"]  # first-entry order
    row = step0.set_index("scope").loc["AdamW_AllReduce"]
    assert row["cpu_ms"] == pytest.approx(0.040)  # 10 + 30 us, not the 80 us from 210 to 290
    assert row["busy_ms"] == pytest.approx(0.040)  # no GPU work: the device's time is the CPU's


def test_a_launch_at_either_end_of_a_scope_is_the_scopes(tmp_path):
    events = [*_two_steps(), *_kernel(1, 200, 300, 10), *_kernel(2, 100, 320, 10)]  # at Muon_Step's end and start
    scopes = read_study_trace(_study_trace(tmp_path, events)).scopes.set_index(["step", "scope"])
    assert scopes.loc[(0, "Muon_Step"), "kernels"] == 2


def test_a_scope_starts_at_its_own_fractional_microsecond(tmp_path):
    events = [
        _x("Muon_Step", "user_annotation", 100.25, 100),
        _x("Muon_Attach_Grads", "user_annotation", 200.75, 40),
    ]
    path = _study_trace(tmp_path, events)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc | {"baseTimeNanoseconds": 5_000_000}))
    scopes = read_study_trace(path).scopes.set_index("scope")
    assert scopes.loc["Muon_Step", "start_ns"] == 5_000_000 + 100_250
    assert scopes.loc["Muon_Attach_Grads", "start_ns"] == 5_000_000 + 200_750


def test_a_collective_issued_where_a_scope_starts_is_that_scopes():
    from muon_repro.study.scopes import _innermost

    inner = pd.DataFrame({"ts": [0.0, 50.0], "end": [100.0, 80.0], "name": ["FWD_BWD", "Attach_Grads"]})
    assert _innermost(inner, np.array([0.0, 50.0, 80.0])) == ["FWD_BWD", "Attach_Grads", "Attach_Grads"]


def test_the_study_grids_dp_group_strides_by_tp_and_its_tp_group_is_adjacent():
    assert list(dp_group(1, 2, 6)) == [1, 3, 5]
    assert list(dp_group(4, 3, 6)) == [1, 4]
    assert list(tp_group(2, 2)) == [2, 3]
    assert list(tp_group(5, 3)) == [3, 4, 5]


def test_a_gloo_collectives_ring_bytes_are_the_ring_model_of_its_group():
    trial = REPO / "traces" / "cpu-2c-gloo" / "study_protocol" / "muon_dp2_tp2" / "trial0"
    collectives = read_study_trace(trial / "rank1.json.gz", (2, 2)).collectives
    assert set(collectives["op"]) == {"all_gather"} and (collectives["group_size"] == 2).all()
    # an all-gather over 2 ranks sends (n - 1) chunks of ceil(elements / n): half the array
    half = [math.ceil(e / 2) * (b // e) for e, b in zip(collectives["elements"], collectives["payload_bytes"])]
    assert list(collectives["ring_bytes"]) == half
