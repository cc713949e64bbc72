"""Param groups as torch users write them: checked when added, read under torch's names where torch's tools expect them.

Single process, no workers: the ZeRO-1 optimizers run on a 1 x 1 grid.
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
