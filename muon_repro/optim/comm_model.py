"""Analytic communication per optimizer step, per rank, per phase (ring model, ``docs/method.md#communication-model``).

Everything here follows from the TP-local parameter shapes, ``dp``, ``tp``, the layout and the
dtypes: it builds the same :class:`~muon_repro.optim.layout.ShardPlan` the optimizers build, and
prices each collective they issue with :func:`~muon_repro.formulas.ring_bytes`.
The run-time byte ledger must agree with it exactly (the tests check this per phase).

In closed form, with ``N`` TP-local elements, ``f`` the fraction of them DP-gathered and
``b_g``, ``b_p``, ``b_ns`` the bytes per element of gradients, parameters and NS gathers::

    AdamW  (d-1)/d * N * (b_g + b_p)
    Muon   AdamW + (d-1)/d * f * N * b_ns          on the DP group
                 + (t-1) * N_ns * b_ns             on the TP group (N_ns: TP-local elements
                                                   of the matrices this rank orthogonalizes)

up to padding, which the plan counts exactly.

Optimizer state per rank comes from the same plan (:func:`state_bytes`, :func:`compare_state`):
4 bytes per element Muon manages (one fp32 momentum), 8 per element AdamW manages (two moments).
With Muon matrices a fraction ``f`` of the elements, the whole-model Muon/AdamW state ratio is
``1 - f/2`` when the state is spread evenly over the DP ranks, and no rank's layout can bring
the largest rank below it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from muon_repro.formulas import ring_bytes
from muon_repro.optim.layout import ParamSpec, ShardPlan
from muon_repro.optim.param_groups import split_muon_params
from muon_repro.parallel.tensor_parallel import tp_partition_dim
from muon_repro.phases import DP_ALL_GATHER, DP_GATHER, DP_REDUCE_SCATTER, OPTIMIZER_COMM_PHASES, TP_GATHER


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def param_specs(
    named_params: Iterable[tuple[str, nn.Parameter]],
    tp: int,
    *,
    muon: bool = True,
    muon_names: Iterable[str] = (),
    adamw_names: Iterable[str] = (),
) -> list[ParamSpec]:
    """Specs of a model's trainable TP-local parameters, in model order (as the optimizers give them to their plan).

    ``muon=False`` marks every parameter AdamW (the AdamW optimizers' view of the same model).
    """
    named_params = list(named_params)
    muon_set, _ = split_muon_params(named_params, muon_names=muon_names, adamw_names=adamw_names)
    muon_ids = {id(p) for _, p in muon_set}
    return [
        ParamSpec(name, tuple(p.shape), tp_partition_dim(p), tp, muon and id(p) in muon_ids)
        for name, p in named_params
        if p.requires_grad
    ]


def _optimizer_plan(
    specs: list[ParamSpec], dp: int, optimizer: str, layout: str, bucket_elems: int | None, ns_unit_elems: int | None = None
) -> ShardPlan:
    """The plan ``optimizer`` (``"muon"`` or ``"adamw"``) builds for ``specs``."""
    if optimizer not in ("muon", "adamw"):
        raise ValueError(f"optimizer must be 'muon' or 'adamw', got {optimizer!r}")
    if optimizer == "adamw":
        specs = [ParamSpec(s.name, s.local_shape, s.tp_dim, s.tp, False) for s in specs]
    return ShardPlan(specs, dp, layout, bucket_elems, ns_unit_elems if optimizer == "muon" else None)


def _check_dp_rank(dp_rank: int, dp: int) -> None:
    if not 0 <= dp_rank < dp:
        raise ValueError(f"dp_rank must be in [0, {dp}), got {dp_rank}")


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
    ns_unit_elems: int | None = None,
) -> dict[str, int]:
    """Bytes DP rank ``dp_rank`` (any TP rank) sends in one step, per phase.

    ``specs`` in model order (:func:`param_specs`, or an optimizer's ``plan.specs``).
    ``optimizer`` is ``"muon"`` or ``"adamw"``. Phases with nothing to send are reported as 0.
    ``ns_unit_elems`` (Muon's cap on its Newton-Schulz units) changes only the DP gathers' padding.
    """
    _check_dp_rank(dp_rank, dp)
    plan = _optimizer_plan(specs, dp, optimizer, layout, bucket_elems, ns_unit_elems)
    out = dict.fromkeys(OPTIMIZER_COMM_PHASES, 0)
    for bucket in plan.buckets:
        out[DP_REDUCE_SCATTER] += ring_bytes("reduce_scatter", bucket.size, _size(reduce_dtype), dp)
        out[DP_ALL_GATHER] += ring_bytes("all_gather", bucket.size, _size(param_dtype), dp)
    if optimizer == "muon":
        for unit in plan.ns_units:
            if unit.dp_gathered:
                out[DP_GATHER] += ring_bytes("all_gather", dp * unit.send_elems, _size(gather_dtype), dp)
            tp_elems = sum(
                plan.slots[i].spec.numel for i in plan.ns_slots(unit, dp_rank) if plan.slots[i].spec.tp_dim is not None
            )
            if tp_elems:
                out[TP_GATHER] += ring_bytes("all_gather", tp * tp_elems, _size(gather_dtype), tp)
    return out


def bytes_ratio(muon: dict[str, int], adamw: dict[str, int], phases: Iterable[str] = OPTIMIZER_COMM_PHASES) -> float | None:
    """Muon's bytes over AdamW's, summed over ``phases``; None when AdamW sends nothing (dp=1)."""
    phases = tuple(phases)
    adamw_total = sum(adamw[p] for p in phases)
    return sum(muon[p] for p in phases) / adamw_total if adamw_total else None


# ---------------------------------------------------------------- optimizer state

MUON_STATE_BYTES_PER_ELEM = 4  # one fp32 momentum
ADAMW_STATE_BYTES_PER_ELEM = 8  # two fp32 moments


def state_bytes(
    specs: list[ParamSpec], *, dp: int, dp_rank: int, optimizer: str, layout: str = "contiguous", bucket_elems: int | None = None
) -> dict[str, int]:
    """Steady-state optimizer state DP rank ``dp_rank`` (any TP rank) holds, from the shard plan.

    ``{"muon": momentum bytes, "adamw": moment bytes}``, the split of
    :meth:`~muon_repro.optim.zero1.ZeroOneOptimizer.state_bytes` after a step.
    """
    _check_dp_rank(dp_rank, dp)
    plan = _optimizer_plan(specs, dp, optimizer, layout, bucket_elems)
    out = {"muon": 0, "adamw": 0}
    for slot, piece in plan.pieces_of(dp_rank):
        if slot.spec.use_muon:
            out["muon"] += piece.length * MUON_STATE_BYTES_PER_ELEM
        else:
            out["adamw"] += piece.length * ADAMW_STATE_BYTES_PER_ELEM
    return out


def muon_managed_state_bytes(
    specs: list[ParamSpec], *, dp: int, dp_rank: int, optimizer: str, layout: str = "contiguous", bucket_elems: int | None = None
) -> int:
    """State DP rank ``dp_rank`` holds for the matrices Muon manages (``use_muon`` specs), under ``optimizer``.

    Under AdamW these matrices keep two moments, under Muon one momentum; with the same shard
    boundaries (``contiguous``, ``bucketed``) a rank's Muon value is exactly half its AdamW one.
    """
    _check_dp_rank(dp_rank, dp)
    plan = _optimizer_plan(specs, dp, optimizer, layout, bucket_elems)
    per_elem = MUON_STATE_BYTES_PER_ELEM if optimizer == "muon" else ADAMW_STATE_BYTES_PER_ELEM
    return sum(piece.length * per_elem for slot, piece in plan.pieces_of(dp_rank) if specs[slot.index].use_muon)


@dataclass(frozen=True)
class StateComparison:
    """Optimizer state per DP rank under Muon and under AdamW, for one model, ``dp`` and layout.

    Lists are indexed by DP rank (every TP rank of a DP rank holds the same). Ratios are Muon
    over AdamW: ``muon_managed_ratio`` for the Muon matrices only (None where a rank holds none
    of them), ``whole_model_ratio`` for all the state of the rank, ``largest_rank_ratio`` for the
    largest rank under each (what limits memory). ``even_floor`` is ``1 - f/2`` with ``f`` the
    Muon matrices' fraction of the elements: the whole-model ratio when state is spread evenly,
    and a lower bound on ``largest_rank_ratio``.
    """

    muon: list[dict[str, int]]
    adamw: list[dict[str, int]]
    muon_managed_ratio: list[float | None]
    whole_model_ratio: list[float | None]
    largest_rank_ratio: float | None
    muon_fraction: float
    even_floor: float


def compare_state(
    specs: list[ParamSpec], *, dp: int, layout: str = "contiguous", bucket_elems: int | None = None
) -> StateComparison:
    """Muon's and AdamW's optimizer state on every DP rank, from the shard plans alone (no training).

    The whole-model ratio cannot fall below ``1 - f/2`` on the largest rank: Muon keeps
    ``4 f N + 8 (1-f) N`` bytes in all against AdamW's ``8 N``, and the largest rank holds at
    least the mean. The flat buffer's order decides how close a layout gets to that floor.
    """
    kw = {"dp": dp, "layout": layout, "bucket_elems": bucket_elems}
    muon = [state_bytes(specs, dp_rank=r, optimizer="muon", **kw) for r in range(dp)]
    adamw = [state_bytes(specs, dp_rank=r, optimizer="adamw", **kw) for r in range(dp)]
    managed = [
        _ratio(
            muon_managed_state_bytes(specs, dp_rank=r, optimizer="muon", **kw),
            muon_managed_state_bytes(specs, dp_rank=r, optimizer="adamw", **kw),
        )
        for r in range(dp)
    ]
    totals_muon, totals_adamw = [sum(m.values()) for m in muon], [sum(a.values()) for a in adamw]
    elems = sum(s.numel for s in specs)
    fraction = sum(s.numel for s in specs if s.use_muon) / elems
    return StateComparison(
        muon=muon,
        adamw=adamw,
        muon_managed_ratio=managed,
        whole_model_ratio=[_ratio(m, a) for m, a in zip(totals_muon, totals_adamw)],
        largest_rank_ratio=_ratio(max(totals_muon), max(totals_adamw)),
        muon_fraction=fraction,
        even_floor=1 - fraction / 2,
    )


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None
