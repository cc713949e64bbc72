"""Megatron-style tensor parallelism: communication in inverse pairs, and the sharded layers.

The residual stream is replicated on every TP rank. A block enters the parallel region through
``copy_to_tp`` (its backward sums the partial input gradients the ranks computed from their
shards) and leaves it through ``reduce_from_tp`` (its forward sums the partial outputs)::

    x --copy_to_tp--> ColumnParallelLinear --(local heads / local ffn)--> RowParallelLinear --reduce_from_tp--> y

Pairs, each the other's transpose (forward of one = backward of the other):

    copy_to_tp      fwd identity              bwd all-reduce
    reduce_from_tp  fwd all-reduce            bwd identity
    scatter_to_tp   fwd keep own last-dim slice   bwd all-gather along the last dim
    gather_from_tp  fwd all-gather along the last dim   bwd keep own slice

Every transfer goes through :mod:`muon_repro.parallel.comm` (profiler phase + byte ledger) under
the phases ``tp_all_reduce`` and ``tp_all_gather``. On a group of one rank all four are identity.

Sharded parameters carry ``param.tp_partition_dim``: the dim along which the full weight was cut
into ``tp`` equal contiguous chunks in rank order (0: column-parallel and vocab-parallel weights
``[out/tp, in]``; 1: row-parallel weights ``[out, in/tp]``). Replicated parameters have no such
attribute. The distributed optimizer gathers TP shards along this dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from muon_repro.parallel.comm import Group, all_gather_into, all_reduce_
from muon_repro.phases import TP_ALL_GATHER, TP_ALL_REDUCE


def tp_partition_dim(param: torch.Tensor) -> int | None:
    """The dim ``param`` is sharded along across TP ranks, or ``None`` if it is replicated."""
    return getattr(param, "tp_partition_dim", None)


def mark_tp_partition_dim(param: nn.Parameter, dim: int) -> nn.Parameter:
    """Record that ``param`` is this rank's chunk of a full weight cut along ``dim``."""
    param.tp_partition_dim = dim
    return param


def divide(value: int, tp: int, what: str) -> int:
    """``value // tp``, or a ``ValueError`` naming ``what=value`` when tp does not divide it."""
    if value % tp != 0:
        raise ValueError(f"{what}={value} is not divisible by tp={tp}")
    return value // tp


# ---------------------------------------------------------------- last-dim split / gather helpers


def _split_last_dim(x: torch.Tensor, group: Group) -> torch.Tensor:
    """This rank's contiguous chunk of ``x`` along the last dim."""
    size = divide(x.shape[-1], group.size, "last dim")
    return x[..., group.rank * size : (group.rank + 1) * size].contiguous()


def _gather_last_dim(x: torch.Tensor, group: Group) -> torch.Tensor:
    """Concatenate every rank's ``x`` along the last dim, in rank order."""
    t = group.size
    flat = torch.empty(t * x.numel(), dtype=x.dtype, device=x.device)
    all_gather_into(flat, x.contiguous().view(-1), group, phase=TP_ALL_GATHER)
    # flat is [t, *x.shape] rank-major; move the rank axis next to the last dim, then merge.
    stacked = flat.view(t, *x.shape).movedim(0, -2)
    return stacked.reshape(*x.shape[:-1], t * x.shape[-1])


def _all_reduce(x: torch.Tensor, group: Group) -> torch.Tensor:
    # Reduce a copy: the incoming tensor may be shared with (or saved by) other autograd nodes.
    return all_reduce_(x.contiguous().clone(), group, phase=TP_ALL_REDUCE)


# ---------------------------------------------------------------- copy <-> reduce pair


class _CopyToTP(torch.autograd.Function):
    """Enter the TP region: forward identity, backward all-reduce of the gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _all_reduce(grad, ctx.group), None


class _ReduceFromTP(torch.autograd.Function):
    """Leave the TP region: forward all-reduce of the partial outputs, backward identity."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: Group) -> torch.Tensor:
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


# ---------------------------------------------------------------- scatter <-> gather pair


class _ScatterToTP(torch.autograd.Function):
    """Forward keep this rank's last-dim slice, backward all-gather along the last dim."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return _split_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _gather_last_dim(grad, ctx.group), None


class _GatherFromTP(torch.autograd.Function):
    """Forward all-gather along the last dim, backward keep this rank's slice."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return _gather_last_dim(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _split_last_dim(grad, ctx.group), None


def copy_to_tp(x: torch.Tensor, group: Group) -> torch.Tensor:
    """Identity forward; all-reduce of the gradient backward (inverse of ``reduce_from_tp``)."""
    return x if group.size == 1 else _CopyToTP.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group: Group) -> torch.Tensor:
    """All-reduce forward; identity backward (inverse of ``copy_to_tp``)."""
    return x if group.size == 1 else _ReduceFromTP.apply(x, group)


def scatter_to_tp(x: torch.Tensor, group: Group) -> torch.Tensor:
    """Own last-dim slice forward; all-gather backward (inverse of ``gather_from_tp``)."""
    return x if group.size == 1 else _ScatterToTP.apply(x, group)


def gather_from_tp(x: torch.Tensor, group: Group) -> torch.Tensor:
    """All-gather along the last dim forward; own slice backward (inverse of ``scatter_to_tp``)."""
    return x if group.size == 1 else _GatherFromTP.apply(x, group)


# ---------------------------------------------------------------- layers


def _sharded_param(shape: tuple[int, int], dim: int, device: torch.device | str | None) -> nn.Parameter:
    # Values are filled in by the owner (the model initializes full weights, then shards them).
    return mark_tp_partition_dim(nn.Parameter(torch.empty(shape, device=device)), dim)


class ColumnParallelLinear(nn.Module):
    """``y = x @ W.T`` with ``W`` cut along its output dim: weight ``[out/tp, in]``, no bias.

    The input is replicated; the output is this rank's slice of the features, or (with
    ``gather_output``) all of them. ``copy_input=False`` skips ``copy_to_tp`` for callers that
    feed several column-parallel layers from one input and enter the TP region once themselves
    (split Q/K/V: one all-reduce in backward instead of three).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        group: Group,
        *,
        gather_output: bool = False,
        copy_input: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.group = group
        self.in_features = in_features
        self.out_features = out_features
        self.gather_output = gather_output
        self.copy_input = copy_input
        local_out = divide(out_features, group.size, "ColumnParallelLinear out_features")
        self.weight = _sharded_param((local_out, in_features), 0, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.copy_input:
            x = copy_to_tp(x, self.group)
        y = F.linear(x, self.weight)
        return gather_from_tp(y, self.group) if self.gather_output else y

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, tp={self.group.size}, gather_output={self.gather_output}"


class RowParallelLinear(nn.Module):
    """``y = x @ W.T`` with ``W`` cut along its input dim: weight ``[out, in/tp]``, no bias.

    The input is this rank's slice of the features (a column-parallel layer's output); the
    partial products are summed with ``reduce_from_tp``, so the output is replicated.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        group: Group,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.group = group
        self.in_features = in_features
        self.out_features = out_features
        local_in = divide(in_features, group.size, "RowParallelLinear in_features")
        self.weight = _sharded_param((out_features, local_in), 1, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reduce_from_tp(F.linear(x, self.weight), self.group)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, tp={self.group.size}"


def check_token_ids(ids: torch.Tensor, vocab_size: int, what: str) -> None:
    """Every id of ``ids`` in ``[0, vocab_size)``: out of it, a vocab-parallel lookup or loss would find no rank
    owning the id and silently use zeros. On the CPU a ``ValueError`` names the range and the ids found, read through
    NumPy so that the check adds one operator to the step (the view's detach; the cost model counts it) instead of a
    reduction and a read back per end; on an accelerator an asynchronous assert, so that the step never waits on the
    host for it. A meta tensor (no values) is not checked."""
    if ids.device.type == "meta" or not ids.numel():
        return
    if ids.device.type != "cpu":
        torch._assert_async(((ids >= 0) & (ids < vocab_size)).all(), f"{what} must be token ids in [0, {vocab_size})")
        return
    values = ids.numpy()
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{what} must be token ids in [0, {vocab_size}) (the vocabulary), got ids from {low} to {high}")


class VocabParallelEmbedding(nn.Module):
    """Embedding with the vocabulary cut across ranks: weight ``[vocab/tp, hidden]``.

    Each rank looks up the tokens that fall in its vocab range (zeros elsewhere) and
    ``reduce_from_tp`` sums the ranks' rows, so exactly one rank contributes each token.
    """

    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        group: Group,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.group = group
        self.vocab_size = vocab_size
        self.hidden = hidden
        local_vocab = divide(vocab_size, group.size, "VocabParallelEmbedding vocab_size")
        self.vocab_start = group.rank * local_vocab
        self.vocab_end = self.vocab_start + local_vocab
        self.weight = _sharded_param((local_vocab, hidden), 0, device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_token_ids(tokens, self.vocab_size, "tokens")
        if self.group.size == 1:
            return F.embedding(tokens, self.weight)
        outside = (tokens < self.vocab_start) | (tokens >= self.vocab_end)
        local = (tokens - self.vocab_start).masked_fill(outside, 0)
        rows = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(rows, self.group)

    def extra_repr(self) -> str:
        return f"vocab={self.vocab_size}, hidden={self.hidden}, tp={self.group.size}, rows=[{self.vocab_start}, {self.vocab_end})"
