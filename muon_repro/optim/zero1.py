"""ZeRO-1 over data parallel: the base both distributed optimizers share (arXiv 2502.16982, Algorithm 1).

Each rank keeps the full TP-local parameters (as views into one flat buffer, laid out by a
:class:`~muon_repro.optim.layout.ShardPlan`) but optimizer state only for its DP shard of it.
:class:`ZeroOneOptimizer` holds the flat buffers, the inverse pair that brackets every step::

    dp_reduce_scatter   every rank's full gradients -> this rank's averaged gradient shard
    dp_all_gather       this rank's updated parameter shards -> every DP rank's full parameters

and AdamW's element-wise step on this rank's shard, the optimizer-state accounting and the
checkpoint checks. What happens between the pair is the subclasses' (:mod:`muon_repro.optim.distributed`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from muon_repro.optim.hyperparameters import MOMENT_KEYS, CheckedParamGroups, check_dense_grads
from muon_repro.optim.layout import ParamSpec, ShardPlan
from muon_repro.optim.muon import adamw_group_step
from muon_repro.optim.param_groups import MODEL_INDICES, check_muon_group
from muon_repro.parallel import comm
from muon_repro.parallel.mesh import ParallelDims
from muon_repro.parallel.tensor_parallel import tp_partition_dim
from muon_repro.phases import DP_ALL_GATHER, DP_REDUCE_SCATTER
from muon_repro.values import is_index

REDUCE_DTYPES = (torch.float32, torch.bfloat16)  # what gradients may travel in: the sum of an integer grad truncates


@dataclass
class StepStats:
    """What one rank did in its last ``step()``."""

    ns_calls: int = 0
    ns_flops: int = 0
    transient_bytes: int = 0  # largest set of gather/shard buffers alive at once
    update_rms: dict[str, torch.Tensor] = field(default_factory=dict)  # matrices this rank orthogonalized


def _members_in_model_order(param_groups: list[dict]) -> list[tuple[torch.Tensor, dict, str]]:
    """``(param, group, name)`` of every parameter, in model order.

    The model order comes from the groups' ``model_indices`` (set by
    :func:`~muon_repro.optim.muon_param_groups`) when every group has them; otherwise it is the
    order the parameters appear in the groups. Muon groups must hold matrices only.
    """
    members, indices = [], []
    with_indices = [MODEL_INDICES in group for group in param_groups]
    if any(with_indices) and not all(with_indices):
        missing = [g for g, has in enumerate(with_indices) if not has]
        raise ValueError(f"param_groups {missing} have no {MODEL_INDICES!r} while others do: give every group one, or none")
    for g, group in enumerate(param_groups):
        params = group["params"]
        names = group.get("names") or [f"param_groups[{g}].params[{i}]" for i in range(len(params))]
        if len(names) != len(params):
            raise ValueError(f"param_groups[{g}] has {len(params)} params but {len(names)} names")
        if group["use_muon"]:
            check_muon_group(params, names)
        group_indices = group.get(MODEL_INDICES, range(len(indices), len(indices) + len(params)))
        if len(group_indices) != len(params):
            raise ValueError(f"param_groups[{g}] has {len(params)} params but {len(group_indices)} {MODEL_INDICES}")
        members += [(p, group, name) for p, name in zip(params, names)]
        indices += list(group_indices)
    seen: dict[int, str] = {}
    for p, _, name in members:  # torch only warns: here the twice-listed parameter would be stepped twice per step
        if id(p) in seen:
            raise ValueError(f"{name} is {seen[id(p)]} again: give each parameter once, in one param group")
        seen[id(p)] = name
    if not all(is_index(i) for i in indices) or len(set(indices)) != len(indices):
        raise ValueError(f"{MODEL_INDICES} must be distinct non-negative integers, got {indices}")
    return [m for _, m in sorted(zip(indices, members), key=lambda pair: pair[0])]


def _exact_repr(value: object) -> str:
    """``repr`` that tells any two different values apart: a tensor's own rounds to 4 decimals, so two ranks given lr
    tensors 0.01 and 0.01004 would look alike. A Python float's repr is exact (it reads back to the same bits)."""
    if isinstance(value, torch.Tensor):
        return f"tensor({value.dtype}, {tuple(value.shape)}, {value.detach().cpu().tolist()!r})"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({', '.join(_exact_repr(v) for v in value)})"
    return repr(value)


class ZeroOneOptimizer(CheckedParamGroups, torch.optim.Optimizer):
    """Flat buffers, the DP reduce-scatter / all-gather pair, and AdamW on this rank's shard.

    The flat buffer follows Megatron's order, the reverse of the model's (see
    :mod:`muon_repro.optim.layout`); the model order comes from the param groups'
    ``model_indices`` (:func:`~muon_repro.optim.muon_param_groups` records them), else from the
    order of the parameters in the groups. Subclasses decide what happens between the
    reduce-scatter and the parameter all-gather.

    Every parameter is laid out in the flat buffer at construction and stepped on every ``step()``, as in
    Megatron's distributed optimizer: a parameter whose ``.grad`` is None on a rank adds zeros to the DP
    average (another rank's gradient for it still counts), and weight decay and momentum still apply, where
    ``torch.optim`` would skip it. So frozen parameters (``requires_grad=False``) are refused at construction,
    and so are param groups added later (the buffer cannot grow): build a new optimizer instead. The ranks of each
    DP and TP group check at construction that they were given the same configuration.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        dims: ParallelDims,
        defaults: dict,
        layout: str,
        bucket_elems: int | None,
        reduce_dtype: torch.dtype,
        ns_unit_elems: int | None = None,
    ) -> None:
        if reduce_dtype not in REDUCE_DTYPES:
            names = ", ".join(str(d) for d in REDUCE_DTYPES)
            raise ValueError(f"reduce_dtype must be one of {names}, got {reduce_dtype!r}")
        super().__init__(params, defaults)
        self.dims = dims
        self.reduce_dtype = reduce_dtype
        # Parameters in model order (the plan lays the buffer out in reverse, as Megatron does).
        members = _members_in_model_order(self.param_groups)
        self._params: list[torch.Tensor] = [p for p, _, _ in members]
        self._groups: list[dict] = [group for _, group, _ in members]
        specs = [
            ParamSpec(name, tuple(p.shape), tp_partition_dim(p), dims.tp, bool(group["use_muon"])) for p, group, name in members
        ]
        frozen = [name for p, _, name in members if not p.requires_grad]
        if frozen:
            raise ValueError(
                f"{len(frozen)} parameter(s) do not require grad ({', '.join(frozen[:3])}{', ...' if len(frozen) > 3 else ''}): "
                "a ZeRO-1 optimizer steps every parameter it holds, with weight decay; leave frozen parameters out of "
                "its param groups"
            )
        self.plan = ShardPlan(specs, dims.dp, layout, bucket_elems, ns_unit_elems)
        self.stats = StepStats()
        self._check_ranks_agree()
        self._build_flat_buffers()

    def __getstate__(self) -> dict:
        """Refused: torch's optimizers pickle and deep-copy their groups and state alone, which would leave this one
        without its plan, process groups and flat buffers (the copy fails at its first ``step()``)."""
        raise TypeError(
            f"a {type(self).__name__} cannot be copied or pickled: it holds process groups and the flat buffers its "
            "model's parameters view; save its state_dict() and load it into one built for the other model"
        )

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group`` while constructing; afterwards refused: every parameter's place in the flat
        buffer is fixed when the optimizer is built."""
        if hasattr(self, "plan"):  # set once torch's __init__ has added the constructor's groups
            raise ValueError(
                f"{type(self).__name__} lays out its flat buffer when it is built, so it cannot take a param group "
                "later; build a new optimizer with every group"
            )
        super().add_param_group(param_group)

    def _check_ranks_agree(self) -> None:
        """Refuse to build when the ranks of this rank's DP or TP group were given other hyperparameters, dtypes or
        layout: a rank whose process read another config would train its shard with them, silently (each DP shard
        stepped with its own lr). One small all-reduce per group, at construction (:func:`comm.group_agrees`)."""
        settings = [
            type(self).__name__,
            self.plan.fingerprint(),
            str(self.reduce_dtype),
            str(getattr(self, "gather_dtype", None)),
            getattr(self, "overlap", None),
            [{key: _exact_repr(value) for key, value in sorted(group.items()) if key != "params"} for group in self.param_groups],
        ]
        digest = int.from_bytes(hashlib.sha256(repr(settings).encode()).digest()[:8], "big") >> 2
        device = self._params[0].device
        # both groups asked before raising: a rank that stopped at the first would leave the second's members waiting
        apart = [g for g in (self.dims.dp_group, self.dims.tp_group) if not comm.group_agrees(digest, g, device)]
        if apart:
            said = " and ".join(f"{g.name} group {list(g.ranks)}" for g in apart)
            raise ValueError(
                f"the ranks of {said} built {type(self).__name__} with different param groups, hyperparameters, dtypes "
                "or layout: give every rank the same configuration"
            )

    # ---------------------------------------------------------------- buffers

    def _build_flat_buffers(self) -> None:
        """Move every parameter into ``param_flat`` (the model keeps views) and map this rank's shard."""
        device = self._params[0].device
        dp_rank = self.dims.dp_rank
        self.param_flat = torch.zeros(self.plan.total, dtype=torch.float32, device=device)
        self.grad_flat = torch.zeros(self.plan.total, dtype=self.reduce_dtype, device=device)
        for slot, p in zip(self.plan.slots, self._params):
            if p.dtype != torch.float32:
                raise ValueError(f"parameter {slot.spec.name!r} is {p.dtype}; the ZeRO-1 optimizers keep fp32 parameters")
            view = self.param_flat[slot.flat_start : slot.flat_start + slot.spec.numel]
            view.copy_(p.detach().reshape(-1))
            p.data = view.view_as(p)
        # Where each parameter must live for step() to see it (checked every step, computed once).
        self._param_ptrs = [p.data_ptr() for p in self._params]
        # This rank's shard of every bucket, back to back.
        self._shard_base = []
        base = 0
        for bucket in self.plan.buckets:
            self._shard_base.append(base)
            base += bucket.shard_size
        self.grad_shard = torch.zeros(base, dtype=self.reduce_dtype, device=device)
        self._my_pieces = []  # (slot, piece, param view, offset in the grad shard), in flat order
        for slot, piece in self.plan.pieces_of(dp_rank):
            bucket = self.plan.buckets[slot.bucket]
            grad_offset = self._shard_base[slot.bucket] + piece.flat_start - bucket.shard_start(dp_rank)
            param_view = self.param_flat[piece.flat_start : piece.flat_start + piece.length]
            self._my_pieces.append((slot, piece, param_view, grad_offset))

    def _check_params(self) -> None:
        for slot, p, ptr in zip(self.plan.slots, self._params, self._param_ptrs):
            if p.data_ptr() != ptr or tuple(p.shape) != slot.spec.local_shape:
                raise ValueError(
                    f"parameter {slot.spec.name!r} (shape {tuple(p.shape)}) no longer lives in the optimizer's "
                    f"flat buffer (expected shape {slot.spec.local_shape}); build the optimizer after the model "
                    "is final and do not reassign parameter data"
                )
            check_dense_grads([p], type(self).__name__)
            if p.grad is not None and p.grad.shape != p.shape:
                raise ValueError(f"gradient of {slot.spec.name!r} has shape {tuple(p.grad.shape)}, expected {tuple(p.shape)}")

    def _grad_view(self, grad_offset: int, length: int) -> torch.Tensor:
        """A piece's averaged gradient: ``length`` values of ``grad_mean`` from ``grad_offset``."""
        return self.grad_mean[grad_offset : grad_offset + length]

    # ---------------------------------------------------------------- reduce-scatter <-> all-gather

    def _dp_reduce_scatter_grads(self) -> None:
        """Every rank's full gradients -> this rank's shard of their DP average: ``grad_mean`` (fp32).

        ``grad_shard`` holds the reduce-scatter's sum in ``reduce_dtype``; with fp32 it is divided in place (no copy),
        so read the average from ``grad_mean``, whatever the dtype."""
        for slot, p in zip(self.plan.slots, self._params):
            dst = self.grad_flat[slot.flat_start : slot.flat_start + slot.spec.numel]
            if p.grad is None:
                dst.zero_()
            else:
                dst.copy_(p.grad.reshape(-1))
        for bucket, base in zip(self.plan.buckets, self._shard_base):
            comm.reduce_scatter_into(
                self.grad_shard[base : base + bucket.shard_size],
                self.grad_flat[bucket.start : bucket.start + bucket.size],
                self.dims.dp_group,
                phase=DP_REDUCE_SCATTER,
            )
        self.grad_mean = self.grad_shard.float().div_(self.dims.dp)

    def _dp_all_gather_params(self) -> None:
        """This rank's updated parameter shards -> every DP rank's full parameters."""
        dp_rank = self.dims.dp_rank
        for bucket in self.plan.buckets:
            start = bucket.shard_start(dp_rank)
            shard = self.param_flat[start : start + bucket.shard_size].clone()
            comm.all_gather_into(
                self.param_flat[bucket.start : bucket.start + bucket.size], shard, self.dims.dp_group, phase=DP_ALL_GATHER
            )

    def _adamw_update(self) -> None:
        """AdamW on this rank's pieces of the parameters it routes to AdamW, each param group's pieces at once."""
        by_group: dict[int, tuple[dict, list[dict], list[torch.Tensor], list[torch.Tensor]]] = {}
        for slot, piece, param_view, grad_offset in self._my_pieces:
            if not slot.spec.use_muon:
                group = self._groups[slot.index]
                _, states, params, grads = by_group.setdefault(id(group), (group, [], [], []))
                states.append(self.state[self._params[slot.index]])
                params.append(param_view)
                grads.append(self._grad_view(grad_offset, piece.length))
        for group, states, params, grads in by_group.values():
            adamw_group_step(states, params, grads, group, self.ADAMW_KEYS)

    # ---------------------------------------------------------------- accounting and checkpoints

    def shard_elems_by_rule(self) -> dict[str, int]:
        """Elements of this rank's shard by the update rule the plan routes them to (muon, adamw): what its state
        should hold, independent of what it does hold."""
        out = {"muon": 0, "adamw": 0}
        for slot, piece, _, _ in self._my_pieces:
            out["muon" if slot.spec.use_muon else "adamw"] += piece.length
        return out

    def state_bytes_by_param(self) -> dict[str, int]:
        """Moment-buffer bytes this rank holds for each parameter (0 where it holds no piece)."""
        return {
            slot.spec.name: sum(t.numel() * t.element_size() for k, t in self.state.get(p, {}).items() if k in MOMENT_KEYS)
            for slot, p in zip(self.plan.slots, self._params)
        }

    def state_bytes(self) -> dict[str, int]:
        """Steady-state optimizer state on this rank, split by update rule: Muon momentum, AdamW moments."""
        out = {"muon": 0, "adamw": 0}
        for slot, nbytes in zip(self.plan.slots, self.state_bytes_by_param().values()):
            out["muon" if slot.spec.use_muon else "adamw"] += nbytes
        return out

    def state_dict(self) -> dict:
        sd = super().state_dict()
        sd["zero1"] = self._fingerprint()
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        saved = state_dict.pop("zero1", None)
        mine = self._fingerprint()
        if saved is None:
            raise ValueError("optimizer checkpoint has no 'zero1' entry: it was not saved by a ZeRO-1 optimizer")
        for key in ("optimizer", "buffer_order", "layout", "dp", "tp", "dp_rank", "tp_rank", "bucket_elems"):
            if saved.get(key) != mine[key]:
                raise ValueError(
                    f"optimizer checkpoint was saved with {key}={saved.get(key)!r}, this optimizer has {key}={mine[key]!r}"
                )
        for i, (got, want) in enumerate(zip(saved["params"], mine["params"])):
            if got != want:
                raise ValueError(
                    f"optimizer checkpoint parameter {i} is {got}, but this model has {want}: "
                    "the model does not match the checkpoint's flat buffer"
                )
        if len(saved["params"]) != len(mine["params"]):
            raise ValueError(f"optimizer checkpoint holds {len(saved['params'])} parameters, this model {len(mine['params'])}")
        super().load_state_dict(state_dict)
        # torch puts new dicts in param_groups: point each parameter at its new group, or a step
        # would keep reading the old groups' hyperparameters (an lr schedule set on param_groups lost).
        self._groups = [group for _, group, _ in _members_in_model_order(self.param_groups)]

    def _fingerprint(self) -> dict:
        return {
            "optimizer": type(self).__name__,
            "tp": self.dims.tp,
            "dp_rank": self.dims.dp_rank,
            "tp_rank": self.dims.tp_rank,
            **self.plan.fingerprint(),
        }
