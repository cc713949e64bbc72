"""Muon, single device: the reference every distributed layout is tested against."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from muon_repro.optim.hyperparameters import (
    ADAMW_STATE,
    MOONLIGHT_ADAMW_KEYS,
    MUON_STATE,
    CheckedParamGroups,
    check_dense_grads,
    check_group,
)
from muon_repro.optim.newton_schulz import orthogonalize_many
from muon_repro.optim.param_groups import check_muon_group
from muon_repro.optim.update_rules import (
    MomentumForm,
    UpdateScale,
    adamw_update_many_,
    apply_decoupled_updates_,
    muon_momentum_many_,
    muon_update_scale,
)


def muon_defaults(
    *,
    lr: float,
    weight_decay: float,
    momentum: float,
    nesterov: bool,
    ns_steps: int,
    ns_dtype: torch.dtype | None,
    ns_method: str = "quintic",
    update_scale: UpdateScale,
    momentum_form: MomentumForm,
    adamw_betas: tuple[float, float],
    adamw_eps: float,
) -> dict:
    """Validated param-group defaults, shared by :class:`Muon` and ``DistributedMuon``."""
    defaults = dict(
        lr=lr,
        weight_decay=weight_decay,
        momentum=momentum,
        nesterov=nesterov,
        ns_steps=ns_steps,
        ns_dtype=ns_dtype,
        ns_method=ns_method,
        update_scale=update_scale,
        momentum_form=momentum_form,
        adamw_betas=adamw_betas,
        adamw_eps=adamw_eps,
        use_muon=True,
    )
    check_group(defaults, MOONLIGHT_ADAMW_KEYS)
    defaults["adamw_betas"] = tuple(adamw_betas)
    return defaults


def evaluate_closure(closure: Callable[[], float] | None) -> float | None:
    """``step(closure)``'s contract: re-evaluate the loss with grad enabled, if asked."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class Muon(CheckedParamGroups, torch.optim.Optimizer):
    """Muon with Moonlight's update for matrices, AdamW for everything else, in one optimizer.

    Param groups carry ``use_muon`` (see :func:`~muon_repro.optim.muon_param_groups`). For a
    matrix ``W`` of shape ``A x B`` with gradient ``g``::

        buf = mu * buf + g                      # sum-form momentum (momentum_form="sum")
        u   = NS5(g + mu * buf)                 # Nesterov, then Newton-Schulz
        W  *= 1 - lr * wd                       # decoupled weight decay on every parameter
        W  -= lr * 0.2 * sqrt(max(A, B)) * u    # update RMS matched to AdamW's

    ``state[W]["update_rms"]`` keeps the RMS of ``0.2*sqrt(max(A,B))*u`` (Algorithm 1, line 14).
    Options: ``update_scale="keller"`` (``sqrt(max(1, A/B))``), ``momentum_form="ema"``,
    ``ns_steps``, ``ns_dtype`` (default bf16 on CUDA, fp32 on CPU), ``ns_method`` (``quintic``, or a variant of
    :data:`~muon_repro.optim.newton_schulz.NS_METHODS`: docs/method.md#newton-schulz). The ``use_muon=False``
    groups run :func:`~muon_repro.optim.update_rules.adamw_update_` (torch's AdamW arithmetic)
    with ``adamw_betas``, ``adamw_eps`` and the group's ``lr`` and ``weight_decay``.

    ``gather_dtype`` (default None: no rounding) rounds the Newton-Schulz input to that dtype
    and back before NS, as :class:`~muon_repro.optim.DistributedMuon` does when it moves the
    input through its DP/TP gathers in ``gather_dtype``: with the same value the two agree bit
    for bit, bf16 gathers included.

    A parameter of shape ``[..., A, B]`` is a batch of ``A x B`` matrices, each orthogonalized and scaled alone (as
    stacked experts would be; see :mod:`~muon_repro.optim.param_groups` for convolutions). Every group's
    hyperparameters are checked when it is added (:mod:`~muon_repro.optim.hyperparameters`).
    """

    ADAMW_KEYS = MOONLIGHT_ADAMW_KEYS

    GROUP_KEYS = ("use_muon", "momentum", "nesterov", "ns_steps", *MOONLIGHT_ADAMW_KEYS)

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        ns_dtype: torch.dtype | None = None,
        ns_method: str = "quintic",
        update_scale: UpdateScale = "moonlight",
        momentum_form: MomentumForm = "sum",
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
        gather_dtype: torch.dtype | None = None,
    ) -> None:
        defaults = muon_defaults(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            ns_dtype=ns_dtype,
            ns_method=ns_method,
            update_scale=update_scale,
            momentum_form=momentum_form,
            adamw_betas=adamw_betas,
            adamw_eps=adamw_eps,
        )
        defaults["gather_dtype"] = gather_dtype
        check_group({"gather_dtype": gather_dtype}, self.ADAMW_KEYS)  # the rest checked by muon_defaults
        super().__init__(params, defaults)

    def _required_state(self, group: dict) -> tuple[str, ...]:
        return MUON_STATE if group["use_muon"] else ADAMW_STATE

    def _check_added_group(self, group: dict, where: str) -> None:
        """The hyperparameters, and a Muon group's params all matrices (here, not in a later ``step()`` that would
        have stepped the other groups first)."""
        super()._check_added_group(group, where)
        if group["use_muon"]:
            try:
                check_muon_group(group["params"], group.get("names"))
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = evaluate_closure(closure)
        check_dense_grads((p for group in self.param_groups for p in group["params"]), type(self).__name__)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if group["use_muon"]:
                self._muon_group_step(params, group)
            else:
                grads = [p.grad for p in params]
                adamw_group_step([self.state[p] for p in params], params, grads, group, self.ADAMW_KEYS)
        return loss

    def _muon_group_step(self, params: list[torch.Tensor], group: dict) -> None:
        """Momentum on every matrix, Newton-Schulz on each shape's matrices at once, the update on every matrix."""
        if not params:
            return
        for p in params:
            if "momentum_buffer" not in self.state[p]:
                self.state[p]["momentum_buffer"] = torch.zeros_like(p)
        bufs, grads = [self.state[p]["momentum_buffer"] for p in params], [p.grad for p in params]
        ns_inputs = muon_momentum_many_(bufs, grads, group["momentum"], group["nesterov"], group["momentum_form"])
        scales = [muon_update_scale(p.shape, group["update_scale"]) for p in params]
        # gather_dtype (absent from groups of checkpoints saved before it existed): rounded where DistributedMuon's
        # gathers round the Newton-Schulz input
        updates, update_rms = orthogonalize_many(
            ns_inputs,
            group["ns_steps"],
            group["ns_dtype"],
            scales=scales,
            round_to=group.get("gather_dtype"),
            method=group.get("ns_method", "quintic"),  # absent from checkpoints saved before the variants
        )
        for p, rms in zip(params, update_rms):
            self.state[p]["update_rms"] = rms
        apply_decoupled_updates_(params, updates, group["lr"], group["weight_decay"], scales)


def adamw_group_step(
    states: list[dict], params: list[torch.Tensor], grads: list[torch.Tensor], group: dict, adamw_keys: tuple[str, str]
) -> None:
    """AdamW on many tensors (or flat shards of them), creating each one's state on first use; the tensors of one
    step count updated together (:func:`~muon_repro.optim.update_rules.adamw_update_many_`). ``adamw_keys``: the
    group's keys for betas and eps (:mod:`~muon_repro.optim.hyperparameters`)."""
    betas_key, eps_key = adamw_keys
    by_step: dict[int, list[int]] = {}
    for i, (state, param) in enumerate(zip(states, params)):
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        state["step"] += 1
        by_step.setdefault(state["step"], []).append(i)
    for step, members in by_step.items():
        adamw_update_many_(
            [params[i] for i in members],
            [grads[i] for i in members],
            [states[i]["exp_avg"] for i in members],
            [states[i]["exp_avg_sq"] for i in members],
            step,
            group["lr"],
            group[betas_key],
            group[eps_key],
            group["weight_decay"],
        )
