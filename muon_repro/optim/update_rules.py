"""Element-wise and per-matrix update rules, shared by the single-device and the ZeRO-1 optimizers.

Everything element-wise here works unchanged on a whole tensor or on any flat shard of it, which
is what lets :mod:`muon_repro.optim.distributed` reuse these bodies on its DP shards.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

MomentumForm = Literal["sum", "ema"]
UpdateScale = Literal["moonlight", "keller"]


def muon_momentum_(buf: torch.Tensor, grad: torch.Tensor, momentum: float, nesterov: bool, form: MomentumForm) -> torch.Tensor:
    """Update the momentum buffer in place; return the Newton-Schulz input.

    ``sum`` (Moonlight): ``buf = mu*buf + g``; Nesterov input ``g + mu*buf``.
    ``ema`` (KellerJordan, torch.optim.Muon): ``buf = mu*buf + (1-mu)*g``; input ``lerp(g, buf, mu)``.
    The EMA buffer is ``(1-mu)`` times the sum buffer, so both inputs differ by the factor
    ``(1-mu)`` only, which Newton-Schulz's normalization removes: the updates agree.
    """
    if form == "sum":
        buf.mul_(momentum).add_(grad)
        return grad.add(buf, alpha=momentum) if nesterov else buf.clone()
    if form == "ema":
        buf.lerp_(grad, 1 - momentum)
        return grad.lerp(buf, momentum) if nesterov else buf.clone()
    raise ValueError(f"momentum_form must be 'sum' or 'ema', got {form!r}")


def muon_momentum_many_(
    bufs: list[torch.Tensor], grads: list[torch.Tensor], momentum: float, nesterov: bool, form: MomentumForm
) -> list[torch.Tensor]:
    """:func:`muon_momentum_` on many tensors at once (``torch._foreach_*``: a few calls in all, not a few per tensor),
    with the same arithmetic, element for element."""
    if form == "sum":
        torch._foreach_mul_(bufs, momentum)
        torch._foreach_add_(bufs, grads)
        return torch._foreach_add(grads, bufs, alpha=momentum) if nesterov else [b.clone() for b in bufs]
    if form == "ema":
        torch._foreach_lerp_(bufs, grads, 1 - momentum)
        return torch._foreach_lerp(grads, bufs, momentum) if nesterov else [b.clone() for b in bufs]
    raise ValueError(f"momentum_form must be 'sum' or 'ema', got {form!r}")


def muon_update_scale(full_shape: tuple[int, ...] | torch.Size, mode: UpdateScale) -> float:
    """Factor on the orthogonalized update for a matrix of FULL (un-sharded) shape ``[..., A, B]``.

    ``moonlight``: ``0.2 * sqrt(max(A, B))``, matching AdamW's update RMS (arXiv 2502.16982 §2.2).
    ``keller``: ``sqrt(max(1, A / B))``.
    """
    A, B = full_shape[-2], full_shape[-1]
    if mode == "moonlight":
        return 0.2 * math.sqrt(max(A, B))
    if mode == "keller":
        return math.sqrt(max(1.0, A / B))
    raise ValueError(f"update_scale must be 'moonlight' or 'keller', got {mode!r}")


def apply_decoupled_update_(param: torch.Tensor, update: torch.Tensor, lr: float, weight_decay: float, scale: float) -> None:
    """``p *= 1 - lr*wd``, then ``p -= lr*scale*update`` (Moonlight's order)."""
    param.mul_(1 - lr * weight_decay)
    param.add_(update, alpha=-lr * scale)


def apply_decoupled_updates_(
    params: list[torch.Tensor], updates: list[torch.Tensor], lr: float, weight_decay: float, scales: list[float]
) -> None:
    """:func:`apply_decoupled_update_` on many tensors at once: one weight-decay call for all, one update call per
    distinct scale (the scale rides in the call's ``alpha``, as it does one tensor at a time)."""
    torch._foreach_mul_(params, 1 - lr * weight_decay)
    by_scale: dict[float, list[int]] = {}
    for i, scale in enumerate(scales):
        by_scale.setdefault(scale, []).append(i)
    for scale, members in by_scale.items():
        torch._foreach_add_([params[i] for i in members], [updates[i] for i in members], alpha=-lr * scale)


def adamw_update_(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: int,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
) -> None:
    """One AdamW step with torch.optim.AdamW's arithmetic (``step`` counts from 1).

    torch adds ``eps`` after bias-correcting the second moment:
    ``denom = sqrt(v) / sqrt(1 - b2^t) + eps``. Moonlight adds it before:
    ``denom = (sqrt(v) + eps) / sqrt(1 - b2^t)``, i.e. an eps larger by ``1/sqrt(1 - b2^t)``
    early in training. The two agree once ``eps`` is negligible next to ``sqrt(v)``.
    """
    adamw_update_many_([param], [grad], [exp_avg], [exp_avg_sq], step, lr, betas, eps, weight_decay)


def adamw_update_many_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    step: int,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
) -> None:
    """:func:`adamw_update_` on many tensors sharing one step count, with ``torch._foreach_*`` calls: the same
    arithmetic, element for element."""
    if not params:
        return
    beta1, beta2 = betas
    torch._foreach_mul_(params, 1 - lr * weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    denoms = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denoms, bias_correction2_sqrt)
    torch._foreach_add_(denoms, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denoms, value=-lr / bias_correction1)
