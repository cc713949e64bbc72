"""The vocab-parallel cross-entropy alone: on one process, and on tp in {2, 4} gloo worlds against F.cross_entropy.

Tolerance: as in test_model_tp (normwise, 1e-5 of the reference's largest magnitude). The max and
the target logit are exact; only the sum of exponentials is added in another order.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from test_model_tp import assert_close_normwise

from muon_repro.parallel.comm import Group
from muon_repro.parallel.cross_entropy import _VocabParallelCrossEntropy, vocab_parallel_cross_entropy

TOKENS, VOCAB = 24, 32


def logits_and_targets(offset: float = 0.0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(TOKENS, VOCAB, generator=gen, dtype=torch.float64) + offset).to(dtype)
    return logits, torch.randint(0, VOCAB, (TOKENS,), generator=gen)


# ---------------------------------------------------------------- one process


def test_a_group_of_one_is_f_cross_entropy() -> None:
    logits, targets = logits_and_targets()
    ours = logits.clone().requires_grad_(True)
    theirs = logits.clone().requires_grad_(True)
    loss = vocab_parallel_cross_entropy(ours, targets, Group.single("tp"), 0)
    expected = F.cross_entropy(theirs, targets)
    loss.backward()
    expected.backward()
    assert torch.equal(loss, expected) and torch.equal(ours.grad, theirs.grad)


@pytest.mark.parametrize("offset", [0.0, 500.0], ids=["centred", "large"])
def test_the_autograd_function_is_cross_entropy_with_its_gradient(offset: float) -> None:
    """The Function itself (not the one-rank shortcut), every target owned: its reductions are no-ops
    on a group of one, so forward and backward must be plain cross-entropy and its derivative. Large
    logits would overflow exp without the shift by the max."""
    logits, targets = logits_and_targets(offset)
    group = Group.single("tp")
    ours = logits.clone().requires_grad_(True)
    theirs = logits.clone().requires_grad_(True)
    loss = _VocabParallelCrossEntropy.apply(ours, targets, group, 0)
    expected = F.cross_entropy(theirs, targets)
    (3.0 * loss).backward()
    (3.0 * expected).backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert_close_normwise(loss, expected.detach(), "loss")
    assert_close_normwise(ours.grad, theirs.grad, "grad")


def test_the_backward_agrees_with_finite_differences() -> None:
    """Central differences of the forward. It computes in fp32 (loss ~7, rounding ~5e-7), so the step is
    1e-2: rounding then moves a difference quotient by ~3e-5 and the O(eps^2) truncation far less,
    against gradient entries up to 1/TOKENS ~ 4e-2 (atol 1e-4)."""
    logits, targets = logits_and_targets(dtype=torch.float64)
    torch.autograd.gradcheck(
        lambda x: _VocabParallelCrossEntropy.apply(x, targets, Group.single("tp"), 0),
        (logits.clone().requires_grad_(True),),
        eps=1e-2,
        atol=1e-4,
        rtol=1e-3,
    )


def test_half_precision_logits_are_reduced_in_fp32_and_get_a_gradient_of_their_dtype() -> None:
    logits, targets = logits_and_targets(dtype=torch.bfloat16)
    ours = logits.clone().requires_grad_(True)
    loss = _VocabParallelCrossEntropy.apply(ours, targets, Group.single("tp"), 0)
    loss.backward()
    assert loss.dtype == torch.float32 and ours.grad.dtype == torch.bfloat16
    assert_close_normwise(loss, F.cross_entropy(logits.float(), targets), "loss")


def test_a_second_backward_through_a_retained_graph_gives_the_same_gradient() -> None:
    logits, targets = logits_and_targets()
    ours = logits.clone().requires_grad_(True)
    loss = _VocabParallelCrossEntropy.apply(ours, targets, Group.single("tp"), 0)
    loss.backward(retain_graph=True)
    first = ours.grad.clone()
    loss.backward()
    assert torch.equal(ours.grad, 2 * first)


@pytest.mark.parametrize(
    ("logits_shape", "targets_shape", "dtype", "vocab_start", "message"),
    [
        ((2, 3, VOCAB), (6,), torch.long, 0, "logits_local must be [tokens, vocab/tp], got shape (2, 3, 32)"),
        ((TOKENS, VOCAB), (TOKENS - 1,), torch.long, 0, "targets must be [tokens] = [24] to match logits_local (24, 32)"),
        ((TOKENS, VOCAB), (TOKENS, 1), torch.long, 0, "got shape (24, 1)"),
        ((TOKENS, VOCAB), (TOKENS,), torch.int32, 0, "targets must be int64 class indices, got dtype torch.int32"),
        ((TOKENS, VOCAB), (TOKENS,), torch.long, 8, "vocab_start=8 is not a shard's first column"),
    ],
)
def test_bad_inputs_are_refused(logits_shape, targets_shape, dtype, vocab_start, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        vocab_parallel_cross_entropy(
            torch.zeros(logits_shape), torch.zeros(targets_shape, dtype=dtype), Group.single("tp"), vocab_start
        )


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("bad", [-1, VOCAB])
def test_a_target_outside_the_vocabulary_is_refused(tp: int, bad: int) -> None:
    """At tp > 1 no rank would own it and its target logit would be 0, silently; refused before any all-reduce."""
    from test_model_tp import fake_tp_group

    logits, targets = logits_and_targets()
    group = fake_tp_group(0, tp) if tp > 1 else Group.single("tp")
    targets[5] = bad
    with pytest.raises(ValueError, match=rf"targets must be token ids in \[0, {VOCAB}\)"):
        vocab_parallel_cross_entropy(logits[:, : VOCAB // tp], targets, group, 0)


# ---------------------------------------------------------------- tp in {2, 4} on gloo


@pytest.mark.slow
@pytest.mark.parametrize("tp", [2, 4])
def test_vocab_parallel_loss_and_shard_gradients_match_the_full_vocabulary(tp: int) -> None:
    from tp_workers import vocab_parallel_ce_worker

    from muon_repro.parallel.launch import launch

    # Offset logits: a wrong max (summed, or a rank's own) would underflow exp and give inf, not a near miss.
    logits, targets = logits_and_targets(offset=200.0)
    local_vocab = VOCAB // tp
    assert set((targets // local_vocab).tolist()) == set(range(tp)), "every rank must own some targets"
    full = logits.clone().requires_grad_(True)
    expected = F.cross_entropy(full, targets)
    (2.0 * expected).backward()

    results = launch(vocab_parallel_ce_worker, tp, tp, logits, targets)
    for rank, out in enumerate(results):
        assert_close_normwise(out["loss"], expected.detach(), f"tp={tp} rank {rank} loss")
        assert_close_normwise(
            out["grad"], full.grad[:, rank * local_vocab : (rank + 1) * local_vocab], f"tp={tp} rank {rank} grad"
        )
        # Forward: three all-reduces of one fp32 per token (max, target logit, sum of exp); backward: none.
        assert [(r["phase"], r["op"], r["elements"], r["dtype"], r["group_size"]) for r in out["records"]] == [
            ("tp_all_reduce", "all_reduce", TOKENS, "float32", tp)
        ] * 3
