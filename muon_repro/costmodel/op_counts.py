"""Operator calls of the model's forward and backward: what each costs in dispatch (and profiler) time.

Counted on a narrow replica of the model (:func:`narrow_training_step`, widths of 8: its operators with next to
no arithmetic), plus the calls the TP wrappers (:mod:`muon_repro.parallel.tensor_parallel`) and the
vocab-parallel cross-entropy (:mod:`muon_repro.parallel.cross_entropy`) make beside their collectives.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from muon_repro.model_config import GPTConfig

CROSS_ENTROPY_REDUCTIONS = 3  # vocab-parallel: all-reduce the max, the target's logit, the sum of exponentials
# TP wrappers' extra calls besides the collective: the all-reduce clones its input; the logits' gather
# reshapes; the vocab-parallel embedding masks.
TP_ALL_REDUCE_OPS = 2
TP_ALL_GATHER_OPS = 5
TP_EMBEDDING_OPS = 8
# The vocab-parallel cross-entropy's calls beyond the full one's: the masked target lookup, the three
# reductions' buffers, the local softmax pieces.
VOCAB_PARALLEL_CE_OPS = 12


@functools.lru_cache(maxsize=32)
def model_op_counts(n_layers: int, qkv: str, tp: int, vocab_parallel: bool = False) -> tuple[int, int]:
    """Operator calls of one forward and one backward: counted on a narrow replica of the model
    (the count depends on the layers and the QKV mode, not on the widths), plus the TP wrappers': the
    logits' gather, or with ``vocab_parallel`` the vocab-parallel cross-entropy's calls instead."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls += 1
            return func(*args, **(kwargs or {}))

    step = narrow_training_step(n_layers, qkv)
    with _Count() as forward:
        loss = step.forward()
    with _Count() as backward:
        loss.backward()
    if tp == 1:
        return forward.calls, backward.calls
    all_reduces = 2 * n_layers + 1
    # no gather of the logits (its reshapes go too), the reductions' own calls instead
    loss = VOCAB_PARALLEL_CE_OPS + CROSS_ENTROPY_REDUCTIONS * TP_ALL_REDUCE_OPS if vocab_parallel else TP_ALL_GATHER_OPS
    extra_forward = all_reduces * TP_ALL_REDUCE_OPS + loss + TP_EMBEDDING_OPS
    return forward.calls + extra_forward, backward.calls + all_reduces * TP_ALL_REDUCE_OPS


def stage_op_counts(
    n_layers: int, qkv: str, tp: int, vocab_parallel: bool = False, embedding: bool = True, head: bool = True
) -> tuple[int, int]:
    """Operator calls of one forward and one backward of ``n_layers`` blocks, with the embedding and the head (the
    final norm, LM head and loss) where held: the whole model's count (:func:`model_op_counts`) with both. A pipeline
    stage's blocks take the count's per-block slope; the calls outside the blocks (a few for the embedding, most for
    the head and loss) go to the stage holding the head, the TP wrappers' to the stage of the layer they wrap."""
    if embedding and head:
        return model_op_counts(n_layers, qkv, tp, vocab_parallel)
    one, two = model_op_counts(1, qkv, 1), model_op_counts(2, qkv, 1)
    per_block = [b - a for a, b in zip(one, two)]
    outside = [a - p for a, p in zip(one, per_block)]
    forward, backward = (n_layers * p + (o if head else 0) for p, o in zip(per_block, outside))
    if tp > 1:
        loss = VOCAB_PARALLEL_CE_OPS + CROSS_ENTROPY_REDUCTIONS * TP_ALL_REDUCE_OPS if vocab_parallel else TP_ALL_GATHER_OPS
        forward += 2 * n_layers * TP_ALL_REDUCE_OPS
        forward += (TP_ALL_REDUCE_OPS + TP_EMBEDDING_OPS if embedding else 0) + (loss if head else 0)
        backward += (2 * n_layers + head) * TP_ALL_REDUCE_OPS  # the LM head's input gradient: one more all-reduce
    return forward, backward


@dataclass(frozen=True)
class NarrowStep:
    """The model's forward at widths of 8 (on one process): its operators with next to no arithmetic."""

    model: object
    tokens: object

    def forward(self):
        return self.model(self.tokens, self.tokens)


def narrow_training_step(n_layers: int = 2, qkv: str = "fused", device: str = "cpu") -> NarrowStep:
    """A replica of the model at widths of 8: what counts its operators, and what calibrate times per operator."""
    import torch

    from muon_repro.model import GPT
    from muon_repro.parallel.comm import Group

    narrow = GPTConfig(vocab_size=8, hidden=8, n_layers=n_layers, n_heads=2, ffn_hidden=8, max_seq_len=4, qkv=qkv)
    return NarrowStep(GPT(narrow, Group.single("tp"), device=device), torch.zeros((1, 4), dtype=torch.long, device=device))
