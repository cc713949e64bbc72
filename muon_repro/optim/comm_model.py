"""Analytic communication per optimizer step, per rank, per phase (ring model, DESIGN.md §4).

Everything here follows from the TP-local parameter shapes, ``dp``, ``tp``, the layout and the
dtypes: it builds the same :class:`~muon_repro.optim.layout.ShardPlan` the optimizers build, and
prices each collective they issue with :func:`~muon_repro.parallel.comm.ring_bytes_per_rank`.
The run-time byte ledger must agree with it exactly (the tests check this per phase).

In closed form, with ``N`` TP-local elements, ``f`` the fraction of them DP-gathered and
``b_g``, ``b_p``, ``b_ns`` the bytes per element of gradients, parameters and NS gathers::

    AdamW  (d-1)/d * N * (b_g + b_p)
    Muon   AdamW + (d-1)/d * f * N * b_ns          on the DP group
                 + (t-1) * N_ns * b_ns             on the TP group (N_ns: TP-local elements
                                                   of the matrices this rank orthogonalizes)

up to padding, which the plan counts exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from muon_repro.optim.layout import ParamSpec, ShardPlan
from muon_repro.optim.param_groups import split_muon_params
from muon_repro.parallel.comm import ring_bytes_per_rank
from muon_repro.parallel.tensor_parallel import tp_partition_dim

OPTIMIZER_PHASES = ("dp_reduce_scatter", "dp_gather", "tp_gather", "dp_all_gather")
DP_PHASES = ("dp_reduce_scatter", "dp_gather", "dp_all_gather")


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def param_specs(
    named_params: Iterable[tuple[str, nn.Parameter]], tp: int, *, muon: bool = True, muon_names: Iterable[str] = (), adamw_names: Iterable[str] = ()
) -> list[ParamSpec]:
    """Specs of a model's TP-local parameters, in the optimizer's order (Muon group first).

    ``muon=False`` marks every parameter AdamW (the AdamW optimizers' view of the same model).
    """
    muon_set, adamw_set = split_muon_params(named_params, muon_names=muon_names, adamw_names=adamw_names)
    return [
        ParamSpec(name, tuple(p.shape), tp_partition_dim(p), tp, muon and use_muon)
        for use_muon, members in ((True, muon_set), (False, adamw_set))
        for name, p in members
    ]


def optimizer_bytes(
    specs: list[ParamSpec],
    *,
    dp: int,
    tp: int,
    dp_rank: int,
    optimizer: str,
    layout: str = "contiguous",
    bucket_elems: int | None = None,
    reduce_dtype: torch.dtype = torch.float32,
    param_dtype: torch.dtype = torch.float32,
    gather_dtype: torch.dtype = torch.bfloat16,
) -> dict[str, int]:
    """Bytes DP rank ``dp_rank`` (any TP rank) sends in one step, per phase.

    ``optimizer`` is ``"muon"`` or ``"adamw"``. Phases with nothing to send are reported as 0.
    """
    if optimizer not in ("muon", "adamw"):
        raise ValueError(f"optimizer must be 'muon' or 'adamw', got {optimizer!r}")
    if not 0 <= dp_rank < dp:
        raise ValueError(f"dp_rank must be in [0, {dp}), got {dp_rank}")
    if optimizer == "adamw":
        specs = [ParamSpec(s.name, s.local_shape, s.tp_dim, s.tp, False) for s in specs]
    plan = ShardPlan(specs, dp, layout, bucket_elems)
    out = dict.fromkeys(OPTIMIZER_PHASES, 0)
    for bucket in plan.buckets:
        out["dp_reduce_scatter"] += ring_bytes_per_rank("reduce_scatter", bucket.size, _size(reduce_dtype), dp)
        out["dp_all_gather"] += ring_bytes_per_rank("all_gather", bucket.size, _size(param_dtype), dp)
    if optimizer == "muon":
        for unit in plan.ns_units:
            if unit.dp_gathered:
                out["dp_gather"] += ring_bytes_per_rank("all_gather", dp * unit.send_elems, _size(gather_dtype), dp)
            tp_elems = sum(plan.slots[i].spec.numel for i in plan.ns_slots(unit, dp_rank) if plan.slots[i].spec.tp_dim is not None)
            if tp_elems:
                out["tp_gather"] += ring_bytes_per_rank("all_gather", tp * tp_elems, _size(gather_dtype), tp)
    return out


def bytes_ratio(muon: dict[str, int], adamw: dict[str, int], phases: Iterable[str] = OPTIMIZER_PHASES) -> float | None:
    """Muon's bytes over AdamW's, summed over ``phases``; None when AdamW sends nothing (dp=1)."""
    phases = tuple(phases)
    adamw_total = sum(adamw[p] for p in phases)
    return sum(muon[p] for p in phases) / adamw_total if adamw_total else None
