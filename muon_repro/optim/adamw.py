"""AdamW baseline with the same param-group handling as :class:`~muon_repro.optim.Muon`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from muon_repro.optim.hyperparameters import ADAMW_STATE, TORCH_ADAMW_KEYS, CheckedParamGroups, check_dense_grads, check_group
from muon_repro.optim.muon import adamw_group_step, evaluate_closure


def adamw_defaults(lr: float, weight_decay: float, betas: tuple[float, float], eps: float) -> dict:
    """Validated param-group defaults, shared by :class:`AdamW` and ``DistributedAdamW`` (torch's key names)."""
    defaults = dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, use_muon=False)
    check_group(defaults, TORCH_ADAMW_KEYS)
    defaults["betas"] = tuple(betas)
    return defaults


class AdamW(CheckedParamGroups, torch.optim.Optimizer):
    """torch.optim.AdamW's arithmetic on every parameter, matrices included.

    Accepts the groups of :func:`~muon_repro.optim.muon_param_groups` (their ``use_muon`` flag is
    ignored), so a benchmark swaps Muon for AdamW without touching the grouping. ``eps`` is added
    after bias correction, as torch does; Moonlight adds it before (see
    :func:`~muon_repro.optim.update_rules.adamw_update_`). Default betas are Moonlight's (0.9, 0.95),
    not the PoC's (0.95, 0.95). Groups take torch's keys (``lr``, ``weight_decay``, ``betas``, ``eps``), so torch's
    LR schedulers (``OneCycleLR`` cycling ``betas``) work as on ``torch.optim.AdamW``.
    """

    GROUP_KEYS = TORCH_ADAMW_KEYS  # after rename_torch_adamw_keys: a Muon checkpoint's groups hold them too

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, adamw_defaults(lr, weight_decay, betas, eps))

    def _required_state(self, group: dict) -> tuple[str, ...]:
        return ADAMW_STATE  # every parameter, whatever its group's use_muon

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = evaluate_closure(closure)
        check_dense_grads((p for group in self.param_groups for p in group["params"]), type(self).__name__)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            adamw_group_step([self.state[p] for p in params], params, grads, group, self.ADAMW_KEYS)
        return loss
