"""Param groups as torch users write them: checked when added, read under torch's names where torch's tools expect them.

Single process, no workers: the ZeRO-1 optimizers run on a 1 x 1 grid (one test on a stand-in 2-rank TP group).
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from muon_repro.model import GPT, GPTConfig
from muon_repro.optim import AdamW, Muon, muon_param_groups
from muon_repro.optim.distributed import DistributedAdamW, DistributedMuon
from muon_repro.optim.newton_schulz import orthogonalize
from muon_repro.parallel import Group, ParallelDims


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(6, 10, generator=g))
        self.bias = nn.Parameter(torch.randn(6, generator=g))


def _with_grads(model: nn.Module, seed: int = 1) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    return model


def _tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny"), Group.single("tp"))


def test_adamw_reads_a_groups_torch_betas_and_eps():
    """A group's own ``betas``/``eps`` change its step, as on torch.optim.AdamW (they were ignored before)."""
    model = _with_grads(Small())
    ours = AdamW([{"params": [model.w], "betas": (0.5, 0.6), "eps": 1e-3}, {"params": [model.bias]}], lr=0.1)
    reference = _with_grads(Small())
    theirs = torch.optim.AdamW(
        [{"params": [reference.w], "betas": (0.5, 0.6), "eps": 1e-3}, {"params": [reference.bias]}],
        lr=0.1,
        weight_decay=0.1,
        betas=(0.9, 0.95),
        foreach=False,
    )
    for _ in range(3):
        ours.step()
        theirs.step()
    torch.testing.assert_close(model.w, reference.w, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(model.bias, reference.bias, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("distributed", [False, True], ids=["AdamW", "DistributedAdamW"])
def test_one_cycle_lr_cycles_adamw_beta1(distributed):
    """torch's OneCycleLR cycles beta1 through ``betas``; it refused our AdamW when the key was ``adamw_betas``."""
    model = _tiny_gpt()
    opt = DistributedAdamW(muon_param_groups(model), ParallelDims(1, 1)) if distributed else AdamW(model.parameters())
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=10)
    first = opt.param_groups[0]["betas"][0]
    _with_grads(model)
    opt.step()
    schedule.step()
    assert opt.param_groups[0]["betas"][0] != first


def test_muon_refuses_torch_adamw_keys_it_would_ignore():
    model = Small()
    with pytest.raises(ValueError, match=r"param_groups\[1\]: this optimizer reads AdamW's 'adamw_betas', not 'betas'"):
        Muon([{"params": [model.w]}, {"params": [model.bias], "use_muon": False, "betas": (0.9, 0.99)}])
    with pytest.raises(ValueError, match="reads AdamW's 'betas', not 'adamw_betas'"):
        AdamW([{"params": [model.w], "adamw_betas": (0.9, 0.99)}])


@pytest.mark.parametrize(
    "override, message",
    [
        ({"lr": -1.0}, "lr must be a finite number >= 0, got -1.0"),
        ({"lr": float("inf")}, "lr must be a finite number >= 0"),
        ({"momentum": 1.5}, "momentum must be a number in"),
        ({"weight_decay": -5}, "weight_decay must be a finite number >= 0"),
        ({"ns_steps": 2.5}, "ns_steps must be an integer >= 0, got 2.5"),
        ({"ns_dtype": "bf16"}, "ns_dtype must be None, torch.bfloat16, torch.float32 or torch.float64"),
        ({"ns_dtype": torch.int32}, "ns_dtype must be None, torch.bfloat16"),
        # normalized only after the cast: an input past float16's 65,504 became inf and the update silently zero
        ({"ns_dtype": torch.float16}, "ns_dtype must be None, torch.bfloat16, torch.float32 or torch.float64"),
        # accepted (numel 1), then the update failed halfway through a step, after the earlier groups had stepped
        ({"lr": torch.tensor([0.01])}, "lr must be a finite number >= 0, got tensor([0.0100]) (a tensor of shape (1,)"),
        ({"ns_method": "bogus"}, "ns_method must be one of"),
        ({"update_scale": "bogus"}, "update_scale must be"),
        ({"nesterov": "no"}, "nesterov must be True or False"),
        ({"adamw_betas": (0.9,)}, "adamw_betas must be two numbers"),
    ],
)
def test_a_bad_group_value_is_refused_before_any_step(override, message):
    """Before, these stepped silently or failed inside step() after other groups had stepped."""
    model = Small()
    with pytest.raises(ValueError, match=r"param_groups\[0\]: " + re.escape(message)):
        Muon([{"params": [model.w], **override}, {"params": [model.bias], "use_muon": False}])
    opt = Muon([{"params": [model.bias], "use_muon": False}])
    with pytest.raises(ValueError, match=r"param_groups\[1\]: "):
        opt.add_param_group({"params": [model.w], **override})
    assert len(opt.param_groups) == 1  # the refused group is not kept


def test_numpy_numbers_are_numbers_as_on_torch():
    """np.float32(0.01) was refused as "out of range"; torch.optim.AdamW takes it."""
    import numpy as np

    model = _with_grads(Small())
    numpy_opt = Muon(
        [{"params": [model.w], "lr": np.float32(0.02), "momentum": np.float64(0.95), "ns_steps": np.int64(5)}],
        adamw_betas=(np.float32(0.9), np.float32(0.95)),
    )
    reference = _with_grads(Small())
    python_opt = Muon([{"params": [reference.w], "lr": float(np.float32(0.02)), "momentum": 0.95, "ns_steps": 5}])
    numpy_opt.step()
    python_opt.step()
    assert torch.equal(model.w, reference.w)
    AdamW(Small().parameters(), lr=np.float64(1e-3), eps=np.float32(1e-8))


def test_the_muon_group_of_a_loaded_state_holds_matrices():
    """A state loaded skipped the matrix check of a group added: groups built in another order than saved put the
    1-D bias under use_muon=True, and the step failed inside Newton-Schulz (IndexError) after others had stepped."""
    model = Small()
    saved = Muon(muon_param_groups(model)).state_dict()  # [matrices (use_muon), the rest]
    swapped = Muon([{"params": [model.bias], "use_muon": False}, {"params": [model.w], "use_muon": True}])
    before = [dict(g) for g in swapped.param_groups]
    refused = "param_groups[0] of the state loaded: Muon group holds 'w' of shape (6,)"  # the name the checkpoint saved
    with pytest.raises(ValueError, match=re.escape(refused)):
        swapped.load_state_dict(saved)
    assert [dict(g) for g in swapped.param_groups] == before


@pytest.mark.parametrize("key", ["muon_names", "adamw_names"])
def test_names_given_as_one_string_are_refused(key):
    """A string is an iterable of its characters: adamw_names="head*" routed every parameter to AdamW (its "*"), and
    adamw_names="head.weight" matched nothing."""
    with pytest.raises(ValueError, match=f"{key} must be a list of names or patterns, got the string 'w': write \\['w'\\]"):
        muon_param_groups(Small(), **{key: "w"})
    assert [g["names"] for g in muon_param_groups(Small(), **{key: ["w"]})] in ([["w"], ["bias"]], [["w", "bias"]])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ns_steps": 2.5}, "ns_steps must be an integer"),
        ({"ns_dtype": "bf16"}, "ns_dtype must be None, torch.bfloat16"),
        ({"adamw_betas": (0.9,)}, "adamw_betas must be two numbers"),
        ({"nesterov": "no"}, "nesterov must be True or False"),
    ],
)
def test_bad_constructor_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Muon(Small().parameters(), **kwargs)
    with pytest.raises(ValueError, match=message):
        DistributedMuon(muon_param_groups(_tiny_gpt()), ParallelDims(1, 1), **kwargs)


def test_adamw_errors_name_its_own_arguments():
    with pytest.raises(ValueError, match=r"^betas must be two numbers, each in \[0, 1\), got \(0.9, 1.0\)"):
        AdamW(Small().parameters(), betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="^eps must be a finite number >= 0"):
        DistributedAdamW(Small().parameters(), ParallelDims(1, 1), eps=-1.0)


@pytest.mark.parametrize("reduce_dtype", [torch.int64, torch.float16, "bf16"])
def test_reduce_dtype_is_refused_unless_fp32_or_bf16(reduce_dtype):
    """An integer reduce dtype truncated every gradient below 1 to zero, silently."""
    with pytest.raises(ValueError, match="reduce_dtype must be one of torch.float32, torch.bfloat16"):
        DistributedAdamW(muon_param_groups(_tiny_gpt()), ParallelDims(1, 1), reduce_dtype=reduce_dtype)


def test_grad_mean_is_the_average_whatever_the_reduce_dtype():
    for reduce_dtype in (torch.float32, torch.bfloat16):
        model = _tiny_gpt()
        opt = DistributedAdamW(muon_param_groups(model), ParallelDims(1, 1), reduce_dtype=reduce_dtype)
        _with_grads(model)
        opt.step()
        assert opt.grad_mean.dtype == torch.float32
        assert torch.equal(opt.grad_mean, opt.grad_shard.float())  # dp = 1: the average is the sum


def test_short_names_list_is_refused():
    model = Small()
    with pytest.raises(ValueError, match="Muon group has 2 params but 1 names"):
        Muon([{"params": [model.w, model.bias], "names": ["w"]}])


def test_sparse_gradients_are_refused_before_anything_changes():
    embedding = nn.Embedding(10, 4, sparse=True)
    embedding(torch.tensor([1, 2])).sum().backward()
    before = embedding.weight.detach().clone()
    for opt in (AdamW(embedding.parameters()), Muon([{"params": embedding.parameters(), "use_muon": False}])):
        with pytest.raises(ValueError, match="takes dense gradients"):
            opt.step()
        assert torch.equal(embedding.weight, before)
        assert not opt.state


def test_a_transposed_input_orthogonalizes_to_the_same_bits():
    """A wide matrix stored column-major (a transposed parameter's gradient) took another BLAS path before."""
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(48, 80, generator=g)
    column_major = wide.T.contiguous().T
    assert not column_major.is_contiguous()
    for method in ("quintic", "polar_express", "gram"):
        assert torch.equal(orthogonalize(column_major, 5, torch.float32, method), orthogonalize(wide, 5, torch.float32, method))


def test_a_transposed_parameter_steps_as_its_contiguous_copy():
    g = torch.Generator().manual_seed(0)
    data, grad = torch.randn(7, 13, generator=g), torch.randn(7, 13, generator=g)
    plain = nn.Parameter(data.clone())
    strided = nn.Parameter(data.T.contiguous().T)
    plain.grad, strided.grad = grad.clone(), grad.T.contiguous().T
    for p in (plain, strided):
        Muon([p], ns_dtype=torch.float32).step()
    assert torch.equal(plain, strided)


def test_an_adamw_checkpoint_with_moonlights_keys_still_loads():
    """Checkpoints saved when AdamW's groups held ``adamw_betas``/``adamw_eps`` load under torch's names."""
    model = _with_grads(Small())
    opt = AdamW(model.parameters(), betas=(0.8, 0.9), eps=1e-6)
    opt.step()
    saved = opt.state_dict()
    for group in saved["param_groups"]:
        group["adamw_betas"], group["adamw_eps"] = group.pop("betas"), group.pop("eps")
    resumed = AdamW(model.parameters())
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["betas"] == (0.8, 0.9) and resumed.param_groups[0]["eps"] == 1e-6
    assert "adamw_betas" not in resumed.param_groups[0]
    resumed.step()


def _stepped(optimizer) -> dict:
    """The checkpoint of ``optimizer`` on :class:`Small`'s two groups after one step."""
    opt = optimizer(muon_param_groups(_with_grads(Small())))
    opt.step()
    return opt.state_dict()


@pytest.mark.parametrize(
    ("saved_by", "loaded_into", "message"),
    [
        # loaded without a word, then KeyError: 'step' at the first step
        (Muon, AdamW, r"params\[0\] of the state loaded holds \['momentum_buffer', 'update_rms'\] where AdamW keeps"),
        # refused as if a key were misspelt ("rename the key")
        (AdamW, Muon, r"param_groups\[0\] of the state loaded has no \['momentum', 'nesterov', 'ns_steps', 'adamw_betas'"),
    ],
)
def test_a_checkpoint_of_the_other_optimizer_is_refused_as_such_and_changes_nothing(saved_by, loaded_into, message):
    model = _with_grads(Small())
    opt = loaded_into(muon_param_groups(model))
    before = [dict(g) for g in opt.param_groups]
    another = ".*the checkpoint of another optimizer.*load it into the optimizer that saved it"
    with pytest.raises(ValueError, match=message + another):
        opt.load_state_dict(_stepped(saved_by))
    assert [dict(g) for g in opt.param_groups] == before and not opt.state
    opt.load_state_dict(_stepped(loaded_into))  # its own kind loads, and steps
    opt.step()


def test_a_checkpoint_of_other_groups_or_shapes_is_refused_in_words():
    """torch said 'loaded state dict has a different number of parameter groups'; a moment of another shape failed
    at the step, in a broadcast."""
    model = _with_grads(Small())
    with pytest.raises(ValueError, match="has 2 param groups, this AdamW 1: build the optimizer with the groups"):
        AdamW(model.parameters()).load_state_dict(_stepped(AdamW))
    saved = _stepped(Muon)
    saved["state"][0]["momentum_buffer"] = torch.zeros(10, 6)
    with pytest.raises(ValueError, match=r"its 'momentum_buffer' has shape \(10, 6\), the parameter \(6, 10\)"):
        Muon(muon_param_groups(model)).load_state_dict(saved)


@pytest.mark.parametrize("optimizer", [DistributedAdamW, DistributedMuon])
def test_a_zero1_optimizer_refuses_to_be_copied_or_pickled(optimizer):
    """torch's optimizers deep-copy and pickle their groups and state alone: the copy of a ZeRO-1 one had no plan or
    flat buffer and failed at its first step (AttributeError: 'plan'). Now the copy itself is refused."""
    import copy
    import io
    import pickle

    model = Small()
    opt = optimizer(muon_param_groups(model), ParallelDims(1, 1))
    for attempt in (lambda: copy.deepcopy(opt), lambda: pickle.dumps(opt), lambda: torch.save(opt, io.BytesIO())):
        with pytest.raises(TypeError, match=f"a {optimizer.__name__} cannot be copied or pickled.*state_dict"):
            attempt()
    _with_grads(model)
    opt.step()  # the refused copies left it as it was


@pytest.mark.parametrize("optimizer", [DistributedAdamW, DistributedMuon])
def test_a_zero1_optimizer_refuses_a_parameter_given_twice(optimizer):
    """torch warns of a duplicate within a group and steps it twice; the flat buffer would hold it twice."""
    model = Small()
    with pytest.warns(UserWarning, match="duplicate"), pytest.raises(ValueError, match=r"\.params\[1\] is .*params\[0\] again"):
        optimizer([{"params": [model.bias, model.bias], "use_muon": False}], ParallelDims(1, 1))


def test_a_bare_tensor_is_refused_as_torch_refuses_it():
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        DistributedAdamW(Small().w, ParallelDims(1, 1))


@pytest.mark.parametrize("optimizer", [AdamW, Muon, DistributedAdamW, DistributedMuon])
def test_a_checkpoint_with_a_hyperparameter_out_of_range_is_refused_and_changes_nothing(optimizer):
    model = Small()
    groups = muon_param_groups(model)
    opt = optimizer(groups, ParallelDims(1, 1)) if optimizer in (DistributedAdamW, DistributedMuon) else optimizer(groups)
    saved = opt.state_dict()
    saved["param_groups"][0]["lr"] = -1.0
    before = [dict(g) for g in opt.param_groups]
    with pytest.raises(ValueError, match=r"param_groups\[0\] of the state loaded: lr must be a finite number >= 0, got -1.0"):
        opt.load_state_dict(saved)
    assert [dict(g) for g in opt.param_groups] == before


# ---------------------------------------------------------------- the ZeRO-1 step against its references (1 x 1 grid)


def _muon_pair(**options) -> tuple[GPT, Muon, GPT, DistributedMuon]:
    """The tiny GPT twice (same weights): single-device Muon on one, DistributedMuon on a 1 x 1 grid on the other,
    both with ``options``, fp32 Newton-Schulz and no rounding of its input."""
    reference, model = _tiny_gpt(), _tiny_gpt()
    single = Muon(muon_param_groups(reference), ns_dtype=torch.float32, **options)
    zero1 = DistributedMuon(
        muon_param_groups(model), ParallelDims(1, 1), ns_dtype=torch.float32, gather_dtype=torch.float32, **options
    )
    return reference, single, model, zero1


@pytest.mark.parametrize("options", [{"nesterov": False}, {"momentum_form": "ema"}, {"update_scale": "keller"}], ids=str)
def test_distributed_muon_steps_with_the_groups_momentum_and_scale_options_as_muon_does(options):
    """Pins DistributedMuon's own reading of ``nesterov``, ``momentum_form`` and ``update_scale`` from its groups: the
    equivalence suite runs the defaults only, so a step that ignored them matched a reference that ignored them too.
    Each option changes the result (checked against the default), and the two optimizers agree bit for bit."""
    reference, single, model, zero1 = _muon_pair(**options)
    default_model = _tiny_gpt()
    default = Muon(muon_param_groups(default_model), ns_dtype=torch.float32)
    for seed in range(3):
        for m in (reference, model, default_model):
            _with_grads(m, seed)
        for opt in (single, zero1, default):
            opt.step()
    for (name, want), got in zip(reference.named_parameters(), model.parameters()):
        assert torch.equal(got, want), name
    assert any(not torch.equal(p, d) for p, d in zip(reference.parameters(), default_model.parameters()))


@pytest.mark.parametrize("optimizer", [DistributedAdamW, DistributedMuon])
def test_a_parameter_without_a_grad_adds_zeros_not_its_last_gradient(optimizer):
    """A ZeRO-1 optimizer steps a parameter whose ``.grad`` is None as if its gradient were zeros (zero1's docstring):
    pins that the flat gradient buffer is cleared for it, not left holding the previous step's gradient."""
    runs = []
    for missing in ("none", "zeros"):
        model = _tiny_gpt()
        opt = optimizer(muon_param_groups(model), ParallelDims(1, 1))
        _with_grads(model, 1)
        opt.step()
        _with_grads(model, 2)
        for p in (model.lm_head.weight, model.blocks[0].attn.proj.weight):  # one AdamW-routed, one Muon-routed
            p.grad = None if missing == "none" else torch.zeros_like(p)
        opt.step()
        runs.append({n: p.detach().clone() for n, p in model.named_parameters()})
    for name, value in runs[0].items():
        assert torch.equal(value, runs[1][name]), name


def test_a_bf16_reduce_dtype_rounds_the_gradients_it_averages():
    """``reduce_dtype=bf16``: the gradients travel (and are summed) in bf16, so ``grad_mean`` holds each gradient
    rounded to bf16, worked out here from the gradients themselves; fp32 keeps them exact."""
    for reduce_dtype in (torch.bfloat16, torch.float32):
        model = _tiny_gpt()
        opt = DistributedAdamW(muon_param_groups(model), ParallelDims(1, 1), reduce_dtype=reduce_dtype)
        _with_grads(model)
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        assert opt.grad_shard.dtype == reduce_dtype
        for slot in opt.plan.slots:
            got = opt.grad_mean[slot.flat_start : slot.flat_start + slot.spec.numel]
            want = grads[slot.spec.name].reshape(-1).to(reduce_dtype).float()
            assert torch.equal(got, want), (reduce_dtype, slot.spec.name)
    assert not torch.equal(want.bfloat16().float(), want)  # the fp32 gradients are not bf16 values already


@pytest.mark.parametrize("optimizer", [DistributedAdamW, DistributedMuon])
def test_a_loaded_zero1_optimizer_steps_with_the_loaded_groups_hyperparameters(optimizer):
    """torch puts new dicts in ``param_groups`` on load; pins that the step reads those (an lr schedule setting lr on
    them after a resume) and not the groups the optimizer was built with: lr 0 and no weight decay move nothing."""
    model = _tiny_gpt()
    opt = optimizer(muon_param_groups(model), ParallelDims(1, 1), lr=0.02)
    _with_grads(model)
    opt.step()
    opt.load_state_dict(opt.state_dict())
    for group in opt.param_groups:
        group["lr"], group["weight_decay"] = 0.0, 0.0
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _with_grads(model, 2)
    opt.step()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_adamw_bias_corrects_each_tensor_by_its_own_step_count():
    """A parameter without a gradient in the first step has taken one step fewer than the others: torch's AdamW
    bias-corrects each by its own count, and so must the batched step (which groups tensors by step count)."""
    ours, theirs = Small(), Small()
    opt = AdamW(ours.parameters(), lr=0.1)
    reference = torch.optim.AdamW(theirs.parameters(), lr=0.1, weight_decay=0.1, betas=(0.9, 0.95), foreach=False)
    for step in range(3):
        for model in (ours, theirs):
            _with_grads(model, step)
            if step == 0:
                model.bias.grad = None
        opt.step()
        reference.step()
    assert opt.state[ours.w]["step"] == 3 and opt.state[ours.bias]["step"] == 2
    torch.testing.assert_close(ours.w, theirs.w, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours.bias, theirs.bias, rtol=1e-6, atol=1e-7)


def test_a_tp_rank_orthogonalizes_and_scales_the_full_matrix(monkeypatch):
    """TP rank 0 of a 2-rank TP group whose other rank holds the same shards (a stand-in all-gather returns this rank's
    shard twice; no process): DistributedMuon's step is single-device Muon's on the full matrices, the shards
    concatenated along their partition dim, bit for bit, and so is each matrix's update RMS. Pins that the update
    and the recorded RMS are scaled by the FULL shape: a column-parallel [12, 8] shard is a [24, 8] matrix
    (0.2 * sqrt(24), not sqrt(12)), a row-parallel [8, 12] one [8, 24]."""
    from types import SimpleNamespace

    from muon_repro.parallel import comm
    from muon_repro.parallel.comm import CommLedger

    def same_on_every_rank(full, shard, group=None, async_op=False):
        assert not async_op
        full.view(2, -1).copy_(shard.view(1, -1).expand(2, -1))

    monkeypatch.setattr(comm, "_all_gather_single", same_on_every_rank)
    tp_group = Group(name="tp", ranks=(0, 1), rank=0, process_group=None, ledger=CommLedger())
    dims = SimpleNamespace(dp=1, tp=2, dp_rank=0, tp_rank=0, dp_group=Group.single("dp"), tp_group=tp_group)
    g = torch.Generator().manual_seed(0)
    shards = {"column": (torch.randn(12, 8, generator=g), 0), "row": (torch.randn(8, 12, generator=g), 1)}
    shards["replicated"] = (torch.randn(12, 20, generator=g), None)
    grads = {name: torch.randn(w.shape, generator=g) for name, (w, _) in shards.items()}
    local, full = {}, {}
    for name, (w, dim) in shards.items():
        local[name] = nn.Parameter(w.clone())
        if dim is not None:
            local[name].tp_partition_dim = dim
        full[name] = nn.Parameter(w.clone() if dim is None else torch.cat([w, w], dim=dim))
    names = list(shards)
    zero1 = DistributedMuon(
        [{"params": [local[n] for n in names], "names": names}], dims, ns_dtype=torch.float32, gather_dtype=torch.float32
    )
    single = Muon([full[n] for n in names], ns_dtype=torch.float32)
    assert [s.spec.full_shape for s in zero1.plan.slots] == [(24, 8), (8, 24), (12, 20)]
    for name, (_, dim) in shards.items():
        local[name].grad = grads[name].clone()
        full[name].grad = grads[name].clone() if dim is None else torch.cat([grads[name]] * 2, dim=dim)
    zero1.step()
    single.step()
    for name, (_, dim) in shards.items():
        want = full[name] if dim is None else full[name].chunk(2, dim=dim)[0]
        assert torch.equal(local[name], want), name
        assert torch.equal(zero1.stats.update_rms[name], single.state[full[name]]["update_rms"]), name
