"""The optimizer's memory measured by storage (muon_repro.optim.held_memory): whatever a buffer is called, it is
counted, once, and the model's own parameters are not."""

from __future__ import annotations

import torch

from muon_repro.optim.adamw import AdamW
from muon_repro.optim.held_memory import held_memory
from muon_repro.optim.muon import Muon


def _stepped(optimizer_cls, **kw) -> tuple[torch.optim.Optimizer, torch.nn.Linear]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8, bias=False)
    opt = optimizer_cls(layer.parameters(), lr=0.01, **kw)
    layer(torch.randn(4, 16)).square().mean().backward()
    opt.step()
    return opt, layer


def test_adamw_holds_two_fp32_moments_and_no_buffer():
    opt, layer = _stepped(AdamW)
    held = held_memory(opt)
    assert held.state_bytes == 2 * 4 * layer.weight.numel()  # exp_avg and exp_avg_sq; the step count is a number
    assert held.buffer_bytes == 0


def test_a_copy_of_the_weights_under_any_name_is_counted():
    opt, layer = _stepped(AdamW)
    before = held_memory(opt).state_bytes
    opt.state[layer.weight]["not_a_moment"] = layer.weight.detach().clone()
    assert held_memory(opt).state_bytes == before + 4 * layer.weight.numel()


def test_a_kept_buffer_is_counted_as_a_buffer_and_views_once():
    opt, layer = _stepped(AdamW)
    opt.kept = {"gathers": [torch.zeros(100), torch.zeros(100)]}
    flat = torch.zeros(50)
    opt.views = (flat[:10], flat[10:])  # two views of one storage
    held = held_memory(opt)
    assert held.buffer_bytes == 2 * 400 + 200


def test_the_models_parameters_and_gradients_are_not_the_optimizers():
    opt, layer = _stepped(AdamW)
    before = held_memory(opt)
    opt.state[layer.weight]["alias"] = layer.weight.data  # the weight itself, not a copy
    opt.grads = [layer.weight.grad]
    assert held_memory(opt) == before


def test_muon_holds_one_momentum_where_adamw_holds_two_moments():
    muon, layer = _stepped(Muon)
    adamw, _ = _stepped(AdamW)
    held = held_memory(muon)
    # one fp32 momentum, plus the 4-byte update RMS Muon keeps per matrix for its statistics
    assert held.state_bytes - 4 == 4 * layer.weight.numel()
    assert (held.state_bytes - 4) / held_memory(adamw).state_bytes == 0.5


def test_a_state_tensor_also_kept_as_an_attribute_counts_once_as_state():
    """A storage reachable from ``state`` and from an attribute (a ZeRO-1 optimizer's list of its moment shards, say)
    is state, and only state: counted as a buffer too, the optimizer would seem to hold it twice."""
    opt, layer = _stepped(AdamW)
    before = held_memory(opt)
    opt.moments = [opt.state[layer.weight]["exp_avg"], opt.state[layer.weight]["exp_avg_sq"][:2]]  # a tensor, a view
    assert held_memory(opt) == before
