"""Which parameters Muon orthogonalizes and which go the AdamW way.

Rule (Moonlight): matrices (``ndim >= 2``) of the hidden layers go to Muon; embeddings, the LM
head and every 1-D parameter (norm gains, biases) go to AdamW. Names can override the rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

import torch
from torch import nn

ADAMW_NAME_PATTERNS = ("*embed*", "*lm_head*", "*wte*", "*wpe*")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def split_muon_params(
    named_params: Iterable[tuple[str, nn.Parameter]],
    *,
    muon_names: Iterable[str] = (),
    adamw_names: Iterable[str] = (),
) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """Split ``(name, param)`` pairs into (muon, adamw) lists.

    ``muon_names`` / ``adamw_names`` are exact names or fnmatch patterns that override the rule;
    a name in both is an error, and so is a 1-D parameter forced into the Muon set.
    """
    muon_names, adamw_names = tuple(muon_names), tuple(adamw_names)
    muon, adamw = [], []
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
        (muon if use_muon else adamw).append((name, param))
    return muon, adamw


def muon_param_groups(
    model: nn.Module, *, muon_names: Iterable[str] = (), adamw_names: Iterable[str] = ()
) -> list[dict]:
    """Param groups for :class:`~muon_repro.optim.Muon` (``use_muon`` True/False) from a model.

    Each group also carries ``names`` (parameter names, for logging and checkpoints).
    """
    muon, adamw = split_muon_params(model.named_parameters(), muon_names=muon_names, adamw_names=adamw_names)
    groups = []
    for use_muon, members in ((True, muon), (False, adamw)):
        if members:
            groups.append({"params": [p for _, p in members], "names": [n for n, _ in members], "use_muon": use_muon})
    return groups


def check_muon_group(params: Iterable[torch.Tensor], names: Iterable[str] | None = None) -> None:
    """Raise ``ValueError`` for any parameter in a Muon group that is not a matrix."""
    params = list(params)
    names = list(names) if names is not None else [f"params[{i}]" for i in range(len(params))]
    for name, p in zip(names, params):
        if p.ndim < 2:
            raise ValueError(
                f"Muon group holds {name!r} of shape {tuple(p.shape)}: Muon orthogonalizes matrices "
                "only; put 1-D parameters in a group with use_muon=False"
            )
