"""Megatron-style vocab-parallel cross-entropy: the loss from each TP rank's logits shard, no gather.

Rank ``r`` holds ``logits_local = logits[:, vocab_start : vocab_start + V/tp]`` (the column-parallel
LM head's output, ``[tokens, V/tp]``). In fp32, with three all-reduces of ``[tokens]`` each::

    m       = all_reduce_MAX( max_j logits_local[:, j] )                  the row max over the whole vocab
    z_t     = all_reduce_SUM( logits_local[:, t - vocab_start] - m  where t is in this rank's range, else 0 )
    s       = all_reduce_SUM( sum_j exp(logits_local[:, j] - m) )         the softmax denominator
    loss    = mean over tokens of ( log(s) - z_t )                        = log sum_j exp(logit_j) - logit_t

Why it is the same function as ``F.cross_entropy`` on the gathered logits: the max is a MAX
(exact, no rounding), so every rank shifts by the full row's max as ``log_softmax`` does; exactly one
rank owns each target, so the target's SUM adds one value and zeros (exact); only ``s`` is a sum of
partial sums, which reorders floating-point additions and nothing else.

Backward is local: ``d loss / d logits_local = (softmax_local - onehot_local) * grad / tokens``, from
the softmax shard saved by forward (``exp(logits_local - m) / s``) and the mask of the targets this
rank owns. The input gradient of the LM head is then summed over ranks by its ``copy_to_tp``, as
with gathered logits. The reductions go through :func:`muon_repro.parallel.comm.all_reduce_`, so they
are timed and ledgered under the ``tp_all_reduce`` phase.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from muon_repro.parallel.comm import Group, all_reduce_
from muon_repro.parallel.tensor_parallel import check_token_ids
from muon_repro.phases import TP_ALL_REDUCE

__all__ = ["vocab_parallel_cross_entropy"]


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over the vocabulary split across ``group``; see the module docstring."""

    @staticmethod
    def forward(ctx, logits_local: torch.Tensor, targets: torch.Tensor, group: Group, vocab_start: int) -> torch.Tensor:
        # fp32 as Megatron does: exp and the sums over a large vocabulary lose too much in bf16.
        logits = logits_local.float()
        local_vocab = logits.shape[-1]

        row_max = logits.max(dim=-1).values
        all_reduce_(row_max, group, phase=TP_ALL_REDUCE, op="max")
        shifted = logits - row_max.unsqueeze(-1)  # a new tensor: logits may alias the caller's input

        # Targets in [vocab_start, vocab_start + local_vocab) are this rank's; the others' column is
        # clamped to 0 only so that gather stays in bounds, and their value is zeroed.
        owned = (targets >= vocab_start) & (targets < vocab_start + local_vocab)
        local_targets = (targets - vocab_start).masked_fill(~owned, 0)
        target_logit = shifted.gather(-1, local_targets.unsqueeze(-1)).squeeze(-1).masked_fill(~owned, 0.0)
        all_reduce_(target_logit, group, phase=TP_ALL_REDUCE)

        exp_shifted = shifted.exp_()  # shifted is ours and not needed again: reuse its memory
        sum_exp = exp_shifted.sum(dim=-1)
        all_reduce_(sum_exp, group, phase=TP_ALL_REDUCE)

        loss = (sum_exp.log() - target_logit).mean()
        softmax_local = exp_shifted.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax_local, owned, local_targets)
        ctx.input_dtype = logits_local.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        softmax_local, owned, local_targets = ctx.saved_tensors
        scale = grad_loss / softmax_local.shape[0]  # d mean / d per-token loss
        # Out of place: the saved softmax must survive a second backward (retain_graph=True).
        grad_logits = softmax_local * scale
        # The one-hot term: -scale at each owned target's column; rows whose target another rank owns
        # add 0 at their clamped column 0. A dense scatter, not boolean indexing, which syncs a GPU.
        one_hot = -scale * owned.to(grad_logits.dtype)
        grad_logits.scatter_add_(-1, local_targets.unsqueeze(-1), one_hot.unsqueeze(-1))
        return grad_logits.to(ctx.input_dtype), None, None, None


def vocab_parallel_cross_entropy(
    logits_local: torch.Tensor, targets: torch.Tensor, group: Group, vocab_start: int
) -> torch.Tensor:
    """Mean cross-entropy of ``targets`` (``[tokens]``, int64 indices into the full vocabulary) under
    the logits whose columns ``[vocab_start, vocab_start + V/tp)`` this rank holds (``[tokens, V/tp]``).

    Every rank of ``group`` calls it with its own shard and the same targets, and gets the same loss.
    Every target counts (no ``ignore_index``). On a group of one rank it is ``F.cross_entropy``.
    """
    if logits_local.dim() != 2:
        raise ValueError(
            f"vocab_parallel_cross_entropy: logits_local must be [tokens, vocab/tp], got shape {tuple(logits_local.shape)}"
        )
    if targets.dim() != 1 or targets.shape[0] != logits_local.shape[0]:
        raise ValueError(
            f"vocab_parallel_cross_entropy: targets must be [tokens] = [{logits_local.shape[0]}] to match logits_local "
            f"{tuple(logits_local.shape)}, got shape {tuple(targets.shape)}"
        )
    if targets.dtype != torch.long:
        raise ValueError(f"vocab_parallel_cross_entropy: targets must be int64 class indices, got dtype {targets.dtype}")
    if vocab_start < 0 or (group.size == 1 and vocab_start != 0):
        raise ValueError(
            f"vocab_parallel_cross_entropy: vocab_start={vocab_start} is not a shard's first column "
            f"(group {group.name!r} of {group.size} rank(s))"
        )
    check_token_ids(targets, logits_local.shape[1] * group.size, "vocab_parallel_cross_entropy: targets")
    if group.size == 1:  # the whole vocabulary is here: nothing to reduce
        return F.cross_entropy(logits_local.float(), targets)
    return _VocabParallelCrossEntropy.apply(logits_local, targets, group, vocab_start)
