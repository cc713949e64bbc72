"""The hyperparameters a param group of this package's optimizers may hold, checked when the group is added.

torch checks an optimizer's constructor arguments only: a group passed as a dict, or added later, reaches ``step()``
unchecked, and a bad value there fails halfway through it, after earlier groups have stepped and momentum buffers have
been written. :func:`check_group` runs in every optimizer's ``add_param_group`` (which torch's constructor calls for
each group, the defaults filled in), so a bad value is refused before any state exists.

AdamW's betas and eps go by two pairs of names: torch's ``betas``/``eps`` (:class:`~muon_repro.optim.AdamW`,
``DistributedAdamW``, as ``torch.optim.AdamW`` and its LR schedulers expect) and Moonlight's
``adamw_betas``/``adamw_eps`` (the AdamW groups of :class:`~muon_repro.optim.Muon` and ``DistributedMuon``, whose
``momentum`` is Muon's). A group holding the pair its optimizer does not read is refused: it would be ignored.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import torch

from muon_repro.optim.newton_schulz import check_ns_method
from muon_repro.optim.update_rules import muon_update_scale

TORCH_ADAMW_KEYS = ("betas", "eps")
MOONLIGHT_ADAMW_KEYS = ("adamw_betas", "adamw_eps")
MOMENTUM_FORMS = ("sum", "ema")


def check_group(group: dict, adamw_keys: tuple[str, str], where: str = "") -> None:
    """Raise ``ValueError`` naming ``where`` (e.g. ``param_groups[1]``), the key and its value for the first
    hyperparameter of ``group`` out of its range. Keys the group does not hold are not checked."""
    prefix = f"{where}: " if where else ""
    wrong_keys = MOONLIGHT_ADAMW_KEYS if adamw_keys == TORCH_ADAMW_KEYS else TORCH_ADAMW_KEYS
    for wrong, right in zip(wrong_keys, adamw_keys):
        if wrong in group:
            raise ValueError(f"{prefix}this optimizer reads AdamW's {right!r}, not {wrong!r}: rename the key")
    betas_key, eps_key = adamw_keys
    finite = "a finite number >= 0"
    dtype = "None or a floating-point torch.dtype"
    ns_dtype = "None, torch.bfloat16, torch.float32 or torch.float64 (float16 overflows past 65,504 before normalizing)"
    allowed = {  # key: (whether a value is in range, the range as the message says it)
        "lr": (lambda v: _real(v) and 0 <= v < math.inf, finite),
        "weight_decay": (lambda v: _real(v) and 0 <= v < math.inf, finite),
        "momentum": (lambda v: _real(v) and 0 <= v < 1, "a number in [0, 1)"),
        "nesterov": (lambda v: isinstance(v, bool), "True or False"),
        "ns_steps": (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
        "ns_dtype": (lambda v: v is None or (_floating_dtype(v) and v != torch.float16), ns_dtype),
        "gather_dtype": (lambda v: v is None or _floating_dtype(v), dtype),
        "momentum_form": (lambda v: v in MOMENTUM_FORMS, f"one of {', '.join(MOMENTUM_FORMS)}"),
        "use_muon": (lambda v: isinstance(v, bool), "True or False"),
        betas_key: (lambda v: _pair(v) and all(_real(b) and 0 <= b < 1 for b in v), "two numbers, each in [0, 1)"),
        eps_key: (lambda v: _real(v) and 0 <= v < math.inf, finite),
    }
    for key, (ok, in_range) in allowed.items():
        if key in group and not ok(group[key]):
            raise ValueError(f"{prefix}{key} must be {in_range}, got {_said(group[key])}")
    try:
        if "ns_method" in group:
            check_ns_method(group["ns_method"])
        if "update_scale" in group:
            muon_update_scale((1, 1), group["update_scale"])
    except ValueError as e:
        raise ValueError(f"{prefix}{e}") from None


def check_dense_grads(params: Iterable[torch.Tensor], optimizer: str) -> None:
    """Refuse sparse gradients before a step changes anything (the element-wise updates cannot take them)."""
    for p in params:
        if p.grad is not None and p.grad.is_sparse:
            raise ValueError(
                f"{optimizer} takes dense gradients, got a sparse one for a parameter of shape {tuple(p.shape)}: "
                "build the embedding with sparse=False"
            )


def rename_torch_adamw_keys(param_groups: list[dict]) -> None:
    """Rename Moonlight's AdamW keys to torch's in groups loaded from a checkpoint saved before AdamW used torch's."""
    for group in param_groups:
        for old, new in zip(MOONLIGHT_ADAMW_KEYS, TORCH_ADAMW_KEYS):
            if old in group and new not in group:
                group[new] = group.pop(old)


def _real(value: object) -> bool:
    """A real number (NumPy's included, and a 0-dim float tensor, as torch's schedulers may set), not a bool. A tensor
    of shape (1,) is not one: the updates take a scalar, and would fail halfway through a step."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and value.is_floating_point()
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


def _said(value: object) -> str:
    """A refused value as the message shows it: a tensor by its shape and dtype too (``tensor([0.01])`` reads as a
    number), any other type by its name where its repr does not say it."""
    if isinstance(value, torch.Tensor):
        return f"{value!r} (a tensor of shape {tuple(value.shape)}, {value.dtype}; give a number or a 0-dim tensor)"
    kind = type(value).__name__
    shown = repr(value)
    plain = (bool, int, float, str, type(None), torch.dtype)
    return shown if kind in shown or isinstance(value, plain) else f"{shown} ({kind})"


def _pair(value: object) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 2


def _floating_dtype(value: object) -> bool:
    return isinstance(value, torch.dtype) and value.is_floating_point


# What each update rule keeps per parameter once it has stepped, for the errors of a checkpoint of the wrong kind.
MUON_STATE = ("momentum_buffer",)
ADAMW_MOMENTS = ("exp_avg", "exp_avg_sq")
ADAMW_STATE = ("step", *ADAMW_MOMENTS)
MOMENT_KEYS = (*MUON_STATE, *ADAMW_MOMENTS)  # the state entries that are moment buffers (what state bytes count)
STATE_KEPT = f"Muon keeps {list(MUON_STATE)} for a matrix, AdamW {list(ADAMW_STATE)}"


class CheckedParamGroups:
    """Mixin for ``torch.optim.Optimizer`` subclasses: :func:`check_group` on every group added, the group refused
    whole (the optimizer left as it was) if a value is out of range.

    ``ADAMW_KEYS``: the names the optimizer reads AdamW's betas and eps under. Groups of a checkpoint saved when
    AdamW read Moonlight's names are renamed to torch's on loading."""

    ADAMW_KEYS: tuple[str, str] = TORCH_ADAMW_KEYS
    GROUP_KEYS: tuple[str, ...] = ()  # the hyperparameters every group of this optimizer's checkpoints holds

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)  # type: ignore[misc]
        groups = self.param_groups  # type: ignore[attr-defined]
        try:
            self._check_added_group(groups[-1], f"param_groups[{len(groups) - 1}]")
        except ValueError:
            groups.pop()
            raise

    def _check_added_group(self, group: dict, where: str) -> None:
        check_group(group, self.ADAMW_KEYS, where)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, with the group count compared first in words a user can act on."""
        saved = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        mine = self.param_groups  # type: ignore[attr-defined]
        if isinstance(saved, list) and len(saved) != len(mine):
            raise ValueError(
                f"the optimizer state loaded has {len(saved)} param groups, this {type(self).__name__} {len(mine)}: build "
                "the optimizer with the groups it was saved with (muon_param_groups(model) gives the matrices and the "
                "rest apart), and load a checkpoint into the optimizer that saved it"
            )
        super().load_state_dict(state_dict)  # type: ignore[misc]

    def _required_state(self, group: dict) -> tuple[str, ...]:
        """The state keys a parameter of ``group`` holds once stepped, each a tensor of the parameter's shape; none
        here (the ZeRO-1 optimizers compare a checkpoint's fingerprint instead)."""
        return ()

    def __setstate__(self, state: dict) -> None:
        """torch's, once the state loaded (``load_state_dict``, unpickling) is this optimizer's kind and its groups
        pass the checks of a group added: a checkpoint is input too, and lr=-1 or momentum=1.5 in one would train, and
        use_muon=True over the groups' 1-D parameters would fail inside a step.
        Refused, the optimizer is as it was."""
        groups = state.get("param_groups", [])
        if self.ADAMW_KEYS == TORCH_ADAMW_KEYS:
            rename_torch_adamw_keys(groups)
        self._check_state_kind(state.get("state", {}), groups)
        for i, group in enumerate(groups):  # Muon's: a use_muon group's parameters are matrices
            self._check_added_group(group, f"param_groups[{i}] of the state loaded")
        super().__setstate__(state)  # type: ignore[misc]

    def _check_state_kind(self, state: dict, groups: list[dict]) -> None:
        """Each group holds this optimizer's hyperparameters (:attr:`GROUP_KEYS`) and each stepped parameter the state
        it keeps for its group, at its shape: Muon's state loaded into AdamW without a word and failed at the first
        step (KeyError: 'step'); AdamW's into Muon was refused as if a key were misspelt."""
        name = type(self).__name__
        for i, group in enumerate(groups):
            missing = [key for key in self.GROUP_KEYS if key not in group]
            if missing:
                raise ValueError(
                    f"param_groups[{i}] of the state loaded has no {missing}, which {name}'s groups hold: the checkpoint "
                    "of another optimizer (Muon's groups hold momentum and adamw_betas, AdamW's betas); load it into the "
                    "optimizer that saved it"
                )
            required = self._required_state(group)
            for j, param in enumerate(group["params"]):
                held = state.get(param)
                if not required or not held:
                    continue
                where = f"param_groups[{i}].params[{j}] of the state loaded"
                missing = [key for key in required if key not in held]
                if missing:
                    raise ValueError(
                        f"{where} holds {sorted(held)} where {name} keeps {list(required)}: the checkpoint of another "
                        f"optimizer ({STATE_KEPT}); load it into the optimizer that saved it"
                    )
                for key in required:
                    value = held[key]
                    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                        raise ValueError(
                            f"{where}: its {key!r} has shape {tuple(value.shape)}, the parameter {tuple(param.shape)}: "
                            "the model does not match the checkpoint"
                        )
