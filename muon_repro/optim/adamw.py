"""AdamW baseline with the same param-group handling as :class:`~muon_repro.optim.Muon`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from muon_repro.optim.muon import (
    adamw_group_step,
    check_hyperparameters,
    evaluate_closure,
)


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's arithmetic on every parameter, matrices included.

    Accepts the groups of :func:`~muon_repro.optim.muon_param_groups` (their ``use_muon`` flag is
    ignored), so a benchmark swaps Muon for AdamW without touching the grouping. ``eps`` is added
    after bias correction, as torch does; Moonlight adds it before (see
    :func:`~muon_repro.optim.update_rules.adamw_update_`). Default betas are Moonlight's (0.9, 0.95),
    not the PoC's (0.95, 0.95).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
    ) -> None:
        check_hyperparameters(lr, weight_decay, 0.0, betas, eps)
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, adamw_betas=tuple(betas), adamw_eps=eps, use_muon=False))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            adamw_group_step([self.state[p] for p in params], params, [p.grad for p in params], group)
        return loss
