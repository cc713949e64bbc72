"""Worker functions for the multi-process tensor-parallel tests.

They live in their own module (not in a test file) because spawned workers import the function by
name: pytest puts ``tests/`` on ``sys.path`` (rootdir/prepend import mode, tests/ has no
``__init__.py``), and spawned children inherit the parent's ``sys.path``, so ``tp_workers`` imports
in both. Workers return plain tensors and dicts; the comparisons happen in the parent.
"""

from __future__ import annotations

from collections import Counter

import torch

from muon_repro.model import GPT, GPTConfig
from muon_repro.parallel.cross_entropy import vocab_parallel_cross_entropy
from muon_repro.parallel.mesh import ParallelDims
from muon_repro.parallel.tensor_parallel import (
    copy_to_tp,
    gather_from_tp,
    reduce_from_tp,
    scatter_to_tp,
    tp_partition_dim,
)


def _pair_checks(dims: ParallelDims) -> dict[str, float]:
    """Max abs errors of the four communication functions against their definitions."""
    g, r, t = dims.tp_group, dims.tp_rank, dims.tp
    errors: dict[str, float] = {}

    # scatter -> gather is the identity forward, and each one's backward is the other's forward.
    x = torch.randn(3, 4 * t, generator=torch.Generator().manual_seed(1), requires_grad=True)
    w = torch.randn(3, 4 * t, generator=torch.Generator().manual_seed(2))
    xs = scatter_to_tp(x, g)
    errors["scatter_fwd"] = (xs - x.detach()[:, 4 * r : 4 * (r + 1)]).abs().max().item()
    y = gather_from_tp(xs, g)
    errors["gather_fwd"] = (y - x.detach()).abs().max().item()
    (y * w).sum().backward()
    errors["scatter_gather_bwd"] = (x.grad - w).abs().max().item()

    # Per-rank inputs, with every rank able to recompute every other rank's.
    def per_rank(seed: int, rank: int) -> torch.Tensor:
        return torch.randn(5, 6, generator=torch.Generator().manual_seed(100 * seed + rank))

    a = per_rank(3, r).requires_grad_(True)
    b = reduce_from_tp(a, g)
    errors["reduce_fwd"] = (b - sum(per_rank(3, j) for j in range(t))).abs().max().item()
    (b * per_rank(4, r)).sum().backward()
    errors["reduce_bwd"] = (a.grad - per_rank(4, r)).abs().max().item()

    a = per_rank(5, r).requires_grad_(True)
    c = copy_to_tp(a, g)
    errors["copy_fwd"] = (c - a.detach()).abs().max().item()
    (c * per_rank(6, r)).sum().backward()
    errors["copy_bwd"] = (a.grad - sum(per_rank(6, j) for j in range(t))).abs().max().item()
    return errors


def _ledger_ops(records: list[dict]) -> Counter:
    return Counter((rec["phase"], rec["op"], rec["elements"]) for rec in records)


def tp_parity_worker(tp: int, variants: list[tuple[GPTConfig, str]], tokens: torch.Tensor, targets: torch.Tensor) -> dict:
    """On one TP rank: pair checks, then per (config, cross_entropy) loss, logits, local grads and the
    ledger's collectives, those of the forward (to the loss) and those of the backward apart."""
    dims = ParallelDims(dp=1, tp=tp)
    out: dict = {"tp_rank": dims.tp_rank, "pairs": _pair_checks(dims), "models": []}
    for config, cross_entropy in variants:
        model = GPT(config, dims.tp_group, cross_entropy=cross_entropy)
        dims.ledger.clear()
        loss = model(tokens, targets)
        forward_records = dims.ledger.as_dicts()
        loss.backward()
        records = dims.ledger.as_dicts()
        with torch.no_grad():
            logits = model(tokens)
        out["models"].append(
            {
                "loss": loss.detach().clone(),
                "logits": logits.clone(),
                "params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
                "dims": {n: tp_partition_dim(p) for n, p in model.named_parameters()},
                "forward_ops": _ledger_ops(forward_records),
                "backward_ops": _ledger_ops(records[len(forward_records) :]),
                "ledger_groups": {rec["group"] for rec in records},
            }
        )
    return out


def vocab_parallel_ce_worker(tp: int, logits: torch.Tensor, targets: torch.Tensor) -> dict:
    """On one TP rank: the vocab-parallel loss of this rank's column block of ``logits`` (full
    ``[tokens, vocab]``, the same on every rank), the block's gradient, and the ledger's records."""
    dims = ParallelDims(dp=1, tp=tp)
    local_vocab = logits.shape[1] // tp
    start = dims.tp_rank * local_vocab
    shard = logits[:, start : start + local_vocab].clone().requires_grad_(True)
    loss = vocab_parallel_cross_entropy(shard, targets, dims.tp_group, start)
    (2.0 * loss).backward()  # a non-unit upstream gradient, to check that backward scales by it
    return {"loss": loss.detach().clone(), "grad": shard.grad.clone(), "records": dims.ledger.as_dicts()}
