"""How many operators one optimizer step calls: the launches a GPU pays for whatever their size.

Counted by a dispatch mode (every ATen operator call, views and ``torch._foreach_*`` calls included, each once) on
the meta device: tensors with shapes and no data, so any preset counts on a CPU in a second, without computing.
The second step is counted (the first also creates the state). The distributed optimizers are counted at world
size 1, where their gathers and shards move nothing but run the same code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from muon_repro.model_config import GPTConfig

OPTIMIZERS = ("muon", "adamw")


class OpCounter(TorchDispatchMode):
    """Counts the ATen operator calls made while it is active, in all and by operator."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.calls += 1
        name = str(func)
        self.by_op[name] = self.by_op.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def optimizer_op_calls(model: GPTConfig, optimizer: str, *, distributed: bool = False) -> OpCounter:
    """The operator calls of one step of ``optimizer`` (``muon``: Muon for the hidden matrices, AdamW for the rest;
    ``adamw``) on a model of ``model``'s shape, single-device or (``distributed``) ZeRO-1 at world size 1."""
    from muon_repro.model import GPT
    from muon_repro.optim import AdamW, DistributedAdamW, DistributedMuon, Muon, muon_param_groups
    from muon_repro.parallel.comm import CommLedger, Group
    from muon_repro.parallel.mesh import ParallelDims

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    tp_group = Group(name="tp", ranks=(0,), rank=0, process_group=None, ledger=CommLedger())
    net = GPT(model, tp_group, device="meta")
    for p in net.parameters():
        p.grad = torch.empty_like(p)
    groups = muon_param_groups(net)
    if distributed:
        dims = ParallelDims(1, 1)
        opt = DistributedMuon(groups, dims) if optimizer == "muon" else DistributedAdamW(groups, dims)
    else:
        opt = Muon(groups) if optimizer == "muon" else AdamW(groups)
    opt.step()
    with OpCounter() as counter:
        opt.step()
    return counter
