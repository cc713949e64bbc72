"""Which parameters Muon orthogonalizes and which go the AdamW way.

Rule (Moonlight): matrices (``ndim >= 2``) of the hidden layers go to Muon; embeddings, the LM
head and every 1-D parameter (norm gains, biases) go to AdamW. Names can override the rule.
A ``[..., A, B]`` parameter is a batch of ``A x B`` matrices, each orthogonalized and scaled alone: right for
stacked experts, not for a convolution, whose ``[out, in, kh, kw]`` filter would be ``kh * kw`` tiny matrices
(name it in ``adamw_names``, or keep it as ``[out, in * kh * kw]`` in the model, as Keller Jordan's Muon does).

The groups also record where each parameter sits in ``model.named_parameters()``
(``model_indices``): splitting by update rule loses the model order, and the ZeRO-1 optimizers
need it to lay their flat buffer out as Megatron does (see :mod:`muon_repro.optim.layout`).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

import torch
from torch import nn

ADAMW_NAME_PATTERNS = ("*embed*", "*lm_head*", "*wte*", "*wpe*")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


MODEL_INDICES = "model_indices"  # param-group key: each parameter's index in model.named_parameters()


def split_muon_params(
    named_params: Iterable[tuple[str, nn.Parameter]],
    *,
    muon_names: Iterable[str] = (),
    adamw_names: Iterable[str] = (),
) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """Split ``(name, param)`` pairs into (muon, adamw) lists, each in the input's order.

    ``muon_names`` / ``adamw_names`` are exact names or fnmatch patterns that override the rule;
    a name in both is an error, and so is a 1-D parameter forced into the Muon set. Parameters
    that do not require grad are left out.
    """
    muon, adamw = [], []
    for name, param, use_muon in _route(named_params, muon_names, adamw_names):
        (muon if use_muon else adamw).append((name, param))
    return muon, adamw


def _route(
    named_params: Iterable[tuple[str, nn.Parameter]], muon_names: Iterable[str], adamw_names: Iterable[str]
) -> Iterable[tuple[str, nn.Parameter, bool]]:
    """``(name, param, use_muon)`` for every trainable parameter, in the input's order."""
    for key, names in (("muon_names", muon_names), ("adamw_names", adamw_names)):
        if isinstance(names, str):  # a string is an iterable of its characters: "head*" would route every "*" match
            raise ValueError(f"{key} must be a list of names or patterns, got the string {names!r}: write [{names!r}]")
    muon_names, adamw_names = tuple(muon_names), tuple(adamw_names)
    for name, param in named_params:
        if not param.requires_grad:
            continue
        forced_muon, forced_adamw = _matches(name, muon_names), _matches(name, adamw_names)
        if forced_muon and forced_adamw:
            raise ValueError(f"parameter {name!r} is named in both muon_names and adamw_names")
        if forced_muon:
            use_muon = True
        elif forced_adamw:
            use_muon = False
        else:
            use_muon = param.ndim >= 2 and not _matches(name, ADAMW_NAME_PATTERNS)
        if use_muon and param.ndim < 2:
            raise ValueError(
                f"parameter {name!r} has shape {tuple(param.shape)}: Muon orthogonalizes matrices "
                "only; leave 1-D parameters to AdamW"
            )
        yield name, param, use_muon


def muon_param_groups(model: nn.Module, *, muon_names: Iterable[str] = (), adamw_names: Iterable[str] = ()) -> list[dict]:
    """Param groups for :class:`~muon_repro.optim.Muon` (``use_muon`` True/False) from a model.

    The Muon group comes first, then the AdamW group, each in model order. Each group also
    carries ``names`` (parameter names, for logging and checkpoints) and ``model_indices`` (each
    parameter's index in ``model.named_parameters()``, which the ZeRO-1 optimizers lay their
    flat buffer out by).
    """
    members: dict[bool, list[tuple[int, str, nn.Parameter]]] = {True: [], False: []}
    routed = _route(model.named_parameters(), muon_names, adamw_names)
    index_of = {name: i for i, (name, _) in enumerate(model.named_parameters())}
    for name, param, use_muon in routed:
        members[use_muon].append((index_of[name], name, param))
    return [
        {
            "params": [p for _, _, p in group],
            "names": [n for _, n, _ in group],
            MODEL_INDICES: [i for i, _, _ in group],
            "use_muon": use_muon,
        }
        for use_muon, group in members.items()
        if group
    ]


def check_muon_group(params: Iterable[torch.Tensor], names: Iterable[str] | None = None) -> None:
    """Raise ``ValueError`` for any parameter in a Muon group that is not a matrix."""
    params = list(params)
    names = list(names) if names is not None else [f"params[{i}]" for i in range(len(params))]
    if len(names) != len(params):
        raise ValueError(f"Muon group has {len(params)} params but {len(names)} names: give one name per parameter")
    for name, p in zip(names, params):
        if p.ndim < 2:
            raise ValueError(
                f"Muon group holds {name!r} of shape {tuple(p.shape)}: Muon orthogonalizes matrices "
                "only; put 1-D parameters in a group with use_muon=False"
            )
